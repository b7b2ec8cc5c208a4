// runtime/timer_slab.hpp: the slots that hold every timer's state.
//
// What this is: a growable array of TimerSlot addressed by a 32-bit index,
// in chunks that never move, plus a lock-free free list of slot indices.
// Who may touch it: any thread takes (`allocate`) and returns (`release`)
// slots; the fields of a slot follow the ownership rules of timer_state.hpp.
//
// Guarantees:
// - No heap allocation per timer in steady state: released slots are reused
//   first; a new chunk of `chunk_size` slots is allocated (under a mutex) only
//   when none is free.
// - A slot's memory is never freed or moved while the slab lives, so a stale
//   TimerId always reads a valid atomic word (and then fails its generation
//   check): never a dangling pointer.
// - Reuse is FIFO (moodycamel ConcurrentQueue), so a slot is reused as late as
//   possible, which keeps generations far apart.
//
// Memory ordering: a chunk pointer is published with a release store under
// the grow mutex and read with acquire, pairing with it (A); indices travel
// through the free list, whose enqueue/dequeue are release/acquire, so a
// freeing thread's writes (task reset) happen-before the next owner's.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <mutex>

#include <concurrentqueue/concurrentqueue.h>

#include "chime/runtime.hpp"
#include "chime/timing_wheel.hpp"
#include "timer_state.hpp"

namespace chime::detail {

// Test seam: the generation a fresh slot starts from. A test build sets
// CHIME_INITIAL_GENERATION near 2^32 so that generations wrap (skipping 0)
// within a short run; production builds start at 0 (first timer: 1).
#ifndef CHIME_INITIAL_GENERATION
#define CHIME_INITIAL_GENERATION 0u
#endif

// One timer. 128 bytes, two cache lines: the first holds everything a
// producer's cancel and touch (reschedule later) read and write (the state
// word and `due`) together with the wheel thread's fields, which it touches
// with the same line when it files or claims the timer; the second holds the
// task, which only the scheduling producer (once) and the worker running it
// touch. A touch therefore costs one line.
struct alignas(64) TimerSlot {
  // Line 0: the state word and the fields read with it.
  std::atomic<std::uint64_t> word{StateWord::make(CHIME_INITIAL_GENERATION, 0, SlotState::free)};  // timer_state.hpp
  std::atomic<std::int64_t> due_ns{0};  // ownership: timer_state.hpp
  std::int64_t period_ns = 0;           // 0: one-shot
  Missed on_missed = Missed::skip;
  // Wheel thread only:
  std::uint32_t filed_generation = 0;  // generation whose ADD/REARM the wheel has applied; 0: none
  TimingWheel<std::uint32_t>::Alarm alarm;
  // Line 1:
  alignas(64) Task task;
};
static_assert(sizeof(TimerSlot) == 128, "a slot is two cache lines: state and due in the first, the task in the second");
static_assert(offsetof(TimerSlot, task) == 64);

// A producer's private stock of free slot indices (held by its
// ProducerQueueToken): refilled from the free list in bulk, so one dequeue
// from the shared list serves kSize schedules. Slots in a cache are free
// (terminal or never-used words); they are returned by return_cached().
struct SlotCache {
  static constexpr std::uint32_t kSize = 32;
  std::uint32_t index[kSize];
  std::uint32_t count = 0;
};

class TimerSlab {
 public:
  static constexpr unsigned chunk_shift = 12;
  static constexpr std::uint32_t chunk_size = 1u << chunk_shift;
  static constexpr std::uint32_t max_chunks = 1u << 16;  // 2^28 slots
  // Blocks moodycamel pre-allocates for the free list (4 bytes per index).
  static constexpr std::size_t kFreeListInitialCapacity = 64 * 1024;

  TimerSlab() : chunks_(std::make_unique<std::atomic<TimerSlot*>[]>(max_chunks)), free_(kFreeListInitialCapacity) {}
  TimerSlab(const TimerSlab&) = delete;
  TimerSlab& operator=(const TimerSlab&) = delete;
  ~TimerSlab() {
    for (std::uint32_t c = 0; c < max_chunks; ++c) delete[] chunks_[c].load(std::memory_order_relaxed);
  }

  // Number of slot indices ever handed out; every index below it is valid.
  std::uint32_t extent() const noexcept { return fresh_.load(std::memory_order_acquire); }

  // The slot at index i, or nullptr if i was never handed out. Any thread.
  TimerSlot* find(std::uint32_t i) const noexcept {
    TimerSlot* chunk = chunks_[(i >> chunk_shift) & (max_chunks - 1)].load(std::memory_order_acquire);  // (A)
    return chunk == nullptr || i >= extent() ? nullptr : &chunk[i & (chunk_size - 1)];
  }
  // The slot at an index known to be valid.
  TimerSlot& operator[](std::uint32_t i) const noexcept {
    return chunks_[i >> chunk_shift].load(std::memory_order_acquire)[i & (chunk_size - 1)];  // (A)
  }

  // Takes a free slot. Throws CapacityError when 2^28 slots are in use. May
  // allocate (one chunk, when no slot is free). Any thread.
  std::uint32_t allocate() {
    std::uint32_t i;
    if (free_.try_dequeue(i)) return i;
    return allocate_fresh();
  }

  // The same through a producer's cache: one bulk dequeue per kSize slots.
  std::uint32_t allocate(SlotCache& cache) {
    if (cache.count == 0) {
      cache.count = static_cast<std::uint32_t>(free_.try_dequeue_bulk(cache.index, SlotCache::kSize));
      if (cache.count == 0) return allocate_fresh();
    }
    return cache.index[--cache.count];
  }

  // Gives a cache's slots back to the free list (the producer goes away).
  void return_cached(SlotCache& cache) noexcept {
    if (cache.count != 0 && !free_.enqueue_bulk(cache.index, cache.count)) {
      for (std::uint32_t k = 0; k < cache.count; ++k) (void)free_.enqueue(cache.index[k]);
    }
    cache.count = 0;
  }

 private:
  std::uint32_t allocate_fresh() {
    std::uint32_t i = fresh_.load(std::memory_order_relaxed);
    for (;;) {
      if (i >= max_chunks * chunk_size) throw CapacityError("chime: the timer slab is full (2^28 timers)");
      ensure_chunk(i >> chunk_shift);
      if (fresh_.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) return i;
    }
  }


 public:
  // Returns a slot whose task has been reset. Any thread. May allocate (a
  // moodycamel block, until the free list has grown to its working size).
  // For rare paths (a schedule taken back); the wheel thread and the workers
  // return slots in bulk through a RetiredSlots.
  void release(std::uint32_t i) { free_.enqueue(i); }

  // Returns n slots through the caller's own token: one bulk enqueue into the
  // caller's sub-queue of the free list. The thread owning the token only.
  void release_bulk(moodycamel::ProducerToken& token, const std::uint32_t* index, std::size_t n) {
    if (n != 0 && !free_.enqueue_bulk(token, index, n)) {
      for (std::size_t k = 0; k < n; ++k) {
        // Out of memory: retry each; a slot that cannot be returned is kept
        // out of use (never lost to a double use), as a chunk leak would be.
        (void)free_.enqueue(token, index[k]);
      }
    }
  }

  moodycamel::ProducerToken make_release_token() { return moodycamel::ProducerToken(free_); }

  // Creates (and so pre-faults: every slot is constructed) the chunks that
  // hold the first n slot indices, so the first n schedules never allocate
  // or take a page fault in the slab. Any thread. May allocate.
  void reserve(std::size_t n) {
    if (n == 0) return;
    const std::size_t last = std::min<std::size_t>(n, std::size_t{max_chunks} * chunk_size) - 1;
    for (std::uint32_t c = 0; c <= static_cast<std::uint32_t>(last >> chunk_shift); ++c) ensure_chunk(c);
  }

 private:
  void ensure_chunk(std::uint32_t c) {
    if (chunks_[c].load(std::memory_order_acquire) != nullptr) return;  // (A)
    std::lock_guard<std::mutex> lock(grow_mutex_);
    if (chunks_[c].load(std::memory_order_relaxed) == nullptr) {
      chunks_[c].store(new TimerSlot[chunk_size], std::memory_order_release);  // (A)
    }
  }

  std::unique_ptr<std::atomic<TimerSlot*>[]> chunks_;
  std::atomic<std::uint32_t> fresh_{0};
  std::mutex grow_mutex_;
  moodycamel::ConcurrentQueue<std::uint32_t> free_;
};

// Slots a single thread (the wheel thread, or one worker) has freed, given
// back to the free list in bulk: one enqueue per kSize slots, through the
// thread's own token (no implicit-producer lookup per slot).
class RetiredSlots {
 public:
  static constexpr std::size_t kSize = 64;
  explicit RetiredSlots(TimerSlab& slab) : slab_(slab), token_(slab.make_release_token()) {}
  RetiredSlots(const RetiredSlots&) = delete;
  RetiredSlots& operator=(const RetiredSlots&) = delete;
  ~RetiredSlots() { flush(); }

  // The slot's task must already be reset. Owning thread only.
  void add(std::uint32_t index) {
    index_[count_++] = index;
    if (count_ == kSize) flush();
  }
  // Owning thread only.
  void flush() {
    slab_.release_bulk(token_, index_, count_);
    count_ = 0;
  }

 private:
  TimerSlab& slab_;
  moodycamel::ProducerToken token_;
  std::uint32_t index_[kSize];
  std::size_t count_ = 0;
};

}  // namespace chime::detail
