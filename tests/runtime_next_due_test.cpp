// SPDX-License-Identifier: BSL-1.0
// Runtime::next_due and the simulation steps on a ManualClock
// (runtime.hpp: next_due, advance_to_next, run_until, run_until_idle; G28):
// - next_due is the earliest due of a pending timer over every shard and
//   lane, after the commands posted before the call, its later due once
//   touched, and std::nullopt when nothing is pending;
// - advance_to_next moves the clock to that due and flushes; a timer a
//   callback schedules at the current reading runs in the same step;
// - run_until(t) steps to t, run_until_idle until nothing is pending;
// - the same calls give the same log, run after run;
// - the steps need a ManualClock, and the errors name the values.

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::ManualClock;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime_test::at;
using chime_test::kStart;
using chime_test::manual_options;

TEST(RuntimeNextDue, is_the_earliest_pending_due_over_every_shard_and_lane) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.shards = 2;
  Runtime rt(options);
  EXPECT_EQ(rt.next_due(), std::nullopt) << "nothing pending";
  chime::Producer p0 = rt.producer();
  chime::Producer p1 = rt.producer();  // the other shard
  chime::Lane lane = rt.lane();
  const TimerId a = p0.schedule_at(at(30ms), [] {});
  const TimerId b = p1.schedule_at(at(20ms), [] {});
  const TimerId c = lane.schedule_at(at(10ms), [] {});
  EXPECT_EQ(rt.next_due(), at(10ms));
  ASSERT_TRUE(rt.cancel(c));
  EXPECT_EQ(rt.next_due(), at(20ms)) << "a cancelled timer is not pending";
  ASSERT_TRUE(rt.reschedule_at(b, at(40ms)));  // a touch: no command
  EXPECT_EQ(rt.next_due(), at(30ms)) << "a touched timer counts at its later due";
  ASSERT_TRUE(rt.reschedule_at(b, at(5ms)));
  EXPECT_EQ(rt.next_due(), at(5ms));
  ASSERT_TRUE(rt.cancel(a));
  ASSERT_TRUE(rt.cancel(b));
  EXPECT_EQ(rt.next_due(), std::nullopt);
  const TimerId d = p1.schedule_at(at(7ms), [] {});
  rt.shutdown();
  EXPECT_EQ(rt.next_due(), std::nullopt) << "after shutdown nothing is pending";
  (void)d;
}

// A schedule another thread made before the call (joined: happens-before)
// counts, though its command may still be queued.
TEST(RuntimeNextDue, sees_what_other_threads_scheduled_before_the_call) {
  ManualClock clock{kStart};
  Runtime rt(manual_options(clock, 0));
  std::thread([&] {
    chime::Producer p = rt.producer();
    for (int i = 0; i < 1000; ++i) p.schedule_at(at(std::chrono::milliseconds(1000 - i)), [] {});
  }).join();
  EXPECT_EQ(rt.next_due(), at(1ms));
}

TEST(RuntimeNextDue, advance_to_next_moves_the_clock_to_each_due_and_runs_what_is_due) {
  ManualClock clock{kStart};
  Runtime rt(manual_options(clock, 1));
  std::vector<std::string> log;
  std::mutex m;
  auto record = [&](std::string what) {
    return [&, what](const chime::Firing& f) {
      std::lock_guard<std::mutex> lock(m);
      log.push_back(what + "@" + std::to_string((f.fired_at - kStart) / 1ms));
    };
  };
  rt.schedule_at(at(10ms), record("B"));
  rt.schedule_at(at(5ms), record("A"));
  rt.schedule_at(at(10ms), record("C"));
  EXPECT_EQ(rt.advance_to_next(), at(5ms));
  EXPECT_EQ(clock.now(), at(5ms));
  EXPECT_EQ(log, (std::vector<std::string>{"A@5"}));
  EXPECT_EQ(rt.advance_to_next(), at(10ms));
  EXPECT_EQ(log, (std::vector<std::string>{"A@5", "B@10", "C@10"}));
  EXPECT_EQ(rt.advance_to_next(), std::nullopt) << "nothing pending: no step";
  EXPECT_EQ(clock.now(), at(10ms));
}

// A callback that schedules a timer due at the current reading (or
// before it): it runs in the same step, after the ties called before it.
TEST(RuntimeNextDue, a_timer_scheduled_at_the_current_reading_runs_in_the_same_step) {
  for (unsigned workers : {0u, 2u}) {
    SCOPED_TRACE(workers);
    ManualClock clock{kStart};
    Runtime rt(manual_options(clock, workers));
    std::vector<int> log;
    rt.schedule_at(at(5ms), [&] {
      log.push_back(1);
      rt.schedule_at(clock.now(), [&] { log.push_back(3); });
    });
    rt.schedule_at(at(5ms), [&] { log.push_back(2); });
    EXPECT_EQ(rt.advance_to_next(), at(5ms));
    EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(rt.next_due(), std::nullopt);
  }
}

TEST(RuntimeNextDue, run_until_steps_through_every_due_then_sets_the_clock_to_t) {
  ManualClock clock{kStart};
  Runtime rt(manual_options(clock, 1));
  std::atomic<int> ticks{0};
  std::vector<TimePoint> fired_at;
  const TimerId tick = rt.schedule_every(3ms, [&] { ticks.fetch_add(1); });
  rt.schedule_at(at(4ms), [&](const chime::Firing& f) { fired_at.push_back(f.fired_at); });
  const std::size_t steps = rt.run_until(at(10ms));
  // Dues 3, 4, 6, 9 ms, then the flush at 10 ms.
  EXPECT_EQ(steps, 5u);
  EXPECT_EQ(ticks.load(), 3);
  EXPECT_EQ(fired_at, (std::vector<TimePoint>{at(4ms)})) << "each step flushes at the due it moved to";
  EXPECT_EQ(clock.now(), at(10ms));
  EXPECT_EQ(rt.next_due(), at(12ms));
  EXPECT_TRUE(rt.cancel(tick));
  EXPECT_EQ(rt.run_until_idle(), 0u);
}

// A retry with exponential backoff, driven to its end: the same log in
// every run, with two workers.
TEST(RuntimeNextDue, run_until_idle_drives_a_simulation_to_its_end_with_the_same_log_every_run) {
  std::vector<std::string> first;
  for (int rep = 0; rep < 10; ++rep) {
    ManualClock clock{kStart};
    Runtime rt(manual_options(clock, 2));
    std::vector<std::string> log;
    std::mutex m;
    auto note = [&](const std::string& s) {
      std::lock_guard<std::mutex> lock(m);
      log.push_back(std::to_string((clock.now() - kStart) / 1ms) + " " + s);
    };
    std::vector<std::shared_ptr<std::function<void(int)>>> attempts;
    for (int client = 0; client < 3; ++client) {
      auto attempt = std::make_shared<std::function<void(int)>>();
      attempts.push_back(attempt);
      *attempt = [&, client, attempt](int n) {
        note("client " + std::to_string(client) + " attempt " + std::to_string(n));
        if (n < 4) rt.schedule_after(Duration(1ms) * (1 << n), [attempt, n] { (*attempt)(n + 1); });
      };
      rt.schedule_after(1ms, [attempt] { (*attempt)(0); });
    }
    const std::size_t steps = rt.run_until_idle();
    for (const auto& attempt : attempts) *attempt = nullptr;  // each held itself
    EXPECT_EQ(steps, 5u) << "dues 1, 2, 4, 8, 16 ms: the clients' attempts tie";
    EXPECT_EQ(log.size(), 15u);
    EXPECT_EQ(clock.now(), at(16ms));
    if (rep == 0) {
      first = log;
      EXPECT_EQ(log.front(), "1 client 0 attempt 0");
      EXPECT_EQ(log.back(), "16 client 2 attempt 4");
    } else {
      ASSERT_EQ(log, first) << "repetition " << rep;
    }
  }
}

TEST(RuntimeNextDue, run_until_idle_stops_after_max_steps_with_a_periodic_timer) {
  ManualClock clock{kStart};
  Runtime rt(manual_options(clock, 0));
  rt.schedule_every(1ms, [] {});
  EXPECT_EQ(rt.run_until_idle(50), 50u);
  EXPECT_EQ(clock.now(), at(50ms));
}

TEST(RuntimeNextDue, the_steps_need_a_manual_clock_and_name_what_is_wrong) {
  Runtime rt(chime_test::steady_options(0));
  try {
    rt.advance_to_next();
    FAIL() << "advance_to_next on the steady clock did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("advance_to_next"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a ManualClock"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.run_until(rt.clock().now() + 1ms), std::logic_error);
  EXPECT_THROW(rt.run_until_idle(), std::logic_error);
  EXPECT_EQ(rt.next_due(), std::nullopt) << "next_due works on every clock";
  rt.schedule_after(1h, [] {});
  EXPECT_TRUE(rt.next_due().has_value());

  ManualClock clock{kStart + 1s};
  Runtime manual(manual_options(clock, 0));
  try {
    manual.run_until(kStart);
    FAIL() << "run_until before the clock's reading did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(kStart.time_since_epoch().count())), std::string::npos)
        << e.what();
  }
}

TEST(RuntimeNextDue, next_due_from_a_callback_throws) {
  ManualClock clock{kStart};
  Runtime rt(manual_options(clock, 1));
  std::string error;
  rt.schedule_at(at(1ms), [&] {
    try {
      (void)rt.next_due();
    } catch (const std::logic_error& e) {
      error = e.what();
    }
  });
  rt.run_until_idle();
  EXPECT_NE(error.find("next_due"), std::string::npos) << error;
}

}  // namespace
