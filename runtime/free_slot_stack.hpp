// SPDX-License-Identifier: BSL-1.0
// runtime/free_slot_stack.hpp: the free list of timer slots, a LIFO of
// batches.
//
// What this is: a lock-free stack (Treiber, with a tag against ABA) of
// batches of up to kBatch free slot indices, and a second such stack of
// empty batch containers for reuse. A thread that frees slots collects them
// (RetiredSlots, timer_slab.hpp) and pushes them as one batch; a Producer
// that runs out of cached slots pops one batch (SlotCache). Who may touch
// it: any thread.
//
// Why LIFO: the batch pushed last is taken first, so a producer reuses the
// slots freed most recently, whose cache lines are still warm (a FIFO free
// list cycles through every free slot ever made, each one cold). Why
// batches: one CAS moves up to 32 slots each way.
//
// Guarantees:
// - Lock-free push and pop; a batch container is never freed while the
//   stack lives (containers come in chunks of kChunk, allocated under a mutex
//   only when no empty container is left), so a stale head read never
//   dereferences freed memory.
// - No allocation in steady state: containers are recycled through empty_.
//
// Memory ordering: a batch's contents (count, indices) are written before
// the release CAS that pushes it (A) and read after the acquire CAS that pops
// it (B); (A) pairs with (B). `next` is atomic (relaxed): a popper may read
// the `next` of a node another thread is pushing again, and then its CAS
// fails on the tag. Chunk pointers are published with release under the
// mutex and read with acquire (C).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>

#include "chime/detail/assert.hpp"
#include "chunk_table.hpp"
#include "tuning.hpp"  // CHIME_SLAB_CHUNK_SHIFT, CHIME_SLAB_CAPACITY_SHIFT

namespace chime::detail {

class FreeSlotStack {
 public:
  static constexpr std::uint32_t kBatch = 32;

  FreeSlotStack() : chunks_(kMaxChunks) {}
  FreeSlotStack(const FreeSlotStack&) = delete;
  FreeSlotStack& operator=(const FreeSlotStack&) = delete;
  ~FreeSlotStack() {
    for (std::uint32_t c = 0; c < chunks_used_; ++c) delete[] chunks_.load(c, std::memory_order_relaxed);
  }

  // Pops the most recently pushed batch into out[0, kBatch); returns its
  // count (0 if the stack is empty). Any thread. Lock-free. Never allocates.
  std::uint32_t take(std::uint32_t* out) noexcept {
    const std::uint32_t id = pop(full_);
    if (id == kNil) return 0;
    Node& b = node(id);
    const std::uint32_t n = b.count;
    for (std::uint32_t k = 0; k < n; ++k) out[k] = b.index[k];
    push(empty_, id);
    return n;
  }

  // Pushes indices[0, n) as one batch, 1 <= n <= kBatch. Any thread.
  // Lock-free, except that it allocates a chunk of containers (under a mutex)
  // when none is empty; throws std::bad_alloc if that fails, with nothing
  // pushed.
  void give(const std::uint32_t* indices, std::uint32_t n) {
    CHIME_ASSERT(n >= 1 && n <= kBatch, "a batch holds 1..kBatch slots");
    std::uint32_t id = pop(empty_);
    if (id == kNil) id = new_container();
    Node& b = node(id);
    b.count = n;
    for (std::uint32_t k = 0; k < n; ++k) b.index[k] = indices[k];
    push(full_, id);
  }

 private:
  static constexpr std::uint32_t kNil = UINT32_MAX;
  static constexpr unsigned kChunkShift = CHIME_SLAB_CHUNK_SHIFT;  // 12 (see above)
  static constexpr std::uint32_t kChunk = 1u << kChunkShift;       // containers per chunk
  // One container per slot the slab can hold (2^28), plus a chunk of slack:
  // batches can hold a single slot each (release(i), a worker's batch of
  // one run), so the free slots may need as many containers as there are
  // slots; with fewer, give() would run out while slots are free.
  static constexpr std::uint32_t kMaxChunks = (1u << (CHIME_SLAB_CAPACITY_SHIFT - kChunkShift)) + 1;

  struct Node {
    std::atomic<std::uint32_t> next{kNil};
    std::uint32_t count = 0;
    std::uint32_t index[kBatch];
  };

  static std::uint64_t pack(std::uint32_t id, std::uint32_t tag) noexcept { return (std::uint64_t{tag} << 32) | id; }
  static std::uint32_t id_of(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h); }
  static std::uint32_t tag_of(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h >> 32); }

  Node& node(std::uint32_t id) const noexcept {
    return chunks_.load(id >> kChunkShift, std::memory_order_acquire)[id & (kChunk - 1)];  // (C)
  }

  std::uint32_t pop(std::atomic<std::uint64_t>& head) noexcept {
    std::uint64_t h = head.load(std::memory_order_acquire);  // (B)
    for (;;) {
      const std::uint32_t id = id_of(h);
      if (id == kNil) return kNil;
      const std::uint32_t next = node(id).next.load(std::memory_order_relaxed);
      // (B) acquire: the batch's contents, written before its push (A).
      if (head.compare_exchange_weak(h, pack(next, tag_of(h) + 1), std::memory_order_acquire,
                                     std::memory_order_acquire)) {
        return id;
      }
    }
  }

  void push(std::atomic<std::uint64_t>& head, std::uint32_t id) noexcept {
    Node& b = node(id);
    std::uint64_t h = head.load(std::memory_order_relaxed);
    for (;;) {
      b.next.store(id_of(h), std::memory_order_relaxed);
      // (A) release: publishes the batch's contents (and `next`) to the popper.
      if (head.compare_exchange_weak(h, pack(id, tag_of(h) + 1), std::memory_order_release,
                                     std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Allocates a chunk of containers: returns one, pushes the rest on empty_.
  std::uint32_t new_container() {
    std::lock_guard<std::mutex> lock(grow_mutex_);
    const std::uint32_t c = chunks_used_;
    if (c == kMaxChunks) throw std::bad_alloc();
    chunks_.store(c, new Node[kChunk], std::memory_order_release);  // (C)
    chunks_used_ = c + 1;
    const std::uint32_t first = c << kChunkShift;
    for (std::uint32_t k = 1; k < kChunk; ++k) push(empty_, first + k);
    return first;
  }

  std::atomic<std::uint64_t> full_{pack(kNil, 0)};
  std::atomic<std::uint64_t> empty_{pack(kNil, 0)};
  ChunkTable<Node> chunks_;  // untouched until a chunk is made (chunk_table.hpp)
  std::mutex grow_mutex_;
  std::uint32_t chunks_used_ = 0;  // guarded by grow_mutex_
};

}  // namespace chime::detail
