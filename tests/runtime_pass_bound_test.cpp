// SPDX-License-Identifier: BSL-1.0
// No pass of a wheel thread does unbounded work (design.md, "Slack"): the
// alarms a pass moves between the wheel's levels are bounded, at every
// level, because each level's next span is moved down ahead of time, a
// bounded amount a pass (runtime/wheel_thread_fire.cpp, "No pass does unbounded
// work"). With small level bits, level-1 and level-2 boundaries pass every
// few milliseconds; under a steady load whose timers span many of them,
// the most alarms one pass re-filed (ShardStats::most_refiled_in_a_pass)
// stays within one pass's budget, where entering a level-2 span would
// otherwise cascade its thousands of timers at once; so it does when the
// wheel thread wakes late, spans after its last pass (its advance stops
// short of a slot not yet moved down, and the next passes catch up).
#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Runtime;

TEST(RuntimePassBound, level_one_and_two_boundaries_under_load_refile_at_most_one_pass_budget) {
  chime::RuntimeOptions o;
  o.precision = 100us;
  // Level 0: 16 intervals (1.6 ms); level 1: spans of 2^7 (12.8 ms); level
  // 2: spans of 2^10 (102.4 ms). Timers due 0-400 ms out cross every level.
  o.level_bits = chime::LevelBits::create({4, 3, 3, 10});
  o.workers = 1;
  Runtime rt{o};
  std::atomic<std::uint64_t> ran{0}, early{0};
  constexpr int kProducers = 2;
  constexpr int kPerProducer = 12'000;  // over about 1.2 s: 20k timers/s in all
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      chime::Producer producer = rt.producer();
      std::mt19937_64 rng(static_cast<std::uint64_t>(p) + 1);
      for (int i = 0; i < kPerProducer; ++i) {
        const Duration delay = std::chrono::microseconds(rng() % 400'000);
        producer.schedule_after(delay, [&](const chime::Firing& f) {
          if (std::chrono::steady_clock::now() < f.due) early.fetch_add(1, std::memory_order_relaxed);
          ran.fetch_add(1, std::memory_order_relaxed);
        });
        if (i % 100 == 99) std::this_thread::sleep_for(1ms);
      }
    });
  }
  for (std::thread& t : producers) t.join();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (ran.load() < kProducers * kPerProducer && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(ran.load(), static_cast<std::uint64_t>(kProducers * kPerProducer));
  EXPECT_EQ(early.load(), 0u);
  const chime::Stats s = rt.stats();
  for (std::size_t k = 0; k < s.shards.size(); ++k) {
    // One pass's budgets: kCascadeAheadPerPass (1,024) moves down ahead plus
    // kRefilesPerAdvance (1,024) touched re-files; the advance itself
    // re-files nothing, also when the wheel thread was held off the CPU for
    // spans (it stops short of a slot not yet moved down). Entering a
    // level-2 span unprepared would re-file the few thousand timers due in it.
    std::printf("shard %zu: most moves in a pass %llu\n", k,
                static_cast<unsigned long long>(s.shards[k].most_refiled_in_a_pass));
    EXPECT_LE(s.shards[k].most_refiled_in_a_pass, 2048u) << "shard " << k;
    EXPECT_GT(s.shards[k].longest_pass, Duration::zero()) << "shard " << k;
  }
}

// A wheel thread held off the CPU for several spans (here by a callback that
// sleeps on it: workers = 0 runs callbacks on the wheel thread) catches up in
// bounded passes: its first advance after the sleep would cross level-1 and
// level-2 spans whose timers were never moved down, and stops before the
// first of them instead; the passes that follow at once move them down a
// budget at a time. Every timer runs once, none early.
TEST(RuntimePassBound, a_wheel_thread_held_off_for_spans_catches_up_within_the_pass_budget) {
  chime::RuntimeOptions o;
  o.precision = 100us;
  // As above: level-1 spans of 12.8 ms, level-2 spans of 102.4 ms.
  o.level_bits = chime::LevelBits::create({4, 3, 3, 10});
  o.workers = 0;
  o.shards = 1;
  Runtime rt{o};
  constexpr int kTimers = 20'000;  // about 5,000 per level-2 span
  std::vector<std::atomic<int>> runs(kTimers);
  std::atomic<std::uint64_t> early{0};
  std::atomic<int> ran{0};
  std::mt19937_64 rng(11);
  const auto start = std::chrono::steady_clock::now();
  // Held off for 250 ms from 40 ms on: past two level-2 spans.
  rt.schedule_after(40ms, [] { std::this_thread::sleep_for(250ms); });
  for (int i = 0; i < kTimers; ++i) {
    const Duration delay = 60ms + std::chrono::microseconds(rng() % 400'000);
    rt.schedule_after(delay, [&, i](const chime::Firing& f) {
      if (std::chrono::steady_clock::now() < f.due) early.fetch_add(1, std::memory_order_relaxed);
      runs[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      ran.fetch_add(1, std::memory_order_relaxed);
    });
  }
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (ran.load() < kTimers && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(ran.load(), kTimers);
  rt.flush();
  EXPECT_EQ(early.load(), 0u);
  for (int i = 0; i < kTimers; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "timer " << i;
  ASSERT_GE(std::chrono::steady_clock::now() - start, 290ms);
  const chime::Stats s = rt.stats();
  ASSERT_EQ(s.shards.size(), 1u);
  std::printf("most moves in a pass %llu\n", static_cast<unsigned long long>(s.shards[0].most_refiled_in_a_pass));
  // kCascadeAheadPerPass (1,024) moves down ahead: no timer is touched (no
  // re-file at a later due), and no advance re-files.
  EXPECT_LE(s.shards[0].most_refiled_in_a_pass, 1024u);
  EXPECT_GE(s.shards[0].most_refiled_in_a_pass, 1u);
  rt.check_invariants();
}

// The same on a clock the test moves: one jump of 400 ms, across every
// level-1 and level-2 span of 20,000 filed timers, is caught up in bounded
// passes, and the flush at the new reading waits for all of them.
TEST(RuntimePassBound, a_clock_jump_across_spans_is_caught_up_within_the_pass_budget) {
  SettableClock clock{kStart};
  chime::RuntimeOptions o = settable_options(clock, 0);
  o.precision = 100us;
  o.level_bits = chime::LevelBits::create({4, 3, 3, 10});
  o.shards = 1;
  Runtime rt{o};
  constexpr int kTimers = 20'000;
  std::vector<std::atomic<int>> runs(kTimers);
  std::atomic<std::uint64_t> early{0};
  std::mt19937_64 rng(5);
  for (int i = 0; i < kTimers; ++i) {
    const chime::TimePoint due = at(std::chrono::microseconds(1 + rng() % 400'000));
    rt.schedule_at(due, [&, i, due](const chime::Firing& f) {
      if (f.fired_at < due || clock.now() < due) early.fetch_add(1, std::memory_order_relaxed);
      runs[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
  }
  rt.flush();  // filed
  clock.set(at(401ms));
  rt.flush();  // every timer is due by the new reading
  EXPECT_EQ(early.load(), 0u);
  for (int i = 0; i < kTimers; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "timer " << i;
  const chime::Stats s = rt.stats();
  ASSERT_EQ(s.shards.size(), 1u);
  std::printf("most moves in a pass %llu\n", static_cast<unsigned long long>(s.shards[0].most_refiled_in_a_pass));
  EXPECT_LE(s.shards[0].most_refiled_in_a_pass, 1024u) << "kCascadeAheadPerPass: no advance re-files";
  rt.check_invariants();
}

// A batch touched later all at once (each timer's due pushed an hour on,
// with no command) is re-filed when its old alarms come up: at most one
// budget of re-files a pass, over as many passes as it takes, and the stat
// counts those re-files as moves. None of them runs.
TEST(RuntimePassBound, a_touched_batch_is_refiled_within_the_pass_budget) {
  // A clock the test sets (not a ManualClock: the pass budget is a real
  // clock's matter): nothing comes due while the batch is scheduled and
  // touched, however slow the build.
  SettableClock clock{kStart};
  chime::RuntimeOptions o = settable_options(clock, 0);
  o.shards = 1;
  Runtime rt{o};
  constexpr int kTimers = 100'000;
  std::atomic<int> ran{0};
  std::vector<chime::TimerId> ids;
  ids.reserve(kTimers);
  const chime::TimePoint due = at(100ms);
  for (int i = 0; i < kTimers; ++i) ids.push_back(rt.schedule_at(due, [&ran] { ran.fetch_add(1); }));
  rt.flush();  // filed at their old due
  for (const chime::TimerId id : ids) ASSERT_TRUE(rt.reschedule_at(id, due + 1h));
  clock.set(due + 20ms);
  rt.flush();  // every old alarm has come up and been re-filed
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(rt.stats().pending, static_cast<std::uint64_t>(kTimers));
  const chime::Stats s = rt.stats();
  ASSERT_EQ(s.shards.size(), 1u);
  EXPECT_GE(s.shards[0].most_refiled_in_a_pass, 1u) << "the re-files are counted as moves";
  EXPECT_LE(s.shards[0].most_refiled_in_a_pass, 2048u);
  rt.check_invariants();
}

}  // namespace
