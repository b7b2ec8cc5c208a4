// SPDX-License-Identifier: BSL-1.0
// Unit tests for chime::IntrusiveTimingWheel (intrusive_timing_wheel.hpp):
// the node's layout, the errors of add/remove/reschedule/at, re-adding from
// inside handle_fired, clear, and a differential run that drives an
// IntrusiveTimingWheel and a TimingWheel with the same random operations and
// requires the same results (what fires, in what order, at what times, and
// every query), with check_invariants() after each step. TimingWheel itself
// is checked against the reference model in wheel_differential_test.cpp.

#include <chime/wheel.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using chime::Duration;
using chime::IntrusiveAlarm;
using chime::LevelBits;
using chime::TimePoint;
using chime::TimingWheel;
using chime::WheelConfig;

__extension__ typedef __int128 i128;

TimePoint T(std::int64_t ns) { return TimePoint(Duration(ns)); }
std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

// The caller's slab: a vector of nodes, indexed by position.
struct NodeAt {
  std::vector<IntrusiveAlarm>* nodes;
  IntrusiveAlarm& operator()(std::uint32_t i) const noexcept { return (*nodes)[i]; }
};
using Wheel = chime::IntrusiveTimingWheel<NodeAt>;

struct Fixture {
  explicit Fixture(std::size_t n, WheelConfig config = {Duration(10)}, TimePoint start = T(0))
      : nodes(n), wheel(config, start, NodeAt{&nodes}) {}
  std::vector<IntrusiveAlarm> nodes;
  Wheel wheel;
};

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The node a caller embeds is at most 20 bytes, trivially copyable and
// standard layout, and a default one is in no wheel.
TEST(IntrusiveTimingWheel, node_is_at_most_20_bytes_trivially_copyable_and_standard_layout) {
  static_assert(sizeof(IntrusiveAlarm) <= 20);
  static_assert(std::is_trivially_copyable_v<IntrusiveAlarm>);
  static_assert(std::is_standard_layout_v<IntrusiveAlarm>);
  EXPECT_EQ(sizeof(IntrusiveAlarm), 20U);
  EXPECT_FALSE(IntrusiveAlarm{}.filed());
}

// add files the node (filed(), contains, at), remove detaches it.
TEST(IntrusiveTimingWheel, add_files_the_callers_node_and_remove_detaches_it) {
  Fixture f(4);
  f.wheel.add(2, T(35));
  f.wheel.check_invariants();
  EXPECT_TRUE(f.nodes[2].filed());
  EXPECT_TRUE(f.wheel.contains(2));
  EXPECT_FALSE(f.wheel.contains(1));
  EXPECT_EQ(f.wheel.at(2), T(35));
  EXPECT_EQ(f.wheel.size(), 1U);
  EXPECT_EQ(f.wheel.min_alarm_time(), T(35));
  EXPECT_EQ(f.wheel.next_alarm_fires_at(), T(40));
  f.wheel.remove(2);
  f.wheel.check_invariants();
  EXPECT_FALSE(f.nodes[2].filed());
  EXPECT_TRUE(f.wheel.empty());
  EXPECT_EQ(f.wheel.min_alarm_time(), std::nullopt);
}

// Adding a node that is filed already throws std::logic_error naming its
// index, and changes nothing.
TEST(IntrusiveTimingWheel, add_of_a_filed_node_throws_logic_error_naming_the_index) {
  Fixture f(8);
  f.wheel.add(7, T(50));
  EXPECT_THROW(f.wheel.add(7, T(60)), std::logic_error);
  const std::string what = message_of([&] { f.wheel.add(7, T(60)); });
  EXPECT_NE(what.find("node 7"), std::string::npos) << what;
  EXPECT_EQ(f.wheel.at(7), T(50));
  EXPECT_EQ(f.wheel.size(), 1U);
  f.wheel.check_invariants();
}

// remove, reschedule and at of a node that is not filed (never added,
// removed, fired) throw std::invalid_argument naming the index.
TEST(IntrusiveTimingWheel, remove_reschedule_and_at_of_a_node_not_filed_throw_invalid_argument) {
  Fixture f(4);
  EXPECT_THROW(f.wheel.remove(3), std::invalid_argument);
  EXPECT_THROW(f.wheel.reschedule(3, T(20)), std::invalid_argument);
  EXPECT_THROW((void)f.wheel.at(3), std::invalid_argument);
  EXPECT_NE(message_of([&] { f.wheel.remove(3); }).find("node 3"), std::string::npos);
  f.wheel.add(3, T(20));
  f.wheel.remove(3);
  EXPECT_THROW(f.wheel.remove(3), std::invalid_argument);
  f.wheel.add(3, T(20));
  f.wheel.advance_clock(T(100), [](std::uint32_t) {});
  EXPECT_THROW(f.wheel.reschedule(3, T(200)), std::invalid_argument);
  f.wheel.check_invariants();
}

// Times out of range throw std::out_of_range with TimingWheel's message (the
// wheel's name aside), and change nothing.
TEST(IntrusiveTimingWheel, range_errors_are_timing_wheels_and_change_nothing) {
  const WheelConfig config{Duration(10), LevelBits::create({3, 3})};
  Fixture f(2, config, T(100));
  TimingWheel<int> pooled(config, T(100));
  const auto same = [](std::string intrusive, std::string timing) {
    const std::string from = "chime::IntrusiveTimingWheel";
    ASSERT_EQ(intrusive.rfind(from, 0), 0U) << intrusive;
    intrusive.replace(0, from.size(), "chime::TimingWheel");
    EXPECT_EQ(intrusive, timing);
    EXPECT_FALSE(timing.empty());
  };
  for (const TimePoint at : {T(99), f.wheel.alarm_upper_bound(), T(std::numeric_limits<std::int64_t>::max())}) {
    EXPECT_THROW(f.wheel.add(0, at), std::out_of_range);
    same(message_of([&] { f.wheel.add(0, at); }), message_of([&] { pooled.add(at, 0); }));
  }
  f.wheel.add(0, T(150));
  const auto alarm = pooled.add(T(150), 0);
  EXPECT_THROW(f.wheel.reschedule(0, T(99)), std::out_of_range);
  same(message_of([&] { f.wheel.reschedule(0, T(99)); }), message_of([&] { pooled.reschedule(alarm, T(99)); }));
  EXPECT_EQ(f.wheel.at(0), T(150));
  same(message_of([&] { (void)f.wheel.interval_num(T(0)); }), message_of([&] { (void)pooled.interval_num(T(0)); }));
  same(message_of([&] { (void)f.wheel.interval_num_start(-1); }),
       message_of([&] { (void)pooled.interval_num_start(-1); }));
  EXPECT_THROW((Wheel(WheelConfig{Duration(0)}, T(0), NodeAt{&f.nodes})), std::invalid_argument);
  f.wheel.check_invariants();
}

// A fired node is detached when handle_fired gets it, so handle_fired may
// file it again; one re-added within the interval the advance passes fires
// in the same advance_clock, after the alarms already due, never early.
TEST(IntrusiveTimingWheel, a_fired_node_can_be_re_added_from_inside_handle_fired) {
  Fixture f(3);
  f.wheel.add(0, T(5));
  f.wheel.add(1, T(25));
  f.wheel.add(2, T(25));
  std::vector<std::pair<std::uint32_t, std::int64_t>> fired;
  int readds = 0;
  f.wheel.advance_clock(T(60), [&](std::uint32_t i) {
    EXPECT_FALSE(f.nodes[i].filed());
    EXPECT_FALSE(f.wheel.contains(i));
    fired.emplace_back(i, N(f.wheel.at(i)));
    if (i == 0 && readds++ < 2) f.wheel.add(0, f.wheel.at(0) + Duration(20));  // 25, then 45: both before 60
    if (i == 1) f.wheel.add(1, T(200));                                        // stays
  });
  const std::vector<std::pair<std::uint32_t, std::int64_t>> want = {{0, 5}, {1, 25}, {2, 25}, {0, 25}, {0, 45}};
  EXPECT_EQ(fired, want);
  EXPECT_TRUE(f.wheel.contains(1));
  EXPECT_FALSE(f.wheel.contains(0));
  EXPECT_EQ(f.wheel.size(), 1U);
  EXPECT_EQ(f.wheel.min_alarm_time(), T(200));
  f.wheel.check_invariants();
}

// Inside handle_fired an add before the interval being fired throws
// std::out_of_range, and every change but add throws std::logic_error.
TEST(IntrusiveTimingWheel, inside_handle_fired_only_adds_at_or_after_the_fired_interval_are_allowed) {
  Fixture f(3);
  f.wheel.add(0, T(5));
  f.wheel.add(1, T(35));
  f.wheel.add(2, T(500));
  int calls = 0;
  f.wheel.advance_clock(T(100), [&](std::uint32_t i) {
    ++calls;
    if (i != 1) return;
    EXPECT_THROW(f.wheel.add(1, T(15)), std::out_of_range);  // after now() = 0, before interval [30, 40)
    EXPECT_THROW(f.wheel.remove(2), std::logic_error);
    EXPECT_THROW(f.wheel.reschedule(2, T(600)), std::logic_error);
    EXPECT_THROW(f.wheel.clear(), std::logic_error);
    EXPECT_THROW(f.wheel.cascade_ahead(10), std::logic_error);
    EXPECT_THROW(f.wheel.advance_clock(T(200), [](std::uint32_t) {}), std::logic_error);
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(f.wheel.size(), 1U);
  f.wheel.check_invariants();
}

// Alarms of one interval added directly into level 0 fire in insertion
// order, from advance_clock and from fire_past_alarms.
TEST(IntrusiveTimingWheel, equal_intervals_fire_in_insertion_order) {
  Fixture f(6);
  for (std::uint32_t i : {4U, 1U, 5U, 0U}) f.wheel.add(i, T(33));
  std::vector<std::uint32_t> fired;
  f.wheel.advance_clock(T(40), [&](std::uint32_t i) { fired.push_back(i); });
  EXPECT_EQ(fired, (std::vector<std::uint32_t>{4, 1, 5, 0}));
  fired.clear();
  for (std::uint32_t i : {2U, 3U, 1U}) f.wheel.add(i, T(40));
  f.wheel.fire_past_alarms([&](std::uint32_t i) { fired.push_back(i); });
  EXPECT_EQ(fired, (std::vector<std::uint32_t>{2, 3, 1}));
  f.wheel.check_invariants();
}

// clear() detaches every node, which can then be filed again.
TEST(IntrusiveTimingWheel, clear_detaches_every_node) {
  Fixture f(100, WheelConfig{Duration(1), LevelBits::create({2, 2, 2})});
  for (std::uint32_t i = 0; i < 60; ++i) f.wheel.add(i, T(i));
  f.wheel.clear();
  f.wheel.check_invariants();
  EXPECT_TRUE(f.wheel.empty());
  for (std::uint32_t i = 0; i < 100; ++i) EXPECT_FALSE(f.nodes[i].filed()) << i;
  for (std::uint32_t i = 0; i < 60; ++i) f.wheel.add(i, T(i));
  EXPECT_EQ(f.wheel.size(), 60U);
  f.wheel.check_invariants();
}

// ---------------------------------------------------------------------------
// The same random operations on an IntrusiveTimingWheel and a TimingWheel
// give the same results. Parameter: the precision and the level bits.

struct Geometry {
  std::int64_t precision;
  std::vector<int> bits;
  std::int64_t start;
};

void PrintTo(const Geometry& g, std::ostream* os) {
  *os << "precision " << g.precision << " ns, start " << g.start << ", " << g.bits.size() << " levels";
}

class IntrusiveTimingWheelDifferential : public ::testing::TestWithParam<Geometry> {};

using Fired = std::vector<std::pair<std::uint32_t, std::int64_t>>;

// Both wheels, fed the same operations.
struct Twins {
  static constexpr std::uint32_t kNodes = 96;
  explicit Twins(const Geometry& g)
      : config{Duration(g.precision), LevelBits::create(g.bits)},
        nodes(kNodes),
        handles(kNodes),
        intrusive(config, T(g.start), NodeAt{&nodes}),
        pooled(config, T(g.start)) {}

  // Runs op on both; both throw the same exception type or neither does.
  template <class A, class B>
  void both(const char* what, A&& on_intrusive, B&& on_pooled) {
    const std::string a = message_of(on_intrusive);
    const std::string b = message_of(on_pooled);
    ASSERT_EQ(a.empty(), b.empty()) << what << ": " << a << " / " << b;
  }

  void same_state() {
    intrusive.check_invariants();
    pooled.check_invariants();
    ASSERT_EQ(intrusive.size(), pooled.size());
    ASSERT_EQ(intrusive.now(), pooled.now());
    ASSERT_EQ(intrusive.alarm_upper_bound(), pooled.alarm_upper_bound());
    ASSERT_EQ(intrusive.now_interval_num_start(), pooled.now_interval_num_start());
    ASSERT_EQ(intrusive.next_alarm_fires_at(), pooled.next_alarm_fires_at());
    ASSERT_EQ(intrusive.min_alarm_interval_num(), pooled.min_alarm_interval_num());
    ASSERT_EQ(intrusive.min_alarm_time(), pooled.min_alarm_time());
    ASSERT_EQ(intrusive.max_alarm_time(), pooled.max_alarm_time());
    ASSERT_EQ(intrusive.moved_by_last_advance(), pooled.moved_by_last_advance());
    for (std::uint32_t i = 0; i < kNodes; ++i) {
      ASSERT_EQ(intrusive.contains(i), pooled.contains(handles[i])) << i;
      if (intrusive.contains(i)) {
        ASSERT_EQ(intrusive.at(i), pooled.at(handles[i])) << i;
      }
    }
  }

  WheelConfig config;
  std::vector<IntrusiveAlarm> nodes;
  std::vector<TimingWheel<std::uint32_t>::Alarm> handles;
  Wheel intrusive;
  TimingWheel<std::uint32_t> pooled;
};

// A time for an add: near now, within the bound, or out of range.
std::int64_t pick_time(std::mt19937_64& rng, const Twins& w) {
  const i128 now = N(w.intrusive.now());
  const i128 bound = N(w.intrusive.alarm_upper_bound());
  const i128 precision = w.config.alarm_precision.count();
  i128 t;
  switch (rng() % 8) {
    case 0:
      t = now - 1 - static_cast<i128>(rng() % 3);  // before now
      break;
    case 1:
      t = bound + static_cast<i128>(rng() % 3);  // at or past the bound
      break;
    case 2:
    case 3:
      t = now + static_cast<i128>(rng() % 4) * precision + static_cast<i128>(rng() % 3);  // a few intervals
      break;
    case 4:
      t = now + static_cast<i128>(rng() % 5000) * precision;  // past level 0
      break;
    default:
      t = now + static_cast<i128>(rng() % static_cast<std::uint64_t>(std::min<i128>(bound - now, i128{1} << 62)));
  }
  if (t > std::numeric_limits<std::int64_t>::max()) t = std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(t);
}

// An IntrusiveTimingWheel fires the same alarms, in the same order, at the
// same times as a TimingWheel fed the same adds, removes, reschedules,
// advances, fire_alarms_until and cascade_ahead calls, and every query
// agrees after each step.
TEST_P(IntrusiveTimingWheelDifferential, matches_timing_wheel_on_the_same_operations) {
  std::size_t fired_by_advance = 0;
  std::size_t fired_past = 0;
  std::size_t max_size = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Twins w(GetParam());
    const std::int64_t precision = w.config.alarm_precision.count();
    for (int step = 0; step < 3000; ++step) {
      const auto i = static_cast<std::uint32_t>(rng() % Twins::kNodes);
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2: {
          if (w.intrusive.contains(i)) break;
          const TimePoint at = T(pick_time(rng, w));
          w.both(
              "add", [&] { w.intrusive.add(i, at); }, [&] { w.handles[i] = w.pooled.add(at, i); });
          break;
        }
        case 3: {
          const TimePoint at = T(pick_time(rng, w));
          w.both(
              "reschedule", [&] { w.intrusive.reschedule(i, at); }, [&] { w.pooled.reschedule(w.handles[i], at); });
          break;
        }
        case 4:
          w.both(
              "remove", [&] { w.intrusive.remove(i); }, [&] { w.pooled.remove(w.handles[i]); });
          break;
        case 5:
        case 6: {
          // Mostly short advances, sometimes far (up to the next alarm, or past it).
          const i128 now = N(w.intrusive.now());
          i128 to = now + static_cast<i128>(rng() % 3) * precision + static_cast<i128>(rng() % precision);
          if (rng() % 4 == 0) {
            if (const auto next = w.intrusive.next_alarm_fires_at()) to = N(*next) + static_cast<i128>(rng() % 3);
          }
          if (to > std::numeric_limits<std::int64_t>::max()) to = std::numeric_limits<std::int64_t>::max();
          const TimePoint to_t = T(static_cast<std::int64_t>(to));
          Fired a;
          Fired b;
          w.both(
              "advance_clock",
              [&] {
                w.intrusive.advance_clock(to_t, [&](std::uint32_t k) {
                  ASSERT_FALSE(w.intrusive.contains(k));
                  a.emplace_back(k, N(w.intrusive.at(k)));
                });
              },
              [&] {
                w.pooled.advance_clock(to_t, [&](TimingWheel<std::uint32_t>::Alarm e) {
                  b.emplace_back(w.pooled.value(e), N(w.pooled.at(e)));
                });
              });
          ASSERT_EQ(a, b);
          fired_by_advance += a.size();
          for (const auto& [k, at] : a) ASSERT_LT(at, N(w.intrusive.interval_start(to_t))) << "fired early";
          break;
        }
        case 7: {
          const TimePoint until = T(N(w.intrusive.now()) - static_cast<std::int64_t>(rng() % (2 * precision)));
          Fired a;
          Fired b;
          w.intrusive.fire_alarms_until(until, [&](std::uint32_t k) { a.emplace_back(k, N(w.intrusive.at(k))); });
          w.pooled.fire_alarms_until(until, [&](TimingWheel<std::uint32_t>::Alarm e) {
            b.emplace_back(w.pooled.value(e), N(w.pooled.at(e)));
          });
          ASSERT_EQ(a, b);
          fired_past += a.size();
          break;
        }
        case 8: {
          const std::size_t budget = rng() % 6;
          ASSERT_EQ(w.intrusive.cascade_ahead(budget), w.pooled.cascade_ahead(budget));
          break;
        }
        default:
          if (rng() % 50 == 0) {
            w.intrusive.clear();
            w.pooled.clear();
          }
      }
      ASSERT_NO_FATAL_FAILURE(w.same_state()) << "step " << step;
      max_size = std::max(max_size, w.intrusive.size());
    }
  }
  // The run exercised what it compares.
  EXPECT_GT(fired_by_advance, 1000U);
  EXPECT_GT(fired_past, 10U);
  EXPECT_GT(max_size, 15U);
}

INSTANTIATE_TEST_SUITE_P(Geometries, IntrusiveTimingWheelDifferential,
                         ::testing::Values(Geometry{1, {2, 2, 2}, 0}, Geometry{10, {3, 2, 3}, -1005},
                                           Geometry{7, {4, 3}, 12345}, Geometry{1000, {11, 10, 10, 10, 10, 10}, 0},
                                           Geometry{1, {5}, 3}));

}  // namespace
