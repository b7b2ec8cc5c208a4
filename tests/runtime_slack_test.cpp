// SPDX-License-Identifier: BSL-1.0
// RuntimeOptions::slack (design.md, "Slack"): with a fixed slack of 1 ns a
// timer runs once the clock has reached its exact due, not when its precision
// interval ends; never before its due; with a slack at or above the precision
// the interval rule holds (each on a clock that is not a ManualClock, where
// slack does not apply; the default and per-timer slacks:
// runtime_timer_slack_test.cpp). The races of the
// current interval (docs/state-machine.md, "Slack: the current interval"): a
// touch moves a timer of the current interval later, a cancel of one wins,
// a reschedule into the current interval runs at its new due.
#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::ManualClock;
using chime::Runtime;
using chime::TimePoint;

chime::RuntimeOptions slack_options(ManualClock& clock, unsigned workers, Duration slack) {
  chime::RuntimeOptions o = manual_options(clock, workers);
  o.slack = slack;
  return o;
}
chime::RuntimeOptions slack_options(SettableClock& clock, unsigned workers, Duration slack) {
  chime::RuntimeOptions o = settable_options(clock, workers);
  o.slack = slack;
  return o;
}

// A slack of 1 ns (a grid of 1 ns: the fire time is the due itself), on a
// clock that slack applies to (not a ManualClock).
class RuntimeSlack : public testing::TestWithParam<unsigned> {
 protected:
  SettableClock clock{kStart};
  Recorder rec{&clock};
  Runtime rt{slack_options(clock, GetParam(), 1ns)};
};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeSlack, testing::Values(0u, 1u, 2u), workers_name);

// With slack 50 us at 1 ms precision, a timer due at 3.3 ms has not run with
// the clock at 3.299 ms, and has run once the clock is at 3.3 ms (the
// interval rule would wait for 4 ms).
TEST_P(RuntimeSlack, a_timer_runs_once_its_due_has_passed_not_at_the_end_of_its_interval) {
  const TimePoint due = at(3ms + 300us);
  rt.schedule_at(due, rec.task(1));
  rt.flush();
  clock.set(due - 1ns);
  rt.flush();
  EXPECT_EQ(rec.count(), 0u) << "ran before its due";
  clock.set(due);
  rt.flush();
  ASSERT_EQ(rec.count(), 1u) << "did not run with the clock at its due";
  const RunRecord r = rec.runs()[0];
  EXPECT_EQ(r.firing.due, due);
  EXPECT_GE(r.clock_at_start, due);
}

// Several timers of one interval run in due order as the clock passes each
// due (workers = 0 and 1 run them in hand-over order).
TEST_P(RuntimeSlack, timers_of_one_interval_run_as_the_clock_passes_each_due) {
  rt.schedule_at(at(5ms + 700us), rec.task(3));
  rt.schedule_at(at(5ms + 100us), rec.task(1));
  rt.schedule_at(at(5ms + 400us), rec.task(2));
  advance_to(clock, rt, at(5ms + 150us));
  EXPECT_EQ(rec.tags(), std::vector<int>{1});
  advance_to(clock, rt, at(5ms + 699us));
  EXPECT_EQ(rec.count(), 2u);
  advance_to(clock, rt, at(5ms + 700us));
  EXPECT_EQ(rec.count(), 3u);
  if (GetParam() <= 1) {
    EXPECT_EQ(rec.tags(), (std::vector<int>{1, 2, 3}));
  }
}

// A touch (a later due) of a timer in the current interval moves it: it does
// not run at its old due, and runs at its new one.
TEST_P(RuntimeSlack, a_touch_in_the_current_interval_moves_the_run_to_the_new_due) {
  const chime::TimerId id = rt.schedule_at(at(2ms + 300us), rec.task(1));
  advance_to(clock, rt, at(2ms + 100us));  // its interval is the current one
  ASSERT_TRUE(rt.reschedule_at(id, at(2ms + 800us)));
  advance_to(clock, rt, at(2ms + 500us));
  EXPECT_EQ(rec.count(), 0u) << "ran at its old due after a touch";
  advance_to(clock, rt, at(2ms + 800us));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(2ms + 800us));
}

// A reschedule to an earlier due inside the current interval runs at that due.
TEST_P(RuntimeSlack, a_reschedule_into_the_current_interval_runs_at_its_new_due) {
  const chime::TimerId id = rt.schedule_at(at(9ms), rec.task(1));
  advance_to(clock, rt, at(2ms + 100us));
  ASSERT_TRUE(rt.reschedule_at(id, at(2ms + 400us)));
  advance_to(clock, rt, at(2ms + 399us));
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(2ms + 400us));
  EXPECT_EQ(rec.count(), 1u);
}

// A cancel of a timer in the current interval, before its due, wins.
TEST_P(RuntimeSlack, a_cancel_in_the_current_interval_wins) {
  const chime::TimerId id = rt.schedule_at(at(2ms + 300us), rec.task(1));
  advance_to(clock, rt, at(2ms + 100us));
  EXPECT_TRUE(rt.cancel(id));
  advance_to(clock, rt, at(3ms));
  EXPECT_EQ(rec.count(), 0u);
}

// A periodic timer runs at each exact due, not at the ends of its intervals.
TEST_P(RuntimeSlack, a_periodic_timer_runs_at_each_exact_due) {
  rt.schedule_every(1500us, rec.task(1), first_at(at(1ms + 200us)));
  for (int k = 0; k < 4; ++k) {
    const TimePoint due = at(1ms + 200us) + k * 1500us;
    advance_to(clock, rt, due - 1ns);
    EXPECT_EQ(rec.count(), static_cast<std::size_t>(k)) << "run " << k << " before its due";
    advance_to(clock, rt, due);
    EXPECT_EQ(rec.count(), static_cast<std::size_t>(k + 1)) << "run " << k << " not at its due";
  }
}

// Randomized: 400 timers due anywhere in 40 ms, the clock moved in random
// steps. After each flush every timer due at or before the clock has run,
// none due after it has, and none ran before its due.
TEST_P(RuntimeSlack, every_timer_runs_at_the_first_flush_at_or_after_its_due_and_never_before) {
  std::mt19937 rng(7);
  std::vector<TimePoint> dues;
  for (int i = 0; i < 400; ++i) {
    dues.push_back(at(std::chrono::microseconds(rng() % 40'000)));
    rt.schedule_at(dues.back(), rec.task(i));
  }
  while (clock.now() < at(41ms)) {
    clock.advance(std::chrono::microseconds(1 + rng() % 700));
    rt.flush();
    std::size_t due_by_now = 0;
    for (const TimePoint d : dues) due_by_now += d <= clock.now() ? 1 : 0;
    ASSERT_EQ(rec.count(), due_by_now) << "at " << ms_since_start(clock.now()) << " ms";
  }
  for (const RunRecord& r : rec.runs()) EXPECT_GE(r.clock_at_start, r.firing.due);
}

// A lane's timers (and so Timer and co_await sleeps on a lane) honour the
// slack too: ready at the exact due.
TEST(RuntimeSlack, a_lane_runs_its_timer_at_the_exact_due) {
  SettableClock clock{kStart};
  Recorder rec{&clock};
  Runtime rt{slack_options(clock, 1, 1ns)};
  chime::Lane lane = rt.lane();
  lane.schedule_at(at(1ms + 600us), rec.task(1));
  rt.flush();
  clock.set(at(1ms + 600us));
  rt.flush();  // on the lane's thread: runs the lane's ready runs itself
  lane.run_ready();
  EXPECT_EQ(rec.count(), 1u);
}

// A slack at or above the precision is the interval rule: due at 3.3 ms, not
// run with the clock at 3.3 ms, run at 4 ms.
// On a clock the interval rule applies to (not a ManualClock: "On a manual
// clock" below).
TEST(RuntimeSlack, a_slack_at_or_above_the_precision_keeps_the_interval_rule) {
  for (const Duration slack : {Duration(kPrecision), Duration(5 * kPrecision)}) {
    SettableClock clock{kStart};
    Recorder rec{&clock};
    chime::RuntimeOptions o = settable_options(clock, 1);
    o.slack = slack;
    Runtime rt{o};
    rt.schedule_at(at(3ms + 300us), rec.task(1));
    rt.flush();
    clock.set(at(3ms + 300us));
    rt.flush();
    EXPECT_EQ(rec.count(), 0u) << "slack " << slack.count() << " ns";
    clock.set(at(4ms));
    rt.flush();
    EXPECT_EQ(rec.count(), 1u) << "slack " << slack.count() << " ns";
  }
}

// On a manual clock slack does not apply (design.md, "Clocks"): whatever the
// slack, a timer due at 3.3 ms runs at the flush whose reading is 3.3 ms,
// with that reading as fired_at, and not at the flush at 3.299 ms.
TEST(RuntimeSlack, on_a_manual_clock_any_slack_runs_a_timer_at_the_flush_reaching_its_due) {
  for (const Duration slack : {Duration::zero(), Duration(50us), Duration(kPrecision), Duration(5 * kPrecision)}) {
    ManualClock clock{kStart};
    Recorder rec{&clock};
    Runtime rt{slack_options(clock, 1, slack)};
    const TimePoint due = at(3ms + 300us);
    rt.schedule_at(due, rec.task(1));
    advance_to(clock, rt, due - 1us);
    EXPECT_EQ(rec.count(), 0u) << "slack " << slack.count() << " ns";
    advance_to(clock, rt, due);
    ASSERT_EQ(rec.count(), 1u) << "slack " << slack.count() << " ns";
    EXPECT_EQ(rec.runs()[0].firing.fired_at, due) << "slack " << slack.count() << " ns";
  }
}

// A negative slack is refused by name.
TEST(RuntimeSlack, a_negative_slack_is_refused_naming_it) {
  ManualClock clock{kStart};
  try {
    Runtime rt{slack_options(clock, 0, Duration(-5))};
    FAIL() << "slack -5 ns was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("-5"), std::string::npos) << e.what();
  }
}

}  // namespace
