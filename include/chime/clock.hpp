// SPDX-License-Identifier: BSL-1.0
// chime/clock.hpp: where the runtime reads the time.
//
// Contract:
// - `Clock::now()` is callable from any thread, concurrently, and never
//   decreases (the runtime relies on it: the wheel's clock only moves
//   forward).
// - `SteadyClock` is std::chrono::steady_clock.
// - `ManualClock` moves only when told (`advance`, `set`); both throw
//   std::invalid_argument if time would go backwards, naming both times, and
//   `advance` throws std::out_of_range rather than pass TimePoint::max(). The
//   runtime reads it whenever its wheel thread wakes; `Runtime::flush()` makes
//   it wake, which is what makes tests with a ManualClock deterministic. With a
//   ManualClock the wheel thread never wakes on its own.
// - With any other Clock, the wheel thread sleeps on the steady clock for the
//   remaining time (by that clock) and re-reads now().
//
// Memory ordering: ManualClock stores the time with release and loads it with
// acquire, so whatever a thread did before `advance` happens-before anything a
// thread does after reading the advanced time.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "chime/time.hpp"

namespace chime {

class Clock {
 public:
  virtual ~Clock() = default;
  // Any thread. Lock-free. Never allocates.
  virtual TimePoint now() const noexcept = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const noexcept override { return std::chrono::steady_clock::now(); }
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint{}) noexcept : now_ns_(start.time_since_epoch().count()) {}

  TimePoint now() const noexcept override { return TimePoint(Duration(now_ns_.load(std::memory_order_acquire))); }

  // Moves the time forward by d (d >= 0). Throws std::invalid_argument if
  // d < 0, and std::out_of_range if the time would pass TimePoint::max()
  // (naming both; the time is left as it was): time never wraps. Any
  // thread; concurrent advances add up.
  void advance(Duration d) {
    if (d < Duration::zero()) {
      throw std::invalid_argument("chime::ManualClock::advance: negative duration " + std::to_string(d.count()) +
                                  " ns would move time backwards");
    }
    std::int64_t current = now_ns_.load(std::memory_order_acquire);
    do {
      if (current > INT64_MAX - d.count()) {
        throw std::out_of_range("chime::ManualClock::advance: " + std::to_string(d.count()) + " ns from " +
                                std::to_string(current) + " ns would pass TimePoint::max() (" +
                                std::to_string(INT64_MAX) + " ns)");
      }
    } while (!now_ns_.compare_exchange_weak(current, current + d.count(), std::memory_order_acq_rel,
                                            std::memory_order_acquire));
  }

  // Sets the time to t. Throws std::invalid_argument if t < now().
  void set(TimePoint t) {
    const std::int64_t target = t.time_since_epoch().count();
    std::int64_t current = now_ns_.load(std::memory_order_acquire);
    do {
      if (target < current) {
        throw std::invalid_argument("chime::ManualClock::set: " + std::to_string(target) +
                                    " ns is before the current time " + std::to_string(current) + " ns");
      }
    } while (!now_ns_.compare_exchange_weak(current, target, std::memory_order_acq_rel, std::memory_order_acquire));
  }

 private:
  std::atomic<std::int64_t> now_ns_;
};

}  // namespace chime
