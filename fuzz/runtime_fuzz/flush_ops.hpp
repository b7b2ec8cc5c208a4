// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/flush_ops.hpp: RuntimeFuzz: moving the clock (flush,
// move, flush), flush, drain and shutdown: what must have run by each, what
// must not have, the counts drain() and shutdown() return, and the behaviour
// after shutdown. Part of the runtime fuzz target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

inline void RuntimeFuzz::op_advance_and_flush() {
  i128 to = std::min<i128>(std::max<i128>(pick_clock(), c_), kI64Max);  // the clock saturates at TimePoint::max()
  // Bound the work: the runs this flush makes must fit in the budget, or the clock stays.
  if (runs_seen_ + runs_at(to) > kMaxRuns) to = c_;
  FUZZ_TRACE("advance clock " << c_ << " -> " << static_cast<std::int64_t>(to) << " (+"
                              << static_cast<std::int64_t>(to - c_) << ")");
  // Commands posted since the last flush may be applied before or after the move: either way nothing runs
  // before the flush, which runs what is due by its reading.
  clock_->set(T(static_cast<std::int64_t>(to)));
  op_flush("flush");
}

// flush() at the clock's time; then everything due by its reading has run and every finished timer's slot
// is free.
inline void RuntimeFuzz::op_flush(const char* why) {
  FUZZ_TRACE(why << " (clock " << N(clock_->now()) << ")");
  const std::int64_t before = c_;
  c_ = N(clock_->now());
  FUZZ_CHECK(c_ >= before, "the clock went back");
  rt_->flush();
  if (!stopped_) wheel_now_ = static_cast<std::int64_t>(wheel_at(c_));
  process_runs();
  if (stopped_) return;
  // The runtime's own structure (Runtime::check_invariants): every filed
  // timer held once, by the wheel or the overdue list, none lost.
  try {
    rt_->check_invariants();
  } catch (const std::logic_error& e) {
    FUZZ_CHECK(false, e.what());
  }
  // Everything due by the flush's reading has run; every finished timer's slot is free.
  for (std::size_t i = 0; i < timers_.size(); ++i) {
    MTimer& t = timers_[i];
    if (t.st == MTimer::St::pending) {
      FUZZ_CHECK(t.due > wheel_now_, (t.periodic ? "periodic #" : "one-shot #")
                                         << i << " due " << t.due << " did not run by the flush at " << c_
                                         << " (reading " << wheel_now_ << ")");
    } else {
      t.settled = true;
    }
  }
  check_stats_exact();
}

inline void RuntimeFuzz::op_drain() {
  flush_first("drain");
  std::size_t definite = 0;
  std::vector<std::uint64_t> runs_before(timers_.size());
  std::vector<bool> was_pending(timers_.size());
  for (std::size_t i = 0; i < timers_.size(); ++i) {
    const MTimer& t = timers_[i];
    runs_before[i] = t.runs;
    was_pending[i] = t.st == MTimer::St::pending;
    if (t.st == MTimer::St::pending) ++definite;
  }
  FUZZ_TRACE("drain (expect " << definite << ")");
  draining_.store(true, std::memory_order_release);
  const std::size_t n = rt_->drain();
  // drain() returns once the runs are handed over; with workers they may still be running: wait for them
  // (the clock has not moved, so this flush runs nothing the drain did not).
  // (In lane mode the fuzzing thread is the lane's thread: this flush runs them.)
  if (workers_ != 0 || lane_mode_) rt_->flush();
  draining_.store(false, std::memory_order_release);
  process_runs();
  if (stopped_) {
    FUZZ_CHECK(n == 0, "drain after shutdown returned " << n);
    return;
  }
  FUZZ_CHECK(n == definite, "drain returned " << n << ", expected " << definite);
  for (std::size_t i = 0; i < runs_before.size(); ++i) {
    MTimer& t = timers_[i];
    if (t.periodic && was_pending[i]) {
      FUZZ_CHECK(t.runs == runs_before[i] + 1,
                 "drain ran periodic #" << i << " " << t.runs - runs_before[i] << " times");
    }
    if (!t.periodic) FUZZ_CHECK(t.st != MTimer::St::pending, "drain left one-shot #" << i << " pending");
    if (t.st != MTimer::St::pending) t.settled = true;
  }
}

// Before drain() and shutdown(fire_pending): the flush they begin with, made by the harness, so that what
// is due by the clock's reading runs on time and is checked as such (not taken for a drained run: the
// callback cannot tell them apart). The runtime's own flush then finds nothing due.
inline void RuntimeFuzz::flush_first(const char* what) {
  if (stopped_) return;
  op_flush((std::string("the flush that begins ") + what).c_str());
}

inline void RuntimeFuzz::op_shutdown(chime::ShutdownMode mode) {
  if (mode == chime::ShutdownMode::fire_pending) flush_first("shutdown(fire_pending)");
  std::size_t definite = 0;
  std::vector<std::uint64_t> runs_before(timers_.size());
  std::vector<bool> was_pending(timers_.size());
  for (std::size_t i = 0; i < timers_.size(); ++i) {
    const MTimer& t = timers_[i];
    runs_before[i] = t.runs;
    was_pending[i] = t.st == MTimer::St::pending;
    // Pending: not run, since nothing runs between calls; cancel_pending cancels every one, due or not.
    if (t.st == MTimer::St::pending) ++definite;
  }
  const bool fire = mode == chime::ShutdownMode::fire_pending;
  FUZZ_TRACE("shutdown(" << (fire ? "fire_pending" : "cancel_pending") << ") expect " << (fire ? 0 : definite));
  if (fire) draining_.store(true, std::memory_order_release);
  const std::size_t n = rt_->shutdown(mode);
  // Lane mode: shutdown(fire_pending) made the lane's runs ready; they run at its next run_ready.
  if (lane_mode_ && fire) lane_->run_ready();
  draining_.store(false, std::memory_order_release);
  const bool was_stopped = stopped_;
  stopped_ = true;
  fire_shutdown_ = fire && !was_stopped;
  process_runs();
  fire_shutdown_ = false;
  if (was_stopped) {
    FUZZ_CHECK(n == 0, "a second shutdown returned " << n);
    return;
  }
  FUZZ_CHECK(fire ? n == 0 : n == definite, "shutdown returned " << n << ", expected " << (fire ? 0 : definite));
  for (std::size_t i = 0; i < runs_before.size(); ++i) {
    MTimer& t = timers_[i];
    if (t.periodic && was_pending[i]) {
      FUZZ_CHECK(t.runs == runs_before[i] + (fire ? 1 : 0),
                 "shutdown ran periodic #" << i << " " << t.runs - runs_before[i] << " times");
    }
    if (t.st == MTimer::St::pending) {
      FUZZ_CHECK(!fire, "shutdown(fire_pending) left timer #" << i << " pending");
      // cancel_pending: swept, due or not; none runs after the call, which process_runs() checks.
      t.st = MTimer::St::cancelled;  // by the sweep
      t.terminal_sched = sched_count_;
      ++cancels_;
    }
    t.settled = true;
  }
  check_stats_final();
}

inline void RuntimeFuzz::after_shutdown_checks() {
  FUZZ_CHECK(rt_->shutdown() == 0, "a second shutdown returned non-zero");
  rt_->flush();
  FUZZ_CHECK(rt_->drain() == 0, "drain after shutdown returned non-zero");
  bool stopped = false;
  try {
    (void)rt_->schedule_after(Duration{0}, [] {});
  } catch (const chime::StoppedError&) {
    stopped = true;
  }
  FUZZ_CHECK(stopped, "schedule after shutdown did not throw StoppedError");
  for (std::size_t i = 0; i < timers_.size(); ++i) {
    const MTimer& t = timers_[i];
    const TimerState s = rt_->state(t.id);
    const TimerState want = t.st == MTimer::St::fired ? TimerState::fired : TimerState::cancelled;
    // After shutdown no slot is reused again, but one may have been before it.
    FUZZ_CHECK(s == want || (s == TimerState::unknown && sched_count_ != t.terminal_sched),
               "after shutdown, timer #" << i << " is " << state_name(s) << ", expected " << state_name(want));
    FUZZ_CHECK(!rt_->cancel(t.id), "cancel after shutdown returned true");
    const CancelResult tc = rt_->try_cancel(t.id);
    const CancelResult cw = producer_->cancel_and_wait(t.id);
    const bool reused = sched_count_ != t.terminal_sched;
    FUZZ_CHECK((tc == CancelResult::done || (reused && tc == CancelResult::unknown)) && tc == cw,
               "after shutdown, try_cancel / cancel_and_wait of timer #" << i << " are " << result_name(tc) << " / "
                                                                         << result_name(cw));
  }
  process_runs();
  check_stats_final();
}

}  // namespace chime_fuzz::runtime_target
