// SPDX-License-Identifier: BSL-1.0
// Stress 8: flush(), drain() and stats() called in loops from their own
// threads while producers schedule, cancel and reschedule (design.md "Layer
// 2": flush, drain, stats; runtime.hpp). Checked for every timer:
// - every one-shot timer fires exactly once (Firing::id its own, Firing::due
//   its last successful due time) or has exactly one winning cancel, drained
//   runs included; every periodic timer's runs never overlap and its one
//   cancel at the end wins;
// - drain() counts add up: a drained run is one whose callback reads the
//   runtime clock before its Firing::due (the one exception to "never
//   early"), and no other run may be early;
// - stats() counters (scheduled, fired, cancelled, rescheduled,
//   callback_errors, wakeups, lateness.max) never decrease across successive
//   snapshots, and after a final flush they equal the per-timer counts with
//   pending == 0;
// - no deadlock: a watchdog aborts the process, naming the test and the seed,
//   if a test has not finished after 60 s; ThreadSanitizer checks for races
//   (stress/tsan.supp suppresses only moodycamel's fence-ordered block reuse).
//
// Two clocks:
// - ManualClock (exact drain accounting). One thread moves time in whole
//   precision steps and flushes, while holding a gate exclusively; producers
//   hold it shared while they read the clock and schedule or reschedule (due
//   times are never a multiple of the precision), and the drainer holds it
//   shared across drain() and the flush() that waits for the drained runs. So
//   at every drain each pending timer is due after the clock, and every normal
//   run happens at a clock strictly past its due: a run is early iff drained,
//   and the sum of drain() counts must equal the early runs exactly. No normal
//   run can be later than the largest clock step plus one precision, which
//   bounds stats().lateness.max (drained runs are left out of it).
// - SteadyClock, no gate: drain(), flush() and the wheel's own timed wake-ups
//   interleave freely. A drained timer may already be due, so the check is
//   early runs <= sum of drain() counts <= early runs + runs of near timers;
//   a far timer (due 10 s ahead) can only be cancelled or drained early.
// Bounded by iteration counts and a wall-time budget; the seed is printed
// (replay with --seed=N).

#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
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
using stress_support::pack;
using stress_support::unpack;
unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

// Aborts the process if the test has not finished (destroyed the watchdog) within `limit`: a deadlock in
// flush/drain/shutdown would otherwise hang the run until ctest's timeout, without saying where.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    name_ = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "?";
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr,
                     "[ stress   ] %s: watchdog: not finished after %lld s (deadlock in flush/drain/stats?); seed "
                     "%llu (replay: --seed=%llu --gtest_filter=%s)\n",
                     name_.c_str(), static_cast<long long>(limit.count()), ull(chime_stress::seed()),
                     ull(chime_stress::seed()), name_.c_str());
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The ManualClock test's gate (see the top comment): shared by producers and the drainer, exclusive for
// the time thread. Writer-preferring, so that producers cannot starve time: new readers wait while the
// time thread wants in. Disabled (every call a no-op) for the SteadyClock test.
class Gate {
 public:
  explicit Gate(bool enabled) : enabled_(enabled) {}
  void lock_shared() {
    if (!enabled_) return;
    while (writer_waiting_.load(std::memory_order_acquire)) std::this_thread::yield();
    mutex_.lock_shared();
  }
  void unlock_shared() {
    if (enabled_) mutex_.unlock_shared();
  }
  void lock() {
    writer_waiting_.store(true, std::memory_order_release);
    mutex_.lock();
    writer_waiting_.store(false, std::memory_order_release);
  }
  void unlock() { mutex_.unlock(); }

 private:
  const bool enabled_;
  std::atomic<bool> writer_waiting_{false};
  std::shared_mutex mutex_;
};

struct SharedHold {
  explicit SharedHold(Gate& g) : gate(g) { gate.lock_shared(); }
  ~SharedHold() { gate.unlock_shared(); }
  Gate& gate;
};

// id 0: not scheduled; due: of the last successful schedule/reschedule (owner thread only); early: runs
// whose callback read the clock before Firing::due: drained.
struct OneShotLog : stress_support::TimerLog {
  std::atomic<bool> far{false};  // due 10 s ahead: never fires on its own during the test
};

struct PeriodicLog : stress_support::PeriodicTimerLog {
  // Packed TimerId, stored after schedule_every returns: the first run can
  // start before that, so runs compare against it only once it is known, and
  // the first id any run saw is checked against it at the end.
  std::atomic<std::uint64_t> id{0};
  std::atomic<std::uint64_t> first_seen{0};
  std::atomic<std::uint64_t> early_runs{0};
  std::atomic<std::uint64_t> wrong_id{0};
};

// Successive stats() snapshots of one thread: every counter is monotonic.
struct StatsMonitor {
  std::uint64_t snapshots = 0, regressions = 0;
  chime::Stats prev;
  void observe(const chime::Stats& s) {
    if (snapshots > 0) {
      if (s.scheduled < prev.scheduled || s.fired < prev.fired || s.cancelled < prev.cancelled ||
          s.rescheduled < prev.rescheduled || s.callback_errors < prev.callback_errors || s.wakeups < prev.wakeups ||
          s.lateness.max < prev.lateness.max) {
        ++regressions;
        if (regressions <= 3) {
          std::printf("[ stress   ] stats regressed: scheduled %llu->%llu fired %llu->%llu cancelled %llu->%llu "
                      "rescheduled %llu->%llu wakeups %llu->%llu lateness.max %lld->%lld ns\n",
                      ull(prev.scheduled), ull(s.scheduled), ull(prev.fired), ull(s.fired), ull(prev.cancelled),
                      ull(s.cancelled), ull(prev.rescheduled), ull(s.rescheduled), ull(prev.wakeups), ull(s.wakeups),
                      static_cast<long long>(prev.lateness.max.count()), static_cast<long long>(s.lateness.max.count()));
        }
      }
    }
    prev = s;
    ++snapshots;
  }
};

enum class ClockMode { manual, steady };

struct Config {
  ClockMode mode;
  std::size_t producers;
  std::size_t ops_per_producer;           // iteration bound of each producer
  std::chrono::milliseconds budget;       // wall-time bound of the racing phase
  std::size_t periodic;                   // periodic timers racing along
  std::size_t pace_every;                 // a producer sleeps 100 us after this many operations
};

struct Result {
  std::size_t issued = 0, cancelled = 0, fired = 0, early = 0, both = 0, neither = 0, fired_twice = 0;
  std::size_t wrong_id = 0, wrong_due = 0, near_runs_not_early = 0, far_fired_on_time = 0;
  std::uint64_t periodic_runs = 0, periodic_early = 0, periodic_overlaps = 0, periodic_wrong_id = 0;
  std::size_t periodic_cancels_won = 0;
  std::uint64_t drains = 0, drained = 0, flushes = 0, advances = 0, reschedules_won = 0;
  std::int64_t longest_flush_us = 0;  // of the ungated flusher: how long one flush() waited
  StatsMonitor monitor;
  chime::Stats final_stats;
  bool budget_hit = false;
};

constexpr Duration kPrecision = 1ms;
constexpr TimePoint kStart = TimePoint{} + std::chrono::seconds(1000);  // a multiple of the precision

Result run_race(const Config& cfg) {
  const bool manual = cfg.mode == ClockMode::manual;
  const std::size_t capacity = cfg.producers * cfg.ops_per_producer;
  std::vector<OneShotLog> logs(capacity);
  std::vector<PeriodicLog> periodic(cfg.periodic);
  chime::ManualClock manual_clock(kStart);
  chime::RuntimeOptions options;
  options.precision = kPrecision;
  options.workers = 2;
  if (manual) options.clock = &manual_clock;
  Result r;
  Runtime rt(options);
  Gate gate(manual);

  // A due time `near` (a few precisions ahead) or far (10 s ahead) of t. With the manual clock never a
  // multiple of the precision, so it is never equal to a clock value the time thread sets.
  auto due_from = [&](std::mt19937_64& rng, TimePoint t, bool far) {
    const Duration off_grid(1 + static_cast<std::int64_t>(rng() % (kPrecision.count() - 1)));
    if (far) return t + 10s + off_grid;
    if (manual) return t + kPrecision * static_cast<int>(rng() % 6) + off_grid;
    return t + Duration(static_cast<std::int64_t>(rng() % 5'000'001));
  };

  for (std::size_t i = 0; i < cfg.periodic; ++i) {
    std::mt19937_64 rng(chime_stress::seed() * 67 + 500 + i);
    chime::PeriodicOptions po;
    po.first_due = due_from(rng, rt.clock().now(), false);
    po.on_missed = chime::Missed::skip;
    PeriodicLog& log = periodic[i];
    const TimerId id = rt.schedule_every(
        kPrecision * static_cast<int>(2 + i % 3),
        [&rt, &log](const Firing& f) {
          log.run_begins();
          if (rt.clock().now() < f.due) log.early_runs.fetch_add(1, std::memory_order_relaxed);
          const std::uint64_t known = log.id.load(std::memory_order_acquire);
          if (known != 0 && pack(f.id) != known) log.wrong_id.fetch_add(1, std::memory_order_relaxed);
          std::uint64_t none = 0;
          log.first_seen.compare_exchange_strong(none, pack(f.id), std::memory_order_relaxed);
          log.run_ends();
        },
        po);
    log.id.store(pack(id), std::memory_order_release);
  }

  std::atomic<std::size_t> producers_left{cfg.producers};
  std::atomic<bool> stop{false};
  std::atomic<bool> budget_hit{false};
  std::atomic<std::uint64_t> drains{0}, drained{0}, flushes{0}, advances{0}, reschedules_won{0};
  std::atomic<std::int64_t> longest_flush_us{0};
  const auto budget_end = std::chrono::steady_clock::now() + cfg.budget;

  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < cfg.producers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937_64 rng(chime_stress::seed() * 67 + p + (manual ? 0 : 1000));
      chime::Producer producer = rt.producer();
      std::vector<std::size_t> mine;  // indices of this producer's timers, in issue order
      const std::size_t base = p * cfg.ops_per_producer;
      std::uint64_t won = 0;
      for (std::size_t k = 0; k < cfg.ops_per_producer; ++k) {
        if (std::chrono::steady_clock::now() >= budget_end) {
          budget_hit.store(true);
          break;
        }
        const unsigned op = mine.empty() ? 0 : static_cast<unsigned>(rng() % 4);
        if (op <= 1) {  // schedule
          const std::size_t i = base + mine.size();
          OneShotLog& log = logs[i];
          const bool far = rng() % 4 == 0;
          log.far.store(far, std::memory_order_relaxed);
          chime::Task task = [&rt, &log](const Firing& f) { log.record_run(rt.clock().now(), f); };
          SharedHold hold(gate);
          const TimePoint due = due_from(rng, rt.clock().now(), far);
          log.due.store(ns(due), std::memory_order_relaxed);
          log.id.store(pack(producer.schedule_at(due, std::move(task))), std::memory_order_release);
          mine.push_back(i);
        } else {
          const std::size_t window = std::min<std::size_t>(mine.size(), 64);
          OneShotLog& log = logs[mine[mine.size() - 1 - rng() % window]];
          const TimerId id = unpack(log.id.load(std::memory_order_relaxed));
          if (op == 2) {
            if (producer.cancel(id)) log.cancels_won.fetch_add(1, std::memory_order_relaxed);
          } else {
            SharedHold hold(gate);
            const TimePoint due = due_from(rng, rt.clock().now(), log.far.load(std::memory_order_relaxed));
            if (producer.reschedule_at(id, due)) {
              log.due.store(ns(due), std::memory_order_relaxed);
              ++won;
            }
          }
        }
        if (k % cfg.pace_every == cfg.pace_every - 1) std::this_thread::sleep_for(100us);
      }
      reschedules_won.fetch_add(won);
      producers_left.fetch_sub(1);
    });
  }
  if (manual) {
    threads.emplace_back([&] {  // time: whole precision steps, each followed by a flush, under the gate
      std::mt19937_64 rng(chime_stress::seed() * 67 + 2000);
      while (!stop.load()) {
        gate.lock();
        manual_clock.advance(kPrecision * static_cast<int>(1 + rng() % 3));
        rt.flush();
        gate.unlock();
        advances.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(std::chrono::microseconds(100 + rng() % 300));
      }
    });
  }
  threads.emplace_back([&] {  // drain, then flush so the drained runs finish before the gate opens
    std::mt19937_64 rng(chime_stress::seed() * 67 + 3000);
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 4000));
      SharedHold hold(gate);
      drained.fetch_add(rt.drain());
      drains.fetch_add(1, std::memory_order_relaxed);
      rt.flush();
    }
  });
  threads.emplace_back([&] {  // flush, ungated
    std::mt19937_64 rng(chime_stress::seed() * 67 + 4000);
    while (!stop.load()) {
      const auto t0 = std::chrono::steady_clock::now();
      rt.flush();
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
      if (us.count() > longest_flush_us.load()) longest_flush_us.store(us.count());
      flushes.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    }
  });
  threads.emplace_back([&] {  // stats snapshots
    while (!stop.load()) {
      r.monitor.observe(rt.stats());
      std::this_thread::sleep_for(50us);
    }
    r.monitor.observe(rt.stats());
  });
  while (producers_left.load() != 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // keep draining and flushing a little longer
  stop.store(true);
  for (auto& t : threads) t.join();

  // Wind down: cancel the periodic timers (each cancel must win), let every near timer fire, then drain the
  // far ones (their runs are early: counted with the other drained runs).
  for (PeriodicLog& log : periodic) {
    if (rt.cancel(unpack(log.id.load()))) ++r.periodic_cancels_won;
  }
  if (manual) {
    manual_clock.advance(20 * kPrecision);
    rt.flush();
  } else {
    std::this_thread::sleep_for(10ms);
    rt.flush();
  }
  drained.fetch_add(rt.drain());
  drains.fetch_add(1);
  rt.flush();
  r.monitor.observe(rt.stats());
  r.final_stats = rt.stats();

  stress_support::Outcomes o;  // of the issued one-shot timers
  for (const OneShotLog& log : logs) {
    if (log.id.load() == 0) continue;
    o.add(log);
    if (log.runs.load() > 0 && log.early.load() == 0) {
      if (log.far.load())
        ++r.far_fired_on_time;
      else
        ++r.near_runs_not_early;
    }
  }
  r.issued = o.timers;
  r.cancelled = o.cancelled;
  r.fired = o.ran;
  r.fired_twice = o.ran_twice;
  r.both = o.both;
  r.neither = o.neither;
  r.early = o.early_runs;
  r.wrong_id = o.wrong_id;
  r.wrong_due = o.wrong_due;
  for (const PeriodicLog& log : periodic) {
    r.periodic_runs += log.runs.load();
    r.periodic_early += log.early_runs.load();
    r.periodic_overlaps += static_cast<std::uint64_t>(log.overlaps.load());
    r.periodic_wrong_id += log.wrong_id.load();
    if (log.first_seen.load() != 0 && log.first_seen.load() != log.id.load()) ++r.periodic_wrong_id;
  }
  r.drains = drains.load();
  r.drained = drained.load();
  r.flushes = flushes.load();
  r.advances = advances.load();
  r.reschedules_won = reschedules_won.load();
  r.longest_flush_us = longest_flush_us.load();
  r.budget_hit = budget_hit.load();
  return r;
}

void print_and_check_common(const char* label, const Result& r, std::size_t periodic) {
  const chime::Stats& s = r.final_stats;
  std::printf("[ stress   ] %s: checked %zu one-shot timers%s: %zu fired, %zu cancelled, %zu both, %zu neither, %zu "
              "fired twice, %zu wrong Firing::id, %zu wrong Firing::due, %zu early (drained) runs, %zu near runs not "
              "early, %zu far timers fired not early; %zu periodic timers: %llu runs (%llu early), %llu overlapping, "
              "%llu wrong id, %zu of %zu final cancels won; %llu drain() calls returned %llu runs in all; %llu "
              "ungated flushes (longest %lld us), %llu clock steps, %llu reschedules won; %llu stats snapshots, %llu regressions; "
              "final stats: scheduled %llu fired %llu cancelled %llu rescheduled %llu pending %llu wakeups %llu "
              "lateness max %lld ns\n",
              label, r.issued, r.budget_hit ? " (wall-time budget reached)" : "", r.fired, r.cancelled, r.both,
              r.neither, r.fired_twice, r.wrong_id, r.wrong_due, r.early, r.near_runs_not_early, r.far_fired_on_time,
              periodic, ull(r.periodic_runs), ull(r.periodic_early), ull(r.periodic_overlaps),
              ull(r.periodic_wrong_id), r.periodic_cancels_won, periodic, ull(r.drains), ull(r.drained),
              ull(r.flushes), static_cast<long long>(r.longest_flush_us), ull(r.advances), ull(r.reschedules_won), ull(r.monitor.snapshots),
              ull(r.monitor.regressions), ull(s.scheduled), ull(s.fired), ull(s.cancelled), ull(s.rescheduled),
              ull(s.pending), ull(s.wakeups), static_cast<long long>(s.lateness.max.count()));
  EXPECT_GT(r.issued, 0u);
  EXPECT_EQ(r.both, 0u) << "timers that fired although a cancel returned true";
  EXPECT_EQ(r.neither, 0u) << "timers that neither fired nor were cancelled (lost by a drain or flush?)";
  EXPECT_EQ(r.fired_twice, 0u) << "one-shot timers that ran twice (drained and fired?)";
  EXPECT_EQ(r.wrong_id, 0u);
  EXPECT_EQ(r.wrong_due, 0u) << "runs whose Firing::due is not the timer's last successful due";
  EXPECT_EQ(r.far_fired_on_time, 0u) << "a timer due 10 s ahead ran without being drained";
  EXPECT_EQ(r.periodic_overlaps, 0u) << "runs of one periodic timer overlapped";
  EXPECT_EQ(r.periodic_wrong_id, 0u);
  EXPECT_EQ(r.periodic_cancels_won, periodic) << "the final cancel of a periodic timer lost";
  EXPECT_GT(r.drains, 1u);
  EXPECT_GT(r.monitor.snapshots, 1u);
  EXPECT_EQ(r.monitor.regressions, 0u) << "a stats() counter decreased between two snapshots";
  EXPECT_EQ(s.scheduled, r.issued + periodic);
  EXPECT_EQ(s.fired, r.fired + r.periodic_runs);
  EXPECT_EQ(s.cancelled, r.cancelled + r.periodic_cancels_won);
  EXPECT_EQ(s.rescheduled, r.reschedules_won);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.callback_errors, 0u);
}

// ManualClock: 2 producers (up to 20,000 operations each) schedule, cancel and reschedule near and far
// one-shot timers, 3 periodic timers run, while a time thread steps the clock and flushes, a drainer
// drains, a flusher flushes and a monitor snapshots stats(). Every timer has exactly one outcome; the
// drain() counts cover the early (drained) runs, and exceed them by at most the cancels that won (a
// cancel stops a drained run that has not started); stats are monotonic and add up; normal runs are
// at most 4 precisions late (stats().lateness.max, drained runs excluded).
TEST(RuntimeLifecycleRace, manual_clock_drain_counts_equal_drained_runs_and_stats_add_up) {
  chime_stress::print_seed();
  const Watchdog watchdog(60s);
  constexpr std::size_t kPeriodic = 3;
  const Result r = run_race({ClockMode::manual, 2, 20'000, 2500ms, kPeriodic, 32});
  print_and_check_common("ManualClock", r, kPeriodic);
  // drain() counts the runs it handed over; a cancel that wins before such a run starts still stops it
  // (cancel wins until the callback starts), so the early runs are at most the count, and the gap is at
  // most the cancels that won.
  EXPECT_GE(r.drained, r.early + r.periodic_early)
      << "a run whose callback saw the clock before its due was not counted by drain()";
  EXPECT_LE(r.drained, r.early + r.periodic_early + r.cancelled)
      << "drain() counted more runs than ran early or were cancelled";
  EXPECT_GT(r.early, 0u) << "nothing was drained: the race was not exercised";
  EXPECT_GT(r.near_runs_not_early, 0u) << "no timer fired on its own: the race was not exercised";
  EXPECT_GT(r.advances, 0u);
  EXPECT_LT(r.final_stats.lateness.max, 4 * kPrecision)
      << "a normal run started later than a clock step allows (a drained run in the lateness histogram?)";
}

// SteadyClock, no gate: 3 producers (up to 20,000 operations each), 3 periodic timers, a drainer, a flusher
// and a stats monitor, with the wheel also waking on its own. Every timer has exactly one outcome; early
// runs <= sum of drain() counts <= early runs + on-time runs of near timers; stats are monotonic and add up.
TEST(RuntimeLifecycleRace, steady_clock_flush_drain_stats_race_with_producers) {
  chime_stress::print_seed();
  const Watchdog watchdog(60s);
  constexpr std::size_t kPeriodic = 3;
  const Result r = run_race({ClockMode::steady, 3, 20'000, 2500ms, kPeriodic, 8});
  print_and_check_common("SteadyClock", r, kPeriodic);
  EXPECT_GE(r.drained, r.early + r.periodic_early) << "more early runs than drain() reported";
  EXPECT_LE(r.drained, r.early + r.periodic_early + r.near_runs_not_early + (r.periodic_runs - r.periodic_early))
      << "drain() reported more runs than could have been drained";
  EXPECT_GT(r.early, 0u) << "nothing was drained: the race was not exercised";
}

}  // namespace
