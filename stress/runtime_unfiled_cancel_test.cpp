// SPDX-License-Identifier: BSL-1.0
// Cancels that beat the wheel thread's filing (docs/state-machine.md, "Who
// frees the slot": the filed bit, A1): a timer cancelled before the wheel
// thread applied its ADD has its slot freed by the canceller, into the
// canceller's slot cache, and the producer's next schedule reuses that slot
// at once, while the first timer's ADD is still queued. The ADD then finds
// its timer Cancelled or its slot holding a newer generation and must do
// nothing. Raced here, on timers due 0-3 ms ahead so the wheel files and
// fires them while the races go on:
// - the owner's cancel right after its schedule, against A1 (the slot goes
//   back to the owner's cache and is reused by its next schedule);
// - the owner's reschedule right after its schedule (an ADD that meets
//   Writing waits a pass), against a second thread's cancel of the same
//   timer (C2 then R3: the rescheduler frees an unfiled slot);
// - the second thread's cancels of recent timers, filed or not.
// Checked: every timer has exactly one outcome (one run with its own id, or
// one cancel that returned true), no run starts before the due it was
// dispatched for, the ids a run sees are its own (a slot freed twice would
// give two live timers one slot: one would run the other's task or never
// run), and stats add up. Bounded: 1 s of traffic, 2 workers; under
// ThreadSanitizer in CI.
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
using stress_support::pack;
using stress_support::unpack;

struct Log : stress_support::TimerLog {
  std::atomic<int> wrong_id{0};  // a run whose Firing named another timer
};

TEST(RuntimeUnfiledCancel, cancels_before_filing_free_slots_for_reuse_and_every_timer_has_one_outcome) {
  chime_stress::print_seed();
  constexpr std::size_t kProducers = 2, kPerProducer = 60'000, kTimers = kProducers * kPerProducer;
  std::vector<Log> logs(kTimers);
  chime::Runtime rt(stress_support::steady_options(2));
  std::atomic<std::size_t> published[kProducers] = {};
  std::atomic<bool> producing{true};
  const auto stop_at = std::chrono::steady_clock::now() + 1s;

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(chime_stress::seed() * 37 + p);
      chime::Producer producer = rt.producer();
      for (std::size_t k = 0; k < kPerProducer && std::chrono::steady_clock::now() < stop_at; ++k) {
        Log& log = logs[p * kPerProducer + k];
        const Duration delay = Duration(static_cast<std::int64_t>(rng() % 3'000'000));
        const TimerId id = producer.schedule_after(delay, [&log, &rt](const chime::Firing& f) {
          const TimePoint now = rt.clock().now();
          std::uint64_t mine;  // stored by the producer just after schedule returned
          while ((mine = log.id.load(std::memory_order_acquire)) == 0) std::this_thread::yield();
          if (pack(f.id) != mine) log.wrong_id.fetch_add(1);
          log.record_run(now, f);
        });
        log.id.store(pack(id), std::memory_order_release);
        published[p].store(k + 1, std::memory_order_release);
        switch (rng() % 4) {
          case 0:  // cancel at once: almost always before the wheel files it
            if (producer.cancel(id)) log.cancels_won.fetch_add(1);
            break;
          case 1:  // touch at once (the ADD may meet Writing), later or earlier
            (void)producer.reschedule_after(id, Duration(static_cast<std::int64_t>(rng() % 4'000'000)));
            break;
          default:  // left to fire, or to the other thread's cancel
            break;
        }
        if (k % 2048 == 2047) std::this_thread::sleep_for(200us);  // let the wheel catch up now and then
      }
    });
  }
  threads.emplace_back([&] {  // cancels the newest timers of each producer, racing their owner
    std::mt19937_64 rng(chime_stress::seed() * 37 + 100);
    chime::Producer producer = rt.producer();
    while (producing.load()) {
      for (std::size_t p = 0; p < kProducers; ++p) {
        const std::size_t n = published[p].load(std::memory_order_acquire);
        if (n == 0) continue;
        const std::size_t back = rng() % 4;
        if (back >= n) continue;
        Log& log = logs[p * kPerProducer + (n - 1 - back)];
        if (producer.cancel(unpack(log.id.load(std::memory_order_acquire)))) log.cancels_won.fetch_add(1);
      }
      if (rng() % 64 == 0) std::this_thread::yield();
    }
  });
  for (std::size_t p = 0; p < kProducers; ++p) threads[p].join();
  producing.store(false);
  threads.back().join();
  stress_support::wait_until_idle(rt);

  stress_support::Outcomes o;
  std::size_t wrong = 0;
  for (std::size_t p = 0; p < kProducers; ++p) {
    for (std::size_t k = 0; k < published[p].load(); ++k) {
      const Log& log = logs[p * kPerProducer + k];
      o.add(log);
      wrong += static_cast<std::size_t>(log.wrong_id.load());
    }
  }
  const std::size_t issued = o.timers, runs = o.runs, won = o.cancels_won, both = o.both, neither = o.neither,
                    twice = o.twice, early = o.early_runs;
  const chime::Stats s = rt.stats();
  std::printf("unfiled cancel: %zu timers, %zu runs, %zu cancels won\n", issued, runs, won);
  EXPECT_GT(won, issued / 8) << "the cancels must have been exercised";
  EXPECT_EQ(both, 0u) << "a timer both ran and was cancelled";
  EXPECT_EQ(neither, 0u) << "a timer neither ran nor was cancelled (lost)";
  EXPECT_EQ(twice, 0u) << "a timer ran or was cancelled twice";
  EXPECT_EQ(early, 0u) << "a run started before its due";
  EXPECT_EQ(wrong, 0u) << "a run saw another timer's id: a slot held two timers";
  EXPECT_EQ(s.scheduled, issued);
  EXPECT_EQ(s.fired, runs);
  EXPECT_EQ(s.cancelled, won);
  EXPECT_EQ(s.pending, 0u);
}

}  // namespace
