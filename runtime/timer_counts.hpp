// SPDX-License-Identifier: BSL-1.0
// runtime/timer_counts.hpp: what a timer's life does to the runtime's counts.
//
// What this is: the roles' one way to the runtime's meters (RuntimeMeters:
// counters and histograms) and to the pending count (RuntimeCore::live_,
// exact when max_pending is set). A schedule is admitted against
// max_pending (admit; unadmit gives the place back when the schedule does
// not go through). A timer whose outcome is decided leaves the pending
// count and is counted as ended (and cancelled, for a cancel) here: whoever
// makes the deciding transition calls end_timer once per accepted timer: a
// producer's cancel, a worker or a lane finishing a run (runner.cpp), the
// wheel thread cancelling a closed lane's timers, shutdown's sweep.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime_stats.hpp"

namespace chime::detail {

class TimerCounts {
 public:
  // `max_pending`: RuntimeOptions::max_pending; set (not 0), `live` is
  // maintained, exact.
  TimerCounts(RuntimeMeters& meters, std::atomic<std::uint64_t>& live, std::size_t max_pending) noexcept
      : meters_(meters), live_(live), max_pending_(max_pending) {}

  RuntimeMeters& meters() const noexcept { return meters_; }
  void add(Counter c, std::uint64_t n = 1) const noexcept { meters_.counters.add(c, n); }

  // A schedule takes its place among the pending timers: false, having
  // taken none, when max_pending (plus `extra_pending`, timers its caller is
  // about to end) are pending already. Relaxed is enough: the count only
  // has to be exact, not ordered with anything else.
  [[nodiscard]] bool admit(std::size_t extra_pending) const noexcept {
    if (max_pending_ == 0) return true;
    if (live_.fetch_add(1, std::memory_order_relaxed) >= max_pending_ + extra_pending) {
      live_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  // An admitted schedule that did not go through (refused, taken back,
  // withdrawn): its place is free again.
  void unadmit() const noexcept {
    if (max_pending_ != 0) live_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The timer's outcome is decided (a cancel won, its last run finished, or
  // shutdown swept it): it stops counting as pending, for stats() and for
  // max_pending, at once, even if its slot is freed later (a cancelled timer's
  // slot is reclaimed later, lazily, by the wheel thread). Exactly one
  // party calls this per accepted timer: whoever made the deciding transition
  // (after it; the worker ending a one-shot calls it just before F1, the only
  // transition left to the run, so no one sees Fired while it still counts).
  void end_timer() const noexcept {
    meters_.counters.add(Counter::ended);
    unadmit();
  }

  // The deciding transition was a cancel (C1-C4, or a sweep's): the timer is
  // counted as cancelled and ends (end_timer): capacity is free now, not when
  // the slot is reclaimed. Called once, by whoever made that transition.
  void end_cancelled_timer() const noexcept {
    meters_.counters.add(Counter::cancelled);
    end_timer();
  }

 private:
  RuntimeMeters& meters_;
  std::atomic<std::uint64_t>& live_;
  const std::size_t max_pending_;
};

}  // namespace chime::detail
