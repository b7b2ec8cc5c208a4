// SPDX-License-Identifier: BSL-1.0
// flush() under a flood of commands (runtime.hpp "flush"): when flush()
// returns, every run due by the clock time it read has completed, periodic
// catch-up runs included, even while other threads keep the command queue
// so full that the wheel thread's passes stop at their batch limit without
// emptying it.
//
// The race it aims at: a periodic timer's re-arm is applied and its next
// run dispatched in a pass that did not empty the queue; the flush, settled
// in a later pass, must still wait for that run (the wheel thread once
// forgot runs dispatched by such passes, and flush() returned with catch-up
// runs still to come). Bounded: 40 flushes or 20 s.
#include "stress_seed.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;

TEST(RuntimeFlushUnderLoad, flush_waits_for_catch_up_runs_dispatched_while_queue_floods) {
  chime_stress::print_seed();
  const TimePoint start = TimePoint{} + 1000s;
  chime::ManualClock clock(start);
  chime::RuntimeOptions o;
  o.precision = 1ms;
  o.workers = 1;
  o.clock = &clock;
  chime::Runtime rt(o);

  std::atomic<std::int64_t> runs{0};
  std::atomic<int> inside{0};
  chime::PeriodicOptions po;
  po.first_due = start + 1ms;
  po.on_missed = chime::Missed::catch_up;
  const chime::TimerId periodic = rt.schedule_every(1ms, [&](const chime::Firing&) {
    inside.fetch_add(1);
    std::this_thread::sleep_for(20us);  // long enough for the wheel thread to run passes meanwhile
    runs.fetch_add(1);
    inside.fetch_sub(1);
  }, po);

  // Two flooders: each schedules and cancels far timers as fast as it can,
  // but once more than kMaxDepth commands are queued it holds off until the
  // queue is empty. So the wheel thread's passes keep stopping at their
  // batch limit (8192), yet the queue empties now and then, as flush()
  // needs (a flood that outruns the wheel thread for good delays flush() as
  // long: runtime.hpp), however slow the wheel thread is (ThreadSanitizer, a
  // loaded machine).
  constexpr std::uint64_t kMaxDepth = 40'000;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> flood_ops{0};
  std::vector<std::thread> flooders;
  for (int f = 0; f < 2; ++f) {
    flooders.emplace_back([&] {
      chime::Producer producer = rt.producer();
      std::uint64_t ops = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (rt.stats().queue_depth > kMaxDepth) {
          // Hold off until the wheel thread has emptied the queue.
          while (rt.stats().queue_depth != 0 && !stop.load(std::memory_order_relaxed)) {
            std::this_thread::sleep_for(200us);
          }
          continue;
        }
        for (int i = 0; i < 256; ++i) {
          const chime::TimerId id = producer.schedule_at(clock.now() + 60s, [](const chime::Firing&) {});
          producer.cancel(id);
        }
        ops += 512;
      }
      flood_ops.fetch_add(ops);
    });
  }

  std::size_t flushes = 0, short_flushes = 0, running_at_return = 0;
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (int k = 1; k <= 40 && std::chrono::steady_clock::now() < give_up; ++k) {
    clock.set(start + Duration(std::chrono::milliseconds(10 * k)) + 500us);
    rt.flush();
    ++flushes;
    // Runs due at start + 1 ms .. start + (10k - 1) ms are due by now: a run
    // starts once its interval has passed, and the one due at start + 10k ms
    // is in the clock's interval.
    const std::int64_t want = 10 * k - 1;
    const int in = inside.load();
    const std::int64_t got = runs.load();
    if (in != 0) ++running_at_return;
    if (got < want) {
      ++short_flushes;
      ADD_FAILURE() << "flush " << k << " returned after " << got << " of " << want << " due runs"
                    << (in != 0 ? " (one still running)" : "");
    }
  }
  stop.store(true);
  for (auto& t : flooders) t.join();
  EXPECT_TRUE(rt.cancel(periodic));
  std::printf("[ stress   ] %zu flushes under a flood of %llu commands: %zu returned before all due runs had "
              "completed, %zu with a run in progress; %lld runs\n",
              flushes, static_cast<unsigned long long>(flood_ops.load()), short_flushes, running_at_return,
              static_cast<long long>(runs.load()));
  EXPECT_GT(flushes, 0u);
  EXPECT_EQ(running_at_return, 0u);
}

}  // namespace
