// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/sim_ops.hpp: RuntimeFuzz: the operations only the
// deterministic simulation has (runtime/simulation.hpp): one wheel-thread
// pass, passes until idle, a clock move with no flush, and a lane's
// run_ready; and what must hold after a pass. Part of the
// runtime fuzz targets (fuzz/runtime_sim_fuzz.cpp uses them); see
// harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// One pass (or passes until one has nothing to do): the commands posted so far are applied, and nothing
// runs: on a ManualClock the wheel advances and runs timers only for a flush.
inline void RuntimeFuzz::op_pass(bool until_idle) {
  FUZZ_TRACE((until_idle ? "passes until idle" : "pass") << " (clock " << c_ << ")");
  if (until_idle) {
    // Passes until one has nothing to do, at most 16: Simulation::run_until_idle() does not return while
    // a due timer waits for a flush (simulation.cpp, WheelThread::simulate_pass counts the overdue list
    // as work; tests/runtime_manual_clock_test.cpp, passes_without_a_flush_run_nothing_and_go_idle).
    for (int i = 0; i < 16 && sim_rt_->run_one_pass(); ++i) {
    }
  } else {
    sim_rt_->run_one_pass();
  }
  check_after_pass();
}

// The clock moves, and nothing else: no flush, so nothing runs until the next flush, which runs what is
// due by the clock's reading then.
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

// After a pass with no flush: nothing ran (on a ManualClock timers run only inside flush, drain and
// shutdown(fire_pending)), nor in lane mode was anything handed to the lane.
inline void RuntimeFuzz::check_after_pass() {
  std::size_t ran = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ran = runs_.size();
  }
  FUZZ_CHECK(ran == 0, ran << " callbacks ran in a pass with no flush (clock " << c_ << ")");
  if (lane_mode_ && !stopped_) {
    FUZZ_CHECK(lane_->run_ready() == 0, "a pass with no flush handed runs to the lane (clock " << c_ << ")");
  }
}

}  // namespace chime_fuzz::runtime_target
