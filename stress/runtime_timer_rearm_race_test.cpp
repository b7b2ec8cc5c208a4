// SPDX-License-Identifier: BSL-1.0
// chime::Timer's runs never overlap (chime/timer.hpp), also when a periodic
// Timer is re-armed from another thread while one of its runs is starting:
// a run that has begun (B1) but not yet entered the Timer's callback must
// not run beside the run of the timer that replaced it. Steady clock, fine
// precision and a short period with catch-up, so that runs start back to
// back on several workers while the test thread re-arms.

#include "stress_seed.hpp"

#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

namespace {

using namespace std::chrono_literals;

TEST(RuntimeTimerRearmRace, a_periodic_timer_re_armed_from_another_thread_never_runs_beside_itself) {
  chime::RuntimeOptions options;
  options.precision = 20us;
  options.workers = 4;
  chime::Runtime rt(options);
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<std::uint64_t> runs{0};
  chime::Timer t(rt, [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + 5us;
    while (std::chrono::steady_clock::now() < until) {
    }
    inside.fetch_sub(1);
    runs.fetch_add(1);
  });
  std::mt19937_64 rng(chime_stress::seed());
  const auto end = std::chrono::steady_clock::now() + 1500ms;
  std::uint64_t arms = 0;
  while (std::chrono::steady_clock::now() < end && overlaps.load() == 0) {
    chime::PeriodicOptions every;
    every.on_missed = chime::Missed::catch_up;
    every.first_due = rt.clock().now() - 1ms;  // runs due at once, back to back
    if (rng() % 4 == 0) {
      t.arm_after(chime::Duration::zero());
    } else {
      t.arm_every(20us, every);
    }
    ++arms;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
  }
  t.disarm_and_wait();
  EXPECT_EQ(overlaps.load(), 0) << "two runs of one Timer overlapped (" << runs.load() << " runs, " << arms << " arms)";
  EXPECT_GT(runs.load(), 0u);
}

}  // namespace
