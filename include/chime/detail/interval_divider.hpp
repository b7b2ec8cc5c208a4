// SPDX-License-Identifier: BSL-1.0
// chime/detail/interval_divider.hpp: exact unsigned division by the alarm precision.
//
// What this is: `n / d` for a divisor fixed at construction, without a
// hardware divide on the hot path. A power-of-two divisor is a shift. Any other
// divisor d >= 3 uses m = floor(2^64 / d): the estimate q' = mulhi(n, m)
// (detail/multiply_high.hpp) is q or q - 1 (because n * (2^64 mod d) <
// d * 2^64), and one compare of the remainder fixes it. The result is exact
// for every 64-bit n: no floating point, no rounding, no 128-bit type.
//
// Who may touch it: anyone; it is immutable after construction.
#pragma once

#include <bit>
#include <cstdint>

#include "chime/detail/multiply_high.hpp"

namespace chime::detail {

class IntervalDivider {
 public:
  IntervalDivider() = default;
  // d > 0.
  explicit IntervalDivider(std::uint64_t d) noexcept : divisor_(d) {
    if (std::has_single_bit(d)) {
      shift_ = std::countr_zero(d);
    } else {
      shift_ = -1;
      // floor(2^64 / d) = floor((2^64 - 1) / d): d is not a power of two, so it does not divide 2^64.
      magic_ = ~std::uint64_t{0} / d;
    }
  }

  std::uint64_t divisor() const noexcept { return divisor_; }

  std::uint64_t divide(std::uint64_t n) const noexcept {
    if (shift_ >= 0) return n >> shift_;
    std::uint64_t q = multiply_high(n, magic_);
    if (n - q * divisor_ >= divisor_) ++q;
    return q;
  }

 private:
  std::uint64_t divisor_ = 1;
  std::uint64_t magic_ = 0;
  int shift_ = 0;
};

}  // namespace chime::detail
