// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_sleep.cpp: a pass's last step: the wheel thread sleeps
// until its next alarm is due or a producer wakes it (wheel_thread.cpp has
// the pass).
//
// Race: enqueue vs the wheel going to sleep.
//
//   producer                               wheel thread
//   push(command)                          seen = seam.wake.prepare()
//   fence(seq_cst)              (P1)       bound = B; fence(seq_cst)            (P2)
//   if due < bound and CAS(bound -> MIN):  if queue non-empty: don't sleep
//     wake                                 futex_wait(word == seen, until the wake-up W)
//
// The fences forbid both sides missing each other; a wake between the check
// and the futex call changes the word, so the futex call returns at once.
// B is the last interval boundary before W (W: the earliest alarm's
// next_alarm_fires_at, or at most kLingerNs from now while commands keep
// coming): a timer due before B needs the wheel earlier; one due at or after
// it is filed at W soon enough, so it does not wake it (command_poster.cpp).
#include "wheel_thread.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "requests.hpp"
#include "wheel_thread_pass.hpp"

namespace chime::detail {

using namespace pass;

// Step 5: sleeps until the wake-up plan_wake chooses, unless the next pass
// must come at once (next_pass_at_once) or, once the bound is published,
// there is work after all (wait_is_moot).
void WheelThread::sleep(bool busy) {
  if (next_pass_at_once()) return;
  const WakePlan plan = plan_wake(busy);
  const std::uint32_t seen = seam.wake.prepare();
  seam.wake_if_due_before_ns.store(plan.bound_ns, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P2) and (F-W)
  if (!wait_is_moot()) {
    const TimePoint steady_before = config_.steady_clock.now();
    const std::int64_t wake_at = steady_wake_at(plan.wake_at_ns, steady_before);
    const TimePoint until{Duration(wake_at)};
    seam.wake.wait_until(seen, wake_at == INT64_MAX ? nullptr : &until);
    seam.wakeups.fetch_add(1, std::memory_order_relaxed);
    wt().last_sleep_short = (config_.steady_clock.now() - steady_before).count() < kLingerNs;
  }
  seam.wake_if_due_before_ns.store(INT64_MIN, std::memory_order_relaxed);
}

// No sleep: the next pass comes at once (out of memory, after a nap).
bool WheelThread::next_pass_at_once() {
  if (wt().pass_out_of_memory) [[unlikely]] {
    // Out of memory: try again in a while, whatever is queued or due.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }
  // A manual clock between flushes: what is due waits for the next flush.
  const bool firing = may_fire();
  if (firing && wt().advance_cut_short) return true;  // the wheel is behind the clock
  if (wt().ahead_pending) return true;                // more of a span to move down ahead (bounded)
  // A manual clock's next step waits for the run in flight: whoever
  // completes it wakes us (F-W, wait_is_moot; a flush waits).
  const bool step_waits = config_.manual() && manual_run_in_flight(seam.completed.load(std::memory_order_acquire));
  if (firing && ready_now() && !step_waits) {  // due now
    // Only a reschedule's two stores to wait for: let its thread run first
    // (yields, then short sleeps: backoff.hpp).
    if (wt().awaiting_writer) wt().writer_backoff.wait();
    return true;
  }
  // (F-W) Workers bump seam.completed, fence, then read this flag to decide
  // whether to wake us; we set it, fence (sleep), then re-read
  // seam.completed (wait_is_moot).
  seam.waits_for_workers.store(!wt().flushes.empty(), std::memory_order_relaxed);
  return false;
}

// When to wake, in the runtime clock's domain, and the bound producers
// compare their dues with ((P1), command_poster.cpp). A manual clock wakes
// only when told (a flush), and no due needs the wheel: every manual-clock
// choice of the sleep is here and in next_pass_at_once / wait_is_moot.
WheelThread::WakePlan WheelThread::plan_wake(bool busy) {
  if (config_.manual()) {
    wt().lingering = false;
    return {INT64_MAX, INT64_MIN};
  }
  std::int64_t deadline = INT64_MAX;
  // At the horizon nothing in the wheel ever fires (it never advances on).
  if (const auto next = wt().wheel.next_alarm_fires_at();
      next && wt().wheel.now().time_since_epoch().count() < config_.max_wheel_now_ns) {
    deadline = exact_deadline(next->time_since_epoch().count());
  }
  // Lingering (commands keep coming): wake up at most kLingerNs from now even
  // if no alarm is due, so that a stream of commands (new timers due before
  // the next alarm, say) is applied in batches, not one producer wake-up per
  // command. Only while passes apply commands and the previous sleep was cut
  // short by a producer, or lingered: the first pass without commands
  // sleeps until the next alarm (or forever).
  wt().lingering = busy && (wt().lingering || wt().last_sleep_short);
  std::int64_t wake_at_ns = deadline;
  if (wt().lingering) {
    const std::int64_t now = config_.clock->now().time_since_epoch().count();
    if (now < deadline - kLingerNs) wake_at_ns = now + kLingerNs;
  }
  // A timer needs an earlier wake-up iff its fire time is before
  // wake_at_ns; its fire time is at or after its due, so one due before the
  // wake-up may need it earlier (one that does not, an interval-rule timer
  // in the wake-up's own interval, costs a wake-up that files it).
  return {wake_at_ns, wake_at_ns};
}

// After the bound is published and fenced: there is work after all, so no
// sleep. Commands queued, or a flush whose runs have completed meanwhile.
bool WheelThread::wait_is_moot() {
  if (seam.commands.size_approx() != 0) return true;
  if (wt().flushes.empty()) return false;
  const std::uint64_t completed = seam.completed.load(std::memory_order_acquire);
  // A stepped flush waits only for its shard's run in flight: the pass
  // after that run settles it or takes the next step.
  std::uint64_t need = 0;
  bool marked = false;
  bool stepped = false;
  for (const FlushRequest* f : wt().flushes) {
    stepped |= f->stepped;
    if (f->stepped) continue;
    marked = true;
    need = std::max(need, f->mark);
  }
  if (marked && completed >= need) return true;
  // Stepped flushes and ready runs waiting for a step: a ManualClock's.
  const bool in_flight = manual_run_in_flight(completed);
  if (stepped && !in_flight) return true;
  return ready_now() && config_.manual() && !in_flight;
}

// `wake_at_ns` (the runtime clock's) on the steady clock, which the wait
// measures; INT64_MAX: no time-out.
std::int64_t WheelThread::steady_wake_at(std::int64_t wake_at_ns, TimePoint steady_now) const {
  if (wake_at_ns == INT64_MAX || config_.clock_kind == RuntimeConfig::ClockKind::steady) return wake_at_ns;
  // In 128 bits, saturating: the two clocks' times may be at opposite ends of int64.
  const __int128 remaining = static_cast<__int128>(wake_at_ns) - config_.clock->now().time_since_epoch().count();
  const __int128 at = steady_now.time_since_epoch().count() + std::max<__int128>(remaining, 0);
  return at >= INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(at);
}

// Slack: when to wake for the earliest alarm, whose interval ends at
// `next_fires_at_ns`: its fire time (fire_time), or the interval's end when
// that is its last nanosecond. The time is looked up (cached by the wheel)
// only when that interval is the current or the next one; further out, wake
// at its start and look then.
std::int64_t WheelThread::exact_deadline(std::int64_t next_fires_at_ns) {
  ShardWheel& wheel = wt().wheel;
  const std::int64_t p = config_.precision.count();
  const std::int64_t min_start = next_fires_at_ns - p;
  if (min_start > wheel.now_interval_num_start().time_since_epoch().count() + p) return min_start;
  const auto min_time = wheel.min_alarm_time();
  if (!min_time) return next_fires_at_ns;
  const std::int64_t t = min_time->time_since_epoch().count();
  // The last nanosecond of the interval (interval-rule timers only): wake
  // when it ends, and let the advance fire the whole slot.
  return t >= next_fires_at_ns - 1 ? next_fires_at_ns : t;
}

}  // namespace chime::detail
