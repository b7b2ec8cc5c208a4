// SPDX-License-Identifier: BSL-1.0
// runtime/shards.cpp: which shard a post goes to, and producer tokens
// (shards.hpp).
#include "shards.hpp"

namespace chime::detail {

namespace {
// A thread's number, from a process-wide count, taken the first time the
// thread needs a shard: threads spread over the shards round-robin, in the
// order they first schedule. Relaxed: any spread will do.
std::atomic<unsigned> next_thread_number{0};
unsigned this_thread_number() noexcept {
  thread_local const unsigned number = next_thread_number.fetch_add(1, std::memory_order_relaxed);
  return number;
}
}  // namespace

ShardSeam& Shards::thread_shard() const noexcept {
  if (single_ != nullptr) return *single_;
  return *all_[this_thread_number() % all_.size()];
}

std::unique_ptr<ProducerQueueToken> Shards::make_token() {
  return make_token_on(next_.fetch_add(1, std::memory_order_relaxed) % all_.size());
}

std::unique_ptr<ProducerQueueToken> Shards::make_token_on(unsigned k) {
  std::unique_ptr<ProducerQueueToken> token = all_[k]->commands.make_token();
  token->shard = k;
  return token;
}

}  // namespace chime::detail
