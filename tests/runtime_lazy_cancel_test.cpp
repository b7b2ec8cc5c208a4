// SPDX-License-Identifier: BSL-1.0
// The hand-off and lazy-reclaim rules of the runtime (runtime.hpp,
// docs/state-machine.md): a cancel posts no command and the wheel thread
// reclaims cancelled timers lazily (when their due comes up, or in one
// sweep once they exceed a quarter of the filed timers); cancel wins until
// the callback starts, even after the run was handed over; timers already
// due when their commands are applied go out in due order, ties in posting
// order. Deterministic: ManualClock + flush().

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace chime_test;
using chime::ManualClock;
using chime::Runtime;
using chime::TimerId;
using chime::TimerState;

// With workers = 0 the wheel thread runs the batch itself; with workers = 1
// the only worker takes the whole batch. Either way the blocker runs first and
// the timer behind it in the same batch is handed over but not started.
class RuntimeLazyCancelHanded : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeLazyCancelHanded, testing::Values(0u, 1u), workers_name);

// Cancel wins until the callback starts: a periodic run already handed to a
// busy worker is skipped when cancel returns true (Go's timer tests: a game
// that frees an entity after cancel returned true must not see its run).
TEST_P(RuntimeLazyCancelHanded, cancel_of_a_periodic_run_handed_over_but_not_started_skips_it) {
  Gate gate;
  rt.schedule_at(at(1ms), gate.blocker());
  const TimerId periodic = rt.schedule_every(10ms, rec.task(1), first_at(at(5ms)));
  clock.set(at(6ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();  // the blocker and the periodic run were claimed in the same pass
  EXPECT_EQ(rt.state(periodic), TimerState::pending) << "a run handed over but not started reads pending";
  EXPECT_TRUE(rt.cancel(periodic));
  EXPECT_EQ(rt.state(periodic), TimerState::cancelled);
  EXPECT_FALSE(rt.cancel(periodic)) << "a second cancel of the same timer returns false";
  gate.release();
  flusher.join();
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(rec.count(1), 0u) << "the periodic callback ran after cancel returned true";
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_EQ(rt.stats().cancelled, 1u);
}

// The same for a one-shot timer: its cancel returns true and it never runs.
TEST_P(RuntimeLazyCancelHanded, cancel_of_a_one_shot_run_handed_over_but_not_started_skips_it) {
  Gate gate;
  rt.schedule_at(at(1ms), gate.blocker());
  const TimerId one_shot = rt.schedule_at(at(5ms), rec.task(2));
  clock.set(at(6ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_TRUE(rt.cancel(one_shot));
  gate.release();
  flusher.join();
  EXPECT_EQ(rec.count(2), 0u) << "the one-shot callback ran after cancel returned true";
  EXPECT_EQ(rt.state(one_shot), TimerState::cancelled);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 1u) << "only the blocker ran";
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// A run that started cannot be cancelled: cancel of a one-shot returns false
// once its callback runs (the other side of the same race).
TEST_P(RuntimeLazyCancelHanded, cancel_of_a_started_one_shot_returns_false) {
  Gate gate;
  const TimerId id = rt.schedule_at(at(1ms), gate.blocker());
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  gate.wait_started();
  EXPECT_EQ(rt.state(id), TimerState::running);
  EXPECT_FALSE(rt.cancel(id));
  gate.release();
  flusher.join();
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

class RuntimeLazyCancel : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeLazyCancel, testing::Values(0u, 2u), workers_name);

// A successful cancel is one CAS and nothing else: it posts no command (the
// queue stays empty; before, each cancel queued a REMOVE) and frees
// capacity at once.
TEST_P(RuntimeLazyCancel, cancel_posts_no_command) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(rt.schedule_at(at(10s), rec.task()));
  rt.flush();
  ASSERT_EQ(rt.stats().queue_depth, 0u);
  for (const TimerId& id : ids) EXPECT_TRUE(rt.cancel(id));
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.queue_depth, 0u) << "a cancel posted a command";
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.cancelled, 100u);
  advance_to(clock, rt, at(11s));
  EXPECT_EQ(rec.count(), 0u) << "a cancelled timer ran when its zombie came up";
  EXPECT_EQ(rt.stats().zombie_sweeps, 0u) << "100 zombies are below the sweep threshold";
}

// A cancel that lands before the wheel filed the ADD makes the ADD a no-op:
// the timer never runs and its slot is free again at once (its canceller
// frees it: the filed bit was clear), so the next schedule takes it.
TEST_P(RuntimeLazyCancel, cancel_before_the_add_is_filed_makes_the_add_a_no_op) {
  // A filed alarm at 3 ms: a schedule due later does not wake the wheel
  // (ManualClock), so the cancel below lands before its ADD is applied.
  rt.schedule_at(at(3ms), rec.task(9));
  rt.flush();
  const TimerId id = rt.schedule_at(at(5ms), rec.task());
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  const TimerId next = rt.schedule_at(at(5ms), rec.task(1));
  EXPECT_EQ(next.slot(), id.slot()) << "the cancelled timer's slot was not freed by its cancel";
  EXPECT_EQ(rt.state(id), TimerState::unknown) << "an id whose slot was reused reads unknown";
  // Two advances: with 2 workers, runs handed over in one pass may run side by side in any order.
  advance_to(clock, rt, at(4ms));
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.tags(), (std::vector<int>{9, 1})) << "the filed timer and the slot's new timer each ran once";
}

// Zombies (cancelled timers still filed) are reclaimed in one sweep once they
// exceed a quarter of the filed timers (and 1,024), and not before.
TEST_P(RuntimeLazyCancel, zombies_over_a_quarter_of_the_filed_timers_are_swept_at_once) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 8'000; ++i) ids.push_back(rt.schedule_at(at(10s), rec.task(i)));
  rt.flush();
  for (int i = 0; i < 1'500; ++i) EXPECT_TRUE(rt.cancel(ids[i]));  // 1,500 < 8,000 / 4
  rt.flush();
  EXPECT_EQ(rt.stats().zombie_sweeps, 0u) << "swept although zombies were under a quarter of the filed timers";
  for (int i = 1'500; i < 2'500; ++i) EXPECT_TRUE(rt.cancel(ids[i]));  // 2,500 > 8,000 / 4
  rt.flush();
  EXPECT_EQ(rt.stats().zombie_sweeps, 1u) << "2,500 zombies of 8,000 filed timers were not swept";
  for (int i = 0; i < 2'500; ++i) EXPECT_EQ(rt.state(ids[i]), TimerState::cancelled);
  advance_to(clock, rt, at(11s));
  EXPECT_EQ(rec.count(), 5'500u);
  for (const RunRecord& r : rec.runs()) EXPECT_GE(r.tag, 2'500) << "a cancelled timer ran";
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.fired, 5'500u);
  EXPECT_EQ(s.cancelled, 2'500u);
}

}  // namespace
