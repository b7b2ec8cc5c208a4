// SPDX-License-Identifier: BSL-1.0
// HeapTimer: the seed's "timer by heap" peer, an indexed binary min-heap.
//
// The heap is an array of Item*; every item knows its index in it, so
// remove-by-handle is O(log n): the last item is moved into the hole and
// sifted up then down (the seed's _adjust). pop(now) removes the root while
// its deadline <= now, by the same remove. Insert appends and sifts up
// (cheap when deadlines arrive in increasing order, as in the protocol).
// Differences from the seed: std::vector instead of std::deque for the heap
// array (one indirection less per access; the heap only grows at the back, so
// deque's stable addresses buy nothing), items live in an ItemPool owned by
// the timer, and fired items are passed to a callback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "item_pool.hpp"

namespace chime_bench {

class HeapTimer {
  struct Item {
    std::int64_t deadline;
    std::uint64_t payload;
    std::size_t index;
  };
  static constexpr std::size_t kNotInHeap = std::numeric_limits<std::size_t>::max();

 public:
  using Handle = Item*;
  static constexpr const char* kName = "IndexedHeap";

  Handle add(std::int64_t deadline, std::uint64_t payload) {
    Item* item = pool_.acquire(deadline, payload, heap_.size());
    heap_.push_back(item);
    adjust(heap_.size() - 1);
    return item;
  }

  void remove(Handle item) {
    detach(item);
    pool_.release(item);
  }

  // Fires, in deadline order, every item with deadline <= now.
  template <class F>
  void pop(std::int64_t now, F&& on_fired) {
    while (!heap_.empty() && heap_[0]->deadline <= now) {
      Item* item = heap_[0];
      detach(item);
      on_fired(item->payload);
      pool_.release(item);
    }
  }

  std::optional<std::int64_t> min_time() const noexcept {
    if (heap_.empty()) return std::nullopt;
    return heap_[0]->deadline;
  }

  std::size_t size() const noexcept { return heap_.size(); }

 private:
  // The seed's remove(): move the last item into the hole, then re-heapify.
  void detach(Item* item) {
    const std::size_t index = item->index;
    if (index >= heap_.size()) return;  // not in the heap (the seed tolerates this too)
    item->index = kNotInHeap;
    if (index + 1 == heap_.size()) {
      heap_.pop_back();
      return;
    }
    Item* last = heap_.back();
    heap_.pop_back();
    heap_[index] = last;
    last->index = index;
    adjust(index);
  }

  bool less(std::size_t a, std::size_t b) const noexcept { return heap_[a]->deadline < heap_[b]->deadline; }

  void swap_at(std::size_t a, std::size_t b) noexcept {
    heap_[a]->index = b;
    heap_[b]->index = a;
    std::swap(heap_[a], heap_[b]);
  }

  // The seed's _adjust(): sift up, then sift down.
  void adjust(std::size_t index) noexcept {
    for (std::size_t pos = index; pos > 0;) {
      const std::size_t parent = (pos - 1) >> 1;
      if (!less(pos, parent)) break;
      swap_at(pos, parent);
      pos = parent;
    }
    const std::size_t n = heap_.size();
    while (index < n) {
      const std::size_t left = 2 * index + 1;
      const std::size_t right = left + 1;
      if (left >= n) break;
      if (right < n && less(right, index) && less(right, left)) {
        swap_at(index, right);
        index = right;
        continue;
      }
      if (less(left, index)) {
        swap_at(index, left);
        index = left;
        continue;
      }
      break;
    }
  }

  ItemPool<Item> pool_;
  std::vector<Item*> heap_;
};

}  // namespace chime_bench
