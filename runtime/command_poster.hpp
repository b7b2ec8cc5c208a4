// SPDX-License-Identifier: BSL-1.0
// runtime/command_poster.hpp: how a thread other than a shard's wheel thread
// posts to that shard (a producer's schedule, reschedule or cancel; a worker
// or a lane re-arming a periodic timer).
//
// What this is: the post, the (P1) fence, the wake-up of a sleeping wheel
// thread whose next alarm comes after the command's due time, the per-thread
// pacing of the looks at the queue's depth and of the count-wakes, and the
// refusal of a schedule while the queue is at its bound (Overload,
// command_queue.hpp). It holds no state of its own but whether this
// runtime's clock lets a count of posts wake the wheel thread; each shard's
// seam (shard_seam.hpp) holds what posters share, and each thread its own
// post counts (command_poster.cpp, PostPacer).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "command_queue.hpp"
#include "shard_seam.hpp"

namespace chime::detail {

// Each thread's count of its posts to each shard, whatever it posts through
// (the Runtime's calls, any number of Producers, made and dropped, a Lane,
// a Timer): the queue's bound and the count-wake are per posting thread, so
// the count is too. Two ways per set, by the shard's serial (the most
// recent first): a thread that alternates among more than two shards whose
// serials fall in one set (the serials of one Runtime's shards are
// consecutive, so it takes 65 shards or three Runtimes made 32 apart)
// starts over on the one it switches to, which only makes it look sooner
// (a fresh entry looks at its first post).
struct PostPacer {
  static constexpr std::size_t kSets = 32;
  struct Entry {
    std::uint32_t serial = 0;  // ShardSeam::serial; 0: unused
    std::uint32_t posts = 0;   // this thread's posts to it
  };
  std::array<Entry, 2 * kSets> entries{};

  std::uint32_t& posts_to(const ShardSeam& shard) noexcept {
    Entry* set = &entries[2 * (shard.serial % kSets)];
    if (set[0].serial == shard.serial) [[likely]]
      return set[0].posts;
    if (set[1].serial == shard.serial) {
      std::swap(set[0], set[1]);
    } else {
      set[1] = set[0];
      set[0] = Entry{shard.serial, 0};
    }
    return set[0].posts;
  }
};
// Constant-initialized: a thread_local of it needs no guard on access.
// Trivially destructible: its first use registers no destructor (glibc
// registers one with calloc, and aborts the process if that fails).
inline thread_local PostPacer tls_post_pacer;
static_assert(std::is_trivially_destructible_v<PostPacer>);

class CommandPoster {
 public:
  // `wake_on_post_count`: RuntimeConfig::wake_on_post_count.
  explicit CommandPoster(bool wake_on_post_count) noexcept : wake_on_post_count_(wake_on_post_count) {}

  // For commands that must arrive (a re-arm, a reschedule to an earlier due):
  // out of memory, it retries until the queue can take it.
  void post_and_wake(ShardSeam& shard, const Command& c, ProducerQueueToken* token, std::int64_t due_ns) const;
  // (P1) then wake_after_fence: for a caller that has posted `due_ns`'s command.
  void wake_after_post(ShardSeam& shard, std::int64_t due_ns) const;
  // The rest of wake_after_post, for a caller that has just made the (P1)
  // fence itself (schedule, whose fence also serves S1's pair with shutdown).
  //
  // Inline: on every schedule's path (see command_poster.cpp for the pacing).
  void wake_after_fence(ShardSeam& shard, std::int64_t due_ns) const {
    std::int64_t bound = shard.wake_if_due_before_ns.load(std::memory_order_relaxed);
    if (due_ns < bound &&
        shard.wake_if_due_before_ns.compare_exchange_strong(bound, INT64_MIN, std::memory_order_relaxed)) {
      shard.wake.wake();
    }
    if ((tls_post_pacer.posts_to(shard)++ & (QueueBound::kPostsPerLook - 1)) == 0) [[unlikely]]
      look_and_credit(shard);
  }
  // Throws CapacityError while the shard's queue is at its bound.
  void refuse_if_over_bound(ShardSeam& shard) const;

  // A request for the shard's wheel thread (flush, drain, stop, close_lane,
  // check: `request` its object), queued and the thread woken.
  static void post_request(ShardSeam& shard, CommandKind kind, void* request);
  // The same for flush and drain: out of memory for kOutOfMemoryTimeout,
  // throws std::bad_alloc having queued nothing.
  static void post_request_or_throw(ShardSeam& shard, CommandKind kind, void* request);

 private:
  void look_and_credit(ShardSeam& shard) const;
  static bool take_wake(ShardSeam& shard) noexcept;

  const bool wake_on_post_count_;
};

}  // namespace chime::detail
