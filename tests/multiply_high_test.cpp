// SPDX-License-Identifier: BSL-1.0
// The high half of a 64 x 64-bit product (include/chime/detail/multiply_high.hpp): the portable
// form is exact on products whose high half is known by construction, and, where the compiler has
// a native 128-bit type, the native form too; every form agrees with a shift-and-add oracle.
#include <chime/detail/multiply_high.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using chime::detail::multiply_high;
using chime::detail::multiply_high_portable;

constexpr std::uint64_t kMax = ~std::uint64_t{0};

static_assert(multiply_high_portable(0, kMax) == 0);
static_assert(multiply_high_portable(kMax, kMax) == kMax - 1);
static_assert(multiply_high(kMax, kMax) == kMax - 1);

// Values next to every boundary of the 32-bit halves and of the whole word.
std::vector<std::uint64_t> edge_values() {
  std::vector<std::uint64_t> v;
  for (const std::uint64_t base : {std::uint64_t{0}, std::uint64_t{1} << 31, std::uint64_t{1} << 32,
                                   std::uint64_t{1} << 33, std::uint64_t{1} << 63, kMax}) {
    for (const std::uint64_t delta : {0u, 1u, 2u, 3u}) {
      v.push_back(base + delta);
      v.push_back(base - delta);
    }
  }
  v.push_back(0xffff'ffffu);
  v.push_back(0xffff'ffff'0000'0000u);
  v.push_back(0x5555'5555'5555'5555u);
  v.push_back(0xaaaa'aaaa'aaaa'aaaau);
  v.push_back(1'000'000'007u);
  return v;
}

// Products whose high half is known without wide arithmetic: 2^i * 2^j, (2^64 - 1) * x
// (= x * 2^64 - x: high half x - 1 for x > 0), x * y with x, y < 2^32, and x * 2^k (x >> (64 - k)).
TEST(MultiplyHigh, portable_form_is_exact_on_products_of_known_high_half) {
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 64; ++j) {
      const std::uint64_t expected = i + j >= 64 ? std::uint64_t{1} << (i + j - 64) : 0;
      ASSERT_EQ(multiply_high_portable(std::uint64_t{1} << i, std::uint64_t{1} << j), expected) << i << " " << j;
    }
  }
  std::mt19937_64 rng(20261201);
  for (int n = 0; n < 100000; ++n) {
    const std::uint64_t x = rng();
    ASSERT_EQ(multiply_high_portable(kMax, x), x == 0 ? 0 : x - 1) << x;
    ASSERT_EQ(multiply_high_portable(x, kMax), x == 0 ? 0 : x - 1) << x;
    const std::uint64_t small_a = rng() >> 32;
    const std::uint64_t small_b = rng() >> 32;
    ASSERT_EQ(multiply_high_portable(small_a, small_b), 0u) << small_a << " " << small_b;
  }
  for (int k = 1; k < 64; ++k) {
    const std::uint64_t x = rng();
    ASSERT_EQ(multiply_high_portable(x, std::uint64_t{1} << k), x >> (64 - k)) << x << " " << k;
  }
  // Commutative, and at most either factor (a * b < a * 2^64).
  for (const std::uint64_t a : edge_values()) {
    for (const std::uint64_t b : edge_values()) {
      const std::uint64_t h = multiply_high_portable(a, b);
      ASSERT_EQ(h, multiply_high_portable(b, a)) << a << " " << b;
      ASSERT_LE(h, a) << a << " " << b;
      ASSERT_LE(h, b) << a << " " << b;
    }
  }
}

// The high half by shift and add, one bit of `b` at a time, into a two-word
// accumulator: an oracle that shares no arithmetic with either form.
std::uint64_t reference_high(std::uint64_t a, std::uint64_t b) {
  std::uint64_t hi = 0, lo = 0;
  for (int i = 0; i < 64; ++i) {
    if (((b >> i) & 1u) == 0) continue;
    const std::uint64_t add_lo = a << i;
    const std::uint64_t add_hi = i == 0 ? 0 : a >> (64 - i);
    lo += add_lo;
    hi += add_hi + (lo < add_lo ? 1u : 0u);
  }
  return hi;
}

// multiply_high, its portable form and, where the compiler has a native
// 128-bit type, its native form agree with the shift-and-add oracle on edge
// values and random values: in the build without a native type too
// (chime_portable_arithmetic_tests), where multiply_high is the portable form.
TEST(MultiplyHigh, every_form_agrees_with_shift_and_add) {
  const auto check = [](std::uint64_t a, std::uint64_t b) {
    const std::uint64_t want = reference_high(a, b);
    ASSERT_EQ(multiply_high_portable(a, b), want) << a << " * " << b;
    ASSERT_EQ(multiply_high(a, b), want) << a << " * " << b;
#if defined(__SIZEOF_INT128__)
    ASSERT_EQ(chime::detail::multiply_high_native(a, b), want) << a << " * " << b;
#endif
  };
#if defined(__SIZEOF_INT128__)
  static_assert(chime::detail::kHasNativeMultiplyHigh);
#else
  static_assert(!chime::detail::kHasNativeMultiplyHigh);
#endif
  const std::vector<std::uint64_t> edges = edge_values();
  for (const std::uint64_t a : edges) {
    for (const std::uint64_t b : edges) check(a, b);
  }
  std::mt19937_64 rng(20261202);
  for (int n = 0; n < 1000000; ++n) {
    const std::uint64_t a = rng();
    const std::uint64_t b = rng();
    check(a, b);
    // Short operands too: a random number of significant bits each.
    check(a >> (rng() % 64), b >> (rng() % 64));
  }
}

}  // namespace
