// SPDX-License-Identifier: BSL-1.0
// SetTimer: the seed's "timer by std::set" peer.
//
// Items are ordered in a std::set<Item*> by (deadline, address), exactly as
// the seed's TimerBySet: insert and remove-by-handle are O(log n) tree
// operations with one node allocation per pending alarm; the minimum is
// begin(); pop(now) erases from the front while deadline <= now.
// Differences from the seed: items live in an ItemPool owned by the timer
// (the seed's caller owned them) and fired items are passed to a callback
// instead of being linked into a result list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>

#include "item_pool.hpp"

namespace chime_bench {

class SetTimer {
  struct Item {
    std::int64_t deadline;
    std::uint64_t payload;
  };
  struct Compare {
    bool operator()(const Item* a, const Item* b) const noexcept {
      if (a->deadline != b->deadline) return a->deadline < b->deadline;
      return std::less<const Item*>{}(a, b);
    }
  };

 public:
  using Handle = Item*;
  static constexpr const char* kName = "StdSet";

  Handle add(std::int64_t deadline, std::uint64_t payload) {
    Item* item = pool_.acquire(deadline, payload);
    items_.insert(item);
    return item;
  }

  void remove(Handle item) {
    items_.erase(item);
    pool_.release(item);
  }

  // Fires, in deadline order, every item with deadline <= now.
  template <class F>
  void pop(std::int64_t now, F&& on_fired) {
    while (!items_.empty() && (*items_.begin())->deadline <= now) {
      Item* item = *items_.begin();
      items_.erase(items_.begin());
      on_fired(item->payload);
      pool_.release(item);
    }
  }

  std::optional<std::int64_t> min_time() const noexcept {
    if (items_.empty()) return std::nullopt;
    return (*items_.begin())->deadline;
  }

  std::size_t size() const noexcept { return items_.size(); }

 private:
  ItemPool<Item> pool_;
  std::set<Item*, Compare> items_;
};

}  // namespace chime_bench
