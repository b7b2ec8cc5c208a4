// SPDX-License-Identifier: BSL-1.0
// chime::Runtime::schedule_every (runtime.hpp): fixed
// rate (the n-th run is due at first + n*period exactly, no drift over 10,000
// periods), Missed::skip coalescing (one run, Firing::due the latest due run,
// Firing::missed the others), Missed::catch_up (every run, in order, within
// one flush), runs never overlap, cancel from inside the callback, reschedule
// moving the next run with the rate continuing from it, first_due, errors.
// Deterministic with ManualClock + flush(), except the no-overlap tests, which
// need real time (SteadyClock) to let runs race.

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::Firing;
using chime::ManualClock;
using chime::Missed;
using chime::PeriodicOptions;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

class RuntimePeriodic : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimePeriodic, testing::Values(0u, 1u, 2u), workers_name);

// By default the first run is due at now + period, and later runs every period after it.
TEST_P(RuntimePeriodic, default_first_due_is_now_plus_period) {
  advance_to(clock, rt, at(3ms));
  const TimerId id = rt.schedule_every(10ms, rec.task());
  advance_to(clock, rt, at(13ms) - 1ns);
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, at(13ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(13ms));
  EXPECT_EQ(rec.runs()[0].firing.id, id);
  EXPECT_EQ(rec.runs()[0].firing.missed, 0u);
  advance_to(clock, rt, at(23ms) - 1ns);
  EXPECT_EQ(rec.count(), 1u);
  advance_to(clock, rt, at(23ms));
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.runs()[1].firing.due, at(23ms));
  EXPECT_EQ(rt.state(id), TimerState::pending);
}

// PeriodicOptions::first_due sets the first run; the rest follow at first + n*period.
TEST_P(RuntimePeriodic, first_due_option_sets_the_first_run) {
  rt.schedule_every(10ms, rec.task(), first_at(at(5ms)));
  for (int k = 1; k <= 40; ++k) advance_to(clock, rt, at(k * 1ms));
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 4u);  // due 5, 15, 25, 35 (each fires at the flush at its due)
  for (std::size_t n = 0; n < runs.size(); ++n) {
    EXPECT_EQ(runs[n].firing.due, at(5ms + static_cast<int>(n) * 10ms));
    EXPECT_EQ(runs[n].firing.fired_at, at(5ms + static_cast<int>(n) * 10ms));
    EXPECT_EQ(runs[n].firing.missed, 0u);
  }
}

// Fixed rate, catch_up: over 10,000 periods (1.7 ms, not a multiple of the precision) the n-th run is due at
// PeriodicOptions designating one member compiles without -Wextra's missing-initializer warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wmissing-field-initializers"
TEST(RuntimePeriodic, options_designating_only_on_missed_leave_first_due_empty_without_a_warning) {
  const chime::PeriodicOptions options{.on_missed = chime::Missed::catch_up};
  EXPECT_FALSE(options.first_due.has_value());
  EXPECT_EQ(options.on_missed, chime::Missed::catch_up);
}
#pragma GCC diagnostic pop

// first + n*period exactly, each run at the flush whose reading is its due (fired_at = due), none left behind.
TEST(RuntimePeriodic, fixed_rate_has_no_drift_over_10000_periods_catch_up) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  const Duration period = 1700us;
  const TimerId id = rt.schedule_every(period, rec.task(), first_at(at(period), Missed::catch_up));
  const int steps = 10'000;
  for (int k = 1; k <= steps; ++k) advance_to(clock, rt, at(k * period));
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), static_cast<std::size_t>(steps));
  for (std::size_t n = 0; n < runs.size(); ++n) {
    const TimePoint due = at(static_cast<std::int64_t>(n + 1) * period);
    ASSERT_EQ(runs[n].firing.due, due) << "run " << n << " drifted";
    ASSERT_EQ(runs[n].firing.missed, 0u) << "run " << n;
    ASSERT_EQ(runs[n].firing.id, id);
    ASSERT_EQ(runs[n].firing.fired_at, due) << "run " << n << " due " << ms_since_start(due) << " ms ran at "
                                            << ms_since_start(runs[n].firing.fired_at) << " ms";
  }
}

// Fixed rate, skip: over 10,000 periods with random jumps of 1-4 periods, each run is due on the grid
// first + n*period, and its missed count is exactly the number of grid runs skipped since the previous one.
TEST(RuntimePeriodic, fixed_rate_has_no_drift_over_10000_periods_skip) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  const Duration period = 3ms;
  rt.schedule_every(period, rec.task(), first_at(at(period)));
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> jump(1, 4);
  std::vector<std::int64_t> expected_n;  // the grid index of each run
  std::int64_t n = -1;
  while (n < 10'000) {
    n += jump(rng);
    // One precision after the run due at first + n*period; the next run is still 2 ms away.
    advance_to(clock, rt, at((n + 1) * period) + kPrecision);
    expected_n.push_back(n);
  }
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), expected_n.size());
  std::int64_t prev = -1;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].firing.due, at((expected_n[i] + 1) * period)) << "run " << i << " drifted";
    ASSERT_EQ(runs[i].firing.missed, static_cast<std::uint64_t>(expected_n[i] - prev - 1)) << "run " << i;
    prev = expected_n[i];
  }
}

// Missed::skip: with the clock 5.5 periods on, the five due runs coalesce into one run whose due is the latest
// (50 ms) and whose missed is 4; the rate then continues (next run due 60 ms, missed 0).
TEST_P(RuntimePeriodic, skip_coalesces_missed_runs_into_one) {
  rt.schedule_every(10ms, rec.task());  // due 10, 20, 30, ...
  advance_to(clock, rt, at(55ms));
  auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].firing.due, at(50ms));
  EXPECT_EQ(runs[0].firing.missed, 4u);
  EXPECT_EQ(runs[0].firing.fired_at, at(55ms));
  advance_to(clock, rt, at(60ms) - 1ns);
  EXPECT_EQ(rec.count(), 1u);
  advance_to(clock, rt, at(60ms));
  runs = rec.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].firing.due, at(60ms));
  EXPECT_EQ(runs[1].firing.missed, 0u);
}

// Missed::catch_up: with the clock 5.5 periods on, one flush runs each due run, in order, each with missed 0.
TEST_P(RuntimePeriodic, catch_up_runs_each_missed_run_in_order_within_one_flush) {
  PeriodicOptions o;
  o.on_missed = Missed::catch_up;
  rt.schedule_every(10ms, rec.task(), o);
  advance_to(clock, rt, at(55ms));
  auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 5u);
  for (std::size_t n = 0; n < 5; ++n) {
    EXPECT_EQ(runs[n].firing.due, at(10ms + static_cast<int>(n) * 10ms));
    EXPECT_EQ(runs[n].firing.missed, 0u);
  }
  advance_to(clock, rt, at(60ms) - 1ns);
  EXPECT_EQ(rec.count(), 5u);
  advance_to(clock, rt, at(60ms));
  runs = rec.runs();
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[5].firing.due, at(60ms));
}

// A first_due already in the past: skip makes one run (the latest due run, the others counted as missed).
TEST_P(RuntimePeriodic, past_first_due_with_skip_runs_once_at_next_flush) {
  advance_to(clock, rt, at(100ms));
  rt.schedule_every(10ms, rec.task(), first_at(at(55ms)));  // due 55, 65, 75, 85, 95 are past
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].firing.due, at(95ms));
  EXPECT_EQ(runs[0].firing.missed, 4u);
}

// A first_due already in the past: catch_up runs every past run at the next flush, in order.
TEST_P(RuntimePeriodic, past_first_due_with_catch_up_runs_each_at_next_flush) {
  advance_to(clock, rt, at(100ms));
  rt.schedule_every(10ms, rec.task(), first_at(at(55ms), Missed::catch_up));
  rt.flush();
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 5u);
  for (std::size_t n = 0; n < 5; ++n) EXPECT_EQ(runs[n].firing.due, at(55ms + static_cast<int>(n) * 10ms));
}

// Cancelling a periodic timer from inside its own callback returns true and no later run starts.
TEST_P(RuntimePeriodic, cancel_from_inside_own_callback_stops_later_runs) {
  std::atomic<int> runs{0};
  std::atomic<int> result{-1};
  const TimerId id = rt.schedule_every(10ms, [&](const Firing& f) {
    if (runs.fetch_add(1) == 1) result.store(rt.cancel(f.id) ? 1 : 0);  // cancel in the second run
  });
  for (int k = 1; k <= 10; ++k) advance_to(clock, rt, at(k * 10ms + 1ms));
  EXPECT_EQ(result.load(), 1);
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
  EXPECT_FALSE(rt.cancel(id));
}

// Cancelling a periodic timer between runs returns true and no later run starts.
TEST_P(RuntimePeriodic, cancel_between_runs_stops_later_runs) {
  const TimerId id = rt.schedule_every(10ms, rec.task());
  advance_to(clock, rt, at(11ms));
  advance_to(clock, rt, at(21ms));
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_TRUE(rt.cancel(id));
  EXPECT_FALSE(rt.cancel(id));
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(rec.count(), 2u);
  EXPECT_EQ(rt.state(id), TimerState::cancelled);
}

// A periodic timer is pending between runs, running inside its callback, and stays counted in stats().pending.
TEST_P(RuntimePeriodic, state_is_pending_between_runs_and_running_inside) {
  std::atomic<int> inside{-1};
  const TimerId id = rt.schedule_every(10ms, [&](const Firing& f) { inside.store(static_cast<int>(rt.state(f.id))); });
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(inside.load(), static_cast<int>(TimerState::running));
  EXPECT_EQ(rt.state(id), TimerState::pending);
  advance_to(clock, rt, at(21ms));
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.fired, 2u);
  EXPECT_EQ(s.pending, 1u);
  EXPECT_EQ(s.scheduled, 1u);
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
}

// Rescheduling a periodic timer later moves its next run; the fixed rate continues from the new due time.
TEST_P(RuntimePeriodic, reschedule_later_moves_next_run_and_rate_continues_from_it) {
  const TimerId id = rt.schedule_every(10ms, rec.task());
  advance_to(clock, rt, at(11ms));  // run due 10; next due 20
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_TRUE(rt.reschedule_at(id, at(35ms)));
  for (int k = 12; k <= 66; ++k) advance_to(clock, rt, at(k * 1ms));
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 5u);  // 10, then 35, 45, 55, 65 (none at 20 or 30)
  EXPECT_EQ(runs[1].firing.due, at(35ms));
  EXPECT_EQ(runs[2].firing.due, at(45ms));
  EXPECT_EQ(runs[3].firing.due, at(55ms));
  EXPECT_EQ(runs[4].firing.due, at(65ms));
  for (const RunRecord& r : runs) EXPECT_EQ(r.firing.missed, 0u);
}

// Rescheduling a periodic timer earlier moves its next run there; the rate continues from it.
TEST_P(RuntimePeriodic, reschedule_earlier_moves_next_run_and_rate_continues_from_it) {
  const TimerId id = rt.schedule_every(10ms, rec.task());
  advance_to(clock, rt, at(11ms));  // run due 10; next due 20
  EXPECT_TRUE(rt.reschedule_at(id, at(14ms)));
  for (int k = 12; k <= 34; ++k) advance_to(clock, rt, at(k * 1ms));
  const auto runs = rec.runs();
  ASSERT_EQ(runs.size(), 4u);  // 10, 14, 24, 34 (nothing at 20)
  EXPECT_EQ(runs[1].firing.due, at(14ms));
  EXPECT_EQ(runs[2].firing.due, at(24ms));
  EXPECT_EQ(runs[3].firing.due, at(34ms));
  advance_to(clock, rt, at(43ms));
  EXPECT_EQ(rec.count(), 4u);
}

// schedule_every rejects a period <= 0 with std::invalid_argument.
TEST_P(RuntimePeriodic, nonpositive_period_throws_invalid_argument) {
  EXPECT_THROW(rt.schedule_every(Duration::zero(), rec.task()), std::invalid_argument);
  EXPECT_THROW(rt.schedule_every(-1ms, rec.task()), std::invalid_argument);
  EXPECT_THROW(rt.producer().schedule_every(Duration::zero(), rec.task()), std::invalid_argument);
  EXPECT_EQ(rt.stats().scheduled, 0u);
}

// Runs never overlap with 2 workers: a callback that sleeps 4 periods never runs concurrently with itself.
void expect_runs_never_overlap(Missed missed) {
  Runtime rt{steady_options(2)};
  std::atomic<bool> in_flight{false};
  std::atomic<int> overlaps{0};
  std::atomic<int> runs{0};
  int plain_runs = 0;  // non-atomic: each run happens-before the next run of the same timer
  PeriodicOptions o;
  o.on_missed = missed;
  const TimerId id = rt.schedule_every(1ms, [&] {
    if (in_flight.exchange(true)) overlaps.fetch_add(1);
    ++plain_runs;
    std::this_thread::sleep_for(4ms);
    runs.fetch_add(1);
    in_flight.store(false);
  }, o);
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (runs.load() < 25 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_GE(runs.load(), 25);
  EXPECT_EQ(plain_runs, runs.load());
  EXPECT_EQ(overlaps.load(), 0) << "a periodic run started while the previous run of the same timer was running";
}

// Missed::skip: runs of one periodic timer never overlap, even when each run outlasts the period.
TEST(RuntimePeriodic, skip_runs_never_overlap_with_two_workers) { expect_runs_never_overlap(Missed::skip); }

// Missed::catch_up: runs of one periodic timer never overlap, even when each run outlasts the period.
TEST(RuntimePeriodic, catch_up_runs_never_overlap_with_two_workers) { expect_runs_never_overlap(Missed::catch_up); }

// Missed::skip with a slow callback: the missed counts account for every period that went by.
TEST(RuntimePeriodic, skip_with_slow_callback_accounts_for_every_period) {
  Runtime rt{steady_options(2)};
  Recorder rec;
  std::atomic<int> runs{0};
  const TimerId id = rt.schedule_every(1ms, [&](const Firing& f) {
    rec.record(f, 0);
    std::this_thread::sleep_for(3ms);
    runs.fetch_add(1);
  });
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (runs.load() < 20 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  rt.cancel(id);
  rt.flush();
  const auto all = rec.runs();
  ASSERT_GE(all.size(), 20u);
  for (std::size_t i = 1; i < all.size(); ++i) {
    const Duration step = all[i].firing.due - all[i - 1].firing.due;
    EXPECT_EQ(step, static_cast<std::int64_t>(all[i].firing.missed + 1) * Duration(1ms))
        << "run " << i << ": due moved by " << step.count() << " ns with missed " << all[i].firing.missed;
  }
}

// Missed::delay: a run that ends late restarts the fixed rate from its end: the next run is due one period
// after the callback returned (the callback moves the manual clock by 5 ms to stand for a long run).
TEST_P(RuntimePeriodic, missed_delay_restarts_the_rate_from_the_end_of_the_run) {
  std::atomic<int> runs{0};
  std::vector<chime::Firing> firings;
  std::mutex mu;
  rt.schedule_every(
      10ms,
      [&](const chime::Firing& f) {
        {
          std::lock_guard<std::mutex> lock(mu);
          firings.push_back(f);
        }
        if (runs.fetch_add(1) == 0) clock.advance(5ms);  // the first run "takes" 5 ms: ends at 16 ms
      },
      first_at(at(10ms), chime::Missed::delay));
  advance_to(clock, rt, at(11ms));  // runs at 11 ms, returns at 16 ms
  ASSERT_EQ(runs.load(), 1);
  advance_to(clock, rt, at(26ms) - 1ns);  // the next is due at 26 ms: it runs at the flush at 26 ms
  EXPECT_EQ(runs.load(), 1) << "Missed::delay ran on the original rate";
  advance_to(clock, rt, at(26ms));
  ASSERT_EQ(runs.load(), 2);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(firings[1].due, at(26ms));
  EXPECT_EQ(firings[1].missed, 0u);
}

// Missed::delay coalesces missed runs into one, like skip, then goes on from the end of that run.
TEST_P(RuntimePeriodic, missed_delay_coalesces_like_skip_then_restarts_from_the_run) {
  std::vector<chime::Firing> firings;
  std::mutex mu;
  rt.schedule_every(
      10ms,
      [&](const chime::Firing& f) {
        std::lock_guard<std::mutex> lock(mu);
        firings.push_back(f);
      },
      first_at(at(10ms), chime::Missed::delay));
  advance_to(clock, rt, at(45ms));  // due 10, 20, 30, 40 ms: one run, due 40, missed 3
  advance_to(clock, rt, at(55ms));  // next: 45 + 10 = 55 ms: not yet (interval rule)
  advance_to(clock, rt, at(56ms));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(firings.size(), 2u);
  EXPECT_EQ(firings[0].due, at(40ms));
  EXPECT_EQ(firings[0].missed, 3u);
  EXPECT_EQ(firings[1].due, at(55ms));
}

}  // namespace
