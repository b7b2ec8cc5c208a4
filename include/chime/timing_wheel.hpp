// SPDX-License-Identifier: BSL-1.0
// chime/timing_wheel.hpp: a hierarchical timing wheel of alarms
// (Jane Street's `Timing_wheel`), single-threaded.
//
// What it is: a clock `now()` and a set of alarms, each an `at` time and a
// value. Alarms fire only from `advance_clock` / `fire_past_alarms`; nothing
// is asynchronous and it is not thread-safe: one thread owns it.
//
// Time from `start()` on is cut into half-open intervals
// [start + k*precision, start + (k+1)*precision), numbered k = 0, 1, 2, ...
// An alarm is stored under the number of its interval in a KeyWheel
// (key_wheel.hpp), and every alarm of an interval fires in the same
// `advance_clock`, as soon as the clock reaches the start of the next interval.
//
// Guarantees, all exact (integer nanoseconds, no floating point), each with
// its ID (docs/guarantees.md maps each to its tests):
// G1 (wheel never early): an alarm `a` fired by advance_clock(to) has
//   at(a) < interval_start(to) <= to.
// G2 (wheel lateness): never more than one interval late relative to the times given to
//   advance_clock: every alarm `a` still in the wheel has
//   interval_start(at(a)) >= interval_start(now()), hence the strict
//   at(a) > now() - alarm_precision().
// G3 (wheel order): advance_clock fires alarms in nondecreasing interval order; within an
//   interval, alarms added directly into level 0 fire in insertion order and
//   alarms moved down from higher levels follow them.
// G4 (wheel cost): add, remove, reschedule: O(1). advance_clock: O(levels) plus O(1) per
//   alarm fired or moved down a level (at most once per level) plus O(levels)
//   per non-empty slot crossed; empty slots are skipped by bitmap, so a jump
//   far ahead costs nothing for the alarms that stay.
//   next_alarm_fires_at, min_alarm_interval_num: O(levels) bitmap lookups
//   and, on a cache miss, one scan of one slot above level 0.
// G5 (wheel stale handles): stale handles (default, removed, fired, slot reused) are detected:
//   contains() is false and remove/reschedule/at/value throw
//   std::invalid_argument.
// G6 (wheel allocation): no allocation per alarm in steady state (chunked slab; see
//   detail/element_pool.hpp). `WheelConfig::capacity` and reserve(n)
//   allocate and pre-fault it, so the first adds take no page fault.
//
// Not guaranteed: the wheel has no idea of real time; how late an alarm fires
// depends entirely on when the owner calls advance_clock.
//
// G7 (wheel range): `add` accepts at in [now(), alarm_upper_bound()). The bound is
// interval_num_start(min(max_allowed_key + 1, K_max)) where K_max is the last
// interval whose start is representable as a TimePoint; it saturates (never
// throws, never overflows) when 2^level_bits intervals exceed int64
// nanoseconds, e.g. 1 ms precision with the default 61 level bits.
//
// G8 (wheel errors): bad input (a time before now() or at/after the upper bound, a
// time before start(), an interval number out of range) throws
// std::out_of_range whose message names the values; a stale handle throws
// std::invalid_argument; modifying the wheel from inside handle_fired throws
// std::logic_error. A throwing call changes nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "chime/detail/timed_key_wheel.hpp"
#include "chime/detail/wheel_clock.hpp"
#include "chime/key_wheel.hpp"
#include "chime/level_bits.hpp"
#include "chime/time.hpp"

namespace chime {

// Configuration of a TimingWheel. An aggregate; fields in this order.
struct WheelConfig {
  Duration alarm_precision;                        // > 0: the interval length
  LevelBits level_bits = LevelBits::default_bits();
  std::size_t capacity = 0;                        // alarms to pre-allocate and pre-fault (reserve); grows past it
};

namespace detail {
template <class T>
struct TimedEntry {
  TimePoint at;
  T value;
  static std::int64_t at_ns(const TimedEntry& e) noexcept { return e.at.time_since_epoch().count(); }
};
// An alarm's key is the interval of its time, computed from `at` when
// needed rather than stored beside it.
template <class T>
struct EntryInterval {
  IntervalKey key;
  std::uint64_t operator()(const TimedEntry<T>& e) const noexcept { return key(TimedEntry<T>::at_ns(e)); }
};
}  // namespace detail

// The clock and interval queries, the earliest and latest times,
// cascade_ahead, bounded_advance_limit and moved_by_last_advance are
// detail::TimedKeyWheel's (detail/timed_key_wheel.hpp), shared with
// IntrusiveTimingWheel.
template <class T>
class TimingWheel
    : public detail::TimedKeyWheel<KeyWheel<detail::TimedEntry<T>, detail::EntryInterval<T>>, detail::TimedEntry<T>> {
  using Entry = detail::TimedEntry<T>;
  using Queue = KeyWheel<Entry, detail::EntryInterval<T>>;
  using Base = detail::TimedKeyWheel<Queue, Entry>;
  using Base::clock_;
  using Base::from_ns;
  using Base::key_of;
  using Base::min_time_;
  using Base::queue_;
  // An alarm is a 32-byte node (half a cache line) for any T of at most 8
  // bytes and alignment: links, generation and level (16 bytes), `at`, the value.
  static_assert(sizeof(T) > 8 || alignof(T) > 8 || Queue::element_bytes == 32);

 public:
  using value_type = T;

  // A handle to an alarm. Trivially copyable; a default Alarm is never
  // contained.
  class Alarm {
   public:
    Alarm() noexcept = default;
    friend bool operator==(Alarm, Alarm) noexcept = default;

   private:
    friend class TimingWheel;
    explicit Alarm(typename Queue::Elt elt) noexcept : elt_(elt) {}
    typename Queue::Elt elt_;
  };

  // Throws std::invalid_argument if config.alarm_precision <= 0 or a level
  // is wider than KeyWheel::max_level_bits, std::length_error if
  // config.capacity > 2^32 - 2048. config.capacity alarms are reserve()d:
  // allocated and pre-faulted here. May allocate.
  TimingWheel(WheelConfig config, TimePoint start)
      : Base("chime::TimingWheel", config.alarm_precision, start, [&](detail::IntervalKey key) {
          return Queue(config.level_bits, config.capacity, detail::EntryInterval<T>{key});
        }) {}

  using Base::interval_num;
  using Base::now;

  // Alarms the wheel holds before an add allocates (size() included); at
  // least WheelConfig::capacity and the largest reserve(n). Never allocates.
  std::size_t capacity() const noexcept { return queue_.capacity(); }

  // Makes capacity() >= n and pre-faults it: the missing storage (rounded up
  // to whole 2,048-alarm chunks) is allocated as one block and every alarm
  // slot not yet used is written now, so the next n - size() adds neither
  // allocate nor take a page fault. Costs 24 + sizeof(T) bytes per alarm
  // (rounded up to a multiple of 8 for T of alignment <= 8: 32
  // for a T of up to 8 bytes) at once, until the wheel is destroyed. Throws std::length_error if
  // n > 2^32 - 2048, or std::bad_alloc; either way the wheel is unchanged.
  // Allowed inside handle_fired. May allocate.
  void reserve(std::size_t n) { queue_.reserve(n); }

  // Adds an alarm at `at`. Throws std::out_of_range if at < now() or
  // at >= alarm_upper_bound(). O(1). May allocate (only when the pool is full).
  Alarm add(TimePoint at, T value) {
    const std::uint64_t key = clock_.checked_alarm_key("add", at);
    queue_.check_not_removing("add");
    const Alarm alarm(queue_.add_in_range(key, Entry{at, std::move(value)}));
    min_time_.added(at);
    return alarm;
  }
  // add(interval_num_start(k), value), with the same checks.
  Alarm add_at_interval_num(std::int64_t k, T value) {
    return add(clock_.checked_interval_start("add_at_interval_num", k), std::move(value));
  }

  // Moves an alarm to `at`. Throws std::invalid_argument if !contains(alarm),
  // std::out_of_range as add. O(1). Never allocates.
  void reschedule(Alarm alarm, TimePoint at) {
    queue_.check_not_removing("reschedule");
    queue_.check_contains("reschedule", alarm.elt_);
    const std::uint64_t key = clock_.checked_alarm_key("reschedule", at);
    TimePoint old;
    queue_.change_key_in_range(alarm.elt_, key, [&](Entry& e) noexcept {
      old = e.at;
      e.at = at;
    });
    min_time_.moved(old, at);
  }
  // reschedule(alarm, interval_num_start(k)), with the same checks; throws
  // std::invalid_argument first if !contains(alarm). Never allocates.
  void reschedule_at_interval_num(Alarm alarm, std::int64_t k) {
    queue_.check_contains("reschedule_at_interval_num", alarm.elt_);
    reschedule(alarm, clock_.checked_interval_start("reschedule_at_interval_num", k));
  }

  // Removes an alarm without firing it. Throws std::invalid_argument if
  // !contains(alarm). O(1). Never allocates.
  void remove(Alarm alarm) {
    queue_.check_not_removing("remove");
    queue_.check_contains("remove", alarm.elt_);
    const TimePoint at = queue_.value_contained(alarm.elt_).at;
    queue_.remove_contained(alarm.elt_);
    min_time_.removed(at);
  }

  // True iff the alarm is in the wheel (false once fired or removed, and
  // while it is being fired). Never allocates.
  bool contains(Alarm alarm) const noexcept { return queue_.contains(alarm.elt_); }

  // Readable while the alarm is in the wheel and inside handle_fired for it;
  // otherwise throw std::invalid_argument.
  TimePoint at(Alarm alarm) const { return entry("at", alarm).at; }
  T& value(Alarm alarm) { return entry("value", alarm).value; }
  const T& value(Alarm alarm) const { return entry("value", alarm).value; }
  // The interval the alarm is filed under, interval_num(at(alarm)); readable
  // as at(). Never allocates.
  std::int64_t interval_num(Alarm alarm) const {
    return static_cast<std::int64_t>(queue_.key("interval_num", alarm.elt_));
  }

  // If to <= now(), does nothing. Otherwise sets now() = to and fires, via
  // handle_fired(Alarm), exactly the alarms with at < interval_start(to), in
  // nondecreasing interval order. Inside handle_fired, at(a) and value(a) are
  // readable (the value may be moved out) and contains(a) is false; modifying
  // the wheel throws std::logic_error. After handle_fired returns the alarm is
  // gone. If handle_fired throws, that alarm is gone, now() has advanced to
  // the start of its interval (or stays if later), every other alarm is
  // intact, and the exception propagates. Throws std::out_of_range if `to` is
  // too far in the future to represent. Never allocates.
  template <class F>
  void advance_clock(TimePoint to, F&& handle_fired) {
    this->advance_to(to, [&](typename Queue::Elt e) { handle_fired(Alarm(e)); });
  }

  // Fires, via handle_fired, the alarms with at <= now() (all of them are in
  // now()'s interval), in insertion order. Same rules for handle_fired as
  // advance_clock. Never allocates.
  template <class F>
  void fire_past_alarms(F&& handle_fired) {
    fire_alarms_until(now(), std::forward<F>(handle_fired));
  }
  // The same for the alarms with at <= min(until, now()).
  template <class F>
  void fire_alarms_until(TimePoint until, F&& handle_fired) {
    this->fire_through(until, [&](typename Queue::Elt e) { handle_fired(Alarm(e)); });
  }

  // Calls f(Alarm) for every alarm, in no particular order. f must not modify
  // the wheel. Never allocates.
  template <class F>
  void for_each(F&& f) const {
    queue_.for_each([&](typename Queue::Elt e) { f(Alarm(e)); });
  }

  // Removes every alarm without firing it; now() and capacity() are
  // unchanged. Throws std::logic_error inside handle_fired. Never allocates.
  void clear() { this->clear_alarms(); }

  // Verifies every invariant of the wheel and of its KeyWheel; throws
  // std::logic_error naming the first one broken. For tests.
  void check_invariants() const {
    this->check_timed("chime::TimingWheel", [&](auto&& check_alarm) {
      for_each([&](Alarm a) {
        check_alarm(Entry::at_ns(entry("check_invariants", a)), queue_.key("check_invariants", a.elt_));
      });
    });
  }

 private:
  const Entry& entry(const char* what, Alarm alarm) const { return queue_.value(what, alarm.elt_); }
  Entry& entry(const char* what, Alarm alarm) { return queue_.value(what, alarm.elt_); }
};

}  // namespace chime
