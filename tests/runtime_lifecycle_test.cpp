// SPDX-License-Identifier: BSL-1.0
// chime::Runtime lifecycle and errors (runtime.hpp):
// construction errors; schedule errors in their documented order (StoppedError,
// then std::out_of_range, then CapacityError, periodic timers counted); flush()
// waiting for commands and callbacks; drain(); shutdown(cancel_pending /
// fire_pending), its return value and idempotence; the destructor;
// flush/drain/shutdown from inside a callback (std::logic_error); a throwing
// callback (counted, passed to on_error with its id, the runtime keeps running).
// Deterministic with ManualClock + flush(), except where a test needs a callback
// to be running while another thread acts (SteadyClock, bounded waits).

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace chime_test;
using chime::CapacityError;
using chime::Duration;
using chime::Firing;
using chime::ManualClock;
using chime::Runtime;
using chime::ShutdownMode;
using chime::StoppedError;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

static_assert(std::is_base_of_v<std::runtime_error, CapacityError>);
static_assert(std::is_base_of_v<std::runtime_error, StoppedError>);

// Options for a runtime whose wheel spans about 272 ms at 1 ms precision (level bits {4, 4}).
chime::RuntimeOptions small_range_options(ManualClock& clock, unsigned workers = 1) {
  chime::RuntimeOptions options = manual_options(clock, workers);
  options.level_bits = chime::LevelBits::create({4, 4});
  return options;
}

chime::Task noop() {
  return [] {};
}

// ---------------------------------------------------------------------------
// Errors

// A precision <= 0 is rejected at construction with std::invalid_argument.
TEST(RuntimeLifecycle, nonpositive_precision_throws_invalid_argument) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.precision = Duration::zero();
  EXPECT_THROW(Runtime{options}, std::invalid_argument);
  options.precision = -1ms;
  EXPECT_THROW(Runtime{options}, std::invalid_argument);
}

// A due time beyond the wheel's range throws std::out_of_range whose message names it; nothing is scheduled.
TEST(RuntimeLifecycle, due_beyond_range_throws_out_of_range) {
  ManualClock clock{kStart};
  Runtime rt{small_range_options(clock)};
  EXPECT_NO_THROW(rt.schedule_at(at(200ms), noop()));
  try {
    rt.schedule_at(at(10s), noop());
    ADD_FAILURE() << "schedule_at 10 s ahead of a ~272 ms wheel did not throw";
  } catch (const std::out_of_range& e) {
    const std::string due_ns = std::to_string(at(10s).time_since_epoch().count());
    EXPECT_NE(std::string(e.what()).find(due_ns), std::string::npos) << "the message does not name the due time ("
                                                                      << due_ns << " ns): " << e.what();
  }
  EXPECT_THROW(rt.schedule_after(10s, noop()), std::out_of_range);
  EXPECT_THROW(rt.producer().schedule_at(at(10s), noop()), std::out_of_range);
  rt.flush();
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.scheduled, 1u);
  EXPECT_EQ(s.pending, 1u);
}

// The range moves with the wheel: a due time out of range at the start is accepted once the clock is closer.
TEST(RuntimeLifecycle, range_moves_with_the_clock) {
  ManualClock clock{kStart};
  Runtime rt{small_range_options(clock)};
  EXPECT_THROW(rt.schedule_at(at(1200ms), noop()), std::out_of_range);
  advance_to(clock, rt, at(1000ms));
  EXPECT_NO_THROW(rt.schedule_at(at(1200ms), noop()));
}

// After shutdown, schedule_* throws StoppedError, checked before the range (so even for an out-of-range due).
TEST(RuntimeLifecycle, schedule_after_shutdown_throws_stopped_even_beyond_range) {
  ManualClock clock{kStart};
  Runtime rt{small_range_options(clock)};
  chime::Producer p = rt.producer();
  rt.shutdown();
  EXPECT_THROW(rt.schedule_at(at(1ms), noop()), StoppedError);
  EXPECT_THROW(rt.schedule_at(at(10s), noop()), StoppedError);
  EXPECT_THROW(rt.schedule_after(10s, noop()), StoppedError);
  EXPECT_THROW(rt.schedule_every(1ms, noop()), StoppedError);
  EXPECT_THROW(p.schedule_at(at(10s), noop()), StoppedError);
  EXPECT_THROW(p.schedule_every(1ms, noop()), StoppedError);
}

// Over max_pending, schedule throws CapacityError; nothing is scheduled by the failed call.
TEST(RuntimeLifecycle, over_max_pending_throws_capacity_error) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.max_pending = 3;
  Recorder rec;
  Runtime rt{options};
  for (int i = 0; i < 3; ++i) rt.schedule_at(at(10ms), rec.task(i));
  try {
    rt.schedule_at(at(10ms), rec.task(3));
    ADD_FAILURE() << "a fourth timer over max_pending = 3 did not throw";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find('3'), std::string::npos) << "the message does not name max_pending: " << e.what();
  }
  EXPECT_THROW(rt.schedule_after(1ms, rec.task(3)), CapacityError);
  EXPECT_THROW(rt.schedule_every(1ms, rec.task(3)), CapacityError);
  advance_to(clock, rt, at(11ms));
  EXPECT_EQ(rec.count(), 3u);
  EXPECT_EQ(rec.count(3), 0u);
  EXPECT_EQ(rt.stats().scheduled, 3u);
}

// Periodic timers count against max_pending for as long as they live (across their runs).
TEST(RuntimeLifecycle, periodic_timers_count_against_max_pending) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.max_pending = 2;
  Runtime rt{options};
  const TimerId every = rt.schedule_every(5ms, noop());
  rt.schedule_at(at(100ms), noop());
  EXPECT_THROW(rt.schedule_at(at(1ms), noop()), CapacityError);
  advance_to(clock, rt, at(20ms));  // the periodic timer has run several times: still pending
  EXPECT_THROW(rt.schedule_at(at(30ms), noop()), CapacityError);
  EXPECT_TRUE(rt.cancel(every));
  rt.flush();
  EXPECT_NO_THROW(rt.schedule_at(at(30ms), noop()));
}

// A timer stops counting against max_pending once it fired or was cancelled.
TEST(RuntimeLifecycle, fired_and_cancelled_timers_free_capacity) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.max_pending = 2;
  Runtime rt{options};
  const TimerId a = rt.schedule_at(at(1ms), noop());
  const TimerId b = rt.schedule_at(at(50ms), noop());
  EXPECT_THROW(rt.schedule_at(at(1ms), noop()), CapacityError);
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rt.state(a), TimerState::fired);
  EXPECT_NO_THROW(rt.schedule_at(at(60ms), noop()));
  EXPECT_THROW(rt.schedule_at(at(60ms), noop()), CapacityError);
  EXPECT_TRUE(rt.cancel(b));
  rt.flush();
  EXPECT_NO_THROW(rt.schedule_at(at(60ms), noop()));
}

// A cancel that returned true frees its capacity and leaves stats().pending at once, without waiting for the
// wheel thread to free the slot (no flush in between; the wheel thread sleeps until a timer 30 s away).
TEST(RuntimeLifecycle, cancel_frees_capacity_at_once) {
  for (const unsigned workers : {0u, 1u}) {
    ManualClock clock{kStart};
    chime::RuntimeOptions options = manual_options(clock, workers);
    options.max_pending = 2;
    Runtime rt{options};
    const TimerId a = rt.schedule_at(at(30s), noop());
    const TimerId b = rt.schedule_every(1s, noop());
    rt.flush();  // both filed; the wheel thread sleeps
    EXPECT_THROW(rt.schedule_at(at(30s), noop()), CapacityError);
    EXPECT_TRUE(rt.cancel(a));
    EXPECT_EQ(rt.stats().pending, 1u);
    const TimerId c = rt.schedule_at(at(30s), noop());
    EXPECT_THROW(rt.schedule_at(at(30s), noop()), CapacityError);
    EXPECT_TRUE(rt.cancel(b));  // a periodic timer too
    EXPECT_NO_THROW(rt.schedule_at(at(30s), noop()));
    EXPECT_EQ(rt.stats().pending, 2u);
    EXPECT_EQ(rt.state(c), TimerState::pending);
  }
}

// The range is checked before the capacity: a full runtime reports an out-of-range due as std::out_of_range.
TEST(RuntimeLifecycle, out_of_range_is_checked_before_capacity) {
  ManualClock clock{kStart};
  chime::RuntimeOptions options = small_range_options(clock);
  options.max_pending = 1;
  Runtime rt{options};
  rt.schedule_at(at(10ms), noop());
  EXPECT_THROW(rt.schedule_at(at(10s), noop()), std::out_of_range);
  EXPECT_THROW(rt.schedule_at(at(10ms), noop()), CapacityError);
}

// ---------------------------------------------------------------------------
// flush

// flush() on an idle runtime returns, repeatedly.
TEST(RuntimeLifecycle, flush_on_idle_runtime_returns) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 2)};
  for (int i = 0; i < 100; ++i) rt.flush();
}

// flush() waits for a callback that takes a while (real sleep) before returning.
TEST(RuntimeLifecycle, flush_waits_for_slow_callbacks) {
  for (unsigned workers : {0u, 1u, 2u}) {
    ManualClock clock{kStart};
    Runtime rt{manual_options(clock, workers)};
    std::atomic<int> done{0};
    for (int i = 0; i < 3; ++i) {
      rt.schedule_at(at(1ms), [&] {
        std::this_thread::sleep_for(30ms);
        done.fetch_add(1);
      });
    }
    advance_to(clock, rt, at(2ms));
    EXPECT_EQ(done.load(), 3) << "workers " << workers;
  }
}

// flush() applies commands other threads posted before it was called.
TEST(RuntimeLifecycle, flush_applies_commands_posted_by_other_threads) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) rt.schedule_at(at(1ms), rec.task(t));
    });
  }
  for (auto& th : threads) th.join();
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rec.count(), 300u);
}

// flush(), drain() and shutdown() from inside a callback throw std::logic_error; the runtime keeps working.
TEST(RuntimeLifecycle, flush_drain_shutdown_inside_callback_throw_logic_error) {
  for (unsigned workers : {0u, 1u, 2u}) {
    ManualClock clock{kStart};
    Runtime rt{manual_options(clock, workers)};
    std::atomic<int> logic_errors{0};
    std::atomic<int> other{0};
    auto expect_logic_error = [&](auto&& call) {
      try {
        call();
      } catch (const std::logic_error&) {
        logic_errors.fetch_add(1);
        return;
      } catch (...) {
      }
      other.fetch_add(1);
    };
    rt.schedule_at(at(1ms), [&] { expect_logic_error([&] { rt.flush(); }); });
    rt.schedule_at(at(1ms), [&] { expect_logic_error([&] { rt.drain(); }); });
    rt.schedule_at(at(1ms), [&] { expect_logic_error([&] { rt.shutdown(); }); });
    rt.schedule_at(at(1ms), [&] { expect_logic_error([&] { rt.shutdown(ShutdownMode::fire_pending); }); });
    advance_to(clock, rt, at(2ms));
    EXPECT_EQ(logic_errors.load(), 4) << "workers " << workers;
    EXPECT_EQ(other.load(), 0) << "workers " << workers;
    std::atomic<bool> later{false};
    EXPECT_NO_THROW(rt.schedule_at(at(3ms), [&] { later.store(true); })) << "workers " << workers;
    advance_to(clock, rt, at(4ms));
    EXPECT_TRUE(later.load()) << "workers " << workers;
  }
}

// ---------------------------------------------------------------------------
// drain

// drain() fires every pending timer now (before its due), returns the count; periodic timers keep their schedule.
TEST(RuntimeLifecycle, drain_fires_all_pending_now_and_returns_count) {
  for (unsigned workers : {0u, 1u, 2u}) {
    ManualClock clock{kStart};
    Recorder rec{&clock};
    Runtime rt{manual_options(clock, workers)};
    const TimerId a = rt.schedule_at(at(10ms), rec.task(1));
    rt.schedule_at(at(20ms), rec.task(2));
    rt.schedule_at(at(30ms), rec.task(3));
    const TimerId c = rt.schedule_at(at(40ms), rec.task(4));
    rt.schedule_every(10ms, rec.task(5));  // due 10, 20, ...
    EXPECT_TRUE(rt.cancel(c));
    rt.flush();
    EXPECT_EQ(rt.drain(), 4u) << "workers " << workers;
    rt.flush();
    ASSERT_EQ(rec.count(), 4u) << "workers " << workers;
    for (const RunRecord& r : rec.runs()) {
      EXPECT_LT(r.clock_at_start, r.firing.due) << "drained runs run before their due time";
      EXPECT_EQ(r.firing.fired_at, kStart);
    }
    EXPECT_EQ(rt.state(a), TimerState::fired);
    // The periodic timer kept its schedule: its run due at 10 ms still comes, at the flush at 10 ms; the
    // one-shots do not.
    advance_to(clock, rt, at(9ms));
    EXPECT_EQ(rec.count(), 4u);
    advance_to(clock, rt, at(10ms));
    EXPECT_EQ(rec.count(5), 2u) << "workers " << workers;
    advance_to(clock, rt, at(100ms));
    EXPECT_EQ(rec.count(1), 1u);
    EXPECT_EQ(rec.count(2), 1u);
    EXPECT_EQ(rec.count(3), 1u);
    EXPECT_EQ(rec.count(4), 0u);
  }
}

// drain() covers timers whose schedule command was posted but not yet applied.
TEST(RuntimeLifecycle, drain_includes_timers_not_yet_applied) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  for (int i = 0; i < 10; ++i) rt.schedule_at(at(50ms), rec.task(i));
  EXPECT_EQ(rt.drain(), 10u);
  rt.flush();
  EXPECT_EQ(rec.count(), 10u);
}

// drain() with nothing pending returns 0.
TEST(RuntimeLifecycle, drain_with_nothing_pending_returns_zero) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  EXPECT_EQ(rt.drain(), 0u);
  rt.schedule_at(at(1ms), noop());
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rt.drain(), 0u);
}

// Drained runs are left out of the lateness histogram (they would count as negative lateness).
TEST(RuntimeLifecycle, drained_runs_are_excluded_from_lateness) {
  ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  for (int i = 0; i < 9; ++i) rt.schedule_at(at(500ms), noop());
  EXPECT_EQ(rt.drain(), 9u);
  rt.flush();
  rt.schedule_at(at(10ms), noop());
  advance_to(clock, rt, at(15ms));  // one run 5 ms late
  const chime::Stats s = rt.stats();
  EXPECT_GT(s.lateness.p50, Duration::zero()) << "drained runs (499 ms early) dominate the lateness median";
  EXPECT_GE(s.lateness.max, 4ms);
  EXPECT_LE(s.lateness.max, 6ms);
}

// ---------------------------------------------------------------------------
// shutdown and the destructor

// shutdown(cancel_pending) runs nothing, returns the number of pending timers, and marks them cancelled.
TEST(RuntimeLifecycle, cancel_pending_returns_pending_count_and_runs_nothing) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 2)};
  const TimerId fired = rt.schedule_at(at(1ms), rec.task(1));
  advance_to(clock, rt, at(2ms));
  const TimerId cancelled = rt.schedule_at(at(10ms), rec.task(2));
  EXPECT_TRUE(rt.cancel(cancelled));
  std::vector<TimerId> pending;
  for (int i = 0; i < 5; ++i) pending.push_back(rt.schedule_at(at(10ms), rec.task(3)));
  pending.push_back(rt.schedule_every(5ms, rec.task(4)));
  EXPECT_EQ(rt.shutdown(ShutdownMode::cancel_pending), 6u);
  EXPECT_EQ(rec.count(), 1u);
  for (const TimerId& id : pending) {
    EXPECT_EQ(rt.state(id), TimerState::cancelled);
    EXPECT_FALSE(rt.cancel(id));
  }
  const TimerState fired_state = rt.state(fired);  // unknown once a later timer reused its slot
  EXPECT_TRUE(fired_state == TimerState::fired || fired_state == TimerState::unknown);
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.cancelled, 7u);
  EXPECT_EQ(s.pending, 0u);
}

// shutdown() defaults to cancel_pending.
TEST(RuntimeLifecycle, default_mode_is_cancel_pending) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  rt.schedule_at(at(10ms), rec.task());
  rt.schedule_at(at(20ms), rec.task());
  EXPECT_EQ(rt.shutdown(), 2u);
  EXPECT_EQ(rec.count(), 0u);
}

// shutdown(fire_pending) runs every pending timer (before its due) before returning, and returns 0.
TEST(RuntimeLifecycle, fire_pending_runs_pending_before_returning) {
  for (unsigned workers : {0u, 1u, 2u}) {
    ManualClock clock{kStart};
    Recorder rec;
    Runtime rt{manual_options(clock, workers)};
    std::vector<TimerId> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(rt.schedule_at(at(100ms + i * 1ms), rec.task(1)));
    ids.push_back(rt.schedule_every(7ms, rec.task(2)));
    EXPECT_EQ(rt.shutdown(ShutdownMode::fire_pending), 0u) << "workers " << workers;
    EXPECT_EQ(rec.count(1), 5u) << "workers " << workers;
    EXPECT_EQ(rec.count(2), 1u) << "workers " << workers << ": a periodic timer runs once at shutdown";
    for (int i = 0; i < 5; ++i) EXPECT_EQ(rt.state(ids[i]), TimerState::fired);
    EXPECT_EQ(rt.stats().pending, 0u);
  }
}

// A second shutdown (either mode) does nothing and returns 0; schedule still throws StoppedError.
TEST(RuntimeLifecycle, second_shutdown_is_a_noop_returning_zero) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  rt.schedule_at(at(10ms), rec.task());
  EXPECT_EQ(rt.shutdown(ShutdownMode::cancel_pending), 1u);
  EXPECT_EQ(rt.shutdown(ShutdownMode::cancel_pending), 0u);
  EXPECT_EQ(rt.shutdown(ShutdownMode::fire_pending), 0u);
  EXPECT_EQ(rec.count(), 0u);
  EXPECT_THROW(rt.schedule_at(at(20ms), rec.task()), StoppedError);
}

// shutdown() waits for a callback that is running when it is called.
TEST(RuntimeLifecycle, shutdown_waits_for_running_callback) {
  Runtime rt{steady_options(2)};
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  rt.schedule_after(1ms, [&] {
    started.store(true);
    std::this_thread::sleep_for(50ms);
    finished.store(true);
  });
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!started.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(started.load());
  rt.shutdown();
  EXPECT_TRUE(finished.load()) << "shutdown returned while a callback was still running";
}

// The destructor shuts down with cancel_pending: pending callbacks never run and their Tasks are released.
TEST(RuntimeLifecycle, destructor_cancels_pending_timers) {
  ManualClock clock{kStart};
  auto resource = std::make_shared<int>(0);
  std::atomic<int> runs{0};
  {
    Runtime rt{manual_options(clock, 2)};
    for (int i = 0; i < 10; ++i) rt.schedule_at(at(10ms), [resource, &runs] { runs.fetch_add(1); });
    rt.schedule_every(1ms, [resource, &runs] { runs.fetch_add(1); });
    rt.flush();
  }
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(resource.use_count(), 1);
}

// Destroying a runtime after an explicit shutdown is fine, as is destroying one that never scheduled anything.
TEST(RuntimeLifecycle, destructor_after_shutdown_and_on_idle_runtime) {
  ManualClock clock{kStart};
  { Runtime rt{manual_options(clock, 2)}; }
  {
    Runtime rt{manual_options(clock, 0)};
    rt.shutdown();
  }
  { Runtime rt; }
  SUCCEED();
}

// ---------------------------------------------------------------------------
// Callback errors

struct ErrorLog {
  std::mutex mu;
  std::vector<std::pair<TimerId, std::string>> entries;
  std::vector<std::thread::id> threads;
};

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (int i) {
    return "int " + std::to_string(i);
  } catch (...) {
    return "unknown";
  }
}

// A throwing callback is caught on its worker, counted in callback_errors, passed to on_error with its
// TimerId (by the time flush returns), and the runtime keeps running.
TEST(RuntimeLifecycle, throwing_callback_goes_to_on_error_and_runtime_keeps_running) {
  for (unsigned workers : {0u, 1u, 2u}) {
    ManualClock clock{kStart};
    ErrorLog log;
    chime::RuntimeOptions options = manual_options(clock, workers);
    options.on_error = [&log](TimerId id, std::exception_ptr e) {
      std::lock_guard<std::mutex> lock(log.mu);
      log.entries.emplace_back(id, describe(e));
      log.threads.push_back(std::this_thread::get_id());
    };
    Recorder rec;
    Runtime rt{options};
    const TimerId bad = rt.schedule_at(at(1ms), [] { throw std::runtime_error("boom"); });
    const TimerId odd = rt.schedule_at(at(1ms), [] { throw 42; });
    rt.schedule_at(at(1ms), rec.task(1));
    advance_to(clock, rt, at(2ms));
    {
      std::lock_guard<std::mutex> lock(log.mu);
      ASSERT_EQ(log.entries.size(), 2u) << "workers " << workers;
      for (const auto& [id, what] : log.entries) {
        if (id == bad) {
          EXPECT_EQ(what, "boom");
        } else {
          EXPECT_EQ(id, odd);
          EXPECT_EQ(what, "int 42");
        }
      }
      for (const auto& t : log.threads) EXPECT_NE(t, std::this_thread::get_id());
    }
    EXPECT_EQ(rt.stats().callback_errors, 2u) << "workers " << workers;
    EXPECT_EQ(rec.count(1), 1u);
    rt.schedule_at(at(3ms), rec.task(2));
    advance_to(clock, rt, at(4ms));
    EXPECT_EQ(rec.count(2), 1u) << "workers " << workers << ": the runtime stopped after a callback threw";
  }
}

// Without an on_error hook a throwing callback is still caught and counted; nothing else is disturbed.
TEST(RuntimeLifecycle, throwing_callback_without_on_error_is_counted) {
  ManualClock clock{kStart};
  Recorder rec;
  Runtime rt{manual_options(clock, 1)};
  for (int i = 0; i < 10; ++i) rt.schedule_at(at(1ms), [] { throw std::logic_error("nope"); });
  rt.schedule_at(at(1ms), rec.task());
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(rt.stats().callback_errors, 10u);
  EXPECT_EQ(rec.count(), 1u);
}

}  // namespace
