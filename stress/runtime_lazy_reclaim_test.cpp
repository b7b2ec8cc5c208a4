// SPDX-License-Identifier: BSL-1.0
// Lazy reclaim under races (docs/state-machine.md: C1-C4, the zombie sweep,
// "Cancel vs a run handed over"): producers schedule timers due 100-400 ms
// ahead while one thread cancels them (some before their ADD is filed, most
// while filed, some handed over or running), another pushes them later or
// earlier (touches racing the slot coming up and racing sweeps), and the
// cancels are heavy enough that zombies exceed a quarter of the filed timers
// and are swept many times. Checked: every timer has exactly one outcome
// (one run, or a cancel that returned true, never both), no run starts
// before the due it was dispatched for, a second
// cancel never wins, stale ids whose slot was reused after a sweep never act,
// stats add up, and sweeps happened. Bounded: 1.5 s of traffic (a budget,
// not a measurement), 2 workers, under ThreadSanitizer in CI.
#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

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

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;
using chime::TimerId;
using stress_support::ns;
using stress_support::pack;
using stress_support::unpack;
using Log = stress_support::TimerLog;  // due: the first one (the toucher's reschedules leave it)

TEST(RuntimeLazyReclaim, cancels_touches_and_sweeps_race_fires_and_every_timer_has_one_outcome) {
  chime_stress::print_seed();
  constexpr std::size_t kProducers = 2, kPerProducer = 40'000, kTimers = kProducers * kPerProducer;
  std::vector<Log> logs(kTimers);
  // One shard, whatever CHIME_SHARDS says: a sweep needs a quarter of one
  // wheel's timers to be zombies, and each of N shards holds 1/N of them
  // (under TSan with two shards the sweep was sometimes never reached).
  chime::RuntimeOptions options = stress_support::steady_options(2);
  options.shards = 1;
  chime::Runtime rt(options);
  std::atomic<std::size_t> published[kProducers] = {};  // producer p's logs[p * kPerProducer + k], k < published[p]
  std::atomic<bool> producing{true};
  const auto stop_at = std::chrono::steady_clock::now() + 1500ms;

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(chime_stress::seed() * 31 + p);
      chime::Producer producer = rt.producer();
      for (std::size_t k = 0; k < kPerProducer && std::chrono::steady_clock::now() < stop_at; ++k) {
        Log& log = logs[p * kPerProducer + k];
        const TimePoint due = rt.clock().now() + 100ms + Duration(static_cast<std::int64_t>(rng() % 300'000'000));
        log.due.store(ns(due), std::memory_order_relaxed);
        const TimerId id =
            producer.schedule_at(due, [&log, &rt](const chime::Firing& f) { log.record_run(rt.clock().now(), f); });
        log.id.store(pack(id), std::memory_order_relaxed);
        published[p].store(k + 1, std::memory_order_release);
        if (k % 1024 == 1023) std::this_thread::sleep_for(1ms);
      }
    });
  }
  std::atomic<std::uint64_t> second_cancel_won{0};
  threads.emplace_back([&] {  // the canceller: 3 of 4 timers, twice each, soon after publication
    std::mt19937_64 rng(chime_stress::seed() * 31 + 100);
    chime::Producer producer = rt.producer();
    std::size_t next[kProducers] = {};
    for (bool more = true, filed_first = false; more; filed_first = !filed_first) {
      more = producing.load();
      std::size_t upto[kProducers];
      for (std::size_t p = 0; p < kProducers; ++p) upto[p] = published[p].load(std::memory_order_acquire);
      // Every other round, make sure the ADDs of what it cancels were applied
      // first, so those cancels make zombies (filed, then cancelled) however
      // fast this thread runs against the wheel thread (under TSan it can
      // outrun it, and then every cancel lands before its ADD); the other
      // rounds cancel timers whose ADD may still be queued.
      if (filed_first) rt.flush();
      for (std::size_t p = 0; p < kProducers; ++p) {
        const std::size_t n = upto[p];
        for (; next[p] < n; ++next[p]) {
          if (rng() % 4 == 0) continue;
          Log& log = logs[p * kPerProducer + next[p]];
          const TimerId id = unpack(log.id.load(std::memory_order_relaxed));
          if (producer.cancel(id)) log.cancels_won.fetch_add(1);
          if (producer.cancel(id)) second_cancel_won.fetch_add(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    }
  });
  threads.emplace_back([&] {  // the toucher: random published timers, later (mostly) or earlier
    std::mt19937_64 rng(chime_stress::seed() * 31 + 200);
    chime::Producer producer = rt.producer();
    while (producing.load()) {
      for (int b = 0; b < 64; ++b) {
        const std::size_t p = rng() % kProducers;
        const std::size_t n = published[p].load(std::memory_order_acquire);
        if (n == 0) continue;
        Log& log = logs[p * kPerProducer + rng() % n];
        const TimerId id = unpack(log.id.load(std::memory_order_relaxed));
        const Duration d = rng() % 8 == 0 ? 1ms : 10ms + Duration(static_cast<std::int64_t>(rng() % 50'000'000));
        (void)producer.reschedule_after(id, d);  // either outcome is fine; the run checks its own due
      }
      std::this_thread::yield();
    }
  });
  for (std::size_t p = 0; p < kProducers; ++p) threads[p].join();
  producing.store(false);
  for (std::size_t t = kProducers; t < threads.size(); ++t) threads[t].join();
  stress_support::wait_until_idle(rt);

  stress_support::Outcomes o;
  std::vector<TimerId> ids;
  for (std::size_t p = 0; p < kProducers; ++p) {
    for (std::size_t k = 0; k < published[p].load(); ++k) {
      const Log& log = logs[p * kPerProducer + k];
      o.add(log);
      ids.push_back(unpack(log.id.load()));
    }
  }
  const std::size_t issued = o.timers, runs = o.runs, won = o.cancels_won, both = o.both, neither = o.neither,
                    twice = o.twice, early = o.early_runs;
  // Stale ids: every slot has been reused or freed by now; an old id acts on nothing.
  std::size_t stale_acted = 0;
  for (const TimerId id : ids) {
    if (rt.cancel(id) || rt.reschedule_after(id, 1s)) ++stale_acted;
  }
  const chime::Stats s = rt.stats();
  std::printf("[ stress   ] %zu timers: %zu ran, %zu cancelled (%llu second cancels won), %zu both, %zu neither, "
              "%zu twice, %zu early; %zu stale ids acted; stats: scheduled %llu fired %llu cancelled %llu "
              "rescheduled %llu pending %llu zombie_sweeps %llu wakeups %llu\n",
              issued, runs, won, static_cast<unsigned long long>(second_cancel_won.load()), both, neither, twice, early,
              stale_acted, static_cast<unsigned long long>(s.scheduled), static_cast<unsigned long long>(s.fired),
              static_cast<unsigned long long>(s.cancelled), static_cast<unsigned long long>(s.rescheduled),
              static_cast<unsigned long long>(s.pending), static_cast<unsigned long long>(s.zombie_sweeps),
              static_cast<unsigned long long>(s.wakeups));
  EXPECT_GT(issued, 1'000u);
  EXPECT_EQ(both, 0u) << "a timer ran although its cancel returned true";
  EXPECT_EQ(neither, 0u) << "a timer neither ran nor was cancelled";
  EXPECT_EQ(twice, 0u);
  EXPECT_EQ(early, 0u) << "a run started before its due";
  EXPECT_EQ(second_cancel_won.load(), 0u);
  EXPECT_EQ(stale_acted, 0u) << "an old id cancelled or rescheduled a timer";
  EXPECT_EQ(s.scheduled, issued);
  EXPECT_EQ(s.fired, runs);
  EXPECT_EQ(s.cancelled, won);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_GT(s.zombie_sweeps, 0u) << "no zombie sweep ran: the race with sweeps was not exercised";
}

}  // namespace
