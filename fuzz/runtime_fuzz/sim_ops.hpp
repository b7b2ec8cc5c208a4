// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/sim_ops.hpp: RuntimeFuzz: the operations only the
// deterministic simulation has (runtime/simulation.hpp): one wheel-thread
// pass, passes until idle, a clock move with no flush (the next pass reads
// it), and a lane's run_ready; and what must hold after a pass. Part of the
// runtime fuzz targets (fuzz/runtime_sim_fuzz.cpp uses them); see
// harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// One pass (or passes until one has nothing to do) at the clock's time: the commands posted so far are
// applied, the wheel advances to the clock (clamped to the horizon), and every run it claims runs in the
// pass (or, in lane mode, waits in the lane's ready queue for run_ready).
inline void RuntimeFuzz::op_pass(bool until_idle) {
  FUZZ_TRACE((until_idle ? "passes until idle" : "pass") << " (clock " << c_ << ")");
  if (until_idle) {
    sim_rt_->run_until_idle();
  } else {
    sim_rt_->run_one_pass();
  }
  if (!stopped_) wheel_now_ = static_cast<std::int64_t>(wheel_at(c_));
  process_runs();
  check_after_pass();
}

// The clock moves, and nothing else: no flush, so the wheel stays where the last pass left it until the
// next pass (or flush) reads the clock. Calls made meanwhile judge "due now" by the moved clock.
inline void RuntimeFuzz::op_move_clock() {
  i128 to = std::min<i128>(std::max<i128>(pick_clock(), c_), kI64Max);
  // Bound the work, as op_advance_and_flush does: the runs a flush to `to` would make must fit.
  if (runs_seen_ + runs_at(to) > kMaxRuns) to = c_;
  FUZZ_TRACE("move clock " << c_ << " -> " << static_cast<std::int64_t>(to) << " (no flush; wheel at " << wheel_now_
                           << ")");
  clock_->set(T(static_cast<std::int64_t>(to)));
  c_ = static_cast<std::int64_t>(to);
}

// Lane mode: the caller runs what the passes handed to its lane.
inline void RuntimeFuzz::op_run_ready() {
  const std::size_t n = lane_->run_ready();
  FUZZ_TRACE("run_ready: " << n << " runs");
  process_runs();
}

// After a pass, nothing runs behind the model's back, so what the threaded target may only bound is
// exact: a one-shot due now at its application, or ripe by the wheel's time, has run (in lane mode:
// once its lane ran; until then it waits, handed over). Periodic timers may need more passes (a
// catch_up timer runs once per pass), which the next flush checks.
inline void RuntimeFuzz::check_after_pass() {
  if (stopped_ || lane_mode_) return;
  for (std::size_t i = 0; i < timers_.size(); ++i) {
    const MTimer& t = timers_[i];
    if (t.st != MTimer::St::pending || t.periodic) continue;
    FUZZ_CHECK(!t.ambiguous, "one-shot #" << i << " due " << t.due << " was due now at its application and did "
                                          << "not run in the pass at " << c_);
    FUZZ_CHECK(!ripe(t.due), "one-shot #" << i << " due " << t.due << " (ripe at "
                                          << static_cast<std::int64_t>(ripe_at(t.due)) << ") did not run in the "
                                          << "pass at " << c_ << " (wheel at " << wheel_now_ << ")");
  }
}

}  // namespace chime_fuzz::runtime_target
