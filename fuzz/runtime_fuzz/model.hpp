// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/model.hpp: RuntimeFuzz: the model's judgement: the runs
// a flush makes (the work budget), the timers certainly and possibly live
// (max_pending, stats().pending), what try_cancel / cancel_and_wait may
// answer, and a cancel's effect on the model. Part of the runtime fuzz
// target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// Catch-up runs a periodic timer due at `due` makes at a flush at clock c: one per run due at or before
// the flush's reading.
inline i128 RuntimeFuzz::catch_up_runs(i128 due, i128 period, i128 c) const {
  const i128 reading = wheel_at(c);
  return due > reading ? 0 : (reading - due) / period + 1;
}

// Runs the next flush to clock c will make: every pending timer due at or before its reading, once
// (Missed::skip and delay coalesce a periodic timer's runs), catch_up once per run due.
inline i128 RuntimeFuzz::runs_at(i128 c) const {
  i128 n = 0;
  for (const MTimer& t : timers_) {
    if (t.st != MTimer::St::pending) continue;
    if (t.periodic && t.on_missed == Missed::catch_up) {
      n += catch_up_runs(t.due, t.period, c);
    } else {
      n += t.due <= wheel_at(c) ? 1 : 0;
    }
  }
  return n;
}

// Live-timer bounds for max_pending: `definite` are certainly holding a slot (the pending ones: none runs
// between calls), `possible` may be (a finished one whose slot no flush has freed yet).
inline void RuntimeFuzz::live_bounds(std::size_t& definite, std::size_t& possible) const {
  definite = possible = 0;
  for (const MTimer& t : timers_) {
    if (t.st == MTimer::St::pending) {
      ++definite;
      ++possible;
    } else if (!t.settled) {
      ++possible;
    }
  }
}

// What try_cancel / cancel_and_wait of model timer t may answer, decided from the model before the call.
inline unsigned RuntimeFuzz::allowed_cancel_results(const MTimer& t) const {
  switch (t.st) {
    case MTimer::St::pending:
      return bit(CancelResult::cancelled);  // not started, and cannot start before a flush
    case MTimer::St::fired:
    case MTimer::St::cancelled:
      // `running` while the run that ended it has not returned (the model learns of a run from inside it).
      // A flush returns once its runs have returned, and in the simulation a run the model has seen has.
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
