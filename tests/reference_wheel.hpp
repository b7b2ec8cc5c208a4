// SPDX-License-Identifier: BSL-1.0
// A plain reference model for the wheel tests: exact 128-bit interval
// arithmetic and an ordered multiset of (key, id) with O(1) random access to
// ids. It knows nothing about levels, slots or bitmaps; the differential tests
// replay the same operations on it and on chime's wheels and compare.
//
// Keys are whatever the wheel orders by: alarm times in nanoseconds for
// TimingWheel, keys for KeyWheel.

#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chime_test {

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

inline constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kMaxRepresentableKey = (std::int64_t{1} << 61) - 1;

inline std::string to_string(i128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  u128 u = neg ? static_cast<u128>(-(v + 1)) + 1 : static_cast<u128>(v);
  std::string s;
  while (u != 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return neg ? "-" + s : s;
}

inline std::int64_t clamp64(i128 v) {
  if (v > kI64Max) return kI64Max;
  if (v < kI64Min) return kI64Min;
  return static_cast<std::int64_t>(v);
}

// Interval arithmetic of a timing wheel with the given start and precision, exact in 128 bits:
// interval k is [start + k*precision, start + (k+1)*precision).
struct IntervalMath {
  std::int64_t start = 0;
  std::int64_t precision = 1;

  // floor((t - start) / precision); requires t >= start.
  i128 num(std::int64_t t) const { return (static_cast<i128>(t) - start) / precision; }
  i128 num_start(i128 k) const { return start + k * precision; }
  i128 interval_start(std::int64_t t) const { return num_start(num(t)); }
  // The last interval whose start is representable as an int64 nanosecond count.
  i128 k_max() const { return (static_cast<i128>(kI64Max) - start) / precision; }
};

// Deterministic random helpers over a 64-bit Mersenne twister.
class Random {
 public:
  explicit Random(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t next() { return rng_(); }
  // Uniform in [0, n); n > 0.
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  bool chance(unsigned percent) { return below(100) < percent; }
  // Uniform in [0, n] (0 when n <= 0).
  i128 uniform(i128 n) {
    if (n <= 0) return 0;
    const u128 r = (static_cast<u128>(rng_()) << 64) | rng_();
    return static_cast<i128>(r % (static_cast<u128>(n) + 1));
  }
  // Log-uniform in [0, n]: a uniform bit width, then uniform below 2^width. Reaches near and far alike.
  i128 log_uniform(i128 n) {
    if (n <= 0) return 0;
    int width = 0;
    for (i128 v = n; v != 0; v >>= 1) ++width;
    const int e = static_cast<int>(below(static_cast<std::uint64_t>(width) + 1));
    const i128 cap = (i128{1} << e) - 1;
    return uniform(cap < n ? cap : n);
  }

 private:
  std::mt19937_64 rng_;
};

// The model: an ordered multiset of (key, id), each id carrying the wheel's handle.
template <class Key, class Handle>
class ReferenceQueue {
 public:
  using Map = std::multimap<Key, std::uint64_t>;
  struct Entry {
    Key key;
    Handle handle;
    std::size_t pos;  // index in ids_
    typename Map::iterator it;
  };

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  void insert(std::uint64_t id, Key key, Handle h) {
    const auto it = by_key_.emplace(key, id);
    entries_.emplace(id, Entry{key, h, ids_.size(), it});
    ids_.push_back(id);
  }

  const Entry* find(std::uint64_t id) const {
    const auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
  }

  Entry erase(std::uint64_t id) {
    const auto it = entries_.find(id);
    Entry e = it->second;
    by_key_.erase(e.it);
    const std::uint64_t last = ids_.back();
    ids_[e.pos] = last;
    entries_.at(last).pos = e.pos;
    ids_.pop_back();
    entries_.erase(it);
    return e;
  }

  void change(std::uint64_t id, Key key) {
    Entry& e = entries_.at(id);
    by_key_.erase(e.it);
    e.key = key;
    e.it = by_key_.emplace(key, id);
  }

  // A live id drawn from `r`: a Random, or anything else with below(n) (the fuzz target's input).
  template <class R>
  std::uint64_t random_id(R& r) const {
    return ids_[r.below(ids_.size())];
  }

  std::optional<Key> min_key() const {
    if (by_key_.empty()) return std::nullopt;
    return by_key_.begin()->first;
  }
  std::optional<Key> max_key() const {
    if (by_key_.empty()) return std::nullopt;
    return std::prev(by_key_.end())->first;
  }

  // Removes and returns (id, key, handle) of every entry with key < bound, in key order.
  std::vector<std::pair<std::uint64_t, Entry>> take_below(Key bound) {
    std::vector<std::pair<std::uint64_t, Entry>> out;
    while (!by_key_.empty() && by_key_.begin()->first < bound) {
      const std::uint64_t id = by_key_.begin()->second;
      out.emplace_back(id, erase(id));
    }
    return out;
  }
  // Same with key <= bound.
  std::vector<std::pair<std::uint64_t, Entry>> take_at_most(Key bound) {
    std::vector<std::pair<std::uint64_t, Entry>> out;
    while (!by_key_.empty() && by_key_.begin()->first <= bound) {
      const std::uint64_t id = by_key_.begin()->second;
      out.emplace_back(id, erase(id));
    }
    return out;
  }

  std::vector<std::uint64_t> ids() const { return ids_; }
  const Map& by_key() const { return by_key_; }

  void clear() {
    entries_.clear();
    by_key_.clear();
    ids_.clear();
  }

 private:
  std::unordered_map<std::uint64_t, Entry> entries_;
  Map by_key_;
  std::vector<std::uint64_t> ids_;
};

}  // namespace chime_test
