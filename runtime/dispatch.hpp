// SPDX-License-Identifier: BSL-1.0
// runtime/dispatch.hpp: the record of one claimed run, as the wheel thread
// hands it to a worker or to a lane's ready queue (state Handed until the
// run starts: B1). Trivially copyable: it travels through lock-free queues.
//
// A record names its claim by the slot's generation and version at the claim
// (W1). A reschedule on a lane's thread may take a run back from the lane's
// ready queue (R4, timer_state.hpp), which bumps the version: the record
// left in the queue then no longer matches the word (StateWord::holds_claim)
// and whoever dequeues it skips it without touching the slot.
#pragma once

#include <cstdint>
#include <type_traits>

namespace chime::detail {

// A claimed run, handed from the wheel thread to a worker (state Handed
// until the worker starts it: B1).
struct Dispatch {
  enum Flags : std::uint8_t {
    none = 0,
    drained = 1,   // run early by drain()/shutdown(fire_pending): no lateness sample
    keep_due = 2,  // periodic drained run: the schedule is not advanced
    final = 4,     // shutdown(fire_pending): a periodic timer is not re-armed
    stop = 8,      // not a run: the worker exits
  };
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  std::int64_t due_ns = 0;
  std::int64_t fired_at_ns = 0;
  std::uint64_t missed = 0;
  std::uint32_t version = 0;  // the state word's version at the claim (W1): see above
  std::uint8_t flags = none;
  std::uint8_t shard = 0;  // the shard that claimed it (ShardSeam::index): whose seam.completed it counts in
};
static_assert(sizeof(Dispatch) == 40, "the shard fits in the padding after flags");
static_assert(std::is_trivially_copyable_v<Dispatch>);

}  // namespace chime::detail
