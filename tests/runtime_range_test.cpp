// SPDX-License-Identifier: BSL-1.0
// chime::Runtime at the ends of representable time (runtime.hpp, G23
// (range); docs/guarantees.md maps it to these tests): the horizon (the wheel advances into
// interval H = min(K_max, 2^61 - 1) - 1 and no further; due times from its
// start on are refused), a clock too close to TimePoint::max() refused at
// construction, and the periodic arithmetic that must not overflow: a
// Missed::skip timer first due at TimePoint::min(), a next run past
// TimePoint::max(). Each of these was a fuzzer finding (docs/fuzzing.md,
// "Findings"); under ASan+UBSan the tests also check there is no signed
// overflow on the way.
#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chime_test;
using chime::Duration;
using chime::ManualClock;
using chime::Missed;
using chime::PeriodicOptions;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

constexpr std::int64_t kMaxNs = INT64_MAX;

// The start of the horizon interval for a runtime started at `start` with
// 1 ms precision and the default 61 level bits (K_max < 2^61 - 1 here).
TimePoint horizon_start(TimePoint start) {
  const std::int64_t s = start.time_since_epoch().count();
  const std::int64_t p = kPrecision.count();
  const std::int64_t k_max = (kMaxNs - s) / p;
  return TimePoint(Duration(s + (k_max - 1) * p));
}

class RuntimeRange : public ManualRuntimeTest {};

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeRange, testing::Values(0u, 1u, 2u), workers_name);

// A clock with fewer than two intervals left before TimePoint::max() is
// refused with std::invalid_argument naming its time; two intervals are enough.
TEST(RuntimeRange, clock_too_close_to_end_of_time_is_refused_by_name) {
  ManualClock late{TimePoint::max() - 2 * kPrecision + Duration(1)};
  try {
    Runtime refused(manual_options(late, 0));
    FAIL() << "a clock one interval and a bit before TimePoint::max() was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(late.now().time_since_epoch().count())), std::string::npos)
        << e.what();
  }
  ManualClock enough{TimePoint::max() - 2 * kPrecision};
  Runtime accepted(manual_options(enough, 0));
  accepted.flush();
}

// The horizon's start is the last due time refused and the time before it
// the last accepted, from the first moment (default bits reach that far).
TEST_P(RuntimeRange, due_limit_is_the_horizon_start) {
  const TimePoint h = horizon_start(kStart);
  try {
    rt.schedule_at(h, rec.task());
    FAIL() << "a due time at the horizon's start was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(h.time_since_epoch().count())), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rt.schedule_at(TimePoint::max(), rec.task()), std::out_of_range);
  const TimerId id = rt.schedule_at(h - Duration(1), rec.task());
  EXPECT_EQ(rt.state(id), TimerState::pending);
  EXPECT_EQ(rt.stats().scheduled, 1u);
}

// A one-shot due just before the horizon fires once the clock reaches the
// end of time (the wheel stops at the horizon, which is past its due), with
// its due reported exactly.
TEST_P(RuntimeRange, one_shot_due_just_before_horizon_fires_at_end_of_time) {
  const TimePoint due = horizon_start(kStart) - Duration(1);
  rt.schedule_at(due, rec.task());
  advance_to(clock, rt, at(1s));
  EXPECT_EQ(rec.count(), 0u);
  advance_to(clock, rt, TimePoint::max());
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, due);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A periodic timer whose runs go on to the end of time keeps the wheel
// thread alive (it once terminated the process: the re-arm was parked before
// the wheel's now): one coalesced run up to the horizon, none beyond; it
// stays cancellable, and the runtime keeps serving.
TEST_P(RuntimeRange, periodic_timer_survives_clock_reaching_end_of_time) {
  const TimerId id = rt.schedule_every(1ms, rec.task(), first_at(at(1ms), Missed::skip));
  advance_to(clock, rt, TimePoint::max());
  ASSERT_EQ(rec.count(), 1u);
  const chime::Firing f = rec.runs()[0].firing;
  const TimePoint h = horizon_start(kStart);
  // The flush's reading stops at the horizon's start: the latest run due at or before it.
  EXPECT_LE(f.due, h);
  EXPECT_GT(f.due, h - kPrecision);
  EXPECT_EQ(f.fired_at, h);
  EXPECT_EQ(f.missed, static_cast<std::uint64_t>((f.due - at(1ms)) / 1ms));
  advance_to(clock, rt, TimePoint::max());
  EXPECT_EQ(rec.count(), 1u) << "a run due after the horizon's start ran";
  EXPECT_EQ(rt.state(id), TimerState::pending);
  EXPECT_TRUE(rt.cancel(id));
  // Still serving: a due before the horizon (in the past now) runs at the next flush.
  rt.schedule_at(h - Duration(1), rec.task(7));
  rt.flush();
  EXPECT_EQ(rec.count(7), 1u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A Missed::skip periodic timer first due at TimePoint::min() coalesces the
// 2^63-odd nanoseconds of missed runs into one run, due at the latest grid
// point at or before the flush's reading, without overflow.
TEST_P(RuntimeRange, skip_periodic_due_at_time_min_coalesces_without_overflow) {
  const TimerId id = rt.schedule_every(1ms, rec.task(), first_at(TimePoint::min(), Missed::skip));
  rt.flush();
  ASSERT_EQ(rec.count(), 1u);
  const chime::Firing f = rec.runs()[0].firing;
  // The flush's reading is kStart; runs due at or before it coalesce.
  const __int128 k = (static_cast<__int128>(kStart.time_since_epoch().count()) - INT64_MIN) / kPrecision.count();
  EXPECT_EQ(f.missed, static_cast<std::uint64_t>(k));
  EXPECT_EQ(f.due.time_since_epoch().count(), static_cast<std::int64_t>(INT64_MIN + k * kPrecision.count()));
  EXPECT_LE(f.due, kStart);
  EXPECT_GT(f.due, kStart - kPrecision);
  // The rate goes on from there: the next run is one period later.
  advance_to(clock, rt, f.due + kPrecision);
  ASSERT_EQ(rec.count(), 2u);
  EXPECT_EQ(rec.runs()[1].firing.due, f.due + kPrecision);
  EXPECT_TRUE(rt.cancel(id));
}

// A periodic timer whose next run would be past TimePoint::max() runs once
// and never again (the next due saturates; it is parked beyond the horizon),
// and stays cancellable.
TEST_P(RuntimeRange, periodic_next_run_past_end_of_time_never_runs) {
  const TimerId id = rt.schedule_every(Duration::max(), rec.task(), first_at(at(1ms), Missed::catch_up));
  advance_to(clock, rt, at(2ms));
  ASSERT_EQ(rec.count(), 1u);
  EXPECT_EQ(rec.runs()[0].firing.due, at(1ms));
  advance_to(clock, rt, TimePoint::max());
  EXPECT_EQ(rec.count(), 1u) << "a run due past TimePoint::max() ran";
  EXPECT_EQ(rt.state(id), TimerState::pending);
  EXPECT_TRUE(rt.cancel(id));
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A clock of another kind than SteadyClock and ManualClock: the wheel thread
// converts its deadlines to the steady clock by the difference of the two.
struct FrozenClock final : chime::Clock {
  explicit FrozenClock(TimePoint start) : t(start.time_since_epoch().count()) {}
  std::atomic<std::int64_t> t;
  TimePoint now() const noexcept override { return TimePoint(Duration(t.load())); }
};

chime::RuntimeOptions frozen_options(FrozenClock& clock) {
  chime::RuntimeOptions o;
  o.precision = kPrecision;
  o.workers = 0;
  o.clock = &clock;
  return o;
}

// A clock of another kind (neither steady nor manual) frozen past the
// horizon: the wheel thread, holding a parked alarm it can never fire, sleeps
// instead of waking for it again and again.
TEST(RuntimeRange, wheel_thread_sleeps_at_the_horizon) {
  FrozenClock frozen{kStart};
  Runtime rt(frozen_options(frozen));
  std::atomic<int> runs{0};
  const TimerId id = rt.schedule_every(1ms, [&](const chime::Firing&) { runs.fetch_add(1); },
                                       first_at(at(1ms), Missed::skip));
  frozen.t.store(kMaxNs);
  rt.flush();
  EXPECT_EQ(runs.load(), 1);
  const std::uint64_t before = rt.stats().wakeups;
  std::this_thread::sleep_for(50ms);
  const std::uint64_t woke = rt.stats().wakeups - before;
  EXPECT_LE(woke, 2u) << "the wheel thread woke " << woke << " times in 50 ms at the horizon";
  EXPECT_TRUE(rt.cancel(id));
}

// A deadline near the end of time on such a clock, while the steady clock
// reads its own (unrelated) time: the conversion saturates instead of
// overflowing (UBSan) into a negative futex timeout, which would make the
// wheel thread spin.
TEST(RuntimeRange, far_deadline_on_another_clock_neither_overflows_nor_spins) {
  FrozenClock frozen{TimePoint{}};
  Runtime rt(frozen_options(frozen));
  std::atomic<int> runs{0};
  const TimerId id = rt.schedule_at(horizon_start(TimePoint{}) - Duration(1), [&](const chime::Firing&) { runs.fetch_add(1); });
  rt.flush();
  const std::uint64_t before = rt.stats().wakeups;
  std::this_thread::sleep_for(50ms);
  const std::uint64_t woke = rt.stats().wakeups - before;
  EXPECT_LE(woke, 2u) << "the wheel thread woke " << woke << " times in 50 ms for a deadline ~292 years away";
  EXPECT_EQ(runs.load(), 0);
  EXPECT_TRUE(rt.cancel(id));
}

}  // namespace

namespace {

// The range is the clock's, not the idle wheel's (judged by the idle wheel, with
// level_bits {8} at 1 ms, after 300 ms with nothing due and no flush,
// schedule_after(0ms) would throw "beyond the wheel's range" every time). A due within 2^8 - 1
// intervals of the clock is accepted and runs, never early, however far the
// wheel is behind the clock; one beyond that range is still refused by name.
TEST(RuntimeRange, an_idle_wheel_behind_the_clock_accepts_dues_within_range_of_the_clock) {
  chime::ManualClock clock{kStart};
  Recorder rec{&clock};
  chime::RuntimeOptions o = manual_options(clock, 1);
  o.level_bits = chime::LevelBits::create({8});
  Runtime rt(o);
  rt.flush();
  clock.advance(300ms);  // the wheel does not advance: nothing is due, nobody flushes
  std::this_thread::sleep_for(5ms);
  ASSERT_NO_THROW(rt.schedule_after(0ms, rec.task(1))) << "a due of now refused by an idle wheel";
  ASSERT_NO_THROW(rt.schedule_after(200ms, rec.task(2))) << "a due 200 intervals ahead of the clock refused";
  EXPECT_THROW(rt.schedule_after(300ms, rec.task(3)), std::out_of_range) << "300 intervals ahead of the clock";
  rt.flush();
  EXPECT_EQ(rec.tags(), std::vector<int>{1});
  clock.advance(200ms + kPrecision);
  rt.flush();
  EXPECT_EQ(rec.tags(), (std::vector<int>{1, 2}));
  for (const RunRecord& r : rec.runs()) EXPECT_GE(r.clock_at_start, r.firing.due) << "ran early";
}

}  // namespace
