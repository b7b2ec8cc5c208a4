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

#include <cstdint>

#include "command_queue.hpp"
#include "wheel_thread.hpp"

namespace chime::detail {

class CommandPoster {
 public:
  // `wake_on_post_count`: RuntimeConfig::wake_on_post_count.
  explicit CommandPoster(bool wake_on_post_count) noexcept : wake_on_post_count_(wake_on_post_count) {}

  // For commands that must arrive (a re-arm, a reschedule to an earlier due):
  // out of memory, it retries until the queue can take it.
  void post_and_wake(WheelThread& shard, const Command& c, ProducerQueueToken* token, std::int64_t due_ns) const;
  // (P1) then wake_after_fence: for a caller that has posted `due_ns`'s command.
  void wake_after_post(WheelThread& shard, std::int64_t due_ns) const;
  // The rest of wake_after_post, for a caller that has just made the (P1)
  // fence itself (schedule, whose fence also serves S1's pair with shutdown).
  void wake_after_fence(WheelThread& shard, std::int64_t due_ns) const;
  // Throws CapacityError while the shard's queue is at its bound.
  void refuse_if_over_bound(WheelThread& shard) const;

  // A request for the shard's wheel thread (flush, drain, stop, close_lane,
  // check: `request` its object), queued and the thread woken.
  static void post_request(WheelThread& shard, CommandKind kind, void* request);
  // The same for flush and drain: out of memory for kOutOfMemoryTimeout,
  // throws std::bad_alloc having queued nothing.
  static void post_request_or_throw(WheelThread& shard, CommandKind kind, void* request);

 private:
  void look_and_credit(WheelThread& shard) const;
  static bool take_wake(WheelThread& shard) noexcept;

  const bool wake_on_post_count_;
};

}  // namespace chime::detail
