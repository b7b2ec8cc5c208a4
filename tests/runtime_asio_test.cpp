// SPDX-License-Identifier: BSL-1.0
// chime::asio (include/chime/asio.hpp): a Lane driven by a real
// boost::asio::io_context on its own thread runs its timers there, in due
// order, never early; cancels win; stop and destruction leave no handler
// touching a destroyed object; LaneTimer and the coroutine sleeps complete on
// the io_context's thread after their due, with operation_aborted when
// cancelled. ManualClock + flush: flush from the test thread waits for the
// io_context's thread to run the lane.
#include <chime/asio.hpp>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;

// Spins (yielding) until pred() or 10 s; returns pred().
template <class Pred>
bool eventually(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!pred() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(100us);
  return pred();
}

class RuntimeAsio : public ::testing::Test {
 protected:
  struct Run {
    int tag;
    std::thread::id thread;
    chime::TimePoint due;
    chime::TimePoint now;
  };

  void SetUp() override {
    driver.emplace(io, lane);
    io_thread = std::thread([this] { io.run(); });
    io_id = io_thread.get_id();
    on_io([] {});  // the driver's first handler has run: the io thread is the lane's thread
  }
  void TearDown() override {
    if (io_thread.joinable()) {
      on_io([this] { driver.reset(); });
      io_thread.join();  // io.run() returns: nothing of the driver is left pending
    }
  }

  // Runs f on the io_context's thread and waits for it.
  template <class F>
  void on_io(F f) {
    std::promise<void> done;
    boost::asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().get();
  }

  // Schedules a lane timer at `due` that records its run.
  chime::TimerId record_at(chime::Lane& l, chime::TimePoint due, int tag) {
    return l.schedule_at(due, [this, due, tag] {
      const std::lock_guard<std::mutex> lock(mutex);
      runs.push_back({tag, std::this_thread::get_id(), due, clock.now()});
    });
  }
  std::vector<int> tags() {
    const std::lock_guard<std::mutex> lock(mutex);
    std::vector<int> out;
    for (const Run& r : runs) out.push_back(r.tag);
    return out;
  }

  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 0)};
  chime::Lane lane = rt.lane();
  boost::asio::io_context io{1};
  std::optional<chime::asio::LaneDriver> driver;
  std::thread io_thread;
  std::thread::id io_id;
  std::mutex mutex;
  std::vector<Run> runs;
};

// Every run happens on the io_context's thread, by due, at or after its due.
TEST_F(RuntimeAsio, runs_on_the_io_context_thread_in_due_order_never_early) {
  const int dues[] = {7, 3, 9, 1, 5, 3, 8};
  for (int i = 0; i < 7; ++i) record_at(lane, at(std::chrono::milliseconds(dues[i])), i);
  advance_to(clock, rt, at(4ms));
  EXPECT_EQ(tags(), (std::vector<int>{3, 1, 5}));
  advance_to(clock, rt, at(20ms));
  EXPECT_EQ(tags(), (std::vector<int>{3, 1, 5, 4, 0, 6, 2}));
  for (const Run& r : runs) {
    EXPECT_EQ(r.thread, io_id) << "run " << r.tag;
    EXPECT_GE(r.now, r.due) << "run " << r.tag << " ran early";
  }
}

// A cancel from another thread, or from a callback of the same batch, wins
// until the callback starts.
TEST_F(RuntimeAsio, a_cancel_before_the_run_starts_wins) {
  record_at(lane, at(1ms), 0);
  const chime::TimerId b = record_at(lane, at(1ms), 1);
  EXPECT_TRUE(lane.cancel(b));
  chime::TimerId d;
  bool cancelled_d = false;
  lane.schedule_at(at(2ms), [&] { cancelled_d = lane.cancel(d); });
  d = record_at(lane, at(2ms), 3);
  advance_to(clock, rt, at(5ms));
  EXPECT_TRUE(cancelled_d) << "a run in the ready queue loses to a cancel on the lane's thread";
  EXPECT_EQ(tags(), (std::vector<int>{0}));
}

// stop() from a lane callback: no wait is left, so io.run() returns; the
// lane keeps its later runs, for whichever thread runs it next.
TEST_F(RuntimeAsio, stop_from_a_callback_lets_io_run_return_and_leaves_the_lane_usable) {
  lane.schedule_at(at(1ms), [&] { driver->stop(); });
  record_at(lane, at(1ms), 1);  // same batch: runs after the stop
  record_at(lane, at(5ms), 2);
  advance_to(clock, rt, at(2ms));
  io_thread.join();  // returns only if the driver left nothing pending
  EXPECT_FALSE(driver->running());
  EXPECT_FALSE(driver->error());
  EXPECT_EQ(tags(), (std::vector<int>{1}));
  lane.run_ready();  // this thread is now the lane's thread
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(tags(), (std::vector<int>{1, 2}));
  EXPECT_EQ(runs.back().thread, std::this_thread::get_id());
}

// The driver and the lane destroyed on the io thread while the wait is
// pending: the cancelled handler runs afterwards and touches neither (ASan).
TEST_F(RuntimeAsio, driver_and_lane_destroyed_with_the_wait_pending_leave_no_handler_touching_them) {
  auto lane2 = std::make_unique<chime::Lane>(rt.lane());
  auto driver2 = std::make_unique<chime::asio::LaneDriver>(io, *lane2);
  on_io([] {});  // driver2's first handler ran: the io thread is lane2's thread
  record_at(*lane2, at(1ms), 1);
  record_at(*lane2, at(50ms), 2);
  advance_to(clock, rt, at(2ms));
  on_io([&] {
    EXPECT_TRUE(driver2->running());
    driver2.reset();
    lane2.reset();  // on its thread
  });
  on_io([] {});  // the cancelled handler ran in between
  advance_to(clock, rt, at(60ms));
  EXPECT_EQ(tags(), (std::vector<int>{1}));
  EXPECT_EQ(rt.stats().cancelled, 1u);
}

// A LaneTimer's wait completes with success on the io_context's thread, not

// A second thread running the io_context of a LaneDriver gets std::logic_error, never a lane callback.
TEST(RuntimeAsioStandalone, a_second_thread_running_the_io_context_throws_logic_error) {
  chime::Runtime rt{steady_options(0)};
  chime::Lane lane = rt.lane();
  boost::asio::io_context io;  // the default concurrency hint: built for several threads
  auto work = boost::asio::make_work_guard(io);
  chime::asio::LaneDriver driver(io, lane);
  std::mutex m;
  std::vector<std::thread::id> run_threads;
  std::atomic<int> runs{0};
  const auto record = [&] {
    const std::lock_guard<std::mutex> lock(m);
    run_threads.push_back(std::this_thread::get_id());
    ++runs;
  };
  struct Outcome {
    std::atomic<bool> threw{false};
    std::string what;
  };
  const auto run_io = [&io](Outcome& o) {
    try {
      io.run();
    } catch (const std::logic_error& e) {
      o.what = e.what();
      o.threw = true;
    }
  };
  Outcome first_outcome;
  Outcome second_outcome;
  std::thread first([&] { run_io(first_outcome); });
  const std::thread::id first_id = first.get_id();
  lane.schedule_after(0ns, record);
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));  // first is the lane's thread now
  std::thread second([&] { run_io(second_outcome); });
  // Each wake of the lane is handled by whichever thread runs Asio's reactor, and Asio hands the
  // reactor to the other thread while one runs a handler: the driver's handler reaches `second`
  // within a wake or two. Wakes are spaced so that none arrives while the handler re-arms.
  for (int i = 0; i < 1000 && !second_outcome.threw && !first_outcome.threw; ++i) {
    lane.schedule_after(1ms, record);
    std::this_thread::sleep_for(5ms);
  }
  work.reset();
  io.stop();
  first.join();
  second.join();
  EXPECT_TRUE(second_outcome.threw) << "no std::logic_error after " << runs.load() << " lane runs";
  EXPECT_FALSE(first_outcome.threw) << first_outcome.what;
  EXPECT_NE(second_outcome.what.find("a second thread runs the io_context"), std::string::npos) << second_outcome.what;
  const std::lock_guard<std::mutex> lock(m);
  for (const std::thread::id t : run_threads) EXPECT_EQ(t, first_id) << "a lane callback ran on another thread";
}

// before its expiry on the runtime's clock.
TEST_F(RuntimeAsio, lane_timer_wait_completes_on_the_io_thread_not_before_expiry) {
  std::unique_ptr<chime::asio::LaneTimer> timer;
  std::atomic<bool> done{false};
  boost::system::error_code code = boost::asio::error::would_block;
  std::thread::id thread;
  chime::TimePoint completed_at;
  on_io([&] {
    timer = std::make_unique<chime::asio::LaneTimer>(io, lane);
    timer->expires_at(at(10ms));
    timer->async_wait([&](boost::system::error_code ec) {
      code = ec;
      thread = std::this_thread::get_id();
      completed_at = clock.now();
      done = true;
    });
  });
  advance_to(clock, rt, at(9ms));
  on_io([] {});
  EXPECT_FALSE(done) << "completed before its expiry";
  advance_to(clock, rt, at(12ms));
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_FALSE(code);
  EXPECT_EQ(thread, io_id);
  EXPECT_GE(completed_at, at(10ms));
  on_io([&] {
    EXPECT_EQ(timer->cancel(), 0u) << "nothing left to cancel";
    timer.reset();
  });
}

// The driver and a LaneTimer follow the lane when its Lane is moved (G38
// lets a Lane move under its sleepers): a timer of the moved lane and the
// LaneTimer's wait both run inside io.run(), on the io thread.
TEST_F(RuntimeAsio, the_driver_and_a_lane_timer_follow_the_lane_when_its_lane_is_moved) {
  std::optional<chime::asio::LaneTimer> timer;
  std::optional<chime::Lane> moved;
  std::atomic<bool> done{false};
  boost::system::error_code code = boost::asio::error::would_block;
  on_io([&] {
    timer.emplace(io, lane);
    moved.emplace(std::move(lane));
    timer->expires_at(at(2ms));
    timer->async_wait([&](boost::system::error_code ec) {
      code = ec;
      done = true;
    });
  });
  record_at(*moved, at(1ms), 0);
  advance_to(clock, rt, at(3ms));
  EXPECT_EQ(tags(), (std::vector<int>{0}));
  EXPECT_EQ(runs.at(0).thread, io_id);
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_FALSE(code);
  on_io([&] {
    driver.reset();  // before the lane it drives
    timer.reset();
    moved.reset();
  });
  io_thread.join();  // nothing is left pending: io.run() returns
}

// cancel() completes the pending wait with operation_aborted, exactly once.
TEST_F(RuntimeAsio, lane_timer_cancel_completes_the_wait_with_operation_aborted_once) {
  std::unique_ptr<chime::asio::LaneTimer> timer;
  std::atomic<int> completions{0};
  boost::system::error_code code;
  on_io([&] {
    timer = std::make_unique<chime::asio::LaneTimer>(io, lane);
    timer->expires_after(1h);
    timer->async_wait([&](boost::system::error_code ec) {
      code = ec;
      ++completions;
    });
    EXPECT_EQ(timer->cancel(), 1u);
    EXPECT_EQ(timer->cancel(), 0u);
  });
  ASSERT_TRUE(eventually([&] { return completions.load() == 1; }));
  EXPECT_EQ(code, boost::asio::error::operation_aborted);
  advance_to(clock, rt, at(2h));
  on_io([&] { timer.reset(); });
  EXPECT_EQ(completions.load(), 1);
}

#if defined(BOOST_ASIO_HAS_CO_AWAIT)

// co_await chime::asio::sleep_for resumes the coroutine on the io_context's
// thread, at or after now + delay on the runtime's clock.
TEST_F(RuntimeAsio, sleep_for_resumes_the_coroutine_on_the_io_thread_after_its_due) {
  std::atomic<bool> suspended{false};
  std::atomic<bool> resumed{false};
  std::thread::id thread;
  chime::TimePoint resumed_at;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        suspended = true;
        co_await chime::asio::sleep_for(lane, 10ms);
        thread = std::this_thread::get_id();
        resumed_at = clock.now();
        resumed = true;
      },
      boost::asio::detached);
  ASSERT_TRUE(eventually([&] { return suspended.load(); }));
  on_io([] {});  // the sleep's timer is scheduled
  advance_to(clock, rt, at(9ms));
  on_io([] {});
  EXPECT_FALSE(resumed) << "resumed before its due";
  advance_to(clock, rt, at(12ms));
  ASSERT_TRUE(eventually([&] { return resumed.load(); }));
  EXPECT_EQ(thread, io_id);
  EXPECT_GE(resumed_at, at(10ms));
}

// A LaneTimer awaited in a coroutine, cancelled by another handler: the
// co_await throws system_error(operation_aborted), Asio's use_awaitable way.
TEST_F(RuntimeAsio, a_lane_timer_awaited_in_a_coroutine_is_cancelled_with_operation_aborted) {
  chime::asio::LaneTimer* timer = nullptr;
  std::atomic<bool> done{false};
  boost::system::error_code code;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        chime::asio::LaneTimer t(co_await boost::asio::this_coro::executor, lane);
        timer = &t;
        t.expires_after(1h);
        try {
          co_await t.async_wait(boost::asio::use_awaitable);
        } catch (const boost::system::system_error& e) {
          code = e.code();
        }
        timer = nullptr;
        done = true;
      },
      boost::asio::detached);
  on_io([] {});
  on_io([&] {
    ASSERT_NE(timer, nullptr);
    EXPECT_EQ(timer->cancel(), 1u);
  });
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_EQ(code, boost::asio::error::operation_aborted);
}

// Destroying the lane aborts its pending sleeps; the coroutine resumes on the
// io_context's thread with operation_aborted and touches the lane no more.
TEST_F(RuntimeAsio, destroying_the_lane_aborts_a_pending_sleep) {
  auto lane2 = std::make_unique<chime::Lane>(rt.lane());
  auto driver2 = std::make_unique<chime::asio::LaneDriver>(io, *lane2);
  std::atomic<bool> done{false};
  boost::system::error_code code;
  std::thread::id thread;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        try {
          co_await chime::asio::sleep_for(*lane2, 1h);
        } catch (const boost::system::system_error& e) {
          code = e.code();
          thread = std::this_thread::get_id();
        }
        done = true;
      },
      boost::asio::detached);
  on_io([] {});
  on_io([&] {
    driver2.reset();
    lane2.reset();
  });
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_EQ(code, boost::asio::error::operation_aborted);
  EXPECT_EQ(thread, io_id);
}

#endif  // BOOST_ASIO_HAS_CO_AWAIT

}  // namespace
