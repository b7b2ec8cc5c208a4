// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/observe_ops.hpp: RuntimeFuzz: state(), forged ids, and
// stats(): the counters after each flush (exact), run_time and slow_runs,
// and after shutdown. Part of the runtime fuzz target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

inline void RuntimeFuzz::op_state() {
  const Target tg = pick_target();
  // What is allowed is decided from the model before the call (a finished run may be seen still running).
  unsigned allowed = bit(TimerState::unknown);
  std::string model = "forged/default id";
  if (tg.index) {
    const MTimer& t = timers_[*tg.index];
    model = "timer #" + std::to_string(*tg.index) + " model state " + std::to_string(int(t.st)) + " due " +
            std::to_string(t.due) + " clock " + std::to_string(c_);
    switch (t.st) {
      case MTimer::St::pending:
        allowed = bit(TimerState::pending);  // nothing runs between calls
        break;
      case MTimer::St::fired:
        allowed = bit(TimerState::fired) | (t.settled || sim_ ? 0 : bit(TimerState::running)) |
                  (sched_count_ != t.terminal_sched ? bit(TimerState::unknown) : 0);
        break;
      case MTimer::St::cancelled:
        allowed = bit(TimerState::cancelled) | (sched_count_ != t.terminal_sched ? bit(TimerState::unknown) : 0);
        break;
    }
  }
  const TimerState s = rt_->state(tg.id);
  FUZZ_TRACE("state of " << model << " = " << state_name(s));
  FUZZ_CHECK((allowed & bit(s)) != 0, "state of " << model << " is " << state_name(s));
}

inline void RuntimeFuzz::op_forged_id() {
  const TimerId id = in_.flag() ? TimerId{} : forged_id();
  FUZZ_TRACE("forged id slot=" << id.slot() << " gen=" << id.generation() << " tag=" << id.runtime()
                               << " (ours " << tag_ << ")");
  FUZZ_CHECK(rt_->state(id) == TimerState::unknown, "state of a forged id");
  FUZZ_CHECK(!rt_->cancel(id) && !producer_->cancel(id), "cancel of a forged id returned true");
  FUZZ_CHECK(rt_->try_cancel(id) == CancelResult::unknown && producer_->try_cancel(id) == CancelResult::unknown,
             "try_cancel of a forged id is not unknown");
  FUZZ_CHECK(rt_->cancel_and_wait(id) == CancelResult::unknown &&
                 producer_->cancel_and_wait(id) == CancelResult::unknown,
             "cancel_and_wait of a forged id is not unknown");
  const std::int64_t d = clamp64(std::min<i128>(limit() - 1, c_));
  FUZZ_CHECK(!rt_->reschedule_at(id, T(d)) && !producer_->reschedule_at(id, T(d)),
             "reschedule of a forged id returned true");
  if (other_rt_) {
    FUZZ_CHECK(other_rt_->state(other_id_) == TimerState::pending,
               "the second runtime's timer is " << state_name(other_rt_->state(other_id_)));
  }
  process_runs();
}

inline void RuntimeFuzz::op_stats() {
  FUZZ_TRACE("stats");
  const chime::Stats s = rt_->stats();
  FUZZ_CHECK(s.scheduled == accepted_, "stats().scheduled " << s.scheduled << " != " << accepted_);
  FUZZ_CHECK(s.rescheduled == reschedules_, "stats().rescheduled " << s.rescheduled << " != " << reschedules_);
}

// After a flush, every count is exact.
inline void RuntimeFuzz::check_stats_exact() {
  const chime::Stats s = rt_->stats();
  std::size_t definite = 0, possible = 0;
  live_bounds(definite, possible);
  std::size_t errors = 0;
  bool bad = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    errors = error_ids_.size();
    bad = bad_error_;
  }
  FUZZ_CHECK(s.scheduled == accepted_, "stats().scheduled " << s.scheduled << " != " << accepted_);
  FUZZ_CHECK(s.rescheduled == reschedules_, "stats().rescheduled " << s.rescheduled << " != " << reschedules_);
  FUZZ_CHECK(s.fired == runs_seen_, "stats().fired " << s.fired << " != runs " << runs_seen_);
  FUZZ_CHECK(s.cancelled == cancels_, "stats().cancelled " << s.cancelled << " != " << cancels_);
  FUZZ_CHECK(s.callback_errors == throws_, "stats().callback_errors " << s.callback_errors << " != " << throws_);
  FUZZ_CHECK(errors == throws_ && !bad, "on_error called " << errors << " times for " << throws_ << " throwing runs");
  FUZZ_CHECK(s.pending == definite, "stats().pending " << s.pending << " != " << definite);
  check_run_time(s);
}

// Run times and slow runs, once the runs are over (after a flush or shutdown): the percentiles are
// ordered and at most max; every run is timed; slow_runs counts runs, each reported to on_slow_run;
// with slow_run = 0 every run is slow.
inline void RuntimeFuzz::check_run_time(const chime::Stats& s) {
  const chime::DurationStats& t = s.run_time;
  FUZZ_CHECK(t.p50 >= Duration{0} && t.p50 <= t.p99 && t.p99 <= t.p999 && t.p999 <= t.max,
             "run_time p50 " << t.p50.count() << " p99 " << t.p99.count() << " p999 " << t.p999.count()
                             << " max " << t.max.count() << " not ordered");
  FUZZ_CHECK(s.lateness.p50 <= s.lateness.p99 && s.lateness.p99 <= s.lateness.p999 &&
                 s.lateness.p999 <= s.lateness.max,
             "lateness percentiles not ordered");
  FUZZ_CHECK(s.slow_runs <= s.fired, "slow_runs " << s.slow_runs << " > fired " << s.fired);
  if (slow_all_) FUZZ_CHECK(s.slow_runs == s.fired, "slow_run = 0: slow_runs " << s.slow_runs << " != runs " << s.fired);
  if (s.fired == 0) FUZZ_CHECK(t.max == Duration{0} && s.slow_runs == 0, "run_time without runs");
  FUZZ_CHECK(slow_calls_.load(std::memory_order_relaxed) == s.slow_runs && !bad_slow_.load(),
             "on_slow_run called " << slow_calls_.load() << " times for " << s.slow_runs << " slow runs"
                                   << (bad_slow_.load() ? " (with a bad id or duration)" : ""));
}

inline void RuntimeFuzz::check_stats_final() {
  const chime::Stats s = rt_->stats();
  FUZZ_CHECK(s.scheduled == accepted_ && s.fired == runs_seen_ && s.cancelled == cancels_ && s.pending == 0 &&
                 s.callback_errors == throws_ && s.rescheduled == reschedules_,
             "stats after shutdown: scheduled " << s.scheduled << "/" << accepted_ << " fired " << s.fired << "/"
                                                << runs_seen_ << " cancelled " << s.cancelled << "/" << cancels_
                                                << " pending " << s.pending << " errors " << s.callback_errors << "/"
                                                << throws_ << " rescheduled " << s.rescheduled << "/"
                                                << reschedules_);
  check_run_time(s);
}

}  // namespace chime_fuzz::runtime_target
