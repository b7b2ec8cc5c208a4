// SPDX-License-Identifier: BSL-1.0
// chime::Runtime observers (runtime.hpp): state() through
// pending, running, fired, cancelled and unknown; stats() counters adding up;
// the lateness histogram; and "idle costs nothing": no wheel-thread wake-ups
// with nothing due (steady clock) and none at all on a manual clock unless
// flushed.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::TimerId;
using chime::TimerState;

class RuntimeObserve : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeObserve, testing::Values(0u, 1u, 2u), workers_name);

// A one-shot is pending from schedule on (even before the wheel applied it), running inside its callback, then fired.
TEST_P(RuntimeObserve, state_goes_pending_running_fired) {
  std::atomic<int> inside{-1};
  const TimerId id = rt.schedule_at(at(5ms), [&](const Firing& f) { inside.store(static_cast<int>(rt.state(f.id))); });
  EXPECT_EQ(rt.state(id), TimerState::pending);
  rt.flush();
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(5ms) - 1ns);
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(5ms));
  EXPECT_EQ(inside.load(), static_cast<int>(TimerState::running));
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// A cancelled timer reports cancelled (before and after the wheel applied the cancel).
TEST_P(RuntimeObserve, state_goes_pending_cancelled) {
  const TimerId id = rt.schedule_at(at(5ms), rec.task());
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  rt.flush();
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
}

// The default id and ids never issued are unknown.
TEST_P(RuntimeObserve, state_is_unknown_for_default_and_never_issued_ids) {
  const TimerId live = rt.schedule_at(at(5ms), rec.task());
  EXPECT_EQ(rt.state(TimerId{}), TimerState::unknown);
  EXPECT_EQ(rt.state(TimerId{live.slot(), live.generation() + 1}), TimerState::unknown);
  EXPECT_EQ(rt.state(TimerId{1'000'000, 1}), TimerState::unknown);
  EXPECT_EQ(rt.state(TimerId{0xFFFFFFFFu, 0xFFFFFFFFu}), TimerState::unknown);
  EXPECT_FALSE(TimerId{});
  EXPECT_TRUE(live);
  EXPECT_TRUE(TimerId{} == TimerId{});
}

// stats(): scheduled, fired, cancelled, rescheduled and pending add up (scheduled = fired + cancelled + pending).
TEST_P(RuntimeObserve, stats_counters_add_up) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(rt.schedule_at(at(5ms + i * 1ms), rec.task()));
  EXPECT_TRUE(rt.cancel(ids[0]));
  EXPECT_TRUE(rt.cancel(ids[9]));
  EXPECT_TRUE(rt.reschedule_at(ids[1], at(50ms)));
  EXPECT_TRUE(rt.reschedule_at(ids[2], at(1ms)));
  // Due times now: id1 50, id2 1, id3..id8 8..13 ms. At 10 ms, due <= 10 ms has fired: id2, id3, id4, id5.
  advance_to(clock, rt, at(10ms));
  chime::Stats s = rt.stats();
  EXPECT_EQ(s.scheduled, 10u);
  EXPECT_EQ(s.cancelled, 2u);
  EXPECT_EQ(s.rescheduled, 2u);
  EXPECT_EQ(s.fired, rec.count());
  EXPECT_EQ(s.fired, 4u);
  EXPECT_EQ(s.pending, 4u);  // id1, id6..id8
  EXPECT_EQ(s.scheduled, s.fired + s.cancelled + s.pending);
  EXPECT_EQ(s.callback_errors, 0u);
  advance_to(clock, rt, at(100ms));
  s = rt.stats();
  EXPECT_EQ(s.fired, 8u);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.scheduled, s.fired + s.cancelled + s.pending);
}

// stats() counts each periodic run as fired; the timer stays pending until cancelled.
TEST_P(RuntimeObserve, stats_count_each_periodic_run) {
  const TimerId id = rt.schedule_every(2ms, rec.task());
  for (int k = 1; k <= 10; ++k) advance_to(clock, rt, at(k * 2ms + 1ms));
  chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 10u);
  EXPECT_EQ(s.pending, 1u);
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  s = rt.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.scheduled, 1u);
}

// The lateness histogram measures callback start minus due on the runtime clock: here all runs are 3 ms late.
TEST_P(RuntimeObserve, lateness_measures_start_minus_due) {
  for (int i = 0; i < 100; ++i) rt.schedule_at(at(10ms), rec.task());
  advance_to(clock, rt, at(13ms));
  const chime::LatenessStats l = rt.stats().lateness;
  EXPECT_GE(l.p50, 2ms);
  EXPECT_LE(l.p50, l.p99);
  EXPECT_LE(l.p99, l.p999);
  EXPECT_LE(l.p999, l.max);
  EXPECT_GE(l.max, 3ms);
  EXPECT_LE(l.max, 4ms);
}

// Wake-up count of `rt` over `d` of real time, after letting start-up wake-ups settle.
std::uint64_t wakeups_over(Runtime& rt, chime::Duration d) {
  std::this_thread::sleep_for(50ms);
  const std::uint64_t before = rt.stats().wakeups;
  std::this_thread::sleep_for(d);
  return rt.stats().wakeups - before;
}

// Idle costs nothing: with nothing scheduled on the steady clock the wheel thread does not wake up.
TEST(RuntimeObserve, no_wakeups_with_nothing_scheduled) {
  Runtime rt{steady_options(2)};
  EXPECT_EQ(wakeups_over(rt, 300ms), 0u) << "the wheel thread ticks while idle";
}

// No busy ticking: with one timer 10 s away the wheel thread sleeps until then.
TEST(RuntimeObserve, no_wakeups_while_waiting_for_a_far_timer) {
  Runtime rt{steady_options(2)};
  rt.schedule_after(10s, [] {});
  rt.flush();
  EXPECT_EQ(wakeups_over(rt, 300ms), 0u) << "the wheel thread ticks while waiting for a timer 10 s away";
}

// After its timers fired, the wheel thread goes back to sleep without a timeout.
TEST(RuntimeObserve, no_wakeups_after_the_last_timer_fired) {
  Runtime rt{steady_options(1)};
  std::atomic<int> fired{0};
  for (int i = 0; i < 20; ++i) rt.schedule_after(i * 1ms, [&] { fired.fetch_add(1); });
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (fired.load() < 20 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(fired.load(), 20);
  EXPECT_EQ(wakeups_over(rt, 300ms), 0u);
}

// With a ManualClock the wheel thread never wakes on its own (clock.hpp), not even once after a burst of
// commands: time set ahead of a due timer fires nothing until flush().
TEST(RuntimeObserve, manual_clock_never_wakes_without_flush) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  std::atomic<int> fired{0};
  rt.schedule_at(at(1ms), [&] { fired.fetch_add(1); });
  rt.flush();
  const std::uint64_t before = rt.stats().wakeups;
  clock.set(at(1s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(rt.stats().wakeups - before, 0u) << "the wheel thread woke up on its own on a manual clock";
  EXPECT_EQ(fired.load(), 0) << "fired without a flush on a manual clock";
  rt.flush();
  EXPECT_EQ(fired.load(), 1);
}

// Stats::run_time measures callbacks on the steady clock; a run longer than slow_run is counted and
// reported to on_slow_run with its id and duration. The empty callback is quick, but a loaded machine
// may preempt its thread for longer than slow_run (this failed once under ASan beside other work): so
// every run reported must have taken longer than slow_run, the sleeping one must be among them, and
// the count must equal the reports, whether or not the quick one was slow this time.
TEST(RuntimeObserve, slow_runs_are_counted_and_reported) {
  ManualClock clock{kStart};
  std::mutex mu;
  std::vector<std::pair<TimerId, chime::Duration>> reported;
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.slow_run = 2ms;
  o.on_slow_run = [&](TimerId id, chime::Duration d) {
    std::lock_guard<std::mutex> lock(mu);
    reported.emplace_back(id, d);
  };
  Runtime rt{o};
  const TimerId slow = rt.schedule_at(at(1ms), [] { std::this_thread::sleep_for(5ms); });
  const TimerId quick = rt.schedule_at(at(1ms), [] {});
  advance_to(clock, rt, at(2ms));
  const chime::Stats s = rt.stats();
  EXPECT_GE(s.run_time.max, 5ms);
  EXPECT_LE(s.run_time.p50, s.run_time.max);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(s.slow_runs, reported.size());
  ASSERT_GE(reported.size(), 1u);
  ASSERT_LE(reported.size(), 2u);
  bool slow_reported = false;
  for (const auto& [id, took] : reported) {
    EXPECT_TRUE(id == slow || id == quick);
    EXPECT_GT(took, o.slow_run) << "a run reported as slow must have taken longer than slow_run";
    if (id == slow) {
      slow_reported = true;
      EXPECT_GE(took, 5ms);
    }
  }
  EXPECT_TRUE(slow_reported) << "the 5 ms run was not reported as slow";
}

// The default slow_run is 10 ms, and quick runs are not slow.
TEST(RuntimeObserve, quick_runs_are_not_slow) {
  EXPECT_EQ(chime::RuntimeOptions{}.slow_run, 10ms);
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  for (int i = 0; i < 100; ++i) rt.schedule_at(at(1ms), [] {});
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rt.stats().slow_runs, 0u);
  EXPECT_EQ(rt.stats().fired, 100u);
  EXPECT_LT(rt.stats().run_time.p99, 10ms);
}

}  // namespace
