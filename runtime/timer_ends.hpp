// SPDX-License-Identifier: BSL-1.0
// runtime/timer_ends.hpp: what ending a timer does to the runtime's counts.
//
// What this is: the one place a timer whose outcome is decided leaves the
// pending count (RuntimeCore::live_, exact when max_pending is set) and is
// counted as ended (and cancelled, for a cancel). Whoever makes the
// deciding transition calls it once per accepted timer: a producer's cancel,
// a worker or a lane finishing a run (runner.cpp), the wheel thread
// cancelling a closed lane's timers, shutdown's sweep.
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime_stats.hpp"

namespace chime::detail {

class TimerEnds {
 public:
  // `exact`: max_pending is set, so `live` is maintained.
  TimerEnds(RuntimeCounters& counters, std::atomic<std::uint64_t>& live, bool exact) noexcept
      : counters_(counters), live_(live), exact_(exact) {}

  // The timer's outcome is decided (a cancel won, its last run finished, or
  // shutdown swept it): it stops counting as pending, for stats() and for
  // max_pending, at once, even if its slot is freed later (a cancelled timer's
  // slot is reclaimed later, lazily, by the wheel thread). Exactly one
  // party calls this per accepted timer: whoever made the deciding transition
  // (after it; the worker ending a one-shot calls it just before F1, the only
  // transition left to the run, so no one sees Fired while it still counts).
  void end_timer() const noexcept {
    counters_.add(Counter::ended);
    if (exact_) live_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The deciding transition was a cancel (C1-C4, or a sweep's): the timer is
  // counted as cancelled and ends (end_timer): capacity is free now, not when
  // the slot is reclaimed. Called once, by whoever made that transition.
  void end_cancelled_timer() const noexcept {
    counters_.add(Counter::cancelled);
    end_timer();
  }

 private:
  RuntimeCounters& counters_;
  std::atomic<std::uint64_t>& live_;
  const bool exact_;
};

}  // namespace chime::detail
