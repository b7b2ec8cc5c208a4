// SPDX-License-Identifier: BSL-1.0
// MultimapTimer: a std::multimap<deadline, Item*> peer.
//
// Each item stores the iterator of its map node, so remove-by-handle is an
// O(1) amortized erase at a known position (no search), while insert is an
// O(log n) tree insertion with one node allocation. The minimum is begin();
// pop(now) erases from the front while key <= now. Items live in an ItemPool
// owned by the timer; fired items are passed to a callback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "item_pool.hpp"

namespace chime_bench {

class MultimapTimer {
  struct Item;
  using Map = std::multimap<std::int64_t, Item*>;
  struct Item {
    std::uint64_t payload;
    Map::iterator pos;
  };

 public:
  using Handle = Item*;
  static constexpr const char* kName = "StdMultimap";

  Handle add(std::int64_t deadline, std::uint64_t payload) {
    Item* item = pool_.acquire(payload, Map::iterator{});
    item->pos = map_.emplace(deadline, item);
    return item;
  }

  void remove(Handle item) {
    map_.erase(item->pos);
    pool_.release(item);
  }

  // Fires, in deadline order, every item with deadline <= now.
  template <class F>
  void pop(std::int64_t now, F&& on_fired) {
    while (!map_.empty() && map_.begin()->first <= now) {
      Item* item = map_.begin()->second;
      map_.erase(map_.begin());
      on_fired(item->payload);
      pool_.release(item);
    }
  }

  std::optional<std::int64_t> min_time() const noexcept {
    if (map_.empty()) return std::nullopt;
    return map_.begin()->first;
  }

  std::size_t size() const noexcept { return map_.size(); }

 private:
  ItemPool<Item> pool_;
  Map map_;
};

}  // namespace chime_bench
