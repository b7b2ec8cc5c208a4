// SPDX-License-Identifier: BSL-1.0
// chime/detail/wheel_clock.hpp: the time side of a timing wheel, shared by
// the timing wheels (TimingWheel and the wheel over caller-owned nodes).
//
// What this is: the wheel's clock and its arithmetic between times and keys.
// Time from start on is cut into intervals of one precision each; interval
// k is the KeyWheel key k. WheelClock holds start, precision, now and the
// cached alarm_upper_bound, maps times to interval numbers and back exactly
// (integer nanoseconds), and throws the range errors of G7/G8 with messages
// that name the owning wheel. MinTimeCache is the owning wheel's cache of its
// earliest alarm time.
//
// Who may touch it: the owning wheel, on its one thread.
//
// Guarantees: every function is exact and never overflows: start_plus(k) is
// computed modulo 2^64 for k <= max_interval_num(), where it is exact.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "chime/detail/interval_divider.hpp"
#include "chime/time.hpp"

namespace chime::detail {

// The key of a time: its interval number, (t - start) / precision. A copy
// lives in the KeyWheel (its KeyOf), so it is small and self-contained.
struct IntervalKey {
  std::uint64_t start_ns;
  IntervalDivider divider;
  std::uint64_t operator()(std::int64_t t_ns) const noexcept {
    return divider.divide(static_cast<std::uint64_t>(t_ns) - start_ns);
  }
};

class WheelClock {
 public:
  // name: the owning wheel, "chime::TimingWheel", as error messages begin.
  // Throws std::invalid_argument if precision <= 0.
  WheelClock(const char* name, Duration precision, TimePoint start)
      : name_(name),
        start_ns_(start.time_since_epoch().count()),
        precision_ns_(validated(name, precision).count()),
        divider_(static_cast<std::uint64_t>(precision_ns_)),
        now_ns_(start_ns_),
        max_interval_num_((static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) -
                           static_cast<std::uint64_t>(start_ns_)) /
                          static_cast<std::uint64_t>(precision_ns_)) {}

  static TimePoint from_ns(std::int64_t ns) noexcept { return TimePoint(Duration(ns)); }

  std::int64_t now_ns() const noexcept { return now_ns_; }
  std::int64_t start_ns() const noexcept { return start_ns_; }
  std::int64_t precision_ns() const noexcept { return precision_ns_; }
  std::int64_t upper_bound_ns() const noexcept { return upper_bound_ns_; }
  IntervalKey interval_key() const noexcept { return {static_cast<std::uint64_t>(start_ns_), divider_}; }

  // Interval number of t, or std::out_of_range if t < start or the number
  // exceeds max_key.
  std::uint64_t key_of(const char* what, TimePoint t, std::uint64_t max_key) const {
    const std::int64_t t_ns = t.time_since_epoch().count();
    if (t_ns < start_ns_) [[unlikely]]
      throw_before_start(what, t_ns);
    const std::uint64_t key = divider_.divide(static_cast<std::uint64_t>(t_ns) - static_cast<std::uint64_t>(start_ns_));
    if (key > max_key) [[unlikely]]
      throw_too_far(what, t_ns, key, max_key);
    return key;
  }

  // Key for an alarm at `at`, or std::out_of_range naming at and the bounds
  // [now, alarm_upper_bound).
  std::uint64_t checked_alarm_key(const char* what, TimePoint at) const {
    const std::int64_t at_ns = at.time_since_epoch().count();
    if (at_ns < now_ns_ || at_ns >= upper_bound_ns_) [[unlikely]]
      throw_alarm_out_of_range(what, at_ns);
    return divider_.divide(static_cast<std::uint64_t>(at_ns) - static_cast<std::uint64_t>(start_ns_));
  }

  // interval_num_start(k), or std::out_of_range naming `what`.
  TimePoint checked_interval_start(const char* what, std::int64_t k) const {
    if (k < 0 || static_cast<std::uint64_t>(k) > max_interval_num_) {
      throw std::out_of_range(std::string(name_) + "::" + what + ": interval " + std::to_string(k) +
                              " is outside [0, " + std::to_string(max_interval_num_) + "]");
    }
    return from_ns(start_plus(static_cast<std::uint64_t>(k)));
  }
  // Start of interval k, or std::out_of_range as the wheel's interval_num_start.
  TimePoint interval_num_start(std::int64_t k) const {
    if (k < 0 || static_cast<std::uint64_t>(k) > max_interval_num_) {
      throw std::out_of_range(std::string(name_) + "::interval_num_start: interval " + std::to_string(k) +
                              " is outside [0, " + std::to_string(max_interval_num_) +
                              "] (its start must be a representable TimePoint)");
    }
    return from_ns(start_plus(static_cast<std::uint64_t>(k)));
  }

  // start + k * precision in nanoseconds, for k <= max_interval_num_ (so the
  // result is representable). Computed modulo 2^64, which is exact here and
  // avoids signed overflow in the intermediate product when start < 0.
  std::int64_t start_plus(std::uint64_t k) const noexcept {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(start_ns_) +
                                     k * static_cast<std::uint64_t>(precision_ns_));
  }

  // interval_num_start(min(max_allowed_key + 1, K_max)): G7's bound.
  std::int64_t upper_bound_formula(std::uint64_t max_allowed_key) const noexcept {
    std::uint64_t k = max_allowed_key + 1;
    if (k > max_interval_num_) k = max_interval_num_;
    return start_plus(k);
  }
  // Recomputes alarm_upper_bound from the KeyWheel's max_allowed_key.
  void update_upper_bound(std::uint64_t max_allowed_key) noexcept {
    upper_bound_ns_ = upper_bound_formula(max_allowed_key);
  }
  // now = ns (the owner has advanced its KeyWheel).
  void set_now(std::int64_t ns) noexcept { now_ns_ = ns; }
  // After a fire that threw: now moves up to the start of the interval the
  // KeyWheel reached, if later.
  void reached(std::uint64_t min_allowed_key) noexcept {
    const std::int64_t reached = start_plus(min_allowed_key);
    if (reached > now_ns_) now_ns_ = reached;
  }

  // The clock's invariants, against the KeyWheel's keys; calls fail(message)
  // on the first one broken.
  template <class Fail>
  void check(Fail&& fail, std::uint64_t min_allowed_key, std::uint64_t max_allowed_key,
             std::uint64_t max_representable_key) const {
    if (now_ns_ < start_ns_) fail("now < start");
    if (key_of("check_invariants", from_ns(now_ns_), max_representable_key) != min_allowed_key) {
      fail("interval_num(now) != min_allowed_key");
    }
    if (upper_bound_ns_ != upper_bound_formula(max_allowed_key)) fail("cached alarm_upper_bound is stale");
  }
  // One alarm's invariants (G2, G7): at filed under its interval, not before
  // now's interval, > now - precision, below alarm_upper_bound.
  template <class Fail>
  void check_alarm(Fail&& fail, std::int64_t at, std::uint64_t filed, std::uint64_t min_allowed_key,
                   std::uint64_t max_representable_key) const {
    const auto interval = static_cast<std::int64_t>(key_of("check_invariants", from_ns(at), max_representable_key));
    if (static_cast<std::int64_t>(filed) != interval) {
      fail("alarm at " + std::to_string(at) + " ns is filed under interval " + std::to_string(filed) + ", not " +
           std::to_string(interval));
    }
    if (at < start_plus(min_allowed_key)) fail("alarm at " + std::to_string(at) + " ns is before now's interval");
    // at > now - precision (precision > 0). Where now - precision is below INT64_MIN every
    // at is above it, and the subtraction is not evaluated.
    const bool now_minus_precision_is_representable =
        now_ns_ >= std::numeric_limits<std::int64_t>::min() + precision_ns_;
    if (now_minus_precision_is_representable && !(at > now_ns_ - precision_ns_)) {
      fail("alarm at " + std::to_string(at) + " ns <= now - precision");
    }
    if (at >= upper_bound_ns_) fail("alarm at " + std::to_string(at) + " ns is not below alarm_upper_bound");
  }

 private:
  static Duration validated(const char* name, Duration precision) {
    if (precision <= Duration::zero()) {
      throw std::invalid_argument(std::string(name) + ": alarm_precision must be positive, got " +
                                  std::to_string(precision.count()) + " ns");
    }
    return precision;
  }

  [[noreturn, gnu::cold, gnu::noinline]] void throw_before_start(const char* what, std::int64_t t_ns) const {
    throw std::out_of_range(std::string(name_) + "::" + what + ": time " + std::to_string(t_ns) +
                            " ns is before start " + std::to_string(start_ns_) + " ns");
  }
  [[noreturn, gnu::cold, gnu::noinline]] void throw_too_far(const char* what, std::int64_t t_ns, std::uint64_t key,
                                                            std::uint64_t max_key) const {
    throw std::out_of_range(std::string(name_) + "::" + what + ": time " + std::to_string(t_ns) +
                            " ns is too far in the future to represent: its interval " + std::to_string(key) +
                            " exceeds " + std::to_string(max_key));
  }
  [[noreturn, gnu::cold, gnu::noinline]] void throw_alarm_out_of_range(const char* what, std::int64_t at_ns) const {
    if (at_ns < now_ns_) {
      throw std::out_of_range(std::string(name_) + "::" + what + ": at " + std::to_string(at_ns) +
                              " ns is before now " + std::to_string(now_ns_) + " ns");
    }
    throw std::out_of_range(std::string(name_) + "::" + what + ": at " + std::to_string(at_ns) +
                            " ns is not below alarm_upper_bound " + std::to_string(upper_bound_ns_) + " ns");
  }

  const char* name_;
  std::int64_t start_ns_;
  std::int64_t precision_ns_;
  IntervalDivider divider_;
  std::int64_t now_ns_;
  std::uint64_t max_interval_num_;  // K_max: last interval whose start is representable
  std::int64_t upper_bound_ns_ = 0;
};

// The earliest alarm time, cached: add and reschedule keep it exact in O(1);
// remove, reschedule and fires forget it only when they move or take an alarm
// at the cached time; get() recomputes it then.
class MinTimeCache {
 public:
  void added(TimePoint at) noexcept {
    if (known_ && (!min_ || at < *min_)) min_ = at;
  }
  void moved(TimePoint old, TimePoint at) noexcept {
    if (known_) {
      // Known and the wheel is not empty: min_ holds a time.
      if (at <= *min_) {
        min_ = at;
      } else if (old == *min_) {
        known_ = false;  // another alarm may share the old minimum, or none
      }
    }
  }
  void removed(TimePoint at) noexcept {
    if (known_ && at == *min_) known_ = false;
  }
  // Alarms with at < bound_ns are about to fire.
  void firing_before(std::int64_t bound_ns) noexcept {
    if (known_ && min_ && min_->time_since_epoch().count() < bound_ns) known_ = false;
  }
  // Alarms with at <= limit_ns are about to fire.
  void firing_through(std::int64_t limit_ns) noexcept {
    if (known_ && min_ && min_->time_since_epoch().count() <= limit_ns) known_ = false;
  }
  void forget() noexcept { known_ = false; }
  void cleared() noexcept {
    min_.reset();
    known_ = true;
  }
  // The earliest time; earliest() computes it on a miss.
  template <class Earliest>
  std::optional<TimePoint> get(Earliest&& earliest) const {
    if (!known_) {
      min_ = earliest();
      known_ = true;
    }
    return min_;
  }
  // False iff the cache holds a time other than `truth`.
  bool agrees(const std::optional<TimePoint>& truth) const { return !known_ || min_ == truth; }

 private:
  mutable std::optional<TimePoint> min_;
  mutable bool known_ = true;  // a new wheel is empty: min_ is nullopt
};

}  // namespace chime::detail
