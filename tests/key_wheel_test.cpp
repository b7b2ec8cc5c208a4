// SPDX-License-Identifier: BSL-1.0
// Unit tests for chime::KeyWheel<T> (Jane Street's Timing_wheel.Priority_queue):
// bounds of the allowed keys, add/remove/change_key, generation-checked handles,
// increase_min_allowed_key (what fires, in which order, and what it leaves),
// min_elt/min_key (including the cache reset by clear), for_each, move-only
// values and value lifetimes. check_invariants() runs after every mutation.

#include <chime/key_wheel.hpp>
#include <chime/level_bits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using chime::KeyWheel;
using chime::LevelBits;

using IntWheel = KeyWheel<int>;
using Elt = IntWheel::Elt;
using Key = IntWheel::Key;

constexpr Key kMaxRep = IntWheel::max_representable_key;

#define EXPECT_INVARIANTS(w) EXPECT_NO_THROW((w).check_invariants())

std::vector<LevelBits> all_test_bits() {
  return {LevelBits::create({1}),          LevelBits::create({1, 1}),       LevelBits::create({2, 1, 3}),
          LevelBits::create({3, 1}),       LevelBits::create({4, 4, 4}),    LevelBits::create({6, 6, 6, 6}),
          LevelBits::default_bits()};
}

// Removes keys < key and returns the (key, value) pairs in the order they were handed out.
std::vector<std::pair<Key, int>> increase(IntWheel& w, Key key) {
  std::vector<std::pair<Key, int>> out;
  w.increase_min_allowed_key(key, [&](Elt e) { out.emplace_back(w.key(e), w.value(e)); });
  return out;
}

// A value type that counts its live instances; not default-constructible.
struct Tracked {
  static inline long live = 0;
  int id;
  explicit Tracked(int i) : id(i) { ++live; }
  Tracked(const Tracked& o) : id(o.id) { ++live; }
  Tracked(Tracked&& o) noexcept : id(o.id) { ++live; }
  Tracked& operator=(const Tracked&) = default;
  Tracked& operator=(Tracked&&) noexcept = default;
  ~Tracked() { --live; }
};

// The handle type is a small trivially copyable, default-constructible value.
TEST(KeyWheel, elt_is_trivially_copyable_and_default_constructible) {
  static_assert(std::is_trivially_copyable_v<Elt>);
  static_assert(std::is_nothrow_default_constructible_v<Elt>);
  static_assert(std::is_same_v<Key, std::uint64_t>);
  static_assert(kMaxRep == (std::uint64_t{1} << 61) - 1);
  EXPECT_EQ(Elt{}, Elt{});
}

// A new wheel is empty, min_allowed_key() == 0, and has no min element.
TEST(KeyWheel, new_wheel_is_empty_with_min_allowed_key_zero) {
  for (const LevelBits& bits : all_test_bits()) {
    IntWheel w(bits);
    EXPECT_EQ(w.size(), 0u);
    EXPECT_TRUE(w.empty());
    EXPECT_EQ(w.min_allowed_key(), 0u);
    EXPECT_FALSE(w.min_elt().has_value());
    EXPECT_FALSE(w.min_key().has_value());
    EXPECT_INVARIANTS(w);
  }
  IntWheel def;  // default level bits
  EXPECT_TRUE(def.empty());
  EXPECT_EQ(def.max_allowed_key(), kMaxRep);  // 0 + 2^61 - 1, capped at 2^61 - 1
  EXPECT_INVARIANTS(def);
}

// min(2^61-1, min_allowed + 2^B - 1) <= max_allowed_key <= 2^61-1, nondecreasing as min grows.
TEST(KeyWheel, max_allowed_key_stays_within_documented_bounds) {
  std::mt19937_64 rng(12345);
  for (const LevelBits& bits : all_test_bits()) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    const Key span = (Key{1} << bits.num_bits()) - 1;
    Key prev_max = 0;
    for (int step = 0; step < 300; ++step) {
      const Key min = w.min_allowed_key();
      const Key max = w.max_allowed_key();
      EXPECT_GE(max, std::min(kMaxRep, min + span));
      EXPECT_LE(max, kMaxRep);
      EXPECT_GE(max, min);
      EXPECT_GE(max, prev_max);
      prev_max = max;
      if (min == kMaxRep) break;
      // Mix unit steps, steps of about one level span, and huge jumps.
      Key delta = 1;
      switch (step % 3) {
        case 0: delta = 1; break;
        case 1: delta = 1 + rng() % (span + 1); break;
        case 2: delta = 1 + rng() % (Key{1} << (rng() % 62)); break;
      }
      const Key target = min + std::min(delta, kMaxRep - min);
      w.increase_min_allowed_key(target, [](Elt) {});
      EXPECT_EQ(w.min_allowed_key(), target);
      EXPECT_INVARIANTS(w);
    }
  }
}

// add() stores the key and value; key(), value(), contains(), size() read them back.
TEST(KeyWheel, add_then_accessors_read_back) {
  IntWheel w(LevelBits::create({2, 1, 3}));
  const Elt a = w.add(0, 10);
  EXPECT_INVARIANTS(w);
  const Elt b = w.add(5, 20);
  EXPECT_INVARIANTS(w);
  const Elt c = w.add(w.max_allowed_key(), 30);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.size(), 3u);
  EXPECT_FALSE(w.empty());
  EXPECT_TRUE(w.contains(a));
  EXPECT_TRUE(w.contains(b));
  EXPECT_TRUE(w.contains(c));
  EXPECT_FALSE(a == b);
  EXPECT_EQ(w.key(a), 0u);
  EXPECT_EQ(w.key(b), 5u);
  EXPECT_EQ(w.key(c), w.max_allowed_key());
  EXPECT_EQ(w.value(a), 10);
  EXPECT_EQ(w.value(b), 20);
  const IntWheel& cw = w;
  EXPECT_EQ(cw.value(c), 30);
  w.value(b) = 21;
  EXPECT_EQ(cw.value(b), 21);
}

// add() below min_allowed_key() throws std::out_of_range and changes nothing.
TEST(KeyWheel, add_rejects_key_below_min_allowed_key) {
  IntWheel w(LevelBits::create({3, 1}));
  w.increase_min_allowed_key(10, [](Elt) {});
  EXPECT_INVARIANTS(w);
  EXPECT_THROW(w.add(9, 1), std::out_of_range);
  EXPECT_THROW(w.add(0, 1), std::out_of_range);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_INVARIANTS(w);
  const Elt e = w.add(10, 1);
  EXPECT_EQ(w.key(e), 10u);
  EXPECT_INVARIANTS(w);
}

// add() above max_allowed_key() throws std::out_of_range; max_allowed_key() itself is accepted.
TEST(KeyWheel, add_rejects_key_above_max_allowed_key) {
  for (const LevelBits& bits : all_test_bits()) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    const Key max = w.max_allowed_key();
    if (max < kMaxRep) {
      EXPECT_THROW(w.add(max + 1, 1), std::out_of_range);
    }
    EXPECT_THROW(w.add(kMaxRep + 1, 1), std::out_of_range);
    EXPECT_THROW(w.add(~Key{0}, 1), std::out_of_range);
    EXPECT_EQ(w.size(), 0u);
    EXPECT_INVARIANTS(w);
    const Elt e = w.add(max, 2);
    EXPECT_EQ(w.key(e), max);
    EXPECT_EQ(w.size(), 1u);
    EXPECT_INVARIANTS(w);
  }
}

// remove() takes the element out and its handle is no longer contained.
TEST(KeyWheel, remove_takes_element_out) {
  IntWheel w(LevelBits::create({2, 2}));
  const Elt a = w.add(3, 1);
  const Elt b = w.add(3, 2);
  const Elt c = w.add(12, 3);
  EXPECT_INVARIANTS(w);
  w.remove(b);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.size(), 2u);
  EXPECT_FALSE(w.contains(b));
  EXPECT_TRUE(w.contains(a));
  EXPECT_TRUE(w.contains(c));
  const auto fired = increase(w, 100 > w.max_allowed_key() ? w.max_allowed_key() : 100);
  EXPECT_INVARIANTS(w);
  std::vector<int> values;
  for (const auto& kv : fired) values.push_back(kv.second);
  EXPECT_EQ(values, (std::vector<int>{1, 3}));
}

// A removed handle is stale: contains() is false and every accessor throws std::invalid_argument.
TEST(KeyWheel, removed_handle_is_stale_and_accessors_throw_invalid_argument) {
  IntWheel w(LevelBits::create({4, 4, 4}));
  const Elt e = w.add(7, 70);
  const Elt other = w.add(7, 71);
  w.remove(e);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(e));
  EXPECT_THROW((void)w.key(e), std::invalid_argument);
  EXPECT_THROW((void)w.value(e), std::invalid_argument);
  const IntWheel& cw = w;
  EXPECT_THROW((void)cw.value(e), std::invalid_argument);
  EXPECT_THROW(w.remove(e), std::invalid_argument);
  EXPECT_THROW(w.change_key(e, 8), std::invalid_argument);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_TRUE(w.contains(other));
  EXPECT_EQ(w.value(other), 71);
  EXPECT_INVARIANTS(w);
}

// A default-constructed handle is never contained and its accessors throw std::invalid_argument.
TEST(KeyWheel, default_handle_is_never_contained) {
  IntWheel w;
  const Elt none{};
  EXPECT_FALSE(w.contains(none));
  w.add(0, 1);  // even once the wheel holds an element (possibly in slot 0)
  EXPECT_FALSE(w.contains(none));
  EXPECT_THROW((void)w.key(none), std::invalid_argument);
  EXPECT_THROW((void)w.value(none), std::invalid_argument);
  EXPECT_THROW(w.remove(none), std::invalid_argument);
  EXPECT_THROW(w.change_key(none, 1), std::invalid_argument);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_INVARIANTS(w);
}

// A handle removed by increase_min_allowed_key is stale afterwards.
TEST(KeyWheel, fired_handle_is_stale) {
  IntWheel w(LevelBits::create({3, 1}));
  const Elt e = w.add(2, 5);
  increase(w, 3);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(e));
  EXPECT_THROW((void)w.key(e), std::invalid_argument);
  EXPECT_THROW((void)w.value(e), std::invalid_argument);
  EXPECT_THROW(w.remove(e), std::invalid_argument);
  EXPECT_THROW(w.change_key(e, 4), std::invalid_argument);
}

// Reusing a freed slot for a new element does not make any old handle valid again.
TEST(KeyWheel, reused_slot_does_not_revive_stale_handles) {
  IntWheel w(LevelBits::create({4, 4}));
  const Elt keep = w.add(1, -1);
  std::vector<Elt> stale;
  Elt live{};
  for (int i = 0; i < 2000; ++i) {
    live = w.add(static_cast<Key>(i % 200), i);
    EXPECT_TRUE(w.contains(live));
    for (const Elt& s : stale) {
      ASSERT_FALSE(s == live) << "a new handle equals a stale one at iteration " << i;
    }
    EXPECT_INVARIANTS(w);
    w.remove(live);
    EXPECT_INVARIANTS(w);
    stale.push_back(live);
    if (stale.size() > 64) stale.erase(stale.begin());
  }
  // One more element, most likely in a recycled slot: every old handle stays stale.
  const Elt fresh = w.add(5, 555);
  EXPECT_INVARIANTS(w);
  for (const Elt& s : stale) {
    EXPECT_FALSE(w.contains(s));
    EXPECT_THROW((void)w.key(s), std::invalid_argument);
    EXPECT_THROW((void)w.value(s), std::invalid_argument);
    EXPECT_THROW(w.remove(s), std::invalid_argument);
  }
  EXPECT_TRUE(w.contains(fresh));
  EXPECT_EQ(w.value(fresh), 555);
  EXPECT_TRUE(w.contains(keep));
  EXPECT_EQ(w.size(), 2u);
  EXPECT_INVARIANTS(w);
}
// The key of a value that is its own key: a KeyWheel that computes keys.
struct SelfKey {
  Key operator()(const Key& v) const noexcept { return v; }
};

// A wheel keeps working, with the same results, where a node cannot record its
// slot (a level of 24 bits or more: unlinking then computes the slot from the
// key), with keys stored or computed from the value.
template <class Wheel>
void run_wide_level_wheel() {
  Wheel w(LevelBits::create({24, 2}));
  // Level 0 has 2^25 slots (two banks); from here on now's bank is the second, slots 2^24 and up.
  const Key start = Key{3} << 23;
  w.increase_min_allowed_key(start, [](typename Wheel::Elt) {});
  std::mt19937_64 rng(24);
  std::vector<typename Wheel::Elt> live;
  std::multiset<Key> keys;
  auto add = [&](Key k) {
    if constexpr (Wheel::stores_keys) {
      live.push_back(w.add(k, static_cast<typename Wheel::value_type>(k)));
    } else {
      live.push_back(w.add_in_range(k, Key{k}));
    }
    keys.insert(k);
  };
  for (int i = 0; i < 2000; ++i) add(start + rng() % (w.max_allowed_key() - start + 1));
  for (int i = 0; i < 1000; ++i) {
    const std::size_t j = rng() % live.size();
    keys.erase(keys.find(w.key(live[j])));
    w.remove(live[j]);
    live[j] = live.back();
    live.pop_back();
  }
  EXPECT_INVARIANTS(w);
  ASSERT_EQ(w.min_key(), *keys.begin());
  std::vector<Key> fired;
  const Key to = start + (Key{1} << 24);
  w.increase_min_allowed_key(to, [&](typename Wheel::Elt e) { fired.push_back(w.key(e)); });
  EXPECT_INVARIANTS(w);
  const std::vector<Key> want(keys.begin(), keys.lower_bound(to));
  EXPECT_EQ(fired, want);
  EXPECT_EQ(w.size(), keys.size() - want.size());
}
TEST(KeyWheel, nodes_that_cannot_record_their_slot_unlink_by_key) {
  run_wide_level_wheel<KeyWheel<std::uint64_t>>();
  run_wide_level_wheel<KeyWheel<Key, SelfKey>>();
}

// Many live elements and many removals: all live handles stay valid, all removed ones stale.
TEST(KeyWheel, handles_stay_exact_under_heavy_slot_reuse) {
  IntWheel w(LevelBits::create({2, 1, 3}));
  std::mt19937_64 rng(7);
  std::vector<std::pair<Elt, int>> live;
  std::vector<Elt> stale;
  for (int i = 0; i < 3000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const Key key = w.min_allowed_key() + rng() % (w.max_allowed_key() - w.min_allowed_key() + 1);
      live.emplace_back(w.add(key, i), i);
    } else {
      const std::size_t idx = rng() % live.size();
      w.remove(live[idx].first);
      stale.push_back(live[idx].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(idx));
    }
    EXPECT_INVARIANTS(w);
  }
  EXPECT_EQ(w.size(), live.size());
  for (const auto& [e, v] : live) {
    ASSERT_TRUE(w.contains(e));
    EXPECT_EQ(w.value(e), v);
  }
  for (const Elt& s : stale) { ASSERT_FALSE(w.contains(s)); }
}

// change_key() moves an element to a later or earlier (still allowed) key.
TEST(KeyWheel, change_key_moves_element_earlier_and_later) {
  IntWheel w(LevelBits::create({2, 1, 3}));
  const Elt a = w.add(1, 1);
  const Elt b = w.add(40, 2);
  const Elt c = w.add(20, 3);
  w.change_key(a, 30);  // later, different level
  EXPECT_INVARIANTS(w);
  w.change_key(b, 2);   // earlier, different level
  EXPECT_INVARIANTS(w);
  w.change_key(c, 20);  // same key
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.key(a), 30u);
  EXPECT_EQ(w.key(b), 2u);
  EXPECT_EQ(w.key(c), 20u);
  EXPECT_EQ(w.min_key(), std::optional<Key>(2));
  auto fired = increase(w, 3);
  EXPECT_INVARIANTS(w);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0], std::make_pair(Key{2}, 2));
  fired = increase(w, 31);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(fired, (std::vector<std::pair<Key, int>>{{20, 3}, {30, 1}}));
  EXPECT_TRUE(w.empty());
}

// change_key() outside [min_allowed_key, max_allowed_key] throws std::out_of_range and leaves the element.
TEST(KeyWheel, change_key_rejects_out_of_range_and_keeps_element) {
  IntWheel w(LevelBits::create({3, 1}));
  w.increase_min_allowed_key(5, [](Elt) {});
  const Elt e = w.add(6, 1);
  EXPECT_THROW(w.change_key(e, 4), std::out_of_range);
  EXPECT_INVARIANTS(w);
  if (w.max_allowed_key() < kMaxRep) {
    EXPECT_THROW(w.change_key(e, w.max_allowed_key() + 1), std::out_of_range);
    EXPECT_INVARIANTS(w);
  }
  EXPECT_THROW(w.change_key(e, kMaxRep + 1), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(e));
  EXPECT_EQ(w.key(e), 6u);
  EXPECT_EQ(w.value(e), 1);
  EXPECT_EQ(w.size(), 1u);
  w.change_key(e, w.max_allowed_key());
  EXPECT_EQ(w.key(e), w.max_allowed_key());
  EXPECT_INVARIANTS(w);
}

// increase_min_allowed_key(k) removes exactly the keys < k, in nondecreasing key order, then min_allowed_key()==k.
TEST(KeyWheel, increase_min_allowed_key_removes_exactly_smaller_keys_in_key_order) {
  std::mt19937_64 rng(2024);
  for (const LevelBits& bits : all_test_bits()) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    std::multimap<Key, int> model;
    const Key limit = std::min<Key>(w.max_allowed_key(), 100000);
    for (int i = 0; i < 500; ++i) {
      // Log-uniform keys so every level gets elements.
      const Key span = std::min<Key>(limit, (Key{1} << (rng() % 18)) - 1);
      const Key key = rng() % (span + 1);
      w.add(key, i);
      model.emplace(key, i);
    }
    EXPECT_INVARIANTS(w);
    Key target = 0;
    while (!model.empty()) {
      target = std::min<Key>(w.max_allowed_key() + 1, target + 1 + rng() % 3000);
      const auto fired = increase(w, target);
      EXPECT_INVARIANTS(w);
      EXPECT_EQ(w.min_allowed_key(), target);
      std::multiset<std::pair<Key, int>> expected;
      for (auto it = model.begin(); it != model.end() && it->first < target;) {
        expected.emplace(it->first, it->second);
        it = model.erase(it);
      }
      EXPECT_EQ((std::multiset<std::pair<Key, int>>(fired.begin(), fired.end())), expected);
      for (std::size_t i = 1; i < fired.size(); ++i) {
        EXPECT_LE(fired[i - 1].first, fired[i].first) << "fired out of key order at " << i;
      }
      EXPECT_EQ(w.size(), model.size());
      if (!model.empty()) { EXPECT_EQ(w.min_key(), std::optional<Key>(model.begin()->first)); }
    }
  }
}

// Raising the minimum one key at a time fires each key exactly when the minimum passes it.
TEST(KeyWheel, unit_steps_fire_each_key_exactly_when_passed) {
  for (const LevelBits& bits : {LevelBits::create({1}), LevelBits::create({1, 1}), LevelBits::create({2, 1, 3}),
                                LevelBits::create({3, 1})}) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    const Key max = w.max_allowed_key();
    for (Key k = 0; k <= max; ++k) w.add(k, static_cast<int>(k));
    EXPECT_INVARIANTS(w);
    for (Key k = 1; k <= max + 1; ++k) {
      const auto fired = increase(w, k);
      EXPECT_INVARIANTS(w);
      ASSERT_EQ(fired.size(), 1u) << "at min key " << k;
      EXPECT_EQ(fired[0].first, k - 1);
    }
    EXPECT_TRUE(w.empty());
  }
}

// increase_min_allowed_key with a key <= min_allowed_key() does nothing.
TEST(KeyWheel, increase_min_allowed_key_to_smaller_or_equal_key_is_noop) {
  IntWheel w(LevelBits::create({4, 4}));
  increase(w, 10);
  const Elt e = w.add(10, 1);
  const Key max_before = w.max_allowed_key();
  int calls = 0;
  w.increase_min_allowed_key(5, [&](Elt) { ++calls; });
  w.increase_min_allowed_key(10, [&](Elt) { ++calls; });
  w.increase_min_allowed_key(0, [&](Elt) { ++calls; });
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(w.min_allowed_key(), 10u);
  EXPECT_EQ(w.max_allowed_key(), max_before);
  EXPECT_TRUE(w.contains(e));
}

// increase_min_allowed_key above 2^61-1 throws std::out_of_range; 2^61-1 itself is accepted.
TEST(KeyWheel, increase_min_allowed_key_rejects_keys_above_max_representable) {
  IntWheel w;
  const Elt e = w.add(100, 1);
  EXPECT_THROW(w.increase_min_allowed_key(kMaxRep + 1, [](Elt) {}), std::out_of_range);
  EXPECT_THROW(w.increase_min_allowed_key(~Key{0}, [](Elt) {}), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_allowed_key(), 0u);
  EXPECT_TRUE(w.contains(e));

  const Elt top = w.add(kMaxRep, 2);
  const auto fired = increase(w, kMaxRep);
  EXPECT_INVARIANTS(w);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0], std::make_pair(Key{100}, 1));
  EXPECT_EQ(w.min_allowed_key(), kMaxRep);
  EXPECT_EQ(w.max_allowed_key(), kMaxRep);
  EXPECT_TRUE(w.contains(top));
  const Elt top2 = w.add(kMaxRep, 3);
  EXPECT_THROW(w.add(kMaxRep + 1, 4), std::out_of_range);
  EXPECT_THROW(w.add(kMaxRep - 1, 4), std::out_of_range);
  EXPECT_EQ(w.min_key(), std::optional<Key>(kMaxRep));
  EXPECT_EQ(w.size(), 2u);
  EXPECT_TRUE(w.contains(top2));
  EXPECT_INVARIANTS(w);
}

// Keys near 2^61-1 work on small wheels too (the last keys are allowed and fire in order).
TEST(KeyWheel, keys_near_max_representable_key_work_on_small_wheels) {
  for (const LevelBits& bits : all_test_bits()) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    increase(w, kMaxRep - 5);
    EXPECT_INVARIANTS(w);
    EXPECT_EQ(w.min_allowed_key(), kMaxRep - 5);
    EXPECT_LE(w.max_allowed_key(), kMaxRep);
    std::vector<Key> added;
    for (Key k = kMaxRep; k + 6 > kMaxRep; --k) {
      if (k <= w.max_allowed_key()) {
        w.add(k, static_cast<int>(kMaxRep - k));
        added.push_back(k);
      }
    }
    EXPECT_INVARIANTS(w);
    const auto fired = increase(w, kMaxRep);
    EXPECT_INVARIANTS(w);
    std::vector<Key> fired_keys;
    for (const auto& kv : fired) fired_keys.push_back(kv.first);
    std::vector<Key> expected;
    for (Key k : added) if (k < kMaxRep) expected.push_back(k);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(fired_keys, expected);
  }
}

// Inside handle_removed, key() and value() are readable but contains() is already false.
TEST(KeyWheel, handle_removed_sees_key_and_value_of_an_uncontained_elt) {
  IntWheel w(LevelBits::create({2, 2}));
  const Elt a = w.add(1, 11);
  const Elt b = w.add(9, 99);
  int calls = 0;
  w.increase_min_allowed_key(10, [&](Elt e) {
    ++calls;
    EXPECT_FALSE(w.contains(e));
    if (e == a) {
      EXPECT_EQ(w.key(e), 1u);
      EXPECT_EQ(w.value(e), 11);
    } else {
      EXPECT_TRUE(e == b);
      EXPECT_EQ(w.key(e), 9u);
      EXPECT_EQ(w.value(e), 99);
    }
  });
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(w.contains(a));
  EXPECT_FALSE(w.contains(b));
  EXPECT_INVARIANTS(w);
}

// Mutating the wheel from handle_removed throws std::logic_error and leaves the wheel consistent.
TEST(KeyWheel, mutating_from_handle_removed_throws_logic_error) {
  IntWheel w(LevelBits::create({3, 1}));
  const Elt first = w.add(1, 1);
  const Elt second = w.add(2, 2);
  const Elt survivor = w.add(8, 3);
  int logic_errors = 0;
  int calls = 0;
  w.increase_min_allowed_key(3, [&](Elt e) {
    ++calls;
    auto expect_logic = [&](auto&& f) {
      try {
        f();
        ADD_FAILURE() << "mutation inside handle_removed did not throw";
      } catch (const std::logic_error&) {
        ++logic_errors;
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "expected std::logic_error, got: " << ex.what();
      }
    };
    expect_logic([&] { w.add(5, 50); });
    expect_logic([&] { w.remove(survivor); });
    expect_logic([&] { w.change_key(survivor, 6); });
    expect_logic([&] { w.increase_min_allowed_key(7, [](Elt) {}); });
    expect_logic([&] { w.clear(); });
    EXPECT_EQ(w.value(e), calls);  // still readable after the refused mutations
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(logic_errors, 10);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(first));
  EXPECT_FALSE(w.contains(second));
  EXPECT_TRUE(w.contains(survivor));
  EXPECT_EQ(w.key(survivor), 8u);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.min_allowed_key(), 3u);
  // The wheel works normally afterwards.
  const Elt later = w.add(5, 5);
  EXPECT_EQ(increase(w, 9), (std::vector<std::pair<Key, int>>{{5, 5}, {8, 3}}));
  EXPECT_FALSE(w.contains(later));
  EXPECT_INVARIANTS(w);
}

// min_elt()/min_key() always name an element with the smallest key.
TEST(KeyWheel, min_elt_and_min_key_track_the_smallest_key) {
  std::mt19937_64 rng(99);
  for (const LevelBits& bits : all_test_bits()) {
    SCOPED_TRACE(bits.num_bits());
    IntWheel w(bits);
    std::map<int, Elt> live;  // id -> elt
    std::multimap<Key, int> by_key;
    std::map<int, Key> key_of;
    for (int i = 0; i < 1500; ++i) {
      const unsigned op = rng() % 10;
      if (op < 5 || live.empty()) {
        const Key lo = w.min_allowed_key();
        const Key room = std::min<Key>(w.max_allowed_key() - lo, (Key{1} << (rng() % 40)));
        const Key key = lo + rng() % (room + 1);
        live[i] = w.add(key, i);
        by_key.emplace(key, i);
        key_of[i] = key;
      } else if (op < 8) {
        // Remove, preferring the current minimum to exercise the cache.
        int id = live.begin()->first;
        if (rng() % 2 == 0) id = by_key.begin()->second;
        w.remove(live[id]);
        live.erase(id);
        for (auto it = by_key.lower_bound(key_of[id]);; ++it) {
          if (it->second == id) {
            by_key.erase(it);
            break;
          }
        }
        key_of.erase(id);
      } else {
        const Key target = w.min_allowed_key() + rng() % 64;
        w.increase_min_allowed_key(std::min(target, kMaxRep), [&](Elt e) {
          const int id = w.value(e);
          live.erase(id);
          for (auto it = by_key.lower_bound(key_of[id]);; ++it) {
            if (it->second == id) {
              by_key.erase(it);
              break;
            }
          }
          key_of.erase(id);
        });
      }
      EXPECT_INVARIANTS(w);
      ASSERT_EQ(w.size(), by_key.size());
      if (by_key.empty()) {
        EXPECT_FALSE(w.min_elt().has_value());
        EXPECT_FALSE(w.min_key().has_value());
      } else {
        const std::optional<Elt> m = w.min_elt();
        ASSERT_TRUE(m.has_value());
        ASSERT_TRUE(w.contains(*m));
        EXPECT_EQ(w.key(*m), by_key.begin()->first) << "step " << i;
        EXPECT_EQ(w.min_key(), std::optional<Key>(by_key.begin()->first)) << "step " << i;
      }
    }
  }
}

// for_each visits every element exactly once.
TEST(KeyWheel, for_each_visits_every_element_once) {
  IntWheel w(LevelBits::create({2, 1, 3}));
  std::set<int> expected;
  for (int i = 0; i < 60; ++i) {
    w.add(static_cast<Key>(i % (w.max_allowed_key() + 1)), i);
    expected.insert(i);
  }
  std::multiset<int> seen;
  const IntWheel& cw = w;
  cw.for_each([&](Elt e) {
    EXPECT_TRUE(cw.contains(e));
    seen.insert(cw.value(e));
  });
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()), expected);
  EXPECT_EQ(seen.size(), expected.size());
  IntWheel empty;
  int calls = 0;
  empty.for_each([&](Elt) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// clear() removes every element, makes their handles stale, and keeps min_allowed_key().
TEST(KeyWheel, clear_removes_everything_and_stales_handles) {
  IntWheel w(LevelBits::create({4, 4, 4}));
  increase(w, 17);
  std::vector<Elt> elts;
  for (int i = 0; i < 100; ++i) elts.push_back(w.add(17 + static_cast<Key>(i) * 37, i));
  w.clear();
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.min_allowed_key(), 17u);
  EXPECT_FALSE(w.min_elt().has_value());
  EXPECT_FALSE(w.min_key().has_value());
  for (const Elt& e : elts) {
    EXPECT_FALSE(w.contains(e));
    EXPECT_THROW((void)w.key(e), std::invalid_argument);
  }
  int calls = 0;
  w.increase_min_allowed_key(10000, [&](Elt) { ++calls; });
  EXPECT_EQ(calls, 0);
  const Elt e = w.add(10000, 7);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.value(e), 7);
  EXPECT_INVARIANTS(w);
}

// clear() resets the cached minimum: min_elt() afterwards never returns a cleared element (Jane Street's bug).
TEST(KeyWheel, clear_resets_min_element_cache) {
  IntWheel w(LevelBits::create({3, 1}));
  const Elt old = w.add(2, 1);
  ASSERT_EQ(w.min_elt(), std::optional<Elt>(old));  // fill the cache
  EXPECT_EQ(w.min_key(), std::optional<Key>(2));
  w.clear();
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.min_elt().has_value());
  const Elt fresh = w.add(5, 2);  // likely reuses the slot of `old`
  EXPECT_INVARIANTS(w);
  const std::optional<Elt> m = w.min_elt();
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(w.contains(*m));
  EXPECT_EQ(*m, fresh);
  EXPECT_EQ(w.key(*m), 5u);
  EXPECT_EQ(w.min_key(), std::optional<Key>(5));

  // Same with a cleared minimum that is larger than the next minimum.
  w.clear();
  const Elt a = w.add(6, 3);
  ASSERT_EQ(w.min_elt(), std::optional<Elt>(a));
  w.clear();
  const Elt b = w.add(7, 4);
  const Elt c = w.add(1, 5);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_elt(), std::optional<Elt>(c));
  EXPECT_EQ(w.min_key(), std::optional<Key>(1));
  w.remove(c);
  EXPECT_EQ(w.min_elt(), std::optional<Elt>(b));
  EXPECT_INVARIANTS(w);
}

// Move-only values work, and handle_removed can move the value out.
TEST(KeyWheel, move_only_values_can_be_moved_out_on_removal) {
  KeyWheel<std::unique_ptr<int>> w(LevelBits::create({2, 2}));
  const auto a = w.add(1, std::make_unique<int>(10));
  const auto b = w.add(3, std::make_unique<int>(30));
  EXPECT_EQ(*w.value(a), 10);
  w.change_key(a, 2);
  EXPECT_EQ(*w.value(a), 10);
  std::vector<std::unique_ptr<int>> got;
  w.increase_min_allowed_key(4, [&](KeyWheel<std::unique_ptr<int>>::Elt e) { got.push_back(std::move(w.value(e))); });
  EXPECT_NO_THROW(w.check_invariants());
  ASSERT_EQ(got.size(), 2u);
  ASSERT_TRUE(got[0] && got[1]);
  EXPECT_EQ(*got[0], 10);
  EXPECT_EQ(*got[1], 30);
  EXPECT_FALSE(w.contains(b));
  const auto c = w.add(5, std::make_unique<int>(50));
  w.remove(c);
  EXPECT_TRUE(w.empty());
}

// Values are destroyed when removed, fired, cleared, or when the wheel is destroyed.
TEST(KeyWheel, values_are_destroyed_when_removed_fired_cleared_or_destroyed) {
  Tracked::live = 0;
  {
    KeyWheel<Tracked> w(LevelBits::create({2, 1, 3}));
    std::vector<KeyWheel<Tracked>::Elt> elts;
    for (int i = 0; i < 20; ++i) elts.push_back(w.add(static_cast<std::uint64_t>(i % 8), Tracked(i)));
    EXPECT_EQ(Tracked::live, 20);
    w.remove(elts[0]);
    EXPECT_EQ(Tracked::live, 19);
    w.remove(elts[19]);
    EXPECT_EQ(Tracked::live, 18);
    w.change_key(elts[5], 40);  // moving an element keeps exactly one value
    EXPECT_EQ(Tracked::live, 18);
    int fired = 0;
    w.increase_min_allowed_key(4, [&](KeyWheel<Tracked>::Elt) { ++fired; });
    EXPECT_NO_THROW(w.check_invariants());
    EXPECT_EQ(Tracked::live, 18 - fired);
    EXPECT_EQ(static_cast<long>(w.size()), Tracked::live);
    w.clear();
    EXPECT_EQ(Tracked::live, 0);
    for (int i = 0; i < 7; ++i) w.add(10, Tracked(i));
    EXPECT_EQ(Tracked::live, 7);
    // A rejected add must not keep the value either.
    EXPECT_THROW(w.add(0, Tracked(99)), std::out_of_range);
    EXPECT_EQ(Tracked::live, 7);
  }
  EXPECT_EQ(Tracked::live, 0);  // the wheel's destructor destroyed the rest
}

// A capacity hint pre-sizes storage; the wheel still grows past it and behaves the same.
TEST(KeyWheel, capacity_hint_does_not_limit_size) {
  for (std::size_t capacity : {std::size_t{0}, std::size_t{1}, std::size_t{16}, std::size_t{1000}}) {
    IntWheel w(LevelBits::create({6, 6, 6, 6}), capacity);
    for (int i = 0; i < 3000; ++i) {
      w.add(static_cast<Key>(i), i);
      if (i % 97 == 0) { EXPECT_INVARIANTS(w); }
    }
    EXPECT_EQ(w.size(), 3000u);
    EXPECT_INVARIANTS(w);
    const auto fired = increase(w, 3000);
    ASSERT_EQ(fired.size(), 3000u);
    for (int i = 0; i < 3000; ++i) { EXPECT_EQ(fired[static_cast<std::size_t>(i)].second, i); }
    EXPECT_INVARIANTS(w);
  }
}

// reserve() rounds up to whole 2048-element chunks, keeps every handle and
// value (also across nodes that growth allocated but never handed out), and
// the reserved capacity fills up without growing.
TEST(KeyWheel, reserve_presizes_and_keeps_every_handle) {
  IntWheel w(LevelBits::create({6, 6, 6, 6}));
  EXPECT_EQ(w.capacity(), 0u);
  w.reserve(0);
  EXPECT_EQ(w.capacity(), 0u);
  w.reserve(1);
  EXPECT_EQ(w.capacity(), 2048u);
  EXPECT_INVARIANTS(w);

  std::vector<Elt> elts;
  for (int i = 0; i < 3000; ++i) elts.push_back(w.add(static_cast<Key>(i % 500), i));
  EXPECT_GE(w.capacity(), 3000u);
  for (int i = 0; i < 3000; i += 3) w.remove(elts[static_cast<std::size_t>(i)]);
  const std::size_t grown = w.capacity();
  w.reserve(grown);  // writes the nodes growth left unused; the capacity stays
  EXPECT_EQ(w.capacity(), grown);
  EXPECT_INVARIANTS(w);
  w.reserve(100'000);
  EXPECT_GE(w.capacity(), 100'000u);
  EXPECT_LT(w.capacity(), 100'000u + 2048u);
  EXPECT_EQ(w.capacity() % 2048, 0u);
  EXPECT_INVARIANTS(w);
  for (int i = 0; i < 3000; ++i) {
    const Elt e = elts[static_cast<std::size_t>(i)];
    ASSERT_EQ(w.contains(e), i % 3 != 0) << i;
    if (i % 3 != 0) { EXPECT_EQ(w.value(e), i); }
  }

  const std::size_t reserved = w.capacity();
  while (w.size() < reserved) w.add(static_cast<Key>(w.size() % 4000), -1);
  EXPECT_EQ(w.capacity(), reserved);
  for (int i = 0; i < 3000; i += 3) { EXPECT_FALSE(w.contains(elts[static_cast<std::size_t>(i)])); }
  EXPECT_INVARIANTS(w);
  w.add(0, -2);  // one more grows past the reservation
  EXPECT_GT(w.capacity(), reserved);
  EXPECT_INVARIANTS(w);
  w.clear();
  EXPECT_GT(w.capacity(), reserved);
  EXPECT_INVARIANTS(w);
}

// Growth without reserve adds blocks of a quarter of the capacity (whole
// chunks, 1 to 32 of them), so a wheel never holds much more than it needs.
TEST(KeyWheel, growth_steps_are_bounded) {
  IntWheel w(LevelBits::create({6, 6, 6, 6}));
  std::size_t last = 0;
  for (std::size_t n = 1; n <= 300'000; ++n) {
    w.add(static_cast<Key>(n % 4000), 0);
    if (w.capacity() != last) {
      const std::size_t step = w.capacity() - last;
      EXPECT_EQ(step % 2048, 0u);
      EXPECT_LE(step, std::max<std::size_t>(2048, last / 4)) << "at size " << n;
      EXPECT_LE(step, 65'536u);
      last = w.capacity();
    }
  }
  EXPECT_LE(w.capacity(), 300'000u + 65'536u);
  EXPECT_INVARIANTS(w);
}

// reserve() beyond the 32-bit index space throws std::length_error and
// changes nothing.
TEST(KeyWheel, reserve_beyond_the_index_space_throws_length_error) {
  IntWheel w;
  const Elt e = w.add(5, 1);
  const std::size_t capacity = w.capacity();
  EXPECT_THROW(w.reserve(std::size_t{1} << 32), std::length_error);
  EXPECT_THROW(w.reserve(std::numeric_limits<std::size_t>::max()), std::length_error);
  EXPECT_EQ(w.capacity(), capacity);
  EXPECT_EQ(w.value(e), 1);
  EXPECT_INVARIANTS(w);
}

// reserve() moves no element, so it is allowed inside handle_removed.
TEST(KeyWheel, reserve_inside_handle_removed_is_allowed) {
  IntWheel w(LevelBits::create({6, 6, 6, 6}));
  for (int i = 0; i < 3000; ++i) w.add(static_cast<Key>(i), i);
  std::vector<int> fired;
  w.increase_min_allowed_key(3000, [&](Elt e) {
    fired.push_back(w.value(e));
    if (fired.size() == 1000) w.reserve(50'000);
  });
  ASSERT_EQ(fired.size(), 3000u);
  for (int i = 0; i < 3000; ++i) { EXPECT_EQ(fired[static_cast<std::size_t>(i)], i); }
  EXPECT_GE(w.capacity(), 50'000u);
  EXPECT_INVARIANTS(w);
}

// Values in reserved and in grown storage are destroyed exactly once.
TEST(KeyWheel, reserved_storage_destroys_values_once) {
  {
    KeyWheel<Tracked> w(LevelBits::create({6, 6, 6, 6}), 5000);
    for (int i = 0; i < 3000; ++i) w.add(static_cast<Key>(i), Tracked(i));
    w.reserve(20'000);
    for (int i = 0; i < 9000; ++i) w.add(static_cast<Key>(i), Tracked(i));
    EXPECT_EQ(Tracked::live, 12'000);
    int removed = 0;
    w.increase_min_allowed_key(100, [&](KeyWheel<Tracked>::Elt e) {
      EXPECT_LT(w.value(e).id, 9000);
      ++removed;
    });
    EXPECT_EQ(removed, 200);  // keys 0..99, once from each batch
    EXPECT_EQ(Tracked::live, 11'800);
  }
  EXPECT_EQ(Tracked::live, 0);
}

}  // namespace

namespace {

// Keys removed by increase_min_allowed_key(to), in removal order.
std::vector<Key> removed_keys(IntWheel& w, Key to) {
  std::vector<Key> keys;
  w.increase_min_allowed_key(to, [&](Elt e) { keys.push_back(w.key(e)); });
  return keys;
}

// The smallest and largest keys that for_each_in_first_slot / for_each_in_last_slot report.
std::pair<Key, Key> first_and_last_slot_bounds(const IntWheel& w, const std::map<int, Key>& key_of_value) {
  Key min = std::numeric_limits<Key>::max();
  Key max = 0;
  w.for_each_in_first_slot([&](int v) { min = std::min(min, key_of_value.at(v)); });
  w.for_each_in_last_slot([&](int v) { max = std::max(max, key_of_value.at(v)); });
  return {min, max};
}

}  // namespace

// cascade_ahead moves the next level-0 block down in steps and changes no result: the minimum, what an
// increase removes and in which order, and where later adds into that block go.
TEST(KeyWheel, cascade_ahead_moves_the_next_block_down_and_changes_no_result) {
  IntWheel w(LevelBits::create({4, 4, 4}));  // level-0 blocks of 16 keys
  const Elt e3 = w.add(3, 0);
  for (const Key k : {20, 18, 25, 18, 31, 16}) w.add(k, static_cast<int>(k));
  w.add(40, 40);
  EXPECT_TRUE(w.cascade_ahead(2));  // six elements in [16, 32): four left on level 1
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_key(), 3u);
  w.remove(e3);
  EXPECT_EQ(w.min_key(), 16u);
  EXPECT_INVARIANTS(w);
  w.add(17, 17);  // into the block being moved: level 0 directly
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.cascade_ahead(1));
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(removed_keys(w, 19), (std::vector<Key>{16, 17, 18, 18}));
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(removed_keys(w, 41), (std::vector<Key>{20, 25, 31, 40}));
  EXPECT_TRUE(w.empty());
  EXPECT_INVARIANTS(w);
}

// While the next block is half moved down, min_key, min_elt and the first and last slots (which
// TimingWheel's min_alarm_time and max_alarm_time read) still give the exact minimum and maximum,
// wherever they are; for every budget and many orders of the block's keys.
TEST(KeyWheel, minimum_and_maximum_stay_exact_while_the_next_block_is_half_moved) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    IntWheel w(LevelBits::create({3, 2, 2}));     // blocks of 8 keys; level 1 spans 32
    const Key now = (rng() % 3) * 8 + rng() % 8;  // a block that is not the last of its level-1 span
    w.increase_min_allowed_key(now, [](Elt) {});
    const Key next = (now / 8 + 1) * 8;
    std::map<int, Key> key_of_value;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int v = 0; v < n; ++v) {
      const Key k = next + rng() % 8;
      key_of_value[v] = k;
      w.add(k, v);
    }
    Key min = std::numeric_limits<Key>::max();
    Key max = 0;
    for (const auto& [v, k] : key_of_value) {
      min = std::min(min, k);
      max = std::max(max, k);
    }
    const std::size_t budget = rng() % (n + 1);
    EXPECT_EQ(w.cascade_ahead(budget), budget < static_cast<std::size_t>(n));
    EXPECT_INVARIANTS(w);
    EXPECT_EQ(w.min_key(), min) << "round " << round;
    EXPECT_EQ(w.key(*w.min_elt()), min);
    EXPECT_EQ(first_and_last_slot_bounds(w, key_of_value), std::make_pair(min, max)) << "round " << round;
    const std::vector<Key> keys = removed_keys(w, next + 8);
    EXPECT_EQ(keys.size(), static_cast<std::size_t>(n));
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end())) << "round " << round;
    EXPECT_INVARIANTS(w);
  }
}

// cascade_ahead does nothing on a one-level wheel. Inside handle_removed it throws std::logic_error.
TEST(KeyWheel, cascade_ahead_does_nothing_on_one_level_and_throws_inside_handle_removed) {
  IntWheel one(LevelBits::create({8}));
  one.add(200, 1);
  EXPECT_FALSE(one.cascade_ahead(100));
  EXPECT_INVARIANTS(one);

  IntWheel r(LevelBits::create({4, 4, 4}));
  r.add(1, 1);
  r.add(20, 2);
  bool threw = false;
  r.increase_min_allowed_key(2, [&](Elt) {
    try {
      r.cascade_ahead(1);
    } catch (const std::logic_error&) {
      threw = true;
    }
  });
  EXPECT_TRUE(threw);
  EXPECT_INVARIANTS(r);
  EXPECT_EQ(r.size(), 1u);
}

// At the last block of a level-1 span, cascade_ahead moves the next span down from level 2 in steps,
// then its first block on to level 0, so the increase that enters it re-files nothing; no result
// changes.
TEST(KeyWheel, cascade_ahead_moves_the_next_span_down_from_level_two_at_a_level_one_boundary) {
  IntWheel w(LevelBits::create({4, 4, 4}));  // level-1 spans of 256 keys
  w.increase_min_allowed_key(243, [](Elt) {});
  for (const Key k : {250, 260, 300, 600}) w.add(k, static_cast<int>(k));
  EXPECT_TRUE(w.cascade_ahead(1));  // [256, 512): 260 to level 1, 300 left on level 2
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_key(), 250u);
  EXPECT_TRUE(w.cascade_ahead(1));  // 300 to level 1; [256, 272) is next, 260 still on level 1
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.cascade_ahead(5));  // 260 to level 0
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(removed_keys(w, 257), (std::vector<Key>{250}));
  EXPECT_EQ(w.moved_by_last_increase(), 0u);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(removed_keys(w, 301), (std::vector<Key>{260, 300}));
  EXPECT_EQ(removed_keys(w, 601), (std::vector<Key>{600}));
  EXPECT_TRUE(w.empty());
  EXPECT_INVARIANTS(w);
}

// Called once per key step with a budget of twice the elements due per step per level,
// cascade_ahead leaves nothing for any increase of one key to re-file between levels, with every
// key ahead holding elements: across the boundaries of level-1 blocks, of level-1 spans (where the
// next span comes down from level 2), of level-2 spans and of top-level slots, for several shapes.
TEST(KeyWheel, one_key_increases_refile_nothing_when_cascade_ahead_keeps_up) {
  constexpr int kPerKey = 3;  // elements due per key step
  for (const std::vector<int>& bits :
       std::vector<std::vector<int>>{{2, 2, 2, 2}, {3, 2, 2}, {4, 2, 3, 3}, {1, 1, 1, 1, 1}, {2, 1, 3}}) {
    IntWheel w(LevelBits::create(bits));
    const std::size_t levels = bits.size();
    const std::size_t budget = 2 * levels * kPerKey;
    Key filled = 0;  // every key below holds kPerKey elements
    auto fill = [&] {
      for (; filled <= w.max_allowed_key(); ++filled) {
        for (int c = 0; c < kPerKey; ++c) w.add(filled, c);
      }
    };
    fill();
    const Key turn = Key{1} << w.level_bits().num_bits();
    std::size_t worst = 0;
    Key worst_at = 0;
    for (Key k = 1; k <= 3 * turn; ++k) {
      w.cascade_ahead(budget);
      std::size_t removed = 0;
      w.increase_min_allowed_key(k, [&](Elt) { ++removed; });
      ASSERT_EQ(removed, static_cast<std::size_t>(kPerKey)) << "key " << k;
      if (w.moved_by_last_increase() > worst) {
        worst = w.moved_by_last_increase();
        worst_at = k;
      }
      fill();
      if (k % 61 == 0) {
        ASSERT_NO_THROW(w.check_invariants()) << "key " << k;
      }
    }
    EXPECT_EQ(worst, 0u) << "bits " << ::testing::PrintToString(bits) << ": the increase to " << worst_at
                         << " re-filed " << worst << " elements";
  }
}

// Steps `w` up to `key` as a caller whose increases must stay bounded does: an increase to
// bounded_increase_limit(key), then cascade_ahead(budget), until min_allowed_key() is key.
struct BoundedSteps {
  std::vector<std::pair<Key, int>> removed;  // in the order handed out
  std::size_t steps = 0;
  std::size_t most_moves = 0;           // in one step: the increase's re-files plus cascade_ahead's moves
  std::size_t most_increase_moves = 0;  // the increases' re-files alone
  bool stalled = false;                 // a step made no progress and cascade_ahead moved nothing
};
BoundedSteps bounded_increase(IntWheel& w, Key key, std::size_t budget) {
  BoundedSteps r;
  while (w.min_allowed_key() < key && !r.stalled) {
    ++r.steps;
    const Key before = w.min_allowed_key();
    const Key to = w.bounded_increase_limit(key);
    EXPECT_GE(to, before);
    EXPECT_LE(to, key);
    w.increase_min_allowed_key(to, [&](Elt e) { r.removed.emplace_back(w.key(e), w.value(e)); });
    const std::size_t increase_moves = to > before ? w.moved_by_last_increase() : 0;
    w.cascade_ahead(budget);
    r.most_increase_moves = std::max(r.most_increase_moves, increase_moves);
    r.most_moves = std::max(r.most_moves, increase_moves + w.moved_by_last_cascade_ahead());
    r.stalled = to == before && w.moved_by_last_cascade_ahead() == 0;
  }
  return r;
}

TEST(KeyWheel, bounded_increase_limit_is_the_key_itself_when_nothing_is_in_the_way) {
  IntWheel w(LevelBits::create({4, 4, 4}));
  EXPECT_EQ(w.bounded_increase_limit(0), 0u);
  EXPECT_EQ(w.bounded_increase_limit(w.max_allowed_key()), w.max_allowed_key());  // empty
  w.add(5, 5);
  w.add(300, 300);                                 // level 2 (now's level-1 span is [0, 256))
  EXPECT_EQ(w.bounded_increase_limit(15), 15u);    // in now's level-0 block
  EXPECT_EQ(w.bounded_increase_limit(255), 255u);  // level 1 is empty
  EXPECT_EQ(w.bounded_increase_limit(256), 255u);  // entering [256, 512) would cascade 300
  EXPECT_EQ(w.bounded_increase_limit(4000), 255u);
  w.increase_min_allowed_key(255, [](Elt) {});
  EXPECT_EQ(w.bounded_increase_limit(4000), 255u);  // no progress: 300's slot is next to move down
  EXPECT_TRUE(w.cascade_ahead(0));                  // nothing moved with no budget
  EXPECT_FALSE(w.cascade_ahead(1));                 // 300 to level 1; level 0 takes [256, 272), empty
  EXPECT_EQ(w.moved_by_last_cascade_ahead(), 1u);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.bounded_increase_limit(4000), 287u);  // 300's level-1 slot [288, 304) is in the way
  EXPECT_EQ(removed_keys(w, 4000), (std::vector<Key>{300}));
  EXPECT_INVARIANTS(w);
}

// The guarantee of bounded_increase_limit: with elements at every level and jumps of many spans
// at once, stepping by the limit and cascade_ahead(budget) re-files at most `budget` elements a
// step (the increases none), always makes progress, and removes exactly what one increase to the
// same key removes from a wheel given the same calls, in the same order.
TEST(KeyWheel, bounded_increases_move_at_most_the_budget_a_step_and_remove_what_one_increase_would) {
  for (const std::vector<int>& bits :
       std::vector<std::vector<int>>{{2, 2, 2, 2}, {3, 2, 2}, {4, 3, 3, 10}, {1, 1, 1, 1, 1}, {2, 1, 3}, {4, 4}}) {
    SCOPED_TRACE(::testing::PrintToString(bits));
    IntWheel bounded(LevelBits::create(bits));
    IntWheel reference(LevelBits::create(bits));
    std::mt19937_64 rng(bits.size() * 131 + static_cast<std::size_t>(bits[0]));
    int next_value = 0;
    auto add_to_both = [&](std::size_t n) {
      const Key lo = bounded.min_allowed_key(), hi = bounded.max_allowed_key();
      ASSERT_EQ(reference.max_allowed_key(), hi);
      for (std::size_t i = 0; i < n; ++i) {
        // Half of them near now, the rest anywhere in range: every level holds some.
        const Key span = i % 2 == 0 ? std::min<Key>(hi - lo, 64) : hi - lo;
        const Key k = lo + rng() % (span + 1);
        bounded.add(k, next_value);
        reference.add(k, next_value);
        ++next_value;
      }
    };
    const std::size_t budget = 7;
    add_to_both(3000);
    std::size_t total_steps = 0, most_moves = 0;
    for (int jump = 0; jump < 40; ++jump) {
      const Key now = bounded.min_allowed_key();
      const Key room = bounded.max_allowed_key() - now;
      const Key key = now + 1 + rng() % std::max<Key>(room / 3, 1);
      const BoundedSteps r = bounded_increase(bounded, key, budget);
      ASSERT_FALSE(r.stalled) << "jump " << jump << ": no progress at " << bounded.min_allowed_key();
      ASSERT_EQ(bounded.min_allowed_key(), key);
      EXPECT_EQ(r.most_increase_moves, 0u) << "jump " << jump;
      EXPECT_LE(r.most_moves, budget) << "jump " << jump;
      std::vector<std::pair<Key, int>> expected;
      reference.increase_min_allowed_key(key,
                                         [&](Elt e) { expected.emplace_back(reference.key(e), reference.value(e)); });
      ASSERT_EQ(r.removed, expected) << "jump " << jump << " to " << key;
      ASSERT_EQ(bounded.size(), reference.size());
      ASSERT_NO_THROW(bounded.check_invariants()) << "jump " << jump;
      total_steps += r.steps;
      most_moves = std::max(most_moves, r.most_moves);
      if (jump % 10 == 9) {
        // Adds between jumps reach level 0 by different routes in the two wheels (one has
        // spans moved down ahead), so equal keys may come out in another order: the jump that
        // follows is compared by keys in order and by the set of elements.
        add_to_both(300);
        std::vector<std::pair<Key, int>> a, b;
        const Key far = bounded.min_allowed_key() + (bounded.max_allowed_key() - bounded.min_allowed_key()) / 2;
        const BoundedSteps r2 = bounded_increase(bounded, far, budget);
        ASSERT_FALSE(r2.stalled);
        EXPECT_EQ(r2.most_increase_moves, 0u);
        EXPECT_LE(r2.most_moves, budget);
        reference.increase_min_allowed_key(far, [&](Elt e) { b.emplace_back(reference.key(e), reference.value(e)); });
        a = r2.removed;
        std::vector<Key> ka, kb;
        for (const auto& p : a) ka.push_back(p.first);
        for (const auto& p : b) kb.push_back(p.first);
        ASSERT_EQ(ka, kb) << "keys in nondecreasing order";
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        ASSERT_EQ(a, b) << "the same elements";
      }
    }
    EXPECT_GT(total_steps, 40u) << "the jumps were bounded in steps";
    EXPECT_GT(most_moves, 0u);
  }
}

// Only a slot that holds elements stops an increase: an empty wheel reaches any key in one step,
// and a sparse one (a few elements far apart, on high levels) in a few steps per element, not
// one per span crossed.
TEST(KeyWheel, bounded_increase_limit_lets_an_empty_or_sparse_wheel_reach_a_far_key_in_a_few_steps) {
  {
    IntWheel w;
    const Key far = w.max_allowed_key();
    const BoundedSteps r = bounded_increase(w, far, 1024);
    EXPECT_EQ(r.steps, 1u);
    EXPECT_EQ(w.min_allowed_key(), far);
  }
  for (const std::vector<int>& bits :
       std::vector<std::vector<int>>{{11, 10, 10, 10, 10, 10}, {4, 3, 3, 10}, {2, 2, 2, 2}}) {
    SCOPED_TRACE(::testing::PrintToString(bits));
    IntWheel w(LevelBits::create(bits));
    std::mt19937_64 rng(7);
    const Key far = w.max_allowed_key();
    constexpr int kElements = 6;
    std::vector<Key> keys;
    for (int i = 0; i < kElements; ++i) keys.push_back(1 + rng() % far);
    for (int i = 0; i < kElements; ++i) w.add(keys[i], i);
    std::sort(keys.begin(), keys.end());
    const BoundedSteps r = bounded_increase(w, far, 1024);
    ASSERT_FALSE(r.stalled);
    EXPECT_EQ(w.min_allowed_key(), far);
    // At most a step before each non-empty slot an element passes through on its way down.
    EXPECT_LE(r.steps, 2 * bits.size() * kElements + 1);
    EXPECT_EQ(r.most_increase_moves, 0u);
    std::vector<Key> removed;
    for (const auto& p : r.removed) removed.push_back(p.first);
    keys.erase(std::remove_if(keys.begin(), keys.end(), [far](Key k) { return k >= far; }), keys.end());
    EXPECT_EQ(removed, keys);
    EXPECT_INVARIANTS(w);
  }
}
