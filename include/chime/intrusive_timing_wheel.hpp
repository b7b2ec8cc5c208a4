// SPDX-License-Identifier: BSL-1.0
// chime/intrusive_timing_wheel.hpp: a timing wheel over nodes the caller
// owns (an intrusive wheel, as Linux's timer_list, Erlang's and Netty's).
//
// What it is: TimingWheel (timing_wheel.hpp) without storage of its own. The
// caller embeds an IntrusiveAlarm (20 bytes: two 32-bit links, where the
// node is filed, and its time) in each of its own records, numbers the
// records with 32-bit indices, and gives the wheel a NodeAt: a cheap,
// copyable callable `IntrusiveAlarm& (std::uint32_t index) const` that finds
// the node of an index (the runtime's indexes its slab). An alarm is then
// just an index: add(index, at) files the caller's node, and the wheel
// allocates nothing per alarm and touches no second structure.
//
// Who may touch it: the wheel is single-threaded, like TimingWheel: one
// thread owns it and every node filed in it. While a node is filed, only the
// wheel writes it; the caller must neither write, copy over, move nor
// destroy it, and NodeAt must keep returning the same node for its index.
// IntrusiveAlarm's fields are private; the caller can only ask filed().
//
// Guarantees: those of TimingWheel, G1-G4 and G7-G9, word for word, with
// the caller's index in place of an Alarm handle: never early, at most one
// interval late, nondecreasing interval order with insertion order among
// alarms added directly into level 0, O(1) add/reschedule/remove, the same
// alarm_upper_bound and cascade_ahead bounds. No allocation at all after
// construction (G6 holds trivially). Not G5: there are no generations; a
// caller that keeps indices across reuse of its records detects stale ones
// itself. contains(index) says whether the node is filed, so it must not be
// asked about a node filed in another wheel.
//
// Firing: a fired node is detached (in no wheel, filed() false) when
// handle_fired(index) is called, so handle_fired may add it, or other nodes,
// again: an add there accepts at from the start of the interval being fired
// (at(index) of the node just fired) to alarm_upper_bound(), and an alarm
// so added in an interval that the same advance_clock passes fires in that
// call, after the alarms already due there. Every other change (remove,
// reschedule, clear, cascade_ahead, another advance) throws std::logic_error
// inside handle_fired, as in TimingWheel.
//
// Error model (G8, with the wheel named chime::IntrusiveTimingWheel): a time
// out of range throws std::out_of_range naming the values; add of a node
// already filed throws std::logic_error naming the index; remove, reschedule
// or at of a node not filed throws std::invalid_argument naming the index.
// A throwing call changes nothing.
//
// Destroying the wheel leaves its filed nodes marked filed: clear() it first
// if the nodes outlive it and may be filed again.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "chime/detail/element_pool.hpp"
#include "chime/detail/timed_key_wheel.hpp"
#include "chime/detail/wheel_clock.hpp"
#include "chime/key_wheel.hpp"
#include "chime/time.hpp"
#include "chime/timing_wheel.hpp"

namespace chime {

namespace detail {

// The fields of an IntrusiveAlarm, in one class so that it is standard
// layout. The time is two 32-bit halves: 4-byte alignment keeps the node
// at 20 bytes.
struct IntrusiveLinks {
  std::uint32_t prev = kNilIndex;  // circular doubly-linked slot list
  std::uint32_t next = kNilIndex;
  // The level (bits 0-7; kNodeDetached: in no wheel) and slot, as
  // WheelNodeLinks::place.
  std::uint32_t place = kNodeDetached;
  std::uint32_t at_lo = 0;  // the filed time in ns, low and high halves
  std::uint32_t at_hi = 0;

  std::uint32_t level() const noexcept { return place & 0xFF; }
  std::size_t slot() const noexcept { return place >> 8; }
  void set_place(std::uint32_t level, std::size_t slot) noexcept {
    place = level | static_cast<std::uint32_t>(slot << 8);
  }
  std::int64_t at_ns() const noexcept {
    return static_cast<std::int64_t>((std::uint64_t{at_hi} << 32) | std::uint64_t{at_lo});
  }
  void set_at_ns(std::int64_t ns) noexcept {
    at_lo = static_cast<std::uint32_t>(static_cast<std::uint64_t>(ns));
    at_hi = static_cast<std::uint32_t>(static_cast<std::uint64_t>(ns) >> 32);
  }
  static std::int64_t at_ns(const IntrusiveLinks& n) noexcept { return n.at_ns(); }  // TimedKeyWheel's TimeOf
};

template <class NodeAt>
struct CallerNodes;

}  // namespace detail

// What the caller embeds: a node of an IntrusiveTimingWheel. Default
// constructed, it is in no wheel. Trivially copyable and standard layout,
// 20 bytes, 4-byte aligned; the wheel owns its fields while it is filed.
class IntrusiveAlarm : private detail::IntrusiveLinks {
 public:
  IntrusiveAlarm() noexcept = default;

  // True iff the node is filed in a wheel (added, not yet fired or removed).
  // Never allocates.
  bool filed() const noexcept { return level() < LevelBits::max_num_bits; }

 private:
  template <class>
  friend struct detail::CallerNodes;
  template <class>
  friend class IntrusiveTimingWheel;
};

static_assert(sizeof(IntrusiveAlarm) <= 20 && std::is_trivially_copyable_v<IntrusiveAlarm> &&
              std::is_standard_layout_v<IntrusiveAlarm>);

namespace detail {

// KeyWheel's Storage over the caller's nodes: index -> node, owning nothing.
template <class NodeAt>
struct CallerNodes {
  using Node = IntrusiveLinks;
  static constexpr bool owns_nodes = false;
  NodeAt node_at;
  Node& operator[](std::uint32_t i) const noexcept { return static_cast<IntrusiveLinks&>(node_at(i)); }
};

// The key of a node: the interval of its time.
struct NodeInterval {
  IntervalKey key;
  std::uint64_t operator()(const IntrusiveLinks& n) const noexcept { return key(n.at_ns()); }
};

}  // namespace detail

// The clock and interval queries, the earliest and latest times,
// cascade_ahead, bounded_advance_limit and moved_by_last_advance are
// detail::TimedKeyWheel's (detail/timed_key_wheel.hpp), as in TimingWheel.
template <class NodeAt>
class IntrusiveTimingWheel
    : public detail::TimedKeyWheel<KeyWheel<detail::IntrusiveLinks, detail::NodeInterval, detail::CallerNodes<NodeAt>>,
                                   detail::IntrusiveLinks> {
  using Queue = KeyWheel<detail::IntrusiveLinks, detail::NodeInterval, detail::CallerNodes<NodeAt>>;
  using Base = detail::TimedKeyWheel<Queue, detail::IntrusiveLinks>;
  using Base::clock_;
  using Base::from_ns;
  using Base::min_time_;
  using Base::queue_;
  static_assert(std::is_invocable_r_v<IntrusiveAlarm&, const NodeAt&, std::uint32_t>,
                "NodeAt: IntrusiveAlarm& (std::uint32_t index) const");

 public:
  // Throws std::invalid_argument if config.alarm_precision <= 0 or a level
  // is wider than KeyWheel::max_level_bits. config.capacity is not used:
  // the caller owns the nodes. Allocates the slot heads, never afterwards.
  IntrusiveTimingWheel(WheelConfig config, TimePoint start, NodeAt node_at)
      : Base("chime::IntrusiveTimingWheel", config.alarm_precision, start,
             [&](detail::IntervalKey key) {
               return Queue(config.level_bits, detail::CallerNodes<NodeAt>{node_at}, detail::NodeInterval{key});
             }),
        node_at_(std::move(node_at)) {}

  // Files node `index` at `at`. Throws std::out_of_range if at < now() or
  // at >= alarm_upper_bound() (inside handle_fired: if at is before the
  // interval being fired), std::logic_error if the node is filed already. O(1).
  // Never allocates.
  void add(std::uint32_t index, TimePoint at) {
    const std::uint64_t key = clock_.checked_alarm_key("add", at);
    if (links(index).level() < kMaxLevels) [[unlikely]]
      throw_filed(index);
    if (queue_.removing()) {
      // Firing: the interval being fired is the least the wheel files now.
      if (key < queue_.min_allowed_key()) [[unlikely]]
        throw_before_fired(at);
      min_time_.forget();  // the alarm may fire in this pass
    } else {
      min_time_.added(at);
    }
    links(index).set_at_ns(at.time_since_epoch().count());
    queue_.file_node(index, key);
  }

  // Moves filed node `index` to `at`. Throws std::invalid_argument if
  // !contains(index), std::out_of_range as add. O(1). Never allocates.
  void reschedule(std::uint32_t index, TimePoint at) {
    queue_.check_not_removing("reschedule");
    check_filed("reschedule", index);
    const std::uint64_t key = clock_.checked_alarm_key("reschedule", at);
    const TimePoint old = from_ns(links(index).at_ns());
    queue_.refile_node(index, key,
                       [&](detail::IntrusiveLinks& n) noexcept { n.set_at_ns(at.time_since_epoch().count()); });
    min_time_.moved(old, at);
  }

  // Takes filed node `index` out without firing it. Throws
  // std::invalid_argument if !contains(index). O(1). Never allocates.
  void remove(std::uint32_t index) {
    queue_.check_not_removing("remove");
    check_filed("remove", index);
    const TimePoint at = from_ns(links(index).at_ns());
    queue_.unfile_node(index);
    min_time_.removed(at);
  }

  // True iff node `index` is filed: in this wheel, provided the caller files
  // it in no other (the node knows only that it is filed). False while it
  // is being fired. Never allocates.
  bool contains(std::uint32_t index) const noexcept { return links(index).level() < kMaxLevels; }

  // The time node `index` is filed at. Readable while it is filed and inside
  // handle_fired (the time it fired at); otherwise throws
  // std::invalid_argument. Never allocates.
  TimePoint at(std::uint32_t index) const {
    if (!queue_.removing()) check_filed("at", index);
    return from_ns(links(index).at_ns());
  }

  // As TimingWheel::advance_clock, with handle_fired(std::uint32_t index);
  // the node is detached when handle_fired is called (see "Firing" above).
  template <class F>
  void advance_clock(TimePoint to, F&& handle_fired) {
    this->advance_to(to, handle_fired);
  }
  // As TimingWheel::fire_past_alarms and fire_alarms_until. An alarm added
  // inside handle_fired does not fire in the same call.
  template <class F>
  void fire_past_alarms(F&& handle_fired) {
    this->fire_through(this->now(), handle_fired);
  }
  template <class F>
  void fire_alarms_until(TimePoint until, F&& handle_fired) {
    this->fire_through(until, handle_fired);
  }

  // Calls f(std::uint32_t index) for every filed node, in no particular
  // order. f must not modify the wheel. Never allocates.
  template <class F>
  void for_each(F&& f) const {
    queue_.for_each(f);
  }

  // Takes every node out without firing it (each is then in no wheel);
  // now() is unchanged. Throws std::logic_error inside handle_fired. O(nodes
  // plus non-empty slots). Never allocates.
  void clear() { this->clear_alarms(); }

  // Verifies every invariant of the wheel and of its KeyWheel; throws
  // std::logic_error naming the first one broken. For tests.
  void check_invariants() const {
    this->check_timed("chime::IntrusiveTimingWheel", [&](auto&& check_alarm) {
      for_each([&](std::uint32_t i) { check_alarm(links(i).at_ns(), queue_.node_key(i)); });
    });
  }

 private:
  static constexpr std::uint32_t kMaxLevels = LevelBits::max_num_bits;

  detail::IntrusiveLinks& links(std::uint32_t i) const noexcept {
    return static_cast<detail::IntrusiveLinks&>(node_at_(i));
  }

  void check_filed(const char* what, std::uint32_t index) const {
    if (!contains(index)) [[unlikely]]
      throw_not_filed(what, index);
  }
  [[noreturn, gnu::cold, gnu::noinline]] static void throw_filed(std::uint32_t index) {
    throw std::logic_error("chime::IntrusiveTimingWheel::add: node " + std::to_string(index) +
                           " is filed already (remove it first, or reschedule it)");
  }
  [[noreturn, gnu::cold, gnu::noinline]] static void throw_not_filed(const char* what, std::uint32_t index) {
    throw std::invalid_argument(std::string("chime::IntrusiveTimingWheel::") + what + ": node " +
                                std::to_string(index) + " is not filed in the wheel (never added, fired or removed)");
  }
  [[noreturn, gnu::cold, gnu::noinline]] void throw_before_fired(TimePoint at) const {
    throw std::out_of_range("chime::IntrusiveTimingWheel::add: at " + std::to_string(at.time_since_epoch().count()) +
                            " ns is before the interval being fired, which starts at " +
                            std::to_string(clock_.start_plus(queue_.min_allowed_key())) + " ns");
  }

  NodeAt node_at_;
};

}  // namespace chime
