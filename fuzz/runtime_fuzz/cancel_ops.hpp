// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/cancel_ops.hpp: RuntimeFuzz: cancel, try_cancel,
// cancel_and_wait and reschedule_at / reschedule_after: each answer against
// the model (a pending timer has not run: nothing runs between calls on a
// ManualClock), and the model's update from it (the new due). Part of the
// runtime fuzz target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// cancel, try_cancel or cancel_and_wait (the operand's bits 1-2), through the Runtime or the Producer.
inline void RuntimeFuzz::op_cancel() {
  const Target tg = pick_target();
  const std::uint8_t how = in_.u8();
  const Via via = (how & 1) ? Via::producer : Via::runtime;
  const int kind = (how >> 1) % 4;  // 0, 1: cancel; 2: try_cancel; 3: cancel_and_wait
  const char* what = kind == 2 ? "try_cancel" : kind == 3 ? "cancel_and_wait" : "cancel";
  FUZZ_TRACE(what << " " << (tg.index ? "timer #" + std::to_string(*tg.index) : std::string("forged/default id"))
                  << " slot=" << tg.id.slot() << " gen=" << tg.id.generation() << " tag=" << tg.id.runtime()
                  << (via == Via::producer ? " via producer" : ""));
  if (kind >= 2) return op_try_cancel(tg, via, kind == 3);
  // The model is updated from the answer before the runs recorded meanwhile are checked: a run that started
  // before the call is consistent with either answer, one after a successful cancel is a bug.
  const bool got = via == Via::producer ? producer_->cancel(tg.id) : rt_->cancel(tg.id);
  struct After {
    RuntimeFuzz* h;
    ~After() { h->process_runs(); }
  } after{this};
  if (!tg.index) {
    FUZZ_CHECK(!got, "cancel of a default or forged id returned true");
    return;
  }
  MTimer& t = timers_[*tg.index];
  if (t.st != MTimer::St::pending || stopped_) {
    FUZZ_CHECK(!got, "cancel of a " << (t.st == MTimer::St::fired ? "fired" : "cancelled")
                                    << " timer returned true");
    return;
  }
  FUZZ_CHECK(got,
             "cancel of pending timer #" << *tg.index << " (due " << t.due << ", clock " << c_ << ") returned false");
  mark_cancelled(t);
}

inline void RuntimeFuzz::op_try_cancel(const Target& tg, Via via, bool wait) {
  const CancelResult got = wait ? (via == Via::producer ? producer_->cancel_and_wait(tg.id) : rt_->cancel_and_wait(tg.id))
                                : (via == Via::producer ? producer_->try_cancel(tg.id) : rt_->try_cancel(tg.id));
  // cancel_and_wait returned `running` only after that run returned: the callback is not in progress.
  const bool still_running = tg.index && active_.at(*tg.index).load(std::memory_order_acquire) != 0;
  const char* what = wait ? "cancel_and_wait" : "try_cancel";
  FUZZ_TRACE("  = " << result_name(got));
  struct After {
    RuntimeFuzz* h;
    ~After() { h->process_runs(); }
  } after{this};
  if (!tg.index) {
    FUZZ_CHECK(got == CancelResult::unknown, what << " of a default or forged id is " << result_name(got));
    return;
  }
  MTimer& t = timers_[*tg.index];
  const bool was_pending = t.st == MTimer::St::pending;
  const unsigned allowed = allowed_cancel_results(t);
  FUZZ_CHECK((allowed & bit(got)) != 0, what << " of timer #" << *tg.index << " (model state " << int(t.st)
                                             << ", due " << t.due << ", clock " << c_ << ") is "
                                             << result_name(got));
  if (wait && got == CancelResult::running) {
    FUZZ_CHECK(!still_running, "cancel_and_wait of timer #" << *tg.index << " returned `running` while its "
                                                            << "callback was still in progress");
  }
  if (got == CancelResult::cancelled) {
    mark_cancelled(t);
    return;
  }
  if (!was_pending) return;
  // A one-shot due now that started: its run is recorded before its callback returns, so once the answer
  // says the run is over (done, or cancel_and_wait's running), the model has seen it.
  if (got == CancelResult::done || (wait && got == CancelResult::running)) {
    process_runs();
    FUZZ_CHECK(t.st == MTimer::St::fired, what << " of timer #" << *tg.index << " said its run is over, but "
                                               << "no run was recorded");
  }
}

inline void RuntimeFuzz::op_reschedule(bool after) {
  const Target tg = pick_target();
  i128 due;
  std::int64_t delay = 0;
  if (after) {
    delay = clamp64(pick_delay());
    due = clamp64(static_cast<i128>(c_) + delay);  // saturating, as in runtime.cpp
  } else {
    switch (in_.u8() % 3) {
      case 0:  // earlier
        due = tg.index ? static_cast<i128>(timers_[*tg.index].due) - in_.log_uniform() : pick_due();
        break;
      case 1:  // later
        due = tg.index ? static_cast<i128>(timers_[*tg.index].due) + in_.log_uniform() : pick_due();
        break;
      default: due = pick_due(); break;
    }
    due = clamp64(due);
  }
  const Via via = in_.flag() ? Via::producer : Via::runtime;
  const bool periodic = tg.index && timers_[*tg.index].periodic;
  const bool pending = tg.index && timers_[*tg.index].st == MTimer::St::pending && !stopped_;
  if (periodic && pending && due < timers_[*tg.index].due) {
    // Earlier: bound the work, as op_schedule_every does: the runs the next flush makes must fit.
    const MTimer& t = timers_[*tg.index];
    const i128 now_runs =
        t.on_missed == Missed::catch_up ? catch_up_runs(due, t.period, c_) : i128{due <= wheel_at(c_)};
    if (runs_seen_ + runs_at(c_) + now_runs > kMaxRuns) return;
  }
  const std::int64_t d = clamp64(due);
  FUZZ_TRACE("reschedule" << (after ? "_after" : "_at") << " "
                          << (tg.index ? "timer #" + std::to_string(*tg.index) : std::string("forged/default id"))
                          << " to " << d << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                          << ")");
  bool got = false;
  bool out_of_range = false;
  try {
    if (after) {
      got = via == Via::producer ? producer_->reschedule_after(tg.id, Duration{delay})
                                 : rt_->reschedule_after(tg.id, Duration{delay});
    } else {
      got = via == Via::producer ? producer_->reschedule_at(tg.id, T(d)) : rt_->reschedule_at(tg.id, T(d));
    }
  } catch (const std::out_of_range&) {
    out_of_range = true;
  }
  // As in op_cancel: update the model from the answer, then check the runs recorded meanwhile.
  struct After {
    RuntimeFuzz* h;
    ~After() { h->process_runs(); }
  } after_call{this};
  // The range is checked first, for any id (after shutdown too).
  if (due >= limit()) {
    FUZZ_CHECK(out_of_range, "reschedule to " << d << " >= limit " << static_cast<std::int64_t>(limit())
                                              << " did not throw out_of_range");
    return;
  }
  FUZZ_CHECK(!out_of_range, "reschedule to " << d << " < limit " << static_cast<std::int64_t>(limit())
                                             << " threw out_of_range");
  if (!tg.index) {
    FUZZ_CHECK(!got, "reschedule of a default or forged id returned true");
    return;
  }
  MTimer& t = timers_[*tg.index];
  if (!pending) {
    FUZZ_CHECK(!got, "reschedule of a finished timer #" << *tg.index << " returned true");
    return;
  }
  FUZZ_CHECK(
      got, "reschedule of pending timer #" << *tg.index << " (due " << t.due << ", clock " << c_ << ") returned false");
  ++reschedules_;
  // Earlier, later or the same due, to the past or not: it runs at the first flush whose reading is at or
  // after its new due.
  t.due = d;
}

}  // namespace chime_fuzz::runtime_target
