// SPDX-License-Identifier: BSL-1.0
// Exact division by a fixed divisor (include/chime/detail/interval_divider.hpp): divide(n) is n / d
// for powers of two, small and large odd divisors, divisors next to 2^32 and 2^64, and random ones,
// at the numerators next to multiples of d, next to 2^64, and random numerators.
#include <chime/detail/interval_divider.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using chime::detail::IntervalDivider;

constexpr std::uint64_t kMax = ~std::uint64_t{0};

void check_divisor(std::uint64_t d, std::mt19937_64& rng) {
  const IntervalDivider div(d);
  ASSERT_EQ(div.divisor(), d);
  std::vector<std::uint64_t> numerators = {0, 1, 2, d - 1, d, d + 1, kMax, kMax - 1, kMax - d, kMax / 2};
  for (const std::uint64_t q : {kMax / d, kMax / d - 1, kMax / d / 2, std::uint64_t{1}, std::uint64_t{2}}) {
    numerators.push_back(q * d);
    numerators.push_back(q * d - 1);
    numerators.push_back(q * d + d - 1);
  }
  for (int i = 0; i < 2000; ++i) {
    numerators.push_back(rng());
    numerators.push_back(rng() >> (rng() % 64));
  }
  for (const std::uint64_t n : numerators) {
    ASSERT_EQ(div.divide(n), n / d) << n << " / " << d;
  }
}

TEST(IntervalDivider, divide_is_exact_for_every_kind_of_divisor) {
  std::mt19937_64 rng(20261203);
  std::vector<std::uint64_t> divisors = {1, 2, 3, 5, 7, 10, 1000, 1'000'000, 999'983, 1'000'000'007};
  for (int k = 1; k < 64; ++k) {
    const std::uint64_t p = std::uint64_t{1} << k;
    divisors.push_back(p);
    divisors.push_back(p + 1);
    if (p > 2) divisors.push_back(p - 1);
  }
  divisors.push_back(kMax);
  divisors.push_back(kMax - 1);
  for (int i = 0; i < 200; ++i) {
    divisors.push_back(rng() | 1);
    divisors.push_back((rng() >> (rng() % 63)) | 1);
  }
  for (const std::uint64_t d : divisors) check_divisor(d, rng);
}

}  // namespace
