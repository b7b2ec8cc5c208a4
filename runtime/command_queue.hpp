// SPDX-License-Identifier: BSL-1.0
// runtime/command_queue.hpp: the lock-free queue that carries commands from
// producer threads to the wheel thread.
//
// What this is: a multi-producer, single-consumer queue of small trivially
// copyable `Command`s: moodycamel::ConcurrentQueue (per producer
// sub-queues, producer tokens). Who may touch it: any thread pushes; only
// the wheel thread pops.
//
// Guarantees:
// - Per-producer FIFO: commands pushed by one thread (or through one
//   ProducerQueueToken) are popped in the order pushed (moodycamel keeps
//   each sub-queue in order).
// - Across producers there is no order, but a command whose push
//   happens-before a pop attempt is seen by that attempt or an earlier one;
//   the wheel thread relies only on this (it drains until empty).
// - Push is lock-free; it may allocate when the queue outgrows its blocks
//   (moodycamel recycles blocks, so steady state does not allocate).
//
// Memory ordering: push is a release and pop an acquire (moodycamel), so
// everything a producer wrote before pushing (the slot's fields and its state
// word) is visible to the wheel thread when it pops the command.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include <concurrentqueue/concurrentqueue.h>

#include "chime/runtime.hpp"
#include "timer_slab.hpp"
#include "tuning.hpp"

namespace chime::detail {

enum class CommandKind : std::uint8_t {
  add,         // a new timer: file it at its due time (due now if at or before the clock's time)
  rearm,       // a periodic timer's next run (F2): file it at its due time (the interval rule)
  reschedule,  // a due time moved earlier: re-file it
  flush,       // Runtime::flush: `request` is a FlushRequest*
  drain,       // Runtime::drain: `request` is a DrainRequest*
  stop,        // Runtime::shutdown: `request` is a StopRequest*
  close_lane,  // a Lane is destroyed: `request` is a CloseLaneRequest*
  check,       // Runtime::check_invariants: `request` is a CheckRequest*
  next_due,    // Runtime::next_due: `request` is a NextDueRequest*
};

struct Command {
  CommandKind kind;
  // add, reschedule: called_at_ns holds the runtime clock's time read in the
  // call that posted it. Not set: a timer command posted on the steady clock
  // without a clock read (schedule_at); the wheel thread judges "due now" by
  // its own read at application, which is later, so never earlier
  // (design.md). A flag, not a sentinel time: every int64 is a reading some
  // clock can give (a ManualClock at TimePoint::min(): fuzz input
  // regression-sim_clock_at_min).
  bool clock_read;
  std::uint32_t slot;
  std::uint32_t generation;
  union {
    void* request;              // flush, drain, stop, close_lane, check: the request
    std::int64_t called_at_ns;  // add, reschedule, if clock_read: the clock's time in the call that posted it
  };

  static Command timer(CommandKind kind, std::uint32_t slot, std::uint32_t generation,
                       std::optional<std::int64_t> called_at_ns = std::nullopt) noexcept {
    Command c{kind, called_at_ns.has_value(), slot, generation, {nullptr}};
    c.called_at_ns = called_at_ns.value_or(0);
    return c;
  }
  static Command for_request(CommandKind kind, void* request) noexcept { return Command{kind, false, 0, 0, {request}}; }
  // The clock reading the call carried, if any.
  std::optional<std::int64_t> called_at() const noexcept {
    return clock_read ? std::optional<std::int64_t>(called_at_ns) : std::nullopt;
  }
};
static_assert(std::is_trivially_copyable_v<Command>);
static_assert(sizeof(Command) == 24, "the flag fits in the padding after kind");

// What a chime::Producer keeps per thread: its token for the queue
// (moodycamel's ProducerToken, made by CommandQueue::make_token) and its cache of
// free slots (timer_slab.hpp), which ProducerOps::return_token gives back.
struct ProducerQueueToken {
  explicit ProducerQueueToken(moodycamel::ConcurrentQueue<Command>& queue) : token(queue) {}
  moodycamel::ProducerToken token;
  SlotCache slots;
  unsigned shard = 0;  // the shard whose queue `token` is for (Shards::make_token)
};

// The queue's bound (design.md, "Overload"; RuntimeOptions::max_queue_depth)
// and what producers learn of it. Part of the queue, so of the shard that
// owns the queue. The depth itself is the queue's own count (size_approx:
// moodycamel reads each sub-queue's head and tail indices), looked at by
// each posting thread at its first post to the shard and then every
// kPostsPerLook of its posts, whatever it posts through (command_poster.cpp,
// PostPacer), never on the wheel thread.
//
// Who writes what:
// - bound_: the constructor, before any thread starts.
// - over_bound_: any poster, when it looks (look()): a thread's first post
//   and every kPostsPerLook-th after it, and before refusing a schedule; stored
//   only when it changes. Every schedule reads it.
// - refused_: a schedule refused for overload (fetch_add; the cold path).
//
// The bound: a schedule refuses while over_bound_ is set and a fresh look
// confirms it. A thread that finds the flag clear posts at most
// kPostsPerLook - 1 commands before its own next look, so the queue exceeds
// the bound by at most kPostsPerLook per posting thread, however many
// Producers it makes, keeps or drops (the count is the thread's), plus
// posts a look could not see yet: the commands in flight from producers at
// that instant.
//
// Memory ordering: all relaxed (and moodycamel's size_approx reads its
// indices relaxed). Nothing is published through the flag or the count (a
// command's fields travel with the command: the queue's release / acquire),
// so no happens-before is needed with anything. What the bound needs,
// relaxed atomics give: every index only grows and is one location, so a
// look never reads one going back (coherence), a thread sees its own posts
// (program order), and every post becomes visible to later looks. A look
// mixes indices read at slightly different instants; posts and pops go on
// meanwhile, so no order between its loads would make it exact. A post not
// yet visible makes it low by that post (in flight, above); a pop not yet
// visible makes it high, so a schedule at the edge may be refused slightly
// early, never accepted late. A flag store not yet visible to a producer
// delays its refusal to its own next look, which the bound above allows.
class QueueBound {
 public:
  // A producer looks at the depth every this many of its posts.
  static constexpr std::uint32_t kPostsPerLook = 64;

  // 0 or SIZE_MAX: no bound (over_bound() stays false).
  void set(std::size_t bound) noexcept { bound_ = bound == 0 ? SIZE_MAX : bound; }
  std::size_t bound() const noexcept { return bound_; }

  // Whether the last look found the queue at or over its bound. Any thread.
  bool over_bound() const noexcept { return over_bound_.load(std::memory_order_relaxed); }

  // Sets over_bound() to whether `depth`, just counted, is at or over the
  // bound; returns it. Any thread.
  bool look(std::size_t depth) noexcept {
    const bool over = depth >= bound_;
    // Stored only on a change: the flag's line stays shared in every
    // producer's cache while nothing changes.
    if (over != over_bound_.load(std::memory_order_relaxed)) over_bound_.store(over, std::memory_order_relaxed);
    return over;
  }

  void count_refusal() noexcept { refused_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

 private:
  // Read by every schedule, written on a change only: its own line, beside
  // the configuration.
  alignas(64) std::atomic<bool> over_bound_{false};
  std::size_t bound_ = SIZE_MAX;
  alignas(64) std::atomic<std::uint64_t> refused_{0};
};

class CommandQueue {
 public:
  // moodycamel starts with a pool of blocks for kInitialCapacity commands
  // (tuning.hpp, CHIME_COMMAND_QUEUE_INITIAL_CAPACITY).
  static constexpr std::size_t kInitialCapacity = CHIME_COMMAND_QUEUE_INITIAL_CAPACITY;

  CommandQueue() : moodycamel_(kInitialCapacity) {}

  std::unique_ptr<ProducerQueueToken> make_token() { return std::make_unique<ProducerQueueToken>(moodycamel_); }

  // Any thread. Lock-free. May allocate; returns false, having queued
  // nothing, if it could not (out of memory).
  [[nodiscard]] bool try_push(const Command& c, ProducerQueueToken* token) noexcept {
    return token != nullptr ? moodycamel_.enqueue(token->token, c) : moodycamel_.enqueue(c);
  }

  // For commands that must not be lost: retries every millisecond until
  // memory is available again. Blocks the caller only while out of memory.
  void push_retrying(const Command& c, ProducerQueueToken* token) noexcept {
    retry_until_memory([&]() noexcept { return try_push(c, token); });
  }

  // Wheel thread only. Pops up to `max` commands into out; returns how many.
  std::size_t pop_bulk(Command* out, std::size_t max) {
    if (!consumer_) consumer_.emplace(moodycamel_);
    return moodycamel_.try_dequeue_bulk(*consumer_, out, max);
  }

  // Approximate number of queued commands. Any thread. O(producers)
  // (moodycamel sums its sub-queues; the wheel thread's look before it
  // sleeps, (P2), reads it too): never per schedule, only at a
  // producer's look (QueueBound) and in stats().
  std::size_t size_approx() const { return moodycamel_.size_approx(); }

  // Its bound (QueueBound). Any thread.
  QueueBound& bound() noexcept { return bound_; }
  const QueueBound& bound() const noexcept { return bound_; }

 private:
  moodycamel::ConcurrentQueue<Command> moodycamel_;
  std::optional<moodycamel::ConsumerToken> consumer_;
  QueueBound bound_;
};

}  // namespace chime::detail
