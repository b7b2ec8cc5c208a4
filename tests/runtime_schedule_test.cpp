// SPDX-License-Identifier: BSL-1.0
// chime::Runtime: schedule_at / schedule_after (runtime.hpp):
// when a one-shot timer fires (on the first wheel advance to a time >=
// interval_start(due) + precision, never earlier), past-due timers, the
// Firing it is given, order within one advance, callbacks that schedule, the
// Producer handle, and visibility of callback writes after flush().
// Deterministic: ManualClock + flush(), with 0, 1 and 2 workers.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

class RuntimeSchedule : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeSchedule, testing::Values(0u, 1u, 2u), workers_name);

// On a ManualClock a timer due at d (mid-interval) has not fired at a flush one nanosecond before d, and
// fires at the flush at d exactly, with that reading as fired_at: no interval rule (design.md, "Clocks").
TEST_P(RuntimeSchedule, fires_at_the_flush_whose_reading_reaches_its_due_not_before) {
  const TimePoint due = at(10ms + 500us);
  rt.schedule_at(due, rec.task());
  rt.flush();
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, due - 1ns);
  EXPECT_EQ(rec.count(), 0u) << "fired before its due";
  advance_to(clock, rt, due);
  ASSERT_EQ(rec.count(), 1u) << "did not fire at the flush whose reading is its due";
  EXPECT_EQ(rec.runs()[0].firing.due, due);
  EXPECT_EQ(rec.runs()[0].firing.fired_at, due);
}

// The interval rule, on a clock it applies to (not a ManualClock): a timer due at d (mid-interval) has not
// fired with the clock exactly at d nor one nanosecond before interval_start(d) + precision, and fires
// exactly there.
TEST(RuntimeScheduleInterval, fires_at_interval_start_plus_precision_not_at_due) {
  chime_test::SettableClock clock{kStart};
  Recorder rec;
  Runtime rt{chime_test::interval_rule_options(clock, 1)};
  const TimePoint due = at(10ms + 500us);
  rt.schedule_at(due, rec.task());
  rt.flush();
  for (const TimePoint t : {at(10ms), due, at(11ms) - 1ns}) {
    clock.set(t);
    rt.flush();
    EXPECT_EQ(rec.count(), 0u) << "fired before interval_start(due) + precision, at " << ms_since_start(t) << " ms";
  }
  clock.set(at(11ms));
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, due);
  EXPECT_EQ(rec.runs()[0].firing.fired_at, at(11ms));
}

// The interval rule: a due time on an interval boundary waits for the whole interval: not at d, at d +
// precision.
TEST(RuntimeScheduleInterval, due_on_interval_boundary_fires_one_precision_later) {
  chime_test::SettableClock clock{kStart};
  Recorder rec;
  Runtime rt{chime_test::interval_rule_options(clock, 1)};
  rt.schedule_at(at(10ms), rec.task());
  rt.flush();
  for (const TimePoint t : {at(10ms), at(10ms) + 999'999ns}) {
    clock.set(t);
    rt.flush();
    EXPECT_EQ(rec.count(), 0u) << "at " << ms_since_start(t) << " ms";
  }
  clock.set(at(11ms));
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
}

// The interval rule: intervals are counted from the clock's time when the runtime was constructed, not
// from epoch 0.
TEST(RuntimeSchedule, interval_grid_starts_at_construction_time) {
  const TimePoint start = kStart + 400us;  // not a multiple of the precision
  chime_test::SettableClock clock{start};
  Recorder rec;
  Runtime rt{chime_test::interval_rule_options(clock, 1)};
  rt.schedule_at(start + 5ms, rec.task());  // its interval is [start + 5 ms, start + 6 ms)
  rt.flush();
  clock.set(kStart + 6ms);  // past due, but before interval_start + precision
  rt.flush();
  EXPECT_EQ(rec.count(), 0u) << "the wheel's interval grid is not anchored at its start time";
  clock.set(start + 6ms);
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
}

// schedule_after(delay) is due at clock.now() + delay.
TEST_P(RuntimeSchedule, schedule_after_is_due_at_now_plus_delay) {
  advance_to(clock, rt, at(5ms + 300us));
  const TimerId id = rt.schedule_after(10ms, rec.task());
  advance_to(clock, rt, at(15ms + 300us) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(15ms + 300us));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(15ms + 300us));
  EXPECT_EQ(rec.runs()[0].firing.id, id);
}

// A due time well in the past fires at the next flush, without the clock moving.
TEST_P(RuntimeSchedule, past_due_fires_at_next_flush) {
  advance_to(clock, rt, at(50ms));
  const TimerId id = rt.schedule_at(at(20ms), rec.task());
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  const Firing f = rec.runs()[0].firing;
  EXPECT_EQ(f.id, id);
  EXPECT_EQ(f.due, at(20ms));
  EXPECT_EQ(f.fired_at, at(50ms));
  EXPECT_EQ(f.missed, 0u);
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// A due time in the past fires at the next flush even if that flush is the first since construction.
TEST_P(RuntimeSchedule, due_before_the_wheel_start_fires_at_next_flush) {
  rt.schedule_at(kStart - 1s, rec.task());
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
}

// A due time in the current interval, already reached when its command is applied, is due now: it fires at
// that application (the flush), not at the interval's end.
TEST_P(RuntimeSchedule, past_due_in_current_interval_fires_at_application) {
  advance_to(clock, rt, at(50ms + 500us));
  const TimerId id = rt.schedule_at(at(50ms + 200us), rec.task());
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(50ms + 200us));
  EXPECT_EQ(rec.runs()[0].firing.fired_at, at(50ms + 500us));
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// A due time exactly at the clock's time when its command is applied is due now: it fires at that flush.
TEST_P(RuntimeSchedule, due_exactly_now_fires_at_application) {
  advance_to(clock, rt, at(50ms));
  rt.schedule_at(at(50ms), rec.task());
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.fired_at, at(50ms));
}

// schedule_after(0ns) then flush() runs the callback with a ManualClock that never moves.
TEST_P(RuntimeSchedule, schedule_after_zero_fires_at_flush_with_a_clock_that_never_moves) {
  const TimerId id = rt.schedule_after(0ns, rec.task());
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, clock.now());
  EXPECT_EQ(rec.runs()[0].firing.fired_at, clock.now());
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// A clock that holds the wheel thread inside its next read once armed: the
// read returns the time loaded before it paused, so the test can move the
// time and post commands while the wheel thread is in the middle of a pass.
class PausingClock final : public chime::Clock {
 public:
  explicit PausingClock(TimePoint start) : now_ns_(start.time_since_epoch().count()) {}
  TimePoint now() const noexcept override {
    const std::int64_t t = now_ns_.load();
    if (std::this_thread::get_id() != test_thread_ && armed_.exchange(false)) {
      paused_.store(true);
      paused_.notify_all();
      while (!resumed_.load()) resumed_.wait(false);
    }
    return TimePoint(Duration(t));
  }
  void set(TimePoint t) { now_ns_.store(t.time_since_epoch().count()); }
  void arm() { armed_.store(true); }
  void wait_paused() const {
    while (!paused_.load()) paused_.wait(false);
  }
  void resume() {
    resumed_.store(true);
    resumed_.notify_all();
  }

 private:
  const std::thread::id test_thread_ = std::this_thread::get_id();
  std::atomic<std::int64_t> now_ns_;
  mutable std::atomic<bool> armed_{false}, paused_{false}, resumed_{false};
};

// "Due now at application" holds for each command, not for the pass it is
// applied in: a timer posted after the wheel thread read the clock for an
// earlier command of the same pass, due at or before the clock when its own
// command is applied, is due now. Forced here: the wheel thread pauses in the
// clock read for timer A (due later); meanwhile the clock moves to 3 ms and B
// is posted, due at 3 ms. B is applied in the same pass, after A. Were B
// judged by the clock read for A, it would be filed in the interval [3, 4)
// and the flush at 3 ms would not run it (CI found this as a flush that
// returned with schedule_after(0ns) timers still pending).
TEST(RuntimeSchedule, a_command_dequeued_after_the_passs_first_clock_read_is_judged_by_a_later_read) {
  for (const unsigned workers : {0u, 1u, 2u}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    PausingClock clock(kStart);
    chime::RuntimeOptions options;
    options.precision = kPrecision;
    options.workers = workers;
    options.clock = &clock;
    Runtime rt(options);
    Recorder rec;
    rt.flush();  // the wheel thread settles it, then sleeps without reading the clock
    clock.arm();
    const TimerId a = rt.schedule_at(at(10ms), rec.task(1));  // due after the wheel's time: a clock read
    clock.wait_paused();
    clock.set(at(3ms));
    const TimerId b = rt.schedule_at(at(3ms), rec.task(2));  // due now by the clock when it is applied
    clock.resume();
    rt.flush();
    ASSERT_EQ(rec.count(), 1u) << "B, due at the clock's time when applied, did not run at the flush";
    EXPECT_EQ(rec.runs()[0].tag, 2);
    EXPECT_EQ(rec.runs()[0].firing.fired_at, at(3ms));
    EXPECT_EQ(rt.state(b), TimerState::fired);
    EXPECT_EQ(rt.state(a), TimerState::pending);
  }
}

// A due time one nanosecond after the flush's reading waits for a flush whose reading reaches it, and runs
// there, with that reading as fired_at.
TEST_P(RuntimeSchedule, due_just_after_the_reading_runs_at_the_flush_reaching_it) {
  advance_to(clock, rt, at(50ms));
  rt.schedule_at(at(50ms) + 1ns, rec.task());
  rt.flush();
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(50ms) + 1ns);
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.fired_at, at(50ms) + 1ns);
}

// A reschedule to a due time at or before the clock's time is due now as well.
TEST_P(RuntimeSchedule, reschedule_to_now_fires_at_application) {
  const TimerId id = rt.schedule_at(at(30ms), rec.task());
  advance_to(clock, rt, at(10ms + 300us));
  ASSERT_TRUE(rt.reschedule_at(id, at(10ms + 100us)));
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(10ms + 100us));
}

// Timers due now in one application go out in nondecreasing due order, merged with the wheel's own alarms of
// that advance in nondecreasing interval order (workers = 0 and 1 run them in that order).
TEST_P(RuntimeSchedule, due_now_timers_merge_with_the_advance_in_interval_order) {
  if (GetParam() > 1) GTEST_SKIP() << "order of callbacks is only defined for workers = 0 or 1";
  rt.schedule_at(at(2ms), rec.task(2));  // filed in the wheel, fires with the advance below
  rt.schedule_at(at(6ms), rec.task(6));
  rt.flush();
  clock.set(at(9ms + 500us));
  rt.schedule_at(at(9ms + 200us), rec.task(9));  // due now at application, in the current interval
  rt.schedule_at(at(4ms), rec.task(4));          // due now, before the wheel's interval
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].tag, 2);
  EXPECT_EQ(runs[1].tag, 4);
  EXPECT_EQ(runs[2].tag, 6);
  EXPECT_EQ(runs[3].tag, 9);
}

// Firing carries the id schedule_at returned, the due time given, the clock time of the advance, missed == 0.
TEST_P(RuntimeSchedule, firing_reports_id_due_fired_at_and_no_missed_runs) {
  const TimerId a = rt.schedule_at(at(3ms + 1ns), rec.task(1));
  const TimerId b = rt.schedule_at(at(7ms), rec.task(2));
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(a == b);
  advance_to(clock, rt, at(9ms + 123ns));
  auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 2u);
  std::sort(runs.begin(), runs.end(), [](const RunRecord& x, const RunRecord& y) { return x.tag < y.tag; });
  EXPECT_EQ(runs[0].firing.id, a);
  EXPECT_EQ(runs[0].firing.due, at(3ms + 1ns));
  EXPECT_EQ(runs[0].firing.fired_at, at(9ms + 123ns));
  EXPECT_EQ(runs[0].firing.missed, 0u);
  EXPECT_EQ(runs[1].firing.id, b);
  EXPECT_EQ(runs[1].firing.due, at(7ms));
  EXPECT_EQ(runs[1].firing.fired_at, at(9ms + 123ns));
  EXPECT_EQ(runs[1].firing.missed, 0u);
}

// Each timer fires exactly once, however many flushes and clock moves follow.
TEST_P(RuntimeSchedule, one_shot_fires_exactly_once) {
  rt.schedule_at(at(2ms), rec.task());
  for (int i = 1; i <= 20; ++i) advance_to(clock, rt, at(i * 1ms));
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
}

// A jump far ahead fires everything due in between, and nothing due after.
TEST_P(RuntimeSchedule, jump_far_ahead_fires_exactly_the_timers_due_before) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 300; ++i) rt.schedule_at(at(i * 7ms + 3us), rec.task(i));
  advance_to(clock, rt, at(1000ms));
  // due i*7ms + 3us fires iff i*7ms + 1ms <= 1000ms, i.e. i <= 142.
  EXPECT_EQ(rec.count(), 143u);
  for (const RunRecord& r : rec.runs()) {
    EXPECT_LE(r.tag, 142);
    EXPECT_LT(r.firing.due, at(1000ms));
  }
  advance_to(clock, rt, at(10s));
  EXPECT_EQ(rec.count(), 300u);
}

// Commands posted with no flush in between are all applied by the next flush.
TEST_P(RuntimeSchedule, commands_posted_without_flush_are_applied_by_next_flush) {
  for (int i = 0; i < 1000; ++i) rt.schedule_at(at(5ms), rec.task(i));
  clock.set(at(6ms));
  rt.flush();
  EXPECT_EQ(rec.count(), 1000u);
  std::set<int> tags;
  for (int t : rec.tags()) tags.insert(t);
  EXPECT_EQ(tags.size(), 1000u);
}

// Every TimerId issued while timers are alive is distinct and valid.
TEST_P(RuntimeSchedule, live_timer_ids_are_distinct_and_valid) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 2000; ++i) ids.push_back(rt.schedule_at(at(1s), rec.task()));
  for (const TimerId& id : ids) EXPECT_TRUE(id);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  for (const TimerId& id : ids) seen.insert({id.slot(), id.generation()});
  EXPECT_EQ(seen.size(), ids.size());
}

// A callback can schedule another timer (also on the wheel thread with workers = 0) and it fires later.
TEST_P(RuntimeSchedule, callback_can_schedule_a_timer) {
  std::atomic<int> second{0};
  rt.schedule_at(at(5ms), [&](const Firing& f) {
    rt.schedule_at(f.due + 10ms, [&] { second.fetch_add(1); });
  });
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(second.load(), 0);
  advance_to(clock, rt, at(15ms) - 1ns);
  EXPECT_EQ(second.load(), 0);
  advance_to(clock, rt, at(15ms));
  EXPECT_EQ(second.load(), 1);
}

// Plain (non-atomic) writes made by callbacks are visible to the thread whose flush() waited for them.
TEST_P(RuntimeSchedule, callback_writes_happen_before_flush_returns) {
  std::vector<int> slots(100, 0);  // each written by exactly one callback, read after flush
  for (int i = 0; i < 100; ++i) {
    rt.schedule_at(at(1ms + i * 10us), [&slots, i] { slots[i] = i + 1; });
  }
  advance_to(clock, rt, at(3ms));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(slots[i], i + 1);
}

// Writes made before schedule_at are visible to the callback.
TEST_P(RuntimeSchedule, writes_before_schedule_happen_before_callback) {
  int payload = 0;  // non-atomic: ordered by schedule_at -> callback
  int seen = -1;
  payload = 42;
  rt.schedule_at(at(1ms), [&] { seen = payload; });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(seen, 42);
}

// With workers = 0 or 1, callbacks within one advance run in nondecreasing interval order.
TEST(RuntimeSchedule, single_runner_callbacks_run_in_nondecreasing_interval_order) {
  for (unsigned workers : {0u, 1u}) {
    ManualClock clock{kStart};
    Recorder rec;
    Runtime rt{manual_options(clock, workers)};
    std::mt19937_64 rng(12345 + workers);
    std::uniform_int_distribution<std::int64_t> due_ns(0, 100'000'000);  // [0, 100 ms)
    for (int i = 0; i < 2000; ++i) rt.schedule_at(at(Duration(due_ns(rng))), rec.task(i));
    advance_to(clock, rt, at(200ms));  // everything fires in this one flush
    const auto runs = rec.runs();
    ASSERT_EQ(runs.size(), 2000u) << "workers " << workers;
    for (std::size_t i = 1; i < runs.size(); ++i) {
      const auto prev = (runs[i - 1].firing.due - kStart) / kPrecision;
      const auto cur = (runs[i].firing.due - kStart) / kPrecision;
      ASSERT_LE(prev, cur) << "workers " << workers << ": run " << i << " (due "
                           << ms_since_start(runs[i].firing.due) << " ms) ran after a run due "
                           << ms_since_start(runs[i - 1].firing.due) << " ms";
    }
  }
}

// With workers = 0 callbacks run on one runtime thread (the wheel thread), never on the caller.
TEST(RuntimeSchedule, zero_workers_run_callbacks_on_the_wheel_thread) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 0)};
  for (int i = 0; i < 50; ++i) rt.schedule_at(at(1ms + i * 1ms), rec.task(i));
  for (int i = 1; i <= 60; ++i) advance_to(clock, rt, at(i * 1ms));
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 50u);
  for (const RunRecord& r : runs) {
    EXPECT_EQ(r.thread, runs[0].thread);
    EXPECT_NE(r.thread, std::this_thread::get_id());
  }
}

// With workers > 0 callbacks never run on the thread that called flush().
TEST_P(RuntimeSchedule, callbacks_never_run_on_the_flushing_thread) {
  for (int i = 0; i < 20; ++i) rt.schedule_at(at(1ms), rec.task(i));
  advance_to(clock, rt, at(2ms));
  for (const RunRecord& r : rec.runs()) EXPECT_NE(r.thread, std::this_thread::get_id());
}

// Runtime::clock() is the clock given in the options; precision() the precision.
TEST(RuntimeSchedule, clock_and_precision_are_the_configured_ones) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.precision = 250us;
  Runtime rt{options};
  EXPECT_EQ(&rt.clock(), &clock);
  EXPECT_EQ(rt.precision(), Duration(250us));
  EXPECT_EQ(rt.clock().now(), kStart);
}

// A non-default precision moves the interval grid: due 1.1 ms with 250 us precision fires at 1.25 ms.
// On a clock the interval rule applies to: not a ManualClock, where a flush runs what is due by its reading.
TEST(RuntimeSchedule, precision_sets_the_interval_length) {
  chime_test::SettableClock clock{kStart};
  chime::RuntimeOptions options = chime_test::settable_options(clock, 1);
  options.precision = 250us;
  options.slack = options.precision;  // the interval rule
  Recorder rec;
  Runtime rt{options};
  rt.schedule_at(at(1100us), rec.task());
  rt.flush();
  clock.set(at(1249us));
  rt.flush();
  EXPECT_EQ(rec.count(), 0u);
  clock.set(at(1250us));
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
}

// Runtime() (defaults: steady clock, 1 ms) fires a real-time timer, never before its due time by its clock.
TEST(RuntimeSchedule, default_runtime_fires_on_the_steady_clock_never_early) {
  Runtime rt;
  EXPECT_EQ(rt.precision(), Duration(1ms));
  std::atomic<bool> fired{false};
  std::atomic<std::int64_t> now_in_callback{0};
  const TimePoint due = rt.clock().now() + 20ms;
  rt.schedule_at(due, [&] {
    now_in_callback.store(rt.clock().now().time_since_epoch().count());
    fired.store(true);
  });
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!fired.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(fired.load()) << "a 20 ms timer did not fire within 5 s";
  EXPECT_GE(now_in_callback.load(), due.time_since_epoch().count());
}

// A Producer handle schedules, cancels and reschedules like the Runtime.
TEST_P(RuntimeSchedule, producer_has_the_same_calls) {
  chime::Producer p = rt.producer();
  const TimerId a = p.schedule_at(at(5ms), rec.task(1));
  const TimerId b = p.schedule_after(5ms, rec.task(2));
  const TimerId c = p.schedule_at(at(5ms), rec.task(3));
  const TimerId d = p.schedule_at(at(5ms), rec.task(4));
  const TimerId e = p.schedule_every(10ms, rec.task(5));
  EXPECT_TRUE(p.cancel(c));
  EXPECT_TRUE(p.reschedule_at(d, at(20ms)));
  EXPECT_TRUE(p.reschedule_after(b, 30ms));
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(1), 1u);
  EXPECT_EQ(rec.count(2), 0u);
  EXPECT_EQ(rec.count(3), 0u);
  EXPECT_EQ(rec.count(4), 0u);
  EXPECT_EQ(rec.count(5), 1u);
  advance_to(clock, rt, at(21ms));
  EXPECT_EQ(rec.count(4), 1u);
  EXPECT_EQ(rec.count(5), 2u);
  advance_to(clock, rt, at(31ms));
  EXPECT_EQ(rec.count(2), 1u);
  EXPECT_EQ(rec.count(4), 1u);
  EXPECT_EQ(rec.count(5), 3u);
  EXPECT_TRUE(p.cancel(e));
  EXPECT_EQ(rt.state(a), TimerState::fired);
  EXPECT_EQ(rt.state(c), TimerState::cancelled);
}

// A Producer can be moved (constructed and assigned) and keeps working.
TEST_P(RuntimeSchedule, producer_is_movable) {
  chime::Producer p = rt.producer();
  chime::Producer q = std::move(p);
  q.schedule_at(at(1ms), rec.task(1));
  chime::Producer r = rt.producer();
  r = std::move(q);
  r.schedule_at(at(1ms), rec.task(2));
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rec.count(), 2u);
}

// Commands from one Producer take effect in the order posted: later-then-earlier reschedules end at the last one.
TEST_P(RuntimeSchedule, producer_commands_take_effect_in_order) {
  chime::Producer p = rt.producer();
  std::vector<TimerId> ids;
  for (int i = 0; i < 200; ++i) {
    const TimerId id = p.schedule_at(at(50ms), rec.task(i));
    ASSERT_TRUE(p.reschedule_at(id, at(40ms)));  // earlier: through the wheel thread
    ASSERT_TRUE(p.reschedule_at(id, at(60ms)));  // later: CAS on the state word
    ASSERT_TRUE(p.reschedule_at(id, at(30ms)));  // earlier again: must win over both
    ids.push_back(id);
  }
  advance_to(clock, rt, at(30ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(30ms));
  ASSERT_EQ(rec.count(), 200u);
  for (const RunRecord& r : rec.runs()) EXPECT_EQ(r.firing.due, at(30ms));
}

// Each thread's Producer schedules independently; all timers fire.
TEST_P(RuntimeSchedule, producers_on_several_threads_all_fire) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      chime::Producer p = rt.producer();
      for (int i = 0; i < 250; ++i) p.schedule_at(at(1ms + i * 10us), rec.task(t));
    });
  }
  for (auto& th : threads) th.join();
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(), 1000u);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(rec.count(t), 250u);
}

// workers = 0: callbacks run on the wheel thread, in dispatch order.
class RuntimeDueOrder : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeDueOrder, testing::Values(0u), workers_name);

// Timers already due when their commands are applied in one pass go out in
// nondecreasing due order, ties in posting order (as Go's runtime does), not
// in posting order. The wheel thread is held in a callback while the 13
// timers are posted, so it applies them in one pass.
TEST_P(RuntimeDueOrder, past_due_timers_applied_together_run_in_due_order_ties_in_posting_order) {
  Gate gate;
  rt.schedule_at(at(100ms), gate.blocker());
  clock.set(at(101ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  // Due times (ms after kStart) in posting order; tag = posting index.
  const int due_ms[] = {40, 20, 50, 50, 50, 10, 10, 15, 60, 80, 30, 70, 0};
  for (int i = 0; i < 13; ++i) rt.schedule_at(at(std::chrono::milliseconds(due_ms[i])), rec.task(i));
  gate.release();
  flusher.join();
  rt.flush();
  const std::vector<int> expected = {12, 5, 6, 7, 1, 10, 0, 2, 3, 4, 8, 11, 9};
  EXPECT_EQ(rec.tags(), expected);
}

// The same with thousands of timers in one pass (the wheel thread sorts a
// long list by radix, a short one by comparison): 3,000 past-due timers
// with dues drawn from 0-99 ms (many ties) run in nondecreasing due order,
// ties in posting order.
TEST_P(RuntimeDueOrder, thousands_of_past_due_timers_applied_together_run_in_due_order_ties_in_posting_order) {
  Gate gate;
  rt.schedule_at(at(100ms), gate.blocker());
  clock.set(at(101ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  constexpr int kTimers = 3000;
  std::vector<std::pair<std::int64_t, int>> posted;  // (due in us, posting index)
  std::uint64_t x = 88172645463325252ull;            // xorshift: a fixed, spread sequence
  for (int i = 0; i < kTimers; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const std::int64_t due_us =
        static_cast<std::int64_t>(x % 100) * 1000 + (i % 3 == 0 ? 0 : static_cast<std::int64_t>(x % 7));
    posted.emplace_back(due_us, i);
    rt.schedule_at(at(std::chrono::microseconds(due_us)), rec.task(i));
  }
  gate.release();
  flusher.join();
  rt.flush();
  std::stable_sort(posted.begin(), posted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> expected;
  for (const auto& p : posted) expected.push_back(p.second);
  EXPECT_EQ(rec.tags(), expected);
}

}  // namespace
