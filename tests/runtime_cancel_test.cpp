// SPDX-License-Identifier: BSL-1.0
// chime::Runtime::cancel (runtime.hpp): returns true iff
// it won (the callback has not started and never will); false for a timer that
// fired, started, was cancelled, the default id, an id never issued, or a
// stale id whose slot was reused, and a stale id never touches the slot's new
// timer. A cancel is never lost because its schedule has not been applied.
// Deterministic: ManualClock + flush(), with 0, 1 and 2 workers.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::TimerId;
using chime::TimerState;

class RuntimeCancel : public ManualRuntimeTest {
 protected:
  // Files a timer (tag 9) at `due` and flushes. While it is the earliest
  // alarm, a schedule due at or after its interval does not wake the wheel
  // thread (a ManualClock runtime applies it at the next flush), so a cancel
  // right after such a schedule always lands before the ADD is filed: the
  // ADD is a no-op and the slot is free after the flush. (A cancel after
  // the ADD is filed leaves a zombie that is reclaimed when its due comes
  // up; docs/state-machine.md, "Lazy reclaim".)
  void file_keeper(chime::TimePoint due) {
    rt.schedule_at(due, rec.task(9));
    rt.flush();
  }
  // Schedules and cancels timers (one alive at a time) until one reuses the slot of `old`; returns it.
  TimerId schedule_until_slot_reused(TimerId old, chime::Task (*make)(Recorder&), chime::TimePoint due) {
    for (int i = 0; i < 10'000; ++i) {
      const TimerId id = rt.schedule_at(due, make(rec));
      if (id.slot() == old.slot()) return id;
      EXPECT_TRUE(rt.cancel(id));
      rt.flush();
    }
    ADD_FAILURE() << "slot " << old.slot() << " was not reused in 10,000 schedule/cancel/flush cycles "
                  << "with one timer alive: slots are not recycled";
    return TimerId{};
  }
};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeCancel, testing::Values(0u, 1u, 2u), workers_name);

chime::Task tag7(Recorder& rec) { return rec.task(7); }

// A cancel before the due time returns true and the callback never runs.
TEST_P(RuntimeCancel, cancel_before_fire_suppresses_callback) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  rt.flush();
  advance_to(clock, rt, at(5ms));
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
}

// A cancel posted right after schedule, before any flush applied the schedule, still wins.
TEST_P(RuntimeCancel, cancel_before_schedule_is_applied_is_not_lost) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 500; ++i) {
    const TimerId id = rt.schedule_at(at(1ms), rec.task(i));
    EXPECT_TRUE(rt.cancel(id));
  }
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(rec.count(), 0u);
}

// A cancel of a timer whose due time is already past, before the flush that would fire it, wins.
TEST_P(RuntimeCancel, cancel_of_due_but_undispatched_timer_wins) {
  const TimerId id = rt.schedule_at(at(1ms), rec.task());
  rt.flush();
  clock.set(at(100ms));  // due, but the wheel has not advanced yet
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_EQ(rec.count(), 0u);
}

// A cancel after the timer fired returns false and the state stays fired.
TEST_P(RuntimeCancel, cancel_after_fire_returns_false) {
  const TimerId id = rt.schedule_at(at(1ms), rec.task());
  advance_to(clock, rt, at(2ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_FALSE(rt.cancel(id));
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// The second cancel of a timer returns false.
TEST_P(RuntimeCancel, cancel_twice_second_returns_false) {
  const TimerId id = rt.schedule_at(at(10ms), rec.task());
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_FALSE(rt.cancel(id));
  rt.flush();
  EXPECT_FALSE(rt.cancel(id));
  advance_to(clock, rt, at(20ms));
  EXPECT_EQ(rec.count(), 0u);
}

// The default TimerId and ids never issued cancel nothing and return false.
TEST_P(RuntimeCancel, cancel_of_default_or_never_issued_id_returns_false) {
  const TimerId live = rt.schedule_at(at(10ms), rec.task());
  EXPECT_FALSE(rt.cancel(TimerId{}));
  EXPECT_FALSE(rt.cancel(TimerId{live.slot(), live.generation() + 1}));
  EXPECT_FALSE(rt.cancel(TimerId{1'000'000, 3}));
  EXPECT_FALSE(rt.cancel(TimerId{0xFFFFFFFFu, 0xFFFFFFFFu}));
  EXPECT_EQ(rt.state(live), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 1u);
}

// Cancelling one timer leaves the others of the same interval alone.
TEST_P(RuntimeCancel, cancel_removes_only_its_timer) {
  std::vector<TimerId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(rt.schedule_at(at(3ms), rec.task(i)));
  rt.flush();
  EXPECT_TRUE(rt.cancel(ids[4]));
  EXPECT_TRUE(rt.cancel(ids[7]));
  advance_to(clock, rt, at(4ms));
  EXPECT_EQ(rec.count(), 8u);
  EXPECT_EQ(rec.count(4), 0u);
  EXPECT_EQ(rec.count(7), 0u);
}

// A stale id (its timer cancelled, its slot reused) never cancels the slot's new timer.
TEST_P(RuntimeCancel, stale_id_after_slot_reuse_never_cancels_new_timer) {
  file_keeper(at(5ms));
  const TimerId old = rt.schedule_at(at(1s), rec.task(1));
  ASSERT_TRUE(rt.cancel(old));
  rt.flush();
  const TimerId reuser = schedule_until_slot_reused(old, tag7, at(10ms));
  ASSERT_TRUE(reuser);
  EXPECT_NE(reuser.generation(), old.generation());
  EXPECT_FALSE(reuser == old);
  EXPECT_EQ(rt.state(old), TimerState::unknown);
  EXPECT_FALSE(rt.cancel(old));
  EXPECT_FALSE(rt.reschedule_at(old, at(500ms)));
  EXPECT_EQ(rt.state(reuser), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(7), 1u) << "the new timer in the reused slot did not fire";
  EXPECT_EQ(rec.count(1), 0u);
}

// A stale id of a timer that fired never cancels the timer that reused its slot.
TEST_P(RuntimeCancel, stale_id_after_fire_and_reuse_never_cancels_new_timer) {
  file_keeper(at(5ms));
  const TimerId old = rt.schedule_at(at(1ms), rec.task(1));
  advance_to(clock, rt, at(2ms));
  ASSERT_EQ(rec.count(1), 1u);
  const TimerId reuser = schedule_until_slot_reused(old, tag7, at(10ms));
  ASSERT_TRUE(reuser);
  EXPECT_FALSE(rt.cancel(old));
  EXPECT_EQ(rt.state(reuser), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(7), 1u);
}

// A one-shot cancelling itself from inside its callback loses: it has started.
TEST_P(RuntimeCancel, cancel_from_inside_own_callback_returns_false) {
  std::atomic<int> result{-1};
  rt.schedule_at(at(1ms), [&](const Firing& f) { result.store(rt.cancel(f.id) ? 1 : 0); });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(result.load(), 0);
}

// While a callback runs, cancel from another thread returns false and state() is running.
TEST_P(RuntimeCancel, cancel_while_running_returns_false) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  const TimerId id = rt.schedule_at(at(1ms), [&] {
    started.store(true);
    while (!release.load()) std::this_thread::yield();
  });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!started.load()) std::this_thread::yield();
  EXPECT_EQ(rt.state(id), TimerState::running);
  EXPECT_FALSE(rt.cancel(id));
  release.store(true);
  flusher.join();
  EXPECT_EQ(rt.state(id), TimerState::fired);
}

// Only successful cancels are counted in stats().cancelled.
TEST_P(RuntimeCancel, stats_count_only_successful_cancels) {
  const TimerId a = rt.schedule_at(at(10ms), rec.task());
  const TimerId b = rt.schedule_at(at(1ms), rec.task());
  advance_to(clock, rt, at(2ms));
  EXPECT_TRUE(rt.cancel(a));
  EXPECT_FALSE(rt.cancel(a));
  EXPECT_FALSE(rt.cancel(b));
  EXPECT_FALSE(rt.cancel(TimerId{}));
  rt.flush();
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.fired, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// True once `p` is the only owner left, waiting up to 2 s (a worker may destroy the Task just after it returns).
bool released_soon(const std::shared_ptr<int>& p) {
  const auto give_up = std::chrono::steady_clock::now() + 2s;
  while (p.use_count() != 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  return p.use_count() == 1;
}

// A cancelled timer's Task (and what it captured) is destroyed once the cancel is applied, not kept until slot reuse.
// The canceller destroys the Task before cancel returns, although the wheel
// reclaims the filed timer's slot only later (a zombie).
TEST_P(RuntimeCancel, cancelled_task_is_released) {
  auto resource = std::make_shared<int>(1);
  const TimerId id = rt.schedule_at(at(10ms), [resource] { (void)resource; });
  EXPECT_EQ(resource.use_count(), 2);
  rt.flush();  // filed: the cancel leaves a zombie
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_EQ(resource.use_count(), 1) << "the cancelled timer still holds its callback's captures when cancel returned";
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(resource.use_count(), 1);
}

// A timer cancelled before the wheel filed it releases its Task when cancel returns; its ADD is then a no-op.
TEST_P(RuntimeCancel, task_cancelled_before_it_was_filed_is_released_when_cancel_returns) {
  file_keeper(at(5ms));
  auto resource = std::make_shared<int>(1);
  const TimerId id = rt.schedule_at(at(10ms), [resource] { (void)resource; });
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_EQ(resource.use_count(), 1) << "the cancelled timer still holds its callback's captures";
  rt.flush();
  EXPECT_TRUE(released_soon(resource));
}

// A fired one-shot's Task (and what it captured) is destroyed after its run, not kept until slot reuse.
TEST_P(RuntimeCancel, fired_task_is_released) {
  auto resource = std::make_shared<int>(1);
  rt.schedule_at(at(1ms), [resource] { (void)resource; });
  advance_to(clock, rt, at(2ms));
  EXPECT_TRUE(released_soon(resource)) << "the fired timer still holds its callback's captures";
}

}  // namespace
