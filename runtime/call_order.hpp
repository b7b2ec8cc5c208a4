// SPDX-License-Identifier: BSL-1.0
// runtime/call_order.hpp: the order of the calls that set a timer's due, on
// a ManualClock.
//
// What this is: one runtime-wide counter. On a ManualClock every call that
// sets a timer's due (a schedule, a reschedule, a periodic timer's next
// run) takes the next number and stores it in the timer's side record
// (SlotExtra::order, timer_slab.hpp) before it publishes the timer. A wheel
// thread runs the timers of one flush in (due, order) order
// (wheel_thread_manual.cpp, "A manual clock"), so ties in due run in call order
// (G28), whichever Producer or thread made the calls. Other clocks do not
// use it.
//
// Memory order: relaxed. All numbers come from read-modify-writes of one
// atomic, so they follow its modification order, and that order is
// consistent with happens-before (write-write coherence): if one call
// happens-before another, the first takes the smaller number. Two calls not
// ordered by happens-before take them in some order; a simulation that
// wants a fixed order orders its calls.
//
// taken(): how many numbers have been taken, read relaxed. A flush that
// steps several shards (RuntimeCore::flush_in_call_order) compares it
// before a run and after it: the run's completion is acquired first, so a
// number its callback took is seen (coherence of the one atomic), and an
// unchanged count means no call set a due in between.
#pragma once

#include <atomic>
#include <cstdint>

namespace chime::detail {

class CallOrder {
 public:
  // Any thread.
  std::uint64_t take() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t taken() const noexcept { return next_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> next_{0};
};

}  // namespace chime::detail
