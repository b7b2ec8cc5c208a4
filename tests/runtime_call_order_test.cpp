// SPDX-License-Identifier: BSL-1.0
// G28 (design.md, "Clocks"): on a ManualClock the runs of one flush start in
// due order, ties in call order, one at a time, whatever `workers` is and on
// a Lane too; "call order" across threads is the happens-before order of the
// calls. Each case is repeated and compared run to run: a tie broken by
// which queue, slot or pass a timer went through differs between runs or
// comes out in another order than the calls'.

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
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

// Where the timers go and where their callbacks run.
enum class Delivery { inline_on_wheel, one_worker, two_workers, lane };

struct Case {
  Delivery delivery;
  unsigned shards;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name;
  switch (info.param.delivery) {
    case Delivery::inline_on_wheel:
      name = "workers_0";
      break;
    case Delivery::one_worker:
      name = "workers_1";
      break;
    case Delivery::two_workers:
      name = "workers_2";
      break;
    case Delivery::lane:
      name = "lane";
      break;
  }
  return name + "_shards_" + std::to_string(info.param.shards);
}

// A runtime on a ManualClock and the handles the schedules of a case go
// through, in turn: one Producer per shard (Producers bind to the shards
// round-robin), or one Lane per shard that this thread runs (its flushes run
// the lanes' callbacks on this thread). With one shard that is the Runtime,
// or one Lane.
struct Sim {
  explicit Sim(Case c) : clock(kStart + 1000s) {
    const Delivery d = c.delivery;
    const unsigned workers = d == Delivery::one_worker ? 1 : d == Delivery::two_workers ? 2 : 0;
    chime::RuntimeOptions o = manual_options(clock, workers);
    o.shards = c.shards;
    rt.emplace(o);
    for (unsigned k = 0; k < c.shards; ++k) {
      if (d == Delivery::lane) {
        lanes.push_back(rt->lane());
      } else if (c.shards > 1) {
        producers.push_back(rt->producer());
      }
    }
  }
  TimerId schedule_after(Duration delay, chime::Task task) { return schedule_at(clock.now() + delay, std::move(task)); }
  TimerId schedule_at(TimePoint due, chime::Task task) {
    const std::size_t k = next++;
    if (!lanes.empty()) return lanes[k % lanes.size()].schedule_at(due, std::move(task));
    if (!producers.empty()) return producers[k % producers.size()].schedule_at(due, std::move(task));
    return rt->schedule_at(due, std::move(task));
  }
  void step(Duration d) {
    clock.advance(d);
    rt->flush();
  }
  ManualClock clock;
  std::optional<Runtime> rt;
  std::vector<chime::Producer> producers;
  std::vector<chime::Lane> lanes;
  std::size_t next = 0;
};

class RuntimeCallOrder : public testing::TestWithParam<Case> {};

// The probe's case: 100 timers filed, then cancelled (zombies whose slots
// are freed when their alarms come up), and one callback that schedules 100
// timers all due at one time. They run 0..99, every run.
TEST_P(RuntimeCallOrder, equal_dues_run_in_call_order_after_cancelled_timers_were_filed) {
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<int> order;
    {
      Sim s(GetParam());
      std::vector<TimerId> zombies;
      for (int i = 0; i < 100; ++i) zombies.push_back(s.schedule_after(5ms, [] {}));
      s.schedule_after(5ms, [&] {
        for (int i = 0; i < 100; ++i) s.schedule_after(10ms, [&order, i] { order.push_back(i); });
      });
      s.step(1ms);  // filed
      for (const TimerId id : zombies) EXPECT_TRUE(s.rt->cancel(id));
      for (int i = 0; i < 20; ++i) s.step(1ms);
    }
    std::vector<int> expected(100);
    std::iota(expected.begin(), expected.end(), 0);
    ASSERT_EQ(order, expected) << "repetition " << rep;
  }
}

// Dues given out of order, ties among them: the runs come in due order,
// ties in call order, within one flush.
TEST_P(RuntimeCallOrder, one_flush_runs_in_due_order_with_ties_in_call_order) {
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<int> order;
    Sim s(GetParam());
    const TimePoint t0 = s.clock.now();
    const int dues_us[] = {500, 50, 300, 50, 400, 300, 100, 500, 50};
    for (int i = 0; i < 9; ++i) {
      s.schedule_at(t0 + std::chrono::microseconds(dues_us[i]), [&order, i] { order.push_back(i); });
    }
    s.step(1ms);
    ASSERT_EQ(order, (std::vector<int>{1, 3, 8, 6, 2, 5, 4, 0, 7})) << "repetition " << rep;
  }
}

// The runs of a flush never overlap, even with two workers: each starts
// after the one before it has returned.
TEST_P(RuntimeCallOrder, runs_of_one_flush_never_overlap) {
  Sim s(GetParam());
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i) {
    s.schedule_after(std::chrono::microseconds(i % 7), [&] {
      if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
      std::this_thread::sleep_for(10us);
      running.fetch_sub(1);
      ran.fetch_add(1);
    });
  }
  s.step(1ms);
  EXPECT_EQ(ran.load(), 200);
  EXPECT_EQ(overlaps.load(), 0);
}

// A callback's own timers take their place among the flush's runs: one due
// before the next pending run goes before it; one due at the flush's
// reading runs in the same flush, after the ties called before it. On a
// Lane, the runs next in order that are the lane's go to it as one batch:
// what a callback of the batch schedules comes after the batch.
TEST_P(RuntimeCallOrder, a_callback_schedules_into_the_same_flush_in_due_and_call_order) {
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<std::string> order;
    Sim s(GetParam());
    const TimePoint t0 = s.clock.now();
    const TimePoint reading = t0 + 20ms;
    s.schedule_at(t0 + 5ms, [&] {
      order.push_back("A");
      s.schedule_at(t0 + 7ms, [&] { order.push_back("C"); });
      s.schedule_at(reading, [&] { order.push_back("E"); });
    });
    s.schedule_at(t0 + 10ms, [&] { order.push_back("B"); });
    s.schedule_at(reading, [&] { order.push_back("D"); });
    s.step(20ms);
    // One lane: A, B and D are its next runs, one batch. A lane per shard:
    // a batch takes only runs before every other shard's earliest.
    const bool one_lane = GetParam().delivery == Delivery::lane && GetParam().shards == 1;
    const std::vector<std::string> expected = one_lane ? std::vector<std::string>{"A", "B", "D", "C", "E"}
                                                       : std::vector<std::string>{"A", "C", "B", "D", "E"};
    ASSERT_EQ(order, expected) << "repetition " << rep;
  }
}

// A callback that cancels a timer due at the same time, later in call
// order, cancels it: that run has not started.
TEST_P(RuntimeCallOrder, a_callback_cancels_a_tie_that_comes_after_it) {
  for (int rep = 0; rep < 10; ++rep) {
    Sim s(GetParam());
    std::vector<int> order;
    TimerId second;
    bool cancelled = false;
    s.schedule_after(5ms, [&] {
      order.push_back(1);
      cancelled = s.rt->cancel(second);
    });
    second = s.schedule_after(5ms, [&] { order.push_back(2); });
    s.step(5ms);
    EXPECT_TRUE(cancelled) << "repetition " << rep;
    ASSERT_EQ(order, (std::vector<int>{1})) << "repetition " << rep;
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const unsigned shards : {1u, 2u, 3u}) {
    for (const Delivery d : {Delivery::inline_on_wheel, Delivery::one_worker, Delivery::two_workers, Delivery::lane}) {
      cases.push_back({d, shards});
    }
  }
  return cases;
}

// Several shards: one order over all of them (RuntimeCore::flush_in_call_order).
INSTANTIATE_TEST_SUITE_P(DeliveriesAndShards, RuntimeCallOrder, testing::ValuesIn(all_cases()), case_name);

// One thread through two Producers (which post to two sub-queues): ties run
// in the order of the calls, not of the queues.
// With two shards the two Producers post to two shards.
TEST(RuntimeCallOrderThreads, one_thread_through_two_producers_gets_ties_in_call_order) {
  for (int rep = 0; rep < 50; ++rep) {
    ManualClock clock{kStart};
    std::vector<int> order;
    std::mutex m;
    chime::RuntimeOptions o = manual_options(clock, 1);
    o.shards = rep % 2 == 0 ? 1 : 2;
    Runtime rt(o);
    chime::Producer p0 = rt.producer();
    chime::Producer p1 = rt.producer();
    for (int i = 1; i <= 4; ++i) {
      chime::Producer& p = i % 2 == 1 ? p0 : p1;
      p.schedule_at(at(1ms), [&order, &m, i] {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(i);
      });
    }
    clock.advance(1ms);
    rt.flush();
    ASSERT_EQ(order, (std::vector<int>{1, 2, 3, 4})) << "repetition " << rep << ", shards " << o.shards;
  }
}

// Timers through four Producers, which the shards take round-robin: one due
// order over every shard, whatever their number; and the same runs when
// another runtime's Producers moved the round-robin first.
TEST(RuntimeCallOrderThreads, timers_through_four_producers_run_in_one_due_order_over_every_shard) {
  for (const unsigned shards : {1u, 2u, 4u}) {
    for (int rep = 0; rep < 6; ++rep) {
      ManualClock clock{kStart};
      std::vector<std::int64_t> ran;
      std::mutex m;
      chime::RuntimeOptions o = manual_options(clock, rep % 3);
      o.shards = shards;
      std::optional<Runtime> other;
      if (rep % 2 == 1) {
        other.emplace(o);
        for (int k = 0; k < rep; ++k) (void)other->producer();
      }
      Runtime rt(o);
      std::vector<chime::Producer> producers;
      for (int k = 0; k < 4 + rep % 2; ++k) producers.push_back(rt.producer());
      const int dues_us[] = {50, 200, 500, 100, 300, 400, 401, 402, 200, 50};
      for (int i = 0; i < 10; ++i) {
        const std::int64_t due = dues_us[i] * 1000 + i;  // the call's number: a tie's order
        producers[i % producers.size()].schedule_at(at(std::chrono::microseconds(dues_us[i])),
                                                    [&ran, &m, due](const chime::Firing&) {
                                                      std::lock_guard<std::mutex> lock(m);
                                                      ran.push_back(due);
                                                    });
      }
      clock.advance(1ms);
      rt.flush();
      std::vector<std::int64_t> expected = {50'000,  50'009,  100'003, 200'001, 200'008,
                                            300'004, 400'005, 401'006, 402'007, 500'002};
      ASSERT_EQ(ran, expected) << shards << " shards, repetition " << rep;
    }
  }
}

// Two threads that take turns by a flag, each through its own Producer, all
// due at one time: the runs come in the order of the turns (happens-before).
TEST(RuntimeCallOrderThreads, two_threads_taking_turns_get_ties_in_the_order_of_their_calls) {
  constexpr int kPerThread = 200;
  for (int rep = 0; rep < 10; ++rep) {
    ManualClock clock{kStart};
    std::vector<int> order;
    std::mutex m;
    chime::RuntimeOptions o = manual_options(clock, 2);
    o.shards = rep % 2 == 0 ? 1 : 2;  // two: the threads' Producers post to two shards
    Runtime rt(o);
    std::atomic<int> turn{0};  // the call number whose turn it is
    auto poster = [&](int parity) {
      chime::Producer p = rt.producer();
      for (int k = parity; k < 2 * kPerThread; k += 2) {
        while (turn.load(std::memory_order_acquire) != k) std::this_thread::yield();
        p.schedule_at(at(2ms), [&order, &m, k] {
          std::lock_guard<std::mutex> lock(m);
          order.push_back(k);
        });
        turn.store(k + 1, std::memory_order_release);
      }
    };
    std::thread a(poster, 0), b(poster, 1);
    a.join();
    b.join();
    clock.advance(2ms);
    rt.flush();
    std::vector<int> expected(2 * kPerThread);
    std::iota(expected.begin(), expected.end(), 0);
    ASSERT_EQ(order, expected) << "repetition " << rep;
  }
}

// Two lanes' threads flushing at once on several shards, each waiting for a
// run of the other's lane: the flushes go one at a time, and the thread
// that waits for its turn runs its own lanes meanwhile, so neither waits
// for ever.
TEST(RuntimeCallOrderThreads, two_lane_threads_flushing_at_once_on_two_shards_both_return) {
  for (int rep = 0; rep < 20; ++rep) {
    ManualClock clock{kStart};
    chime::RuntimeOptions o = manual_options(clock, 0);
    o.shards = 2;
    Runtime rt(o);
    std::atomic<int> ran{0};
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    auto loop = [&] {
      chime::Lane lane = rt.lane();
      lane.run_ready();  // this thread runs the lane
      lane.schedule_at(at(1ms), [&ran] { ran.fetch_add(1); });
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      rt.flush();
      // The other thread's flush may still need this lane: keep running it
      // until both timers ran.
      while (ran.load() < 2) lane.run_ready();
    };
    std::thread a(loop), b(loop);
    while (ready.load() < 2) std::this_thread::yield();
    clock.advance(2ms);
    go.store(true);
    a.join();
    b.join();
    ASSERT_EQ(ran.load(), 2) << "repetition " << rep;
  }
}

// A program that never asked for shards gets one on a ManualClock, whatever
// CHIME_SHARDS says: its one order needs no shards.
TEST(RuntimeCallOrderThreads, chime_shards_in_the_environment_gives_a_manual_clock_runtime_one_shard) {
  const char* before = std::getenv("CHIME_SHARDS");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("CHIME_SHARDS", "3", 1);
  ManualClock clock{kStart};
  std::size_t shards = 0;
  {
    Runtime rt(manual_options(clock, 0));
    shards = rt.stats().shards.size();
  }
  chime_test::SettableClock real{kStart};
  std::size_t real_shards = 0;
  {
    Runtime rt(chime_test::settable_options(real, 0));
    real_shards = rt.stats().shards.size();
  }
  if (before != nullptr) {
    ::setenv("CHIME_SHARDS", saved.c_str(), 1);
  } else {
    ::unsetenv("CHIME_SHARDS");
  }
  EXPECT_EQ(shards, 1u);
  EXPECT_EQ(real_shards, 3u) << "CHIME_SHARDS still sets the shards of a runtime on another clock";
}

}  // namespace
