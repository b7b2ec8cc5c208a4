// SPDX-License-Identifier: BSL-1.0
// cancel() racing shutdown() (runtime.hpp "shutdown"; docs/state-machine.md,
// "Shutdown vs producers"): every filed timer ends exactly one way, a cancel
// that returned true or shutdown()'s count, and once shutdown() has returned
// and the cancelling thread is done, nothing is left pending: stats().pending
// is 0 and every task (with what it captured) has been destroyed, not kept
// until the Runtime's destructor.
//
// The race it aims at: a cancel that wins after the wheel thread has exited
// leaves a zombie nobody will reclaim (a cancel posts no command); the
// shutdown sweep must free that timer itself. A thread cancels from the last timer backwards while shutdown()
// sweeps from the first slot forwards, so some cancels land before the stop,
// some between the wheel thread's exit and the sweep, and some after the
// sweep (those return false). Bounded: 6 rounds of 50,000 timers
// (0, 1 and 2 workers; both shutdown modes).
#include "stress_seed.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::TimePoint;
using chime::TimerId;

void round_of(std::size_t timers, unsigned workers, chime::ShutdownMode mode, std::size_t& won_total,
              std::size_t& not_fired_total) {
  chime::ManualClock clock(TimePoint{} + 1000s);
  chime::RuntimeOptions o;
  o.precision = 1ms;
  o.workers = workers;
  o.clock = &clock;
  const auto capture = std::make_shared<int>(0);  // every task holds a copy
  std::atomic<std::size_t> runs{0};
  chime::Runtime rt(o);
  std::vector<TimerId> ids;
  ids.reserve(timers);
  for (std::size_t i = 0; i < timers; ++i) {
    ids.push_back(rt.schedule_at(clock.now() + 10s, [capture, &runs](const chime::Firing&) { runs.fetch_add(1); }));
  }
  rt.flush();  // every timer is filed in the wheel now
  std::atomic<std::size_t> progress{0};
  std::size_t won = 0;
  std::thread canceller([&] {
    for (std::size_t k = 0; k < timers; ++k) {
      if (rt.cancel(ids[timers - 1 - k])) ++won;
      progress.store(k + 1, std::memory_order_relaxed);
      if (k % 32 == 31) std::this_thread::sleep_for(10us);  // paced, so the cancels span the whole shutdown
    }
  });
  while (progress.load(std::memory_order_relaxed) < timers / 8) std::this_thread::yield();
  const std::size_t not_fired = rt.shutdown(mode);
  canceller.join();
  const chime::Stats s = rt.stats();
  const std::size_t ran = runs.load();
  EXPECT_EQ(won + not_fired + ran, timers) << "timers neither cancelled, counted by shutdown nor run (or two of them)";
  EXPECT_EQ(s.pending, 0u) << "timers still pending after shutdown() returned and every cancel was done";
  EXPECT_EQ(capture.use_count(), 1) << capture.use_count() - 1
                                    << " tasks still alive after shutdown() returned and every cancel was done";
  won_total += won;
  not_fired_total += not_fired + ran;
}

TEST(RuntimeShutdownCancel, cancels_racing_shutdown_leave_nothing_pending) {
  chime_stress::print_seed();
  constexpr std::size_t kTimers = 50'000;
  std::size_t won = 0, not_fired = 0, rounds = 0;
  for (const unsigned workers : {0u, 1u, 2u}) {
    for (const chime::ShutdownMode mode : {chime::ShutdownMode::cancel_pending, chime::ShutdownMode::fire_pending}) {
      round_of(kTimers, workers, mode, won, not_fired);
      ++rounds;
    }
  }
  std::printf("[ stress   ] %zu rounds of %zu timers: %zu cancels won, %zu ended by shutdown (counted or run)\n", rounds,
              kTimers, won, not_fired);
  EXPECT_GT(won, 0u);
  EXPECT_GT(not_fired, 0u);
}

// shutdown(cancel_pending) with a command backlog (design.md, shutdown): no
// timer whose due time is after the call runs, however many commands are
// still queued; the queued ADDs end as cancelled (shutdown's count). Two
// threads post 100,000 schedule_after(0-50 ms) each as fast as they can,
// then shutdown is called at once, on the steady clock. A stop that waited
// behind the backlog would let timers due after the call run.
TEST(RuntimeShutdownCancel, cancel_pending_runs_no_timer_due_after_the_call_however_long_the_backlog) {
  chime_stress::print_seed();
  constexpr std::size_t kPerThread = 100'000;
  chime::RuntimeOptions o;
  o.precision = 1ms;
  o.workers = 2;
  std::vector<std::atomic<std::int64_t>> ran_due(2 * kPerThread);
  for (auto& d : ran_due) d.store(INT64_MIN, std::memory_order_relaxed);
  chime::Runtime rt(o);
  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      chime::Producer producer = rt.producer();
      std::uint64_t x = chime_stress::seed() + p;
      for (std::size_t i = 0; i < kPerThread; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const auto delay = std::chrono::microseconds((x >> 33) % 50'000);
        std::atomic<std::int64_t>* slot = &ran_due[p * kPerThread + i];
        producer.schedule_after(delay, [slot](const chime::Firing& f) {
          slot->store(f.due.time_since_epoch().count(), std::memory_order_relaxed);
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::int64_t called_at = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::size_t not_fired = rt.shutdown(chime::ShutdownMode::cancel_pending);
  std::size_t ran = 0, ran_after_call = 0;
  for (const auto& d : ran_due) {
    const std::int64_t due = d.load(std::memory_order_relaxed);
    if (due == INT64_MIN) continue;
    ++ran;
    if (due > called_at) ++ran_after_call;
  }
  std::printf("[ stress   ] %zu timers: %zu ran, %zu cancelled by shutdown\n", ran_due.size(), ran, not_fired);
  EXPECT_EQ(ran_after_call, 0u) << "timers due after shutdown(cancel_pending) was called ran";
  EXPECT_EQ(ran + not_fired, ran_due.size()) << "every timer ran or was counted by shutdown";
}

}  // namespace
