// SPDX-License-Identifier: BSL-1.0
// runtime/runtime.cpp: chime::Runtime and chime::Producer (include/chime/
// runtime.hpp): thin forwards to RuntimeCore (runtime_core.cpp).
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "chime/lane.hpp"
#include "runtime_core.hpp"
#include "simulation.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define CHIME_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHIME_LSAN 1
#endif
#endif
#ifndef CHIME_LSAN
#define CHIME_LSAN 0
#endif
#if CHIME_LSAN
#include <sanitizer/lsan_interface.h>
#endif

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

// ---- chime::Producer ----

namespace detail {
namespace {
// A Producer outliving its runtime: the token's queue (and slot slab) went
// with the runtime, and its destructor would touch the freed queue, so it is
// leaked (a few hundred bytes, once per such misuse), on purpose.
void leak_token(std::unique_ptr<ProducerQueueToken>& token) noexcept {
  [[maybe_unused]] ProducerQueueToken* const leaked = token.release();
#if CHIME_LSAN
  __lsan_ignore_object(leaked);  // not a leak to report
#endif
}
}  // namespace
}  // namespace detail

Producer::Producer(detail::RuntimeCore* core, std::unique_ptr<detail::ProducerQueueToken> token)
    : core_(core), token_(std::move(token)), alive_(core->alive()) {}
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&& other) noexcept {
  if (this != &other) {
    if (token_) {
      if ((*alive_)()) {
        core_->producer_ops().return_token(*token_);
      } else {
        detail::leak_token(token_);
      }
    }
    core_ = other.core_;
    token_ = std::move(other.token_);
    alive_ = std::move(other.alive_);
  }
  return *this;
}
Producer::~Producer() {
  if (!token_) return;
  if ((*alive_)()) {
    core_->producer_ops().return_token(*token_);
  } else {
    detail::leak_token(token_);
  }
}

void Producer::fail(const char* what) const {
  if (!token_) {
    throw std::logic_error(std::string("chime::Producer::") + what + " on a moved-from Producer");
  }
  detail::throw_runtime_gone("Producer");
}

TimerId Producer::schedule_at(TimePoint due, Task task, std::optional<Duration> slack) {
  detail::RuntimeCore& c = core("schedule_at");
  return c.producer_ops().schedule(due, 0, Missed::skip, std::move(task), token_.get(), nullptr, 0,
                                   c.producer_ops().slack_code(slack, "schedule_at"));
}
TimerId Producer::schedule_after(Duration delay, Task task, std::optional<Duration> slack) {
  detail::RuntimeCore& c = core("schedule_after");
  return c.producer_ops().schedule(detail::saturating_after(c.now(), delay), 0, Missed::skip, std::move(task),
                                   token_.get(), nullptr, 0,
                                   c.producer_ops().slack_code_after(slack, delay, "schedule_after"));
}

namespace detail {
TimerId schedule_periodic(RuntimeCore& core, Duration period, Task&& task, const PeriodicOptions& options,
                          ProducerQueueToken* token, LaneCore* lane, std::optional<Duration> slack) {
  const std::uint8_t slack_code = core.producer_ops().slack_code(slack, "schedule_every");
  if (period <= Duration::zero()) {
    throw std::invalid_argument("chime: schedule_every needs a positive period, got " + std::to_string(period.count()) +
                                " ns");
  }
  const TimePoint first = options.first_due ? *options.first_due : detail::saturating_after(core.now(), period);
  return core.producer_ops().schedule(first, period.count(), options.on_missed, std::move(task), token, lane, 0,
                                      slack_code);
}
}  // namespace detail

using detail::schedule_periodic;

TimerId Producer::schedule_every(Duration period, Task task, PeriodicOptions options, std::optional<Duration> slack) {
  return schedule_periodic(core("schedule_every"), period, std::move(task), options, token_.get(), nullptr, slack);
}
bool Producer::cancel(TimerId id) { return core("cancel").producer_ops().cancel(id, token_.get()); }
CancelResult Producer::try_cancel(TimerId id) { return core("try_cancel").producer_ops().try_cancel(id); }
CancelResult Producer::cancel_and_wait(TimerId id) {
  return core("cancel_and_wait").producer_ops().cancel_and_wait(id);
}
bool Producer::reschedule_at(TimerId id, TimePoint due) {
  return core("reschedule_at").producer_ops().reschedule(id, due, token_.get());
}
bool Producer::reschedule_after(TimerId id, Duration delay) {
  detail::RuntimeCore& c = core("reschedule_after");
  return c.producer_ops().reschedule(id, detail::saturating_after(c.now(), delay), token_.get());
}

// ---- chime::Runtime ----

Runtime::Runtime() : Runtime(Options{}) {}
Runtime::Runtime(Options options) : core_(std::make_unique<detail::RuntimeCore>(std::move(options))) {}
Runtime::~Runtime() = default;

TimerId Runtime::schedule_at(TimePoint due, Task task, std::optional<Duration> slack) {
  return core_->producer_ops().schedule(due, 0, Missed::skip, std::move(task), nullptr, nullptr, 0,
                                        core_->producer_ops().slack_code(slack, "schedule_at"));
}
TimerId Runtime::schedule_after(Duration delay, Task task, std::optional<Duration> slack) {
  return core_->producer_ops().schedule(detail::saturating_after(core_->now(), delay), 0, Missed::skip, std::move(task),
                                        nullptr, nullptr, 0,
                                        core_->producer_ops().slack_code_after(slack, delay, "schedule_after"));
}
TimerId Runtime::schedule_every(Duration period, Task task, PeriodicOptions options, std::optional<Duration> slack) {
  return schedule_periodic(*core_, period, std::move(task), options, nullptr, nullptr, slack);
}
bool Runtime::cancel(TimerId id) { return core_->producer_ops().cancel(id, nullptr); }
CancelResult Runtime::try_cancel(TimerId id) { return core_->producer_ops().try_cancel(id); }
CancelResult Runtime::cancel_and_wait(TimerId id) { return core_->producer_ops().cancel_and_wait(id); }
bool Runtime::reschedule_at(TimerId id, TimePoint due) { return core_->producer_ops().reschedule(id, due, nullptr); }
bool Runtime::reschedule_after(TimerId id, Duration delay) {
  return core_->producer_ops().reschedule(id, detail::saturating_after(core_->now(), delay), nullptr);
}
TimerState Runtime::state(TimerId id) const noexcept { return core_->producer_ops().state(id); }
void Runtime::flush() { core_->flush(); }
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
