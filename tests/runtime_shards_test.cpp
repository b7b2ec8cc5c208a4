// SPDX-License-Identifier: BSL-1.0
// Shards (design.md, "Shards"; RuntimeOptions::shards): several wheel
// threads over one slab and one worker pool. Each test names the guarantee:
// - a Producer and a Lane bind to a shard when made, round-robin, and a
//   timer belongs to the shard of the handle that scheduled it (a shard's
//   queue bound refuses only that shard's schedules);
// - cancel, reschedule (later and earlier) and state work on any timer from
//   any handle, whatever its shard; a periodic timer re-arms on its own;
// - flush, drain, shutdown, stats and check_invariants cover every shard;
// - shards = 0 takes CHIME_SHARDS, else 1; bad values throw naming them.
// The other runtime suites run with CHIME_SHARDS=2 too (scripts/test), so
// every guarantee they check holds with two shards.

#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::ManualClock;
using chime::Runtime;
using chime::RuntimeOptions;
using chime::TimerId;

RuntimeOptions sharded(RuntimeOptions o, unsigned shards) {
  o.shards = shards;
  return o;
}

// Sets an environment variable for one scope (the tests run one at a time;
// no runtime thread reads the environment).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// stats() has one entry per shard, and its totals are their sums; each
// wheel thread that ran reports its CPU time, before and after shutdown.
TEST(RuntimeShards, stats_cover_every_shard) {
  Runtime rt(sharded(steady_options(1), 3));
  std::atomic<int> ran{0};
  std::vector<chime::Producer> producers;
  for (int k = 0; k < 3; ++k) producers.push_back(rt.producer());  // shards 0, 1, 2
  for (int i = 0; i < 30000; ++i) {
    producers[static_cast<std::size_t>(i % 3)].schedule_after(chime::Duration::zero(), [&ran] { ran.fetch_add(1); });
  }
  rt.flush();
  EXPECT_EQ(ran.load(), 30000);
  const chime::Stats s = rt.stats();
  ASSERT_EQ(s.shards.size(), 3u);
  std::uint64_t depth = 0, wakeups = 0;
  for (const chime::ShardStats& k : s.shards) {
    depth += k.queue_depth;
    wakeups += k.wakeups;
    EXPECT_GT(k.busy, chime::Duration::zero()) << "a shard's wheel thread ran but reports no CPU time";
  }
  EXPECT_EQ(depth, s.queue_depth);
  EXPECT_EQ(wakeups, s.wakeups);
  rt.shutdown();
  const chime::Stats after = rt.stats();
  ASSERT_EQ(after.shards.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_GE(after.shards[k].busy, s.shards[k].busy);
}

// A timer belongs to the shard of the Producer that scheduled it: with
// shard 0's wheel thread held (a callback blocks it, workers = 0), only
// shard 0's queue fills up and refuses; the Producer bound to shard 1 is
// still accepted and its timers run; everything accepted on shard 0 runs
// once the hold ends.
TEST(RuntimeShards, a_timer_belongs_to_its_producers_shard) {
  ManualClock clock{kStart};
  RuntimeOptions o = sharded(manual_options(clock, 0), 2);
  o.max_queue_depth = 1024;
  Runtime rt(o);
  chime::Producer p0 = rt.producer();  // round-robin from shard 0
  chime::Producer p1 = rt.producer();
  Gate gate;
  p0.schedule_after(chime::Duration::zero(), gate.blocker());
  // On a manual clock timers run only inside flush: this flush runs the
  // blocker on shard 0's wheel thread, and returns once it is released.
  std::jthread flusher([&rt] { rt.flush(); });
  gate.wait_started();

  std::atomic<int> ran0{0}, ran1{0};
  std::size_t accepted0 = 0;
  std::string refusal;
  for (int i = 0; i < 4096; ++i) {
    try {
      p0.schedule_at(at(2ms), [&ran0] { ran0.fetch_add(1); });
      ++accepted0;
    } catch (const chime::CapacityError& e) {
      refusal = e.what();
      break;
    }
  }
  ASSERT_FALSE(refusal.empty()) << "shard 0's queue never refused, after " << accepted0 << " schedules";
  EXPECT_NE(refusal.find("shard 0"), std::string::npos) << refusal;
  const chime::Stats held = rt.stats();
  ASSERT_EQ(held.shards.size(), 2u);
  EXPECT_GE(held.shards[0].queue_depth, 1024u);
  EXPECT_EQ(held.shards[0].refused_overload, 1u);
  EXPECT_EQ(held.shards[1].refused_overload, 0u);
  // Shard 1 keeps up: its schedules are accepted and its timers run.
  for (int i = 0; i < 100; ++i) p1.schedule_at(at(1ms), [&ran1] { ran1.fetch_add(1); });
  gate.release();
  flusher.join();
  advance_to(clock, rt, at(5ms));
  EXPECT_EQ(ran1.load(), 100);
  EXPECT_EQ(ran0.load(), static_cast<int>(accepted0)) << "a timer accepted on the held shard was lost";
  EXPECT_EQ(rt.stats().refused_overload, 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// Cancel, reschedule later (a touch), reschedule earlier and state work on a
// timer of any shard through a handle bound to another: every outcome is as
// with one shard, on the ManualClock's exact times.
TEST(RuntimeShards, cancel_and_reschedule_work_across_shards) {
  ManualClock clock{kStart};
  Recorder rec{&clock};
  Runtime rt(sharded(manual_options(clock, 1), 2));
  chime::Producer p0 = rt.producer();
  chime::Producer p1 = rt.producer();
  const TimerId cancelled = p0.schedule_at(at(5ms), rec.task(1));
  const TimerId later = p0.schedule_at(at(5ms), rec.task(2));
  const TimerId earlier = p0.schedule_at(at(50ms), rec.task(3));
  const TimerId plain = p0.schedule_at(at(5ms), rec.task(4));
  rt.flush();
  EXPECT_TRUE(p1.cancel(cancelled));
  EXPECT_TRUE(p1.reschedule_at(later, at(20ms)));
  EXPECT_TRUE(p1.reschedule_at(earlier, at(3ms)));  // a command, to shard 0 through shard 1's handle
  EXPECT_EQ(rt.state(plain), chime::TimerState::pending);
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(rec.count(1), 0u);
  EXPECT_EQ(rec.count(2), 0u);
  EXPECT_EQ(rec.count(3), 1u);
  EXPECT_EQ(rec.count(4), 1u);
  advance_to(clock, rt, at(25ms));
  EXPECT_EQ(rec.count(2), 1u);
  for (const RunRecord& r : rec.runs()) {
    EXPECT_GE(r.clock_at_start, r.firing.due) << "timer " << r.tag << " ran before its due";
  }
  EXPECT_EQ(rt.state(cancelled), chime::TimerState::cancelled);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A periodic timer's re-arm goes to its own shard, whichever worker runs it,
// and a Lane's timers run on the lane, whatever shard the lane is on.
TEST(RuntimeShards, periodic_timers_and_lanes_run_on_every_shard) {
  ManualClock clock{kStart};
  Runtime rt(sharded(manual_options(clock, 2), 3));
  std::vector<chime::Producer> producers;
  for (int k = 0; k < 3; ++k) producers.push_back(rt.producer());
  std::atomic<int> ticks[3] = {};
  std::vector<TimerId> ids;
  for (int k = 0; k < 3; ++k) {
    ids.push_back(producers[static_cast<std::size_t>(k)].schedule_every(
        1ms, [&ticks, k] { ticks[k].fetch_add(1); }, first_at(at(1ms))));
  }
  std::vector<chime::Lane> lanes;
  for (int k = 0; k < 3; ++k) lanes.push_back(rt.lane());  // bound to shards 0, 1, 2 (round-robin goes on)
  int lane_runs = 0;
  for (chime::Lane& lane : lanes) lane.schedule_at(at(2ms), [&lane_runs] { ++lane_runs; });
  for (int ms = 1; ms <= 10; ++ms) {
    advance_to(clock, rt, at(std::chrono::milliseconds(ms)));
    for (chime::Lane& lane : lanes) lane.run_ready();
  }
  // The run due at k ms goes out at the flush at k ms, so runs due at
  // 1..10 ms by 10 ms, as with one shard.
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ticks[k].load(), 10) << "periodic timer of shard " << k;
  EXPECT_EQ(lane_runs, 3);
  for (const TimerId id : ids) EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
}

// With workers = 0 callbacks run on the wheel threads, and destroying a
// Lane waits for its shard to serve the close. Every Lane is then on shard
// 0, so callbacks on two shards that destroy lanes at the same time never
// wait for each other (each round would hang otherwise, failing by timeout).
TEST(RuntimeShards, callbacks_on_two_shards_destroying_lanes_never_wait_for_each_other) {
  ManualClock clock{kStart};
  Runtime rt(sharded(manual_options(clock, 0), 2));
  chime::Producer p0 = rt.producer();
  chime::Producer p1 = rt.producer();
  for (int round = 1; round <= 50; ++round) {
    // Made on another thread, which then runs them no more: this thread's
    // flushes must not run a lane that a callback is destroying (a Lane is
    // not closed while its thread runs it: lane.hpp).
    std::unique_ptr<chime::Lane> a, b;
    std::thread([&] {
      a = std::make_unique<chime::Lane>(rt.lane());
      b = std::make_unique<chime::Lane>(rt.lane());
    }).join();
    a->schedule_at(at(std::chrono::milliseconds(round) + 500ms), [] {});
    b->schedule_at(at(std::chrono::milliseconds(round) + 500ms), [] {});
    p0.schedule_at(at(std::chrono::milliseconds(round)), [&a] { a.reset(); });
    p1.schedule_at(at(std::chrono::milliseconds(round)), [&b] { b.reset(); });
    advance_to(clock, rt, at(std::chrono::milliseconds(round + 1)));
    EXPECT_EQ(a, nullptr);
    EXPECT_EQ(b, nullptr);
  }
  EXPECT_EQ(rt.stats().pending, 0u) << "a closed lane's timer was not cancelled";
}

// flush() waits for every shard's due timers; drain() runs every shard's
// pending timers and counts them all; shutdown(cancel_pending) cancels and
// counts every shard's; threads without a Producer spread over the shards.
TEST(RuntimeShards, flush_drain_and_shutdown_cover_every_shard) {
  ManualClock clock{kStart};
  Runtime rt(sharded(manual_options(clock, 1), 4));
  std::atomic<int> ran{0};
  auto schedule_from_threads = [&](chime::TimePoint due, int per_thread) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) rt.schedule_at(due, [&ran] { ran.fetch_add(1); });
      });
    }
    for (std::thread& t : threads) t.join();
  };
  schedule_from_threads(at(1ms), 100);
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(ran.load(), 400) << "flush returned before every shard's due timers ran";
  schedule_from_threads(at(1s), 50);
  EXPECT_EQ(rt.drain(), 200u);
  rt.flush();  // drain returns once the runs are handed over; flush waits for them
  EXPECT_EQ(ran.load(), 600);
  schedule_from_threads(at(1s), 25);
  EXPECT_EQ(rt.shutdown(), 100u);
  EXPECT_EQ(ran.load(), 600);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.cancelled, 100u);
}

// Under races across shards (producers on two shards, each cancelling and
// rescheduling the other's timers while they fire on two workers), every
// timer ends exactly once: runs plus successful cancels equal the timers,
// and the runtime's invariants hold at the end.
TEST(RuntimeShards, racing_producers_on_two_shards_lose_and_double_fire_nothing) {
  Runtime rt(sharded(steady_options(2), 2));
  constexpr int kPerThread = 20000;
  std::vector<std::atomic<int>> runs(2 * kPerThread);
  std::vector<std::atomic<TimerId>> ids(2 * kPerThread);
  std::atomic<int> cancels{0};
  auto producer = [&](int side) {
    chime::Producer p = rt.producer();
    for (int i = 0; i < kPerThread; ++i) {
      const int me = side * kPerThread + i;
      ids[static_cast<std::size_t>(me)].store(
          p.schedule_after(std::chrono::microseconds(i % 500), [&runs, me] { runs[static_cast<std::size_t>(me)]++; }));
      const int other = (1 - side) * kPerThread + i / 2;
      const TimerId victim = ids[static_cast<std::size_t>(other)].load();
      if (!victim) continue;
      if (i % 3 == 0) {
        if (p.cancel(victim)) cancels.fetch_add(1);
      } else if (i % 3 == 1) {
        p.reschedule_after(victim, std::chrono::microseconds(i % 7 == 0 ? 0 : 300));
      }
    }
  };
  std::thread a(producer, 0), b(producer, 1);
  a.join();
  b.join();
  std::this_thread::sleep_for(5ms);
  rt.flush();
  rt.check_invariants();
  int total_runs = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    ASSERT_LE(runs[i].load(), 1) << "timer " << i << " ran twice";
    total_runs += runs[i].load();
  }
  EXPECT_EQ(total_runs + cancels.load(), 2 * kPerThread) << "a timer neither ran nor was cancelled";
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A Runtime with CHIME_SHARDS = `bad` throws std::invalid_argument naming the value.
void expect_chime_shards_refused(const char* bad) {
  ScopedEnv env("CHIME_SHARDS", bad);
  try {
    Runtime rt(steady_options(1));
    ADD_FAILURE() << "CHIME_SHARDS=\"" << bad << "\" was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("CHIME_SHARDS = \"") + bad + "\""), std::string::npos) << e.what();
  }
}

// CHIME_SHARDS is decimal digits, leading zeros allowed at any length: "03", "003" and
// "0000000000000000000003" are all 3; "065", "0065" and "000" are refused as 65 and 0 are.
TEST(RuntimeShards, chime_shards_takes_leading_zeros_at_any_length) {
  for (const char* three : {"03", "003", "0003", "0000000000000000000003"}) {
    ScopedEnv env("CHIME_SHARDS", three);
    try {
      Runtime rt(steady_options(1));
      EXPECT_EQ(rt.stats().shards.size(), 3u) << "CHIME_SHARDS=\"" << three << "\"";
    } catch (const std::invalid_argument& e) {
      ADD_FAILURE() << "CHIME_SHARDS=\"" << three << "\" was refused: " << e.what();
    }
  }
  for (const char* bad :
       {"065", "0065", "000", "00000000000000000000", "0000000000000000000065", "99999999999999999999999"}) {
    expect_chime_shards_refused(bad);
  }
}

// shards = 0 is CHIME_SHARDS if set and not empty, else 1; more than max_shards, or a
// CHIME_SHARDS that is not a number from 1 to max_shards, throws
// std::invalid_argument naming the value.
TEST(RuntimeShards, default_comes_from_chime_shards_and_bad_values_throw_naming_them) {
  {
    ScopedEnv env("CHIME_SHARDS", "3");
    Runtime rt(steady_options(1));
    EXPECT_EQ(rt.stats().shards.size(), 3u);
    Runtime explicit_one(sharded(steady_options(1), 1));
    EXPECT_EQ(explicit_one.stats().shards.size(), 1u) << "an explicit shards value gave way to CHIME_SHARDS";
  }
  {
    ScopedEnv env("CHIME_SHARDS", "");  // empty: as unset
    Runtime rt(steady_options(1));
    EXPECT_EQ(rt.stats().shards.size(), 1u);
  }
  for (const char* bad : {"0", "65", "two", "2x", " 2", "-1"}) {
    expect_chime_shards_refused(bad);
  }
  try {
    Runtime rt(sharded(steady_options(1), RuntimeOptions::max_shards + 1));
    ADD_FAILURE() << "shards = max_shards + 1 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("shards = 65"), std::string::npos) << e.what();
  }
  Runtime most(sharded(steady_options(1), RuntimeOptions::max_shards));
  EXPECT_EQ(most.stats().shards.size(), RuntimeOptions::max_shards);
}

}  // namespace
