// SPDX-License-Identifier: BSL-1.0
// Coroutines on a lane (include/chime/lane.hpp): `co_await lane.sleep_for(d)`
// resumes on the lane's thread when the sleep is due (never early), chains of
// sleeps keep their order, destroying a suspended frame cancels its sleep,
// an exception escaping a chime::Detached coroutine goes to on_error, and a
// sleep that cannot be scheduled throws from the co_await.
#include <chime/lane.hpp>

#include <poll.h>

#include <coroutine>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;

// A coroutine whose frame the test owns: destroying the object destroys the
// frame, wherever it is suspended.
struct OwnedCoroutine {
  struct promise_type {  // NOLINT(readability-identifier-naming): the name C++ looks up
    OwnedCoroutine get_return_object() {
      return OwnedCoroutine{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() { std::terminate(); }
  };
  explicit OwnedCoroutine(std::coroutine_handle<promise_type> handle) : h(handle) {}
  OwnedCoroutine(OwnedCoroutine&& o) noexcept : h(std::exchange(o.h, {})) {}
  ~OwnedCoroutine() {
    if (h) h.destroy();
  }
  bool done() const { return h.done(); }
  std::coroutine_handle<promise_type> h;
};

// Counts its destructions: put one in a frame to see the frame freed.
struct FrameWitness {
  int* destroyed;
  ~FrameWitness() { ++*destroyed; }
};

class RuntimeLaneCoroutine : public ::testing::Test {
 protected:
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  chime::Lane lane = rt.lane();
  void SetUp() override { lane.run_ready(); }  // this thread runs the lane
};

chime::Detached sleep_chain(chime::Lane& lane, std::vector<chime::TimePoint>& woke, std::thread::id& thread) {
  for (int i = 0; i < 3; ++i) {
    co_await lane.sleep_for(10ms);
    woke.push_back(lane.clock().now());
    thread = std::this_thread::get_id();
  }
}

TEST_F(RuntimeLaneCoroutine, a_sleep_chain_resumes_on_the_lane_at_each_due_never_early) {
  std::vector<chime::TimePoint> woke;
  std::thread::id thread;
  sleep_chain(lane, woke, thread);  // suspends at its first sleep (due at 10 ms)
  EXPECT_TRUE(woke.empty());
  advance_to(clock, rt, at(9ms));
  EXPECT_TRUE(woke.empty()) << "resumed before its sleep was due";
  for (int ms = 10; ms <= 40; ++ms) advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
  // Each sleep starts when the previous one resumed: due 10, 20, 30 ms;
  // each resumes at the first flush whose reading reaches its due.
  ASSERT_EQ(woke.size(), 3u);
  EXPECT_EQ(woke[0], at(10ms));
  EXPECT_EQ(woke[1], at(20ms));
  EXPECT_EQ(woke[2], at(30ms));
  EXPECT_EQ(thread, std::this_thread::get_id());
  EXPECT_EQ(rt.stats().pending, 0u);
}

OwnedCoroutine sleeper(chime::Lane& lane, int& resumed, int& destroyed) {
  FrameWitness w{&destroyed};
  co_await lane.sleep_for(5ms);
  ++resumed;
}

TEST_F(RuntimeLaneCoroutine, destroying_a_suspended_frame_cancels_its_sleep) {
  int resumed = 0, destroyed = 0;
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(lane, resumed, destroyed));
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 1u);
  c.reset();  // frame destroyed while suspended
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().pending, 0u) << "the sleep's timer was not cancelled";
  EXPECT_EQ(rt.stats().cancelled, 1u);
  advance_to(clock, rt, at(50ms));
  EXPECT_EQ(resumed, 0) << "a destroyed frame was resumed";
}

TEST_F(RuntimeLaneCoroutine, destroying_a_frame_whose_sleep_is_already_ready_cancels_it) {
  int resumed = 0, destroyed = 0;
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(lane, resumed, destroyed));
  clock.set(at(10ms));
  // Another thread's flush makes the sleep ready; this thread does not run it.
  std::thread flusher([&] { rt.flush(); });
  pollfd p{lane.ready_fd(), POLLIN, 0};
  while (::poll(&p, 1, 0) != 1) std::this_thread::yield();
  c.reset();  // on the lane's thread: the cancel wins although the run is queued
  EXPECT_EQ(lane.run_ready(), 0u);
  flusher.join();
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().cancelled, 1u);
}

chime::Detached thrower(chime::Lane& lane, int& destroyed) {
  FrameWitness w{&destroyed};
  co_await lane.sleep_for(1ms);
  throw std::runtime_error("entity failed");
}

TEST(RuntimeLaneCoroutineStandalone, an_exception_escaping_a_detached_coroutine_goes_to_on_error_and_frees_the_frame) {
  chime::ManualClock clock{kStart};
  std::vector<chime::TimerId> errors;
  std::string what;
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.on_error = [&](chime::TimerId id, std::exception_ptr e) {
    errors.push_back(id);
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    }
  };
  chime::Runtime rt(o);
  chime::Lane lane = rt.lane();
  lane.run_ready();
  int destroyed = 0;
  thrower(lane, destroyed);
  EXPECT_EQ(destroyed, 0);
  advance_to(clock, rt, at(5ms));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(errors[0]) << "the error names the sleep's timer";
  EXPECT_EQ(what, "entity failed");
  EXPECT_EQ(destroyed, 1) << "the frame was not freed";
  EXPECT_EQ(rt.stats().callback_errors, 1u);
}

chime::Detached sleep_after_shutdown(chime::Lane& lane, bool& threw) {
  try {
    co_await lane.sleep_for(1ms);
  } catch (const chime::StoppedError&) {
    threw = true;
  }
}

TEST_F(RuntimeLaneCoroutine, a_sleep_after_shutdown_throws_from_the_co_await) {
  rt.shutdown();
  bool threw = false;
  sleep_after_shutdown(lane, threw);
  EXPECT_TRUE(threw);
}

chime::Detached many_sleeps(chime::Lane& lane, int n, int& done) {
  for (int i = 0; i < n; ++i) co_await lane.sleep_for(1ms);
  ++done;
}

TEST_F(RuntimeLaneCoroutine, many_coroutines_sleep_concurrently_and_all_finish) {
  int done = 0;
  for (int i = 0; i < 1000; ++i) many_sleeps(lane, 5, done);
  for (int ms = 1; ms <= 20 && done < 1000; ++ms) advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
  EXPECT_EQ(done, 1000);
  EXPECT_EQ(rt.stats().fired, 5000u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

chime::Detached sleep_forever(chime::Lane& lane, int& destroyed, int& resumed) {
  FrameWitness w{&destroyed};
  co_await lane.sleep_for(1h);
  ++resumed;
}

chime::Detached sleep_briefly(chime::Lane& lane, int& destroyed, int& resumed) {
  FrameWitness w{&destroyed};
  co_await lane.sleep_for(1ms);
  ++resumed;
}

// Makes the lane's brief sleeps ready (a flush on another thread; nobody
// runs them), destroys the lane, and joins the flush.
void destroy_with_ready_sleeps(chime::Runtime& rt, chime::Lane& lane) {
  std::thread flusher([&] { rt.flush(); });
  pollfd p{lane.ready_fd(), POLLIN, 0};
  while (::poll(&p, 1, 0) != 1) std::this_thread::yield();
  lane = chime::Lane();
  flusher.join();
}

// The lane's destruction destroyed the 20 suspended Detached frames, resumed
// none, and cancelled their sleeps.
void expect_twenty_sleeping_frames_destroyed(chime::Runtime& rt, int destroyed, int resumed) {
  EXPECT_EQ(destroyed, 20) << "suspended Detached frames leaked";
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_EQ(rt.stats().cancelled, 20u);
}

// Nobody holds a Detached coroutine's frame but its sleep: when the sleep is
// cancelled by the lane's close (pending: the wheel thread; already ready:
// the closing thread), the frame is destroyed, not leaked, and never resumed.
TEST(RuntimeLaneCoroutineStandalone, destroying_a_lane_destroys_its_sleeping_detached_coroutines) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  int destroyed = 0, resumed = 0;
  {
    chime::Lane lane = rt.lane();
    for (int i = 0; i < 10; ++i) sleep_forever(lane, destroyed, resumed);
    for (int i = 0; i < 10; ++i) sleep_briefly(lane, destroyed, resumed);
    clock.set(at(5ms));
    destroy_with_ready_sleeps(rt, lane);
  }
  expect_twenty_sleeping_frames_destroyed(rt, destroyed, resumed);
}

TEST(RuntimeLaneCoroutineStandalone, shutdown_cancel_pending_destroys_sleeping_detached_coroutines) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  chime::Lane lane = rt.lane();
  int destroyed = 0, resumed = 0;
  for (int i = 0; i < 10; ++i) sleep_forever(lane, destroyed, resumed);
  rt.flush();
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 10u);
  EXPECT_EQ(destroyed, 10);
  EXPECT_EQ(resumed, 0);
}

TEST(RuntimeLaneCoroutineStandalone, shutdown_fire_pending_resumes_sleeping_coroutines_at_the_next_run_ready) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  chime::Lane lane = rt.lane();
  int destroyed = 0, resumed = 0;
  for (int i = 0; i < 10; ++i) sleep_forever(lane, destroyed, resumed);
  rt.flush();
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::fire_pending), 0u);
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(lane.run_ready(), 10u);
  EXPECT_EQ(resumed, 10);
  EXPECT_EQ(destroyed, 10) << "each coroutine ran to its end and freed its frame";
}

// The running coroutine's handle, without suspending (await_suspend returns false).
struct ThisFrame {
  std::coroutine_handle<> h;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> c) noexcept {
    h = c;
    return false;
  }
  std::coroutine_handle<> await_resume() const noexcept { return h; }
};

chime::Detached sleeper_that_gives_away_its_frame(chime::Lane& lane, std::coroutine_handle<>& frame, int& destroyed,
                                                  int& resumed) {
  FrameWitness w{&destroyed};
  frame = co_await ThisFrame{};
  co_await lane.sleep_for(1s);
  ++resumed;
}

// A Detached frame destroyed by whoever got hold of its handle, on the lane's
// thread while it sleeps: the sleep is cancelled and the frame destroyed
// once (the sleep's task, which owns a Detached frame, must not destroy it
// again: ASan reports the double destruction).
TEST_F(RuntimeLaneCoroutine, a_detached_frame_destroyed_through_its_handle_is_destroyed_once_and_its_sleep_cancelled) {
  int destroyed = 0, resumed = 0;
  std::coroutine_handle<> frame;
  sleeper_that_gives_away_its_frame(lane, frame, destroyed, resumed);
  ASSERT_TRUE(frame);
  frame.destroy();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().cancelled, 1u);
  advance_to(clock, rt, at(2s));
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// The same, with the sleep's run already in the lane's ready queue (the
// cancel is C4): the sleep's task stays in the slot until the lane dequeues
// the cancelled run, after the frame is freed, and must not look at the
// frame then (ASan: heap-use-after-free in ~LaneSleepResumer before).
TEST_F(RuntimeLaneCoroutine, a_detached_frame_destroyed_through_its_handle_while_its_run_is_ready_is_not_touched_again) {
  int destroyed = 0, resumed = 0;
  std::coroutine_handle<> frame;
  sleeper_that_gives_away_its_frame(lane, frame, destroyed, resumed);
  ASSERT_TRUE(frame);
  clock.set(at(1s) + kPrecision);  // the end of the due's interval: the sleep is due
  // Another thread's flush makes the sleep ready; this thread does not run it.
  std::thread flusher([&] { rt.flush(); });
  pollfd p{lane.ready_fd(), POLLIN, 0};
  while (::poll(&p, 1, 0) != 1) std::this_thread::yield();
  frame.destroy();  // on the lane's thread: the cancel wins although the run is queued
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(lane.run_ready(), 0u);  // dequeues the cancelled run and destroys its task
  flusher.join();
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(destroyed, 1) << "the frame was destroyed again";
  EXPECT_EQ(rt.stats().cancelled, 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A sleep belongs to the lane, not to the Lane object: after the Lane is
// moved (and the moved-from one left empty), destroying the suspended frame
// still cancels its sleep, and the lane never resumes the freed frame.
TEST_F(RuntimeLaneCoroutine, a_frame_destroyed_after_its_lane_was_moved_cancels_its_sleep) {
  int resumed = 0, destroyed = 0;
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(lane, resumed, destroyed));
  rt.flush();
  chime::Lane moved = std::move(lane);  // `lane` is now empty
  c.reset();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().pending, 0u) << "the sleep's timer was not cancelled";
  EXPECT_EQ(rt.stats().cancelled, 1u);
  advance_to(clock, rt, at(50ms));
  moved.run_ready();
  EXPECT_EQ(resumed, 0) << "a destroyed frame was resumed";
}

// The same with the moved-from Lane destroyed before the frame (ASan: no
// heap-use-after-free), and with the sleep's run already in the ready queue
// of the new Lane: the cancel on the lane's thread still wins.
TEST_F(RuntimeLaneCoroutine, a_frame_destroyed_after_its_lane_was_moved_and_the_old_handle_freed_cancels_its_sleep) {
  int resumed = 0, destroyed = 0;
  auto first = std::make_unique<chime::Lane>(std::move(lane));
  std::optional<OwnedCoroutine> pending;
  std::optional<OwnedCoroutine> ready;
  pending.emplace(sleeper(*first, resumed, destroyed));  // due at 5 ms
  chime::Lane second = std::move(*first);
  first.reset();
  rt.flush();
  pending.reset();
  EXPECT_EQ(rt.stats().cancelled, 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
  auto third = std::make_unique<chime::Lane>(std::move(second));
  ready.emplace(sleeper(*third, resumed, destroyed));  // due at 5 ms
  chime::Lane fourth = std::move(*third);
  third.reset();
  clock.set(at(10ms));
  // Another thread's flush makes the sleep ready; this thread does not run it.
  std::thread flusher([&] { rt.flush(); });
  pollfd p{fourth.ready_fd(), POLLIN, 0};
  while (::poll(&p, 1, 0) != 1) std::this_thread::yield();
  ready.reset();  // on the lane's thread: the cancel wins although the run is queued
  EXPECT_EQ(fourth.run_ready(), 0u);
  flusher.join();
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(destroyed, 2);
  EXPECT_EQ(rt.stats().cancelled, 2u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A coroutine sleeping on a Lane that is then moved resumes on the new Lane's
// thread at its due, through the new Lane's run_ready.
TEST_F(RuntimeLaneCoroutine, a_sleep_on_a_moved_lane_resumes_through_the_new_lane) {
  int resumed = 0, destroyed = 0;
  auto first = std::make_unique<chime::Lane>(std::move(lane));
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(*first, resumed, destroyed));
  chime::Lane second = std::move(*first);
  first.reset();
  clock.set(at(10ms));
  rt.flush();  // this thread made the lane: the flush runs it
  EXPECT_EQ(resumed, 1);
  EXPECT_TRUE(c->done());
  c.reset();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().fired, 1u);
  EXPECT_EQ(rt.stats().cancelled, 0u);
}

// Destroying a Lane that was moved to destroys the Detached coroutines
// sleeping on it (pending and ready), even though they suspended through the
// Lane it was moved from, now freed (ASan: no heap-use-after-free).
TEST(RuntimeLaneCoroutineStandalone, destroying_a_moved_lane_destroys_its_sleeping_detached_coroutines) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  int destroyed = 0, resumed = 0;
  {
    auto first = std::make_unique<chime::Lane>(rt.lane());
    for (int i = 0; i < 10; ++i) sleep_forever(*first, destroyed, resumed);
    for (int i = 0; i < 10; ++i) sleep_briefly(*first, destroyed, resumed);
    chime::Lane second = std::move(*first);
    first.reset();
    clock.set(at(5ms));
    destroy_with_ready_sleeps(rt, second);
  }
  expect_twenty_sleeping_frames_destroyed(rt, destroyed, resumed);
}

// A frame the caller owns may outlive its Lane: the Lane's destruction
// cancelled the sleep, and destroying the frame afterwards (on any thread)
// touches nothing freed and cancels nothing of a new Lane that reuses the
// lane's core, whose timers may reuse the sleep's slot.
TEST(RuntimeLaneCoroutineStandalone, a_frame_destroyed_after_its_lane_is_safe_and_cancels_nothing_of_the_next_lane) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  int resumed = 0, destroyed = 0;
  auto lane = std::make_unique<chime::Lane>(rt.lane());
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(*lane, resumed, destroyed));
  rt.flush();
  lane.reset();
  EXPECT_EQ(rt.stats().cancelled, 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
  chime::Lane next = rt.lane();  // reuses the closed lane's core
  int runs = 0;
  next.schedule_after(5ms, [&] { ++runs; });
  rt.flush();
  std::thread([&] { c.reset(); }).join();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(rt.stats().cancelled, 1u) << "the old frame's destruction cancelled a timer of the next lane";
  clock.set(at(10ms));
  rt.flush();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(resumed, 0);
}

// The same after the Runtime itself is gone: nothing of it is touched.
TEST(RuntimeLaneCoroutineStandalone, a_frame_destroyed_after_its_lane_and_runtime_is_safe) {
  chime::ManualClock clock{kStart};
  auto rt = std::make_unique<chime::Runtime>(manual_options(clock, 1));
  int resumed = 0, destroyed = 0;
  auto lane = std::make_unique<chime::Lane>(rt->lane());
  std::optional<OwnedCoroutine> c;
  c.emplace(sleeper(*lane, resumed, destroyed));
  rt->flush();
  lane.reset();
  rt.reset();
  c.reset();
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(resumed, 0);
}

chime::Detached sleep_after_the_lane_is_destroyed(std::unique_ptr<chime::Lane>& lane, std::string& error) {
  auto sleep = lane->sleep_for(1ms);
  lane.reset();
  try {
    co_await sleep;
  } catch (const std::logic_error& e) {
    error = e.what();
  }
}

// A sleep made from a Lane that is destroyed before its co_await throws
// std::logic_error from the co_await, naming the cause, and schedules nothing.
TEST(RuntimeLaneCoroutineStandalone, a_sleep_whose_lane_was_destroyed_before_the_co_await_throws_logic_error) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  auto lane = std::make_unique<chime::Lane>(rt.lane());
  std::string error;
  sleep_after_the_lane_is_destroyed(lane, error);
  EXPECT_NE(error.find("Lane was destroyed"), std::string::npos) << error;
  EXPECT_EQ(rt.stats().scheduled, 0u);
}

// The thread that made a lane is its thread until another runs it: its
// flush runs the lane's due runs instead of waiting for a thread that never
// comes.
TEST(RuntimeLaneCoroutineStandalone, a_flush_on_the_thread_that_made_the_lane_runs_it) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt(manual_options(clock, 1));
  chime::Lane lane = rt.lane();
  int runs = 0;
  lane.schedule_after(1ms, [&] { ++runs; });
  clock.advance(5ms);
  rt.flush();
  EXPECT_EQ(runs, 1);
}

}  // namespace
