// SPDX-License-Identifier: BSL-1.0
// The spellings kept for one release (CHANGELOG.md): a trailing slack
// argument and KeyedTimers::move still compile, with a deprecation warning
// (silenced here), and do what the new spellings do: the slack given either
// way is the timer's. And the nine operations, declared once
// (detail::TimerOperations), give a Producer state() too.

#include <chime/keyed_timers.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <vector>

#include "runtime_test_support.hpp"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using namespace std::chrono_literals;
using chime_test::at;
using chime_test::kStart;

// A real clock the test sets: slack applies (not on a ManualClock, G28).
struct Settable {
  Settable() : clock(kStart), rt(chime_test::settable_options(clock, 0)) {}
  chime_test::SettableClock clock;
  chime::Runtime rt;
};

// A negative slack throws naming it, whichever spelling carries it: the
// old spelling reaches the same check.
TEST(RuntimeDeprecatedSpellings, a_trailing_slack_is_the_timers_slack_as_in_the_options) {
  Settable s;
  chime::Producer p = s.rt.producer();
  chime::Lane lane = s.rt.lane();
  chime::Timer timer(s.rt, [] {});
  const std::optional<chime::Duration> bad = -1ns;
  EXPECT_THROW(s.rt.schedule_at(
                   at(1ms), [] {}, bad),
               std::invalid_argument);
  EXPECT_THROW(s.rt.schedule_after(
                   1ms, [] {}, bad),
               std::invalid_argument);
  EXPECT_THROW(s.rt.schedule_every(
                   1ms, [] {}, {}, bad),
               std::invalid_argument);
  EXPECT_THROW(p.schedule_at(
                   at(1ms), [] {}, bad),
               std::invalid_argument);
  EXPECT_THROW(lane.schedule_after(
                   1ms, [] {}, bad),
               std::invalid_argument);
  EXPECT_THROW(timer.arm_after(1ms, bad), std::invalid_argument);
  EXPECT_THROW(timer.arm_every(1ms, {}, bad), std::invalid_argument);
  EXPECT_THROW(s.rt.schedule_at(at(1ms), [] {}, {.slack = -1ns}), std::invalid_argument);
  EXPECT_THROW(s.rt.schedule_every(1ms, [] {}, {.slack = -1ns}), std::invalid_argument);
  EXPECT_EQ(s.rt.stats().scheduled, 0u) << "a refused schedule schedules nothing";
  // A valid one through each spelling: both pending.
  const chime::TimerId old_way = s.rt.schedule_at(
      at(5ms), [] {}, std::optional<chime::Duration>(50us));
  const chime::TimerId new_way = s.rt.schedule_at(at(5ms), [] {}, {.slack = 50us});
  EXPECT_EQ(s.rt.state(old_way), chime::TimerState::pending);
  EXPECT_EQ(s.rt.state(new_way), chime::TimerState::pending);
}

// KeyedTimers::move is reschedule_after: it moves a pending key.
TEST(RuntimeDeprecatedSpellings, keyed_timers_move_is_reschedule_after) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(chime_test::manual_options(clock, 0));
  std::vector<int> executed;
  chime::KeyedTimers<int, int> timers(rt, [&](const int& key, int&&) { executed.push_back(key); });
  timers.set(1, 10, 5ms);
  EXPECT_TRUE(timers.move(1, 20ms));
  EXPECT_FALSE(timers.move(2, 20ms)) << "never set";
  clock.advance(10ms);
  rt.flush();
  EXPECT_TRUE(executed.empty()) << "moved later: not at its old due";
  clock.advance(10ms);
  rt.flush();
  EXPECT_EQ(executed, std::vector<int>{1});
}

// Every handle has the nine operations: a Producer answers state() as the
// Runtime does, and throws once moved from.
TEST(RuntimeDeprecatedSpellings, a_producer_has_state_like_the_runtime) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(chime_test::manual_options(clock, 0));
  chime::Producer p = rt.producer();
  const chime::TimerId id = p.schedule_after(1ms, [] {});
  EXPECT_EQ(p.state(id), chime::TimerState::pending);
  EXPECT_EQ(p.state(id), rt.state(id));
  EXPECT_TRUE(p.cancel(id));
  EXPECT_EQ(p.state(id), rt.state(id));
  chime::Producer moved = std::move(p);
  EXPECT_THROW((void)p.state(id), std::logic_error);  // NOLINT(bugprone-use-after-move): the check under test
  EXPECT_EQ(moved.state(chime::TimerId{}), chime::TimerState::unknown);
}

}  // namespace
