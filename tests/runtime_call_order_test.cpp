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

std::string delivery_name(const testing::TestParamInfo<Delivery>& info) {
  switch (info.param) {
    case Delivery::inline_on_wheel:
      return "workers_0";
    case Delivery::one_worker:
      return "workers_1";
    case Delivery::two_workers:
      return "workers_2";
    case Delivery::lane:
      return "lane";
  }
  return "unknown";
}

// A runtime on a ManualClock and the one handle every schedule of a case
// goes through: the Runtime, or a Lane this thread runs (its flushes run the
// lane's callbacks on this thread).
struct Sim {
  explicit Sim(Delivery d) : clock(kStart + 1000s) {
    const unsigned workers = d == Delivery::one_worker ? 1 : d == Delivery::two_workers ? 2 : 0;
    rt.emplace(manual_options(clock, workers));
    if (d == Delivery::lane) lane.emplace(rt->lane());
  }
  TimerId schedule_after(Duration delay, chime::Task task) {
    return lane ? lane->schedule_after(delay, std::move(task)) : rt->schedule_after(delay, std::move(task));
  }
  TimerId schedule_at(TimePoint due, chime::Task task) {
    return lane ? lane->schedule_at(due, std::move(task)) : rt->schedule_at(due, std::move(task));
  }
  void step(Duration d) {
    clock.advance(d);
    rt->flush();
  }
  ManualClock clock;
  std::optional<Runtime> rt;
  std::optional<chime::Lane> lane;
};

class RuntimeCallOrder : public testing::TestWithParam<Delivery> {};

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
    const std::vector<std::string> expected = GetParam() == Delivery::lane
                                                  ? std::vector<std::string>{"A", "B", "D", "C", "E"}
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

INSTANTIATE_TEST_SUITE_P(Deliveries, RuntimeCallOrder,
                         testing::Values(Delivery::inline_on_wheel, Delivery::one_worker, Delivery::two_workers,
                                         Delivery::lane),
                         delivery_name);

// One thread through two Producers (which post to two sub-queues): ties run
// in the order of the calls, not of the queues.
TEST(RuntimeCallOrderThreads, one_thread_through_two_producers_gets_ties_in_call_order) {
  for (int rep = 0; rep < 50; ++rep) {
    ManualClock clock{kStart};
    std::vector<int> order;
    std::mutex m;
    Runtime rt(manual_options(clock, 1));
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
    ASSERT_EQ(order, (std::vector<int>{1, 2, 3, 4})) << "repetition " << rep;
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
    Runtime rt(manual_options(clock, 2));
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
