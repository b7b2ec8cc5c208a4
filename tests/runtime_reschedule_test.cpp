// SPDX-License-Identifier: BSL-1.0
// chime::Runtime::reschedule_at / reschedule_after
// (runtime.hpp): true iff the timer was still pending and now has the new due
// time; a later due time never fires before it (the idle-timeout "touch"), an
// earlier one fires at it, a past one at the next flush; false for a fired,
// running, cancelled, stale or default id; out_of_range beyond the wheel.
// Deterministic: ManualClock + flush(), with 0, 1 and 2 workers.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::TimerId;
using chime::TimerState;

class RuntimeReschedule : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeReschedule, testing::Values(0u, 1u, 2u), workers_name);

// Pushed later, a timer does not fire at its old due time nor before the new one, then fires once.
TEST_P(RuntimeReschedule, reschedule_later_never_fires_before_new_due) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  rt.flush();
  EXPECT_TRUE(rt.reschedule_at(id, at(30ms)));
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 0u) << "fired at its old due time";
  advance_to(clock, rt, at(30ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(30ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(30ms));
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Pushed later when the old due time has already passed on the clock (but not the wheel), it waits for the new one.
TEST_P(RuntimeReschedule, reschedule_later_after_old_due_passed_on_clock_waits) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  rt.flush();
  clock.set(at(15ms));  // the wheel has not seen this time yet
  EXPECT_TRUE(rt.reschedule_at(id, at(40ms)));
  rt.flush();
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(41ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Pushed later before the wheel applied the schedule, the new due time still holds.
TEST_P(RuntimeReschedule, reschedule_later_before_schedule_is_applied) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  EXPECT_TRUE(rt.reschedule_at(id, at(30ms)));
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(31ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Pulled earlier, a timer fires at the new due time and not again at the old one.
TEST_P(RuntimeReschedule, reschedule_earlier_fires_at_new_due) {
  const TimerId id = rt.schedule_at(at(30ms), rec.task());
  rt.flush();
  EXPECT_TRUE(rt.reschedule_at(id, at(10ms)));
  advance_to(clock, rt, at(10ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(10ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(10ms));
  advance_to(clock, rt, at(31ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Pulled earlier before the wheel applied the schedule, it fires at the new due time.
TEST_P(RuntimeReschedule, reschedule_earlier_before_schedule_is_applied) {
  const TimerId id = rt.schedule_at(at(30ms), rec.task());
  EXPECT_TRUE(rt.reschedule_at(id, at(10ms)));
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 1u);
}

// reschedule_after(delay) moves the due time to clock.now() + delay.
TEST_P(RuntimeReschedule, reschedule_after_is_relative_to_now) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  advance_to(clock, rt, at(8ms));
  EXPECT_TRUE(rt.reschedule_after(id, 7ms));  // due 15 ms
  advance_to(clock, rt, at(15ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(15ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(15ms));
}

// Rescheduled to a time in the past, a pending timer fires at the next flush.
TEST_P(RuntimeReschedule, reschedule_to_the_past_fires_at_next_flush) {
  const TimerId id = rt.schedule_at(at(100ms), rec.task());
  advance_to(clock, rt, at(50ms));
  EXPECT_TRUE(rt.reschedule_at(id, at(20ms)));
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(20ms));
}

// The idle-timeout pattern: touched every 5 ms to now + 10 ms, it never fires; left alone, it fires once.
TEST_P(RuntimeReschedule, repeated_touch_keeps_idle_timer_from_firing) {
  const TimerId id = rt.schedule_after(10ms, rec.task());
  for (int step = 1; step <= 200; ++step) {
    advance_to(clock, rt, at(step * 5ms));
    ASSERT_EQ(rec.count(), 0u) << "fired at step " << step << " although touched 5 ms earlier";
    ASSERT_TRUE(rt.reschedule_after(id, 10ms));
  }
  const auto last_due = at(200 * 5ms + 10ms);
  advance_to(clock, rt, last_due - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, last_due);
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, last_due);
}

// From one thread, a later reschedule followed by an earlier one ends at the last due time given.
TEST_P(RuntimeReschedule, later_then_earlier_ends_at_the_last) {
  const TimerId a = rt.schedule_at(at(10ms), rec.task(1));
  const TimerId b = rt.schedule_at(at(10ms), rec.task(2));
  rt.flush();
  EXPECT_TRUE(rt.reschedule_at(a, at(50ms)));  // later
  EXPECT_TRUE(rt.reschedule_at(a, at(20ms)));  // earlier than 50, later than 10
  EXPECT_TRUE(rt.reschedule_at(b, at(50ms)));
  EXPECT_TRUE(rt.reschedule_at(b, at(5ms)));   // earlier than both
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(rec.count(2), 1u);
  EXPECT_EQ(rec.count(1), 0u);
  advance_to(clock, rt, at(20ms) - 1ns);
  EXPECT_EQ(rec.count(1), 0u);
  advance_to(clock, rt, at(20ms));
  EXPECT_EQ(rec.count(1), 1u);
  advance_to(clock, rt, at(60ms));
  EXPECT_EQ(rec.count(), 2u);
}

// Rescheduling a fired, cancelled, default or never-issued id returns false and schedules nothing.
TEST_P(RuntimeReschedule, reschedule_of_fired_cancelled_or_invalid_id_returns_false) {
  const TimerId fired = rt.schedule_at(at(1ms), rec.task(1));
  const TimerId cancelled = rt.schedule_at(at(5ms), rec.task(2));
  EXPECT_TRUE(rt.cancel(cancelled));
  advance_to(clock, rt, at(2ms));
  ASSERT_EQ(rec.count(1), 1u);
  EXPECT_FALSE(rt.reschedule_at(fired, at(10ms)));
  EXPECT_FALSE(rt.reschedule_after(fired, 10ms));
  EXPECT_FALSE(rt.reschedule_at(cancelled, at(10ms)));
  EXPECT_FALSE(rt.reschedule_after(cancelled, 1ms));
  EXPECT_FALSE(rt.reschedule_at(TimerId{}, at(10ms)));
  EXPECT_FALSE(rt.reschedule_at(TimerId{1'000'000, 5}, at(10ms)));
  EXPECT_EQ(rt.state(fired), TimerState::fired);
  EXPECT_EQ(rt.state(cancelled), TimerState::cancelled);
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(rec.count(1), 1u);
  EXPECT_EQ(rec.count(2), 0u);
}

// A one-shot rescheduling itself from inside its callback loses: it is running, not pending.
TEST_P(RuntimeReschedule, reschedule_from_inside_own_callback_returns_false) {
  std::atomic<int> result{-1};
  std::atomic<int> runs{0};
  rt.schedule_at(at(1ms), [&](const Firing& f) {
    runs.fetch_add(1);
    result.store(rt.reschedule_at(f.id, f.due + 10ms) ? 1 : 0);
  });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(result.load(), 0);
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(runs.load(), 1);
}

// Commands on different threads apply in happens-before order: another thread's reschedule or cancel of an
// id whose schedule (posted through a Producer) has not been applied yet is never lost.
TEST_P(RuntimeReschedule, other_threads_commands_on_unapplied_schedule_are_not_lost) {
  std::vector<TimerId> ids;
  std::thread scheduler([&] {
    chime::Producer p = rt.producer();
    for (int i = 0; i < 200; ++i) ids.push_back(p.schedule_at(at(50ms), rec.task(i)));
  });
  scheduler.join();
  std::thread other([&] {
    chime::Producer p = rt.producer();
    for (int i = 0; i < 200; ++i) {
      if (i % 2 == 0) {
        EXPECT_TRUE(p.reschedule_at(ids[i], at(10ms)));
      } else {
        EXPECT_TRUE(rt.cancel(ids[i]));
      }
    }
  });
  other.join();
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 100u);
  for (const RunRecord& r : rec.runs()) {
    EXPECT_EQ(r.tag % 2, 0);
    EXPECT_EQ(r.firing.due, at(10ms));
  }
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(rec.count(), 100u);
}

// A due time beyond the wheel's range throws std::out_of_range and leaves the timer as it was.
TEST(RuntimeReschedule, reschedule_beyond_range_throws_and_changes_nothing) {
  ManualClock clock{kStart};
  Recorder rec;
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.level_bits = chime::LevelBits::create({4, 4});  // 2^8 intervals of 1 ms: a range of about 256 ms
  Runtime rt{options};
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  rt.flush();
  EXPECT_THROW(rt.reschedule_at(id, at(10s)), std::out_of_range);
  EXPECT_THROW(rt.reschedule_after(id, 10s), std::out_of_range);
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 1u);
}

// stats().rescheduled counts successful reschedules only.
TEST_P(RuntimeReschedule, stats_count_successful_reschedules_only) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  EXPECT_TRUE(rt.reschedule_at(id, at(20ms)));
  EXPECT_TRUE(rt.reschedule_at(id, at(5ms)));
  EXPECT_TRUE(rt.reschedule_after(id, 3ms));
  EXPECT_FALSE(rt.reschedule_at(TimerId{}, at(5ms)));
  advance_to(clock, rt, at(4ms));
  EXPECT_FALSE(rt.reschedule_at(id, at(5ms)));
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.rescheduled, 3u);
  EXPECT_EQ(s.fired, 1u);
}

}  // namespace
