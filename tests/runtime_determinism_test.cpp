// SPDX-License-Identifier: BSL-1.0
// A ManualClock run is deterministic (design.md, "Clocks"): timers run only
// inside flush(), at the first flush whose clock reading is at or past their
// due, never by when the wheel thread applies their command, so which flush()
// a timer runs by depends only on the order of the user's calls (schedules,
// clock moves, flushes), even when two threads post them.
//
// Both tests race the wheel thread on purpose: the producers' posts wake it,
// so it applies commands while they post and while the clock moves. A rule
// judged at application would run a timer due exactly at the clock's new time
// at one flush or the next depending on when its ADD was applied (the peers'
// tests: Go's BenchmarkSimultaneousAfterFunc1000, Tokio's
// paused_time_is_deterministic).

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "../runtime/simulation.hpp"
#include "runtime_test_support.hpp"

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::ManualClock;
using chime::Runtime;
using chime::TimePoint;
using chime_test::at;
using chime_test::kPrecision;
using chime_test::kStart;
using chime_test::manual_options;

// Go's case: 2 threads post 2,500 timers each, all due at one time t after
// the clock; the clock is then set to 1 ns before t and flushed: none runs,
// however the wheel thread's applications interleave with the move. Set to
// exactly t and flushed, all run, with fired_at t. Repeated, because a rule
// judged at application fails only on some interleavings.
TEST(RuntimeDeterminism, timers_due_at_the_new_time_run_at_the_flush_reaching_it_whenever_applied) {
  constexpr int kRepeats = 20;
  constexpr int kPerThread = 2500;
  for (int rep = 0; rep < kRepeats; ++rep) {
    ManualClock clock{kStart};
    std::atomic<int> ran{0};
    std::atomic<int> wrong_fired_at{0};
    Runtime rt{manual_options(clock, 1)};
    const TimePoint t = at(3ms) + 500us;
    std::vector<std::thread> threads;
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&] {
        chime::Producer producer = rt.producer();
        for (int i = 0; i < kPerThread; ++i) {
          producer.schedule_at(t, [&, t](const chime::Firing& f) {
            if (f.fired_at != t) wrong_fired_at.fetch_add(1);
            ran.fetch_add(1);
          });
        }
      });
    }
    for (std::thread& th : threads) th.join();
    clock.set(t - 1ns);
    rt.flush();
    ASSERT_EQ(ran.load(), 0) << "repetition " << rep << ": timers due after the flush's reading ran at the flush";
    clock.set(t);
    rt.flush();
    ASSERT_EQ(ran.load(), 2 * kPerThread) << "repetition " << rep;
    ASSERT_EQ(wrong_fired_at.load(), 0) << "repetition " << rep << ": fired_at is not the flush's reading";
  }
}

// The flush by which each timer of a run ran: timer number -> round.
using Outcome = std::map<int, int>;

// One run of a seeded sequence of rounds. In each round two threads post
// schedules (at and after, some due now or in the past) and reschedules of
// their own timers, then the clock is set to one of the round's due times
// (or a little past one) and the runtime flushed.
Outcome run_sequence(std::uint32_t seed) {
  constexpr int kRounds = 8;
  constexpr int kPerThread = 60;
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  std::atomic<int> round{0};
  std::mutex mu;
  Outcome outcome;
  std::mt19937 plan(seed);  // the main thread's choices: the clock moves
  for (int r = 0; r < kRounds; ++r) {
    const TimePoint now = clock.now();
    std::vector<TimePoint> dues[2];
    std::vector<std::thread> threads;
    for (int p = 0; p < 2; ++p) {
      const std::uint32_t thread_seed = plan();
      threads.emplace_back([&, p, thread_seed] {
        std::mt19937 rng(thread_seed);
        chime::Producer producer = rt.producer();
        std::vector<chime::TimerId> ids;
        for (int i = 0; i < kPerThread; ++i) {
          const int tag = (r * 2 + p) * kPerThread + i;
          // Dues from 1 ms before the clock to 4 ms after, on the 100 us grid
          // and off it, so many fall exactly on a later clock time.
          const Duration offset = std::chrono::microseconds(static_cast<int>(rng() % 51) * 100 - 1000);
          auto task = [&, tag] {
            std::lock_guard<std::mutex> lock(mu);
            if (!outcome.emplace(tag, round.load()).second) outcome[-1] = tag;  // ran twice: fails the size check
          };
          chime::TimerId id;
          if (rng() % 2 == 0) {
            id = producer.schedule_at(now + offset, task);
            dues[p].push_back(now + offset);
          } else {
            id = producer.schedule_after(offset, task);
            dues[p].push_back(clock.now() + offset);
          }
          // Only timers due after the clock can be moved without racing
          // their run (the clock does not move while the threads post).
          if (offset > Duration::zero()) ids.push_back(id);
          if (rng() % 4 == 0 && !ids.empty()) {  // move an earlier timer of ours, earlier or later
            const Duration to = std::chrono::microseconds(static_cast<int>(rng() % 51) * 100 - 1000);
            const std::size_t k = rng() % ids.size();
            ASSERT_TRUE(producer.reschedule_at(ids[k], now + to)) << "a timer due after the clock is pending";
            dues[p].push_back(now + to);
            if (to <= Duration::zero()) ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(k));  // due now: may run
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    // The clock moves to one of this round's due times, or 1 ns past it,
    // never backwards.
    std::vector<TimePoint> all(dues[0]);
    all.insert(all.end(), dues[1].begin(), dues[1].end());
    TimePoint to = all[plan() % all.size()] + Duration(plan() % 2);
    if (to < clock.now()) to = clock.now();
    clock.set(to);
    rt.flush();
    round.fetch_add(1);
  }
  clock.advance(1s);  // everything left runs, at a round of its own
  rt.flush();
  std::lock_guard<std::mutex> lock(mu);
  return outcome;
}

// Tokio's case: 100 repetitions of one randomized sequence with two producer
// threads give the same outcome: every timer runs by the same flush.
TEST(RuntimeDeterminism, the_same_calls_give_the_same_runs_with_two_producers) {
  constexpr int kRepeats = 100;
  constexpr std::uint32_t kSeed = 20261126;
  const Outcome first = run_sequence(kSeed);
  ASSERT_EQ(first.size(), 8u * 2 * 60) << "every timer runs exactly once";
  for (int rep = 1; rep < kRepeats; ++rep) {
    const Outcome again = run_sequence(kSeed);
    ASSERT_EQ(again.size(), first.size()) << "repetition " << rep;
    int differ = 0, example = -1;
    for (const auto& [tag, r] : first) {
      const auto it = again.find(tag);
      if (it == again.end() || it->second != r) {
        ++differ;
        if (example < 0) example = tag;
      }
    }
    ASSERT_EQ(differ, 0) << "repetition " << rep << ": " << differ << " timers ran by a different flush (e.g. timer "
                         << example << ": round " << first.at(example) << " in the first run, "
                         << (again.count(example) ? again.at(example) : -1) << " in this one)";
  }
}

// A ManualClock at TimePoint::min() reads INT64_MIN, which a sentinel would
// take for "no flush yet" (simulation fuzz,
// fuzz/corpus/runtime_sim/regression-sim_clock_at_min): a flush at that
// reading runs nothing due after it, and the flush whose reading reaches the
// due runs it, with that reading as fired_at.
TEST(RuntimeDeterminism, a_clock_reading_of_time_point_min_is_a_reading_like_any_other) {
  ManualClock clock(TimePoint::min());
  chime::detail::Simulation sim(manual_options(clock, 0));
  Runtime& rt = sim.runtime();
  std::vector<TimePoint> fired_at;
  rt.schedule_at(TimePoint::min() + 4ns, [&](const chime::Firing& f) { fired_at.push_back(f.fired_at); });
  rt.flush();
  EXPECT_TRUE(fired_at.empty()) << "ran at a flush whose reading is before its due";
  clock.set(TimePoint::min() + 3ns);
  rt.flush();
  EXPECT_TRUE(fired_at.empty()) << "ran at a flush whose reading is before its due";
  clock.set(TimePoint::min() + 5ns);
  rt.flush();
  EXPECT_EQ(fired_at, (std::vector<TimePoint>{TimePoint::min() + 5ns}));
}

}  // namespace
