// SPDX-License-Identifier: BSL-1.0
// Reschedule into the past vs the wheel thread looking at the timer
// (docs/state-machine.md, "Reschedule later vs fire"): a timer whose
// reschedule returned true with a due already passed runs by the next
// flush(), exactly once, with that due, even when the clock does not move.
//
// The race: a reschedule to an earlier due posts a command; the wheel thread
// applies it and looks at the timer (consider) while a second reschedule,
// to a later due that is still in the past, holds the slot in Writing. The
// wheel must look again at once, not at the next interval: with a
// ManualClock that stays put, that interval never comes (fuzzer finding
// `reschedule_past_lost`, docs/fuzzing.md). Bounded: 2,000 rounds of 64 timers
// or 5 s of wall time, whichever comes first.
#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::Firing;
using chime::TimePoint;
using chime::TimerId;
using stress_support::ns;

constexpr TimePoint kStart = TimePoint{} + 1000s;

void run_rounds(unsigned workers) {
  chime_stress::print_seed();
  std::mt19937_64 rng(chime_stress::seed() * 41 + workers);
  chime::ManualClock clock(kStart);
  chime::RuntimeOptions o;
  o.precision = 1ms;
  o.workers = workers;
  o.clock = &clock;
  constexpr std::size_t kTimers = 64, kRounds = 2000;
  std::array<stress_support::TimerLog, kTimers> slots;  // runs, and fired_due: the due of the last run
  chime::Runtime rt(o);

  std::size_t rounds = 0, won_second = 0, checked = 0, lost = 0, twice = 0, wrong_due = 0;
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  for (; rounds < kRounds && std::chrono::steady_clock::now() < give_up; ++rounds) {
    const TimePoint now = clock.now();
    std::array<TimerId, kTimers> ids;
    std::array<std::int64_t, kTimers> last_due{};
    std::array<bool, kTimers> second_won{};
    for (std::size_t i = 0; i < kTimers; ++i) {
      slots[i].runs.store(0);
      ids[i] = rt.schedule_at(now + 5ms, [&slots, i](const Firing& f) {
        slots[i].fired_due.store(ns(f.due), std::memory_order_relaxed);
        slots[i].runs.fetch_add(1, std::memory_order_relaxed);
      });
      last_due[i] = ns(now + 5ms);
    }
    // Earlier, into the past (a RESCHEDULE command each): the wheel thread starts on them at once...
    for (std::size_t i = 0; i < kTimers; ++i) {
      const TimePoint past = now - Duration(static_cast<std::int64_t>(1'000'000 + rng() % 1'000'000));
      if (rt.reschedule_at(ids[i], past)) last_due[i] = ns(past);
    }
    // ...while these move them later, still in the past, racing with its look at each timer.
    for (std::size_t i = 0; i < kTimers; ++i) {
      const TimePoint past = now - Duration(static_cast<std::int64_t>(rng() % 500'000 + 1));
      second_won[i] = rt.reschedule_at(ids[i], past);
      if (second_won[i]) {
        last_due[i] = ns(past);
        ++won_second;
      }
    }
    rt.flush();  // the clock has not moved: every one of them is due, so each must have run
    for (std::size_t i = 0; i < kTimers; ++i) {
      ++checked;
      const int runs = slots[i].runs.load();
      if (runs == 0) ++lost;
      if (runs > 1) ++twice;
      if (runs == 1 && slots[i].fired_due.load() != last_due[i]) ++wrong_due;
    }
    clock.advance(10ms);  // the next round's timers start in a fresh interval
    rt.flush();
  }
  std::printf("[ stress   ] workers %u: %zu rounds, %zu timers checked, %zu second reschedules won; "
              "%zu not run by the flush, %zu run twice, %zu with a due other than their last\n",
              workers, rounds, checked, won_second, lost, twice, wrong_due);
  EXPECT_GT(rounds, 0u);
  EXPECT_EQ(lost, 0u) << "timers rescheduled into the past (reschedule returned true) that a flush did not run";
  EXPECT_EQ(twice, 0u) << "one-shot timers that ran twice";
  EXPECT_EQ(wrong_due, 0u) << "timers run with a Firing::due other than their last successful due";
  EXPECT_EQ(rt.stats().pending, 0u);
}

TEST(RuntimeReschedulePast, rescheduled_into_past_runs_by_next_flush_inline) { run_rounds(0); }
TEST(RuntimeReschedulePast, rescheduled_into_past_runs_by_next_flush_one_worker) { run_rounds(1); }

}  // namespace
