// SPDX-License-Identifier: BSL-1.0
// A timer's slack (design.md, "Slack"; runtime/slack.hpp): per timer, or
// RuntimeOptions::slack, or by default clamp(D / 16, 50 us, precision) of
// its delay D. A timer runs never before its due and, below saturation, by
// its fire time: the first point of its slack's power-of-two grid at or
// after the due, or the end of its precision interval for a slack at or
// above the precision (the interval rule). On a ManualClock slack does not
// apply (design.md, "Clocks"), so these tests run on a clock of their own
// that moves only when told, which the runtime treats as any clock: it
// reads it each pass.
#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../runtime/slack.hpp"

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Runtime;
using chime::TimePoint;

// A clock that moves only when told, and is not a ManualClock: slack and
// the interval rule apply to it.
class SteppedClock final : public chime::Clock {
 public:
  explicit SteppedClock(TimePoint t) : ns_(t.time_since_epoch().count()) {}
  TimePoint now() const noexcept override { return TimePoint(Duration(ns_.load(std::memory_order_acquire))); }
  void set(TimePoint t) { ns_.store(t.time_since_epoch().count(), std::memory_order_release); }

 private:
  std::atomic<std::int64_t> ns_;
};

// The first multiple of 2^bits ns at or after t.
TimePoint grid_after(TimePoint t, int bits) {
  const std::int64_t g = std::int64_t{1} << bits;
  const std::int64_t ns = t.time_since_epoch().count();
  return TimePoint(Duration((ns + g - 1) / g * g));
}

class RuntimeTimerSlack : public testing::TestWithParam<unsigned> {
 protected:
  chime::RuntimeOptions options(std::optional<Duration> fixed = std::nullopt) {
    chime::RuntimeOptions o;
    o.precision = kPrecision;
    o.workers = GetParam();
    o.clock = &clock;
    if (fixed) o.slack = *fixed;
    return o;
  }
  // Moves the clock to `t` and lets the wheel act on it.
  void step(Runtime& rt, TimePoint t) {
    clock.set(t);
    rt.flush();
  }
  SteppedClock clock{kStart};
  Recorder rec{&clock};
};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeTimerSlack, testing::Values(0u, 2u), workers_name);

// The default slack's delay is measured in the call for schedule_after
// (and arm_after, sleep_for, a period); schedule_at's when the wheel thread
// files it, at or after the call.
//
// The default, for a short delay: D = 1.2 ms gives 75 us, a 2^16 ns grid
// (65.5 us): the timer runs at the first grid point at or after its due,
// not at the end of its precision interval.
TEST_P(RuntimeTimerSlack, by_default_a_short_timer_runs_on_its_slack_grid_not_at_its_interval_end) {
  Runtime rt{options()};
  const TimePoint due = kStart + 1200us;
  rt.schedule_after(1200us, rec.task());
  const TimePoint fire = grid_after(due, 16);
  ASSERT_GE(fire, due);
  ASSERT_LT(fire, due + 75us);
  step(rt, due - 1ns);
  EXPECT_EQ(rec.count(), 0u) << "ran before its due";
  if (fire > due) {
    step(rt, fire - 1ns);
    EXPECT_EQ(rec.count(), 0u) << "ran before its fire time (no coalescing was due)";
  }
  step(rt, fire);
  ASSERT_EQ(rec.count(), 1u) << "did not run by due + its default slack";
  EXPECT_EQ(rec.runs()[0].firing.due, due);
  EXPECT_GE(rec.runs()[0].clock_at_start, due);
}

// The default, for a long delay: D = 40 ms (>= 16 precisions) gives the
// precision, the interval rule: it runs when its interval ends.
TEST_P(RuntimeTimerSlack, by_default_a_long_timer_keeps_the_interval_rule) {
  Runtime rt{options()};
  const TimePoint due = kStart + 40ms + 300us;
  rt.schedule_after(40ms + 300us, rec.task());
  step(rt, due + 600us);  // past due, inside its interval [40 ms, 41 ms)
  EXPECT_EQ(rec.count(), 0u) << "a long timer left the precision grid";
  step(rt, kStart + 41ms);
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, due);
}

// A per-timer slack overrides the default: a tick 40 ms out that asks for
// 50 us (a 2^15 ns grid) runs within it, while a neighbour with the default
// keeps the interval rule.
TEST_P(RuntimeTimerSlack, a_per_timer_slack_overrides_the_default_for_that_timer_only) {
  Runtime rt{options()};
  const TimePoint due = kStart + 40ms + 300us;
  rt.schedule_at(due, rec.task(1), {.slack = 50us});
  rt.schedule_after(40ms + 300us, rec.task(2));
  step(rt, grid_after(due, 15));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].tag, 1) << "the timer that asked for 50 us did not run within it";
  step(rt, kStart + 41ms);
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.runs()[1].tag, 2);
}

// RuntimeOptions::slack is a fixed slack for every timer that gives none;
// at or above the precision it is the interval rule, also for short delays.
TEST_P(RuntimeTimerSlack, runtime_options_slack_at_the_precision_is_the_interval_rule_for_every_timer) {
  Runtime rt{options(kPrecision)};
  const TimePoint due = kStart + 1200us;
  rt.schedule_after(1200us, rec.task(1));
  rt.schedule_after(1200us, rec.task(2), {.slack = 50us});  // its own slack still applies
  step(rt, grid_after(due, 15));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].tag, 2);
  step(rt, kStart + 1999us);
  EXPECT_EQ(rec.count(), 1u) << "the fixed slack (the precision) did not keep the interval rule";
  step(rt, kStart + 2ms);
  EXPECT_EQ(rec.count(), 2u);
}

// Periodic timers: the default slack follows the period. A 1 ms period
// gives 62.5 us (a 2^15 grid): each run on its grid, never early.
TEST_P(RuntimeTimerSlack, a_periodic_timer_gets_the_default_slack_of_its_period) {
  Runtime rt{options()};
  const TimePoint first = kStart + 1ms + 100us;
  rt.schedule_every(1ms, rec.task(), chime::PeriodicOptions{.first_due = first});
  for (int k = 0; k < 3; ++k) {
    const TimePoint due = first + k * 1ms;
    step(rt, due - 1ns);
    EXPECT_EQ(rec.count(), static_cast<std::size_t>(k)) << "run " << k << " early";
    step(rt, grid_after(due, 15));
    ASSERT_EQ(rec.count(), static_cast<std::size_t>(k + 1)) << "run " << k << " past its slack";
    EXPECT_EQ(rec.runs()[static_cast<std::size_t>(k)].firing.due, due);
  }
}

// Timer::arm_* and Lane's schedules and sleeps take the slack too.
TEST_P(RuntimeTimerSlack, timer_arms_and_lane_schedules_take_a_per_timer_slack) {
  Runtime rt{options()};
  chime::Timer timer(rt, rec.task(1));
  const TimePoint due = kStart + 40ms + 300us;
  timer.arm_at(due, {.slack = 50us});
  chime::Lane lane = rt.lane();
  lane.schedule_at(due, rec.task(2), {.slack = 50us});
  step(rt, grid_after(due, 15));
  lane.run_ready();
  ASSERT_EQ(rec.count(), 2u) << "a Timer or Lane timer with 50 us of slack waited for its interval's end";
  // A re-arm with another slack replaces the run's slack, not only its due.
  const TimePoint due2 = kStart + 80ms + 300us;
  timer.arm_at(due2, {.slack = 50us});
  timer.arm_at(due2, {.slack = kPrecision});  // the interval rule
  step(rt, grid_after(due2, 15));
  EXPECT_EQ(rec.count(), 2u) << "the re-arm kept the old slack";
  step(rt, kStart + 81ms);
  EXPECT_EQ(rec.count(), 3u);
}

// A negative slack is refused, naming the call and the value, and nothing
// is scheduled.
TEST_P(RuntimeTimerSlack, a_negative_slack_throws_invalid_argument_naming_it) {
  Runtime rt{options()};
  try {
    rt.schedule_after(1ms, rec.task(), {.slack = -5us});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("schedule_after"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-5000"), std::string::npos) << e.what();
  }
  chime::Timer timer(rt, rec.task());
  EXPECT_THROW(timer.arm_after(1ms, {.slack = -1ns}), std::invalid_argument);
  EXPECT_THROW(rt.schedule_every(1ms, rec.task(), {.slack = -1ns}), std::invalid_argument);
  EXPECT_EQ(rt.stats().scheduled, 0u);
}

// Never early, and never past its fire time, whatever the slack: random
// dues and slacks (none, 0, 10 us .. 2 ms), the clock stepped by random
// amounts below 40 us.
TEST_P(RuntimeTimerSlack, random_dues_and_slacks_run_never_early_and_by_their_fire_time) {
  Runtime rt{options()};
  std::mt19937_64 rng(7);
  struct Expect {
    TimePoint due;
    TimePoint latest;
  };
  std::vector<Expect> expect;
  constexpr int kTimers = 400;
  for (int i = 0; i < kTimers; ++i) {
    const Duration delay = std::chrono::microseconds(rng() % 20'000);
    std::optional<Duration> slack;
    switch (rng() % 4) {
      case 0:
        break;
      case 1:
        slack = Duration::zero();
        break;
      case 2:
        slack = std::chrono::microseconds(10 + rng() % 990);
        break;
      default:
        slack = std::chrono::microseconds(rng() % 2'000);
        break;
    }
    const TimePoint due = kStart + delay;
    rt.schedule_at(due, rec.task(i), {.slack = slack});
    // By the fire time: its grid's point, or its interval's end; the
    // default slack is at most the precision, on a grid that may cross it.
    const TimePoint interval_end = kStart + (delay / kPrecision + 1) * kPrecision;
    TimePoint latest = due + kPrecision;
    if (slack && *slack >= kPrecision) {
      latest = interval_end;
    } else if (slack) {
      latest = grid_after(due, static_cast<int>(chime::detail::slack_code_for(slack->count(), kPrecision.count())));
    }
    expect.push_back({due, std::max(latest, due)});
  }
  TimePoint t = kStart;
  while (rec.count() < static_cast<std::size_t>(kTimers) && t < kStart + 25ms) {
    t += std::chrono::microseconds(1 + rng() % 40);
    step(rt, t);
    for (const RunRecord& r : rec.runs()) {
      const Expect& e = expect[static_cast<std::size_t>(r.tag)];
      ASSERT_GE(r.clock_at_start, e.due) << "timer " << r.tag << " ran early";
    }
    for (std::size_t i = 0; i < expect.size(); ++i) {
      if (expect[i].latest <= t) {
        bool ran = false;
        for (const RunRecord& r : rec.runs()) ran = ran || r.tag == static_cast<int>(i);
        ASSERT_TRUE(ran) << "timer " << i << " not run with the clock " << ms_since_start(t)
                         << " ms past its fire time " << ms_since_start(expect[i].latest) << " ms";
      }
    }
  }
  EXPECT_EQ(rec.count(), static_cast<std::size_t>(kTimers));
}

}  // namespace
