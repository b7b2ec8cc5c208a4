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

}  // namespace chime
