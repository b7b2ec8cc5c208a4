// SPDX-License-Identifier: BSL-1.0
// Unit tests for chime::LevelBits: what create() accepts and rejects (with
// messages that name the offending values), default_bits(), and durations()
// with its saturation instead of overflow. Written from the contract
// (level_bits.hpp) and Jane Street's Level_bits documentation.

#include <chime/level_bits.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using chime::Duration;
using chime::LevelBits;

// Returns what() of the std::invalid_argument thrown by create(bits), or
// records a failure if create does not throw it.
std::string create_error(std::initializer_list<int> bits) {
  try {
    (void)LevelBits::create(bits);
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "create threw the wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "create did not throw std::invalid_argument";
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<int> to_vector(std::span<const int> s) { return {s.begin(), s.end()}; }

// An empty list of level bits is rejected (both overloads).
TEST(LevelBits, create_rejects_empty_list) {
  EXPECT_THROW((void)LevelBits::create(std::initializer_list<int>{}), std::invalid_argument);
  std::vector<int> none;
  EXPECT_THROW((void)LevelBits::create(std::span<const int>(none)), std::invalid_argument);
}

// Any level with b <= 0 bits is rejected, and the message names that value.
TEST(LevelBits, create_rejects_nonpositive_bits_naming_them) {
  EXPECT_THROW((void)LevelBits::create({0}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({3, 0}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({-1}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({INT_MIN, 5}), std::invalid_argument);
  const std::string msg = create_error({2, -13, 4});
  EXPECT_TRUE(contains(msg, "-13")) << msg;
  const std::string msg0 = create_error({5, 7, 0});
  EXPECT_TRUE(contains(msg0, "0")) << msg0;
}

// A total above max_num_bits (61) is rejected, and the message names the total.
TEST(LevelBits, create_rejects_sum_over_61_naming_it) {
  EXPECT_EQ(LevelBits::max_num_bits, 61);
  EXPECT_THROW((void)LevelBits::create({62}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({31, 31}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({11, 10, 10, 10, 10, 10, 1}), std::invalid_argument);
  const std::string msg = create_error({40, 30});
  EXPECT_TRUE(contains(msg, "70")) << msg;
  const std::string msg62 = create_error({11, 10, 10, 10, 10, 10, 1});
  EXPECT_TRUE(contains(msg62, "62")) << msg62;
}

// A sum that would overflow int is still rejected cleanly (no UB, no wrap to a small sum).
TEST(LevelBits, create_rejects_int_overflowing_sum) {
  EXPECT_THROW((void)LevelBits::create({INT_MAX, INT_MAX}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({INT_MAX, 1}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({INT_MAX, INT_MAX, 2}), std::invalid_argument);
  EXPECT_THROW((void)LevelBits::create({1, INT_MAX}), std::invalid_argument);
}

// Every list of positive bits with sum <= 61 is accepted, including exactly 61.
TEST(LevelBits, create_accepts_positive_bits_up_to_61) {
  EXPECT_NO_THROW((void)LevelBits::create({1}));
  EXPECT_NO_THROW((void)LevelBits::create({61}));
  EXPECT_NO_THROW((void)LevelBits::create({30, 31}));
  EXPECT_NO_THROW((void)LevelBits::create({2, 1, 3}));
  std::vector<int> ones(61, 1);
  const LevelBits all_ones = LevelBits::create(std::span<const int>(ones));
  EXPECT_EQ(all_ones.num_bits(), 61);
  EXPECT_EQ(all_ones.bits().size(), 61u);
}

// bits() returns the list as given and num_bits() its sum.
TEST(LevelBits, bits_and_num_bits_report_the_list) {
  const LevelBits lb = LevelBits::create({2, 1, 3});
  EXPECT_EQ(to_vector(lb.bits()), (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(lb.num_bits(), 6);
  const LevelBits one = LevelBits::create({1});
  EXPECT_EQ(to_vector(one.bits()), (std::vector<int>{1}));
  EXPECT_EQ(one.num_bits(), 1);
}

// The span overload builds the same value as the initializer_list overload.
TEST(LevelBits, span_overload_equals_initializer_list_overload) {
  const std::vector<int> v{4, 4, 4};
  const LevelBits from_span = LevelBits::create(std::span<const int>(v));
  EXPECT_EQ(from_span, LevelBits::create({4, 4, 4}));
  EXPECT_EQ(to_vector(from_span.bits()), v);
  const std::vector<int> bad{4, 0};
  EXPECT_THROW((void)LevelBits::create(std::span<const int>(bad)), std::invalid_argument);
  const std::vector<int> big{31, 31};
  EXPECT_THROW((void)LevelBits::create(std::span<const int>(big)), std::invalid_argument);
}

// The default is Jane Street's 64-bit default {11,10,10,10,10,10}: 61 bits.
TEST(LevelBits, default_bits_are_11_then_five_10s) {
  const LevelBits d = LevelBits::default_bits();
  EXPECT_EQ(to_vector(d.bits()), (std::vector<int>{11, 10, 10, 10, 10, 10}));
  EXPECT_EQ(d.num_bits(), 61);
  EXPECT_EQ(d, LevelBits::create({11, 10, 10, 10, 10, 10}));
}

// operator== compares the whole ordered list; copies compare equal.
TEST(LevelBits, equality_compares_the_ordered_list) {
  EXPECT_EQ(LevelBits::create({1, 2}), LevelBits::create({1, 2}));
  EXPECT_FALSE(LevelBits::create({1, 2}) == LevelBits::create({2, 1}));
  EXPECT_FALSE(LevelBits::create({3}) == LevelBits::create({3, 1}));
  EXPECT_FALSE(LevelBits::create({3}) == LevelBits::create({1, 2}));
  const LevelBits a = LevelBits::create({6, 6, 6, 6});
  const LevelBits b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(a, b);
  LevelBits c = LevelBits::create({1});
  c = a;
  EXPECT_EQ(c, a);
}

// durations(p)[i] == p * 2^(b_0 + ... + b_i), one entry per level.
TEST(LevelBits, durations_are_precision_times_cumulative_powers_of_two) {
  const LevelBits lb = LevelBits::create({2, 1, 3});
  const std::vector<Duration> d = lb.durations(Duration{5});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], Duration{5 * 4});
  EXPECT_EQ(d[1], Duration{5 * 8});
  EXPECT_EQ(d[2], Duration{5 * 64});

  const std::vector<Duration> one = LevelBits::create({1}).durations(Duration{3});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], Duration{6});
}

// Default bits at 1 ns: levels span 2^11, 2^21, ..., 2^61 ns (the last ~73 years).
TEST(LevelBits, durations_of_default_bits_at_1ns_reach_2_pow_61) {
  const std::vector<Duration> d = LevelBits::default_bits().durations(Duration{1});
  ASSERT_EQ(d.size(), 6u);
  const int cumulative[] = {11, 21, 31, 41, 51, 61};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(d[i].count(), std::int64_t{1} << cumulative[i]) << "level " << i;
  }
  // 2^61 ns is about 73 years (Jane Street's 64-bit table).
  const auto years = std::chrono::duration_cast<std::chrono::duration<std::int64_t, std::ratio<31557600>>>(d[5]);
  EXPECT_EQ(years.count(), 73);
}

// A level whose span exceeds int64 nanoseconds saturates at Duration::max().
TEST(LevelBits, durations_saturate_instead_of_overflowing) {
  const std::vector<Duration> ms = LevelBits::default_bits().durations(std::chrono::milliseconds{1});
  ASSERT_EQ(ms.size(), 6u);
  EXPECT_EQ(ms[0], std::chrono::milliseconds{std::int64_t{1} << 11});
  EXPECT_EQ(ms[3], std::chrono::milliseconds{std::int64_t{1} << 41});  // 2.2e15 ns: still fits
  EXPECT_EQ(ms[4], Duration::max());                                   // 2^51 ms > INT64_MAX ns
  EXPECT_EQ(ms[5], Duration::max());

  // 3 * 2^61 fits in int64, 4 * 2^61 == 2^63 does not.
  EXPECT_EQ(LevelBits::create({61}).durations(Duration{3})[0].count(), std::int64_t{3} << 61);
  EXPECT_EQ(LevelBits::create({61}).durations(Duration{4})[0], Duration::max());
  // Edge of the multiplication: 2 * (INT64_MAX / 2) == INT64_MAX - 1 fits; 2 * INT64_MAX does not.
  EXPECT_EQ(LevelBits::create({1}).durations(Duration{INT64_MAX / 2})[0].count(), INT64_MAX - 1);
  EXPECT_EQ(LevelBits::create({1}).durations(Duration::max())[0], Duration::max());
  // Once saturated, later levels stay saturated.
  const std::vector<Duration> big = LevelBits::create({60, 1}).durations(Duration{16});
  EXPECT_EQ(big[0], Duration::max());
  EXPECT_EQ(big[1], Duration::max());
}

}  // namespace
