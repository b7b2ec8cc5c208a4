// SPDX-License-Identifier: BSL-1.0
// chime clocks (clock.hpp): ManualClock moves only when
// told, rejects going backwards with std::invalid_argument naming the values,
// and concurrent advances add up; SteadyClock is std::chrono::steady_clock.

#include <chime/clock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::ManualClock;
using chime::SteadyClock;
using chime::TimePoint;

// A default ManualClock starts at TimePoint{}; an explicit one at the given time.
TEST(RuntimeClock, manual_clock_starts_where_told) {
  ManualClock zero;
  EXPECT_EQ(zero.now(), TimePoint{});
  ManualClock start{TimePoint{} + 5s};
  EXPECT_EQ(start.now(), TimePoint{} + 5s);
}

// Time moves only when told: now() is constant across real time and moves by exactly what advance/set say.
TEST(RuntimeClock, manual_clock_moves_only_when_told) {
  ManualClock c{TimePoint{} + 1s};
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(c.now(), TimePoint{} + 1s);
  c.advance(3ns);
  EXPECT_EQ(c.now(), TimePoint{} + 1s + 3ns);
  c.advance(Duration::zero());
  EXPECT_EQ(c.now(), TimePoint{} + 1s + 3ns);
  c.set(TimePoint{} + 2s);
  EXPECT_EQ(c.now(), TimePoint{} + 2s);
  c.set(TimePoint{} + 2s);  // setting the current time is not going backwards
  EXPECT_EQ(c.now(), TimePoint{} + 2s);
}

// advance() with a negative duration throws std::invalid_argument naming it, and leaves the time unchanged.
TEST(RuntimeClock, manual_clock_advance_negative_throws_and_names_value) {
  ManualClock c{TimePoint{} + 1s};
  try {
    c.advance(-7ns);
    ADD_FAILURE() << "advance(-7ns) did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("-7"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.now(), TimePoint{} + 1s);
}

// advance() past TimePoint::max() throws std::out_of_range naming both values and leaves the time as it was:
// time never wraps (advance(Duration::max()) twice would otherwise wrap it to -2 ns).
TEST(RuntimeClock, manual_clock_advance_past_time_point_max_throws_and_never_wraps) {
  ManualClock c{TimePoint{} + 1ns};
  c.advance(Duration::max() - 1ns);
  EXPECT_EQ(c.now(), TimePoint::max());
  try {
    c.advance(Duration::max());
    ADD_FAILURE() << "advance(Duration::max()) at TimePoint::max() did not throw";
  } catch (const std::out_of_range& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(Duration::max().count())), std::string::npos) << what;
  }
  EXPECT_EQ(c.now(), TimePoint::max());
  EXPECT_THROW(c.advance(1ns), std::out_of_range);
  c.advance(0ns);
  EXPECT_EQ(c.now(), TimePoint::max());
  ManualClock twice;
  twice.advance(Duration::max());
  EXPECT_THROW(twice.advance(Duration::max()), std::out_of_range);
  EXPECT_EQ(twice.now(), TimePoint::max());
}

// set() to an earlier time throws std::invalid_argument naming both times, and leaves the time unchanged.
TEST(RuntimeClock, manual_clock_set_backwards_throws_and_names_both_times) {
  ManualClock c{TimePoint{} + 1000ns};
  try {
    c.set(TimePoint{} + 999ns);
    ADD_FAILURE() << "set() backwards did not throw";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("999"), std::string::npos) << what;
    EXPECT_NE(what.find("1000"), std::string::npos) << what;
  }
  EXPECT_EQ(c.now(), TimePoint{} + 1000ns);
}

// Concurrent advances from several threads add up exactly.
TEST(RuntimeClock, manual_clock_concurrent_advances_add_up) {
  ManualClock c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10'000; ++i) c.advance(1ns);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(c.now(), TimePoint{} + 40'000ns);
}

// SteadyClock reads std::chrono::steady_clock and never goes backwards.
TEST(RuntimeClock, steady_clock_is_steady_clock_and_monotonic) {
  SteadyClock c;
  const auto before = std::chrono::steady_clock::now();
  const TimePoint a = c.now();
  const TimePoint b = c.now();
  const auto after = std::chrono::steady_clock::now();
  EXPECT_LE(before, a);
  EXPECT_LE(a, b);
  EXPECT_LE(b, after);
  const chime::Clock& as_base = c;
  EXPECT_GE(as_base.now(), b);
}

}  // namespace
