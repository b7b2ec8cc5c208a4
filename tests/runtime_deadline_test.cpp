// SPDX-License-Identifier: BSL-1.0
// Timeouts that cannot be left armed (include/chime/deadline.hpp):
// chime::Deadline, the scoped guard (G55: destroying or cancelling it before
// its due stops the callback, and waits for one in progress; G56: expired()
// tells whether the callback began, at most one runs, and after cancel() the
// answer is final), and chime::with_timeout on a lane (G57: the awaiting
// coroutine resumes once, with the result or the timeout, and the loser is
// withdrawn). Every test runs on a ManualClock.
#include <chime/deadline.hpp>

#include <atomic>
#include <coroutine>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;

class RuntimeDeadline : public ::testing::Test {
 protected:
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
};

// ---- chime::Deadline ----

TEST_F(RuntimeDeadline, destroying_before_the_due_cancels_the_callback) {
  int runs = 0;
  {
    chime::Deadline d(rt, 250ms, [&] { ++runs; });
    advance_to(clock, rt, at(249ms));
    EXPECT_FALSE(d.expired());
  }
  advance_to(clock, rt, at(1s));  // well past the due: nothing runs
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(rt.stats().cancelled, 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

TEST_F(RuntimeDeadline, the_callback_runs_at_its_due_once_and_expired_turns_true) {
  std::optional<chime::Firing> fired;
  int runs = 0;
  chime::Deadline d(rt, 250ms, [&](const chime::Firing& f) {
    fired = f;
    ++runs;
  });
  EXPECT_TRUE(d);
  EXPECT_EQ(d.due(), at(250ms));
  advance_to(clock, rt, at(249ms));
  EXPECT_FALSE(d.expired()) << "ran before its due";
  advance_to(clock, rt, at(250ms));
  EXPECT_TRUE(d.expired());
  ASSERT_TRUE(fired);
  EXPECT_EQ(fired->due, at(250ms));
  EXPECT_EQ(fired->fired_at, at(250ms));
  EXPECT_EQ(d.due(), std::nullopt);
  advance_to(clock, rt, at(2s));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(d.expired()) << "expired() went back to false";
}

TEST_F(RuntimeDeadline, a_deadline_at_a_time_point_runs_then) {
  int runs = 0;
  chime::Deadline d(rt, at(40ms), [&] { ++runs; });
  advance_to(clock, rt, at(39ms));
  EXPECT_EQ(runs, 0);
  advance_to(clock, rt, at(40ms));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(d.expired());
}

TEST_F(RuntimeDeadline, cancel_stops_the_callback_once_and_makes_expired_final) {
  int runs = 0;
  chime::Deadline d(rt, 250ms, [&] { ++runs; });
  EXPECT_TRUE(d.cancel());
  EXPECT_FALSE(d.cancel()) << "a second cancel claimed to stop it again";
  EXPECT_FALSE(d.expired());
  EXPECT_FALSE(d.reset(10ms)) << "reset re-armed a cancelled guard";
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.due(), std::nullopt);
}

TEST_F(RuntimeDeadline, cancel_after_the_callback_ran_returns_false_and_expired_stays_true) {
  int runs = 0;
  chime::Deadline d(rt, 5ms, [&] { ++runs; });
  advance_to(clock, rt, at(5ms));
  EXPECT_FALSE(d.cancel());
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(runs, 1);
}

TEST_F(RuntimeDeadline, reset_moves_the_due_and_the_callback_runs_at_most_once) {
  int runs = 0;
  chime::Deadline d(rt, 100ms, [&] { ++runs; });
  advance_to(clock, rt, at(90ms));
  EXPECT_TRUE(d.reset(100ms));  // the touch: now due at 190 ms
  EXPECT_EQ(d.due(), at(190ms));
  advance_to(clock, rt, at(150ms));
  EXPECT_EQ(runs, 0) << "ran at the old due";
  EXPECT_TRUE(d.reset_at(at(160ms)));  // earlier
  advance_to(clock, rt, at(160ms));
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(d.reset(10ms)) << "reset re-armed a guard whose callback ran";
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(runs, 1);
}

TEST_F(RuntimeDeadline, a_moved_from_guard_is_empty_and_the_moved_to_one_owns_the_callback) {
  int runs = 0;
  chime::Deadline a(rt, 10ms, [&] { ++runs; });
  chime::Deadline b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_FALSE(a.expired());
  EXPECT_FALSE(a.cancel());
  EXPECT_EQ(a.due(), std::nullopt);
  EXPECT_THROW(a.reset(1ms), std::logic_error);
  chime::Deadline empty;
  EXPECT_FALSE(empty);
  EXPECT_FALSE(empty.cancel());
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(b.expired());
}

TEST_F(RuntimeDeadline, move_assignment_cancels_the_guards_old_callback) {
  int old_runs = 0, new_runs = 0;
  chime::Deadline d(rt, 10ms, [&] { ++old_runs; });
  d = chime::Deadline(rt, 20ms, [&] { ++new_runs; });
  advance_to(clock, rt, at(30ms));
  EXPECT_EQ(old_runs, 0) << "the replaced guard's callback ran";
  EXPECT_EQ(new_runs, 1);
  EXPECT_TRUE(d.expired());
}

TEST_F(RuntimeDeadline, on_a_lane_the_callback_runs_on_the_lanes_thread) {
  chime::Lane lane = rt.lane();
  lane.run_ready();  // this thread runs the lane
  std::thread::id ran_on;
  chime::Deadline d(lane, 30ms, [&] { ran_on = std::this_thread::get_id(); });
  advance_to(clock, rt, at(29ms));
  EXPECT_FALSE(d.expired());
  advance_to(clock, rt, at(30ms));  // a flush on the lane's thread runs the lane's runs itself
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  int runs = 0;
  {
    chime::Deadline cancelled(lane, 30ms, [&] { ++runs; });
  }
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(runs, 0);
}

TEST_F(RuntimeDeadline, the_destructor_waits_for_a_callback_in_progress_on_a_worker) {
  std::atomic<bool> started{false}, release{false}, returned{false};
  auto d = std::make_unique<chime::Deadline>(rt, 5ms, [&] {
    started = true;
    while (!release) std::this_thread::yield();
    returned = true;
  });
  clock.set(at(5ms));
  std::thread flusher([&] { rt.flush(); });
  while (!started) std::this_thread::yield();
  EXPECT_TRUE(d->expired()) << "the callback has begun";
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    release = true;
  });
  EXPECT_FALSE(d->cancel()) << "claimed to stop a callback that had begun";
  EXPECT_TRUE(returned) << "cancel returned before the callback in progress did";
  d.reset();
  releaser.join();
  flusher.join();
}

TEST_F(RuntimeDeadline, a_guard_destroyed_from_its_own_callback_keeps_its_closure_until_it_returns) {
  std::unique_ptr<chime::Deadline> d;
  auto witness = std::make_shared<int>(7);
  int seen = 0;
  d = std::make_unique<chime::Deadline>(rt, 5ms, [&, witness] {
    d.reset();        // the guard goes away from inside its own callback: nothing waits
    seen = *witness;  // the closure (and what it captured) is still alive
  });
  advance_to(clock, rt, at(5ms));
  EXPECT_EQ(seen, 7);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(witness.use_count(), 1) << "the closure was not destroyed after its run";
}

TEST_F(RuntimeDeadline, shutdown_cancels_or_fires_the_pending_callback_and_expired_says_which) {
  int runs = 0;
  chime::Deadline d(rt, 250ms, [&] { ++runs; });
  chime::Deadline touched(rt, 250ms, [&] { ++runs; });
  chime::ManualClock clock2{kStart};
  chime::Runtime rt2{manual_options(clock2, 1)};
  chime::Deadline fired(rt2, 250ms, [&] { ++runs; });
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 2u);
  EXPECT_FALSE(d.expired());
  EXPECT_FALSE(d.cancel()) << "shutdown had stopped it already";
  EXPECT_EQ(rt2.shutdown(chime::ShutdownMode::fire_pending), 0u);
  EXPECT_TRUE(fired.expired());
  EXPECT_EQ(runs, 1);
  EXPECT_THROW(chime::Deadline(rt, 1ms, [] {}), chime::StoppedError);
  EXPECT_THROW(touched.reset(1ms), chime::StoppedError) << "a reset after shutdown must say so";
  EXPECT_FALSE(touched.expired());
}

TEST(RuntimeDeadlineStandalone, a_guard_outliving_its_runtime_or_lane_is_destroyed_safely) {
  chime::ManualClock clock{kStart};
  int runs = 0;
  std::optional<chime::Deadline> on_lane;
  std::optional<chime::Deadline> on_runtime;
  {
    chime::Runtime rt{manual_options(clock, 1)};
    {
      chime::Lane lane = rt.lane();
      on_lane.emplace(lane, 5ms, [&] { ++runs; });
    }
    EXPECT_THROW(on_lane->reset(1ms), std::logic_error) << "re-armed on a destroyed lane";
    on_runtime.emplace(rt, 5ms, [&] { ++runs; });
  }
  EXPECT_FALSE(on_lane->expired());
  EXPECT_FALSE(on_runtime->expired());
  on_lane.reset();
  on_runtime.reset();
  EXPECT_EQ(runs, 0);
}

// ---- chime::with_timeout ----

// A channel the test sends on from the lane's thread; `Receive` is its
// awaitable: movable, and its destructor withdraws a waiting coroutine
// (what with_timeout needs of an awaitable).
struct Channel {
  std::coroutine_handle<> waiter;
  std::optional<int> value;
  int withdrawn = 0;
  void send(int v) {
    value = v;
    if (auto h = std::exchange(waiter, {})) h.resume();
  }
};
class Receive {
 public:
  explicit Receive(Channel& c) noexcept : ch_(&c) {}
  Receive(Receive&& o) noexcept : ch_(std::exchange(o.ch_, nullptr)), waiting_(std::exchange(o.waiting_, false)) {}
  Receive& operator=(Receive&&) = delete;
  ~Receive() {
    if (ch_ != nullptr && waiting_) {
      ch_->waiter = {};
      ++ch_->withdrawn;
    }
  }
  bool await_ready() const noexcept { return ch_->value.has_value(); }
  void await_suspend(std::coroutine_handle<> h) noexcept {
    ch_->waiter = h;
    waiting_ = true;
  }
  int await_resume() {
    waiting_ = false;
    if (*ch_->value < 0) throw std::runtime_error("negative");
    return *std::exchange(ch_->value, std::nullopt);
  }

 private:
  Channel* ch_;
  bool waiting_ = false;
};

// A coroutine whose frame the test owns.
struct Owned {
  struct promise_type {  // NOLINT(readability-identifier-naming): the name C++ looks up
    Owned get_return_object() { return Owned{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() { std::terminate(); }
  };
  explicit Owned(std::coroutine_handle<promise_type> handle) : h(handle) {}
  Owned(Owned&& o) noexcept : h(std::exchange(o.h, {})) {}
  ~Owned() {
    if (h) h.destroy();
  }
  bool done() const { return h.done(); }
  std::coroutine_handle<promise_type> h;
};

// What one with_timeout resumed with, and where and when.
struct Outcome {
  int resumes = 0;
  std::optional<int> value;
  std::thread::id thread;
  chime::TimePoint at{};
  std::string error;
};

Owned receive_with_timeout(chime::Lane& lane, Channel& ch, Outcome& out) {
  try {
    std::optional<int> r = co_await chime::with_timeout(lane, Receive(ch), 250ms);
    out.value = r;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  ++out.resumes;
  out.thread = std::this_thread::get_id();
  out.at = lane.clock().now();
}

class RuntimeWithTimeout : public RuntimeDeadline {
 protected:
  chime::Lane lane = rt.lane();
  void SetUp() override { lane.run_ready(); }  // this thread runs the lane
};

TEST_F(RuntimeWithTimeout, the_awaitable_wins_and_the_timeout_is_cancelled) {
  Channel ch;
  Outcome out;
  Owned c = receive_with_timeout(lane, ch, out);
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(out.resumes, 0);
  EXPECT_EQ(rt.stats().pending, 1u) << "the timeout's sleep";
  ch.send(42);  // on the lane's thread
  EXPECT_EQ(out.resumes, 1);
  EXPECT_EQ(out.value, 42);
  EXPECT_EQ(out.at, at(100ms));
  EXPECT_EQ(out.thread, std::this_thread::get_id());
  EXPECT_EQ(rt.stats().pending, 0u) << "the timeout's sleep was not cancelled";
  EXPECT_EQ(rt.stats().cancelled, 1u);
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(out.resumes, 1) << "resumed again by the timeout";
  EXPECT_TRUE(c.done());
}

TEST_F(RuntimeWithTimeout, the_timeout_wins_never_early_and_the_awaitable_is_withdrawn) {
  Channel ch;
  Outcome out;
  Owned c = receive_with_timeout(lane, ch, out);
  advance_to(clock, rt, at(249ms));
  EXPECT_EQ(out.resumes, 0) << "timed out early";
  advance_to(clock, rt, at(250ms));
  EXPECT_EQ(out.resumes, 1);
  EXPECT_EQ(out.value, std::nullopt);
  EXPECT_EQ(out.at, at(250ms));
  EXPECT_EQ(out.thread, std::this_thread::get_id());
  EXPECT_EQ(ch.withdrawn, 1) << "the awaitable was not destroyed";
  EXPECT_FALSE(ch.waiter);
  ch.send(1);  // nobody waits any more: no resume of a destroyed frame
  EXPECT_EQ(out.resumes, 1);
  EXPECT_TRUE(c.done());
}

TEST_F(RuntimeWithTimeout, an_awaitable_ready_at_once_resumes_without_suspending_and_leaves_no_timer) {
  Channel ch;
  ch.value = 5;
  Outcome out;
  Owned c = receive_with_timeout(lane, ch, out);
  EXPECT_EQ(out.resumes, 1);
  EXPECT_EQ(out.value, 5);
  EXPECT_EQ(out.at, kStart);
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_TRUE(c.done());
}

TEST_F(RuntimeWithTimeout, the_awaitables_exception_comes_out_of_the_co_await) {
  Channel ch;
  Outcome out;
  Owned c = receive_with_timeout(lane, ch, out);
  ch.send(-1);
  EXPECT_EQ(out.resumes, 1);
  EXPECT_EQ(out.error, "negative");
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
}

Owned sleep_with_timeout(chime::Lane& lane, chime::Duration sleep, std::optional<bool>& completed, int& resumes) {
  completed = co_await chime::with_timeout(
      lane, [&] { return lane.sleep_for(sleep); }, 250ms);
  ++resumes;
}

TEST_F(RuntimeWithTimeout, a_void_awaitable_made_by_a_callable_reports_completion_or_timeout) {
  std::optional<bool> completed;
  int resumes = 0;
  Owned fast = sleep_with_timeout(lane, 100ms, completed, resumes);
  advance_to(clock, rt, at(100ms));
  EXPECT_EQ(completed, true);
  EXPECT_EQ(resumes, 1);
  advance_to(clock, rt, at(400ms));
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(rt.stats().pending, 0u);

  completed.reset();
  Owned slow = sleep_with_timeout(lane, 500ms, completed, resumes);  // from 400 ms: times out at 650 ms
  advance_to(clock, rt, at(649ms));
  EXPECT_FALSE(completed);
  advance_to(clock, rt, at(650ms));
  EXPECT_EQ(completed, false);
  EXPECT_EQ(resumes, 2);
  EXPECT_EQ(rt.stats().pending, 0u) << "the timed-out sleep was not cancelled";
  advance_to(clock, rt, at(2s));
  EXPECT_EQ(resumes, 2);
}

TEST_F(RuntimeWithTimeout, equal_dues_in_one_flush_resume_once_with_the_first_in_call_order) {
  // The timeout's sleep is scheduled before the awaitable starts, so at equal
  // dues it runs first (G28: ties in call order); the awaitable's sleep,
  // ready in the same batch, is withdrawn and never resumes anything.
  std::optional<bool> completed;
  int resumes = 0;
  Owned c = sleep_with_timeout(lane, 250ms, completed, resumes);
  advance_to(clock, rt, at(250ms));
  EXPECT_EQ(completed, false);
  EXPECT_EQ(resumes, 1);
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_TRUE(c.done());
}

// An lvalue awaitable does not compile (it would outlive its withdrawal);
// an rvalue or a callable does.
template <class A>
concept TimeoutTakes = requires(chime::Lane& l, A&& a) {
  chime::with_timeout(l, std::forward<A>(a), chime::Duration{});
};
static_assert(TimeoutTakes<Receive>);
static_assert(!TimeoutTakes<Receive&>);
static_assert(TimeoutTakes<chime::LaneSleep (*)()>);

TEST_F(RuntimeWithTimeout, destroying_the_waiting_frame_withdraws_the_awaitable_and_cancels_the_timeout) {
  Channel ch;
  Outcome out;
  std::optional<Owned> c;
  c.emplace(receive_with_timeout(lane, ch, out));
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 1u);
  c.reset();
  EXPECT_EQ(ch.withdrawn, 1);
  EXPECT_EQ(rt.stats().pending, 0u);
  advance_to(clock, rt, at(1s));
  ch.send(3);
  EXPECT_EQ(out.resumes, 0);
}

TEST_F(RuntimeWithTimeout, a_timeout_that_cannot_be_scheduled_throws_before_the_awaitable_starts) {
  Channel ch;
  Outcome out;
  rt.shutdown();
  Owned c = receive_with_timeout(lane, ch, out);
  EXPECT_EQ(out.resumes, 1);
  EXPECT_FALSE(out.error.empty());
  EXPECT_FALSE(ch.waiter) << "the awaitable was started";
}

}  // namespace
