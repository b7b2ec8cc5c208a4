// SPDX-License-Identifier: BSL-1.0
// chime/detail/multiply_high.hpp: the high 64 bits of a 64 x 64-bit product.
//
// What this is: multiply_high(a, b) = floor(a * b / 2^64), exact for every
// pair of 64-bit unsigned values, in standard C++20. Where the compiler has a
// native 128-bit unsigned type (__SIZEOF_INT128__: GCC and Clang on 64-bit
// targets) it is one widening multiply (multiply_high_native); elsewhere it is
// four 32 x 32-bit products (multiply_high_portable). Both are constexpr and
// always give the same result; tests/multiply_high_test.cpp checks them
// against each other.
//
// Who may touch it: anyone; pure functions.
#pragma once

#include <cstdint>

namespace chime::detail {

// Schoolbook multiplication in 32-bit halves: a * b = hh * 2^64 + (hl + lh) * 2^32 + ll.
// `middle` is at most 3 * (2^32 - 1), so nothing overflows.
constexpr std::uint64_t multiply_high_portable(std::uint64_t a, std::uint64_t b) noexcept {
  constexpr std::uint64_t kLow32 = 0xffff'ffffu;
  const std::uint64_t a_lo = a & kLow32;
  const std::uint64_t a_hi = a >> 32;
  const std::uint64_t b_lo = b & kLow32;
  const std::uint64_t b_hi = b >> 32;
  const std::uint64_t ll = a_lo * b_lo;
  const std::uint64_t lh = a_lo * b_hi;
  const std::uint64_t hl = a_hi * b_lo;
  const std::uint64_t hh = a_hi * b_hi;
  const std::uint64_t middle = (ll >> 32) + (lh & kLow32) + (hl & kLow32);
  return hh + (lh >> 32) + (hl >> 32) + (middle >> 32);
}

#if defined(__SIZEOF_INT128__)
inline constexpr bool kHasNativeMultiplyHigh = true;

constexpr std::uint64_t multiply_high_native(std::uint64_t a, std::uint64_t b) noexcept {
  // __extension__: the type is a compiler extension, which -pedantic-errors otherwise rejects.
  __extension__ typedef unsigned __int128 Uint128;
  return static_cast<std::uint64_t>((static_cast<Uint128>(a) * b) >> 64);
}
#else
inline constexpr bool kHasNativeMultiplyHigh = false;
#endif

constexpr std::uint64_t multiply_high(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__SIZEOF_INT128__)
  return multiply_high_native(a, b);
#else
  return multiply_high_portable(a, b);
#endif
}

}  // namespace chime::detail
