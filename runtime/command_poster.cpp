// SPDX-License-Identifier: BSL-1.0
// runtime/command_poster.cpp: posting a command to a shard's queue and
// waking its wheel thread when the command needs it earlier, the queue's
// bound looked at on the way (command_poster.hpp).
#include "command_poster.hpp"

#include <array>
#include <chrono>
#include <new>
#include <string>
#include <utility>

#include "chime/runtime.hpp"
#include "requests.hpp"

namespace chime::detail {

namespace {
// After this many commands posted to a shard since the last count-wake (by
// any threads, counted kPostsPerLook at a time as each thread looks), a
// poster wakes the shard's wheel thread if it sleeps, whatever the due
// times: this bounds the queue (commands that need no earlier wake-up, such
// as ADDs due later than the wheel's next alarm, would otherwise wait for
// that alarm).
constexpr std::uint32_t kPostsPerWake = 1024;
static_assert(kPostsPerWake % QueueBound::kPostsPerLook == 0, "a count-wake falls on a look");

}  // namespace

// Takes the wake-up of a sleeping wheel thread: true for exactly one caller
// per sleep (the CAS moves the published bound to INT64_MIN, "awake"), who
// must then call seam.wake.wake(). Relaxed: the CAS only elects the waker; the
// ordering of the command against the sleeper's look at the queue is the
// (P1)/(P2) fence pair.
bool CommandPoster::take_wake(ShardSeam& shard) noexcept {
  std::int64_t bound = shard.wake_if_due_before_ns.load(std::memory_order_relaxed);
  while (bound != INT64_MIN) {
    if (shard.wake_if_due_before_ns.compare_exchange_weak(bound, INT64_MIN, std::memory_order_relaxed)) return true;
  }
  return false;
}

// (P1) Post, then read the sleeper's bound; the wheel thread publishes the
// bound, then looks at the queue (wheel_thread_sleep.cpp, (P2)). The seq_cst
// fences make it impossible for both to miss the other: either the wheel
// sees the command before sleeping, or we see its bound. We wake it only if
// the timer's interval ends before the wheel's next wake-up (due_ns below
// the bound, the start of the interval of its earliest alarm), and only if
// no other producer took this sleep's wake-up first: a failed take means the
// wheel is awake, or has published a newer bound after our fence, in which
// case its look at the queue (after its (P2)) sees our command.
void CommandPoster::wake_after_post(ShardSeam& shard, std::int64_t due_ns) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P1)
  wake_after_fence(shard, due_ns);
}

// Pacing (wake_after_fence, command_poster.hpp):
// The same per-thread count (PostPacer) paces the thread's looks at the
// queue's depth (Overload, command_queue.hpp, QueueBound): at its first post
// to the shard and then every kPostsPerLook posts, so the hot path keeps
// one increment and one test. At each look the thread credits the shard's
// count-wake with the kPostsPerLook posts it makes from there (in advance:
// a thread that stops posting early has counted them all); the poster whose
// credit reaches kPostsPerWake wakes the wheel thread if it sleeps.
//
// A thread's look (wake_after_fence): the depth, then the credit. Relaxed:
// see seam.posts_toward_wake (shard_seam.hpp). The credit that crosses
// kPostsPerWake takes the count back to zero (credits racing it may be lost:
// at most kPostsPerLook per thread, within the bound's allowance).
void CommandPoster::look_and_credit(ShardSeam& shard) const {
  shard.commands.bound().look(shard.commands.size_approx());
  if (!wake_on_post_count_) return;
  const std::uint32_t before = shard.posts_toward_wake.fetch_add(QueueBound::kPostsPerLook, std::memory_order_relaxed);
  if (before + QueueBound::kPostsPerLook < kPostsPerWake) return;
  shard.posts_toward_wake.store(0, std::memory_order_relaxed);
  if (take_wake(shard)) shard.wake.wake();
}

// For commands that must arrive (a re-arm, a reschedule to an earlier due):
// out of memory, it retries until the queue can take it.
void CommandPoster::post_and_wake(ShardSeam& shard, const Command& c, ProducerQueueToken* token,
                                  std::int64_t due_ns) const {
  shard.commands.push_retrying(c, token);
  wake_after_post(shard, due_ns);
}

// A schedule that found the queue's over_bound flag set: a fresh look
// decides (the wheel thread may have caught up since the flag was set; then
// the look clears it and the schedule goes on). Refused: counted, and a
// sleeping wheel thread is woken, so that a queue filled by posts that did
// not need it earlier (far dues, posted since the last count-wake) is
// drained without waiting for its next alarm (not on a ManualClock, where
// only a flush or a due-now timer wakes it: clock.hpp). Only schedules are
// refused: a cancel and a touch post nothing; a reschedule to an earlier due
// has published its due (R2) before it posts, so refusing its command would
// leave the timer firing at its old, later due while reporting success; a
// periodic re-arm (F2) would silently end a timer that was accepted.
void CommandPoster::refuse_if_over_bound(ShardSeam& shard) const {
  QueueBound& q = shard.commands.bound();
  const std::size_t depth = shard.commands.size_approx();
  if (!q.look(depth)) return;
  q.count_refusal();
  if (wake_on_post_count_ && take_wake(shard)) shard.wake.wake();
  throw CapacityError("chime::Runtime: schedule refused: the command queue of shard " + std::to_string(shard.index) +
                      " holds " + std::to_string(depth) + " commands, max_queue_depth = " + std::to_string(q.bound()) +
                      " (the wheel thread is behind; nothing accepted is dropped)");
}

// Queues a request for a shard's wheel thread and wakes it. (P1): the
// request's push comes before the wake, against the sleeper's look.
void CommandPoster::post_request(ShardSeam& shard, CommandKind kind, void* request) {
  shard.commands.push_retrying(Command::for_request(kind, request), nullptr);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P1)
  shard.wake.wake();
}

void CommandPoster::post_request_or_throw(ShardSeam& shard, CommandKind kind, void* request) {
  const Command c = Command::for_request(kind, request);
  const auto give_up = std::chrono::steady_clock::now() + kOutOfMemoryTimeout;
  while (!shard.commands.try_push(c, nullptr)) {
    if (std::chrono::steady_clock::now() >= give_up) throw std::bad_alloc();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P1)
  shard.wake.wake();
}

}  // namespace chime::detail
