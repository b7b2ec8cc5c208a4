// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/runs.hpp: RuntimeFuzz: the callback (on_run, on the
// wheel thread or a worker: records the run and does its action) and the
// check of every recorded run against the model (at the flush whose reading
// reaches its due, with that reading as fired_at; Firing::due and missed for
// one-shot, skip, catch_up and delay runs; self-cancels).
// Part of the runtime fuzz target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

// On the wheel thread.
inline void RuntimeFuzz::on_run(std::size_t tag, const chime::Firing& f) {
  // The timer's callback is in progress until this returns (or throws): what cancel_and_wait waits for.
  active_.at(tag).fetch_add(1, std::memory_order_acq_rel);
  struct Leave {
    std::atomic<int>& a;
    ~Leave() { a.fetch_sub(1, std::memory_order_acq_rel); }
  } leave{active_[tag]};
  Run r;
  r.tag = tag;
  r.firing = f;
  r.clock_at_start = N(clock_->now());
  r.state_inside = rt_->state(f.id);
  r.draining = draining_.load(std::memory_order_acquire);
  Action action;
  {
    std::lock_guard<std::mutex> lock(mu_);
    action = actions_.at(tag);
  }
  switch (action) {
    case Action::try_blocking: {
      int refused = 0;
      try {
        rt_->flush();
      } catch (const std::logic_error&) {
        ++refused;
      }
      try {
        (void)rt_->drain();
      } catch (const std::logic_error&) {
        ++refused;
      }
      try {
        (void)rt_->shutdown();
      } catch (const std::logic_error&) {
        ++refused;
      }
      r.blocking_refused = refused == 3;
      break;
    }
    case Action::cancel_self:
      r.self_result = rt_->cancel(f.id);
      r.state_after = rt_->state(f.id);
      break;
    case Action::try_cancel_self:
      r.self_cancel = rt_->try_cancel(f.id);
      r.self_result = rt_->cancel(f.id);  // a second cancel: false
      r.state_after = rt_->state(f.id);
      break;
    case Action::wait_self:
      r.self_cancel = rt_->cancel_and_wait(f.id);  // must not wait for itself
      r.state_after = rt_->state(f.id);
      break;
    case Action::slow:
      if (slow_left_.fetch_sub(1, std::memory_order_relaxed) > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      break;
    case Action::reschedule_self:
      // The timer is running, so the answer must be false. (Its own due may be out of range: a periodic
      // timer's next due can be beyond the wheel's range, and the wheel's last interval accepts nothing;
      // then std::out_of_range, which is not an answer and is not checked here.)
      try {
        r.self_result = rt_->reschedule_at(f.id, f.due);
      } catch (const std::out_of_range&) {
        r.self_result = false;
      }
      break;
    default: break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.push_back(r);
  }
  if (action == Action::throw_std) throw std::runtime_error("chime fuzz: a callback throws");
  if (action == Action::throw_other) throw 42;
}

// Takes the runs recorded by callbacks and checks each against the model.
inline void RuntimeFuzz::process_runs() {
  std::vector<Run> runs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs.swap(runs_);
  }
  for (const Run& r : runs) check_run(r);
}

inline void RuntimeFuzz::check_run(const Run& r) {
  ++runs_seen_;
  FUZZ_CHECK(r.tag < timers_.size(), "a run of an unknown timer tag " << r.tag);
  MTimer& t = timers_[r.tag];
  const std::int64_t due = N(r.firing.due);
  const std::int64_t fired_at = N(r.firing.fired_at);
  const std::string who = "run of " + std::string(t.periodic ? "periodic" : "one-shot") + " #" +
                          std::to_string(r.tag) + " (due " + std::to_string(due) + ", fired_at " +
                          std::to_string(fired_at) + ", clock " + std::to_string(r.clock_at_start) + ")";
  FUZZ_TRACE("  " << who << " missed " << r.firing.missed << (r.draining ? " drained" : ""));
  FUZZ_CHECK(r.firing.id == t.id, who << ": Firing::id is not the timer's id");
  FUZZ_CHECK(t.st == MTimer::St::pending, who << ": the timer is " << (t.st == MTimer::St::fired ? "fired" : "cancelled"));
  FUZZ_CHECK(r.state_inside == TimerState::running, who << ": state inside the callback is " << state_name(r.state_inside));
  FUZZ_CHECK(r.blocking_refused, who << ": flush/drain/shutdown inside a callback did not throw logic_error");
  FUZZ_CHECK(fired_at <= r.clock_at_start, who << ": fired_at is after the clock");
  if (!r.draining) {
    // On time: run by a flush (drain() and shutdown(fire_pending) begin with one, which the harness makes
    // itself) whose reading, the fired_at of its runs, is the clock's clamped to the horizon, and at or
    // after its due.
    FUZZ_CHECK(fired_at == static_cast<std::int64_t>(wheel_at(c_)),
               who << ": fired_at is not the reading of the flush at " << c_);
    FUZZ_CHECK(due <= fired_at, who << ": ran before its due");
  }
  ++t.runs;
  if (t.action == Action::throw_std || t.action == Action::throw_other) ++throws_;
  // A callback that cancelled itself: its run is in progress, so state(self) is still running, and
  // try_cancel / cancel_and_wait say `running` (the latter without waiting for itself). A periodic timer's
  // later runs are cancelled (C3): the first cancel is true (try_cancel: running), a second is false.
  const bool self_cancel = t.action == Action::cancel_self || t.action == Action::try_cancel_self ||
                           t.action == Action::wait_self;
  if (self_cancel) {
    FUZZ_CHECK(r.state_after == TimerState::running,
               who << ": state(self) after cancelling itself in its run is " << state_name(r.state_after));
  }
  if (t.action == Action::try_cancel_self || t.action == Action::wait_self) {
    FUZZ_CHECK(r.self_cancel == CancelResult::running,
               who << ": " << (t.action == Action::wait_self ? "cancel_and_wait" : "try_cancel")
                   << " of itself in its run is " << result_name(r.self_cancel));
  }
  if (t.action == Action::try_cancel_self) {
    FUZZ_CHECK(!r.self_result, who << ": a second cancel of itself (after try_cancel) returned true");
  }
  if (!t.periodic) {
    FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": model due " << t.due);
    if (t.action == Action::cancel_self || t.action == Action::reschedule_self) {
      FUZZ_CHECK(!r.self_result, who << ": cancel/reschedule of itself while running returned true");
    }
    t.st = MTimer::St::fired;
    t.terminal_sched = sched_count_;
    t.settled = false;
    return;
  }
  // Periodic. Never runnable outside a flush, so every run outside drain() and shutdown(fire_pending) is due.
  if (r.draining) {
    // drain() / shutdown(fire_pending): the next run, early, with its own due; the schedule stays.
    FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": a drained run, model next due " << t.due);
  } else {
    // The runs due at or before the flush's reading (fired_at): Missed::skip and delay coalesce them into the
    // latest; catch_up runs the first (and its re-arms the others, at the same flush).
    const i128 last = fired_at;
    FUZZ_CHECK(t.due <= last, who << ": model next due " << t.due << " is after " << static_cast<std::int64_t>(last));
    if (t.on_missed != Missed::catch_up) {
      const i128 k = (last - t.due) / t.period;
      const i128 want = t.due + k * t.period;
      FUZZ_CHECK(due == want && r.firing.missed == static_cast<std::uint64_t>(k),
                 who << ": " << missed_name(t.on_missed) << " expected due " << static_cast<std::int64_t>(want)
                     << " missed " << static_cast<std::int64_t>(k) << ", got missed " << r.firing.missed);
      // delay: the fixed rate restarts from the end of the run, on the runtime clock (the ManualClock does
      // not move while a run is in progress).
      t.due = t.on_missed == Missed::delay ? clamp64(static_cast<i128>(r.clock_at_start) + t.period)
                                           : clamp64(want + t.period);
    } else {
      FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": catch_up expected due " << t.due);
      t.due = clamp64(static_cast<i128>(t.due) + t.period);
    }
  }
  if (t.action == Action::reschedule_self) FUZZ_CHECK(!r.self_result, who << ": reschedule of itself returned true");
  if (t.action == Action::cancel_self) {
    FUZZ_CHECK(r.self_result, who << ": a periodic timer cancelling itself inside its run got false");
  }
  if (self_cancel) {
    mark_cancelled(t);
  } else if (fire_shutdown_) {
    t.st = MTimer::St::fired;  // shutdown(fire_pending): its last run
    t.terminal_sched = sched_count_;
  }
}

}  // namespace chime_fuzz::runtime_target
