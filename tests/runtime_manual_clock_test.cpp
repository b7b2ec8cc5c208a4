// SPDX-License-Identifier: BSL-1.0
// A ManualClock (design.md, "Clocks"): callbacks run only inside flush()
// (and drain() and shutdown(fire_pending), which begin with one), never
// between calls. A flush applies every command posted before it, then runs
// every timer whose due is at or before the clock's reading at the flush, in
// due order (ties in the order of their calls), with Firing::fired_at equal
// to that reading. No slack, no interval rule. Periodic timers at a flush
// with reading c: Missed::skip coalesces the runs due at or before c into
// one whose due is the latest of them (missed counts the others); catch_up
// runs each. So which timers run, in which order, with which due, missed
// and fired_at, depends only on the sequence of calls, from one thread or
// several.
#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "../runtime/simulation.hpp"

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Firing;
using chime::ManualClock;
using chime::Missed;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;

class RuntimeManualClock : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeManualClock, testing::Values(0u, 1u, 2u), workers_name);

// Timers due now, past due, and a periodic timer whose first due has
// passed: none runs between calls, however long the test waits and whether
// or not the clock moves; the next flush runs them all.
TEST_P(RuntimeManualClock, nothing_runs_between_calls_only_inside_flush) {
  advance_to(clock, rt, at(10ms));
  rt.schedule_after(Duration::zero(), rec.task(1));        // due now
  rt.schedule_at(at(2ms), rec.task(2));                    // past due
  rt.schedule_every(3ms, rec.task(3), first_at(at(1ms)));  // first due passed
  chime::Producer producer = rt.producer();
  producer.schedule_at(at(10ms), rec.task(4));  // due now, through a Producer
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rec.count(), 0u) << "a timer ran between calls";
  clock.advance(5ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rec.count(), 0u) << "a timer ran between calls after the clock moved";
  rt.flush();
  EXPECT_EQ(rec.count(), 4u);
  for (const RunRecord& r : rec.runs()) EXPECT_EQ(r.firing.fired_at, at(15ms)) << "tag " << r.tag;
}

// Every run of a flush has the flush's reading as fired_at, whatever its due.
TEST_P(RuntimeManualClock, fired_at_is_the_flushs_reading) {
  rt.schedule_at(at(3ms), rec.task(1));
  rt.schedule_at(at(5ms) + 1ns, rec.task(2));
  rt.schedule_at(at(7ms), rec.task(3));
  rt.schedule_at(at(7ms) + 1ns, rec.task(4));
  clock.set(at(7ms));
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 3u);
  for (const RunRecord& r : runs) {
    EXPECT_EQ(r.firing.fired_at, at(7ms)) << "tag " << r.tag;
    EXPECT_LE(r.firing.due, r.firing.fired_at) << "tag " << r.tag;
  }
  clock.set(at(7ms) + 1ns);
  rt.flush();
  ASSERT_EQ(rec.count(), 4u);
  EXPECT_EQ(rec.runs()[3].firing.fired_at, at(7ms) + 1ns);
}

// One flush runs its timers in due order, ties in the order of their calls
// (workers = 0 and 1 run them in the order they go out), whether they were
// filed in the wheel before the clock moved or posted just before the flush.
TEST(RuntimeManualClock, a_flush_runs_timers_in_due_order_ties_in_call_order) {
  for (const unsigned workers : {0u, 1u}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    ManualClock clock{kStart};
    Recorder rec{&clock};
    Runtime rt{manual_options(clock, workers)};
    std::mt19937 rng(7);
    std::vector<std::pair<TimePoint, int>> expected;  // (due, call index)
    for (int i = 0; i < 300; ++i) {
      // Dues over 3 intervals and before the start, many equal.
      const TimePoint due = at(std::chrono::microseconds(static_cast<int>(rng() % 40) * 100 - 1000));
      rt.schedule_at(due, rec.task(i));
      expected.emplace_back(due, i);
      if (i == 150) rt.flush();  // half filed at the old reading (the past-due ones run here)
    }
    std::vector<std::pair<TimePoint, int>> ran_first;
    for (const RunRecord& r : rec.runs()) ran_first.emplace_back(r.firing.due, r.tag);
    clock.set(at(3ms));
    rt.flush();
    const auto runs = rec.runs();
    ASSERT_EQ(runs.size(), expected.size());
    // The first flush ran the first 151 calls' timers due by kStart, in order; the second the rest.
    std::vector<std::pair<TimePoint, int>> first, second;
    for (const auto& e : expected) (e.second <= 150 && e.first <= kStart ? first : second).push_back(e);
    std::stable_sort(first.begin(), first.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::stable_sort(second.begin(), second.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    EXPECT_EQ(ran_first, first);
    std::vector<std::pair<TimePoint, int>> ran_second;
    for (std::size_t i = first.size(); i < runs.size(); ++i) ran_second.emplace_back(runs[i].firing.due, runs[i].tag);
    EXPECT_EQ(ran_second, second);
  }
}

// A periodic timer whose first due has passed runs once at the flush with
// Missed::skip: due the latest run due by the reading, missed the others.
// A run due exactly at the reading counts.
TEST_P(RuntimeManualClock, periodic_skip_with_passed_first_due_runs_once_missed_the_others) {
  advance_to(clock, rt, at(95ms));
  rt.schedule_every(10ms, rec.task(), first_at(at(55ms)));  // due 55, 65, 75, 85, 95 by the reading
  rt.flush();
  auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].firing.due, at(95ms));
  EXPECT_EQ(runs[0].firing.missed, 4u);
  EXPECT_EQ(runs[0].firing.fired_at, at(95ms));
  advance_to(clock, rt, at(105ms) - 1ns);
  EXPECT_EQ(rec.count(), 1u);
  advance_to(clock, rt, at(105ms));
  runs = rec.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].firing.due, at(105ms));
  EXPECT_EQ(runs[1].firing.missed, 0u);
}

// The same with Missed::catch_up: each run due by the reading runs at that
// flush, in order, missed 0, fired_at the reading.
TEST_P(RuntimeManualClock, periodic_catch_up_with_passed_first_due_runs_each_at_the_flush) {
  advance_to(clock, rt, at(95ms));
  rt.schedule_every(10ms, rec.task(), first_at(at(55ms), Missed::catch_up));
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 5u);
  for (std::size_t n = 0; n < runs.size(); ++n) {
    EXPECT_EQ(runs[n].firing.due, at(55ms + static_cast<int>(n) * 10ms)) << "run " << n;
    EXPECT_EQ(runs[n].firing.missed, 0u) << "run " << n;
    EXPECT_EQ(runs[n].firing.fired_at, at(95ms)) << "run " << n;
  }
}

// drain() begins with a flush: a timer due by the clock's reading runs on
// time (fired_at the reading, counted in the lateness histogram, not in
// drain()'s count); the others are drained, early.
TEST_P(RuntimeManualClock, drain_begins_with_a_flush_due_timers_run_on_time) {
  advance_to(clock, rt, at(10ms));
  rt.schedule_at(at(5ms), rec.task(1));   // past due
  rt.schedule_at(at(10ms), rec.task(2));  // due at the reading
  rt.schedule_at(at(20ms), rec.task(3));  // not due: drained
  rt.schedule_at(at(30ms), rec.task(4));  // not due: drained
  EXPECT_EQ(rt.drain(), 2u);
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 4u);
  for (const RunRecord& r : runs) {
    EXPECT_EQ(r.firing.fired_at, at(10ms)) << "tag " << r.tag;
    EXPECT_EQ(r.firing.due, at(r.tag == 1 ? 5ms : r.tag == 2 ? 10ms : r.tag == 3 ? 20ms : 30ms)) << "tag " << r.tag;
  }
  for (int tag = 1; tag <= 4; ++tag) EXPECT_EQ(rec.count(tag), 1u) << "tag " << tag;
  EXPECT_EQ(rt.stats().lateness.count, 2u) << "the runs due by the reading are not drained runs";
  EXPECT_EQ(rt.stats().fired, 4u);
}

// shutdown(fire_pending) begins with a flush too: the timers due by the
// reading run on time (in the lateness histogram), the others early.
TEST_P(RuntimeManualClock, shutdown_fire_pending_begins_with_a_flush_due_timers_run_on_time) {
  advance_to(clock, rt, at(10ms));
  rt.schedule_at(at(5ms), rec.task(1));
  rt.schedule_every(4ms, rec.task(2), first_at(at(1ms)));  // due 1, 5, 9 by the reading: one run, missed 2
  rt.schedule_at(at(20ms), rec.task(3));
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::fire_pending), 0u);
  // The periodic timer: its on-time run (due 9, missed 2), then its next run (due 13), early.
  std::vector<Firing> periodic;
  for (const RunRecord& r : rec.runs()) {
    if (r.tag == 2) periodic.push_back(r.firing);
  }
  ASSERT_EQ(periodic.size(), 2u);
  EXPECT_EQ(periodic[0].due, at(9ms));
  EXPECT_EQ(periodic[0].missed, 2u);
  EXPECT_EQ(periodic[0].fired_at, at(10ms));
  EXPECT_EQ(periodic[1].due, at(13ms));
  EXPECT_EQ(rt.stats().lateness.count, 2u) << "the runs due by the reading are not drained runs";
  EXPECT_EQ(rec.count(1), 1u);
  EXPECT_EQ(rec.count(3), 1u);
}

// Slack does not apply on a manual clock: with a slack below the precision,
// or none, a timer runs at the flush whose reading reaches its due.
TEST(RuntimeManualClock, slack_does_not_change_which_flush_runs_a_timer) {
  for (const Duration slack : {Duration::zero(), Duration(1ns), Duration(500us)}) {
    ManualClock clock{kStart};
    Recorder rec{&clock};
    chime::RuntimeOptions o = manual_options(clock, 1);
    o.slack = slack;
    Runtime rt{o};
    rt.schedule_at(at(2ms + 300us), rec.task());
    advance_to(clock, rt, at(2ms + 300us) - 1ns);
    EXPECT_EQ(rec.count(), 0u) << "slack " << slack.count();
    advance_to(clock, rt, at(2ms + 300us));
    EXPECT_EQ(rec.count(), 1u) << "slack " << slack.count();
  }
}

// The simulation on a manual clock: passes with no flush run nothing, and
// run_until_idle() returns once they have nothing left to apply, even with
// timers due by the clock (only a flush runs them).
TEST(RuntimeManualClock, passes_without_a_flush_run_nothing_and_go_idle) {
  ManualClock clock{kStart};
  chime::detail::Simulation sim(manual_options(clock, 0));
  Runtime& rt = sim.runtime();
  int runs = 0;
  rt.schedule_after(Duration::zero(), [&] { ++runs; });  // due now
  rt.schedule_at(at(-1ms), [&] { ++runs; });             // past due
  int passes = 0;
  while (passes < 100 && sim.run_one_pass()) ++passes;
  EXPECT_LT(passes, 100) << "run_one_pass keeps reporting work that only a flush can do";
  EXPECT_EQ(runs, 0) << "a pass with no flush ran a timer";
  rt.flush();
  EXPECT_EQ(runs, 2);
}

// ---- Determinism: the same calls give the same runs, from two threads.

// Per timer (by tag): each run's (due, missed, fired_at), in run order.
using RunList = std::vector<std::tuple<std::int64_t, std::uint64_t, std::int64_t>>;
using Record = std::map<int, RunList>;

// One repetition: kSteps steps. In each, two threads each make kOps calls
// from their own seeded generator (schedules at and after, due now, past
// and future; periodic timers with skip and catch_up and first dues in the
// past; cancels and reschedules of their own timers), then, past a barrier,
// the main thread moves the clock (or not) and flushes. Only the main
// thread moves the clock and flushes.
Record run_calls(std::uint32_t seed, unsigned shards) {
  constexpr int kSteps = 12;
  constexpr int kOps = 24;
  ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.shards = shards;
  Runtime rt{o};
  std::mutex mu;
  Record record;
  auto task = [&](int tag) {
    return [&, tag](const Firing& f) {
      std::lock_guard<std::mutex> lock(mu);
      record[tag].emplace_back(f.due.time_since_epoch().count(), f.missed, f.fired_at.time_since_epoch().count());
    };
  };
  std::barrier<> posted(3), moved(3);
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(seed * 2 + static_cast<std::uint32_t>(p));
      chime::Producer producer = rt.producer();
      std::vector<TimerId> ids;
      int next_tag = p * 100'000;
      for (int step = 0; step < kSteps; ++step) {
        const TimePoint now = clock.now();  // the clock moves only between steps
        for (int i = 0; i < kOps; ++i) {
          // From 2 ms before the clock to 4 ms after, on the 100 us grid and off it.
          const Duration offset =
              std::chrono::microseconds(static_cast<int>(rng() % 61) * 100 - 2000) + Duration(rng() % 3 == 0 ? 37 : 0);
          const unsigned what = rng() % 10;
          if (what <= 3 || ids.empty()) {
            const int tag = next_tag++;
            ids.push_back(rng() % 2 == 0 ? producer.schedule_at(now + offset, task(tag))
                                         : producer.schedule_after(offset, task(tag)));
          } else if (what == 4) {
            const int tag = next_tag++;
            const Duration period = std::chrono::microseconds(300 + static_cast<int>(rng() % 8) * 250);
            const Missed missed = rng() % 2 == 0 ? Missed::skip : Missed::catch_up;
            ids.push_back(producer.schedule_every(period, task(tag), first_at(now + offset, missed)));
          } else if (what <= 6) {
            (void)producer.cancel(ids[rng() % ids.size()]);
          } else {
            (void)producer.reschedule_at(ids[rng() % ids.size()], now + offset);
          }
        }
        posted.arrive_and_wait();
        moved.arrive_and_wait();
      }
      for (const TimerId id : ids) (void)producer.cancel(id);  // periodic timers stop
    });
  }
  std::mt19937 plan(seed);
  for (int step = 0; step < kSteps; ++step) {
    posted.arrive_and_wait();
    if (plan() % 4 != 0) clock.advance(std::chrono::microseconds(static_cast<int>(plan() % 40) * 100 + 37));
    rt.flush();
    moved.arrive_and_wait();
  }
  for (std::thread& t : threads) t.join();
  rt.flush();
  std::lock_guard<std::mutex> lock(mu);
  return record;
}

// Tokio's paused_time_is_deterministic, with the calls of two threads: 100
// repetitions, each a randomized sequence seeded by its index, give the same
// runs per timer (due, missed, fired_at) every time, and the same with one
// shard as with two.
TEST(RuntimeManualClock, the_same_calls_from_two_threads_give_the_same_runs) {
  constexpr std::uint32_t kSeeds = 4;
  constexpr int kRepeats = 25;  // per seed: 100 repetitions in all
  for (std::uint32_t seed = 1; seed <= kSeeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Record first = run_calls(seed, 1);
    std::size_t total = 0;
    for (const auto& [tag, list] : first) total += list.size();
    ASSERT_GT(total, 100u) << "the sequence ran too few timers to say anything";
    for (int rep = 1; rep < kRepeats; ++rep) {
      const unsigned shards = rep % 2 == 0 ? 1 : 2;
      const Record again = run_calls(seed, shards);
      if (again == first) continue;
      for (const auto& [tag, list] : first) {
        const auto it = again.find(tag);
        ASSERT_TRUE(it != again.end() && it->second == list)
            << "repetition " << rep << " (" << shards << " shards): timer " << tag << " ran "
            << (it == again.end() ? 0 : it->second.size()) << " times, " << list.size() << " in the first";
      }
      FAIL() << "repetition " << rep << " (" << shards << " shards): a timer ran that did not in the first";
    }
  }
}

}  // namespace
