// SPDX-License-Identifier: BSL-1.0
// No heap allocation per timer (runtime.hpp: "No heap allocation per
// timer in steady state"; task.hpp: a Task up to 48 bytes is stored inline).
//
// The binary links tests/alloc_counter (chime_alloc_counter, see
// alloc_counter.hpp): a replacement global operator new/delete that counts
// allocations on every thread while a chime_alloc::CountScope is alive, counts
// big allocations always, and fails them under a chime_alloc::OutOfMemoryScope.
//
// Steady state means: after a warm-up that runs the same pattern as the
// measured phase (same batch sizes, so slabs, free lists, wheel pools and the
// moodycamel blocks of the calling thread's sub-queue have reached their
// working size), schedule/cancel/reschedule/fire cycles allocate nothing.

#include "alloc_counter.hpp"
#include "runtime_test_support.hpp"

#include <chime/keyed_timers.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/task.hpp>
#include <chime/timer.hpp>
#include <chime/timing_wheel.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::Task;
using chime::TimerId;
using chime_alloc::CountScope;

template <std::size_t N>
struct Pad {
  unsigned char bytes[N] = {};
};

// Constructing, moving, invoking and destroying a Task with a 48-byte callable allocates nothing.
TEST(RuntimeAllocation, inline_task_never_allocates) {
  int hits = 0;
  std::size_t n = 0;
  {
    CountScope scope;
    {
      Task a([pad = Pad<40>{}, h = &hits] {
        (void)pad;
        ++*h;
      });
      Task b = std::move(a);
      Task c;
      c = std::move(b);
      c(Firing{});
    }
    n = scope.count();
  }
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(n, 0u) << "a 48-byte nothrow-movable callable must be stored inline";
}

// A callable over 48 bytes is allocated once, at construction, and never again when the Task moves.
TEST(RuntimeAllocation, large_task_allocates_once_at_construction) {
  int hits = 0;
  std::size_t at_construction = 0;
  std::size_t total = 0;
  {
    CountScope scope;
    {
      Task a([pad = Pad<41>{}, h = &hits] {
        (void)pad;
        ++*h;
      });  // 49 bytes or more
      at_construction = scope.count();
      Task b = std::move(a);
      Task c;
      c = std::move(b);
      c(Firing{});
    }
    total = scope.count();
  }
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(at_construction, 1u);
  EXPECT_EQ(total, 1u);
}

// One cycle of the steady-state pattern: 100 timers scheduled and cancelled, 100 scheduled, half of them
// rescheduled later and a quarter earlier, then all fired by one advance.
void cycle(Runtime& rt, chime::Producer* p, ManualClock& clock, std::atomic<int>& fired, std::vector<TimerId>& ids) {
  const chime::TimePoint now = clock.now();
  auto sched = [&](chime::TimePoint due) {
    auto task = [f = &fired] { f->fetch_add(1, std::memory_order_relaxed); };
    return p != nullptr ? p->schedule_at(due, task) : rt.schedule_at(due, task);
  };
  ids.clear();
  for (int i = 0; i < 100; ++i) ids.push_back(sched(now + 5ms));
  for (const TimerId& id : ids) {
    if (!(p != nullptr ? p->cancel(id) : rt.cancel(id))) std::abort();
  }
  ids.clear();
  for (int i = 0; i < 100; ++i) ids.push_back(sched(now + 2ms));
  for (int i = 0; i < 50; ++i) {
    if (!(p != nullptr ? p->reschedule_at(ids[i], now + 3ms) : rt.reschedule_at(ids[i], now + 3ms))) std::abort();
  }
  for (int i = 50; i < 75; ++i) {
    if (!(p != nullptr ? p->reschedule_at(ids[i], now + 1ms) : rt.reschedule_at(ids[i], now + 1ms))) std::abort();
  }
  clock.set(now + 4ms);
  rt.flush();
}

struct SteadyStateResult {
  std::size_t allocations = 0;
  std::size_t idle_flush_allocations = 0;
  int fired = 0;
};

SteadyStateResult measure_steady_state(unsigned workers, bool use_producer) {
  ManualClock clock{kStart};
  // Room for every timer a cycle can have at once (up to 200 live and 100
  // zombies, depending on when the wheel thread applies the ADDs): the slot
  // slab (which holds the wheel's nodes too) otherwise grows, rarely,
  // whenever an interleaving holds more at once than any warm-up cycle did.
  chime::RuntimeOptions options = manual_options(clock, workers);
  options.reserve = 1024;
  Runtime rt{options};
  std::optional<chime::Producer> producer;
  if (use_producer) producer.emplace(rt.producer());
  chime::Producer* p = producer ? &*producer : nullptr;
  std::atomic<int> fired{0};
  std::vector<TimerId> ids;
  ids.reserve(100);
  for (int i = 0; i < 100; ++i) cycle(rt, p, clock, fired, ids);  // warm-up: 20,000 timers
  SteadyStateResult r;
  {
    CountScope scope;
    for (int i = 0; i < 100; ++i) cycle(rt, p, clock, fired, ids);  // measured: 20,000 timers
    r.allocations = scope.count();
  }
  {
    CountScope scope;  // diagnostic only: is it flush() itself that allocates?
    for (int i = 0; i < 100; ++i) rt.flush();
    r.idle_flush_allocations = scope.count();
  }
  r.fired = fired.load();
  return r;
}

// Steady state allocates nothing: 10,000 schedule+cancel and 10,000 schedule(+reschedule)+fire cycles
// through Runtime's own calls, after a warm-up of the same pattern, with 0, 1 and 2 workers.
TEST(RuntimeAllocation, steady_state_timers_never_allocate) {
  for (unsigned workers : {0u, 1u, 2u}) {
    const SteadyStateResult r = measure_steady_state(workers, false);
    EXPECT_EQ(r.fired, 2 * 100 * 100) << "workers " << workers;
    EXPECT_EQ(r.allocations, 0u) << "workers " << workers << ": " << r.allocations
                                 << " heap allocations for 20,000 timers and 100 flushes in steady state ("
                                 << r.idle_flush_allocations << " for 100 idle flushes)";
  }
}

// The same through a Producer handle (its own queue token).
TEST(RuntimeAllocation, steady_state_producer_timers_never_allocate) {
  for (unsigned workers : {0u, 1u, 2u}) {
    const SteadyStateResult r = measure_steady_state(workers, true);
    EXPECT_EQ(r.fired, 2 * 100 * 100) << "workers " << workers;
    EXPECT_EQ(r.allocations, 0u) << "workers " << workers << ": " << r.allocations
                                 << " heap allocations for 20,000 timers and 100 flushes in steady state ("
                                 << r.idle_flush_allocations << " for 100 idle flushes)";
  }
}

// A coroutine sleeping on a lane allocates nothing per sleep beyond its frame
// (lane.hpp: the resumer is stored inline in the timer's slot), and the
// flushes on the lane's thread that drive it allocate nothing either.
chime::Detached sleep_loop(chime::Lane& lane, int sleeps, int& woke) {
  for (int i = 0; i < sleeps; ++i) {
    co_await lane.sleep_for(std::chrono::milliseconds(1));
    ++woke;
  }
}

TEST(RuntimeAllocation, coroutine_sleeps_on_a_lane_never_allocate_beyond_the_frame) {
  ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.reserve = 1024;
  Runtime rt(o);
  chime::Lane lane = rt.lane();
  lane.run_ready();  // this thread runs the lane
  constexpr int kCoroutines = 50, kSleeps = 400;
  int woke = 0;
  for (int c = 0; c < kCoroutines; ++c) sleep_loop(lane, kSleeps, woke);  // the frames: allocated here
  int ms = 0;
  auto step = [&] {
    ++ms;
    clock.set(at(std::chrono::milliseconds(ms)));
    rt.flush();
  };
  for (int i = 0; i < 100; ++i) step();  // warm-up: queues and slabs reach their working size
  const int woke_before = woke;
  std::size_t allocations = 0;
  {
    CountScope scope;
    for (int i = 0; i < 200; ++i) step();
    allocations = scope.count();
  }
  // A 1 ms sleep from a flush's reading fires at the next flush, 1 ms
  // later: 200 steps are 200 sleeps per coroutine.
  EXPECT_EQ(woke - woke_before, kCoroutines * 200) << "the coroutines did not keep sleeping and waking";
  EXPECT_EQ(allocations, 0u) << allocations << " heap allocations for " << (woke - woke_before)
                             << " coroutine sleeps and 200 flushes on the lane's thread";
}

// Out of memory, schedule throws std::bad_alloc and schedules nothing: the
// timer's task is destroyed, it is not counted, and every timer accepted
// before it still fires once. A callable larger than a Task's inline
// storage (48 bytes) is stored on the heap, with operator new, which this
// binary makes fail.
TEST(RuntimeAllocation, schedule_out_of_memory_throws_bad_alloc_and_schedules_nothing) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 0)};
  std::atomic<int> runs{0};
  const auto capture = std::make_shared<int>(0);
  constexpr std::size_t kAccepted = 1000;
  for (std::size_t i = 0; i < kAccepted; ++i) {
    rt.schedule_at(kStart, [&runs, capture, pad = Pad<64>{}](const Firing&) {
      (void)pad;
      runs.fetch_add(1);
    });
  }
  bool threw = false;
  {
    const chime_alloc::OutOfMemoryScope out_of_memory;
    try {
      rt.schedule_at(kStart, [&runs, capture, pad = Pad<64>{}](const Firing&) {
        (void)pad;
        runs.fetch_add(1);
      });
    } catch (const std::bad_alloc&) {
      threw = true;
    }
  }
  ASSERT_TRUE(threw) << "a schedule whose task needs the heap did not throw out of memory";
  EXPECT_EQ(capture.use_count(), static_cast<long>(kAccepted) + 1) << "the refused timer's task was kept";
  EXPECT_EQ(rt.stats().scheduled, kAccepted);  // the accepted ones; not the refused one
  advance_to(clock, rt, kStart + 1ms);
  EXPECT_EQ(runs.load(), static_cast<int>(kAccepted)) << "a timer accepted before the failure did not fire once";
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_EQ(capture.use_count(), 1);
}

// Producers that come and go give back the free slots they cached (a
// Producer takes them from the free list 32 at a time): 3,000 producer
// lifetimes of 40 timers each reuse the same slots instead of growing the
// slab (with the caches leaked, it grew by a 4096-slot chunk).
TEST(RuntimeAllocation, producers_coming_and_going_return_their_cached_slots) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 0)};
  auto lifetime = [&] {
    chime::Producer p = rt.producer();
    std::vector<TimerId> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(p.schedule_at(at(10s), [](const Firing&) {}));
    for (const TimerId id : ids) EXPECT_TRUE(p.cancel(id));
  };
  for (int k = 0; k < 200; ++k) lifetime();  // warm-up: the slab reaches its working size
  rt.flush();
  const std::size_t before = chime_alloc::big_allocations();
  for (int k = 0; k < 3000; ++k) {
    lifetime();
    rt.flush();  // the wheel thread frees the cancelled slots: the next producer finds them
  }
  // Moved-into producers give back their old cache too.
  chime::Producer a = rt.producer();
  for (int k = 0; k < 1000; ++k) {
    const TimerId id = a.schedule_at(at(10s), [](const Firing&) {});
    EXPECT_TRUE(a.cancel(id));
    a = rt.producer();
  }
  rt.flush();
  EXPECT_EQ(chime_alloc::big_allocations() - before, 0u) << "the slab grew: producers kept free slots";
  EXPECT_EQ(rt.stats().pending, 0u);
}

// Memory stays bounded although a cancel posts no command: timers cancelled
// after the wheel filed them (zombies) are reclaimed by sweeps once they
// exceed a quarter of the filed timers, so 60,000 filed-then-cancelled
// timers beside 4,000 live ones allocate nothing once warm (an unbounded
// zombie population would grow the slab by 4,096-slot chunks and the wheel's
// pool), and the sweeps happened.
TEST(RuntimeAllocation, filed_then_cancelled_timers_are_reclaimed_without_growing_memory) {
  for (unsigned workers : {0u, 2u}) {
    ManualClock clock{kStart};
    Runtime rt{manual_options(clock, workers)};
    chime::Producer p = rt.producer();
    for (int i = 0; i < 4'000; ++i) p.schedule_at(at(60s), [](const Firing&) {});
    std::vector<TimerId> ids;
    ids.reserve(100);
    auto cycle = [&] {
      ids.clear();
      for (int i = 0; i < 100; ++i) ids.push_back(p.schedule_at(at(30s), [](const Firing&) {}));
      rt.flush();  // filed
      for (const TimerId id : ids) {
        if (!p.cancel(id)) std::abort();
      }
    };
    for (int k = 0; k < 100; ++k) cycle();  // warm-up: 10,000 zombies made, several sweeps
    rt.flush();
    const std::uint64_t sweeps_before = rt.stats().zombie_sweeps;
    std::size_t allocations = 0;
    {
      CountScope scope;
      for (int k = 0; k < 600; ++k) cycle();
      rt.flush();
      allocations = scope.count();
    }
    const chime::Stats s = rt.stats();
    EXPECT_EQ(allocations, 0u) << "workers " << workers << ": zombies grew memory";
    EXPECT_GE(s.zombie_sweeps - sweeps_before, 30u) << "workers " << workers << ": 60,000 zombies were not swept";
    EXPECT_EQ(s.pending, 4'000u);
  }
}

// G6 (wheel allocation): a TimingWheel in steady state allocates nothing:
// after a warm-up of the same pattern, adds, removes, reschedules and
// advances that fire reuse the nodes the warm-up grew.
TEST(RuntimeAllocation, a_timing_wheel_in_steady_state_never_allocates) {
  using Wheel = chime::TimingWheel<int>;
  Wheel wheel(chime::WheelConfig{.alarm_precision = std::chrono::microseconds(100)}, kStart);
  std::vector<Wheel::Alarm> alarms;
  alarms.reserve(4'096);
  std::size_t fired = 0;
  chime::TimePoint now = kStart;
  const auto round = [&] {
    for (int i = 0; i < 2'000; ++i) alarms.push_back(wheel.add(now + std::chrono::microseconds(100 + i * 37), i));
    for (std::size_t i = 0; i < alarms.size(); i += 2) wheel.remove(alarms[i]);
    for (std::size_t i = 1; i < alarms.size(); i += 4) wheel.reschedule(alarms[i], now + 500ms);
    alarms.clear();
    now += 1s;
    wheel.advance_clock(now, [&](Wheel::Alarm) { ++fired; });
  };
  for (int r = 0; r < 3; ++r) round();  // warm-up: the same pattern
  std::size_t n = 0;
  {
    CountScope scope;
    for (int r = 0; r < 10; ++r) round();
    n = scope.count();
  }
  EXPECT_EQ(fired, 13u * 1'000u);
  EXPECT_EQ(n, 0u) << n << " heap allocations in 10 steady-state rounds of 2,000 alarms";
}

// G43 (timer allocation): re-arming a Timer (earlier, later, after a run)
// allocates nothing in steady state: each arm's task is the handle's
// trampoline, stored inline in the slot.
TEST(RuntimeAllocation, re_arming_a_timer_never_allocates) {
  ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.reserve = 1024;
  Runtime rt(o);
  std::atomic<int> ran{0};
  std::vector<chime::Timer> timers;
  for (int i = 0; i < 100; ++i) timers.emplace_back(rt, [&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
  const auto round = [&] {
    for (chime::Timer& t : timers) t.arm_after(10ms);
    for (chime::Timer& t : timers) t.arm_after(20ms);  // later
    for (chime::Timer& t : timers) t.arm_after(5ms);   // earlier
    clock.advance(6ms);
    rt.flush();  // every one runs once
  };
  for (int r = 0; r < 20; ++r) round();  // warm-up
  std::size_t n = 0;
  {
    CountScope scope;
    for (int r = 0; r < 50; ++r) round();
    n = scope.count();
  }
  EXPECT_EQ(ran.load(), 70 * 100);
  EXPECT_EQ(n, 0u) << n << " heap allocations for 15,000 Timer arms and 5,000 runs in steady state";
}

// G53 (keyed touch): moving a pending key later allocates nothing.
TEST(RuntimeAllocation, moving_a_keyed_timer_later_never_allocates) {
  ManualClock clock{kStart};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.reserve = 1024;
  Runtime rt(o);
  std::atomic<int> executed{0};
  chime::KeyedTimers<int, int> timers(rt, [&](const int&, int&&) { executed.fetch_add(1); });
  for (int k = 0; k < 500; ++k) timers.set(k, k, 1s);
  for (int k = 0; k < 500; ++k) EXPECT_TRUE(timers.reschedule_after(k, 2s));  // warm-up
  rt.flush();  // the wheel thread has filed every key's timer: it allocates nothing meanwhile
  std::size_t n = 0;
  bool all_pending = true;
  {
    CountScope scope;
    for (int r = 0; r < 20; ++r) {
      for (int k = 0; k < 500; ++k) all_pending &= timers.reschedule_after(k, std::chrono::seconds(3 + r));
    }
    n = scope.count();
  }
  EXPECT_TRUE(all_pending);
  EXPECT_EQ(n, 0u) << n << " heap allocations for 10,000 moves later";
  clock.advance(1h);
  rt.flush();
  EXPECT_EQ(executed.load(), 500);
}

}  // namespace
