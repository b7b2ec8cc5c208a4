// SPDX-License-Identifier: BSL-1.0
// Overload (design.md, "Overload"; runtime.hpp): a schedule that finds the
// command queue at RuntimeOptions::max_queue_depth throws CapacityError
// naming the depth and the bound, and queues nothing; cancels, touches,
// reschedules to an earlier due are never refused; nothing accepted is lost;
// once the wheel thread catches up, schedules are accepted again; the queue
// exceeds the bound by at most 64 posts per posting thread; stats() shows the
// depth, the refusals and the wheel thread's CPU time. The wheel thread is
// held by a callback that blocks it (workers = 0), run by a flush on a thread
// of its own, so the queue only grows.

#include "runtime_test_support.hpp"

#include <chime/keyed_timers.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::CapacityError;
using chime::ManualClock;
using chime::Runtime;
using chime::RuntimeOptions;
using chime::TimerId;
using namespace std::chrono_literals;

constexpr std::size_t kBound = 1024;
constexpr std::size_t kPostsPerLook = 64;  // command_queue.hpp, QueueDepth::kPostsPerLook

RuntimeOptions bounded_options(ManualClock& clock) {
  RuntimeOptions o = manual_options(clock, 0);  // callbacks on the wheel thread: the gate holds it
  o.max_queue_depth = kBound;
  o.shards = 1;  // the one wheel thread the gate holds (RuntimeShards covers several)
  return o;
}

// Blocks the wheel thread in a callback, due now and run by a flush on the
// returned thread (on a manual clock timers run only inside flush), which
// returns once the gate is released.
[[nodiscard]] std::jthread hold_wheel_thread(Runtime& rt, Gate& gate) {
  rt.schedule_after(chime::Duration::zero(), gate.blocker());
  std::jthread flusher([&rt] { rt.flush(); });
  gate.wait_started();
  return flusher;
}

// Fills the queue from this thread until a schedule is refused; returns the
// ids accepted (each timer's task counts its runs in runs[i]) and the
// refusal's message.
struct Filled {
  std::vector<TimerId> ids;
  std::string message;
};
Filled fill_until_refused(Runtime& rt, std::vector<std::atomic<int>>& runs) {
  Filled f;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    try {
      f.ids.push_back(rt.schedule_at(at(5ms), [&runs, i] { runs[i].fetch_add(1); }));
    } catch (const CapacityError& e) {
      f.message = e.what();
      return f;
    }
  }
  return f;
}

// A full queue refuses schedules with CapacityError naming the depth and the
// bound, at the bound or at most 64 posts past it (one posting thread);
// cancels, touches and earlier reschedules still work; after the wheel
// thread drains the queue schedules are accepted again; every accepted timer
// runs exactly once unless cancelled, and no refused one runs.
TEST(RuntimeOverload, full_queue_refuses_schedules_and_loses_nothing_accepted) {
  ManualClock clock{kStart};
  Gate gate;
  Runtime rt(bounded_options(clock));
  const std::jthread held = hold_wheel_thread(rt, gate);

  std::vector<std::atomic<int>> runs(kBound + 4 * kPostsPerLook);
  Filled f = fill_until_refused(rt, runs);
  ASSERT_FALSE(f.message.empty()) << "no schedule was refused after " << f.ids.size();
  EXPECT_GE(f.ids.size(), kBound);
  EXPECT_LE(f.ids.size(), kBound + kPostsPerLook);
  const chime::Stats full = rt.stats();
  EXPECT_GE(full.queue_depth, kBound);
  EXPECT_LE(full.queue_depth, kBound + kPostsPerLook);
  EXPECT_EQ(full.refused_overload, 1u);
  ASSERT_EQ(full.shards.size(), 1u);
  EXPECT_EQ(full.shards[0].queue_depth, full.queue_depth);
  EXPECT_NE(f.message.find("max_queue_depth = " + std::to_string(kBound)), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("holds " + std::to_string(full.queue_depth) + " commands"), std::string::npos) << f.message;

  // Every way to post a new timer is refused while the queue is full:
  // Runtime, Producer, periodic, Timer, KeyedTimers, Lane.
  EXPECT_THROW(rt.schedule_after(1ms, [] {}), CapacityError);
  EXPECT_THROW(rt.schedule_every(1ms, [] {}), CapacityError);
  chime::Producer p = rt.producer();
  EXPECT_THROW(p.schedule_at(at(1ms), [] {}), CapacityError);
  chime::Timer timer(rt, [] {});
  EXPECT_THROW(timer.arm_after(1ms), CapacityError);
  EXPECT_FALSE(timer.armed());
  chime::KeyedTimers<int, int> keyed(rt, [](const int&, int&&) {});
  EXPECT_THROW(keyed.set(1, 1, 1ms), CapacityError);
  chime::Lane lane = rt.lane();  // destroyed after the gate's release (its close waits for a pass)
  EXPECT_THROW(lane.schedule_after(1ms, [] {}), CapacityError);
  EXPECT_EQ(rt.stats().refused_overload, 7u);

  // Cancels and touches post nothing and are never refused; a reschedule to
  // an earlier due posts a command and is never refused either.
  ASSERT_GE(f.ids.size(), 3u);
  EXPECT_TRUE(rt.cancel(f.ids[0]));
  EXPECT_TRUE(rt.reschedule_at(f.ids[1], at(9ms)));  // later: a touch
  EXPECT_TRUE(rt.reschedule_at(f.ids[2], at(2ms)));  // earlier: a command past the bound
  EXPECT_EQ(rt.stats().queue_depth, full.queue_depth + 1);

  // The wheel thread catches up: schedules are accepted again.
  gate.release();
  rt.flush();
  EXPECT_EQ(rt.stats().queue_depth, 0u);
  const TimerId again = rt.schedule_at(at(5ms), [&runs, n = f.ids.size()] { runs[n].fetch_add(1); });
  EXPECT_TRUE(again);
  advance_to(clock, rt, at(20ms));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const int expected = i == 0 ? 0 : (i <= f.ids.size() ? 1 : 0);  // ids[0] cancelled; index ids.size(): `again`
    EXPECT_EQ(runs[i].load(), expected) << "timer " << i;
  }
  const chime::Stats end = rt.stats();
  EXPECT_EQ(end.pending, 0u);
  EXPECT_EQ(end.refused_overload, 7u);
}

// With several producers posting at once, the queue exceeds the bound by at
// most 64 posts per posting thread (the commands in flight), and every
// thread is refused once it is over.
TEST(RuntimeOverload, queue_depth_stays_within_bound_plus_64_per_producer) {
  constexpr int kThreads = 4;
  ManualClock clock{kStart};
  Gate gate;
  Runtime rt(bounded_options(clock));
  const std::jthread held = hold_wheel_thread(rt, gate);
  std::atomic<std::size_t> accepted{0};
  std::atomic<std::size_t> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      chime::Producer p = rt.producer();
      for (;;) {
        try {
          // Half through a Producer, half through the Runtime (the calling
          // thread's implicit sub-queue): both count.
          if (t % 2 == 0) {
            p.schedule_at(at(5ms), [&ran] { ran.fetch_add(1); });
          } else {
            rt.schedule_at(at(5ms), [&ran] { ran.fetch_add(1); });
          }
          accepted.fetch_add(1);
        } catch (const CapacityError&) {
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const chime::Stats s = rt.stats();
  EXPECT_GE(s.queue_depth, kBound);
  EXPECT_LE(s.queue_depth, kBound + kThreads * kPostsPerLook);
  EXPECT_EQ(s.queue_depth, accepted.load());
  EXPECT_EQ(s.refused_overload, static_cast<std::uint64_t>(kThreads));
  gate.release();
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(ran.load(), accepted.load()) << "an accepted timer was lost or ran twice";
}

// The bound is per posting thread, not per Producer: a thread that posts
// through a fresh Producer for every 63 schedules, through 500 live
// Producers in turn, or through the Runtime from many short-lived threads
// is refused once the queue is at the bound, within 64 posts of it, and
// every accepted timer runs once.
TEST(RuntimeOverload, queue_bound_holds_however_producers_are_made_kept_or_dropped) {
  ManualClock clock{kStart};
  std::vector<std::unique_ptr<Gate>> gates;  // each holds the wheel thread in turn; they outlive the runtime
  Runtime rt(bounded_options(clock));
  std::vector<std::jthread> held;  // the flushes that run the gates' callbacks: joined after their release
  struct ReleaseOnExit {  // a failed ASSERT still lets the runtime shut down
    std::vector<std::unique_ptr<Gate>>& gates;
    ~ReleaseOnExit() {
      for (auto& g : gates) g->release();
    }
  } release_on_exit{gates};
  std::atomic<std::size_t> ran{0};
  std::size_t accepted = 0;
  auto task = [&ran] { ran.fetch_add(1); };
  // Schedules through `post` until one is refused; false if none was in `limit` tries.
  auto until_refused = [&](std::size_t limit, auto post) {
    for (std::size_t i = 0; i < limit; ++i) {
      try {
        post(i);
        ++accepted;
      } catch (const CapacityError&) {
        return true;
      }
    }
    return false;
  };
  auto depth = [&rt] { return rt.stats().shards[0].queue_depth; };

  // Releases the wheel thread, lets it drain the queue, and holds it again.
  gates.push_back(std::make_unique<Gate>());
  held.push_back(hold_wheel_thread(rt, *gates.back()));
  const auto drain_and_hold = [&] {
    gates.back()->release();
    rt.flush();
    gates.push_back(std::make_unique<Gate>());
    held.push_back(hold_wheel_thread(rt, *gates.back()));
  };

  // A fresh Producer for every 63 schedules.
  std::optional<chime::Producer> fresh;
  ASSERT_TRUE(until_refused(20 * kBound,
                            [&](std::size_t i) {
                              if (i % 63 == 0) fresh.emplace(rt.producer());
                              fresh->schedule_at(at(5ms), task);
                            }))
      << "no refusal after " << accepted << " schedules through fresh Producers";
  EXPECT_LE(depth(), kBound + kPostsPerLook);
  fresh.reset();

  // 500 live Producers, one schedule each in turn.
  drain_and_hold();
  std::vector<chime::Producer> live;
  for (int i = 0; i < 500; ++i) live.push_back(rt.producer());
  ASSERT_TRUE(until_refused(20 * kBound, [&](std::size_t i) { live[i % live.size()].schedule_at(at(5ms), task); }))
      << "no refusal after " << accepted << " schedules through 500 live Producers";
  EXPECT_LE(depth(), kBound + kPostsPerLook);
  live.clear();

  // Through the Runtime from short-lived threads of 10 schedules each.
  drain_and_hold();
  bool refused = false;
  for (int t = 0; t < 400 && !refused; ++t) {
    std::thread([&] { refused = until_refused(10, [&](std::size_t) { rt.schedule_at(at(5ms), task); }); }).join();
  }
  EXPECT_TRUE(refused) << "no refusal after " << accepted << " schedules from short-lived threads";
  EXPECT_LE(depth(), kBound + kPostsPerLook);

  gates.back()->release();
  advance_to(clock, rt, at(10ms));
  rt.flush();
  EXPECT_EQ(ran.load(), accepted) << "an accepted timer was lost or ran twice";
}

// On a steady clock with the wheel's next alarm an hour away, a thread that
// posts far timers through a fresh Producer for every 63 schedules keeps the
// queue within the bound: its posts count toward the wake that makes the
// wheel thread drain the queue, and toward its looks at the depth.
TEST(RuntimeOverload, posts_through_fresh_producers_wake_the_wheel_thread_and_keep_the_bound) {
  RuntimeOptions o = steady_options(1);
  o.max_queue_depth = kBound;
  o.shards = 1;
  Runtime rt(o);
  rt.schedule_after(1h, [] {});
  rt.flush();
  std::size_t max_depth = 0, refused = 0;
  std::optional<chime::Producer> fresh;
  for (std::size_t i = 0; i < 40 * kBound; ++i) {
    if (i % 63 == 0) {
      fresh.emplace(rt.producer());
      max_depth = std::max<std::size_t>(max_depth, rt.stats().shards[0].queue_depth);
    }
    try {
      const TimerId id = fresh->schedule_after(2h, [] {});
      ASSERT_TRUE(id);
    } catch (const CapacityError&) {
      ++refused;
    }
  }
  max_depth = std::max<std::size_t>(max_depth, rt.stats().shards[0].queue_depth);
  EXPECT_LE(max_depth, kBound + kPostsPerLook) << refused << " refused";
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 1 + 40 * kBound - refused);
}

// max_queue_depth: 0 is the documented default, values below the minimum
// are refused naming the value and the minimum, SIZE_MAX means no bound.
TEST(RuntimeOverload, max_queue_depth_is_validated) {
  ManualClock clock{kStart};
  RuntimeOptions o = manual_options(clock, 0);
  o.max_queue_depth = 1;
  try {
    Runtime rt(o);
    FAIL() << "max_queue_depth = 1 was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("max_queue_depth = 1 "), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(RuntimeOptions::min_max_queue_depth)), std::string::npos) << m;
  }
  o.max_queue_depth = RuntimeOptions::min_max_queue_depth - 1;
  EXPECT_THROW(Runtime{o}, std::invalid_argument);
  for (std::size_t ok : {std::size_t{0}, RuntimeOptions::min_max_queue_depth, SIZE_MAX}) {
    o.max_queue_depth = ok;
    EXPECT_NO_THROW(Runtime{o}) << ok;
  }
  static_assert(RuntimeOptions::default_max_queue_depth >= RuntimeOptions::min_max_queue_depth);
}

// SIZE_MAX is no bound: a held wheel thread lets the queue grow past the
// default bound's scale without a refusal (here: a few thousand commands
// past the minimum bound).
TEST(RuntimeOverload, size_max_means_no_bound) {
  ManualClock clock{kStart};
  Gate gate;
  RuntimeOptions o = manual_options(clock, 0);
  o.max_queue_depth = SIZE_MAX;
  Runtime rt(o);
  const std::jthread held = hold_wheel_thread(rt, gate);
  for (std::size_t i = 0; i < 4 * RuntimeOptions::min_max_queue_depth; ++i) rt.schedule_at(at(5ms), [] {});
  EXPECT_EQ(rt.stats().queue_depth, 4 * RuntimeOptions::min_max_queue_depth);
  EXPECT_EQ(rt.stats().refused_overload, 0u);
  gate.release();
  rt.flush();
}

// stats().shards has one entry (one wheel thread) whose depth and wake-ups
// are the totals and whose busy time is the wheel thread's CPU time: it
// grows while the wheel thread works, and stays after shutdown.
TEST(RuntimeOverload, shard_stats_report_the_wheel_threads_cpu_time) {
  RuntimeOptions o = steady_options(1);
  o.shards = 1;  // RuntimeShards.stats_cover_every_shard has several
  Runtime rt(o);
  std::atomic<int> ran{0};
  for (int i = 0; i < 20000; ++i) rt.schedule_after(chime::Duration::zero(), [&ran] { ran.fetch_add(1); });
  rt.flush();
  const chime::Stats s = rt.stats();
  ASSERT_EQ(s.shards.size(), 1u);
  EXPECT_EQ(s.shards[0].wakeups, s.wakeups);
  EXPECT_EQ(s.shards[0].queue_depth, s.queue_depth);
  EXPECT_GT(s.shards[0].busy, chime::Duration::zero());
  rt.shutdown();
  const chime::Stats after = rt.stats();
  ASSERT_EQ(after.shards.size(), 1u);
  EXPECT_GE(after.shards[0].busy, s.shards[0].busy);
  EXPECT_EQ(ran.load(), 20000);
}

}  // namespace
