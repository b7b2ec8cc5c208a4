// SPDX-License-Identifier: BSL-1.0
// chime/detail/element_pool.hpp: the slab that stores a KeyWheel's elements.
//
// What this is: a growable array of fixed-size nodes, addressed by a 32-bit
// index, with a LIFO free list and a 32-bit generation per node. A handle is
// {index, generation}; it is live iff the node's generation still equals the
// handle's. Freeing a node bumps its generation, so every handle to it goes
// stale at once and is detected, never dereferenced into a reused value.
//
// Who may touch it: the owning KeyWheel, on its one thread.
//
// Guarantees:
// - Nodes never move: growing allocates one more block and never moves or
//   copies a stored value (no latency spike proportional to the number of
//   alarms, and T need not be movable after insertion).
// - No allocation per element in steady state: freed nodes are reused first.
// - Generation 0 is never live, so a default handle {0, 0} is never valid.
//   Generations wrap after 2^32 - 1 reuses of one node; a handle kept across
//   exactly that many reuses of its node would alias (documented, not detected).
//
// Memory. Node i is node i % 2048 of chunk i / 2048 (chunks_ maps a chunk to
// its address), but chunks are allocated in blocks of several at once:
// - reserve(n), and so the constructor's capacity, allocates everything
//   missing up to n (rounded up to whole chunks) as one block and writes every
//   node not yet used, threading it onto the free list: the pages are faulted
//   in there, and the allocate() calls that take those nodes take no page
//   fault. Each node costs sizeof(Node) bytes from then on: 24 + sizeof(T)
//   for an 8-byte T, 16 + sizeof(T) when the wheel computes keys instead of
//   storing them (TimingWheel: 32 bytes per alarm for a T of up to 8 bytes).
//   Blocks are aligned to a cache line, so 32-byte nodes sit two to a line.
// - When no node is free and every allocated node has been used, allocate()
//   grows the pool by one block of a quarter of its capacity, rounded down to
//   whole chunks, at least 1 chunk (2,048 nodes) and at most
//   max_growth_chunks (65,536 nodes, 2 MiB with 32-byte nodes). A grown
//   block is not written: its nodes are handed out in index order and each
//   page is faulted in by the first allocate() that reaches it, so no single
//   allocate() pauses to fault a whole block in (pre-faulting grown blocks
//   made first adds no cheaper on average and made the add that grew the
//   pool wait 1.3-1.5 ms for a 2.5 MiB block; docs/benchmarks.md, "First
//   inserts and capacity").
// - Memory is returned only when the pool is destroyed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chime::detail {

inline constexpr std::uint32_t kNilIndex = std::numeric_limits<std::uint32_t>::max();

// Where a node is. Levels 0..60 mean "linked into that wheel level".
enum : std::uint8_t {
  kNodeFree = 0xFF,      // on the free list; holds no value
  kNodeDetached = 0xFE,  // holds a value but is in no slot (being fired)
};

// What every node holds: its links, generation, level and slot.
struct WheelNodeLinks {
  std::uint32_t prev;  // circular doubly-linked slot list; free list uses `next`
  std::uint32_t next;
  std::uint32_t generation;
  // The level (bits 0-7: a level, kNodeFree or kNodeDetached) and, above
  // it, the slot within its level if below 2^24 (KeyWheel::slots_in_nodes),
  // so unlinking needs no key. One 32-bit field, not bytes: a store through
  // a byte type may alias anything, and would make the compiler reload every
  // pointer it holds after each node write.
  std::uint32_t place;

  std::uint32_t level() const noexcept { return place & 0xFF; }
  std::size_t slot() const noexcept { return place >> 8; }
  void set_place(std::uint32_t level, std::size_t slot) noexcept {
    place = level | static_cast<std::uint32_t>(slot << 8);
  }
};

// The value's storage, after the links (and the key, when the node stores one).
template <class T>
struct WheelNodeStorage {
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
  const T& value() const noexcept { return *std::launder(reinterpret_cast<const T*>(storage)); }
};

// One element of a KeyWheel: its slot-list links, the generation its handles
// carry, where it is (level and slot), its value and (kStoresKey) its key. A KeyWheel that
// computes the key from the value (TimingWheel: the interval of the alarm's
// time) stores none: 16 bytes before the value instead of 24, so a 16-byte
// value makes a 32-byte node, two per cache line.
template <class T, bool kStoresKey = true>
struct WheelNode : WheelNodeLinks {
  std::uint64_t key;
  WheelNodeStorage<T> store;

  T& value() noexcept { return store.value(); }
  const T& value() const noexcept { return store.value(); }
};

// A node whose key is computed from its value (KeyWheel's KeyOf).
template <class T>
struct WheelNode<T, false> : WheelNodeLinks {
  WheelNodeStorage<T> store;

  T& value() noexcept { return store.value(); }
  const T& value() const noexcept { return store.value(); }
};

template <class T, bool kStoresKey = true>
class ElementPool {
 public:
  using Node = WheelNode<T, kStoresKey>;
  static constexpr bool owns_nodes = true;  // KeyWheel's Storage: allocates its nodes
  static constexpr unsigned chunk_shift = 11;
  static constexpr std::size_t chunk_size = std::size_t{1} << chunk_shift;
  // Most chunks one growth step allocates (reserve is not limited by it).
  static constexpr std::size_t max_growth_chunks = 32;
  // Whole chunks whose indices stay below kNilIndex - 1 (KeyWheel uses both
  // as markers): 2^32 - 2048.
  static constexpr std::size_t max_capacity = (std::size_t{kNilIndex} >> chunk_shift) << chunk_shift;

  // reserve(capacity). May allocate.
  explicit ElementPool(std::size_t capacity = 0) { reserve(capacity); }
  ElementPool(const ElementPool&) = delete;
  ElementPool& operator=(const ElementPool&) = delete;
  ~ElementPool() {
    for (std::size_t i = 0; i < used_; ++i) {
      Node& n = (*this)[static_cast<std::uint32_t>(i)];
      if (n.level() != kNodeFree) n.value().~T();
    }
  }

  // Nodes allocated: live, free, or never used yet. Never allocates.
  std::size_t capacity() const noexcept { return capacity_; }
  // Nodes [0, used()) have been written (live or on the free list); the rest
  // of the capacity has never been handed out. Never allocates.
  std::size_t used() const noexcept { return used_; }
  // Nodes holding a value. Never allocates.
  std::size_t live() const noexcept { return live_; }

  // Node i; i < capacity(). Never allocates.
  Node& operator[](std::uint32_t i) noexcept { return chunks_[i >> chunk_shift][i & (chunk_size - 1)]; }
  const Node& operator[](std::uint32_t i) const noexcept { return chunks_[i >> chunk_shift][i & (chunk_size - 1)]; }

  // True iff {index, generation} names a node that holds a value. Never
  // allocates.
  bool holds(std::uint32_t index, std::uint32_t generation) const noexcept {
    return index < used_ && generation != 0 && (*this)[index].generation == generation &&
           (*this)[index].level() != kNodeFree;
  }

  // Makes capacity() >= n: allocates the missing nodes, rounded up to whole
  // chunks, as one block, then writes every node not yet used (the new block
  // and what growth left untouched), threading them onto the free list, so
  // their pages are faulted in now. Throws std::length_error if
  // n > max_capacity, or what operator new throws; either way the pool is
  // unchanged. May allocate.
  void reserve(std::size_t n) {
    if (n > max_capacity) throw_too_many(n);
    if (n > capacity_) add_block((n - capacity_ + chunk_size - 1) >> chunk_shift);
    if (n > used_) thread_unused();
  }

  // Takes a node (a free one first, else the next never-used one, growing
  // the pool if there is none) and constructs `value` in it; the node's level
  // is kNodeDetached. Strong guarantee: if growing or T's constructor throws,
  // the pool is unchanged. May allocate (only when every node is in use).
  template <class... Args>
  std::uint32_t allocate(Args&&... args) {
    std::uint32_t i = free_head_;
    if (i != kNilIndex) {
      Node& n = (*this)[i];
      ::new (static_cast<void*>(n.store.storage)) T(std::forward<Args>(args)...);
      free_head_ = n.next;
      n.place = kNodeDetached;
    } else {
      if (used_ == capacity_) grow();
      i = static_cast<std::uint32_t>(used_);
      Node& n = (*this)[i];
      ::new (static_cast<void*>(n.store.storage)) T(std::forward<Args>(args)...);
      n.generation = 1;
      n.place = kNodeDetached;
      ++used_;
    }
    ++live_;
    return i;
  }

  // Destroys the node's value and returns it to the free list; every handle to
  // it goes stale. Never allocates.
  void release(std::uint32_t i) noexcept {
    Node& n = (*this)[i];
    n.value().~T();
    n.place = kNodeFree;
    if (++n.generation == 0) n.generation = 1;
    n.next = free_head_;
    free_head_ = i;
    --live_;
  }

  // Throws std::logic_error unless the free list and the live count agree
  // with the node markers.
  void check() const {
    if (used_ > capacity_ || capacity_ != chunks_.size() * chunk_size) {
      throw std::logic_error("ElementPool: used " + std::to_string(used_) + ", capacity " +
                             std::to_string(capacity_) + ", " + std::to_string(chunks_.size()) + " chunks");
    }
    std::size_t free_count = 0;
    for (std::uint32_t i = free_head_; i != kNilIndex; i = (*this)[i].next) {
      if (i >= used_ || (*this)[i].level() != kNodeFree) {
        throw std::logic_error("ElementPool: free list reaches node " + std::to_string(i) + " that is not free");
      }
      if (++free_count > used_) throw std::logic_error("ElementPool: free list has a cycle");
    }
    if (free_count + live_ != used_) {
      throw std::logic_error("ElementPool: " + std::to_string(free_count) + " free + " + std::to_string(live_) +
                             " live != used " + std::to_string(used_));
    }
  }

 private:
  [[noreturn, gnu::cold, gnu::noinline]] static void throw_too_many(std::size_t n) {
    throw std::length_error("chime: a wheel holds at most " + std::to_string(max_capacity) + " elements, not " +
                            std::to_string(n));
  }

  // One growth step: a quarter of the capacity, 1 to max_growth_chunks chunks.
  [[gnu::noinline]] void grow() {
    const std::size_t room = (max_capacity - capacity_) >> chunk_shift;
    if (room == 0) throw_too_many(capacity_ + 1);
    const std::size_t chunks = std::clamp<std::size_t>(chunks_.size() / 4, 1, max_growth_chunks);
    add_block(std::min(chunks, room));
  }

  // Allocates `chunks` chunks as one block; writes none of it. Strong
  // guarantee: the bookkeeping is reserved before the block is allocated, and
  // nothing after that can throw.
  void add_block(std::size_t chunks) {
    const std::size_t need = chunks_.size() + chunks;
    if (chunks_.capacity() < need) chunks_.reserve(std::max(need, 2 * chunks_.capacity()));
    if (blocks_.capacity() == blocks_.size()) blocks_.reserve(std::max<std::size_t>(8, 2 * blocks_.size()));
    // Aligned to a cache line, so a node whose size divides 64 never
    // straddles two. Nodes are implicit-lifetime types: the byte array's
    // storage holds them without a constructor call.
    auto block = std::make_unique_for_overwrite<std::byte[]>((chunks << chunk_shift) * sizeof(Node) + kBlockAlign - 1);
    auto* first = reinterpret_cast<Node*>((reinterpret_cast<std::uintptr_t>(block.get()) + kBlockAlign - 1) &
                                          ~std::uintptr_t{kBlockAlign - 1});
    for (std::size_t c = 0; c < chunks; ++c) chunks_.push_back(first + (c << chunk_shift));
    blocks_.push_back(std::move(block));
    capacity_ += chunks << chunk_shift;
  }

  // Writes the never-used nodes [used_, capacity_) and threads them onto the
  // front of the free list in index order. Never throws.
  void thread_unused() noexcept {
    for (std::size_t c = used_ >> chunk_shift; c < chunks_.size(); ++c) {
      Node* chunk = chunks_[c];
      const std::size_t base = c << chunk_shift;
      for (std::size_t j = used_ > base ? used_ - base : 0; j < chunk_size; ++j) {
        Node& n = chunk[j];
        n.place = kNodeFree;
        n.generation = 1;
        n.next = base + j + 1 < capacity_ ? static_cast<std::uint32_t>(base + j + 1) : free_head_;
      }
    }
    free_head_ = static_cast<std::uint32_t>(used_);
    used_ = capacity_;
  }

  std::vector<Node*> chunks_;                     // chunk c -> its first node
  static constexpr std::size_t kBlockAlign = std::max<std::size_t>(64, alignof(Node));
  std::vector<std::unique_ptr<std::byte[]>> blocks_;  // owns the chunks
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::size_t live_ = 0;
  std::uint32_t free_head_ = kNilIndex;
};

}  // namespace chime::detail
