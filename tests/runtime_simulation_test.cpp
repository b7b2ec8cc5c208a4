// SPDX-License-Identifier: BSL-1.0
// The deterministic simulation (runtime/simulation.hpp, a test seam): a
// Runtime with no threads whose wheel-thread passes the test runs. These
// tests pin what the fuzz target fuzz/runtime_sim_fuzz.cpp relies on.
#include <gtest/gtest.h>

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "../runtime/simulation.hpp"
#include "runtime_test_support.hpp"

namespace {

using namespace std::chrono_literals;
using chime::detail::Simulation;

chime::RuntimeOptions sim_options(chime::ManualClock& clock) {
  chime::RuntimeOptions o;
  o.workers = 0;
  o.clock = &clock;
  return o;
}

// On a ManualClock nothing runs between calls, nor in a pass with no flush:
// a flush runs what is due by the clock's reading, on the calling thread.
TEST(RuntimeSimulation, runs_only_in_flushes_on_the_calling_thread) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  chime::Runtime& rt = sim.runtime();
  std::vector<std::thread::id> ran_on;
  const chime::TimerId now_due = rt.schedule_after(0ns, [&] { ran_on.push_back(std::this_thread::get_id()); });
  rt.schedule_after(5ms, [&] { ran_on.push_back(std::this_thread::get_id()); });
  EXPECT_TRUE(ran_on.empty());
  EXPECT_EQ(rt.state(now_due), chime::TimerState::pending);
  EXPECT_TRUE(sim.run_one_pass());  // applies the commands
  EXPECT_TRUE(ran_on.empty()) << "a pass with no flush ran a timer";
  rt.flush();
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on[0], std::this_thread::get_id());
  EXPECT_EQ(rt.state(now_due), chime::TimerState::fired);
  clock.advance(5ms - 1ns);
  rt.flush();
  EXPECT_EQ(ran_on.size(), 1u);  // due at 5 ms: not before
  clock.advance(1ns);
  EXPECT_FALSE(ran_on.size() == 2u);  // the clock moved, but no flush ran
  rt.flush();
  EXPECT_EQ(ran_on.size(), 2u);
  EXPECT_FALSE(sim.run_one_pass());  // nothing left to do
}

// A cancel between passes always wins: the simulation has no race to lose.
TEST(RuntimeSimulation, cancel_before_the_pass_prevents_the_run) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  int runs = 0;
  const chime::TimerId id = sim.runtime().schedule_after(0ns, [&] { ++runs; });
  EXPECT_TRUE(sim.runtime().cancel(id));
  sim.run_until_idle();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(sim.runtime().stats().cancelled, 1u);
}

// flush(), drain() and shutdown() run the passes they wait for, on the calling thread.
TEST(RuntimeSimulation, flush_drain_and_shutdown_run_their_passes) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  chime::Runtime& rt = sim.runtime();
  int runs = 0;
  rt.schedule_after(1s, [&] { ++runs; });
  rt.schedule_after(2s, [&] { ++runs; });
  rt.schedule_after(3s, [&] { ++runs; });
  clock.advance(1500ms);
  rt.flush();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(rt.drain(), 2u);  // the two still pending, early
  EXPECT_EQ(runs, 3);
  rt.schedule_after(1s, [&] { ++runs; });
  rt.schedule_after(2s, [&] { ++runs; });
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 2u);
  EXPECT_EQ(runs, 3);
  EXPECT_FALSE(sim.run_one_pass());
}

// A periodic catch_up timer behind the clock runs each due run at the flush,
// none in a pass with no flush.
TEST(RuntimeSimulation, catch_up_runs_each_due_run_at_the_flush) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  std::vector<std::uint64_t> dues;
  sim.runtime().schedule_every(
      10ms,
      [&](const chime::Firing& f) { dues.push_back(static_cast<std::uint64_t>(f.due.time_since_epoch().count())); },
      {.first_due = {}, .on_missed = chime::Missed::catch_up});
  clock.advance(35ms);
  EXPECT_TRUE(sim.run_one_pass());
  EXPECT_TRUE(dues.empty()) << "a pass with no flush ran a timer";
  sim.runtime().flush();
  EXPECT_EQ(dues, (std::vector<std::uint64_t>{10'000'000, 20'000'000, 30'000'000}));
}

// A lane's runs are handed over only for a flush, which on the lane's
// thread runs the lane between its passes: a pass with no flush hands over
// nothing.
TEST(RuntimeSimulation, lane_runs_run_in_the_flush_on_the_lanes_thread) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  chime::Lane lane = sim.runtime().lane();
  int runs = 0;
  const chime::TimerId id = lane.schedule_after(0ns, [&] { ++runs; });
  EXPECT_TRUE(sim.run_one_pass());
  EXPECT_EQ(lane.run_ready(), 0u) << "a pass with no flush handed a run to the lane";
  EXPECT_EQ(lane.state(id), chime::TimerState::pending);
  sim.runtime().flush();  // on the lane's thread: runs the lane between passes
  EXPECT_EQ(runs, 1);
  lane.schedule_after(0ns, [&] { ++runs; });
  sim.runtime().flush();
  EXPECT_EQ(runs, 2);
}

// A Timer re-armed due now from its own callback: the flush runs each re-arm
// too, since each is due by its reading.
TEST(RuntimeSimulation, timer_rearmed_from_its_callback) {
  chime::ManualClock clock;
  Simulation sim(sim_options(clock));
  int runs = 0;
  chime::Timer t;
  t = chime::Timer(sim.runtime(), [&] {
    if (++runs < 3) t.arm_after(0ns);
  });
  t.arm_after(0ns);
  sim.runtime().flush();
  EXPECT_EQ(runs, 3);
}

// Same calls, same runs: two simulations driven alike fire the same timers at the same times in the same order.
TEST(RuntimeSimulation, same_calls_give_the_same_runs) {
  using Log = std::vector<std::tuple<int, std::int64_t, std::int64_t>>;
  auto drive = [] {
    chime::ManualClock clock;
    Simulation sim(sim_options(clock));
    Log log;
    for (int i = 0; i < 64; ++i) {
      sim.runtime().schedule_after(std::chrono::microseconds((i * 7919) % 5000), [&log, i](const chime::Firing& f) {
        log.emplace_back(i, f.due.time_since_epoch().count(), f.fired_at.time_since_epoch().count());
      });
      if (i % 5 == 0) {
        clock.advance(300us);
        sim.run_one_pass();
      }
    }
    clock.advance(10ms);
    sim.runtime().flush();
    return log;
  };
  const Log a = drive();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, drive());
}

// Callbacks run inside the passes, so a simulation has no workers.
TEST(RuntimeSimulation, refuses_workers) {
  chime::ManualClock clock;
  chime::RuntimeOptions o = sim_options(clock);
  o.workers = 1;
  EXPECT_THROW({ Simulation refused(o); }, std::invalid_argument);
  Simulation ok(sim_options(clock));  // the refused request does not leak into the next construction
  chime::Runtime plain({.workers = 0, .clock = &clock});  // nor into a Runtime made afterwards: it has its thread
  int runs = 0;
  plain.schedule_after(0ns, [&] { ++runs; });
  plain.flush();
  EXPECT_EQ(runs, 1);
}

}  // namespace

// A reschedule that makes a timer due now by its call's clock runs it at the
// next flush even when its command is applied before the timer's ADD: the
// ADD through a Producer and the reschedule through the Runtime travel on
// two queues, whose order the wheel thread does not see. (Before: the
// RESCHEDULE was dropped, the ADD judged by its own older clock reading, and
// the timer waited for its interval: finding 13 of docs/fuzzing.md.)
TEST(RuntimeSimulation, a_reschedule_to_due_now_applied_before_its_add_runs_at_the_flush) {
  for (const bool via_producer : {true, false}) {
    chime::ManualClock clock;
    Simulation sim(sim_options(clock));
    chime::Runtime& rt = sim.runtime();
    chime::Producer producer = rt.producer();
    int runs = 0;
    const chime::TimePoint t = clock.now() + 1500us;
    const chime::TimerId id =
        via_producer ? producer.schedule_at(t, [&] { ++runs; }) : rt.schedule_at(t, [&] { ++runs; });
    clock.set(t);
    EXPECT_TRUE(rt.reschedule_at(id, t));  // due now by this call's clock reading
    rt.flush();
    EXPECT_EQ(runs, 1) << (via_producer ? "ADD through a Producer, RESCHEDULE through the Runtime"
                                        : "both through the Runtime");
    EXPECT_EQ(rt.state(id), chime::TimerState::fired);
  }
}

// A burst due at once leaves the wheel at most 4,096 alarms a pass
// (tuning.hpp, CHIME_RUNS_PER_PASS): between two batches the wheel thread
// applies what was posted, and the runs not yet claimed stay Pending. Over
// the passes they run once each, in due order, none before its due.
namespace burst {
constexpr std::size_t kRunsPerPass = 4096;
constexpr std::size_t kTimers = 2 * kRunsPerPass + 100;

struct Burst {
  Burst() : clock(chime_test::kStart), sim(chime_test::settable_options(clock, 0)) {
    for (std::size_t i = 0; i < kTimers; ++i) {
      const chime::TimePoint due = chime_test::kStart + 1ms + std::chrono::nanoseconds(static_cast<std::int64_t>(i));
      ids.push_back(sim.runtime().schedule_at(due, [this](const chime::Firing& f) {
        dues.push_back(f.due);
        early += f.due > clock.now() ? 1 : 0;
      }));
    }
    sim.run_one_pass();                    // files them in the wheel: none is due yet
    clock.set(chime_test::kStart + 10ms);  // every timer is due
  }
  // Runs one pass; returns how many callbacks it ran.
  std::size_t pass() {
    const std::size_t before = dues.size();
    sim.run_one_pass();
    return dues.size() - before;
  }
  chime_test::SettableClock clock;
  Simulation sim;
  std::vector<chime::TimerId> ids;
  std::vector<chime::TimePoint> dues;
  std::size_t early = 0;
};
}  // namespace burst

TEST(RuntimeSimulation, a_burst_due_at_once_runs_at_most_4096_a_pass_in_due_order) {
  burst::Burst b;
  std::vector<std::size_t> per_pass;
  for (int k = 0; k < 8 && b.dues.size() < burst::kTimers; ++k) per_pass.push_back(b.pass());
  ASSERT_EQ(b.dues.size(), burst::kTimers) << "the burst did not run whole within 8 passes";
  ASSERT_GE(per_pass.size(), 3u) << "8,292 runs in fewer than 3 passes: more than 4,096 in one";
  for (const std::size_t n : per_pass) EXPECT_LE(n, burst::kRunsPerPass) << "one pass ran more than its budget";
  EXPECT_TRUE(std::is_sorted(b.dues.begin(), b.dues.end())) << "the burst's runs left due order across passes";
  EXPECT_EQ(b.early, 0u);
  const chime::Stats s = b.sim.runtime().stats();
  EXPECT_EQ(s.fired, burst::kTimers);
  EXPECT_EQ(s.pending, 0u);
}

TEST(RuntimeSimulation, a_cancel_between_a_bursts_passes_wins_for_the_runs_not_yet_claimed) {
  burst::Burst b;
  ASSERT_EQ(b.pass(), burst::kRunsPerPass) << "the first pass did not claim a full budget";
  // The latest-due timer is not claimed yet: its cancel wins, and it never runs.
  EXPECT_EQ(b.sim.runtime().state(b.ids.back()), chime::TimerState::pending);
  EXPECT_TRUE(b.sim.runtime().cancel(b.ids.back()));
  b.sim.run_until_idle();
  EXPECT_EQ(b.dues.size(), burst::kTimers - 1);
  EXPECT_EQ(b.sim.runtime().stats().cancelled, 1u);
  EXPECT_EQ(b.sim.runtime().stats().pending, 0u);
}
