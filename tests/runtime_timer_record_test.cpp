// SPDX-License-Identifier: BSL-1.0
// A timer's record (runtime/timer_slab.hpp): a timer is one 64-byte slot
// when its callable's captures fit 16 bytes; a larger callable, a periodic
// timer's period and a lane timer's lane live in the slot's side record.
// Whatever the size and alignment of the callable, the timer runs once,
// with its own captures, and its captures are released when the timer ends
// (run, cancelled, or swept by shutdown), and steady state allocates
// nothing per timer.
#include "../runtime/compact_task.hpp"
#include "../runtime/timer_slab.hpp"
#include "alloc_counter.hpp"
#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/task.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace {

using namespace chime_test;
using chime::Firing;
using chime::Task;
using chime::TimerId;
using chime::detail::CompactTask;
using chime::detail::TimerSlot;

template <std::size_t N>
struct Pad {
  unsigned char bytes[N] = {};
};

// A callable of `Bytes` bytes in all (a shared_ptr's 16 and padding) that
// adds its tag to `sum` when it runs, and holds `token` while it lives.
template <std::size_t Bytes>
struct Capture {
  static_assert(Bytes >= 24);
  std::shared_ptr<int> token;
  std::atomic<int>* sum;
  Pad<Bytes - 24> pad;
  void operator()(const Firing&) const { sum->fetch_add(*token, std::memory_order_relaxed); }
};

struct Small {  // 16 bytes: fits the slot
  std::atomic<int>* sum;
  int tag;
  void operator()() const { sum->fetch_add(tag, std::memory_order_relaxed); }
};

struct alignas(16) AlignedSmall {  // 16 bytes, aligned to 16: not in the slot's 8-aligned buffer
  std::atomic<int>* sum;
  int tag;
  void operator()() const { sum->fetch_add(tag, std::memory_order_relaxed); }
};

#ifdef NDEBUG
static_assert(sizeof(TimerSlot) == 64, "a timer is one cache line in release builds");
#endif

// CompactTask takes a callable stored inline in the Task when it fits 16
// bytes aligned to 8, and the pointer of one the Task allocated; anything
// else stays in the Task, which is left as it was.
TEST(RuntimeTimerRecord, compact_task_takes_what_fits_and_leaves_the_rest) {
  std::atomic<int> sum{0};
  {
    Task t(Small{&sum, 1});
    CompactTask<16> c;
    ASSERT_TRUE(c.adopt(t));
    EXPECT_FALSE(t) << "the callable moved out of the Task";
    c(Firing{});
    EXPECT_EQ(sum.load(), 1);
  }
  {
    auto token = std::make_shared<int>(10);
    Task t(Capture<40>{token, &sum, {}});  // inline in the Task (48), not in 16
    CompactTask<16> c;
    EXPECT_FALSE(CompactTask<16>::fits(t));
    EXPECT_FALSE(c.adopt(t));
    EXPECT_TRUE(t) << "a callable that does not fit stays in the Task";
    EXPECT_FALSE(c);
    t(Firing{});
    EXPECT_EQ(sum.load(), 11);
  }
  {
    auto token = std::make_shared<int>(100);
    Task t(Capture<200>{token, &sum, {}});  // the Task allocated it: its pointer fits
    static_assert(!Task::stored_inline<Capture<200>>);
    CompactTask<16> c;
    ASSERT_TRUE(c.adopt(t));
    EXPECT_FALSE(t);
    EXPECT_EQ(token.use_count(), 2);
    c(Firing{});
    EXPECT_EQ(sum.load(), 111);
    c.reset();
    EXPECT_EQ(token.use_count(), 1) << "reset destroys the allocated callable";
  }
  {
    Task t(AlignedSmall{&sum, 1000});
    CompactTask<16> c;
    EXPECT_FALSE(c.adopt(t)) << "over-aligned for the slot's buffer";
    EXPECT_TRUE(t);
  }
  {
    Task empty;
    CompactTask<16> c;
    EXPECT_TRUE(c.adopt(empty));
    EXPECT_FALSE(c);
  }
}

// Every callable size runs exactly once with its own captures, and they are
// released once the run is over: 16 bytes in the slot, 24 and 48 in the
// side record, 200 through the Task's allocation, 16 over-aligned in the
// side record; on the workers and on the wheel thread (workers = 0).
TEST(RuntimeTimerRecord, every_callable_size_runs_once_and_releases_its_captures) {
  for (unsigned workers : {0u, 2u}) {
    chime::ManualClock clock{kStart};
    chime::Runtime rt{manual_options(clock, workers)};
    std::atomic<int> sum{0};
    auto t24 = std::make_shared<int>(10);
    auto t48 = std::make_shared<int>(100);
    auto t200 = std::make_shared<int>(1000);
    rt.schedule_at(at(1ms), Small{&sum, 1});
    rt.schedule_at(at(1ms), Capture<24>{t24, &sum, {}});
    rt.schedule_at(at(2ms), Capture<48>{t48, &sum, {}});
    rt.schedule_at(at(2ms), Capture<200>{t200, &sum, {}});
    rt.schedule_at(at(3ms), AlignedSmall{&sum, 10000});
    EXPECT_EQ(t24.use_count(), 2);
    advance_to(clock, rt, at(5ms));
    EXPECT_EQ(sum.load(), 11111) << "workers " << workers;
    EXPECT_EQ(t24.use_count(), 1) << "workers " << workers;
    EXPECT_EQ(t48.use_count(), 1) << "workers " << workers;
    EXPECT_EQ(t200.use_count(), 1) << "workers " << workers;
  }
}

// A cancel releases the captures before it returns, wherever they are;
// cancelled timers, filed or not, never run; shutdown's sweep releases the
// captures of timers cancelled while filed and of timers still pending.
TEST(RuntimeTimerRecord, cancel_and_shutdown_release_captures_wherever_they_are) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  std::atomic<int> sum{0};
  auto token = std::make_shared<int>(1);
  std::vector<TimerId> cancelled_unfiled, cancelled_filed, left_pending;
  for (int i = 0; i < 8; ++i) cancelled_unfiled.push_back(rt.schedule_at(at(5ms), Capture<40>{token, &sum, {}}));
  for (TimerId id : cancelled_unfiled) ASSERT_TRUE(rt.cancel(id));
  EXPECT_EQ(token.use_count(), 1) << "a cancel destroys the callable before it returns";
  for (int i = 0; i < 8; ++i) cancelled_filed.push_back(rt.schedule_at(at(5ms), Capture<40>{token, &sum, {}}));
  for (int i = 0; i < 8; ++i) left_pending.push_back(rt.schedule_at(at(9ms), Capture<200>{token, &sum, {}}));
  rt.flush();  // every ADD applied: filed
  for (TimerId id : cancelled_filed) ASSERT_TRUE(rt.cancel(id));
  EXPECT_EQ(token.use_count(), 1 + 8) << "zombies hold nothing; the 8 pending timers do";
  advance_to(clock, rt, at(6ms));
  EXPECT_EQ(sum.load(), 0) << "no cancelled timer ran";
  EXPECT_EQ(rt.shutdown(chime::ShutdownMode::cancel_pending), 8u);
  EXPECT_EQ(token.use_count(), 1) << "shutdown's sweep released the pending timers' captures";
}

// A periodic timer (its period in the side record) with a callable in the
// slot, and one with a callable in the side record, keep their fixed rate;
// a lane timer (its lane in the side record) with a large callable runs on
// the lane's thread.
TEST(RuntimeTimerRecord, periodic_and_lane_timers_keep_their_side_record) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  std::atomic<int> small_runs{0}, large_sum{0};
  auto token = std::make_shared<int>(1);
  const TimerId small = rt.schedule_every(2ms, Small{&small_runs, 1});
  const TimerId large = rt.schedule_every(3ms, Capture<48>{token, &large_sum, {}});
  chime::Lane lane = rt.lane();
  std::atomic<int> lane_sum{0};
  lane.schedule_at(at(4ms), Capture<40>{token, &lane_sum, {}});
  for (int ms = 1; ms <= 12; ++ms) {
    clock.set(at(std::chrono::milliseconds(ms)));
    rt.flush();  // on the lane's thread: runs the lane's ready runs too
  }
  EXPECT_EQ(small_runs.load(), 6) << "every 2 ms over 12 ms";
  EXPECT_EQ(large_sum.load(), 4) << "every 3 ms over 12 ms";
  EXPECT_EQ(lane_sum.load(), 1);
  EXPECT_TRUE(rt.cancel(small));
  EXPECT_TRUE(rt.cancel(large));
  rt.flush();
  EXPECT_EQ(token.use_count(), 1);
}

// Steady state allocates nothing per timer whatever the callable's size up
// to Task::inline_size: once a chunk's side records exist, a 40-byte
// callable, a periodic timer and a lane timer use them in place.
TEST(RuntimeTimerRecord, side_records_are_not_allocated_per_timer) {
  chime::ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.reserve = 1024;
  chime::Runtime rt{options};
  std::atomic<int> sum{0};
  auto token = std::make_shared<int>(1);
  std::vector<TimerId> ids;
  ids.reserve(200);
  chime::TimePoint now = kStart;
  const auto cycle = [&] {
    ids.clear();
    for (int i = 0; i < 100; ++i) ids.push_back(rt.schedule_at(now + 5ms, Capture<40>{token, &sum, {}}));
    for (TimerId id : ids) ASSERT_TRUE(rt.cancel(id));
    for (int i = 0; i < 100; ++i) rt.schedule_at(now + 2ms, Capture<40>{token, &sum, {}});
    now += 4ms;
    clock.set(now);
    rt.flush();
  };
  for (int i = 0; i < 50; ++i) cycle();  // warm-up
  std::size_t allocations = 0;
  {
    chime_alloc::CountScope scope;
    for (int i = 0; i < 50; ++i) cycle();
    allocations = scope.count();
  }
  EXPECT_EQ(sum.load(), 100 * 100);
  EXPECT_EQ(allocations, 0u) << allocations << " heap allocations for 10,000 timers with 40-byte callables";
}

}  // namespace
