// SPDX-License-Identifier: BSL-1.0
// max_pending counts a timer until its last run ended (chime/runtime.hpp,
// RuntimeOptions::max_pending): a thread that sees a one-shot Fired
// (Runtime::state) and schedules at once must find its slot in the count
// free. The worker's F1 publishes Fired; if it took the timer out of the
// count only after that, a schedule in between would be refused with
// CapacityError although no timer is pending. Checked: with max_pending = 1,
// thousands of rounds of schedule -> wait for Fired -> schedule, and no
// CapacityError. Bounded: at most 40,000 rounds or 3 s; under
// ThreadSanitizer in CI.
#include "stress_seed.hpp"
#include "stress_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

namespace {

using namespace std::chrono_literals;

TEST(RuntimeCapacityRelease, a_timer_seen_fired_no_longer_counts_against_max_pending) {
  chime_stress::print_seed();
  chime::RuntimeOptions options = stress_support::steady_options(1);
  options.max_pending = 1;
  chime::Runtime rt(options);
  std::uint64_t rounds = 0, refused = 0;
  chime::TimerId id = rt.schedule_after(0ms, [] {});
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (rounds < 40'000 && std::chrono::steady_clock::now() < end) {
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (rt.state(id) != chime::TimerState::fired) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "round " << rounds << ": the timer never fired";
    }
    try {
      id = rt.schedule_after(0ms, [] {});  // its only predecessor is Fired: one slot in the count is free
    } catch (const chime::CapacityError&) {
      ++refused;
      for (;;) {  // the count catches up at once; go on
        try {
          id = rt.schedule_after(0ms, [] {});
          break;
        } catch (const chime::CapacityError&) {
        }
      }
    }
    ++rounds;
  }
  rt.flush();
  EXPECT_EQ(refused, 0u) << "of " << rounds << " schedules made right after the previous timer was seen Fired";
  EXPECT_GT(rounds, 1'000u) << "too few rounds to exercise the race";
  EXPECT_EQ(rt.stats().pending, 0u);
}

}  // namespace
