// SPDX-License-Identifier: BSL-1.0
// Multi-threaded races of chime::Runtime on the real (steady) clock, bounded
// to a few seconds under ThreadSanitizer (runtime.hpp):
// - schedule vs cancel vs fire: exactly one of {fire, successful cancel}
//   happens to every timer (never both, never neither; fired at most once),
//   and no timer fires before its due time by the runtime's clock;
// - reschedule vs cancel vs fire: the same, and a timer fires with the due
//   time of its last successful reschedule;
// - periodic vs cancel: runs of one timer never overlap, the first cancel of a
//   periodic timer wins, and after it returns at most the run already started
//   completes;
// - shutdown vs schedule: every accepted timer is fired or counted by
//   shutdown, and nothing runs after shutdown returns.
// Random choices come from the printed seed (replay with --seed=N).

#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::Firing;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;

using stress_support::ns;
using stress_support::Outcomes;
using stress_support::pack;
using stress_support::steady_options;
using stress_support::TimerLog;  // one per one-shot timer; due: its last successful schedule/reschedule
using stress_support::unpack;
using stress_support::wait_until_idle;

struct Race {
  explicit Race(std::size_t n, unsigned workers) : logs(n), rt(steady_options(workers)) {}
  std::vector<TimerLog> logs;
  Runtime rt;  // declared after logs: destroyed (joined) first

  chime::Task task(std::size_t i) {
    return [this, i](const Firing& f) { logs[i].record_run(rt.clock().now(), f); };
  }
};

// Picks a recently published timer of producer `p` (or any of its timers), or returns false.
bool pick(std::mt19937_64& rng, const std::vector<std::atomic<std::size_t>>& progress, std::size_t per_producer,
          std::size_t& index) {
  const std::size_t p = rng() % progress.size();
  const std::size_t published = progress[p].load(std::memory_order_acquire);
  if (published == 0) return false;
  std::size_t k;
  if (rng() % 4 != 0) {
    const std::size_t window = std::min<std::size_t>(published, 256);  // recent: races with firing
    k = published - 1 - rng() % window;
  } else {
    k = rng() % published;
  }
  index = p * per_producer + k;
  return true;
}

void expect_clean(const Outcomes& v, std::size_t n) {
  EXPECT_EQ(v.unpublished, 0u);
  EXPECT_EQ(v.ran + v.cancelled, n + v.both) << "some timer neither fired nor was cancelled, or did both";
  EXPECT_EQ(v.both, 0u) << "timers that fired although a cancel returned true";
  EXPECT_EQ(v.neither, 0u) << "timers that never fired although no cancel returned true";
  EXPECT_EQ(v.ran_twice, 0u) << "one-shot timers that fired more than once";
  EXPECT_EQ(v.fired_early, 0u) << "timers whose callback saw the runtime clock before their due time";
  EXPECT_EQ(v.wrong_due, 0u) << "timers fired with a Firing::due other than their last successful due time";
  EXPECT_EQ(v.wrong_id, 0u) << "timers fired with a Firing::id other than the id schedule returned";
}

// 4 producers schedule 20,000 timers due 0-20 ms ahead while 2 threads cancel random recent ids; every
// timer fires exactly once XOR has exactly one winning cancel, and none fires before its due time.
TEST(RuntimeRace, schedule_cancel_fire_exactly_one_outcome_never_early) {
  chime_stress::print_seed();
  constexpr std::size_t kProducers = 4, kCancellers = 2, kPerProducer = 5'000, kTimers = kProducers * kPerProducer;
  Race race(kTimers, 2);
  std::vector<std::atomic<std::size_t>> progress(kProducers);
  std::atomic<std::size_t> producers_left{kProducers};
  std::atomic<std::uint64_t> cancel_calls{0}, cancels_lost_to_fire{0};

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(chime_stress::seed() * 31 + p);
      chime::Producer producer = race.rt.producer();
      const bool use_producer = p % 2 == 0;  // half through a Producer token, half through Runtime's calls
      for (std::size_t k = 0; k < kPerProducer; ++k) {
        const std::size_t i = p * kPerProducer + k;
        const TimePoint due = race.rt.clock().now() + Duration(static_cast<std::int64_t>(rng() % 20'000'001));
        race.logs[i].due.store(ns(due), std::memory_order_relaxed);
        const TimerId id = use_producer ? producer.schedule_at(due, race.task(i)) : race.rt.schedule_at(due, race.task(i));
        race.logs[i].id.store(pack(id), std::memory_order_release);
        progress[p].store(k + 1, std::memory_order_release);
        if (k % 64 == 63) std::this_thread::sleep_for(500us);
      }
      producers_left.fetch_sub(1);
    });
  }
  for (std::size_t c = 0; c < kCancellers; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(chime_stress::seed() * 31 + 1000 + c);
      std::uint64_t calls = 0, lost = 0;
      auto stop_at = std::chrono::steady_clock::time_point::max();
      while (std::chrono::steady_clock::now() < stop_at) {
        if (producers_left.load() == 0 && stop_at == std::chrono::steady_clock::time_point::max()) {
          stop_at = std::chrono::steady_clock::now() + 25ms;  // keep racing with the last timers firing
        }
        std::size_t i;
        if (!pick(rng, progress, kPerProducer, i)) continue;
        const std::uint64_t id = race.logs[i].id.load(std::memory_order_acquire);
        ++calls;
        if (race.rt.cancel(unpack(id))) {
          race.logs[i].cancels_won.fetch_add(1, std::memory_order_relaxed);
        } else if (race.logs[i].cancels_won.load(std::memory_order_relaxed) == 0) {
          ++lost;  // (approximately) lost to the timer firing rather than to the other canceller
        }
        if (calls % 16 == 0) std::this_thread::sleep_for(50us);
      }
      cancel_calls.fetch_add(calls);
      cancels_lost_to_fire.fetch_add(lost);
    });
  }
  for (auto& t : threads) t.join();
  wait_until_idle(race.rt);

  const Outcomes v = stress_support::tally(race.logs);
  const chime::Stats s = race.rt.stats();
  std::printf(
      "[ stress   ] checked %zu timers: %zu fired, %zu cancelled (%llu cancel calls, ~%llu lost to a fire), "
      "%zu both, %zu neither, %zu fired twice, %zu early, %zu wrong due; "
      "stats: scheduled %llu fired %llu cancelled %llu pending %llu\n",
      kTimers, v.ran, v.cancelled, static_cast<unsigned long long>(cancel_calls.load()),
      static_cast<unsigned long long>(cancels_lost_to_fire.load()), v.both, v.neither, v.ran_twice, v.fired_early,
      v.wrong_due, static_cast<unsigned long long>(s.scheduled), static_cast<unsigned long long>(s.fired),
      static_cast<unsigned long long>(s.cancelled), static_cast<unsigned long long>(s.pending));
  expect_clean(v, kTimers);
  EXPECT_GT(v.cancelled, 0u) << "the cancellers never won: the race was not exercised";
  EXPECT_GT(v.ran, 0u);
  EXPECT_EQ(s.scheduled, kTimers);
  EXPECT_EQ(s.fired, v.ran);
  EXPECT_EQ(s.cancelled, v.cancelled);
  EXPECT_EQ(s.pending, 0u);
}

// 2 producers schedule 8,000 timers while one thread reschedules random recent ones (later, or earlier
// to almost now) and another cancels: exactly one outcome per timer, the firing carries the last
// successful due time, and nothing fires before it.
TEST(RuntimeRace, reschedule_cancel_fire_exactly_one_outcome_at_last_due) {
  chime_stress::print_seed();
  constexpr std::size_t kProducers = 2, kPerProducer = 4'000, kTimers = kProducers * kPerProducer;
  Race race(kTimers, 2);
  std::vector<std::atomic<std::size_t>> progress(kProducers);
  std::atomic<std::size_t> producers_left{kProducers};
  std::atomic<std::uint64_t> reschedules_won{0}, reschedule_calls{0};

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(chime_stress::seed() * 37 + p);
      chime::Producer producer = race.rt.producer();
      for (std::size_t k = 0; k < kPerProducer; ++k) {
        const std::size_t i = p * kPerProducer + k;
        const TimePoint due = race.rt.clock().now() + Duration(static_cast<std::int64_t>(2'000'000 + rng() % 18'000'001));
        race.logs[i].due.store(ns(due), std::memory_order_relaxed);
        race.logs[i].id.store(pack(producer.schedule_at(due, race.task(i))), std::memory_order_release);
        progress[p].store(k + 1, std::memory_order_release);
        if (k % 64 == 63) std::this_thread::sleep_for(500us);
      }
      producers_left.fetch_sub(1);
    });
  }
  // The only thread that reschedules: so the last successful reschedule of a timer is well defined.
  threads.emplace_back([&] {
    std::mt19937_64 rng(chime_stress::seed() * 37 + 1000);
    chime::Producer producer = race.rt.producer();
    std::uint64_t calls = 0, won = 0;
    while (producers_left.load() != 0) {
      std::size_t i;
      if (!pick(rng, progress, kPerProducer, i)) continue;
      const TimerId id = unpack(race.logs[i].id.load(std::memory_order_acquire));
      const bool later = rng() % 2 == 0;
      const TimePoint due = race.rt.clock().now() +
                            Duration(static_cast<std::int64_t>(later ? 5'000'000 + rng() % 20'000'001 : rng() % 2'000'001));
      ++calls;
      const bool ok = rng() % 2 == 0 ? producer.reschedule_at(id, due) : race.rt.reschedule_at(id, due);
      if (ok) {
        race.logs[i].due.store(ns(due), std::memory_order_relaxed);
        ++won;
      }
      if (calls % 16 == 0) std::this_thread::sleep_for(50us);
    }
    reschedule_calls.fetch_add(calls);
    reschedules_won.fetch_add(won);
  });
  threads.emplace_back([&] {
    std::mt19937_64 rng(chime_stress::seed() * 37 + 2000);
    std::uint64_t calls = 0;
    while (producers_left.load() != 0) {
      std::size_t i;
      if (!pick(rng, progress, kPerProducer, i)) continue;
      ++calls;
      if (race.rt.cancel(unpack(race.logs[i].id.load(std::memory_order_acquire)))) {
        race.logs[i].cancels_won.fetch_add(1, std::memory_order_relaxed);
      }
      if (calls % 8 == 0) std::this_thread::sleep_for(100us);
    }
  });
  for (auto& t : threads) t.join();
  wait_until_idle(race.rt);

  const Outcomes v = stress_support::tally(race.logs);
  const chime::Stats s = race.rt.stats();
  std::printf(
      "[ stress   ] checked %zu timers: %zu fired, %zu cancelled, %llu of %llu reschedules won, %zu both, "
      "%zu neither, %zu fired twice, %zu early, %zu wrong due; stats: rescheduled %llu pending %llu\n",
      kTimers, v.ran, v.cancelled, static_cast<unsigned long long>(reschedules_won.load()),
      static_cast<unsigned long long>(reschedule_calls.load()), v.both, v.neither, v.ran_twice, v.fired_early,
      v.wrong_due, static_cast<unsigned long long>(s.rescheduled), static_cast<unsigned long long>(s.pending));
  expect_clean(v, kTimers);
  EXPECT_GT(reschedules_won.load(), 0u);
  EXPECT_EQ(s.rescheduled, reschedules_won.load());
  EXPECT_EQ(s.pending, 0u);
}

// 64 periodic timers (periods 2-5 ms, skip and catch_up; one whose 2 ms run outlasts its 1 ms period) run
// on 2 workers while a thread cancels them at random moments: runs of one timer never overlap, each first
// cancel returns true, a second returns false, and after the first returns at most the run already
// started completes.
TEST(RuntimeRace, periodic_cancel_never_overlaps_and_stops_runs) {
  chime_stress::print_seed();
  constexpr std::size_t kTimers = 64;
  struct PeriodicLog : stress_support::PeriodicTimerLog {
    std::atomic<std::int64_t> runs_at_cancel{-1};  // runs begun when its first cancel returned true
  };
  std::vector<PeriodicLog> logs(kTimers);
  Runtime rt(steady_options(2));
  std::mt19937_64 rng(chime_stress::seed() * 41);
  std::vector<TimerId> ids;
  for (std::size_t i = 0; i < kTimers; ++i) {
    const bool slow = i == 0;
    chime::PeriodicOptions o;
    o.on_missed = slow || i % 2 == 0 ? chime::Missed::skip : chime::Missed::catch_up;
    const Duration period = slow ? Duration(1ms) : Duration(static_cast<std::int64_t>(2'000'000 + rng() % 3'000'001));
    const Duration work = slow ? Duration(2ms) : Duration(20us);
    ids.push_back(rt.schedule_every(
        period,
        [log = &logs[i], work] {
          log->run_begins();
          std::this_thread::sleep_for(work);
          log->run_ends();
        },
        o));
  }
  std::vector<std::size_t> order(kTimers);
  for (std::size_t i = 0; i < kTimers; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t first_wins = 0, second_wins = 0;
  std::thread canceller([&] {
    for (std::size_t i : order) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
      if (rt.cancel(ids[i])) {
        ++first_wins;
        logs[i].runs_at_cancel.store(static_cast<std::int64_t>(logs[i].runs.load()));
      }
      if (rt.cancel(ids[i])) ++second_wins;
    }
  });
  canceller.join();
  wait_until_idle(rt);
  std::this_thread::sleep_for(20ms);  // any run wrongly started after its cancel would show up now
  rt.flush();

  std::size_t overlaps = 0, late_runs = 0, total_runs = 0;
  for (const PeriodicLog& log : logs) {
    overlaps += static_cast<std::size_t>(log.overlaps.load());
    total_runs += static_cast<std::size_t>(log.runs.load());
    const std::int64_t at_cancel = log.runs_at_cancel.load();
    if (at_cancel >= 0 && static_cast<std::int64_t>(log.runs.load()) > at_cancel + 1) ++late_runs;
  }
  std::printf("[ stress   ] checked %zu periodic timers: %zu runs, %zu first cancels won, %zu second cancels won, "
              "%zu overlapping runs, %zu timers that ran on after their cancel returned\n",
              kTimers, total_runs, first_wins, second_wins, overlaps, late_runs);
  EXPECT_EQ(first_wins, kTimers) << "the first cancel of a periodic timer must win";
  EXPECT_EQ(second_wins, 0u);
  EXPECT_EQ(overlaps, 0u) << "runs of one periodic timer overlapped";
  EXPECT_EQ(late_runs, 0u) << "a periodic run started after cancel() returned true";
  EXPECT_EQ(rt.stats().pending, 0u);
}

// 4 producers schedule timers due 0-5 ms ahead as fast as they can until shutdown() makes schedule throw
// StoppedError: no accepted timer is lost (accepted == fired + shutdown's count of timers not fired; with
// fire_pending that count is 0), and no callback starts after shutdown() returned.
TEST(RuntimeRace, shutdown_races_with_producers_and_loses_no_timer) {
  chime_stress::print_seed();
  for (const chime::ShutdownMode mode : {chime::ShutdownMode::cancel_pending, chime::ShutdownMode::fire_pending}) {
    const bool fire = mode == chime::ShutdownMode::fire_pending;
    std::atomic<std::uint64_t> fired{0}, after_shutdown{0}, accepted{0}, stopped_errors{0};
    std::atomic<bool> shutdown_returned{false};
    std::size_t not_fired = 0;
    {
      Runtime rt(steady_options(2));
      std::vector<std::thread> producers;
      for (std::size_t p = 0; p < 4; ++p) {
        producers.emplace_back([&, p] {
          std::mt19937_64 rng(chime_stress::seed() * 43 + p + (fire ? 100 : 0));
          chime::Producer producer = rt.producer();
          auto task = [&] {
            if (shutdown_returned.load(std::memory_order_acquire)) after_shutdown.fetch_add(1);
            fired.fetch_add(1, std::memory_order_relaxed);
          };
          for (std::uint64_t k = 0;; ++k) {
            const Duration delay(static_cast<std::int64_t>(rng() % 5'000'001));
            try {
              if (k % 2 == 0) {
                producer.schedule_after(delay, task);
              } else {
                rt.schedule_after(delay, task);
              }
            } catch (const chime::StoppedError&) {
              stopped_errors.fetch_add(1);
              return;
            }
            accepted.fetch_add(1, std::memory_order_relaxed);
            if (k % 32 == 31) std::this_thread::sleep_for(100us);
          }
        });
      }
      std::this_thread::sleep_for(30ms);
      not_fired = rt.shutdown(mode);
      shutdown_returned.store(true, std::memory_order_release);
      for (auto& t : producers) t.join();
      EXPECT_EQ(rt.shutdown(mode), 0u);
      const chime::Stats s = rt.stats();
      EXPECT_EQ(s.scheduled, accepted.load());
      EXPECT_EQ(s.pending, 0u);
    }
    std::printf("[ stress   ] shutdown(%s) under load: %llu timers accepted, %llu fired, %zu not fired (shutdown's "
                "count), %llu StoppedErrors, %llu runs after shutdown returned\n",
                fire ? "fire_pending" : "cancel_pending", static_cast<unsigned long long>(accepted.load()),
                static_cast<unsigned long long>(fired.load()), not_fired,
                static_cast<unsigned long long>(stopped_errors.load()),
                static_cast<unsigned long long>(after_shutdown.load()));
    EXPECT_EQ(stopped_errors.load(), 4u);
    EXPECT_EQ(accepted.load(), fired.load() + not_fired) << "accepted timers neither fired nor counted by shutdown";
    if (fire) {
      EXPECT_EQ(not_fired, 0u);
    }
    EXPECT_EQ(after_shutdown.load(), 0u) << "callbacks ran after shutdown() returned";
  }
}

}  // namespace
