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
// - Nodes live in chunks of `chunk_size` that never move: growing the pool
//   allocates one more chunk and never moves or copies a stored value (no
//   latency spike proportional to the number of alarms, and T need not be
//   movable after insertion).
// - No allocation per element in steady state: freed nodes are reused first.
// - Generation 0 is never live, so a default handle {0, 0} is never valid.
//   Generations wrap after 2^32 - 1 reuses of one node; a handle kept across
//   exactly that many reuses of its node would alias (documented, not detected).
#pragma once

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

template <class T>
struct WheelNode {
  std::uint64_t key;
  std::uint32_t prev;  // circular doubly-linked slot list; free list uses `next`
  std::uint32_t next;
  std::uint32_t generation;
  std::uint8_t level;
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
  const T& value() const noexcept { return *std::launder(reinterpret_cast<const T*>(storage)); }
};

template <class T>
class ElementPool {
 public:
  using Node = WheelNode<T>;
  static constexpr unsigned chunk_shift = 11;
  static constexpr std::size_t chunk_size = std::size_t{1} << chunk_shift;
  static constexpr std::size_t max_capacity = std::size_t{kNilIndex};  // indices 0 .. 2^32 - 2

  explicit ElementPool(std::size_t capacity = 0) {
    while (capacity_ < capacity) grow();
  }
  ElementPool(const ElementPool&) = delete;
  ElementPool& operator=(const ElementPool&) = delete;
  ~ElementPool() {
    for (std::size_t i = 0; i < capacity_; ++i) {
      Node& n = (*this)[static_cast<std::uint32_t>(i)];
      if (n.level != kNodeFree) n.value().~T();
    }
  }

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t live() const noexcept { return live_; }

  Node& operator[](std::uint32_t i) noexcept { return chunks_[i >> chunk_shift][i & (chunk_size - 1)]; }
  const Node& operator[](std::uint32_t i) const noexcept { return chunks_[i >> chunk_shift][i & (chunk_size - 1)]; }

  // True iff {index, generation} names a node that holds a value.
  bool holds(std::uint32_t index, std::uint32_t generation) const noexcept {
    return index < capacity_ && generation != 0 && (*this)[index].generation == generation &&
           (*this)[index].level != kNodeFree;
  }

  // Takes a free node and constructs `value` in it; the node's level is
  // kNodeDetached. Strong guarantee: if growing or T's constructor throws,
  // the pool is unchanged. May allocate (only when no node is free).
  template <class... Args>
  std::uint32_t allocate(Args&&... args) {
    if (free_head_ == kNilIndex) grow();
    const std::uint32_t i = free_head_;
    Node& n = (*this)[i];
    ::new (static_cast<void*>(n.storage)) T(std::forward<Args>(args)...);
    free_head_ = n.next;
    n.level = kNodeDetached;
    ++live_;
    return i;
  }

  // Destroys the node's value and returns it to the free list; every handle to
  // it goes stale. Never allocates.
  void release(std::uint32_t i) noexcept {
    Node& n = (*this)[i];
    n.value().~T();
    n.level = kNodeFree;
    if (++n.generation == 0) n.generation = 1;
    n.next = free_head_;
    free_head_ = i;
    --live_;
  }

  // Throws std::logic_error unless the free list and the live count agree
  // with the node markers.
  void check() const {
    std::size_t free_count = 0;
    for (std::uint32_t i = free_head_; i != kNilIndex; i = (*this)[i].next) {
      if (i >= capacity_ || (*this)[i].level != kNodeFree) {
        throw std::logic_error("ElementPool: free list reaches node " + std::to_string(i) + " that is not free");
      }
      if (++free_count > capacity_) throw std::logic_error("ElementPool: free list has a cycle");
    }
    if (free_count + live_ != capacity_) {
      throw std::logic_error("ElementPool: " + std::to_string(free_count) + " free + " + std::to_string(live_) +
                             " live != capacity " + std::to_string(capacity_));
    }
  }

 private:
  void grow() {
    if (capacity_ + chunk_size > max_capacity) {
      throw std::length_error("chime: a wheel holds at most " + std::to_string(max_capacity - chunk_size) +
                              " elements");
    }
    chunks_.reserve(chunks_.size() + 1);
    auto chunk = std::make_unique_for_overwrite<Node[]>(chunk_size);
    // Thread the new nodes onto the free list in index order.
    for (std::size_t j = 0; j < chunk_size; ++j) {
      Node& n = chunk[j];
      n.level = kNodeFree;
      n.generation = 1;
      n.next = j + 1 < chunk_size ? static_cast<std::uint32_t>(capacity_ + j + 1) : free_head_;
    }
    free_head_ = static_cast<std::uint32_t>(capacity_);
    chunks_.push_back(std::move(chunk));
    capacity_ += chunk_size;
  }

  std::vector<std::unique_ptr<Node[]>> chunks_;
  std::size_t capacity_ = 0;
  std::size_t live_ = 0;
  std::uint32_t free_head_ = kNilIndex;
};

}  // namespace chime::detail
