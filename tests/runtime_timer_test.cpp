// SPDX-License-Identifier: BSL-1.0
// chime::Timer (chime/timer.hpp; design "chime::Timer"): arm, re-arm (the
// reschedule fast path), arm again after a run or a disarm (Go's
// Timer.Reset), arm from inside its own callback (takes effect after the run
// returns), periodic arms, disarm / disarm_and_wait results, the destructor
// waiting for a run, errors. Deterministic: ManualClock + flush().

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::CancelResult;
using chime::Timer;
using chime::TimerId;
using chime::TimerState;

class RuntimeTimer : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeTimer, testing::Values(0u, 1u, 2u), workers_name);

// A bound Timer is not armed; arm_after arms one run at now + delay, which fires once (never early).
TEST_P(RuntimeTimer, arm_after_fires_once_at_its_due) {
  Timer t(rt, rec.task());
  EXPECT_TRUE(t);
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(t.due(), std::nullopt);
  t.arm_after(5ms);
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(t.due(), at(5ms));
  advance_to(clock, rt, at(5ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(5ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(5ms));
  EXPECT_EQ(rec.runs()[0].firing.id, t.id());
  EXPECT_FALSE(t.armed());
  advance_to(clock, rt, at(50ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Re-arming a pending one-shot later moves it in place (same runtime timer: the reschedule fast path);
// it fires once, at the new due.
TEST_P(RuntimeTimer, re_arm_later_moves_the_same_timer) {
  Timer t(rt, rec.task());
  t.arm_at(at(5ms));
  const TimerId first = t.id();
  t.arm_at(at(20ms));
  EXPECT_EQ(t.id(), first) << "a later re-arm of a pending timer should reschedule it in place";
  EXPECT_EQ(t.due(), at(20ms));
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(21ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(20ms));
}

// Re-arming earlier replaces the pending due as well.
TEST_P(RuntimeTimer, re_arm_earlier_fires_at_the_earlier_due) {
  Timer t(rt, rec.task());
  t.arm_at(at(20ms));
  t.arm_at(at(3ms));
  advance_to(clock, rt, at(4ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(3ms));
  advance_to(clock, rt, at(30ms));
  EXPECT_EQ(rec.count(), 1u);
}

// After a run finished, arming arms it again (Go's Timer.Reset, Tokio's Sleep::reset), with the same task.
TEST_P(RuntimeTimer, arm_after_a_run_arms_again) {
  Timer t(rt, rec.task());
  for (int k = 1; k <= 3; ++k) {
    t.arm_at(at(k * 10ms));
    advance_to(clock, rt, at(k * 10ms + 1ms));
    EXPECT_EQ(rec.count(), static_cast<std::size_t>(k));
  }
}

// disarm prevents the pending run (true), a second disarm has nothing to prevent (false), and the Timer
// arms again afterwards.
TEST_P(RuntimeTimer, disarm_prevents_the_run_and_the_timer_arms_again) {
  Timer t(rt, rec.task());
  EXPECT_FALSE(t.disarm()) << "nothing armed";
  t.arm_after(5ms);
  EXPECT_TRUE(t.disarm());
  EXPECT_FALSE(t.disarm());
  EXPECT_FALSE(t.armed());
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(), 0u);
  t.arm_after(5ms);
  EXPECT_TRUE(t.armed());
  advance_to(clock, rt, at(16ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Arming from inside the callback (variable-delay self-rescheduling) takes effect after the run returns;
// each run sees the due the previous run chose.
TEST_P(RuntimeTimer, arm_from_its_own_callback_reschedules_with_variable_delays) {
  std::vector<chime::TimePoint> dues;
  std::mutex mu;
  Timer* self = nullptr;
  Timer t(rt, [&](const chime::Firing& f) {
    std::size_t n;
    {
      std::lock_guard<std::mutex> lock(mu);
      dues.push_back(f.due);
      n = dues.size();
    }
    if (n < 4) {
      self->arm_at(f.due + std::chrono::milliseconds(n * 2));  // 2, 4, 6 ms later
      EXPECT_TRUE(self->armed());
    }
  });
  self = &t;
  t.arm_at(at(1ms));
  for (int ms = 1; ms <= 30; ++ms) advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(dues.size(), 4u);
  EXPECT_EQ(dues[0], at(1ms));
  EXPECT_EQ(dues[1], at(3ms));
  EXPECT_EQ(dues[2], at(7ms));
  EXPECT_EQ(dues[3], at(13ms));
  EXPECT_FALSE(t.armed());
}

// An arm from inside the callback with a due already passed still waits for the run to return: runs never
// overlap (the callback checks it is alone), and it then runs at once.
TEST_P(RuntimeTimer, arm_from_callback_with_a_past_due_runs_after_the_run_returns_never_overlapping) {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> runs{0};
  Timer* self = nullptr;
  Timer t(rt, [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    if (runs.fetch_add(1) < 5) self->arm_at(at(0ms));  // due long ago: due now once applied
    std::this_thread::sleep_for(2ms);
    inside.fetch_sub(1);
  });
  self = &t;
  t.arm_at(at(1ms));
  for (int i = 0; i < 10; ++i) advance_to(clock, rt, at(2ms));
  EXPECT_EQ(runs.load(), 6);
  EXPECT_EQ(overlaps.load(), 0);
}

// arm_every runs at a fixed rate; disarm stops it; arm_after replaces a periodic with one run.
TEST_P(RuntimeTimer, arm_every_runs_periodically_and_arm_after_replaces_it) {
  Timer t(rt, rec.task());
  t.arm_every(10ms, first_at(at(10ms)));
  advance_to(clock, rt, at(11ms));
  advance_to(clock, rt, at(21ms));
  EXPECT_EQ(rec.count(), 2u);
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(t.due(), at(30ms));
  t.arm_at(at(35ms));
  advance_to(clock, rt, at(31ms));
  EXPECT_EQ(rec.count(), 2u) << "the periodic run at 30 ms ran after arm_at replaced it";
  advance_to(clock, rt, at(36ms));
  EXPECT_EQ(rec.count(), 3u);
  advance_to(clock, rt, at(80ms));
  EXPECT_EQ(rec.count(), 3u);
}

// Arming from inside a periodic callback stops the periodic and arms the new run after this one returns.
TEST_P(RuntimeTimer, arm_from_a_periodic_callback_replaces_the_period) {
  std::atomic<int> runs{0};
  Timer* self = nullptr;
  Timer t(rt, [&](const chime::Firing& f) {
    if (runs.fetch_add(1) == 0) self->arm_at(f.due + 25ms);
  });
  self = &t;
  t.arm_every(10ms, first_at(at(10ms)));
  for (int ms = 11; ms <= 34; ++ms) advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
  EXPECT_EQ(runs.load(), 1) << "the period went on after an arm from its callback";
  advance_to(clock, rt, at(36ms));
  EXPECT_EQ(runs.load(), 2);
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(runs.load(), 2);
}

// disarm_and_wait: cancelled for a pending run, done with nothing armed or after the run finished.
TEST_P(RuntimeTimer, disarm_and_wait_reports_cancelled_or_done) {
  Timer t(rt, rec.task());
  EXPECT_EQ(t.disarm_and_wait(), CancelResult::done);
  t.arm_after(5ms);
  EXPECT_EQ(t.disarm_and_wait(), CancelResult::cancelled);
  t.arm_after(5ms);
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(t.disarm_and_wait(), CancelResult::done);
  EXPECT_EQ(rec.count(), 1u);
}

// From its own callback, disarm_and_wait does not wait for itself (running).
TEST_P(RuntimeTimer, disarm_and_wait_from_its_own_callback_returns_running) {
  std::atomic<int> result{-1};
  Timer* self = nullptr;
  Timer t(rt, [&] { result.store(static_cast<int>(self->disarm_and_wait())); });
  self = &t;
  t.arm_every(5ms, first_at(at(5ms)));
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(result.load(), static_cast<int>(CancelResult::running));
  result.store(-1);
  advance_to(clock, rt, at(30ms));
  EXPECT_EQ(result.load(), -1) << "the periodic Timer ran after disarm_and_wait from its callback";
}

class RuntimeTimerRunning : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeTimerRunning, testing::Values(1u, 2u), workers_name);

// disarm_and_wait from another thread while the callback runs returns running after it returned.
TEST_P(RuntimeTimerRunning, disarm_and_wait_waits_for_the_run_in_progress) {
  Gate gate;
  Timer t(rt, gate.blocker());
  t.arm_at(at(1ms));
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  EXPECT_EQ(t.disarm_and_wait(), CancelResult::running);
  EXPECT_TRUE(gate.returned.load());
  releaser.join();
  flusher.join();
}

// The destructor waits for a run in progress, and the task (and what it captured) is destroyed when it
// returns.
TEST_P(RuntimeTimerRunning, destructor_waits_for_the_run_and_destroys_the_task) {
  Gate gate;
  auto alive = std::make_shared<int>(1);
  std::weak_ptr<int> watch = alive;
  std::optional<Timer> t;
  t.emplace(rt, [&gate, a = std::move(alive)] { gate.block(); });
  t->arm_at(at(1ms));
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  t.reset();
  EXPECT_TRUE(gate.returned.load()) << "~Timer returned while its callback was running";
  EXPECT_TRUE(watch.expired()) << "~Timer returned and its task was not destroyed";
  releaser.join();
  flusher.join();
}

// An arm from another thread while the callback runs is deferred until the run returns: the task never
// runs concurrently with itself, and the arm is not lost.
TEST_P(RuntimeTimerRunning, arm_while_a_run_is_in_progress_takes_effect_after_it) {
  Gate gate;
  std::atomic<int> runs{0};
  Timer t(rt, [&] {
    if (runs.fetch_add(1) == 0) gate.block();
  });
  t.arm_at(at(1ms));
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  t.arm_at(at(1ms));  // due now, but a run is in progress
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(t.due(), at(1ms));
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(runs.load(), 1) << "the task ran concurrently with itself";
  gate.release();
  flusher.join();
  rt.flush();
  EXPECT_EQ(runs.load(), 2);
}

// An empty Timer throws std::logic_error when armed; a moved-from Timer is empty; moving keeps it working.
TEST(RuntimeTimer, empty_timer_arm_throws_and_move_transfers) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  Timer empty;
  EXPECT_FALSE(empty);
  EXPECT_THROW(empty.arm_after(1ms), std::logic_error);
  EXPECT_THROW(empty.arm_every(1ms), std::logic_error);
  EXPECT_FALSE(empty.armed());
  EXPECT_EQ(empty.disarm_and_wait(), CancelResult::done);
  Timer a(rt, rec.task());
  a.arm_at(at(5ms));
  Timer b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_THROW(a.arm_at(at(1ms)), std::logic_error);
  EXPECT_TRUE(b.armed());
  Timer c(rt, rec.task(7));
  c.arm_at(at(5ms));
  c = std::move(b);  // c's own timer is disarmed first
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(rec.count(0), 1u);
  EXPECT_EQ(rec.count(7), 0u);
}

// Bad arguments throw naming the values and leave the Timer as it was; after shutdown, StoppedError.
TEST(RuntimeTimer, bad_arms_throw_and_arm_after_shutdown_is_stopped) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  Timer t(rt, rec.task());
  EXPECT_THROW(t.arm_every(0ms), std::invalid_argument);
  EXPECT_THROW(t.arm_at(chime::TimePoint::max()), std::out_of_range);
  t.arm_at(at(5ms));
  EXPECT_THROW(t.arm_at(chime::TimePoint::max()), std::out_of_range);
  EXPECT_EQ(t.due(), at(5ms)) << "a refused re-arm changed the pending due";
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 1u);
  EXPECT_FALSE(t.armed());
  EXPECT_THROW(t.arm_after(1ms), chime::StoppedError);
}

// A re-arm that throws leaves the Timer exactly as it was: a periodic
// Timer re-armed to a due beyond the range, or with arm_every's first due
// beyond it, keeps its period and its runs; a one-shot keeps its due.
TEST(RuntimeTimer, a_re_arm_beyond_the_range_leaves_the_timer_armed_as_it_was) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  Timer periodic(rt, rec.task(1));
  periodic.arm_every(10ms, first_at(at(10ms)));
  EXPECT_THROW(periodic.arm_at(chime::TimePoint::max()), std::out_of_range);
  EXPECT_THROW(periodic.arm_every(5ms, first_at(chime::TimePoint::max())), std::out_of_range);
  EXPECT_TRUE(periodic.armed());
  EXPECT_EQ(periodic.due(), at(10ms));
  Timer one_shot(rt, rec.task(2));
  one_shot.arm_at(at(5ms));
  EXPECT_THROW(one_shot.arm_every(5ms, first_at(chime::TimePoint::max())), std::out_of_range);
  EXPECT_EQ(one_shot.due(), at(5ms));
  for (int ms = 11; ms <= 31; ms += 10) {
    advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
    rt.flush();
  }
  EXPECT_EQ(rec.count(1), 3u) << "the periodic Timer lost runs to a refused re-arm";
  EXPECT_EQ(rec.count(2), 1u) << "the one-shot lost its run to a refused re-arm";
  EXPECT_TRUE(periodic.armed());
}

// At the queue's bound, a re-arm that needs a new timer (one-shot to
// periodic, or back) is refused with CapacityError and leaves the Timer
// armed as it was; once the queue drains, each pending run happens once.
TEST(RuntimeTimer, a_re_arm_refused_at_the_queue_bound_leaves_the_timer_armed_as_it_was) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 0);  // callbacks on the wheel thread: the gate holds it
  o.max_queue_depth = 1024;
  o.shards = 1;
  chime::Runtime rt{o};
  Timer one_shot(rt, rec.task(1));
  one_shot.arm_at(at(5ms));
  Timer periodic(rt, rec.task(2));
  periodic.arm_every(10ms, first_at(at(10ms)));
  Gate gate;
  rt.schedule_after(chime::Duration::zero(), gate.blocker());
  // On a manual clock timers run only inside flush: this flush runs the
  // blocker on the wheel thread, and returns once it is released.
  std::jthread flusher([&rt] { rt.flush(); });
  gate.wait_started();
  bool full = false;
  for (int i = 0; i < 4096 && !full; ++i) {
    try {
      rt.schedule_at(at(1h), [] {});
    } catch (const chime::CapacityError&) {
      full = true;
    }
  }
  ASSERT_TRUE(full);
  EXPECT_THROW(one_shot.arm_every(1ms), chime::CapacityError);
  EXPECT_THROW(periodic.arm_after(1ms), chime::CapacityError);
  EXPECT_EQ(one_shot.due(), at(5ms));
  EXPECT_EQ(periodic.due(), at(10ms));
  EXPECT_TRUE(one_shot.armed());
  EXPECT_TRUE(periodic.armed());
  gate.release();
  flusher.join();
  for (int ms = 11; ms <= 21; ms += 10) {
    advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
    rt.flush();
  }
  EXPECT_EQ(rec.count(1), 1u);
  EXPECT_EQ(rec.count(2), 2u);
}

// A re-arm that replaces a pending run is accepted at max_pending: the new
// run takes the place of the one it replaces.
TEST(RuntimeTimer, a_re_arm_at_max_pending_replaces_the_pending_run) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.max_pending = 1;
  chime::Runtime rt{o};
  Timer t(rt, rec.task());
  t.arm_at(at(5ms));
  EXPECT_THROW(rt.schedule_at(at(1ms), [] {}), chime::CapacityError);
  t.arm_every(10ms, first_at(at(10ms)));  // one-shot to periodic: a new timer
  t.arm_at(at(3ms));                      // and back
  EXPECT_EQ(t.due(), at(3ms));
  advance_to(clock, rt, at(30ms));
  rt.flush();
  EXPECT_EQ(rec.count(), 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// shutdown(fire_pending) fires an armed Timer's pending run, like any pending timer.
TEST(RuntimeTimer, shutdown_fire_pending_fires_an_armed_timer) {
  chime_test::Recorder rec;
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  Timer t(rt, rec.task());
  t.arm_after(1h);
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::fire_pending), 0u);
  EXPECT_EQ(rec.count(), 1u);
}

}  // namespace
