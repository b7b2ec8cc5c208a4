// SPDX-License-Identifier: BSL-1.0
// runtime/timer_slab.hpp: the slots that hold every timer's state.
//
// What this is: a growable array of TimerSlot addressed by a 32-bit index,
// in chunks that never move, plus a lock-free LIFO free list of slot
// indices in batches (free_slot_stack.hpp). Who may touch it: any thread
// takes slots (`allocate`, through a producer's SlotCache) and returns them
// (`release`, RetiredSlots); the fields of a slot follow the ownership rules
// of timer_state.hpp.
//
// Guarantees:
// - No heap allocation per timer in steady state: released slots are reused
//   first; a new chunk of `kChunkSize` slots is allocated (under a mutex) only
//   when none is free. reserve(n) creates (and so pre-faults) the chunks for
//   the first n slots up front.
// - A slot's memory is never freed or moved while the slab lives, so a stale
//   TimerId always reads a valid atomic word (and then fails its generation
//   check): never a dangling pointer.
// - Reuse is LIFO by batch: the slots freed most recently are reused first,
//   while their cache lines are warm. A stale id is still caught by the
//   32-bit generation (an id would need 2^32 reuses of its slot to alias).
//
// Memory ordering: a chunk pointer is published with a release store under
// the grow mutex and read with acquire, pairing with it (A); indices travel
// through the free list, whose push/pop are release/acquire
// (free_slot_stack.hpp), so a freeing thread's writes (task reset)
// happen-before the next owner's.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backoff.hpp"
#include "chime/intrusive_timing_wheel.hpp"
#include "chime/runtime.hpp"
#include "free_slot_stack.hpp"
#include "slack.hpp"
#include "timer_state.hpp"
#include "tuning.hpp"

namespace chime::detail {

struct LaneCore;  // lane_core.hpp

// One timer. 128 bytes, two cache lines, everything counted: the wheel's
// node is in the slot (IntrusiveAlarm), so a pending timer costs its slot
// and nothing else. The first line holds everything a producer's cancel and
// touch (reschedule later) read and write (the state word and `due`)
// together with the wheel thread's fields, which it touches with the same
// line when it files, fires or claims the timer; the second holds the task,
// which only the scheduling producer (once) and the worker running it
// touch. A touch therefore costs one line, and the wheel thread's work on a
// timer (filing it, walking its slot's list, firing it) touches one line
// per timer. Debug builds (NDEBUG not defined) add a third line (waits_for).
struct alignas(64) TimerSlot {
  // Line 0: the state word and the fields read with it.
  std::atomic<std::uint64_t> word{StateWord::make(CHIME_INITIAL_GENERATION, 0, SlotState::free)};  // timer_state.hpp
  std::atomic<std::int64_t> due_ns{0};  // ownership: timer_state.hpp
  std::int64_t period_ns = 0;           // 0: one-shot
  // The lane its runs go to (chime::Lane), or null for the workers, and that
  // lane's generation when it was scheduled (lane_core.hpp). Written by the
  // scheduling producer before S1, like `task`; read by the wheel thread.
  // `lane` is atomic, every access relaxed, because a reschedule on a lane's
  // thread reads it to tell whether a Handed run is in that lane's ready
  // queue (R4) while the slot may be freed and reused under it (a cancel
  // elsewhere): S1 publishes the value with the word, and a value from a
  // later generation only reaches a reschedule whose CAS from the word it
  // loaded then fails.
  std::atomic<LaneCore*> lane{nullptr};
  // The wheel thread's part: only the wheel thread of the timer's shard
  // writes it (and shutdown's sweep, after the join; a periodic's inline
  // re-arm, on that wheel thread with workers = 0: refile_rearmed_inline,
  // wheel_thread.hpp). Another shard's wheel
  // thread may read filed_generation: a command for an older generation of
  // the slot (a reschedule, or an ADD cancelled before it was filed) can
  // reach its old shard after the slot was freed and reused by a timer of
  // another shard; it reads a generation that is not its own and drops the
  // command. Hence atomic, every access relaxed: the value only tells a
  // shard whether it filed this generation (only it writes that value), and
  // the slot's other fields are ordered by the state word. The alarm (the
  // wheel's node: links, place, filed time) is read and written only by the
  // shard that filed it, and only after it has seen its own generation in
  // filed_generation; a slot is freed only once its alarm is out of the
  // wheel (fired, removed, or swept at shutdown), so a slot reused by
  // another shard is never in two wheels.
  struct WheelPart {
    std::atomic<std::uint32_t> filed_generation{0};  // generation whose ADD/REARM the wheel has applied; 0: none
    IntrusiveAlarm alarm;                            // its node in the shard's wheel; !alarm.filed() when not in it
  } wheel;
  std::uint32_t lane_generation = 0;
  // Missed (runtime.hpp), as a byte: written by the scheduling producer
  // before S1, like `task`; read by whoever runs or re-files a periodic run.
  std::uint8_t on_missed = static_cast<std::uint8_t>(Missed::skip);
  // The shard the timer belongs to (wheel_thread.hpp): the one whose queue
  // its ADD went to, and whose wheel thread files it. Written by the
  // scheduling producer before S1; read, relaxed, by whoever posts a
  // reschedule or re-arm for it or counts its lazy cancel, after loading a
  // word of its generation: atomic for the reason `lane` is (above).
  std::atomic<std::uint8_t> shard{0};
  // Its slack (slack.hpp, SlackCode): written by the scheduling producer
  // before S1, like `task`; read by the wheel thread when it files the
  // timer (after its acquire load of the word).
  std::uint8_t slack_code = SlackCode::runtime_default;
  // Line 1:
  alignas(64) Task task;
#ifndef NDEBUG
  // Debug builds only (line 2): while this timer's callback blocks in
  // cancel_and_wait, the timer it waits for (pack_id); 0 otherwise. Used to
  // catch two callbacks waiting for each other (producer_ops.cpp).
  alignas(64) std::atomic<std::uint64_t> waits_for{0};
#endif

  Missed missed_rule() const noexcept { return static_cast<Missed>(on_missed); }
};
#ifdef NDEBUG
static_assert(sizeof(TimerSlot) == 128,
              "a slot is two cache lines: state, due and the wheel's node in the first, the task in the second");
#endif
static_assert(offsetof(TimerSlot, task) == 64);
static_assert(offsetof(TimerSlot, wheel) + sizeof(TimerSlot::WheelPart) <= 64,
              "the wheel's node is in line 0: filing and firing touch one line");
static_assert(offsetof(TimerSlot, shard) + 1 <= 64, "the shard is read with the state word: line 0");
static_assert(offsetof(TimerSlot, slack_code) + 1 <= 64, "the slack is read when filing, with the state word");

// The slot's word once no reschedule or cancel owns its fields: Writing and
// Cancelling are two stores from done (R2, or R3/K1 after a cancel won), so
// the thread that must see the outcome (shutdown's sweep, drain) waits until
// it is published, yielding then sleeping (backoff.hpp: the owner may be
// preempted by this very thread). acquire: pairs with R2/R3/K1's release.
inline std::uint64_t settled_word(const TimerSlot& slot) noexcept {
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  Backoff backoff;
  while (StateWord::state(w) == SlotState::writing || StateWord::state(w) == SlotState::cancelling) {
    backoff.wait();
    w = slot.word.load(std::memory_order_acquire);
  }
  return w;
}

// The step of the settle-then-CAS loops (drain_all, cancel_for_closed_lane,
// shutdown's sweep): `w`, the slot's word as a failed CAS found it, if no
// reschedule or cancel owns the fields; else the word once one no longer
// does (settled_word). Loop form:
//   for (std::uint64_t w = settled_word(slot);; w = settled(slot, w)) { ... CAS(w, ...) ... }
inline std::uint64_t settled(const TimerSlot& slot, std::uint64_t w) noexcept {
  const SlotState s = StateWord::state(w);
  return s == SlotState::writing || s == SlotState::cancelling ? settled_word(slot) : w;
}

// A producer's private stock of free slot indices (held by its
// ProducerQueueToken): refilled from the free list in bulk, so one dequeue
// from the shared list serves kSize schedules. Slots in a cache are free
// (terminal or never-used words); they are returned by return_cached().
struct SlotCache {
  static constexpr std::uint32_t kSize = FreeSlotStack::kBatch;
  std::uint32_t index[kSize];
  std::uint32_t count = 0;
};

class TimerSlab {
 public:
  static constexpr unsigned kChunkShift = CHIME_SLAB_CHUNK_SHIFT;  // 12 (free_slot_stack.hpp)
  static constexpr std::uint32_t kChunkSize = 1u << kChunkShift;
  static constexpr std::uint32_t kMaxChunks = 1u << (CHIME_SLAB_CAPACITY_SHIFT - kChunkShift);  // 2^28 slots
  static constexpr const char* kFullMessage = CHIME_SLAB_CAPACITY_SHIFT == 28
                                                  ? "chime: the timer slab is full (2^28 timers)"
                                                  : "chime: the timer slab is full (its fuzz-build capacity)";
  TimerSlab() : chunks_(std::make_unique<std::atomic<TimerSlot*>[]>(kMaxChunks)) {}
  TimerSlab(const TimerSlab&) = delete;
  TimerSlab& operator=(const TimerSlab&) = delete;
  ~TimerSlab() {
    // Only the chunks below the highest one created (most runtimes use a few of the 65,536).
    for (std::uint32_t c = 0; c < chunk_end_; ++c) delete[] chunks_[c].load(std::memory_order_relaxed);
  }

  // Number of slot indices ever handed out; every index below it is valid.
  std::uint32_t extent() const noexcept { return fresh_.load(std::memory_order_acquire); }

  // The slot at index i, or nullptr if i was never handed out. Any thread.
  TimerSlot* find(std::uint32_t i) const noexcept {
    TimerSlot* chunk = chunks_[(i >> kChunkShift) & (kMaxChunks - 1)].load(std::memory_order_acquire);  // (A)
    return chunk == nullptr || i >= extent() ? nullptr : &chunk[i & (kChunkSize - 1)];
  }
  // The slot at an index known to be valid.
  TimerSlot& operator[](std::uint32_t i) const noexcept {
    return chunks_[i >> kChunkShift].load(std::memory_order_acquire)[i & (kChunkSize - 1)];  // (A)
  }

  // Takes a free slot for a caller without a cache: pops a batch, keeps one
  // slot and pushes the rest back. Throws CapacityError when 2^28 slots are
  // in use. May allocate (one chunk, when no slot is free). Any thread.
  std::uint32_t allocate() {
    std::uint32_t batch[FreeSlotStack::kBatch];
    const std::uint32_t n = free_.take(batch);
    if (n == 0) return allocate_fresh();
    if (n > 1) free_.give(batch + 1, n - 1);
    return batch[0];
  }

  // The same through a producer's cache: one pop per kSize slots. With no
  // free slot, the producer takes a run of kSize fresh, consecutive slots, so
  // one producer's new timers sit next to each other in the slab.
  std::uint32_t allocate(SlotCache& cache) {
    if (cache.count == 0) {
      cache.count = free_.take(cache.index);
      if (cache.count == 0) return allocate_fresh_run(cache);
    }
    return cache.index[--cache.count];
  }

  // Gives a cache's slots back to the free list (the producer goes away).
  void return_cached(SlotCache& cache) noexcept {
    if (cache.count != 0) {
      try {
        free_.give(cache.index, cache.count);
      } catch (const std::bad_alloc&) {
        // No container for them (out of memory): they stay out of use, never
        // double-used; like a leaked chunk, bounded by one cache.
      }
    }
    cache.count = 0;
  }

 private:
  std::uint32_t allocate_fresh() {
    std::uint32_t i = fresh_.load(std::memory_order_relaxed);
    for (;;) {
      if (i >= kMaxChunks * kChunkSize) throw CapacityError(kFullMessage);
      ensure_chunk(i >> kChunkShift);
      if (fresh_.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) return i;
    }
  }

  // Takes up to SlotCache::kSize consecutive fresh slots [i, i + n): returns
  // i and leaves i + 1 .. i + n - 1 in the (empty) cache, to be taken in
  // ascending order. Every slot of the run has its chunk before fresh_
  // publishes it (find() trusts every index below extent()).
  std::uint32_t allocate_fresh_run(SlotCache& cache) {
    std::uint32_t i = fresh_.load(std::memory_order_relaxed);
    std::uint32_t n;
    for (;;) {
      const std::uint32_t limit = kMaxChunks * kChunkSize;
      if (i >= limit) throw CapacityError(kFullMessage);
      n = std::min<std::uint32_t>(SlotCache::kSize, limit - i);
      ensure_chunk(i >> kChunkShift);
      ensure_chunk((i + n - 1) >> kChunkShift);
      if (fresh_.compare_exchange_weak(i, i + n, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
    }
    CHIME_ASSERT(cache.count == 0, "a fresh run only refills an empty cache");
    for (std::uint32_t k = 1; k < n; ++k) cache.index[k - 1] = i + n - k;  // popped from the end: i+1 first
    cache.count = n - 1;
    return i;
  }

 public:
  // Returns slots whose tasks have been reset, 1 <= n <= FreeSlotStack::kBatch,
  // as one batch. Any thread. May allocate (a chunk of batch containers,
  // until the free list has reached its working size).
  void release(const std::uint32_t* index, std::uint32_t n) { free_.give(index, n); }
  void release(std::uint32_t i) { free_.give(&i, 1); }

  // Creates (and so pre-faults: every slot is constructed) the chunks that
  // hold the first n slot indices, so the first n schedules never allocate
  // or take a page fault in the slab. Any thread. May allocate.
  void reserve(std::size_t n) {
    if (n == 0) return;
    const std::size_t last = std::min<std::size_t>(n, std::size_t{kMaxChunks} * kChunkSize) - 1;
    for (std::uint32_t c = 0; c <= static_cast<std::uint32_t>(last >> kChunkShift); ++c) ensure_chunk(c);
  }

 private:
  void ensure_chunk(std::uint32_t c) {
    if (chunks_[c].load(std::memory_order_acquire) != nullptr) return;  // (A)
    std::lock_guard<std::mutex> lock(grow_mutex_);
    if (chunks_[c].load(std::memory_order_relaxed) == nullptr) {
      chunks_[c].store(new TimerSlot[kChunkSize], std::memory_order_release);  // (A)
      chunk_end_ = std::max(chunk_end_, c + 1);
    }
  }

  std::unique_ptr<std::atomic<TimerSlot*>[]> chunks_;
  std::atomic<std::uint32_t> fresh_{0};
  std::mutex grow_mutex_;
  std::uint32_t chunk_end_ = 0;  // one past the highest chunk created; guarded by grow_mutex_ (read by the destructor)
  FreeSlotStack free_;
};

// Slots a single thread (the wheel thread, or one worker) has freed, given
// back to the free list in batches: one push per kSize slots, and the rest
// when the thread finishes a pass or a batch of runs (flush).
class RetiredSlots {
 public:
  static constexpr std::uint32_t kSize = FreeSlotStack::kBatch;
  // What a full batch does when the free list cannot take it (out of memory,
  // no batch container): wait_for_memory retries every millisecond, so a
  // slot is never lost (a worker's); never_wait keeps the batch and retries
  // at the next flush, and a slot retired while the batch is full stays out
  // of use for good, never used twice (the wheel thread's, which never waits
  // for memory: wheel_thread.cpp, "Out of memory").
  enum class OutOfMemory { wait_for_memory, never_wait };
  explicit RetiredSlots(TimerSlab& slab, OutOfMemory on_out_of_memory = OutOfMemory::wait_for_memory)
      : slab_(slab), wait_(on_out_of_memory == OutOfMemory::wait_for_memory) {}
  RetiredSlots(const RetiredSlots&) = delete;
  RetiredSlots& operator=(const RetiredSlots&) = delete;
  ~RetiredSlots() { flush(); }

  // The slot's task must already be reset. Owning thread only.
  void add(std::uint32_t index) {
    if (count_ == kSize) [[unlikely]] {
      flush();
      if (count_ == kSize) return;  // never_wait, out of memory: stays out of use
    }
    index_[count_++] = index;
    if (count_ == kSize) flush();
  }
  // Owning thread only.
  void flush() {
    if (count_ == 0) return;
    const auto give_back = [&] {
      try {
        slab_.release(index_, count_);
        return true;
      } catch (const std::bad_alloc&) {
        return false;
      }
    };
    if (wait_) {
      retry_until_memory(give_back);
    } else if (!give_back()) {
      return;
    }
    count_ = 0;
  }

 private:
  TimerSlab& slab_;
  bool wait_;
  std::uint32_t index_[kSize];
  std::uint32_t count_ = 0;
};

}  // namespace chime::detail
