// SPDX-License-Identifier: BSL-1.0
// Unit tests for chime::TimingWheel<T> (Jane Street's Timing_wheel semantics,
// time.hpp and timing_wheel.hpp): construction, exact integer interval
// arithmetic, alarm_upper_bound (including its saturation), add/reschedule/
// remove with their errors, generation-checked alarms, advance_clock (what
// fires, never early, never more than one interval late, in nondecreasing
// interval order), fire_past_alarms, the min/max/next queries, clear, value
// lifetimes, and the worked examples of the Jane Street documentation.
// check_invariants() runs after every mutation.

#include <chime/wheel.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using chime::Duration;
using chime::LevelBits;
using chime::TimePoint;
using chime::TimingWheel;
using chime::WheelConfig;

__extension__ typedef __int128 i128;

using IntWheel = TimingWheel<int>;
using Alarm = IntWheel::Alarm;

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMaxKey = (std::int64_t{1} << 61) - 1;

#define EXPECT_INVARIANTS(w) EXPECT_NO_THROW((w).check_invariants())

TimePoint T(std::int64_t ns) { return TimePoint{Duration{ns}}; }
std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

WheelConfig config(std::int64_t precision_ns, LevelBits bits = LevelBits::default_bits(), std::size_t capacity = 0) {
  return WheelConfig{Duration{precision_ns}, bits, capacity};
}

struct Fired {
  Alarm alarm;
  TimePoint at;
  int value;
};

// Advances `w` to `to` and returns the fired alarms in firing order, with at() and value() read in the handler.
std::vector<Fired> advance(IntWheel& w, TimePoint to) {
  std::vector<Fired> out;
  w.advance_clock(to, [&](Alarm a) {
    EXPECT_FALSE(w.contains(a));
    out.push_back({a, w.at(a), w.value(a)});
  });
  return out;
}

std::vector<Fired> fire_past(IntWheel& w) {
  std::vector<Fired> out;
  w.fire_past_alarms([&](Alarm a) {
    EXPECT_FALSE(w.contains(a));
    out.push_back({a, w.at(a), w.value(a)});
  });
  return out;
}

std::vector<int> values_of(const std::vector<Fired>& fired) {
  std::vector<int> v;
  for (const Fired& f : fired) v.push_back(f.value);
  return v;
}

std::multiset<int> value_set(const std::vector<Fired>& fired) {
  std::multiset<int> s;
  for (const Fired& f : fired) s.insert(f.value);
  return s;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

template <class F>
std::string out_of_range_message(F&& f) {
  try {
    f();
  } catch (const std::out_of_range& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected std::out_of_range, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected std::out_of_range, nothing thrown";
  return {};
}

// K_max: the last interval whose start is representable as a TimePoint.
i128 k_max(std::int64_t start, std::int64_t p) { return (static_cast<i128>(kI64Max) - start) / p; }

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

// ---------------------------------------------------------------------------
// Construction and configuration

// The Alarm handle is a small trivially copyable, default-constructible value.
TEST(TimingWheel, alarm_is_trivially_copyable_and_default_constructible) {
  static_assert(std::is_trivially_copyable_v<Alarm>);
  static_assert(std::is_nothrow_default_constructible_v<Alarm>);
  EXPECT_EQ(Alarm{}, Alarm{});
}

// WheelConfig is an aggregate {alarm_precision, level_bits = default, capacity = 0}.
TEST(TimingWheel, wheel_config_defaults_to_default_level_bits) {
  const WheelConfig c{.alarm_precision = Duration{5}};
  EXPECT_EQ(c.alarm_precision, Duration{5});
  EXPECT_EQ(c.level_bits, LevelBits::default_bits());
  EXPECT_EQ(c.capacity, 0u);
  IntWheel w(c, T(0));
  EXPECT_EQ(w.level_bits(), LevelBits::default_bits());
}

// The constructor throws std::invalid_argument when alarm_precision <= 0.
TEST(TimingWheel, constructor_rejects_nonpositive_precision) {
  EXPECT_THROW((void)IntWheel(config(0), T(0)), std::invalid_argument);
  EXPECT_THROW((void)IntWheel(config(-1), T(0)), std::invalid_argument);
  EXPECT_THROW((void)IntWheel(WheelConfig{Duration::min()}, T(0)), std::invalid_argument);
  EXPECT_NO_THROW((void)IntWheel(config(1), T(0)));
  EXPECT_NO_THROW((void)IntWheel(WheelConfig{Duration::max()}, T(0)));
}

// A new wheel has now() == start(), the given precision and level bits, and no alarms.
TEST(TimingWheel, new_wheel_reports_its_configuration) {
  IntWheel w(config(7, LevelBits::create({2, 1, 3}), 100), T(1000));
  EXPECT_EQ(w.now(), T(1000));
  EXPECT_EQ(w.start(), T(1000));
  EXPECT_EQ(w.alarm_precision(), Duration{7});
  EXPECT_EQ(w.level_bits(), LevelBits::create({2, 1, 3}));
  EXPECT_EQ(w.size(), 0u);
  EXPECT_TRUE(w.empty());
  EXPECT_FALSE(w.min_alarm_time().has_value());
  EXPECT_FALSE(w.max_alarm_time().has_value());
  EXPECT_FALSE(w.next_alarm_fires_at().has_value());
  EXPECT_FALSE(w.min_alarm_interval_num().has_value());
  EXPECT_EQ(w.now_interval_num_start(), T(1000));
  EXPECT_INVARIANTS(w);
}

// ---------------------------------------------------------------------------
// Interval arithmetic

// interval_num(t) == floor((t - start) / precision); interval_num_start(k) == start + k*precision.
TEST(TimingWheel, interval_num_counts_whole_precisions_from_start) {
  IntWheel w(config(3), T(10));
  EXPECT_EQ(w.interval_num(T(10)), 0);
  EXPECT_EQ(w.interval_num(T(12)), 0);
  EXPECT_EQ(w.interval_num(T(13)), 1);
  EXPECT_EQ(w.interval_num(T(15)), 1);
  EXPECT_EQ(w.interval_num(T(16)), 2);
  EXPECT_EQ(w.interval_num(T(10 + 3000 + 2)), 1000);
  EXPECT_EQ(w.interval_num_start(0), T(10));
  EXPECT_EQ(w.interval_num_start(1), T(13));
  EXPECT_EQ(w.interval_num_start(1000), T(3010));
  EXPECT_EQ(w.interval_start(T(10)), T(10));
  EXPECT_EQ(w.interval_start(T(12)), T(10));
  EXPECT_EQ(w.interval_start(T(13)), T(13));
  EXPECT_EQ(w.interval_start(T(3012)), T(3010));
}

// interval_num and interval_start throw std::out_of_range for t < start().
TEST(TimingWheel, interval_functions_reject_times_before_start) {
  IntWheel w(config(3), T(10));
  EXPECT_THROW((void)w.interval_num(T(9)), std::out_of_range);
  EXPECT_THROW((void)w.interval_start(T(9)), std::out_of_range);
  EXPECT_THROW((void)w.interval_num(TimePoint::min()), std::out_of_range);
  EXPECT_THROW((void)w.interval_start(TimePoint::min()), std::out_of_range);
  IntWheel neg(config(1000), T(-5000));
  EXPECT_EQ(neg.interval_num(T(-5000)), 0);
  EXPECT_EQ(neg.interval_num(T(-3999)), 1);
  EXPECT_THROW((void)neg.interval_num(T(-5001)), std::out_of_range);
}

// interval_num throws std::out_of_range when the interval number would exceed 2^61-1.
TEST(TimingWheel, interval_num_rejects_numbers_beyond_2_pow_61_minus_1) {
  IntWheel w(config(1), T(0));
  EXPECT_EQ(w.interval_num(T(kMaxKey)), kMaxKey);
  EXPECT_EQ(w.interval_start(T(kMaxKey)), T(kMaxKey));
  EXPECT_THROW((void)w.interval_num(T(kMaxKey + 1)), std::out_of_range);
  EXPECT_THROW((void)w.interval_start(T(kMaxKey + 1)), std::out_of_range);
  EXPECT_THROW((void)w.interval_num(TimePoint::max()), std::out_of_range);
  // With precision 4 the whole int64 range maps to intervals <= 2^61-1.
  IntWheel w4(config(4), T(0));
  EXPECT_EQ(w4.interval_num(TimePoint::max()), kMaxKey);
  // With precision 3 it does not.
  IntWheel w3(config(3), T(0));
  EXPECT_EQ(w3.interval_num(T(3 * kMaxKey + 2)), kMaxKey);
  EXPECT_THROW((void)w3.interval_num(T(3 * kMaxKey + 3)), std::out_of_range);
}

// interval_num_start throws std::out_of_range for k < 0 and when start + k*precision overflows.
TEST(TimingWheel, interval_num_start_rejects_negative_and_overflowing_k) {
  IntWheel ms(config(1'000'000), T(0));
  const std::int64_t last = kI64Max / 1'000'000;  // 9223372036854
  EXPECT_EQ(ms.interval_num_start(last), T(last * 1'000'000));
  EXPECT_THROW((void)ms.interval_num_start(last + 1), std::out_of_range);
  EXPECT_THROW((void)ms.interval_num_start(kI64Max), std::out_of_range);
  EXPECT_THROW((void)ms.interval_num_start(-1), std::out_of_range);
  EXPECT_THROW((void)ms.interval_num_start(kI64Min), std::out_of_range);

  IntWheel ns(config(1), T(5));
  EXPECT_EQ(ns.interval_num_start(kI64Max - 5), TimePoint::max());
  EXPECT_THROW((void)ns.interval_num_start(kI64Max - 4), std::out_of_range);
  EXPECT_THROW((void)ns.interval_num_start(kI64Max), std::out_of_range);

  IntWheel neg(config(7), T(-100));
  EXPECT_EQ(neg.interval_num_start(0), T(-100));
  EXPECT_EQ(neg.interval_num_start(3), T(-79));
  EXPECT_THROW((void)neg.interval_num_start(-1), std::out_of_range);
}

// All interval arithmetic is exact integer arithmetic, even where a double would round (odd precisions, huge times).
TEST(TimingWheel, interval_arithmetic_is_exact_for_odd_precisions) {
  // 2^63 - 1 is divisible by 7: interval_num(max) and its start are exact.
  IntWheel w7(config(7), T(0));
  const std::int64_t k = kI64Max / 7;  // 1317624576693539401
  ASSERT_EQ(static_cast<i128>(k) * 7, static_cast<i128>(kI64Max));
  EXPECT_EQ(w7.interval_num(TimePoint::max()), k);
  EXPECT_EQ(w7.interval_num_start(k), TimePoint::max());
  EXPECT_EQ(w7.interval_num(T(kI64Max - 1)), k - 1);
  EXPECT_EQ(w7.interval_start(T(kI64Max - 1)), T(7 * (k - 1)));
  EXPECT_EQ(w7.interval_num(T(kI64Max - 7)), k - 1);
  EXPECT_EQ(w7.interval_num(T(kI64Max - 8)), k - 2);

  // Random times against 128-bit reference arithmetic.
  std::mt19937_64 rng(31337);
  const std::int64_t precisions[] = {1, 3, 7, 1000, 999'983, 1'000'000, 1'000'000'007};
  const std::int64_t starts[] = {kI64Min, -(std::int64_t{1} << 62) + 12345, -1, 0, 1, 999'999,
                                 std::int64_t{1} << 62, kI64Max - 1'000'000'000};
  for (std::int64_t p : precisions) {
    for (std::int64_t s : starts) {
      SCOPED_TRACE(testing::Message() << "precision " << p << " start " << s);
      IntWheel w(config(p), T(s));
      const i128 max_offset =
          std::min(static_cast<i128>(kI64Max) - s, static_cast<i128>(kMaxKey + 1) * p - 1);
      for (int i = 0; i < 200; ++i) {
        i128 off;
        switch (i % 4) {
          case 0: off = static_cast<i128>(rng() % 1'000'000'000'000ull); break;
          case 1: off = max_offset - static_cast<i128>(rng() % 1000); break;
          default: {
            const unsigned __int128 r = (static_cast<unsigned __int128>(rng()) << 64) | rng();
            off = static_cast<i128>(r % static_cast<unsigned __int128>(max_offset + 1));
          }
        }
        if (off < 0 || off > max_offset) off = 0;
        const std::int64_t t = static_cast<std::int64_t>(s + off);
        const std::int64_t expected_k = static_cast<std::int64_t>(off / p);
        ASSERT_EQ(w.interval_num(T(t)), expected_k) << "t=" << t;
        ASSERT_EQ(N(w.interval_start(T(t))), static_cast<std::int64_t>(s + static_cast<i128>(expected_k) * p))
            << "t=" << t;
        ASSERT_EQ(w.interval_num_start(expected_k), w.interval_start(T(t)));
      }
    }
  }
}

// now_interval_num_start() == interval_start(now()) as the clock moves.
TEST(TimingWheel, now_interval_num_start_follows_now) {
  IntWheel w(config(10), T(0));
  EXPECT_EQ(w.now_interval_num_start(), T(0));
  advance(w, T(25));
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.now(), T(25));
  EXPECT_EQ(w.now_interval_num_start(), T(20));
  advance(w, T(30));
  EXPECT_EQ(w.now_interval_num_start(), T(30));
  advance(w, T(39));
  EXPECT_EQ(w.now_interval_num_start(), T(30));
  EXPECT_EQ(w.now_interval_num_start(), w.interval_start(w.now()));
  EXPECT_INVARIANTS(w);
}

// ---------------------------------------------------------------------------
// alarm_upper_bound

// Default level bits at 1 ns: alarm_upper_bound() == start + 2^61 ns (~73 years), whatever now() is.
TEST(TimingWheel, alarm_upper_bound_is_2_pow_61_ns_past_start_for_default_bits) {
  for (std::int64_t start : {std::int64_t{0}, std::int64_t{1000}, std::int64_t{-777}}) {
    IntWheel w(config(1), T(start));
    EXPECT_EQ(w.alarm_upper_bound(), T(start + (std::int64_t{1} << 61)));
    advance(w, T(start + 123456789));
    EXPECT_EQ(w.alarm_upper_bound(), T(start + (std::int64_t{1} << 61)));
    EXPECT_INVARIANTS(w);
  }
}

// With 1 ms precision and 61 bits, alarm_upper_bound() saturates at interval_num_start(K_max) and never throws.
TEST(TimingWheel, alarm_upper_bound_saturates_at_last_representable_interval_with_1ms) {
  const std::int64_t p = 1'000'000;
  for (std::int64_t start : {std::int64_t{0}, std::int64_t{123'456'789}, std::int64_t{-5'000'000'000'123},
                             kI64Min + 17, kI64Max - 3'000'000'001}) {
    SCOPED_TRACE(start);
    IntWheel w(config(p), T(start));
    const i128 km = k_max(start, p);
    const TimePoint expected = T(static_cast<std::int64_t>(start + static_cast<i128>(km) * p));
    EXPECT_EQ(w.alarm_upper_bound(), expected);
    EXPECT_EQ(w.alarm_upper_bound(), w.interval_num_start(km));
    // The last time before the bound is accepted; the bound itself is not.
    const Alarm last = w.add(T(N(expected) - 1), 1);
    EXPECT_THROW(w.add(expected, 2), std::out_of_range);
    EXPECT_INVARIANTS(w);
    // Near the end of representable time the bound stays put and never throws.
    advance(w, T(N(expected) - 2));
    EXPECT_INVARIANTS(w);
    EXPECT_EQ(w.alarm_upper_bound(), expected);
    EXPECT_TRUE(w.contains(last));
    // Advancing to TimePoint::max() fires everything (every at < interval_start(max)).
    const auto fired = advance(w, TimePoint::max());
    EXPECT_INVARIANTS(w);
    EXPECT_EQ(values_of(fired), std::vector<int>{1});
    EXPECT_EQ(w.now(), TimePoint::max());
    EXPECT_NO_THROW((void)w.alarm_upper_bound());
    EXPECT_LE(w.alarm_upper_bound(), w.now());
    EXPECT_THROW(w.add(TimePoint::max(), 3), std::out_of_range);
    EXPECT_TRUE(w.empty());
  }
}

// For small level bits: interval_num_start(min(now_k + 2^B, K_max)) <= alarm_upper_bound() <= interval_num_start(min(2^61, K_max)),
// on an interval boundary, nondecreasing in now; add accepts the last time below it and rejects the bound.
TEST(TimingWheel, alarm_upper_bound_stays_within_level_bits_bounds) {
  std::mt19937_64 rng(4242);
  const std::vector<std::vector<int>> bit_sets = {{1}, {1, 1}, {2, 1, 3}, {3, 1}, {4, 4, 4}, {6, 6, 6, 6}};
  for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1000}}) {
    for (const auto& bits_v : bit_sets) {
      const LevelBits bits = LevelBits::create(std::span<const int>(bits_v));
      SCOPED_TRACE(testing::Message() << "precision " << p << " bits " << bits.num_bits());
      const std::int64_t start = -12345;
      IntWheel w(config(p, bits), T(start));
      TimePoint prev_ub = w.alarm_upper_bound();
      for (int step = 0; step < 200; ++step) {
        const TimePoint ub = w.alarm_upper_bound();
        const i128 now_k = w.interval_num(w.now());
        const i128 km = k_max(start, p);
        const i128 lo_k = std::min<i128>(now_k + (i128{1} << bits.num_bits()), km);
        const i128 hi_k = std::min<i128>(i128{1} << 61, km);
        EXPECT_EQ((static_cast<i128>(N(ub)) - start) % p, 0) << "not on an interval boundary";
        EXPECT_GE(static_cast<i128>(N(ub)), start + lo_k * p);
        EXPECT_LE(static_cast<i128>(N(ub)), start + hi_k * p);
        EXPECT_GE(ub, prev_ub);
        EXPECT_GT(ub, w.now());
        prev_ub = ub;
        const Alarm a = w.add(T(N(ub) - 1), step);
        EXPECT_EQ(w.at(a), T(N(ub) - 1));
        EXPECT_THROW(w.add(ub, -1), std::out_of_range);
        EXPECT_INVARIANTS(w);
        const std::int64_t room = N(ub) - N(w.now());
        const std::int64_t step_ns = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(room + p));
        advance(w, T(N(w.now()) + step_ns));
        EXPECT_INVARIANTS(w);
      }
    }
  }
}

// Jane Street's 32-bit row: level bits {10,10,9} at 1 ms span at least 2^29 ms (~6.2 days, "7 days" in the table).
TEST(TimingWheel, worked_example_32_bit_row_spans_2_pow_29_milliseconds) {
  IntWheel w(config(1'000'000, LevelBits::create({10, 10, 9})), T(0));
  const Duration span = w.alarm_upper_bound() - w.now();
  EXPECT_GE(span, std::chrono::milliseconds{std::int64_t{1} << 29});
  EXPECT_GT(span, std::chrono::hours{24 * 6});
  EXPECT_EQ(LevelBits::create({10, 10, 9}).durations(std::chrono::milliseconds{1}).back(),
            std::chrono::milliseconds{std::int64_t{1} << 29});
}

// Jane Street's 64-bit row: default level bits at 1 ns give 2^61 intervals, about 73 years.
TEST(TimingWheel, worked_example_64_bit_row_spans_2_pow_61_ns_about_73_years) {
  IntWheel w(config(1), T(0));
  const Duration span = w.alarm_upper_bound() - w.now();
  EXPECT_EQ(span.count(), std::int64_t{1} << 61);
  EXPECT_EQ(span, LevelBits::default_bits().durations(Duration{1}).back());
  using years = std::chrono::duration<std::int64_t, std::ratio<31557600>>;  // Julian years
  EXPECT_EQ(std::chrono::duration_cast<years>(span).count(), 73);
}

// ---------------------------------------------------------------------------
// add

// add() accepts every time in [now(), alarm_upper_bound()).
TEST(TimingWheel, add_accepts_times_from_now_to_just_below_upper_bound) {
  IntWheel w(config(10, LevelBits::create({3, 2})), T(0));
  advance(w, T(15));
  const TimePoint ub = w.alarm_upper_bound();
  const Alarm a = w.add(T(15), 1);
  EXPECT_INVARIANTS(w);
  const Alarm b = w.add(T(N(ub) - 1), 2);
  EXPECT_INVARIANTS(w);
  const Alarm c = w.add(T(16), 3);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.at(a), T(15));
  EXPECT_EQ(w.at(b), T(N(ub) - 1));
  EXPECT_EQ(w.at(c), T(16));
}

// add() before now() throws std::out_of_range whose message names both the time and now().
TEST(TimingWheel, add_rejects_time_before_now_naming_both_times) {
  IntWheel w(config(1000), T(0));
  advance(w, T(1234567));
  const std::string msg = out_of_range_message([&] { w.add(T(1234000), 1); });
  EXPECT_TRUE(contains(msg, "1234000")) << msg;
  EXPECT_TRUE(contains(msg, "1234567")) << msg;
  // Also inside now's own interval (interval start 1234000 <= at < now).
  EXPECT_THROW(w.add(T(1234566), 1), std::out_of_range);
  EXPECT_THROW(w.add(TimePoint::min(), 1), std::out_of_range);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_INVARIANTS(w);
}

// add() at or past alarm_upper_bound() throws std::out_of_range whose message names the time and the bound.
TEST(TimingWheel, add_rejects_time_at_or_past_upper_bound_naming_both_times) {
  IntWheel w(config(1, LevelBits::create({4})), T(0));
  const TimePoint ub = w.alarm_upper_bound();
  EXPECT_THROW(w.add(ub, 1), std::out_of_range);
  const TimePoint beyond = T(N(ub) + 5);
  const std::string msg = out_of_range_message([&] { w.add(beyond, 1); });
  EXPECT_TRUE(contains(msg, std::to_string(N(beyond)))) << msg;
  EXPECT_TRUE(contains(msg, std::to_string(N(ub)))) << msg;
  EXPECT_THROW(w.add(TimePoint::max(), 1), std::out_of_range);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_INVARIANTS(w);
}

// A rejected add leaves the wheel exactly as it was.
TEST(TimingWheel, rejected_add_leaves_the_wheel_unchanged) {
  IntWheel w(config(3, LevelBits::create({2, 1, 3})), T(100));
  const Alarm a = w.add(T(110), 1);
  advance(w, T(104));
  const auto min_before = w.min_alarm_time();
  const auto next_before = w.next_alarm_fires_at();
  EXPECT_THROW(w.add(T(103), 2), std::out_of_range);
  EXPECT_THROW(w.add(w.alarm_upper_bound(), 3), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_TRUE(w.contains(a));
  EXPECT_EQ(w.min_alarm_time(), min_before);
  EXPECT_EQ(w.next_alarm_fires_at(), next_before);
  EXPECT_EQ(w.now(), T(104));
}

// add_at_interval_num(k, v) == add(interval_num_start(k), v), with the same checks.
TEST(TimingWheel, add_at_interval_num_adds_at_the_interval_start) {
  IntWheel w(config(10, LevelBits::create({4, 4})), T(100));
  advance(w, T(115));  // now is inside interval 1 = [110, 120)
  EXPECT_THROW(w.add_at_interval_num(1, 0), std::out_of_range);  // 110 < now
  EXPECT_THROW(w.add_at_interval_num(0, 0), std::out_of_range);
  EXPECT_THROW(w.add_at_interval_num(-1, 0), std::out_of_range);
  EXPECT_THROW(w.add_at_interval_num(kI64Min, 0), std::out_of_range);
  EXPECT_THROW(w.add_at_interval_num(kI64Max, 0), std::out_of_range);
  const std::int64_t ub_k = w.interval_num(w.alarm_upper_bound());
  EXPECT_THROW(w.add_at_interval_num(ub_k, 0), std::out_of_range);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_INVARIANTS(w);
  const Alarm a = w.add_at_interval_num(2, 7);
  const Alarm b = w.add_at_interval_num(ub_k - 1, 8);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.at(a), T(120));
  EXPECT_EQ(w.interval_num(a), 2);
  EXPECT_EQ(w.value(a), 7);
  EXPECT_EQ(w.at(b), w.interval_num_start(ub_k - 1));
  EXPECT_EQ(w.interval_num(b), ub_k - 1);
}

// at(), value(), interval_num(alarm) and contains() read back what add() stored.
TEST(TimingWheel, accessors_read_back_the_alarm) {
  IntWheel w(config(1000), T(-500));
  const Alarm a = w.add(T(2600), 42);
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(a));
  EXPECT_EQ(w.at(a), T(2600));
  EXPECT_EQ(w.value(a), 42);
  EXPECT_EQ(w.interval_num(a), 3);  // (2600 - -500) / 1000
  const IntWheel& cw = w;
  EXPECT_EQ(cw.value(a), 42);
  w.value(a) = 43;
  EXPECT_EQ(cw.value(a), 43);
}

// ---------------------------------------------------------------------------
// Generation-checked handles

// A default-constructed Alarm is never contained; its accessors throw std::invalid_argument.
TEST(TimingWheel, default_alarm_is_never_contained) {
  IntWheel w(config(1), T(0));
  w.add(T(0), 1);
  w.add(T(5), 2);
  const Alarm none{};
  EXPECT_FALSE(w.contains(none));
  EXPECT_THROW((void)w.at(none), std::invalid_argument);
  EXPECT_THROW((void)w.value(none), std::invalid_argument);
  EXPECT_THROW((void)w.interval_num(none), std::invalid_argument);
  EXPECT_THROW(w.remove(none), std::invalid_argument);
  EXPECT_THROW(w.reschedule(none, T(3)), std::invalid_argument);
  EXPECT_THROW(w.reschedule_at_interval_num(none, 3), std::invalid_argument);
  EXPECT_EQ(w.size(), 2u);
  EXPECT_INVARIANTS(w);
}

// A removed alarm is stale: contains() is false and every accessor throws std::invalid_argument.
TEST(TimingWheel, removed_alarm_is_stale_and_accessors_throw_invalid_argument) {
  IntWheel w(config(10), T(0));
  const Alarm a = w.add(T(50), 1);
  const Alarm b = w.add(T(50), 2);
  w.remove(a);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(a));
  EXPECT_THROW((void)w.at(a), std::invalid_argument);
  EXPECT_THROW((void)w.value(a), std::invalid_argument);
  const IntWheel& cw = w;
  EXPECT_THROW((void)cw.value(a), std::invalid_argument);
  EXPECT_THROW((void)w.interval_num(a), std::invalid_argument);
  EXPECT_THROW(w.remove(a), std::invalid_argument);
  EXPECT_THROW(w.reschedule(a, T(60)), std::invalid_argument);
  EXPECT_THROW(w.reschedule_at_interval_num(a, 6), std::invalid_argument);
  EXPECT_TRUE(w.contains(b));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_INVARIANTS(w);
  const auto fired = advance(w, T(1000));
  EXPECT_EQ(values_of(fired), std::vector<int>{2});
}

// An alarm that fired is stale afterwards.
TEST(TimingWheel, fired_alarm_is_stale) {
  IntWheel w(config(10), T(0));
  const Alarm a = w.add(T(5), 1);
  EXPECT_EQ(advance(w, T(10)).size(), 1u);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(a));
  EXPECT_THROW((void)w.at(a), std::invalid_argument);
  EXPECT_THROW((void)w.value(a), std::invalid_argument);
  EXPECT_THROW((void)w.interval_num(a), std::invalid_argument);
  EXPECT_THROW(w.remove(a), std::invalid_argument);
  EXPECT_THROW(w.reschedule(a, T(20)), std::invalid_argument);
  const Alarm p = w.add(T(12), 2);
  advance(w, T(12));
  EXPECT_EQ(fire_past(w).size(), 1u);
  EXPECT_FALSE(w.contains(p));
  EXPECT_THROW((void)w.at(p), std::invalid_argument);
}

// Reusing a freed slot never makes an old (removed or fired) handle valid again.
TEST(TimingWheel, reused_slot_does_not_revive_stale_alarms) {
  IntWheel w(config(1, LevelBits::create({3, 3})), T(0));
  std::vector<Alarm> stale;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3000; ++i) {
    const Alarm a = w.add(T(N(w.now()) + static_cast<std::int64_t>(rng() % 40)), i);
    for (const Alarm& s : stale) { ASSERT_FALSE(s == a) << "new handle equals a stale one at iteration " << i; }
    EXPECT_INVARIANTS(w);
    if (i % 3 == 0) {
      w.remove(a);
      stale.push_back(a);
    } else {
      for (const Fired& f : advance(w, T(N(w.now()) + 3))) stale.push_back(f.alarm);
    }
    EXPECT_INVARIANTS(w);
    if (stale.size() > 100) stale.erase(stale.begin(), stale.begin() + 50);
  }
  for (const Alarm& s : stale) {
    EXPECT_FALSE(w.contains(s));
    EXPECT_THROW((void)w.at(s), std::invalid_argument);
    EXPECT_THROW(w.remove(s), std::invalid_argument);
  }
  EXPECT_INVARIANTS(w);
}

// ---------------------------------------------------------------------------
// reschedule

// reschedule() to an earlier time makes the alarm fire at the new time.
TEST(TimingWheel, reschedule_earlier_fires_at_the_new_time) {
  IntWheel w(config(10), T(0));
  const Alarm a = w.add(T(100'000), 1);
  w.reschedule(a, T(25));
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(a));
  EXPECT_EQ(w.at(a), T(25));
  EXPECT_EQ(w.interval_num(a), 2);
  EXPECT_EQ(w.next_alarm_fires_at(), T(30));
  EXPECT_TRUE(advance(w, T(29)).empty());
  const auto fired = advance(w, T(30));
  EXPECT_INVARIANTS(w);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].alarm, a);
  EXPECT_EQ(fired[0].at, T(25));
}

// reschedule() to a later time postpones firing to the new time.
TEST(TimingWheel, reschedule_later_postpones_firing) {
  IntWheel w(config(10), T(0));
  const Alarm a = w.add(T(25), 1);
  w.reschedule(a, T(5000));
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(advance(w, T(5000)).empty());
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(a));
  const auto fired = advance(w, T(5010));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].at, T(5000));
  EXPECT_INVARIANTS(w);
}

// reschedule() outside [now, alarm_upper_bound) throws std::out_of_range and leaves the alarm as it was.
TEST(TimingWheel, reschedule_rejects_out_of_range_and_keeps_the_alarm) {
  IntWheel w(config(10, LevelBits::create({3, 3})), T(0));
  advance(w, T(100));
  const Alarm a = w.add(T(150), 1);
  EXPECT_THROW(w.reschedule(a, T(99)), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_THROW(w.reschedule(a, w.alarm_upper_bound()), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_THROW(w.reschedule(a, TimePoint::max()), std::out_of_range);
  EXPECT_THROW(w.reschedule_at_interval_num(a, 9), std::out_of_range);   // 90 < now
  EXPECT_THROW(w.reschedule_at_interval_num(a, -1), std::out_of_range);
  EXPECT_THROW(w.reschedule_at_interval_num(a, w.interval_num(w.alarm_upper_bound())), std::out_of_range);
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(a));
  EXPECT_EQ(w.at(a), T(150));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(values_of(advance(w, T(160))), std::vector<int>{1});
}

// reschedule_at_interval_num(a, k) moves the alarm to interval_num_start(k).
TEST(TimingWheel, reschedule_at_interval_num_moves_to_the_interval_start) {
  IntWheel w(config(7), T(3));
  const Alarm a = w.add(T(1000), 1);
  w.reschedule_at_interval_num(a, 5);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.at(a), T(3 + 35));
  EXPECT_EQ(w.interval_num(a), 5);
  w.reschedule_at_interval_num(a, 500);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.at(a), T(3 + 3500));
}

// ---------------------------------------------------------------------------
// advance_clock and fire_past_alarms

// advance_clock(to) fires exactly the alarms with at < interval_start(to), and sets now() = to.
TEST(TimingWheel, advance_clock_fires_exactly_alarms_before_interval_start_of_target) {
  IntWheel w(config(10), T(0));
  for (int t : {0, 5, 9, 10, 19, 20, 25}) w.add(T(t), t);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(value_set(advance(w, T(19))), (std::multiset<int>{0, 5, 9}));
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.now(), T(19));
  EXPECT_EQ(value_set(advance(w, T(20))), (std::multiset<int>{10, 19}));
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(advance(w, T(29)).empty());
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(value_set(advance(w, T(30))), (std::multiset<int>{20, 25}));
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.empty());
}

// Never early: an alarm fires only once now > at; advancing exactly to at does not fire it.
TEST(TimingWheel, never_fires_before_due) {
  IntWheel w1(config(1), T(0));
  w1.add(T(5), 1);
  EXPECT_TRUE(advance(w1, T(5)).empty());
  EXPECT_INVARIANTS(w1);
  const auto f1 = advance(w1, T(6));
  ASSERT_EQ(f1.size(), 1u);
  EXPECT_LT(f1[0].at, w1.now());

  // With precision 10 an alarm at 25 fires only when the clock reaches 30 (the next interval start).
  IntWheel w10(config(10), T(0));
  w10.add(T(25), 1);
  for (int t = 1; t < 30; ++t) {
    EXPECT_TRUE(advance(w10, T(t)).empty()) << "fired early at " << t;
    EXPECT_INVARIANTS(w10);
  }
  const auto f10 = advance(w10, T(30));
  ASSERT_EQ(f10.size(), 1u);
  EXPECT_LT(f10[0].at, w10.now());
}

// advance_clock(to) with to <= now() does nothing: no callback, now() unchanged (even with at <= now alarms).
TEST(TimingWheel, advance_to_now_or_earlier_does_nothing) {
  IntWheel w(config(10), T(0));
  advance(w, T(15));
  const Alarm a = w.add(T(15), 1);  // at == now: a fire_past_alarms candidate
  int calls = 0;
  w.advance_clock(T(15), [&](Alarm) { ++calls; });
  w.advance_clock(T(3), [&](Alarm) { ++calls; });
  w.advance_clock(TimePoint::min(), [&](Alarm) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(w.now(), T(15));
  EXPECT_TRUE(w.contains(a));
  EXPECT_INVARIANTS(w);
}

// advance_clock to a time whose interval number exceeds 2^61-1 throws std::out_of_range and changes nothing.
TEST(TimingWheel, advance_clock_rejects_unrepresentable_target) {
  IntWheel w(config(1), T(0));
  const Alarm a = w.add(T(100), 1);
  int calls = 0;
  EXPECT_THROW(w.advance_clock(T(kMaxKey + 1), [&](Alarm) { ++calls; }), std::out_of_range);
  EXPECT_THROW(w.advance_clock(TimePoint::max(), [&](Alarm) { ++calls; }), std::out_of_range);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(w.now(), T(0));
  EXPECT_TRUE(w.contains(a));
  EXPECT_INVARIANTS(w);
  // The last representable target is fine; an alarm in its interval is then a past alarm.
  const Alarm last = w.add(T(kMaxKey), 2);
  EXPECT_EQ(values_of(advance(w, T(kMaxKey))), std::vector<int>{1});
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.now(), T(kMaxKey));
  EXPECT_TRUE(w.contains(last));
  EXPECT_EQ(values_of(fire_past(w)), std::vector<int>{2});
  EXPECT_INVARIANTS(w);
}

// With 1 ms precision every TimePoint is a valid target; advancing to TimePoint::max() fires every alarm.
TEST(TimingWheel, advance_clock_to_time_point_max_with_1ms_fires_everything) {
  IntWheel w(config(1'000'000), T(0));
  w.add(T(0), 1);
  w.add(T(N(w.alarm_upper_bound()) - 1), 3);
  w.add(T(1'000'000'000'000'000'000), 2);
  EXPECT_INVARIANTS(w);
  const auto fired = advance(w, TimePoint::max());
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(values_of(fired), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(w.now(), TimePoint::max());
  EXPECT_TRUE(w.empty());
}

// Within one advance_clock, alarms fire in nondecreasing interval order, across all levels.
TEST(TimingWheel, alarms_fire_in_nondecreasing_interval_order_across_levels) {
  std::mt19937_64 rng(777);
  const std::vector<std::vector<int>> bit_sets = {{1, 1}, {2, 1, 3}, {3, 1}, {4, 4, 4}, {11, 10, 10, 10, 10, 10}};
  for (const auto& bits_v : bit_sets) {
    for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1000}}) {
      const LevelBits bits = LevelBits::create(std::span<const int>(bits_v));
      SCOPED_TRACE(testing::Message() << "precision " << p << " bits " << bits.num_bits());
      IntWheel w(config(p, bits), T(0));
      for (int round = 0; round < 20; ++round) {
        const std::int64_t now = N(w.now());
        const std::int64_t room = N(w.alarm_upper_bound()) - now;
        if (room < 2) break;
        int n = 0;
        for (int i = 0; i < 200; ++i) {
          // Log-uniform offsets: every level gets alarms.
          const int e = static_cast<int>(rng() % 63);
          const std::int64_t cap = std::min<std::int64_t>(room - 1, e >= 62 ? kI64Max : (std::int64_t{1} << e));
          const std::int64_t off = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(cap + 1));
          w.add(T(now + off), n++);
        }
        EXPECT_INVARIANTS(w);
        // Advance by a random amount up to the whole range, in one call.
        const std::int64_t to = now + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(room - 1));
        const std::int64_t to_start = N(w.interval_start(T(to)));
        std::vector<Fired> fired;
        std::size_t before = w.size();
        std::int64_t expected = 0;
        w.for_each([&](Alarm a) { expected += N(w.at(a)) < to_start ? 1 : 0; });
        fired = advance(w, T(to));
        EXPECT_INVARIANTS(w);
        EXPECT_EQ(static_cast<std::int64_t>(fired.size()), expected);
        EXPECT_EQ(w.size(), before - fired.size());
        for (std::size_t i = 1; i < fired.size(); ++i) {
          ASSERT_LE(w.interval_num(fired[i - 1].at), w.interval_num(fired[i].at))
              << "out of interval order at position " << i << " of " << fired.size();
        }
        for (const Fired& f : fired) { ASSERT_LT(f.at, w.now()); }
      }
    }
  }
}

// Alarms of one interval added directly to level 0 fire in insertion order (even with different times).
TEST(TimingWheel, same_interval_alarms_fire_in_insertion_order) {
  IntWheel w(config(1), T(0));
  for (int i = 0; i < 6; ++i) w.add(T(5), i);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(values_of(advance(w, T(6))), (std::vector<int>{0, 1, 2, 3, 4, 5}));

  IntWheel mixed(config(1), T(0));
  mixed.add(T(5), 1);
  mixed.add(T(3), 2);
  mixed.add(T(5), 3);
  mixed.add(T(3), 4);
  EXPECT_INVARIANTS(mixed);
  EXPECT_EQ(values_of(advance(mixed, T(100))), (std::vector<int>{2, 4, 1, 3}));

  // Different times inside one 1000 ns interval are one key: insertion order, not time order.
  IntWheel coarse(config(1000), T(0));
  coarse.add(T(1500), 1);
  coarse.add(T(1200), 2);
  coarse.add(T(1999), 3);
  coarse.add(T(1000), 4);
  EXPECT_INVARIANTS(coarse);
  EXPECT_EQ(values_of(advance(coarse, T(2000))), (std::vector<int>{1, 2, 3, 4}));

  // Many alarms in one interval keep their order too.
  IntWheel many(config(3), T(0));
  std::vector<int> expected;
  for (int i = 0; i < 1000; ++i) {
    many.add(T(30 + i % 3), i);
    expected.push_back(i);
  }
  EXPECT_EQ(values_of(advance(many, T(33))), expected);
  EXPECT_INVARIANTS(many);
}

// Inside handle_fired, at() and value() are readable and contains() is already false.
TEST(TimingWheel, handle_fired_sees_at_and_value_of_an_uncontained_alarm) {
  IntWheel w(config(10), T(0));
  const Alarm a = w.add(T(7), 70);
  const Alarm b = w.add(T(13), 130);
  int calls = 0;
  w.advance_clock(T(20), [&](Alarm x) {
    ++calls;
    EXPECT_FALSE(w.contains(x));
    const IntWheel& cw = w;
    if (x == a) {
      EXPECT_EQ(w.at(x), T(7));
      EXPECT_EQ(cw.value(x), 70);
    } else {
      EXPECT_EQ(x, b);
      EXPECT_EQ(w.at(x), T(13));
      EXPECT_EQ(cw.value(x), 130);
    }
  });
  EXPECT_EQ(calls, 2);
  EXPECT_INVARIANTS(w);
  w.add(T(20), 200);
  advance(w, T(25));
  w.fire_past_alarms([&](Alarm x) {
    EXPECT_FALSE(w.contains(x));
    EXPECT_EQ(w.at(x), T(20));
    EXPECT_EQ(w.value(x), 200);
  });
  EXPECT_TRUE(w.empty());
}

// Mutating the wheel from handle_fired throws std::logic_error, and the wheel stays consistent.
TEST(TimingWheel, mutating_from_handle_fired_throws_logic_error) {
  IntWheel w(config(10), T(0));
  const Alarm a1 = w.add(T(5), 1);
  const Alarm a2 = w.add(T(15), 2);
  const Alarm survivor = w.add(T(500), 3);
  int logic_errors = 0;
  auto try_all_mutations = [&] {
    auto expect_logic = [&](auto&& f) {
      try {
        f();
        ADD_FAILURE() << "mutation inside handle_fired did not throw";
      } catch (const std::logic_error&) {
        ++logic_errors;
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "expected std::logic_error, got: " << ex.what();
      }
    };
    expect_logic([&] { w.add(T(400), 9); });
    expect_logic([&] { w.add_at_interval_num(40, 9); });
    expect_logic([&] { w.remove(survivor); });
    expect_logic([&] { w.reschedule(survivor, T(600)); });
    expect_logic([&] { w.reschedule_at_interval_num(survivor, 60); });
    expect_logic([&] { w.advance_clock(T(1000), [](Alarm) {}); });
    expect_logic([&] { w.fire_past_alarms([](Alarm) {}); });
    expect_logic([&] { w.clear(); });
  };
  std::vector<int> fired;
  w.advance_clock(T(20), [&](Alarm x) {
    try_all_mutations();
    fired.push_back(w.value(x));
  });
  EXPECT_EQ(fired, (std::vector<int>{1, 2}));
  EXPECT_EQ(logic_errors, 16);
  EXPECT_INVARIANTS(w);
  EXPECT_FALSE(w.contains(a1));
  EXPECT_FALSE(w.contains(a2));
  EXPECT_TRUE(w.contains(survivor));
  EXPECT_EQ(w.at(survivor), T(500));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.now(), T(20));

  // Same from fire_past_alarms.
  const Alarm past = w.add(T(20), 4);
  logic_errors = 0;
  w.fire_past_alarms([&](Alarm x) {
    try_all_mutations();
    EXPECT_EQ(x, past);
  });
  EXPECT_EQ(logic_errors, 8);
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.contains(survivor));
  EXPECT_EQ(w.size(), 1u);

  // The wheel works normally afterwards.
  const Alarm later = w.add(T(30), 5);
  EXPECT_EQ(values_of(advance(w, T(1000))), (std::vector<int>{5, 3}));
  EXPECT_FALSE(w.contains(later));
  EXPECT_INVARIANTS(w);
}

// fire_past_alarms fires exactly the alarms with at <= now(), leaving later ones (even in now's interval).
TEST(TimingWheel, fire_past_alarms_fires_only_alarms_at_or_before_now) {
  IntWheel w(config(10), T(0));
  for (int t : {5, 7, 9, 12}) w.add(T(t), t);
  EXPECT_TRUE(advance(w, T(7)).empty());  // interval_start(7) == 0: nothing is before it
  EXPECT_INVARIANTS(w);
  const auto fired = fire_past(w);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(value_set(fired), (std::multiset<int>{5, 7}));
  for (const Fired& f : fired) { EXPECT_LE(f.at, w.now()); }
  EXPECT_EQ(w.size(), 2u);
  EXPECT_TRUE(fire_past(w).empty());
  EXPECT_EQ(w.now(), T(7));

  // At start, an alarm at exactly now() is a past alarm.
  IntWheel s(config(10), T(100));
  s.add(T(100), 1);
  s.add(T(101), 2);
  EXPECT_EQ(values_of(fire_past(s)), std::vector<int>{1});
  EXPECT_INVARIANTS(s);
}

// next_alarm_fires_at() == interval_start(min) + precision, so next - precision <= min < next.
TEST(TimingWheel, next_alarm_fires_at_is_start_of_interval_after_min) {
  IntWheel w(config(10), T(3));
  EXPECT_FALSE(w.next_alarm_fires_at().has_value());
  const Alarm later = w.add(T(28), 1);
  EXPECT_EQ(w.next_alarm_fires_at(), T(33));
  const Alarm m = w.add(T(13), 2);
  EXPECT_EQ(w.next_alarm_fires_at(), T(23));
  EXPECT_INVARIANTS(w);
  const TimePoint next = *w.next_alarm_fires_at();
  const TimePoint min = *w.min_alarm_time();
  EXPECT_LE(next - w.alarm_precision(), min);
  EXPECT_LT(min, next);
  // It is the minimum time to which the clock can be advanced so that an alarm fires.
  EXPECT_TRUE(advance(w, T(N(next) - 1)).empty());
  const auto fired = advance(w, next);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].alarm, m);
  EXPECT_EQ(w.next_alarm_fires_at(), T(33));
  w.remove(later);
  EXPECT_FALSE(w.next_alarm_fires_at().has_value());
  EXPECT_INVARIANTS(w);
}

// min_alarm_time(), max_alarm_time(), min_alarm_interval_num() follow adds, removes and fires.
TEST(TimingWheel, min_max_alarm_time_and_min_interval_track_the_alarms) {
  IntWheel w(config(1000, LevelBits::create({4, 4, 4})), T(0));
  const Alarm a = w.add(T(5500), 1);
  EXPECT_EQ(w.min_alarm_time(), T(5500));
  EXPECT_EQ(w.max_alarm_time(), T(5500));
  EXPECT_EQ(w.min_alarm_interval_num(), 5);
  const Alarm b = w.add(T(1'000'000), 2);  // another level
  const Alarm c = w.add(T(1200), 3);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_alarm_time(), T(1200));
  EXPECT_EQ(w.max_alarm_time(), T(1'000'000));
  EXPECT_EQ(w.min_alarm_interval_num(), 1);
  w.remove(c);
  EXPECT_EQ(w.min_alarm_time(), T(5500));
  EXPECT_EQ(w.min_alarm_interval_num(), 5);
  w.remove(b);
  EXPECT_EQ(w.max_alarm_time(), T(5500));
  w.reschedule(a, T(7777));
  EXPECT_EQ(w.min_alarm_time(), T(7777));
  EXPECT_EQ(w.max_alarm_time(), T(7777));
  EXPECT_EQ(w.min_alarm_interval_num(), 7);
  EXPECT_INVARIANTS(w);
  // Same interval, different times: min_alarm_time is the exact minimum time.
  w.add(T(7100), 4);
  w.add(T(7900), 5);
  EXPECT_EQ(w.min_alarm_time(), T(7100));
  EXPECT_EQ(w.max_alarm_time(), T(7900));
  EXPECT_EQ(w.min_alarm_interval_num(), 7);
  advance(w, T(8000));
  EXPECT_FALSE(w.min_alarm_time().has_value());
  EXPECT_FALSE(w.max_alarm_time().has_value());
  EXPECT_FALSE(w.min_alarm_interval_num().has_value());
  EXPECT_INVARIANTS(w);
}

// for_each visits every alarm exactly once.
TEST(TimingWheel, for_each_visits_every_alarm_once) {
  IntWheel w(config(3, LevelBits::create({2, 1, 3})), T(0));
  std::multiset<int> expected;
  for (int i = 0; i < 80; ++i) {
    w.add(T(i % (N(w.alarm_upper_bound()))), i);
    expected.insert(i);
  }
  std::multiset<int> seen;
  const IntWheel& cw = w;
  cw.for_each([&](Alarm a) {
    EXPECT_TRUE(cw.contains(a));
    seen.insert(cw.value(a));
  });
  EXPECT_EQ(seen, expected);
}

// min_alarm_time() equals the least at() of the alarms after any sequence of
// add / remove / reschedule / advance_clock / fire_past_alarms / clear, whether
// it was asked after every step (the cache then follows each change) or only
// now and then (the cache is forgotten and rebuilt); check_invariants() also
// checks that a cached minimum is never stale.
TEST(TimingWheel, min_alarm_time_equals_brute_force_minimum_through_random_operations) {
  std::mt19937_64 rng(20261128);
  for (const std::int64_t precision : {1, 7, 1000}) {
    for (const int ask_percent : {100, 30}) {
      IntWheel w(config(precision, LevelBits::create({4, 3, 3})), T(0));
      std::vector<Alarm> live;
      auto pick = [&](std::uint64_t bound) { return static_cast<std::int64_t>(rng() % bound); };
      auto some_time = [&] {
        // Mostly near now (the same or the next few intervals, often equal times), sometimes far.
        const std::int64_t span = pick(4) == 0 ? 5000 * precision : 8 * precision;
        const std::int64_t at = N(w.now()) + pick(static_cast<std::uint64_t>(span));
        return T(std::min(at, N(w.alarm_upper_bound()) - 1));
      };
      auto brute_min = [&] {
        std::optional<TimePoint> m;
        for (const Alarm& a : live) {
          if (!m || w.at(a) < *m) m = w.at(a);
        }
        return m;
      };
      for (int step = 0; step < 20'000; ++step) {
        const auto op = pick(100);
        if (op < 35 || live.empty()) {
          live.push_back(w.add(some_time(), step));
        } else if (op < 55) {
          const std::size_t j = static_cast<std::size_t>(pick(live.size()));
          w.remove(live[j]);
          live[j] = live.back();
          live.pop_back();
        } else if (op < 80) {
          const Alarm a = live[static_cast<std::size_t>(pick(live.size()))];
          // Often onto the current minimum or just around it.
          const auto m = brute_min();
          const std::int64_t near = N(*m) + pick(3) - 1;
          const std::int64_t clamped = std::clamp(near, N(w.now()), N(w.alarm_upper_bound()) - 1);
          w.reschedule(a, pick(2) == 0 ? T(clamped) : some_time());
        } else if (op < 93) {
          const TimePoint to = T(N(w.now()) + pick(static_cast<std::uint64_t>(6 * precision)));
          w.advance_clock(to, [&](Alarm a) { std::erase(live, a); });
        } else if (op < 99) {
          w.fire_past_alarms([&](Alarm a) { std::erase(live, a); });
        } else {
          w.clear();
          live.clear();
        }
        ASSERT_NO_THROW(w.check_invariants()) << "precision " << precision << " step " << step;
        if (pick(100) < ask_percent) {
          ASSERT_EQ(w.min_alarm_time(), brute_min()) << "precision " << precision << " step " << step;
        }
      }
      EXPECT_EQ(w.min_alarm_time(), brute_min());
    }
  }
}

// clear() removes every alarm (handles go stale), keeps now(), and resets the cached minimum.
TEST(TimingWheel, clear_removes_all_alarms_and_resets_min_cache) {
  IntWheel w(config(10), T(0));
  advance(w, T(50));
  std::vector<Alarm> alarms;
  for (int i = 0; i < 30; ++i) alarms.push_back(w.add(T(50 + i * 7), i));
  // Fill whatever caches the wheel keeps.
  EXPECT_EQ(w.min_alarm_time(), T(50));
  EXPECT_EQ(w.next_alarm_fires_at(), T(60));
  EXPECT_EQ(w.min_alarm_interval_num(), 5);
  w.clear();
  EXPECT_INVARIANTS(w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.now(), T(50));
  EXPECT_FALSE(w.min_alarm_time().has_value());
  EXPECT_FALSE(w.next_alarm_fires_at().has_value());
  EXPECT_FALSE(w.min_alarm_interval_num().has_value());
  EXPECT_FALSE(w.max_alarm_time().has_value());
  for (const Alarm& a : alarms) {
    EXPECT_FALSE(w.contains(a));
    EXPECT_THROW((void)w.at(a), std::invalid_argument);
  }
  // New alarms later than the cleared minimum: the queries must see only them.
  const Alarm x = w.add(T(95), 100);
  EXPECT_INVARIANTS(w);
  EXPECT_EQ(w.min_alarm_time(), T(95));
  EXPECT_EQ(w.next_alarm_fires_at(), T(100));
  EXPECT_EQ(w.min_alarm_interval_num(), 9);
  EXPECT_TRUE(advance(w, T(99)).empty());
  const auto fired = advance(w, T(100));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].alarm, x);
  EXPECT_INVARIANTS(w);
}

// Move-only values work, and handle_fired can move the value out.
TEST(TimingWheel, move_only_values_can_be_moved_out_in_handle_fired) {
  using UWheel = TimingWheel<std::unique_ptr<int>>;
  UWheel w(config(10), T(0));
  const UWheel::Alarm a = w.add(T(5), std::make_unique<int>(5));
  const UWheel::Alarm b = w.add(T(15), std::make_unique<int>(15));
  w.reschedule(b, T(16));
  const UWheel::Alarm c = w.add(T(25), std::make_unique<int>(25));
  w.remove(c);
  EXPECT_EQ(*w.value(a), 5);
  std::vector<std::unique_ptr<int>> got;
  w.advance_clock(T(100), [&](UWheel::Alarm x) { got.push_back(std::move(w.value(x))); });
  EXPECT_NO_THROW(w.check_invariants());
  ASSERT_EQ(got.size(), 2u);
  ASSERT_TRUE(got[0] && got[1]);
  EXPECT_EQ(*got[0], 5);
  EXPECT_EQ(*got[1], 15);
  w.add(T(100), std::make_unique<int>(100));
  w.fire_past_alarms([&](UWheel::Alarm x) { got.push_back(std::move(w.value(x))); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(*got[2], 100);
  EXPECT_TRUE(w.empty());
}

// Values are destroyed when removed, fired, cleared, or when the wheel is destroyed.
TEST(TimingWheel, values_are_destroyed_when_removed_fired_cleared_or_destroyed) {
  Tracked::live = 0;
  {
    TimingWheel<Tracked> w(config(10, LevelBits::create({3, 3})), T(0));
    std::vector<TimingWheel<Tracked>::Alarm> alarms;
    for (int i = 0; i < 20; ++i) alarms.push_back(w.add(T(i * 10), Tracked(i)));
    EXPECT_EQ(Tracked::live, 20);
    w.remove(alarms[3]);
    EXPECT_EQ(Tracked::live, 19);
    w.reschedule(alarms[4], T(150));
    EXPECT_EQ(Tracked::live, 19);
    int fired = 0;
    w.advance_clock(T(100), [&](TimingWheel<Tracked>::Alarm) { ++fired; });
    EXPECT_EQ(fired, 8);  // 0..90 except 30 (removed) and 40 (moved to 150)
    EXPECT_EQ(Tracked::live, 11);
    w.advance_clock(T(105), [](TimingWheel<Tracked>::Alarm) {});
    w.fire_past_alarms([](TimingWheel<Tracked>::Alarm) {});  // fires the alarm at 100
    EXPECT_EQ(Tracked::live, 10);
    EXPECT_EQ(static_cast<long>(w.size()), Tracked::live);
    EXPECT_THROW(w.add(T(0), Tracked(99)), std::out_of_range);  // a rejected add keeps nothing
    EXPECT_EQ(Tracked::live, 10);
    w.clear();
    EXPECT_EQ(Tracked::live, 0);
    for (int i = 0; i < 5; ++i) w.add(T(200 + i), Tracked(i));
    EXPECT_EQ(Tracked::live, 5);
    EXPECT_NO_THROW(w.check_invariants());
  }
  EXPECT_EQ(Tracked::live, 0);
}

// A capacity hint pre-sizes the alarm pool; the wheel grows past it.
TEST(TimingWheel, capacity_hint_does_not_limit_size) {
  for (std::size_t capacity : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{10000}}) {
    IntWheel w(config(1, LevelBits::default_bits(), capacity), T(0));
    for (int i = 0; i < 5000; ++i) {
      w.add(T(i), i);
      if (i % 97 == 0) { EXPECT_INVARIANTS(w); }
    }
    EXPECT_EQ(w.size(), 5000u);
    EXPECT_INVARIANTS(w);
    const auto fired = advance(w, T(5000));
    EXPECT_EQ(fired.size(), 5000u);
    EXPECT_INVARIANTS(w);
  }
}

// WheelConfig::capacity and reserve() pre-size the alarm pool in whole
// 2048-alarm chunks; filling it never grows it, alarms behave the same, and
// reserve is allowed inside handle_fired.
TEST(TimingWheel, capacity_and_reserve_presize_the_pool) {
  IntWheel w(config(1, LevelBits::default_bits(), 5000), T(0));
  EXPECT_EQ(w.capacity(), 6144u);
  for (int i = 0; i < 6144; ++i) w.add(T(i), i);
  EXPECT_EQ(w.capacity(), 6144u);
  w.reserve(20'000);
  EXPECT_EQ(w.capacity(), 20'480u);
  EXPECT_INVARIANTS(w);
  std::vector<int> fired;
  w.advance_clock(T(6144), [&](Alarm a) {
    fired.push_back(w.value(a));
    if (fired.size() == 10) w.reserve(30'000);
  });
  ASSERT_EQ(fired.size(), 6144u);
  for (int i = 0; i < 6144; ++i) { EXPECT_EQ(fired[static_cast<std::size_t>(i)], i); }
  EXPECT_EQ(w.capacity(), 30'720u);
  EXPECT_INVARIANTS(w);
  EXPECT_THROW(w.reserve(std::size_t{1} << 32), std::length_error);
  EXPECT_EQ(w.capacity(), 30'720u);
  IntWheel empty(config(1), T(0));
  EXPECT_EQ(empty.capacity(), 0u);
}

// Negative, zero and very large start times all work, right up to the end of representable time.
TEST(TimingWheel, start_can_be_negative_zero_or_large) {
  const std::int64_t starts[] = {kI64Min, -(std::int64_t{1} << 62), -1'000'000'000'000'000'000, -1, 0, 1,
                                 1'000'000'000'000'000'000, kI64Max - 1'000'000, kI64Max - 1, kI64Max};
  for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1'000'000}}) {
    for (std::int64_t start : starts) {
      SCOPED_TRACE(testing::Message() << "precision " << p << " start " << start);
      IntWheel w(config(p), T(start));
      EXPECT_INVARIANTS(w);
      const i128 km = k_max(start, p);
      const i128 ub_k = std::min<i128>(i128{1} << 61, km);
      const TimePoint ub = w.alarm_upper_bound();
      EXPECT_EQ(static_cast<i128>(N(ub)), start + ub_k * p);  // default bits: max_allowed_key + 1 == 2^61
      if (ub == T(start)) {
        // Nothing is representable past start (start == max or within one interval of it).
        EXPECT_THROW(w.add(T(start), 0), std::out_of_range);
        continue;
      }
      const Alarm first = w.add(T(start), 1);
      w.add(T(static_cast<std::int64_t>(std::min<i128>(static_cast<i128>(start) + p, N(ub) - 1))), 2);
      const Alarm last = w.add(T(N(ub) - 1), 3);
      EXPECT_INVARIANTS(w);
      EXPECT_EQ(w.interval_num(first), 0);
      EXPECT_EQ(w.interval_num(last), static_cast<std::int64_t>(ub_k - 1));
      // Advance to the last time that is a valid target below the bound, then fire the past alarms.
      const auto fired = advance(w, T(N(ub) - 1));
      EXPECT_INVARIANTS(w);
      for (const Fired& f : fired) { EXPECT_LT(f.at, w.now()); }
      const auto past = fire_past(w);
      EXPECT_INVARIANTS(w);
      EXPECT_EQ(fired.size() + past.size(), 3u);
      EXPECT_TRUE(w.empty());
    }
  }
}

// A precision as large as the whole int64 range works without overflow (at most two intervals fit).
TEST(TimingWheel, huge_precision_does_not_overflow) {
  for (const std::int64_t p : {kI64Max, kI64Max / 2 + 1}) {
    for (const std::int64_t start : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{5}, -(kI64Max / 2)}) {
      SCOPED_TRACE(testing::Message() << "precision " << p << " start " << start);
      IntWheel w(config(p), T(start));
      EXPECT_INVARIANTS(w);
      const i128 km = k_max(start, p);
      const TimePoint ub = w.alarm_upper_bound();
      EXPECT_EQ(static_cast<i128>(N(ub)), start + std::min<i128>(km, i128{1} << 61) * p);
      EXPECT_EQ(w.interval_num(TimePoint::max()), static_cast<std::int64_t>((static_cast<i128>(kI64Max) - start) / p));
      if (km == 0) {  // not even interval 1 starts within int64: nothing can be added
        EXPECT_EQ(ub, T(start));
        EXPECT_THROW(w.add(T(start), 1), std::out_of_range);
        continue;
      }
      const Alarm a = w.add(T(start), 1);
      EXPECT_INVARIANTS(w);
      const Alarm b = w.add(T(N(ub) - 1), 2);
      EXPECT_INVARIANTS(w);
      EXPECT_EQ(w.next_alarm_fires_at(), T(static_cast<std::int64_t>(static_cast<i128>(start) + p)));
      const auto fired = advance(w, TimePoint::max());
      EXPECT_INVARIANTS(w);
      // Everything before interval_start(max) fires; an alarm in max's own interval is then a past alarm.
      const TimePoint max_start = w.interval_start(TimePoint::max());
      std::multiset<int> expected;
      if (T(start) < max_start) expected.insert(1);
      if (T(N(ub) - 1) < max_start) expected.insert(2);
      EXPECT_EQ(value_set(fired), expected);
      const auto past = fire_past(w);
      EXPECT_INVARIANTS(w);
      EXPECT_EQ(fired.size() + past.size(), 2u);
      EXPECT_FALSE(w.contains(a));
      EXPECT_FALSE(w.contains(b));
    }
  }
}

// A wheel with 61 one-bit levels (the most levels LevelBits allows) behaves like any other.
TEST(TimingWheel, sixty_one_single_bit_levels_work) {
  std::vector<int> ones(61, 1);
  const LevelBits bits = LevelBits::create(std::span<const int>(ones));
  IntWheel w(config(1, bits), T(0));
  EXPECT_EQ(w.alarm_upper_bound(), T(std::int64_t{1} << 61));
  std::mt19937_64 rng(61);
  std::multiset<std::int64_t> times;
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t at = static_cast<std::int64_t>(rng() % (std::uint64_t{1} << (rng() % 61)));
    w.add(T(at), i);
    times.insert(at);
  }
  EXPECT_INVARIANTS(w);
  std::int64_t now = 0;
  while (!times.empty()) {
    now = std::min<std::int64_t>(kMaxKey, now + 1 + static_cast<std::int64_t>(rng() % (std::uint64_t{1} << (rng() % 61))));
    const auto fired = advance(w, T(now));
    EXPECT_INVARIANTS(w);
    std::size_t expected = 0;
    while (!times.empty() && *times.begin() < now) {
      times.erase(times.begin());
      ++expected;
    }
    ASSERT_EQ(fired.size(), expected) << "advance to " << now;
    for (std::size_t i = 1; i < fired.size(); ++i) ASSERT_LE(fired[i - 1].at, fired[i].at);
    if (now == kMaxKey) {
      EXPECT_EQ(fire_past(w).size(), times.size());
      times.clear();
    }
  }
  EXPECT_TRUE(w.empty());
}

// ---------------------------------------------------------------------------
// The guarantees, as inequalities (Jane Street's worked statement, chime's strict version)

// For every fired alarm at < now; for every alarm left, interval_start(at) >= interval_start(now)
// and at > now - alarm_precision (strict: no floating point), and so at >= now - alarm_precision.
TEST(TimingWheel, fires_never_early_and_at_most_one_interval_late) {
  std::mt19937_64 rng(1234);
  for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, std::int64_t{7}, std::int64_t{1000},
                         std::int64_t{1'000'000}}) {
    for (const auto& bits_v : std::vector<std::vector<int>>{{1}, {2, 1, 3}, {11, 10, 10, 10, 10, 10}}) {
      const LevelBits bits = LevelBits::create(std::span<const int>(bits_v));
      SCOPED_TRACE(testing::Message() << "precision " << p << " bits " << bits.num_bits());
      IntWheel w(config(p, bits), T(-999));
      for (int step = 0; step < 400; ++step) {
        const std::int64_t now = N(w.now());
        const std::int64_t room =
            static_cast<std::int64_t>(std::min<i128>(static_cast<i128>(N(w.alarm_upper_bound())) - now, 50 * p));
        for (int i = 0; i < 3; ++i) {
          w.add(T(now + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(room))), step);
        }
        const std::int64_t to = now + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(3 * p + 1));
        std::vector<Fired> fired;
        w.advance_clock(T(to), [&](Alarm a) {
          EXPECT_LT(w.at(a), T(to)) << "fired early";
          fired.push_back({a, w.at(a), w.value(a)});
        });
        if (step % 7 == 0) {
          w.fire_past_alarms([&](Alarm a) { EXPECT_LE(w.at(a), w.now()); });
        }
        EXPECT_INVARIANTS(w);
        const TimePoint n = w.now();
        const TimePoint n_start = w.interval_start(n);
        w.for_each([&](Alarm a) {
          const TimePoint at = w.at(a);
          EXPECT_GE(w.interval_start(at), n_start);
          EXPECT_GE(at, n - w.alarm_precision());
          EXPECT_GT(at, n - w.alarm_precision());
        });
        // Every alarm whose at is at least one precision behind now has fired.
        for (const Fired& f : fired) { EXPECT_LT(f.at, n); }
      }
    }
  }
}

// "Alarms fire when advance_clock is called with a time at least alarm_precision greater than their time."
TEST(TimingWheel, alarm_fires_once_clock_passes_at_plus_precision) {
  for (std::int64_t p : {std::int64_t{1}, std::int64_t{3}, std::int64_t{1000}}) {
    for (std::int64_t off = 0; off < 2 * p + 1; off += (p > 10 ? p / 7 + 1 : 1)) {
      IntWheel w(config(p), T(11));
      const TimePoint at = T(11 + 5 * p + off);
      w.add(at, 1);
      const auto fired = advance(w, at + Duration{p});
      EXPECT_EQ(fired.size(), 1u) << "precision " << p << " offset " << off;
      EXPECT_INVARIANTS(w);
    }
  }
}

}  // namespace

// With cascade_ahead called once per interval, an advance of one interval moves no alarm between
// levels, also where it enters a new level-1 span (the next span came down from level 2 ahead);
// without the calls, that advance moves the whole span.
TEST(TimingWheel, cascade_ahead_once_per_interval_leaves_no_advance_any_alarm_to_move) {
  for (const bool ahead : {false, true}) {
    IntWheel w(config(1, LevelBits::create({2, 2, 2})), T(0));  // level-1 spans of 16 intervals
    for (std::int64_t t = 0; t < 40; ++t) {
      w.add(T(t), static_cast<int>(t));
      w.add(T(t), static_cast<int>(t));
    }
    std::size_t worst = 0;
    int fired = 0;
    for (std::int64_t t = 1; t <= 40; ++t) {
      if (ahead) w.cascade_ahead(16);
      w.advance_clock(T(t), [&](Alarm) { ++fired; });
      worst = std::max(worst, w.moved_by_last_advance());
      EXPECT_INVARIANTS(w);
    }
    EXPECT_EQ(fired, 80);
    if (ahead) {
      EXPECT_EQ(worst, 0u);
    } else {
      EXPECT_GE(worst, 32u);  // the 16 intervals of [16, 32), two alarms each, at once
    }
  }
}

// One advance_clock far ahead against advances to bounded_advance_limit with cascade_ahead(budget)
// between them: the same alarms fire in the same order, no bounded advance moves an alarm between
// levels, each step moves at most the budget, and the steps reach the target time.
TEST(TimingWheel, bounded_advances_fire_what_one_advance_fires_and_move_at_most_the_budget) {
  IntWheel one(config(1, LevelBits::create({2, 2, 2, 4})), T(0));
  IntWheel bounded(config(1, LevelBits::create({2, 2, 2, 4})), T(0));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t t = static_cast<std::int64_t>(rng() % 1000);
    one.add(T(t), i);
    bounded.add(T(t), i);
  }
  std::vector<int> expected, got;
  one.advance_clock(T(900), [&](Alarm a) { expected.push_back(one.value(a)); });
  EXPECT_GT(one.moved_by_last_advance(), 100u);
  constexpr std::size_t kBudget = 10;
  std::size_t steps = 0;
  while (bounded.now() < T(900)) {
    ASSERT_LT(++steps, 10'000u);
    const chime::TimePoint to = bounded.bounded_advance_limit(T(900));
    ASSERT_GE(to, bounded.now());
    const bool moves = to > bounded.now();
    bounded.advance_clock(to, [&](Alarm a) { got.push_back(bounded.value(a)); });
    if (moves) {
      EXPECT_EQ(bounded.moved_by_last_advance(), 0u) << "step " << steps;
    }
    bounded.cascade_ahead(kBudget);
    EXPECT_LE(bounded.moved_by_last_cascade_ahead(), kBudget);
  }
  EXPECT_EQ(bounded.now(), T(900));
  EXPECT_EQ(got, expected);
  EXPECT_EQ(bounded.size(), one.size());
  EXPECT_INVARIANTS(bounded);
}
