// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/schedule_ops.hpp: RuntimeFuzz: schedule_at,
// schedule_after and schedule_every through the Runtime or a Producer, and
// the check of each outcome (accepted, StoppedError, out_of_range,
// CapacityError, invalid_argument) against the model, in the documented
// order. Part of the runtime fuzz target; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

inline chime::Task RuntimeFuzz::make_task(std::size_t tag, bool big) {
  if (big) return BigCallback{Callback{this, tag}, {}};
  return Callback{this, tag};
}

inline const char* RuntimeFuzz::outcome_name(Outcome o) {
  switch (o) {
    case Outcome::accepted: return "accepted";
    case Outcome::stopped: return "StoppedError";
    case Outcome::out_of_range: return "out_of_range";
    case Outcome::capacity: return "CapacityError";
    default: return "invalid_argument";
  }
}

// Runs one schedule call and classifies what happened.
template <class F>
RuntimeFuzz::Outcome RuntimeFuzz::attempt(F&& f, TimerId& id) {
  try {
    id = f();
    return Outcome::accepted;
  } catch (const chime::StoppedError&) {
    return Outcome::stopped;
  } catch (const chime::CapacityError&) {
    return Outcome::capacity;
  } catch (const std::out_of_range&) {
    return Outcome::out_of_range;
  } catch (const std::invalid_argument&) {
    return Outcome::invalid;
  }
}

// Checks a schedule's outcome against the model; registers the timer if accepted.
inline void RuntimeFuzz::schedule_outcome(const char* what, Outcome got, TimerId id, i128 due, bool periodic, Missed on_missed,
                      i128 period, Action action, std::size_t tag, bool period_invalid) {
  std::size_t definite = 0, possible = 0;
  live_bounds(definite, possible);
  // Expected, in the documented order: StoppedError, out_of_range, CapacityError.
  if (period_invalid) {
    // schedule_every checks its period first (before StoppedError: the contract does not order these two).
    FUZZ_CHECK(got == Outcome::invalid || (stopped_ && got == Outcome::stopped),
               what << ": period " << static_cast<std::int64_t>(period) << " gave " << outcome_name(got));
    return;
  }
  if (stopped_) {
    FUZZ_CHECK(got == Outcome::stopped, what << " after shutdown gave " << outcome_name(got));
    return;
  }
  if (due >= limit()) {
    FUZZ_CHECK(got == Outcome::out_of_range, what << ": due " << static_cast<std::int64_t>(due) << " >= limit "
                                                  << static_cast<std::int64_t>(limit()) << " gave "
                                                  << outcome_name(got));
    return;
  }
  if (max_pending_ != 0 && definite >= max_pending_) {
    FUZZ_CHECK(got == Outcome::capacity, what << ": " << definite << " timers certainly pending, max_pending "
                                              << max_pending_ << ", gave " << outcome_name(got));
    return;
  }
  if (max_pending_ == 0 || possible < max_pending_) {
    FUZZ_CHECK(got == Outcome::accepted, what << ": due " << static_cast<std::int64_t>(due) << " (limit "
                                              << static_cast<std::int64_t>(limit()) << ", " << possible
                                              << " possibly pending) gave " << outcome_name(got));
  } else {
    FUZZ_CHECK(got == Outcome::accepted || got == Outcome::capacity, what << " gave " << outcome_name(got));
  }
  if (got != Outcome::accepted) return;
  FUZZ_CHECK(static_cast<bool>(id), what << " returned an invalid TimerId");
  if (tag_ == 0) tag_ = id.runtime();
  FUZZ_CHECK(id.runtime() != 0 && id.runtime() == tag_,
             what << " returned an id tagged " << id.runtime() << ", the runtime's earlier ids " << tag_);
  for (const MTimer& t : timers_) {
    if (t.id == id) FUZZ_CHECK(t.st != MTimer::St::pending, what << " returned the id of a pending timer");
  }
  ++sched_count_;
  ++accepted_;
  MTimer t;
  t.id = id;
  t.periodic = periodic;
  t.on_missed = on_missed;
  t.period = static_cast<std::int64_t>(period);
  t.due = static_cast<std::int64_t>(due);
  t.action = action;
  FUZZ_CHECK(tag == timers_.size(), "tag bookkeeping");
  timers_.push_back(t);
}

// Reserves a tag (and its action, which the callback reads) for a timer about to be scheduled.
inline std::size_t RuntimeFuzz::reserve_tag(Action action) {
  std::lock_guard<std::mutex> lock(mu_);
  actions_.push_back(action);
  return actions_.size() - 1;
}

inline void RuntimeFuzz::release_tag() {
  std::lock_guard<std::mutex> lock(mu_);
  actions_.pop_back();
}

inline void RuntimeFuzz::op_schedule_at() {
  const i128 due = pick_due();
  const Action action = pick_action();
  const std::uint8_t how = in_.u8();
  const Via via = lane_mode_ ? Via::lane : (how & 1) ? Via::producer : Via::runtime;
  const bool big = (how & 6) == 6;
  const std::int64_t d = clamp64(due);
  FUZZ_TRACE("schedule_at due=" << d << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                                << ") action=" << int(action) << (via == Via::producer ? " via producer" : "")
                                << (big ? " big task" : ""));
  const std::size_t tag = reserve_tag(action);
  TimerId id;
  const Outcome got = attempt(
      [&] {
        return via == Via::lane       ? lane_->schedule_at(T(d), make_task(tag, big))
               : via == Via::producer ? producer_->schedule_at(T(d), make_task(tag, big))
                                      : rt_->schedule_at(T(d), make_task(tag, big));
      },
      id);
  if (got != Outcome::accepted) release_tag();
  schedule_outcome("schedule_at", got, id, d, false, Missed::skip, 0, action, tag, false);
}

inline void RuntimeFuzz::op_schedule_after() {
  const i128 delay = pick_delay();
  const Action action = pick_action();
  const Via via = in_.flag() ? Via::producer : Via::runtime;
  const std::int64_t dl = clamp64(delay);
  const bool on_lane = lane_mode_;
  FUZZ_TRACE("schedule_after delay=" << dl << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                                     << ") action=" << int(action));
  const std::size_t tag = reserve_tag(action);
  TimerId id;
  const Outcome got = attempt(
      [&] {
        return on_lane                ? lane_->schedule_after(Duration{dl}, make_task(tag, false))
               : via == Via::producer ? producer_->schedule_after(Duration{dl}, make_task(tag, false))
                                      : rt_->schedule_after(Duration{dl}, make_task(tag, false));
      },
      id);
  if (got != Outcome::accepted) release_tag();
  // now + delay saturates at the ends of time (runtime.cpp).
  schedule_outcome("schedule_after", got, id, clamp64(static_cast<i128>(c_) + dl), false, Missed::skip, 0, action,
                   tag, false);
}

inline void RuntimeFuzz::op_schedule_every() {
  const i128 period = pick_period();
  const bool has_first = in_.flag();
  const i128 first = has_first ? pick_due() : 0;
  const std::uint8_t m = in_.u8();
  const Missed on_missed = (m & 1) ? Missed::catch_up : (m & 2) ? Missed::delay : Missed::skip;
  const Action action = pick_action();
  const Via via = in_.flag() ? Via::producer : Via::runtime;
  const std::int64_t per = clamp64(period);
  const std::int64_t f = clamp64(first);
  const bool period_invalid = per <= 0;
  const i128 due = has_first ? i128{f} : clamp64(c_ + i128{per});  // saturating, as schedule_after
  if (!period_invalid) {
    // Bound the work: the runs it makes at the next flush (at the clock's time at least) must fit in the
    // budget.
    const i128 now_runs = on_missed == Missed::catch_up ? catch_up_runs(due, per, c_) : i128{due <= wheel_at(c_)};
    if (runs_seen_ + runs_at(c_) + now_runs > kMaxRuns) return;
  }
  FUZZ_TRACE("schedule_every period=" << per << " first=" << (has_first ? std::to_string(f) : "default") << " "
                                      << missed_name(on_missed) << " (clock=" << c_
                                      << " limit=" << static_cast<std::int64_t>(limit()) << ") action="
                                      << int(action));
  const std::size_t tag = reserve_tag(action);
  chime::PeriodicOptions po;
  if (has_first) po.first_due = T(f);
  po.on_missed = on_missed;
  TimerId id;
  const Outcome got = attempt(
      [&] {
        return lane_mode_             ? lane_->schedule_every(Duration{per}, make_task(tag, false), po)
               : via == Via::producer ? producer_->schedule_every(Duration{per}, make_task(tag, false), po)
                                      : rt_->schedule_every(Duration{per}, make_task(tag, false), po);
      },
      id);
  if (got != Outcome::accepted) release_tag();
  schedule_outcome("schedule_every", got, id, due, true, on_missed, per, action, tag, period_invalid);
}

}  // namespace chime_fuzz::runtime_target
