// SPDX-License-Identifier: BSL-1.0
// runtime/timer_slab.hpp: the slots that hold every timer's state.
//
// What this is: a growable array of TimerSlot addressed by a 32-bit index,
// in chunks that never move, with a side array of SlotExtra per chunk,
// created when a timer of the chunk first needs one, plus a lock-free LIFO
// free list of slot indices in batches (free_slot_stack.hpp). Who may touch it: any thread
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
// Memory ordering: a chunk pointer (or a side array's, or the table of side
// arrays) is published with a release store under the grow mutex and read
// with acquire, pairing with it (A); indices travel through the free list,
// whose push/pop are release/acquire (free_slot_stack.hpp), so a freeing
// thread's writes (task reset) happen-before the next owner's.
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
#include "chunk_table.hpp"
#include "compact_task.hpp"
#include "free_slot_stack.hpp"
#include "slack.hpp"
#include "timer_state.hpp"
#include "tuning.hpp"

namespace chime::detail {

struct LaneCore;  // lane_core.hpp

// One timer's record: one 64-byte line, everything counted, for a one-shot
// timer of the worker pool whose callable's captures fit 16 bytes (or that
// the Task allocated: its pointer fits). The line holds the state word and
// `due` (what a producer's cancel and touch read and write), the wheel's
// node (IntrusiveAlarm: filing, walking a slot's list and firing touch this
// line and no other), the shard, the slack, and the callable. What only
// some timers need lives in the slot's side record (SlotExtra, below):
// a periodic timer's period and missed-run rule, a lane timer's lane, and a
// callable too large for the line. Debug builds (NDEBUG not defined) add a
// second line (waits_for).
//
// Who writes which field (timer_state.hpp has the word's transitions):
// - `word`, `due_ns`: timer_state.hpp, "Who may write which field".
// - `alarm`: only the wheel thread of the timer's shard, between filing it
//   (A1, after its CAS sets the word's filed bit) and taking it out of the
//   wheel (fire, remove, or shutdown's sweep after the join; a periodic's
//   inline re-arm on that wheel thread: file_rearmed). A slot is
//   freed only once its alarm is out of the wheel (`reclaim` asserts it),
//   so a slot reused by another shard is never in two wheels. A wheel
//   thread reads a slot's alarm only after loading a word of the generation
//   it filed with the filed bit set (apply's RESCHEDULE): the shard is fixed
//   per generation and, filed, only that wheel thread frees the slot.
// - `shard`, `slack_code`, `layout`, `task` (and the side record): the
//   scheduling producer before S1; read after an acquire load of a word of
//   that generation. `shard` and `layout` are atomic, every access relaxed,
//   because a thread may read them for a generation it has not loaded (a
//   reschedule deciding where to post, a lane's sweep telling whether a
//   slot is its lane's) while the slot is freed and reused under it: the
//   value then comes from a later generation, and the CAS from the word it
//   loaded fails. The party that frees the slot resets the task.
struct alignas(64) TimerSlot {
  // What `layout` says about the side record (SlotExtra).
  static constexpr std::uint8_t kTaskOutOfLine = 1;  // the callable is SlotExtra::task, not `task`
  static constexpr std::uint8_t kOnLane = 2;         // runs go to SlotExtra::lane (chime::Lane)
  static constexpr std::size_t kInlineCaptures = 16;

  std::atomic<std::uint64_t> word{StateWord::make(CHIME_INITIAL_GENERATION, 0, SlotState::free)};  // timer_state.hpp
  std::atomic<std::int64_t> due_ns{0};
  IntrusiveAlarm alarm;  // its node in its shard's wheel; !alarm.filed() when not in it
  // The shard the timer belongs to (wheel_thread.hpp): the one whose queue
  // its ADD went to, and whose wheel thread files it.
  std::atomic<std::uint8_t> shard{0};
  std::uint8_t slack_code = SlackCode::runtime_default;  // slack.hpp, SlackCode
  std::atomic<std::uint8_t> layout{0};                   // kTaskOutOfLine | kOnLane
  CompactTask<kInlineCaptures> task;                     // empty when kTaskOutOfLine
#ifndef NDEBUG
  // Debug builds only (line 1): while this timer's callback blocks in
  // cancel_and_wait, the timer it waits for (pack_id); 0 otherwise. Used to
  // catch two callbacks waiting for each other (producer_ops.cpp).
  alignas(64) std::atomic<std::uint64_t> waits_for{0};
#endif

  bool on_lane() const noexcept { return (layout.load(std::memory_order_relaxed) & kOnLane) != 0; }
  bool task_out_of_line() const noexcept { return (layout.load(std::memory_order_relaxed) & kTaskOutOfLine) != 0; }
};
#ifdef NDEBUG
static_assert(sizeof(TimerSlot) == 64, "a timer is one cache line");
#endif
static_assert(offsetof(TimerSlot, task) + sizeof(CompactTask<TimerSlot::kInlineCaptures>) <= 64,
              "the callable is in line 0: a one-shot timer is one line");

// A slot's side record: what only some timers need, at the slot's index in
// a side array the slab creates for a chunk when a timer of that chunk
// first needs it (TimerSlab::ensure_extra). Written by the scheduling
// producer before S1, like the slot's task; read after an acquire load of
// a word of that generation. `lane` is atomic, every access relaxed, for
// the reason `shard` is (above): a lane's sweep and a reschedule on a
// lane's thread read it to tell whether a slot is that lane's.
struct SlotExtra {
  std::int64_t period_ns = 0;  // periodic timers (the word's periodic bit)
  // The lane its runs go to (kOnLane), and that lane's generation when it
  // was scheduled (lane_core.hpp).
  std::atomic<LaneCore*> lane{nullptr};
  std::uint32_t lane_generation = 0;
  std::uint8_t on_missed = static_cast<std::uint8_t>(Missed::skip);  // periodic timers: Missed as a byte
  // A ManualClock (every timer has a side record there): the number of the
  // call that set the current due (call_order.hpp). Written with the due,
  // by whoever owns it (timer_state.hpp), and published with it (S1, R2,
  // F2). Atomic, every access relaxed, as `due_ns`: the wheel thread reads
  // it for a timer it holds while a reschedule may be writing it; the key
  // it reads then is stale, and the RESCHEDULE (or, for a touch, the
  // changed due) makes it read again (wheel_thread_manual.cpp, advance_manual).
  std::atomic<std::uint64_t> order{0};
  Task task;  // kTaskOutOfLine: a callable whose captures do not fit the slot

  Missed missed_rule() const noexcept { return static_cast<Missed>(on_missed); }
};
static_assert(offsetof(SlotExtra, order) == 24 && offsetof(SlotExtra, task) == 32,
              "the lane, period and order fields share the record's first half-line");

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
  TimerSlab() : chunks_(kMaxChunks) {}
  TimerSlab(const TimerSlab&) = delete;
  TimerSlab& operator=(const TimerSlab&) = delete;
  ~TimerSlab() {
    // Only the chunks below the highest one created (most runtimes use a few of the 65,536).
    for (std::uint32_t c = 0; c < chunk_end_; ++c) {
      delete[] chunks_.load(c, std::memory_order_relaxed);
      if (extra_table_) delete[] extra_table_->load(c, std::memory_order_relaxed);
    }
  }

  // Number of slot indices ever handed out; every index below it is valid.
  std::uint32_t extent() const noexcept { return fresh_.load(std::memory_order_acquire); }

  // The slot at index i, or nullptr if i was never handed out. Any thread.
  TimerSlot* find(std::uint32_t i) const noexcept {
    TimerSlot* chunk = chunks_.load((i >> kChunkShift) & (kMaxChunks - 1), std::memory_order_acquire);  // (A)
    return chunk == nullptr || i >= extent() ? nullptr : &chunk[i & (kChunkSize - 1)];
  }
  // The slot at an index known to be valid.
  TimerSlot& operator[](std::uint32_t i) const noexcept {
    return chunks_.load(i >> kChunkShift, std::memory_order_acquire)[i & (kChunkSize - 1)];  // (A)
  }

  // The side record of slot i, or nullptr if its chunk has none yet. Any
  // thread; a record found for a slot may belong to a later generation
  // than the one the caller loaded (SlotExtra).
  SlotExtra* find_extra(std::uint32_t i) const noexcept {
    const ChunkTable<SlotExtra>* table = extras_.load(std::memory_order_acquire);  // (A)
    if (table == nullptr) return nullptr;
    SlotExtra* chunk = table->load((i >> kChunkShift) & (kMaxChunks - 1), std::memory_order_acquire);  // (A)
    return chunk == nullptr ? nullptr : &chunk[i & (kChunkSize - 1)];
  }
  // The side record of a slot whose timer has one (kOnLane,
  // kTaskOutOfLine, periodic), read after an acquire load of its word: the
  // scheduling producer created it (ensure_extra) before S1.
  SlotExtra& extra(std::uint32_t i) const noexcept {
    const ChunkTable<SlotExtra>* table = extras_.load(std::memory_order_acquire);           // (A)
    return table->load(i >> kChunkShift, std::memory_order_acquire)[i & (kChunkSize - 1)];  // (A)
  }
  // Creates the side records of slot i's chunk unless they exist (and,
  // the first time, the table of side arrays, which a runtime without
  // periodic, lane or large-callable timers never pays for). Any thread.
  // May allocate: std::bad_alloc, and nothing is published.
  void ensure_extra(std::uint32_t i) {
    const std::uint32_t c = i >> kChunkShift;
    const ChunkTable<SlotExtra>* table = extras_.load(std::memory_order_acquire);          // (A)
    if (table != nullptr && table->load(c, std::memory_order_acquire) != nullptr) return;  // (A)
    std::lock_guard<std::mutex> lock(grow_mutex_);
    if (!extra_table_) {
      extra_table_ = std::make_unique<ChunkTable<SlotExtra>>(kMaxChunks);
      extras_.store(extra_table_.get(), std::memory_order_release);  // (A)
    }
    if (extra_table_->load(c, std::memory_order_relaxed) == nullptr)
      extra_table_->store(c, new SlotExtra[kChunkSize], std::memory_order_release);  // (A)
  }

  // The lane slot i's runs go to, or nullptr (the workers). Any thread, as
  // find_extra: the value may come from a later generation (SlotExtra).
  LaneCore* lane_of(const TimerSlot& slot, std::uint32_t i) const noexcept {
    if (!slot.on_lane()) return nullptr;
    const SlotExtra* e = find_extra(i);
    return e == nullptr ? nullptr : e->lane.load(std::memory_order_relaxed);
  }

  // Runs the timer's callable with `firing`. Whoever runs the timer.
  void run_task(TimerSlot& slot, std::uint32_t i, const Firing& firing) const {
    if (slot.task_out_of_line()) {
      extra(i).task(firing);
    } else {
      slot.task(firing);
    }
  }
  // Destroys the timer's callable (its captures are released). The party
  // that frees the slot, or the canceller (K1, R3).
  void reset_task(TimerSlot& slot, std::uint32_t i) const noexcept {
    if (slot.task) {  // held in one place only: the slot (most timers) or the side record
      slot.task.reset();
    } else if (slot.task_out_of_line()) {
      extra(i).task.reset();
    }
  }
  // True iff the timer's callable is still held (not reset).
  bool has_task(const TimerSlot& slot, std::uint32_t i) const noexcept {
    return slot.task_out_of_line() ? static_cast<bool>(extra(i).task) : static_cast<bool>(slot.task);
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
    if (chunks_.load(c, std::memory_order_acquire) != nullptr) return;  // (A)
    std::lock_guard<std::mutex> lock(grow_mutex_);
    if (chunks_.load(c, std::memory_order_relaxed) == nullptr) {
      chunks_.store(c, new TimerSlot[kChunkSize], std::memory_order_release);  // (A)
      chunk_end_ = std::max(chunk_end_, c + 1);
    }
  }

  ChunkTable<TimerSlot> chunks_;  // untouched until a chunk is made (chunk_table.hpp)
  // The side arrays per chunk: a table made on first need (extra_table_
  // owns it, guarded by grow_mutex_; extras_ publishes it).
  std::atomic<const ChunkTable<SlotExtra>*> extras_{nullptr};
  std::unique_ptr<ChunkTable<SlotExtra>> extra_table_;
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
