// SPDX-License-Identifier: BSL-1.0
// chime::uv (include/chime/uv.hpp): a Lane driven by a real libuv loop
// (uv_run on its own thread) runs its timers there, in due order, never
// early; cancels win; close() from a callback lets uv_run return, and the
// close callback frees the handle (uv_loop_close succeeds; ASan sees no
// leak). ManualClock + flush: flush from the test thread waits for the
// loop's thread to run the lane.
#include <chime/uv.hpp>

#include <uv.h>

#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;

class RuntimeUv : public ::testing::Test {
 protected:
  struct Run {
    int tag;
    std::thread::id thread;
    chime::TimePoint due;
    chime::TimePoint now;
  };

  void SetUp() override {
    ASSERT_EQ(uv_loop_init(&loop), 0);
    async.data = this;
    ASSERT_EQ(uv_async_init(&loop, &async, &on_async), 0);
    driver.emplace(&loop, lane);
    loop_thread = std::thread([this] { uv_run(&loop, UV_RUN_DEFAULT); });
    loop_id = loop_thread.get_id();
    on_loop([this] { lane.run_ready(); });  // the loop's thread is the lane's thread
  }
  void TearDown() override {
    if (loop_thread.joinable()) {
      on_loop([this] {
        driver.reset();
        uv_close(reinterpret_cast<uv_handle_t*>(&async), nullptr);
      });
      loop_thread.join();  // uv_run returns: no handle is left active
    }
    EXPECT_EQ(uv_loop_close(&loop), 0) << "a handle was not closed";
  }

  // Runs f on the loop's thread (through the uv_async_t) and waits for it.
  void on_loop(std::function<void()> f) {
    std::promise<void> done;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      jobs.push_back([&] {
        f();
        done.set_value();
      });
    }
    uv_async_send(&async);
    done.get_future().get();
  }
  static void on_async(uv_async_t* handle) {
    auto* self = static_cast<RuntimeUv*>(handle->data);
    std::vector<std::function<void()>> posted;  // the jobs posted to the loop thread so far
    {
      const std::lock_guard<std::mutex> lock(self->mutex);
      posted.swap(self->jobs);
    }
    for (auto& job : posted) job();
  }

  chime::TimerId record_at(chime::TimePoint due, int tag) {
    return lane.schedule_at(due, [this, due, tag] {
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
  uv_loop_t loop{};
  uv_async_t async{};
  std::optional<chime::uv::LaneDriver> driver;
  std::thread loop_thread;
  std::thread::id loop_id;
  std::mutex mutex;
  std::vector<std::function<void()>> jobs;
  std::vector<Run> runs;
};

// Every run happens on the loop's thread, by due, at or after its due.
TEST_F(RuntimeUv, runs_on_the_loop_thread_in_due_order_never_early) {
  const int dues[] = {7, 3, 9, 1, 5, 3, 8};
  for (int i = 0; i < 7; ++i) record_at(at(std::chrono::milliseconds(dues[i])), i);
  advance_to(clock, rt, at(4ms));
  EXPECT_EQ(tags(), (std::vector<int>{3, 1, 5}));
  advance_to(clock, rt, at(20ms));
  EXPECT_EQ(tags(), (std::vector<int>{3, 1, 5, 4, 0, 6, 2}));
  for (const Run& r : runs) {
    EXPECT_EQ(r.thread, loop_id) << "run " << r.tag;
    EXPECT_GE(r.now, r.due) << "run " << r.tag << " ran early";
  }
}

// A cancel from another thread, or from a callback of the same batch, wins
// until the callback starts.
TEST_F(RuntimeUv, a_cancel_before_the_run_starts_wins) {
  record_at(at(1ms), 0);
  EXPECT_TRUE(lane.cancel(record_at(at(1ms), 1)));
  chime::TimerId d;
  bool cancelled_d = false;
  lane.schedule_at(at(2ms), [&] { cancelled_d = lane.cancel(d); });
  d = record_at(at(2ms), 3);
  advance_to(clock, rt, at(5ms));
  EXPECT_TRUE(cancelled_d) << "a run in the ready queue loses to a cancel on the lane's thread";
  EXPECT_EQ(tags(), (std::vector<int>{0}));
}

// The driver follows the lane when its Lane is moved (G38 lets a Lane move
// under its sleepers): a timer of the moved lane runs inside uv_run, on the
// loop's thread.
TEST_F(RuntimeUv, the_driver_follows_the_lane_when_its_lane_is_moved) {
  std::optional<chime::Lane> moved;
  on_loop([&] { moved.emplace(std::move(lane)); });
  moved->schedule_at(at(1ms), [this] {
    const std::lock_guard<std::mutex> lock(mutex);
    runs.push_back({0, std::this_thread::get_id(), at(1ms), clock.now()});
  });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(tags(), (std::vector<int>{0}));
  EXPECT_EQ(runs.at(0).thread, loop_id);
  EXPECT_EQ(driver->failure(), nullptr);
  on_loop([&] {
    driver.reset();  // before the lane it drives
    moved.reset();
  });
}

// close() from a lane callback stops the poll at once; the close callback
// frees the handle on the loop's next iteration, so uv_run returns once the
// test's own handle is closed and uv_loop_close finds nothing open. The lane
// keeps its later runs, for whichever thread runs it next.
TEST_F(RuntimeUv, close_from_a_callback_lets_uv_run_return_and_leaves_the_lane_usable) {
  lane.schedule_at(at(1ms), [&] { driver->close(); });
  record_at(at(1ms), 1);  // same batch: runs after the close
  record_at(at(5ms), 2);
  advance_to(clock, rt, at(2ms));
  on_loop([&] {
    EXPECT_FALSE(driver->running());
    driver.reset();
    uv_close(reinterpret_cast<uv_handle_t*>(&async), nullptr);
  });
  loop_thread.join();
  EXPECT_EQ(tags(), (std::vector<int>{1}));
  lane.run_ready();  // this thread is now the lane's thread
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(tags(), (std::vector<int>{1, 2}));
  EXPECT_EQ(runs.back().thread, std::this_thread::get_id());
}

// The Runtime destroyed while a LaneDriver still polls its lane (a misuse:
// the Runtime outlives the Lane and its driver): the driver polls a
// duplicate of the lane's eventfd, so libuv never polls a closed fd (it
// called abort() inside uv_run), and the Runtime's end wakes the poll,
// whose run_ready throws std::logic_error: the driver keeps it for the
// caller (failure()), stops the poll and makes uv_run return.
TEST(RuntimeUvStandalone, a_runtime_destroyed_before_the_driver_is_reported_as_a_logic_error) {
  uv_loop_t loop{};
  ASSERT_EQ(uv_loop_init(&loop), 0);
  chime::ManualClock clock{kStart};
  auto rt = std::make_unique<chime::Runtime>(manual_options(clock, 0));
  chime::Lane lane = rt->lane();
  {
    chime::uv::LaneDriver driver(&loop, lane);
    rt.reset();
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_TRUE(driver.failure()) << "uv_run returned without the driver reporting the misuse";
    try {
      std::rethrow_exception(driver.failure());
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("after its Runtime was destroyed"), std::string::npos) << e.what();
    }
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // the close callback frees the handle and closes the duplicate
  EXPECT_EQ(uv_loop_close(&loop), 0) << "a handle was not closed";
}

// A move hands the handle over: the moved-from driver closes nothing, the
// moved-to one closes it once (uv_loop_close in TearDown finds all closed),
// and a new driver on the same lane takes over.
TEST_F(RuntimeUv, a_driver_moved_and_destroyed_closes_one_handle) {
  on_loop([&] {
    chime::uv::LaneDriver moved(std::move(*driver));
    EXPECT_FALSE(driver->running());
    EXPECT_TRUE(moved.running());
  });  // `moved` closed here; *driver is empty
  record_at(at(1ms), 1);
  on_loop([&] { driver.emplace(&loop, lane); });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(tags(), (std::vector<int>{1}));
}

}  // namespace
