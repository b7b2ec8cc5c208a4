// SPDX-License-Identifier: BSL-1.0
// chime::Lane (include/chime/lane.hpp; design.md, "Lanes"): runs go to the
// thread that runs the lane, appear on ready_fd only once the wheel has
// advanced to them, run in due order, lose every race to a cancel until they
// start, and are covered by flush, shutdown, stats and on_error. ManualClock
// throughout, so every step is deterministic.
#include <chime/lane.hpp>
#include <chime/timer.hpp>

#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <stdexcept>

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;

// True iff `fd` is readable now.
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

class RuntimeLane : public ::testing::TestWithParam<unsigned> {
 protected:
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, GetParam())};
};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeLane, ::testing::Values(0u, 2u),
                         [](const auto& info) { return "workers" + std::to_string(info.param); });

TEST_P(RuntimeLane, runs_appear_on_ready_fd_only_once_the_wheel_reaches_them_and_run_on_the_lane_thread) {
  chime::Lane lane = rt.lane();
  std::vector<std::thread::id> ran_on;
  lane.schedule_at(at(5ms), [&] { ran_on.push_back(std::this_thread::get_id()); });
  rt.flush();
  EXPECT_FALSE(readable(lane.ready_fd())) << "nothing is due yet";
  EXPECT_EQ(lane.run_ready(), 0u);
  clock.set(at(6ms));
  EXPECT_FALSE(readable(lane.ready_fd())) << "the wheel has not advanced yet: the clock alone readies nothing";
  // A flush from another thread waits for the lane's thread to run the run.
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  EXPECT_TRUE(ran_on.empty()) << "a ready run waits for the lane's thread";
  EXPECT_EQ(lane.run_ready(), 1u);
  flusher.join();
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on[0], std::this_thread::get_id());
  EXPECT_FALSE(readable(lane.ready_fd())) << "run_ready consumed the signal";
  EXPECT_EQ(lane.run_ready(), 0u);
}

TEST_P(RuntimeLane, a_flush_on_the_lane_thread_runs_the_lanes_runs_itself) {
  chime::Lane lane = rt.lane();
  int runs = 0;
  lane.run_ready();  // makes this thread the lane's thread
  lane.schedule_at(at(1ms), [&] { ++runs; });
  lane.schedule_after(0ns, [&] { ++runs; });  // due now at its application
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(runs, 2) << "flush returned before the lane's runs ran";
  EXPECT_EQ(rt.stats().fired, 2u);
}

TEST_P(RuntimeLane, runs_go_in_due_order_within_and_across_advances) {
  chime::Lane lane = rt.lane();
  lane.run_ready();
  std::vector<int> order;
  const int dues[] = {7, 3, 9, 1, 5, 3, 8};
  for (int i = 0; i < 7; ++i)
    lane.schedule_at(at(std::chrono::milliseconds(dues[i])), [&order, i] { order.push_back(i); });
  advance_to(clock, rt, at(4ms));
  advance_to(clock, rt, at(20ms));
  // By due: 1 (i=3), 3 (i=1, then i=5: posting order), 5 (4), 7 (0), 8 (6), 9 (2).
  EXPECT_EQ(order, (std::vector<int>{3, 1, 5, 4, 0, 6, 2}));
}

TEST_P(RuntimeLane, cancel_wins_even_after_the_run_was_queued_on_the_lane) {
  chime::Lane lane = rt.lane();
  int runs = 0;
  const chime::TimerId a = lane.schedule_at(at(1ms), [&] { ++runs; });
  const chime::TimerId b = lane.schedule_at(at(1ms), [&] { ++runs; });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  // Both runs are in the ready queue now.
  EXPECT_EQ(lane.state(a), chime::TimerState::pending) << "a queued run has not started";
  EXPECT_TRUE(lane.cancel(a)) << "a cancel before the callback starts wins";
  EXPECT_EQ(lane.try_cancel(a), chime::CancelResult::done);
  EXPECT_EQ(lane.run_ready(), 1u) << "only b runs";
  flusher.join();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(lane.state(a), chime::TimerState::cancelled);
  EXPECT_EQ(lane.state(b), chime::TimerState::fired);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 1u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// design.md, Lanes: on the lane's thread a reschedule of a run already in
// the ready queue wins as a cancel does: it returns true, the queued run
// never happens, and the timer runs once, at its new due.
TEST_P(RuntimeLane, a_reschedule_on_the_lane_thread_wins_over_a_run_already_queued) {
  chime::Lane lane = rt.lane();  // this thread made it: it is the lane's thread
  std::vector<chime::TimePoint> dues;
  const chime::TimerId a = lane.schedule_at(at(1ms), [&](const chime::Firing& f) { dues.push_back(f.due); });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  // The run is in the ready queue now, not started.
  EXPECT_TRUE(lane.reschedule_at(a, at(5ms))) << "a reschedule before the callback starts wins on the lane's thread";
  EXPECT_EQ(lane.state(a), chime::TimerState::pending);
  EXPECT_EQ(lane.run_ready(), 0u) << "the queued run was taken back";
  flusher.join();
  EXPECT_TRUE(dues.empty());
  advance_to(clock, rt, at(4ms));
  EXPECT_TRUE(dues.empty()) << "never before its new due";
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(dues, (std::vector<chime::TimePoint>{at(5ms)})) << "exactly one run, at the new due";
  EXPECT_EQ(lane.state(a), chime::TimerState::fired);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 1u);
  EXPECT_EQ(s.rescheduled, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// The same from a callback on the lane: the other run of its batch is taken
// back before the lane reaches it; a periodic timer taken back keeps its
// rate from the new due, and a cancel after the take-back still wins once.
TEST_P(RuntimeLane, a_reschedule_from_a_lane_callback_wins_over_a_run_of_the_same_batch) {
  chime::Lane lane = rt.lane();
  lane.run_ready();
  std::vector<chime::TimePoint> periodic_dues;
  chime::TimerId p;
  bool took_back = false;
  // Scheduled first, due at the same time: it runs first in the batch.
  lane.schedule_at(at(10ms), [&] { took_back = lane.reschedule_at(p, at(15ms)); });
  p = lane.schedule_every(10ms, [&](const chime::Firing& f) { periodic_dues.push_back(f.due); });
  advance_to(clock, rt, at(11ms));
  EXPECT_TRUE(took_back);
  EXPECT_TRUE(periodic_dues.empty()) << "the periodic run queued behind the callback was taken back";
  advance_to(clock, rt, at(16ms));
  advance_to(clock, rt, at(26ms));
  EXPECT_EQ(periodic_dues, (std::vector<chime::TimePoint>{at(15ms), at(25ms)}));
  EXPECT_TRUE(lane.cancel(p));
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(periodic_dues.size(), 2u);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 3u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// A reschedule from another thread than the lane's keeps the rule for a run
// already handed over (design.md, Lanes): it returns false and the run goes
// ahead at its old due, as for a worker.
TEST_P(RuntimeLane, a_reschedule_from_another_thread_of_a_queued_run_returns_false_and_the_run_goes_ahead) {
  chime::Lane lane = rt.lane();
  std::vector<chime::TimePoint> dues;
  const chime::TimerId a = lane.schedule_at(at(1ms), [&](const chime::Firing& f) { dues.push_back(f.due); });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  bool rescheduled = true;
  std::thread other([&] { rescheduled = lane.reschedule_at(a, at(5ms)); });
  other.join();
  EXPECT_FALSE(rescheduled);
  EXPECT_EQ(lane.run_ready(), 1u);
  flusher.join();
  EXPECT_EQ(dues, (std::vector<chime::TimePoint>{at(1ms)}));
  EXPECT_EQ(lane.state(a), chime::TimerState::fired);
  EXPECT_EQ(rt.stats().rescheduled, 0u);
}

TEST_P(RuntimeLane, a_cancel_of_every_ready_run_leaves_ready_fd_readable_with_nothing_to_run) {
  chime::Lane lane = rt.lane();
  const chime::TimerId a = lane.schedule_at(at(1ms), [] { ADD_FAILURE() << "cancelled run ran"; });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  EXPECT_TRUE(lane.cancel(a));
  EXPECT_TRUE(readable(lane.ready_fd())) << "the signal stays until run_ready consumes it";
  EXPECT_EQ(lane.run_ready(), 0u);
  flusher.join();
  EXPECT_FALSE(readable(lane.ready_fd()));
}

TEST_P(RuntimeLane, run_ready_with_a_max_runs_that_many_and_stays_readable_for_the_rest) {
  chime::Lane lane = rt.lane();
  int runs = 0;
  for (int i = 0; i < 5; ++i) lane.schedule_at(at(1ms), [&] { ++runs; });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  EXPECT_EQ(lane.run_ready(2), 2u);
  EXPECT_TRUE(readable(lane.ready_fd())) << "three runs are left: the fd must stay readable";
  EXPECT_EQ(lane.run_ready(2), 2u);
  EXPECT_EQ(lane.run_ready(2), 1u);
  flusher.join();
  EXPECT_EQ(runs, 5);
  EXPECT_FALSE(readable(lane.ready_fd()));
}

TEST_P(RuntimeLane, wait_and_run_returns_at_its_deadline_or_when_a_run_is_ready) {
  chime::Lane lane = rt.lane();
  // Deadline already passed: no wait.
  EXPECT_EQ(lane.wait_and_run(at(0ms)), 0u);
  // A ManualClock deadline is reached when the clock is moved past it.
  std::thread mover([&] {
    std::this_thread::sleep_for(20ms);
    clock.set(at(10ms));
  });
  EXPECT_EQ(lane.wait_and_run(at(5ms)), 0u);
  mover.join();
  EXPECT_GE(clock.now(), at(5ms));
  // A run made ready before the deadline ends the wait and runs.
  int runs = 0;
  lane.schedule_at(at(11ms), [&] { ++runs; });
  rt.flush();
  std::thread advancer([&] {
    clock.set(at(12ms));
    rt.flush();  // waits for the lane thread, which is in wait_and_run
  });
  EXPECT_EQ(lane.wait_and_run(at(1000ms)), 1u);
  advancer.join();
  EXPECT_EQ(runs, 1);
}

TEST_P(RuntimeLane, a_callbacks_exception_never_escapes_run_ready_and_goes_to_on_error) {
  chime::ManualClock c{kStart};
  std::vector<chime::TimerId> errors;
  std::thread::id error_thread;
  chime::RuntimeOptions o = manual_options(c, GetParam());
  o.on_error = [&](chime::TimerId id, std::exception_ptr e) {
    errors.push_back(id);
    error_thread = std::this_thread::get_id();
    EXPECT_THROW(std::rethrow_exception(e), std::runtime_error);
  };
  chime::Runtime r(o);
  chime::Lane lane = r.lane();
  lane.run_ready();
  const chime::TimerId id = lane.schedule_after(0ns, [] { throw std::runtime_error("boom"); });
  int after = 0;
  lane.schedule_after(0ns, [&] { ++after; });
  EXPECT_NO_THROW(r.flush());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], id);
  EXPECT_EQ(error_thread, std::this_thread::get_id()) << "on_error runs on the lane's thread";
  EXPECT_EQ(after, 1) << "the run after the throwing one still ran";
  EXPECT_EQ(r.stats().callback_errors, 1u);
}

TEST_P(RuntimeLane, periodic_lane_timers_keep_their_fixed_rate_and_stop_on_cancel) {
  chime::Lane lane = rt.lane();
  lane.run_ready();
  std::vector<chime::TimePoint> dues;
  const chime::TimerId id = lane.schedule_every(10ms, [&](const chime::Firing& f) { dues.push_back(f.due); });
  for (int k = 1; k <= 3; ++k) advance_to(clock, rt, at(std::chrono::milliseconds(10 * k + 1)));
  EXPECT_EQ(dues, (std::vector<chime::TimePoint>{at(10ms), at(20ms), at(30ms)}));
  EXPECT_TRUE(lane.cancel(id));
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(dues.size(), 3u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

TEST_P(RuntimeLane, calls_from_inside_a_callback_that_would_nest_runs_throw) {
  chime::Lane lane = rt.lane();
  lane.run_ready();
  bool threw = false;
  lane.schedule_after(0ns, [&] {
    try {
      lane.run_ready();
    } catch (const std::logic_error&) {
      threw = true;
    }
  });
  rt.flush();
  EXPECT_TRUE(threw);
}

TEST_P(RuntimeLane, destroying_a_lane_cancels_its_pending_and_ready_runs) {
  int runs = 0;
  chime::TimerId pending, ready, periodic;
  {
    chime::Lane lane = rt.lane();
    pending = lane.schedule_at(at(50ms), [&] { ++runs; });
    ready = lane.schedule_at(at(1ms), [&] { ++runs; });
    periodic = lane.schedule_every(1ms, [&] { ++runs; });
    clock.set(at(2ms));
    std::thread flusher([&] { rt.flush(); });
    while (!readable(lane.ready_fd())) std::this_thread::yield();
    // `ready` and the periodic's first run are queued; nobody runs the lane.
    // Destroying it cancels them, which also lets the flush return.
    lane = chime::Lane();
    flusher.join();
  }
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(rt.state(pending), chime::TimerState::cancelled);
  EXPECT_EQ(rt.state(ready), chime::TimerState::cancelled);
  EXPECT_EQ(rt.state(periodic), chime::TimerState::cancelled);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.cancelled, 3u);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.fired, 0u);
}

// Waits for `f` for at most 10 s; a deadlock (the case these tests guard) cannot be unwound, so
// it fails the test and ends the process instead of hanging ctest until its timeout.
template <class Future>
void expect_returns(Future& f, const char* what) {
  if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not return within 10 s: deadlock";
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

// With workers = 0 the callback runs on the wheel thread, which must not wait for a pass of itself
// to close the lane (it would wait forever).
TEST_P(RuntimeLane, a_callback_that_destroys_another_lane_returns_and_cancels_that_lanes_runs) {
  // Not on the fixture's ManualClock, whose runs go out one at a time in due
  // order (G28): there the lane's ready run would hold back the callback
  // until someone ran the lane.
  chime_test::SettableClock sclock{kStart};
  chime::Runtime srt{chime_test::settable_options(sclock, GetParam())};
  int lane_runs = 0;
  bool closed = false;
  std::optional<chime::Lane> other(srt.lane());
  const chime::TimerId pending = other->schedule_at(at(50ms), [&] { ++lane_runs; });
  const chime::TimerId ready = other->schedule_at(at(1ms), [&] { ++lane_runs; });
  // Due at 2 ms, so that it runs at 3 ms whether its schedule is applied before the clock moves
  // (its 1 ms interval has ended) or after (due now). Due at 3 ms, it would run only if applied
  // after: otherwise the flush waits for the lane's ready run, which nobody runs.
  srt.schedule_at(at(2ms), [&] {
    other.reset();  // nobody runs that lane: its ready run is cancelled here
    closed = true;
  });
  sclock.set(at(3ms));
  // One pass readies `ready` on the lane, then runs the callback that destroys the lane.
  auto flushed = std::async(std::launch::async, [&] { srt.flush(); });
  expect_returns(flushed, "a flush whose callback destroys another lane");
  EXPECT_TRUE(closed);
  advance_to(sclock, srt, at(100ms));
  EXPECT_EQ(lane_runs, 0);
  EXPECT_EQ(srt.state(pending), chime::TimerState::cancelled);
  EXPECT_EQ(srt.state(ready), chime::TimerState::cancelled);
  const chime::Stats s = srt.stats();
  EXPECT_EQ(s.cancelled, 2u);
  EXPECT_EQ(s.fired, 1u);
  EXPECT_EQ(s.pending, 0u);
}

// The same from a final run of shutdown(fire_pending): with workers = 0 the wheel thread runs it
// before it exits, so closing the lane must not wait for that exit either.
TEST_P(RuntimeLane, a_final_run_at_shutdown_that_destroys_another_lane_returns) {
  int lane_runs = 0;
  std::optional<chime::Lane> other(rt.lane());
  const chime::TimerId lane_timer = other->schedule_at(at(50ms), [&] { ++lane_runs; });
  bool closed = false;
  rt.schedule_at(at(40ms), [&] {
    other.reset();
    closed = true;
  });
  rt.flush();
  auto stopped = std::async(std::launch::async, [&] { return rt.shutdown(chime::ShutdownMode::fire_pending); });
  expect_returns(stopped, "shutdown(fire_pending) whose final run destroys another lane");
  stopped.get();
  EXPECT_TRUE(closed);
  EXPECT_EQ(lane_runs, 0) << "the destroyed lane's final run is cancelled with the lane";
  EXPECT_EQ(rt.state(lane_timer), chime::TimerState::cancelled);
  EXPECT_EQ(rt.stats().pending, 0u);
}

TEST_P(RuntimeLane, a_new_lane_reusing_a_closed_one_gets_none_of_its_runs) {
  int old_runs = 0, new_runs = 0;
  {
    chime::Lane old_lane = rt.lane();
    old_lane.schedule_at(at(1ms), [&] { ++old_runs; });
  }
  chime::Lane lane = rt.lane();
  lane.run_ready();
  lane.schedule_at(at(1ms), [&] { ++new_runs; });
  advance_to(clock, rt, at(5ms));
  EXPECT_EQ(old_runs, 0);
  EXPECT_EQ(new_runs, 1);
}

TEST_P(RuntimeLane, shutdown_cancel_pending_cancels_ready_and_pending_lane_runs) {
  chime::Lane lane = rt.lane();
  int runs = 0;
  lane.schedule_at(at(1ms), [&] { ++runs; });
  lane.schedule_at(at(50ms), [&] { ++runs; });
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });
  while (!readable(lane.ready_fd())) std::this_thread::yield();
  // The flush waits for the lane; shutdown cancels the ready run, and the
  // flush returns once the wheel thread has stopped.
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 2u);
  flusher.join();
  EXPECT_EQ(lane.run_ready(), 0u);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_THROW(lane.schedule_after(1ms, [] {}), chime::StoppedError);
}

TEST_P(RuntimeLane, shutdown_fire_pending_makes_lane_runs_ready_without_waiting_for_them) {
  chime::Lane lane = rt.lane();
  std::vector<int> ran;
  lane.schedule_at(at(50ms), [&] { ran.push_back(1); });
  lane.schedule_every(10ms, [&] { ran.push_back(2); });
  rt.flush();
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::fire_pending), 0u);
  EXPECT_TRUE(ran.empty()) << "shutdown does not run lane callbacks itself";
  EXPECT_TRUE(readable(lane.ready_fd()));
  EXPECT_EQ(lane.run_ready(), 2u);
  EXPECT_EQ(lane.run_ready(), 0u) << "the periodic timer's final run does not re-arm it";
  EXPECT_EQ(rt.stats().pending, 0u);
}

TEST_P(RuntimeLane, a_timer_bound_to_a_lane_runs_there_and_re_arms_from_its_callback) {
  chime::Lane lane = rt.lane();
  lane.run_ready();
  std::vector<chime::TimePoint> dues;
  chime::Timer t(lane, [&](const chime::Firing& f) {
    dues.push_back(f.due);
    if (dues.size() < 3) t.arm_at(f.due + 5ms);
  });
  std::thread::id ran_on;
  chime::Timer probe(lane, [&] { ran_on = std::this_thread::get_id(); });
  probe.arm_after(0ns);
  t.arm_at(at(5ms));
  for (int k = 1; k <= 4; ++k) advance_to(clock, rt, at(std::chrono::milliseconds(5 * k)));
  EXPECT_EQ(dues, (std::vector<chime::TimePoint>{at(5ms), at(10ms), at(15ms)}));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(t.armed());
}

TEST(RuntimeLane, an_empty_lane_names_the_call_it_refuses) {
  chime::Lane lane;
  try {
    lane.schedule_after(1ms, [] {});
    FAIL() << "no throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("schedule_after"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lane.run_ready(), std::logic_error);
  EXPECT_THROW((void)lane.ready_fd(), std::logic_error);
  EXPECT_THROW(chime::Timer(lane, [] {}), std::logic_error);
  EXPECT_FALSE(lane);
}

}  // namespace
