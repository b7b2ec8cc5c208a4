// SPDX-License-Identifier: BSL-1.0
// Lanes under races (include/chime/lane.hpp; design.md, "Lanes"), on the
// steady clock, under ThreadSanitizer in CI: two producer threads schedule
// timers on a lane, one thread runs the lane, a third cancels; every timer
// runs exactly once on the lane's thread or is cancelled (never both, never
// neither), and a lane destroyed with runs queued runs none of them later.
#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

struct Record : stress_support::TimerLog {
  std::atomic<int> wrong_thread{0};
};

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kPerProducer = 4'000;
#else
constexpr int kPerProducer = 40'000;
#endif

TEST(RuntimeLaneRace, every_lane_timer_runs_once_on_the_lane_thread_or_is_cancelled_under_racing_cancels) {
  chime_stress::print_seed();
  chime::RuntimeOptions options = stress_support::steady_options(1);
  options.precision = 100us;
  chime::Runtime rt(options);
  chime::Lane lane = rt.lane();
  std::vector<Record> records(2 * kPerProducer);
  std::atomic<std::thread::id> lane_thread_id{};
  std::atomic<bool> stop{false};
  std::thread lane_thread([&] {
    lane_thread_id.store(std::this_thread::get_id());
    while (!stop.load(std::memory_order_acquire)) lane.wait_and_run(rt.clock().now() + 2ms);
    lane.run_ready();
  });
  while (lane_thread_id.load() == std::thread::id()) std::this_thread::yield();
  std::atomic<int> producers_done{0};
  auto produce = [&](int p) {
    std::mt19937_64 rng(chime_stress::seed() + static_cast<std::uint64_t>(p));
    for (int i = 0; i < kPerProducer; ++i) {
      Record& r = records[static_cast<std::size_t>(p * kPerProducer + i)];
      const chime::TimerId id = lane.schedule_after(std::chrono::microseconds(rng() % 2000), [&r, &lane_thread_id] {
        if (std::this_thread::get_id() != lane_thread_id.load(std::memory_order_relaxed)) r.wrong_thread.fetch_add(1);
        r.runs.fetch_add(1);
      });
      r.id.store(stress_support::pack(id), std::memory_order_release);
      if (i % 64 == 0) std::this_thread::yield();
    }
    producers_done.fetch_add(1);
  };
  std::thread p0(produce, 0), p1(produce, 1);
  std::thread canceller([&] {
    std::mt19937_64 rng(chime_stress::seed() ^ 0x5eed);
    while (producers_done.load() < 2) {
      Record& r = records[rng() % records.size()];
      const std::uint64_t packed = r.id.load(std::memory_order_acquire);
      if (packed != 0 && lane.cancel(stress_support::unpack(packed))) {
        if (r.cancels_won.fetch_add(1) != 0) ADD_FAILURE() << "a second cancel of one timer won";
      }
    }
  });
  p0.join();
  p1.join();
  canceller.join();
  stress_support::wait_until_idle(rt);  // waits for the lane thread to run what is ready
  stop.store(true, std::memory_order_release);
  lane_thread.join();
  const stress_support::Outcomes o = stress_support::tally(records);
  const std::size_t ran = o.ran, cancelled = o.cancelled, neither = o.neither, both = o.both, twice = o.ran_twice;
  std::size_t wrong = 0;
  for (Record& r : records) wrong += static_cast<std::size_t>(r.wrong_thread.load());
  std::printf("%zu lane timers: %zu ran, %zu cancelled\n", records.size(), ran, cancelled);
  EXPECT_EQ(neither, 0u) << "lost timers";
  EXPECT_EQ(both, 0u) << "a cancel that returned true did not stop the run";
  EXPECT_EQ(twice, 0u) << "a timer ran twice";
  EXPECT_EQ(wrong, 0u) << "a lane run ran on another thread";
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.fired, ran);
  EXPECT_EQ(s.cancelled, cancelled);
}

TEST(RuntimeLaneRace, a_lane_destroyed_with_runs_queued_runs_none_of_them_later) {
  chime_stress::print_seed();
  chime::Runtime rt(stress_support::steady_options(1));
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kRounds = 40;
#else
  constexpr int kRounds = 200;
#endif
  std::mt19937_64 rng(chime_stress::seed());
  std::atomic<int> runs_after_close{0};
  std::uint64_t scheduled = 0, ran = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto closed = std::make_shared<std::atomic<bool>>(false);
    auto round_runs = std::make_shared<std::atomic<int>>(0);
    {
      chime::Lane lane = rt.lane();
      // Two producers fill the lane: some runs are due at once, some soon, some later.
      auto produce = [&lane, closed, round_runs, &runs_after_close](std::uint64_t seed) {
        std::mt19937_64 r(seed);
        for (int i = 0; i < 100; ++i) {
          lane.schedule_after(std::chrono::microseconds(r() % 3000), [closed, round_runs, &runs_after_close] {
            if (closed->load()) runs_after_close.fetch_add(1);
            round_runs->fetch_add(1);
          });
        }
      };
      std::thread a(produce, rng()), b(produce, rng());
      a.join();
      b.join();
      scheduled += 200;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      lane.run_ready(rng() % 50);  // run some, leave the rest queued or pending
      // ~Lane: cancels what is pending and what is queued.
    }
    closed->store(true);
    ran += static_cast<std::uint64_t>(round_runs->load());
  }
  stress_support::wait_until_idle(rt);
  const chime::Stats s = rt.stats();
  std::printf("%d lanes destroyed: %llu timers, %llu ran, %llu cancelled\n", kRounds,
              static_cast<unsigned long long>(scheduled), static_cast<unsigned long long>(ran),
              static_cast<unsigned long long>(s.cancelled));
  EXPECT_EQ(runs_after_close.load(), 0) << "a run of a destroyed lane ran";
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.fired, ran);
  EXPECT_EQ(s.fired + s.cancelled, scheduled) << "every timer either ran or was cancelled by the lane's close";
}

// design.md, Lanes: on the lane's thread a reschedule of a run already in
// the lane's ready queue wins (R4, runtime/timer_state.hpp). The lane's
// thread lets runs pile up in its ready queue, then reschedules some of
// them (and, from callbacks, runs of the same batch) while a canceller on
// another thread cancels at random: every timer runs exactly once, never
// before the last due a reschedule that returned true gave it, or its
// cancel won, never both; the records left in the ready queue by the
// take-backs run nothing.
TEST(RuntimeLaneRace, reschedules_on_the_lane_thread_of_queued_runs_race_cancels_and_each_timer_runs_once_never_early) {
  chime_stress::print_seed();
  chime::RuntimeOptions options = stress_support::steady_options(1);
  options.precision = 100us;
  chime::Runtime rt(options);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kTimers = 3'000;
#else
  constexpr int kTimers = 30'000;
#endif
  // due: the last due it was given (the lane's thread writes it after the schedule); early: runs before it.
  using Timed = stress_support::TimerLog;
  std::vector<Timed> timers(kTimers);
  std::atomic<int> scheduled{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reschedules_won{0};
  std::thread lane_thread([&] {
    chime::Lane lane = rt.lane();  // made here: this is the lane's thread from the start
    std::mt19937_64 rng(chime_stress::seed());
    auto reschedule_some = [&](int n) {
      const int known = scheduled.load(std::memory_order_acquire);
      for (int k = 0; k < n && known > 0; ++k) {
        Timed& t = timers[rng() % static_cast<std::size_t>(known)];
        const chime::TimePoint due = rt.clock().now() + std::chrono::microseconds(rng() % 1500);
        // The due is recorded before the reschedule: the run it allows
        // comes later on this thread. A reschedule that lost restores it.
        const std::int64_t before = t.due.exchange(due.time_since_epoch().count());
        if (lane.reschedule_at(stress_support::unpack(t.id.load(std::memory_order_acquire)), due)) {
          reschedules_won.fetch_add(1, std::memory_order_relaxed);
        } else {
          t.due.store(before);
        }
      }
    };
    for (int i = 0; i < kTimers; ++i) {
      Timed& t = timers[static_cast<std::size_t>(i)];
      const chime::TimePoint due = rt.clock().now() + std::chrono::microseconds(rng() % 1500);
      t.due.store(due.time_since_epoch().count());
      const chime::TimerId id = lane.schedule_at(due, [&t, &rt, &rng, &reschedule_some] {
        if (rt.clock().now().time_since_epoch().count() < t.due.load()) t.early.fetch_add(1);
        t.runs.fetch_add(1);
        if (rng() % 4 == 0) reschedule_some(2);  // runs of this batch, often
      });
      t.id.store(stress_support::pack(id), std::memory_order_release);
      scheduled.store(i + 1, std::memory_order_release);
      if (i % 32 == 31) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 800));  // runs pile up in the ready queue
        reschedule_some(4);
        lane.run_ready(rng() % 16);
      }
    }
    while (!stop.load(std::memory_order_acquire)) lane.wait_and_run(rt.clock().now() + 1ms);
    lane.run_ready();
  });
  std::thread canceller([&] {
    std::mt19937_64 rng(chime_stress::seed() ^ 0xca9ce1);
    while (scheduled.load(std::memory_order_acquire) < kTimers) {
      const int known = scheduled.load(std::memory_order_acquire);
      if (known == 0) continue;
      Timed& t = timers[rng() % static_cast<std::size_t>(known)];
      const chime::TimerId id = stress_support::unpack(t.id.load(std::memory_order_acquire));
      if (rt.cancel(id) && t.cancels_won.fetch_add(1) != 0) ADD_FAILURE() << "a second cancel of one timer won";
      if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  canceller.join();
  while (scheduled.load() < kTimers) std::this_thread::yield();
  std::this_thread::sleep_for(5ms);  // every due is at most 1.5 ms after its last reschedule
  stress_support::wait_until_idle(rt);
  stop.store(true, std::memory_order_release);
  lane_thread.join();
  const stress_support::Outcomes o = stress_support::tally(timers);
  const std::size_t ran = o.ran, cancelled = o.cancelled, neither = o.neither, both = o.both, twice = o.ran_twice,
                    early = o.early_runs;
  std::printf("%d lane timers: %zu ran, %zu cancelled, %llu reschedules won\n", kTimers, ran, cancelled,
              static_cast<unsigned long long>(reschedules_won.load()));
  EXPECT_EQ(neither, 0u) << "lost timers";
  EXPECT_EQ(both, 0u) << "a cancel that returned true did not stop the run";
  EXPECT_EQ(twice, 0u) << "a timer ran twice (a record left by a take-back ran)";
  EXPECT_EQ(early, 0u) << "a run before the due its last successful reschedule gave it";
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.fired, ran);
  EXPECT_EQ(s.cancelled, cancelled);
  EXPECT_EQ(s.rescheduled, reschedules_won.load());
}

// shutdown racing a lane thread that runs periodic and one-shot timers: the
// Dekker pair between lane batches and shutdown (runtime/lane.cpp) leaves
// nothing pending once the lane has run what shutdown made ready, and every
// timer is settled (fired or cancelled) exactly once.
TEST(RuntimeLaneRace, shutdown_racing_a_running_lane_leaves_nothing_pending) {
  chime_stress::print_seed();
  std::mt19937_64 rng(chime_stress::seed());
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kRounds = 10;
#else
  constexpr int kRounds = 40;
#endif
  for (int round = 0; round < kRounds; ++round) {
    chime::RuntimeOptions options = stress_support::steady_options(1);
    options.precision = 100us;
    chime::Runtime rt(options);
    chime::Lane lane = rt.lane();
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> runs{0};
    std::thread lane_thread([&] {
      while (!stop.load(std::memory_order_acquire)) lane.wait_and_run(rt.clock().now() + 1ms);
    });
    for (int i = 0; i < 50; ++i) {
      lane.schedule_every(std::chrono::microseconds(100 + rng() % 500), [&runs] { runs.fetch_add(1); });
      lane.schedule_after(std::chrono::microseconds(rng() % 3000), [&runs] { runs.fetch_add(1); });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    const bool fire = round % 2 == 0;
    rt.shutdown(fire ? chime::ShutdownMode::fire_pending : chime::ShutdownMode::cancel_pending);
    stop.store(true, std::memory_order_release);
    lane_thread.join();
    lane.run_ready();  // the runs shutdown made ready (fire_pending), as final runs
    const chime::Stats s = rt.stats();
    EXPECT_EQ(s.pending, 0u) << "round " << round << (fire ? " fire_pending" : " cancel_pending");
    EXPECT_EQ(s.fired, runs.load()) << "round " << round;
    EXPECT_EQ(lane.run_ready(), 0u) << "a periodic timer was re-armed after shutdown";
  }
}

// The lane's own token (runtime/lane.cpp, LaneToken) passes between threads
// that take turns running the lane (one at a time, as the contract says)
// while both keep scheduling on it: no schedule is lost or doubled.
TEST(RuntimeLaneRace, threads_taking_turns_at_the_lane_while_scheduling_lose_and_double_nothing) {
  chime_stress::print_seed();
  chime::RuntimeOptions options = stress_support::steady_options(1);
  options.precision = 100us;
  chime::Runtime rt(options);
  chime::Lane lane = rt.lane();
  std::mutex turn;  // one thread runs the lane at a time
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kEach = 3'000;
#else
  constexpr int kEach = 30'000;
#endif
  std::vector<std::atomic<int>> runs(2 * kEach);
  auto worker = [&](int t) {
    std::mt19937_64 rng(chime_stress::seed() + static_cast<std::uint64_t>(t));
    for (int i = 0; i < kEach; ++i) {
      std::atomic<int>& r = runs[static_cast<std::size_t>(t * kEach + i)];
      lane.schedule_after(std::chrono::microseconds(rng() % 500), [&r] { r.fetch_add(1); });
      if (i % 16 == 0) {
        std::lock_guard<std::mutex> lock(turn);
        lane.run_ready();  // this thread is the lane's thread now
      }
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (rt.stats().pending != 0 && std::chrono::steady_clock::now() < give_up)
    lane.wait_and_run(rt.clock().now() + 1ms);
  rt.flush();  // on the lane's thread: runs what the last advance made ready
  int lost = 0, doubled = 0;
  for (auto& r : runs) {
    lost += r.load() == 0 ? 1 : 0;
    doubled += r.load() > 1 ? 1 : 0;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(doubled, 0);
  EXPECT_EQ(rt.stats().fired, runs.size());
}

struct CoroutineCounters {
  std::atomic<int> finished{0};
  std::atomic<int> frames_destroyed{0};
  std::atomic<int> wrong_thread{0};
};
struct FrameGuard {
  CoroutineCounters* c;
  ~FrameGuard() { c->frames_destroyed.fetch_add(1); }
};

// Starts on the calling thread (its first suspension is there), then lives
// on the lane.
chime::Detached hop(chime::Lane& lane, std::chrono::microseconds delay, int hops, CoroutineCounters& c,
                    const std::atomic<std::thread::id>& lane_thread) {
  FrameGuard g{&c};
  for (int i = 0; i < hops; ++i) {
    co_await lane.sleep_for(delay);
    if (std::this_thread::get_id() != lane_thread.load(std::memory_order_relaxed)) c.wrong_thread.fetch_add(1);
  }
  c.finished.fetch_add(1);
}

// Coroutines whose first sleep is scheduled from other threads than the
// lane's (their sleeps may come due before await_suspend has returned: the
// resumer waits for it), then a lane destroyed while some still sleep: every
// coroutine finishes on the lane's thread or has its frame destroyed, once.
TEST(RuntimeLaneRace, coroutines_started_on_other_threads_resume_on_the_lane_and_none_leaks_at_close) {
  chime_stress::print_seed();
  chime::RuntimeOptions options = stress_support::steady_options(1);
  options.precision = 100us;
  chime::Runtime rt(options);
  CoroutineCounters c;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kPerThread = 500;
#else
  constexpr int kPerThread = 5'000;
#endif
  {
    chime::Lane lane = rt.lane();
    std::atomic<std::thread::id> lane_thread{};
    std::atomic<bool> stop{false};
    std::thread runner([&] {
      lane_thread.store(std::this_thread::get_id());
      while (!stop.load(std::memory_order_acquire)) lane.wait_and_run(rt.clock().now() + 1ms);
    });
    while (lane_thread.load() == std::thread::id()) std::this_thread::yield();
    auto start = [&](std::uint64_t seed) {
      std::mt19937_64 rng(seed);
      for (int i = 0; i < kPerThread; ++i) {
        // Most finish within a few ms; one in ten sleeps for a minute, so the close finds it.
        const auto delay = std::chrono::microseconds(i % 10 == 0 ? 60'000'000 : rng() % 300);
        hop(lane, delay, 3, c, lane_thread);
      }
    };
    std::thread a(start, chime_stress::seed()), b(start, chime_stress::seed() + 1);
    a.join();
    b.join();
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (c.finished.load() < 2 * kPerThread * 9 / 10 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    stop.store(true, std::memory_order_release);
    runner.join();
    // ~Lane: the minute-long sleeps are still pending: their frames go.
  }
  std::printf("%d coroutines: %d finished, %d frames destroyed\n", 2 * kPerThread, c.finished.load(),
              c.frames_destroyed.load());
  EXPECT_EQ(c.finished.load(), 2 * kPerThread * 9 / 10);
  EXPECT_EQ(c.frames_destroyed.load(), 2 * kPerThread) << "frames leaked or destroyed twice";
  EXPECT_EQ(c.wrong_thread.load(), 0);
  EXPECT_EQ(rt.stats().pending, 0u);
}

}  // namespace
