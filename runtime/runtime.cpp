// SPDX-License-Identifier: BSL-1.0
// runtime/runtime.cpp: chime::Runtime (include/chime/runtime.hpp): thin
// forwards to RuntimeCore (runtime_core.cpp), the timer operations of
// Runtime, Producer and Lane (detail::TimerOperations), and the free
// helpers the public classes share (saturating_after).
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "chime/lane.hpp"
#include "lane_token.hpp"
#include "runtime_core.hpp"
#include "simulation.hpp"

namespace chime {
namespace detail {

// now + delay, saturating at the ends of time (the range check then rejects it).
TimePoint saturating_after(TimePoint now, Duration delay) {
  const std::int64_t n = now.time_since_epoch().count();
  const std::int64_t d = delay.count();
  if (d > 0 && n > INT64_MAX - d) return TimePoint::max();
  if (d < 0 && n < INT64_MIN - d) return TimePoint::min();
  return now + delay;
}

void throw_runtime_gone(const char* what) {
  throw std::logic_error(std::string("chime::") + what +
                         " after its Runtime was destroyed (a Producer, Timer, Lane or KeyedTimers must not "
                         "outlive its Runtime)");
}

}  // namespace detail

namespace detail {

// ---- The timer operations of Runtime, Producer and Lane (TimerOperations) ----
//
// A lane's calls post through the lane's own token (lane_token.hpp): taken
// here, for the call. A Lane's reschedule on the lane's thread may take its
// ready run back (R4, producer_ops.cpp): it passes its lane.

namespace {
// Calls f with the token a call posts through: the Producer's, none (the
// calling thread's shard's), or the lane's own, taken for the call.
template <class F>
decltype(auto) with_token(const OpsTarget& t, F&& f) {
  if (t.lane == nullptr || t.token != nullptr) [[likely]]
    return f(t.token);
  const LaneToken token(*t.lane);
  return f(token.get());
}
}  // namespace

TimerId ops_schedule_at(const OpsTarget& t, TimePoint due, Task&& task, const ScheduleOptions& options) {
  const std::uint8_t slack_code = t.core->config().slack_code(options.slack, "schedule_at");
  return with_token(t, [&](ProducerQueueToken* token) {
    return t.core->producer_ops().schedule({.due = due, .slack_code = slack_code, .lane = t.lane}, std::move(task),
                                           token);
  });
}

TimerId ops_schedule_after(const OpsTarget& t, Duration delay, Task&& task, const ScheduleOptions& options) {
  const std::uint8_t slack_code = t.core->config().slack_code_after(options.slack, delay, "schedule_after");
  return with_token(t, [&](ProducerQueueToken* token) {
    return t.core->producer_ops().schedule(
        {.due = saturating_after(t.core->now(), delay), .slack_code = slack_code, .lane = t.lane}, std::move(task),
        token);
  });
}

TimerId ops_schedule_every(const OpsTarget& t, Duration period, Task&& task, const PeriodicOptions& options) {
  const std::uint8_t slack_code = t.core->config().slack_code(options.slack, "schedule_every");
  if (period <= Duration::zero()) {
    throw std::invalid_argument("chime: schedule_every needs a positive period, got " + std::to_string(period.count()) +
                                " ns");
  }
  const TimePoint first = options.first_due ? *options.first_due : saturating_after(t.core->now(), period);
  return with_token(t, [&](ProducerQueueToken* token) {
    return t.core->producer_ops().schedule({.due = first,
                                            .period_ns = period.count(),
                                            .on_missed = options.on_missed,
                                            .slack_code = slack_code,
                                            .lane = t.lane},
                                           std::move(task), token);
  });
}

// One CAS, no command; the token only takes back the slot of a timer
// cancelled before the wheel thread filed it.
bool ops_cancel(const OpsTarget& t, TimerId id) {
  return with_token(t, [&](ProducerQueueToken* token) { return t.core->producer_ops().cancel(id, token); });
}
CancelResult ops_try_cancel(const OpsTarget& t, TimerId id) { return t.core->producer_ops().try_cancel(id); }
CancelResult ops_cancel_and_wait(const OpsTarget& t, TimerId id) { return t.core->producer_ops().cancel_and_wait(id); }

bool ops_reschedule_at(const OpsTarget& t, TimerId id, TimePoint due) {
  return with_token(
      t, [&](ProducerQueueToken* token) { return t.core->producer_ops().reschedule(id, due, token, t.lane); });
}
bool ops_reschedule_after(const OpsTarget& t, TimerId id, Duration delay) {
  return with_token(t, [&](ProducerQueueToken* token) {
    return t.core->producer_ops().reschedule(id, saturating_after(t.core->now(), delay), token, t.lane);
  });
}
TimerState ops_state(const OpsTarget& t, TimerId id) noexcept { return t.core->producer_ops().state(id); }

}  // namespace detail

// ---- chime::Runtime ----

Runtime::Runtime() : Runtime(Options{}) {}
Runtime::Runtime(Options options) : core_(std::make_unique<detail::RuntimeCore>(std::move(options))) {}
Runtime::~Runtime() = default;

void Runtime::flush() { core_->flush(); }
std::optional<TimePoint> Runtime::next_due() { return core_->next_due(); }

namespace {
// The runtime's ManualClock, for the calls that step it; std::logic_error naming `what` on any other clock.
ManualClock& manual_clock_of(const detail::RuntimeCore& core, const char* what) {
  auto* clock = dynamic_cast<ManualClock*>(core.config().options.clock);
  if (clock == nullptr) {
    throw std::logic_error(std::string("chime::Runtime::") + what +
                           ": the runtime's clock is not a ManualClock; only a ManualClock is stepped by the runtime");
  }
  return *clock;
}
// One step: the clock to `next` if it is later, then a flush. Returns the reading flushed at.
TimePoint step_to(detail::RuntimeCore& core, ManualClock& clock, TimePoint next) {
  if (next > clock.now()) clock.set(next);
  const TimePoint reading = clock.now();
  core.flush();
  return reading;
}
}  // namespace

std::optional<TimePoint> Runtime::advance_to_next() {
  ManualClock& clock = manual_clock_of(*core_, "advance_to_next");
  const std::optional<TimePoint> next = core_->next_due();
  if (!next) return std::nullopt;
  return step_to(*core_, clock, *next);
}

std::size_t Runtime::run_until(TimePoint t) {
  ManualClock& clock = manual_clock_of(*core_, "run_until");
  if (t < clock.now()) {
    throw std::invalid_argument("chime::Runtime::run_until: " + std::to_string(t.time_since_epoch().count()) +
                                " ns is before the clock's reading " +
                                std::to_string(clock.now().time_since_epoch().count()) + " ns");
  }
  std::size_t steps = 0;
  for (std::optional<TimePoint> next = core_->next_due(); next && *next <= t; next = core_->next_due()) {
    step_to(*core_, clock, *next);
    ++steps;
  }
  step_to(*core_, clock, t);
  return steps + 1;
}

std::size_t Runtime::run_until_idle(std::size_t max_steps) {
  manual_clock_of(*core_, "run_until_idle");
  std::size_t steps = 0;
  while (steps < max_steps && advance_to_next()) ++steps;
  return steps;
}
std::size_t Runtime::drain() { return core_->drain(); }
std::size_t Runtime::shutdown(ShutdownMode mode) { return core_->shutdown(mode); }
Producer Runtime::producer() { return Producer(core_.get(), core_->shards().make_token()); }
Lane Runtime::lane() { return Lane(core_.get(), core_->lanes().open_lane(), core_->alive()); }
Stats Runtime::stats() const { return core_->stats(); }
std::shared_ptr<const detail::RuntimeAlive> Runtime::alive_token() const { return core_->alive(); }
void Runtime::check_invariants() { core_->check_invariants(); }
const Clock& Runtime::clock() const noexcept { return core_->clock(); }
Duration Runtime::precision() const noexcept { return core_->precision(); }

}  // namespace chime
