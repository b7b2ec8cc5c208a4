// SPDX-License-Identifier: BSL-1.0
// Safe teardown (runtime.hpp: try_cancel, cancel_and_wait, state; design
// "Safe teardown"): every result of try_cancel and cancel_and_wait, state()
// while a run is in progress, and ids bound to their runtime.
// Deterministic: ManualClock + flush(), and Gates that hold a callback.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::CancelResult;
using chime::ManualClock;
using chime::Runtime;
using chime::TimerId;
using chime::TimerState;

class RuntimeCancelResults : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeCancelResults, testing::Values(0u, 1u, 2u), workers_name);

// A pending timer: try_cancel wins (cancelled), and a second try reports done.
TEST_P(RuntimeCancelResults, try_cancel_of_a_pending_timer_is_cancelled_then_done) {
  const TimerId id = rt.schedule_at(at(5ms), rec.task());
  EXPECT_EQ(rt.try_cancel(id), CancelResult::cancelled);
  EXPECT_EQ(rt.try_cancel(id), CancelResult::done);
  EXPECT_FALSE(rt.cancel(id));
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(), 0u);
}

// A timer that fired and returned: done; cancel_and_wait does not wait.
TEST_P(RuntimeCancelResults, try_cancel_of_a_fired_timer_is_done) {
  const TimerId id = rt.schedule_at(at(1ms), rec.task());
  advance_to(clock, rt, at(2ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rt.try_cancel(id), CancelResult::done);
  EXPECT_EQ(rt.cancel_and_wait(id), CancelResult::done);
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// The default id and ids never issued (a slot never used, a generation the slot has not reached yet) are
// unknown.
TEST_P(RuntimeCancelResults, default_and_unissued_ids_are_unknown) {
  EXPECT_EQ(rt.try_cancel(TimerId{}), CancelResult::unknown);
  EXPECT_EQ(rt.cancel_and_wait(TimerId{}), CancelResult::unknown);
  const TimerId id = rt.schedule_at(at(1ms), rec.task());
  EXPECT_EQ(rt.try_cancel(TimerId(id.slot() + 1000, 1, id.runtime())), CancelResult::unknown);
  const TimerId newer(id.slot(), id.generation() + 1, id.runtime());
  EXPECT_EQ(rt.try_cancel(newer), CancelResult::unknown);
  EXPECT_EQ(rt.cancel_and_wait(newer), CancelResult::unknown);
  EXPECT_EQ(rt.state(id), TimerState::pending) << "a never-issued id of its slot changes nothing";
}

// An id this runtime issued whose slot has since been reused (an older generation) is finished: try_cancel
// and cancel_and_wait say done, not unknown (a harness can tell "fired long ago" from "never mine"); cancel
// is false, state() unknown, and the slot's new timer is untouched.
TEST_P(RuntimeCancelResults, a_finished_id_whose_slot_was_reused_is_done) {
  const TimerId id = rt.schedule_at(at(1ms), rec.task());
  ASSERT_TRUE(rt.cancel(id));
  advance_to(clock, rt, at(3ms));  // its alarm comes up: the zombie is reclaimed
  TimerId reused;
  for (int i = 0; i < 64 && !(reused && reused.slot() == id.slot()); ++i) reused = rt.schedule_at(at(9ms), rec.task());
  ASSERT_EQ(reused.slot(), id.slot()) << "the freed slot was not reused (LIFO free list)";
  EXPECT_EQ(rt.try_cancel(id), CancelResult::done);
  EXPECT_EQ(rt.cancel_and_wait(id), CancelResult::done);
  EXPECT_FALSE(rt.cancel(id));
  EXPECT_EQ(rt.state(id), TimerState::unknown);
  EXPECT_EQ(rt.state(reused), TimerState::pending);
  // A fired one, once its slot is reused, too.
  const TimerId fired = rt.schedule_at(at(4ms), rec.task());
  advance_to(clock, rt, at(5ms));
  TimerId again;
  for (int i = 0; i < 64 && !(again && again.slot() == fired.slot()); ++i) again = rt.schedule_at(at(9ms), rec.task());
  ASSERT_EQ(again.slot(), fired.slot());
  EXPECT_EQ(rt.try_cancel(fired), CancelResult::done);
  EXPECT_EQ(rt.state(again), TimerState::pending);
  // Another runtime's id with the same slot and an older generation stays unknown.
  EXPECT_EQ(rt.try_cancel(TimerId(id.slot(), id.generation(), id.runtime() + 1000)), CancelResult::unknown);
}

class RuntimeCancelResultsRunning : public ManualRuntimeTest {};
// A worker runs the callback while the test thread looks at it.
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeCancelResultsRunning, testing::Values(1u, 2u), workers_name);

// A one-shot whose callback is running: try_cancel says running (cancel: false), state() running; once it
// returned, done and fired.
TEST_P(RuntimeCancelResultsRunning, one_shot_in_progress_is_running_then_done) {
  Gate gate;
  const TimerId id = rt.schedule_at(at(1ms), gate.blocker());
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_EQ(rt.state(id), TimerState::running);
  EXPECT_EQ(rt.try_cancel(id), CancelResult::running);
  EXPECT_FALSE(rt.cancel(id)) << "a one-shot that started cannot be cancelled";
  gate.release();
  flusher.join();
  EXPECT_EQ(rt.try_cancel(id), CancelResult::done);
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// A periodic timer whose run is in progress: the first cancel stops its later runs (cancel true, try_cancel
// running); while the run lasts state() is running and a second cancel returns false; then cancelled.
TEST_P(RuntimeCancelResultsRunning, periodic_in_progress_cancel_stops_later_runs_and_state_stays_running) {
  Gate gate;
  std::atomic<int> runs{0};
  const TimerId id = rt.schedule_every(
      5ms,
      [&] {
        runs.fetch_add(1);
        gate.block();
      },
      first_at(at(5ms)));
  rt.flush();
  clock.set(at(6ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_EQ(rt.try_cancel(id), CancelResult::running) << "the first cancel of a running periodic stops it";
  EXPECT_EQ(rt.state(id), TimerState::running) << "cancelled, but its run is in progress";
  EXPECT_FALSE(rt.cancel(id)) << "a second cancel of the same timer returns false";
  EXPECT_EQ(rt.try_cancel(id), CancelResult::running);
  gate.release();
  flusher.join();
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  EXPECT_EQ(rt.try_cancel(id), CancelResult::done);
  advance_to(clock, rt, at(50ms));
  EXPECT_EQ(runs.load(), 1) << "a periodic timer cancelled during its run ran again";
}

// cancel(bool) on a running periodic: true iff this very call stopped its later runs.
TEST_P(RuntimeCancelResultsRunning, cancel_of_a_running_periodic_is_true_once) {
  Gate gate;
  const TimerId id = rt.schedule_every(5ms, gate.blocker(), first_at(at(5ms)));
  rt.flush();
  clock.set(at(6ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_FALSE(rt.cancel(id));
  gate.release();
  flusher.join();
  EXPECT_EQ(rt.stats().pending, 0u);
}

// cancel_and_wait of a running one-shot returns running only after the callback returned.
TEST_P(RuntimeCancelResultsRunning, cancel_and_wait_returns_after_the_run_returned) {
  Gate gate;
  const TimerId id = rt.schedule_at(at(1ms), gate.blocker());
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    gate.release();
  });
  EXPECT_EQ(rt.cancel_and_wait(id), CancelResult::running);
  EXPECT_TRUE(gate.returned.load()) << "cancel_and_wait returned while the callback was still running";
  releaser.join();
  flusher.join();
}

// cancel_and_wait of a running periodic stops it and waits for the run in progress.
TEST_P(RuntimeCancelResultsRunning, cancel_and_wait_of_a_running_periodic_stops_it_and_waits) {
  Gate gate;
  const TimerId id = rt.schedule_every(5ms, gate.blocker(), first_at(at(5ms)));
  rt.flush();
  clock.set(at(6ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    gate.release();
  });
  EXPECT_EQ(rt.cancel_and_wait(id), CancelResult::running);
  EXPECT_TRUE(gate.returned.load());
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  releaser.join();
  flusher.join();
}

// Two threads waiting for the same run both return after it.
TEST_P(RuntimeCancelResultsRunning, several_waiters_all_wake) {
  Gate gate;
  const TimerId id = rt.schedule_at(at(1ms), gate.blocker());
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  std::atomic<int> woke_after_return{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      EXPECT_EQ(rt.cancel_and_wait(id), CancelResult::running);
      if (gate.returned.load()) woke_after_return.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(30ms);
  gate.release();
  for (auto& t : waiters) t.join();
  flusher.join();
  EXPECT_EQ(woke_after_return.load(), 3);
}

// From the timer's own callback, cancel_and_wait does not wait for itself: it returns running at once
// (one-shot and periodic; the periodic runs no more).
TEST_P(RuntimeCancelResults, cancel_and_wait_from_its_own_callback_returns_running_without_waiting) {
  std::vector<CancelResult> seen;
  std::mutex mu;
  auto task = [&](const chime::Firing& f) {
    const CancelResult r = rt.cancel_and_wait(f.id);
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(r);
  };
  rt.schedule_at(at(1ms), task);
  const TimerId periodic = rt.schedule_every(2ms, task, first_at(at(1ms)));
  advance_to(clock, rt, at(2ms));
  advance_to(clock, rt, at(20ms));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 2u) << "the periodic timer ran again after cancel_and_wait from its callback";
  EXPECT_EQ(seen[0], CancelResult::running);
  EXPECT_EQ(seen[1], CancelResult::running);
  EXPECT_EQ(rt.state(periodic), TimerState::cancelled);
}

// A run handed over but not started counts as not started: try_cancel wins it (cancelled) and it never runs.
class RuntimeCancelResultsHanded : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeCancelResultsHanded, testing::Values(0u, 1u), workers_name);
TEST_P(RuntimeCancelResultsHanded, try_cancel_of_a_run_handed_over_but_not_started_is_cancelled) {
  Gate gate;
  rt.schedule_at(at(1ms), gate.blocker());
  const TimerId behind = rt.schedule_at(at(1ms) + 500us, rec.task(1));
  rt.flush();
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_EQ(rt.state(behind), TimerState::pending) << "handed over, not started: still pending";
  EXPECT_EQ(rt.try_cancel(behind), CancelResult::cancelled);
  gate.release();
  flusher.join();
  EXPECT_EQ(rec.count(1), 0u);
  EXPECT_EQ(rt.state(behind), TimerState::cancelled);
}

// Ids are bound to their runtime: two runtimes with identical slot histories issue ids with the same slot
// and generation; each treats the other's as unknown and never touches its own timer through it.
TEST(RuntimeCancelResults, an_id_from_another_runtime_is_unknown_everywhere) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime a{manual_options(clock, 1)};
  Runtime b{manual_options(clock, 1)};
  const TimerId ida = a.schedule_at(at(5ms), rec.task(1));
  const TimerId idb = b.schedule_at(at(5ms), rec.task(2));
  ASSERT_EQ(ida.slot(), idb.slot());
  ASSERT_EQ(ida.generation(), idb.generation());
  EXPECT_NE(ida.runtime(), idb.runtime());
  EXPECT_FALSE(ida == idb);
  EXPECT_FALSE(a.cancel(idb));
  EXPECT_EQ(a.try_cancel(idb), CancelResult::unknown);
  EXPECT_EQ(a.cancel_and_wait(idb), CancelResult::unknown);
  EXPECT_FALSE(a.reschedule_at(idb, at(1ms)));
  EXPECT_EQ(a.state(idb), TimerState::unknown);
  EXPECT_EQ(a.state(TimerId(ida.slot(), ida.generation(), 0)), TimerState::unknown) << "tag 0 is no runtime's";
  chime::Producer p = a.producer();
  EXPECT_FALSE(p.cancel(idb));
  EXPECT_EQ(p.try_cancel(idb), CancelResult::unknown);
  EXPECT_EQ(a.state(ida), TimerState::pending);
  EXPECT_EQ(b.state(idb), TimerState::pending);
  advance_to(clock, a, at(6ms));
  advance_to(clock, b, at(6ms));
  EXPECT_EQ(rec.count(1), 1u);
  EXPECT_EQ(rec.count(2), 1u);
}

}  // namespace
