// SPDX-License-Identifier: BSL-1.0
// runtime/producer.cpp: chime::Producer (include/chime/runtime.hpp): thin
// forwards to ProducerOps (producer_ops.cpp) through its token.
#include <memory>
#include <stdexcept>
#include <string>

#include "chime/runtime.hpp"
#include "runtime_core.hpp"

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

using detail::schedule_periodic;

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

}  // namespace chime
