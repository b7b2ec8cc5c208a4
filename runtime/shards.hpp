// SPDX-License-Identifier: BSL-1.0
// runtime/shards.hpp: a runtime's shards, and which one a post goes to.
//
// What this is: the WheelThreads of one runtime, in index order (design.md,
// "Shards"), with the choice of a shard for a post (a lane's, else the
// token's, else the calling thread's, chosen once per thread round-robin)
// and the making of producer tokens bound to one. RuntimeCore's constructor
// fills it before any thread starts (add); it never changes after, so any
// thread reads it without synchronization (std::thread's start orders the
// fill before them).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "command_queue.hpp"
#include "lane_core.hpp"
#include "wheel_thread.hpp"

namespace chime::detail {

class Shards {
 public:
  Shards() = default;
  Shards(const Shards&) = delete;
  Shards& operator=(const Shards&) = delete;

  // The constructor's fill, in index order.
  void reserve(std::size_t n) { all_.reserve(n); }
  void add(std::unique_ptr<WheelThread> shard) {
    all_.push_back(std::move(shard));
    single_ = all_.size() == 1 ? all_[0].get() : nullptr;
  }

  std::size_t size() const noexcept { return all_.size(); }
  const std::unique_ptr<WheelThread>& operator[](std::size_t k) const noexcept { return all_[k]; }
  auto begin() const noexcept { return all_.begin(); }
  auto end() const noexcept { return all_.end(); }
  // The only shard when there is one, else null: the hot paths' shortcut.
  WheelThread* single() const noexcept { return single_; }

  // The shard a post goes to: a lane's, else the token's (a Producer's), else
  // the calling thread's (chosen once per thread, round-robin).
  // Inline: on every schedule's path.
  WheelThread& shard_for(ProducerQueueToken* token, LaneCore* lane) const noexcept {
    if (single_ != nullptr) return *single_;
    if (lane != nullptr) return *all_[lane->shard];
    if (token != nullptr) return *all_[token->shard];
    return thread_shard();
  }
  WheelThread& thread_shard() const noexcept;
  // The token to post through to `s`: a token bound to another shard's
  // queue cannot be used (null: the calling thread's implicit sub-queue).
  ProducerQueueToken* token_for(const WheelThread& s, ProducerQueueToken* token) const noexcept {
    return single_ != nullptr || (token != nullptr && token->shard == s.index()) ? token : nullptr;
  }
  // A Producer's token: on the next shard, round-robin (design.md, "Shards").
  std::unique_ptr<ProducerQueueToken> make_token();
  // A token on shard k.
  std::unique_ptr<ProducerQueueToken> make_token_on(unsigned k);

 private:
  std::vector<std::unique_ptr<WheelThread>> all_;
  WheelThread* single_ = nullptr;
  std::atomic<unsigned> next_{0};  // round-robin for Producers and Lanes; relaxed: any spread will do
};

}  // namespace chime::detail
