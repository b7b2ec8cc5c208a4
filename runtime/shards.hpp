// SPDX-License-Identifier: BSL-1.0
// runtime/shards.hpp: a runtime's shards as the other roles see them, and
// which one a post goes to.
//
// What this is: the seams (ShardSeam, shard_seam.hpp) of one runtime's
// shards, in index order (design.md, "Shards"), with the choice of a shard
// for a post (a lane's, else the token's, else the calling thread's, chosen
// once per thread round-robin) and the making of producer tokens bound to
// one. The shards themselves (WheelThread, wheel_thread.hpp) are
// RuntimeCore's; producers, runners, lanes and the poster see a shard only
// through its seam. RuntimeCore's constructor fills this before any thread
// starts (add); it never changes after, so any thread reads it without
// synchronization (std::thread's start orders the fill before them).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "command_queue.hpp"
#include "lane_core.hpp"
#include "shard_seam.hpp"

namespace chime::detail {

class Shards {
 public:
  Shards() = default;
  Shards(const Shards&) = delete;
  Shards& operator=(const Shards&) = delete;

  // The constructor's fill, in index order.
  void reserve(std::size_t n) { all_.reserve(n); }
  void add(ShardSeam& shard) {
    all_.push_back(&shard);
    single_ = all_.size() == 1 ? all_[0] : nullptr;
  }

  std::size_t size() const noexcept { return all_.size(); }
  ShardSeam& operator[](std::size_t k) const noexcept { return *all_[k]; }

  // The shard a post goes to: a lane's, else the token's (a Producer's), else
  // the calling thread's (chosen once per thread, round-robin).
  // Inline: on every schedule's path.
  ShardSeam& shard_for(ProducerQueueToken* token, LaneCore* lane) const noexcept {
    if (single_ != nullptr) return *single_;
    if (lane != nullptr) return *all_[lane->shard];
    if (token != nullptr) return *all_[token->shard];
    return thread_shard();
  }
  ShardSeam& thread_shard() const noexcept;
  // The token to post through to `s`: a token bound to another shard's
  // queue cannot be used (null: the calling thread's implicit sub-queue).
  ProducerQueueToken* token_for(const ShardSeam& s, ProducerQueueToken* token) const noexcept {
    return single_ != nullptr || (token != nullptr && token->shard == s.index) ? token : nullptr;
  }
  // A Producer's token: on the next shard, round-robin (design.md, "Shards").
  std::unique_ptr<ProducerQueueToken> make_token();
  // A token on shard k.
  std::unique_ptr<ProducerQueueToken> make_token_on(unsigned k);

 private:
  std::vector<ShardSeam*> all_;
  ShardSeam* single_ = nullptr;    // the only shard when there is one, else null: the hot paths' shortcut
  std::atomic<unsigned> next_{0};  // round-robin for Producers and Lanes; relaxed: any spread will do
};

}  // namespace chime::detail
