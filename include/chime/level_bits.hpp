// SPDX-License-Identifier: BSL-1.0
// chime/level_bits.hpp: the shape of a hierarchical timing wheel.
//
// Contract:
// - A `LevelBits` is a non-empty list `{b_0, b_1, ..., b_{L-1}}` of positive
//   integers whose sum `num_bits()` is at most `max_num_bits` (61). Level `i`
//   of a wheel built from it has `2^b_i` slots, each slot covering
//   `2^(b_0 + ... + b_{i-1})` keys (intervals), so level `i` spans
//   `2^(b_0 + ... + b_i)` keys and the whole wheel about `2^num_bits()` keys
//   beyond its current minimum.
// - `create` validates and throws `std::invalid_argument` naming the offending
//   value; a `LevelBits` that exists is always valid.
// - `default_bits()` is `{11, 10, 10, 10, 10, 10}` (Jane Street's 64-bit
//   default): 7168 slots in all; 2^61 intervals, about 73 years at 1 ns.
// - Trade-off: for a fixed `num_bits()`, more levels mean fewer slots (less
//   memory) but more moves per alarm as the clock advances.
//
// Not guaranteed: a wheel can allocate any `LevelBits`. A single level is
// `2^b_i` slot heads, so `KeyWheel` refuses levels wider than
// `KeyWheel<T>::max_level_bits` bits.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "chime/time.hpp"

namespace chime {

class LevelBits {
 public:
  // Largest allowed sum of the level bits: keys stay below 2^61, so key
  // arithmetic (key + span of the widest level) never overflows 64 bits.
  static constexpr int max_num_bits = 61;

  // Throws std::invalid_argument if `bits` is empty, any b_i <= 0, or the sum
  // exceeds max_num_bits. Never allocates.
  static LevelBits create(std::span<const int> bits) {
    if (bits.empty()) throw std::invalid_argument("chime::LevelBits::create: the list of level bits is empty");
    LevelBits result;
    long long sum = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      const int b = bits[i];
      if (b <= 0) {
        throw std::invalid_argument("chime::LevelBits::create: level " + std::to_string(i) + " has " +
                                    std::to_string(b) + " bits; every level needs at least 1");
      }
      sum += b;
      if (sum > max_num_bits || i >= static_cast<std::size_t>(max_num_bits)) {
        throw std::invalid_argument("chime::LevelBits::create: the level bits sum to more than " +
                                    std::to_string(max_num_bits) + " (sum of the first " + std::to_string(i + 1) +
                                    " levels is " + std::to_string(sum) + ")");
      }
      result.bits_[i] = b;
    }
    result.num_levels_ = static_cast<int>(bits.size());
    result.num_bits_ = static_cast<int>(sum);
    return result;
  }
  static LevelBits create(std::initializer_list<int> bits) {
    return create(std::span<const int>(bits.begin(), bits.size()));
  }

  // {11, 10, 10, 10, 10, 10}: 61 bits. Never allocates.
  static LevelBits default_bits() { return create({11, 10, 10, 10, 10, 10}); }

  // Sum of the level bits.
  int num_bits() const noexcept { return num_bits_; }
  int num_levels() const noexcept { return num_levels_; }
  std::span<const int> bits() const noexcept { return {bits_.data(), static_cast<std::size_t>(num_levels_)}; }

  // Span of each level: level i covers alarm_precision * 2^(b_0 + ... + b_i),
  // saturating at Duration::max() instead of overflowing. Throws
  // std::invalid_argument if alarm_precision <= 0. May allocate.
  std::vector<Duration> durations(Duration alarm_precision) const {
    if (alarm_precision <= Duration::zero()) {
      throw std::invalid_argument("chime::LevelBits::durations: alarm_precision must be positive, got " +
                                  std::to_string(alarm_precision.count()) + " ns");
    }
    std::vector<Duration> result;
    result.reserve(static_cast<std::size_t>(num_levels_));
    // precision * 2^sum > max exactly when precision > floor(max / 2^sum); sum <= 61, so the
    // shifts stay inside 64 bits.
    const auto max = static_cast<std::uint64_t>(Duration::max().count());
    const auto precision = static_cast<std::uint64_t>(alarm_precision.count());
    int sum = 0;
    for (int b : bits()) {
      sum += b;
      const std::uint64_t span = precision > (max >> sum) ? max : precision << sum;
      result.push_back(Duration(static_cast<Duration::rep>(span)));
    }
    return result;
  }

  friend bool operator==(const LevelBits& a, const LevelBits& b) noexcept {
    if (a.num_levels_ != b.num_levels_) return false;
    for (int i = 0; i < a.num_levels_; ++i) {
      if (a.bits_[i] != b.bits_[i]) return false;
    }
    return true;
  }

 private:
  LevelBits() = default;

  std::array<int, max_num_bits> bits_{};
  int num_levels_ = 0;
  int num_bits_ = 0;
};

}  // namespace chime
