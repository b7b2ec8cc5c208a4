// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/model.hpp: RuntimeFuzz: the model's judgement: the runs
// a flush may make (the work budget), the timers certainly and possibly live
// (max_pending, stats().pending), what try_cancel / cancel_and_wait may
// answer, and a cancel's effect on the model. Part of the runtime fuzz
// target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// Catch-up runs a periodic timer due at `due` makes when the clock reaches c: each run due before the
// boundary; when it is due now (applied with due <= c), its first run whatever the boundary.
inline i128 RuntimeFuzz::catch_up_runs(i128 due, i128 period, i128 c, bool due_now) const {
  const i128 boundary = interval_start(wheel_at(c));
  const i128 n = due >= boundary ? 0 : (boundary - due + period - 1) / period;
  return due_now ? std::max<i128>(n, 1) : n;
}

// Runs the next flush to clock c will make, at most.
inline i128 RuntimeFuzz::runs_at(i128 c) const {
  i128 n = 0;
  for (const MTimer& t : timers_) {
    if (t.st != MTimer::St::pending) continue;
    if (!t.periodic) {
      n += t.ambiguous || ripe_at(t.due) <= wheel_at(c) ? 1 : 0;
    } else if (t.on_missed == Missed::catch_up) {
      n += catch_up_runs(t.due, t.period, c, t.due_now);
    } else {
      n += t.due_now || interval_start(wheel_at(c)) > t.due ? 1 : 0;
    }
  }
  return n;
}

// Live-timer bounds for max_pending: `definite` are certainly holding a slot, `possible` may be.
inline void RuntimeFuzz::live_bounds(std::size_t& definite, std::size_t& possible) const {
  definite = possible = 0;
  for (const MTimer& t : timers_) {
    if (t.st == MTimer::St::pending) {
      ++possible;
      if (!may_run(t)) ++definite;
    } else if (!t.settled) {
      ++possible;
    }
  }
}

// What try_cancel / cancel_and_wait of model timer t may answer, decided from the model before the call.
inline unsigned RuntimeFuzz::allowed_cancel_results(const MTimer& t) const {
  switch (t.st) {
    case MTimer::St::pending:
      if (!may_run(t)) return bit(CancelResult::cancelled);  // not started, and cannot start before a flush
      // Due now: it may have started, or finished (and its slot been reused by a later schedule).
      return bit(CancelResult::cancelled) | bit(CancelResult::running) | bit(CancelResult::done) |
             (sched_count_ != t.ripe_sched ? bit(CancelResult::unknown) : 0);
    case MTimer::St::fired:
    case MTimer::St::cancelled:
      // `running` while the run that ended it has not returned (the model learns of a run from inside it).
      // In the simulation a run the model has seen has returned.
      return bit(CancelResult::done) | (t.settled || sim_ ? 0 : bit(CancelResult::running)) |
             (sched_count_ != t.terminal_sched ? bit(CancelResult::unknown) : 0);
  }
  return 0;
}

inline void RuntimeFuzz::mark_cancelled(MTimer& t) {
  t.st = MTimer::St::cancelled;
  t.terminal_sched = sched_count_;
  t.settled = false;
  ++cancels_;
}

}  // namespace chime_fuzz::runtime_target
