// SPDX-License-Identifier: BSL-1.0
// ItemPool: the slab that holds the peers' per-alarm items.
//
// The seed's peers are intrusive: the caller owns an array of items and the
// timer links them. A timer that is handed only (deadline, payload) must keep
// those items itself, as chime's wheel keeps its alarm slots, so each peer
// here owns an ItemPool. Items live in fixed-size chunks (stable addresses, so
// an Item* is a handle), freed items are chained through their own storage
// (releasing never allocates), and chunks are returned only on destruction.
// Every byte of it is counted in the peers' bytes-per-alarm figure.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace chime_bench {

template <class Item, std::size_t kChunkItems = 4096>
class ItemPool {
 public:
  ItemPool() = default;
  ItemPool(const ItemPool&) = delete;
  ItemPool& operator=(const ItemPool&) = delete;

  // Returns a new Item constructed from args. May allocate (one chunk per
  // kChunkItems items).
  template <class... Args>
  Item* acquire(Args&&... args) {
    Slot* s;
    if (free_ != nullptr) {
      s = free_;
      free_ = s->next_free;
    } else {
      if (used_in_last_ == kChunkItems) {
        chunks_.push_back(std::make_unique_for_overwrite<Slot[]>(kChunkItems));
        used_in_last_ = 0;
      }
      s = &chunks_.back()[used_in_last_++];
    }
    return ::new (static_cast<void*>(&s->item)) Item{std::forward<Args>(args)...};
  }

  // Destroys *item and makes its storage available again. Never allocates.
  void release(Item* item) noexcept {
    item->~Item();
    Slot* s = reinterpret_cast<Slot*>(item);  // item is the union's first member
    s->next_free = free_;
    free_ = s;
  }

 private:
  union Slot {
    Slot() {}
    ~Slot() {}
    Item item;
    Slot* next_free;
  };

  std::vector<std::unique_ptr<Slot[]>> chunks_;
  std::size_t used_in_last_ = kChunkItems;
  Slot* free_ = nullptr;
};

}  // namespace chime_bench
