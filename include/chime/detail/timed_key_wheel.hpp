// SPDX-License-Identifier: BSL-1.0
// chime/detail/timed_key_wheel.hpp: what TimingWheel and IntrusiveTimingWheel
// share: a KeyWheel keyed by interval number, with its clock.
//
// What this is: the base of both timing wheels, holding the KeyWheel, the
// WheelClock (wheel_clock.hpp) and the earliest-time cache, and every
// operation that names no alarm: the clock and interval queries, the
// earliest and latest times, cascade_ahead, and the bodies of advance_clock,
// fire_alarms_until and check_invariants. The wheels add what takes an
// alarm (their handle, or the caller's index). The guarantees are stated
// once, in timing_wheel.hpp (G1-G9), and hold for both.
//
// Who may touch it: the derived wheel, on its one thread. Queue is a
// KeyWheel whose elements have a time TimeOf::at_ns(value) and whose KeyOf
// is the interval of that time; handle_removed gets Queue::Handle.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "chime/detail/wheel_clock.hpp"
#include "chime/level_bits.hpp"
#include "chime/time.hpp"

namespace chime::detail {

template <class Queue, class TimeOf>
class TimedKeyWheel {
  using Value = typename Queue::value_type;

 public:
  TimedKeyWheel(const TimedKeyWheel&) = delete;
  TimedKeyWheel& operator=(const TimedKeyWheel&) = delete;

  // The wheel's clock: start() until advance_clock moves it. Never allocates.
  TimePoint now() const noexcept { return from_ns(clock_.now_ns()); }
  // The start given to the constructor (interval 0 begins there). Never allocates.
  TimePoint start() const noexcept { return from_ns(clock_.start_ns()); }
  // The interval length, WheelConfig::alarm_precision. Never allocates.
  Duration alarm_precision() const noexcept { return Duration(clock_.precision_ns()); }
  // WheelConfig::level_bits. Never allocates.
  const LevelBits& level_bits() const noexcept { return queue_.level_bits(); }
  // Number of alarms in the wheel. Never allocates.
  std::size_t size() const noexcept { return queue_.size(); }
  // size() == 0. Never allocates.
  bool empty() const noexcept { return queue_.empty(); }

  // Number of the interval containing t. Throws std::out_of_range if
  // t < start() or the number exceeds KeyWheel's max_representable_key.
  std::int64_t interval_num(TimePoint t) const { return static_cast<std::int64_t>(key_of("interval_num", t)); }

  // Start of interval k: start() + k * alarm_precision(). Throws
  // std::out_of_range if k < 0 or that time is not representable.
  TimePoint interval_num_start(std::int64_t k) const { return clock_.interval_num_start(k); }

  // The start of the interval containing t; throws as interval_num.
  TimePoint interval_start(TimePoint t) const { return from_ns(clock_.start_plus(key_of("interval_start", t))); }
  // interval_start(now()). Never allocates.
  TimePoint now_interval_num_start() const noexcept { return from_ns(clock_.start_plus(queue_.min_allowed_key())); }

  // Exclusive upper bound on what add accepts; grows with now(). Never throws.
  TimePoint alarm_upper_bound() const noexcept { return from_ns(clock_.upper_bound_ns()); }

  // Moves up to `budget` alarms down the wheel ahead of the advance that
  // needs them there: at every level, the alarms of the next span (the next
  // block of 2^b_0 intervals at the lowest level, the next 2^(b_0+b_1) at the
  // one above, ...) come down from the level above; returns true if some
  // are left. An advance_clock into such a span then cascades only what is
  // left, instead of every alarm of the span in one go: calling this between
  // advances with a budget of about twice the alarms due per interval per
  // level leaves nothing (KeyWheel::cascade_ahead has the details).
  // Optional: it changes no result, only when the work is done. Throws
  // std::logic_error inside handle_fired. O(levels + budget). Never
  // allocates.
  bool cascade_ahead(std::size_t budget) { return queue_.cascade_ahead(budget); }
  // Alarms the last advance_clock into a new interval moved between levels
  // of the wheel (its cascading work, KeyWheel::moved_by_last_increase).
  // Never allocates.
  std::size_t moved_by_last_advance() const noexcept { return queue_.moved_by_last_increase(); }
  // What the last cascade_ahead moved down (KeyWheel::moved_by_last_cascade_ahead).
  std::size_t moved_by_last_cascade_ahead() const noexcept { return queue_.moved_by_last_cascade_ahead(); }
  // How far advance_clock toward `to` may go without moving an alarm
  // between levels (KeyWheel::bounded_increase_limit): `to` itself if that
  // moves none (always for a `to` in now's block of 2^b_0 intervals),
  // otherwise the start of the last interval before the first non-empty
  // slot above the lowest level, and now() when that slot starts at the
  // next interval; the next cascade_ahead(budget >= 1) then moves some of
  // it. Alternating cascade_ahead(budget) and advance_clock to this limit
  // reaches `to`, moving at most budget alarms a step, and fires what one
  // advance_clock(to) would, in the same order. Throws std::out_of_range as
  // interval_num for a `to` after now(). Never allocates.
  TimePoint bounded_advance_limit(TimePoint to) const {
    const std::int64_t to_ns = to.time_since_epoch().count();
    if (to_ns <= clock_.now_ns()) return to;
    const std::uint64_t key = key_of("bounded_advance_limit", to);
    const std::uint64_t limit = queue_.bounded_increase_limit(key);
    if (limit == key) return to;
    return from_ns(std::max(clock_.now_ns(), clock_.start_plus(limit)));
  }

  // The least time to which the clock can be advanced so that an alarm fires:
  // interval_start(min) + alarm_precision() for the earliest alarm time min,
  // so next - alarm_precision() <= min < next. Never allocates.
  std::optional<TimePoint> next_alarm_fires_at() const {
    const auto key = queue_.min_key();
    if (!key) return std::nullopt;
    return from_ns(clock_.start_plus(*key + 1));
  }

  // The interval of the earliest alarm, if any. Never allocates.
  std::optional<std::int64_t> min_alarm_interval_num() const {
    const auto key = queue_.min_key();
    if (!key) return std::nullopt;
    return static_cast<std::int64_t>(*key);
  }

  // Earliest alarm time. Cached: add and reschedule keep the cache exact in
  // O(1); remove, reschedule and the fires forget it only when they move or
  // take an alarm at the cached time; the first call after that scans the
  // first non-empty slot. Never allocates.
  std::optional<TimePoint> min_alarm_time() const {
    return min_time_.get([this] { return earliest_time(); });
  }
  // Latest alarm time: scans the last non-empty slot.
  std::optional<TimePoint> max_alarm_time() const {
    std::int64_t latest = std::numeric_limits<std::int64_t>::min();
    const bool any = queue_.for_each_in_last_slot([&](const Value& v) { latest = std::max(latest, TimeOf::at_ns(v)); });
    if (!any) return std::nullopt;
    return from_ns(latest);
  }

 protected:
  // make_queue(IntervalKey) returns the KeyWheel (constructed in place).
  // Throws std::invalid_argument if precision <= 0, and what make_queue
  // throws. May allocate.
  template <class MakeQueue>
  TimedKeyWheel(const char* name, Duration precision, TimePoint start, MakeQueue&& make_queue)
      : clock_(name, precision, start), queue_(make_queue(clock_.interval_key())) {
    clock_.update_upper_bound(queue_.max_allowed_key());
  }
  ~TimedKeyWheel() = default;

  static TimePoint from_ns(std::int64_t ns) noexcept { return WheelClock::from_ns(ns); }

  // Interval number of t, or std::out_of_range.
  std::uint64_t key_of(const char* what, TimePoint t) const {
    return clock_.key_of(what, t, Queue::max_representable_key);
  }

  // advance_clock: fires via handle_removed(Queue::Handle), then sets now.
  template <class F>
  void advance_to(TimePoint to, F&& handle_removed) {
    const std::int64_t to_ns = to.time_since_epoch().count();
    if (to_ns <= clock_.now_ns()) return;
    const std::uint64_t key = key_of("advance_clock", to);
    // What fires is exactly the alarms before interval_start(to): if the
    // cached minimum is not among them, nothing fires and it stays.
    min_time_.firing_before(clock_.start_plus(key));
    try {
      queue_.increase_min_allowed_key(key, handle_removed);
    } catch (...) {
      clock_.reached(queue_.min_allowed_key());
      clock_.update_upper_bound(queue_.max_allowed_key());
      throw;
    }
    clock_.set_now(to_ns);
    clock_.update_upper_bound(queue_.max_allowed_key());
  }

  // fire_alarms_until: the alarms with at <= min(until, now()), in slot order.
  template <class F>
  void fire_through(TimePoint until, F&& handle_removed) {
    const std::int64_t limit = std::min(until.time_since_epoch().count(), clock_.now_ns());
    min_time_.firing_through(limit);
    queue_.remove_min_allowed_key_if(
        "fire_past_alarms", [&](const Value& v) { return TimeOf::at_ns(v) <= limit; }, handle_removed);
  }

  // clear(): the queue's clear, and the cache knows the wheel is empty.
  void clear_alarms() {
    queue_.clear();
    min_time_.cleared();
  }

  // check_invariants: the KeyWheel's, the clock's, each alarm's (each_alarm
  // calls its argument with the time and the key of every alarm) and the
  // cache's; throws std::logic_error naming the wheel and the first one
  // broken.
  template <class EachAlarm>
  void check_timed(const char* name, EachAlarm&& each_alarm) const {
    auto fail = [name](const std::string& what) { throw std::logic_error(std::string(name) + " invariant: " + what); };
    queue_.check_invariants();
    clock_.check(fail, queue_.min_allowed_key(), queue_.max_allowed_key(), Queue::max_representable_key);
    each_alarm([&](std::int64_t at_ns, std::uint64_t key) {
      clock_.check_alarm(fail, at_ns, key, queue_.min_allowed_key(), Queue::max_representable_key);
    });
    if (!min_time_.agrees(earliest_time())) fail("cached min_alarm_time is stale");
  }

  // Earliest `at`: every alarm of the earliest interval is in the first
  // non-empty slot.
  std::optional<TimePoint> earliest_time() const {
    std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
    const bool any =
        queue_.for_each_in_first_slot([&](const Value& v) { earliest = std::min(earliest, TimeOf::at_ns(v)); });
    if (!any) return std::nullopt;
    return from_ns(earliest);
  }

  WheelClock clock_;  // now, start, precision; time <-> interval number
  Queue queue_;
  MinTimeCache min_time_;
};

}  // namespace chime::detail
