// SPDX-License-Identifier: BSL-1.0
// Helpers shared by the chime::Runtime unit tests (tests/runtime_*_test.cpp).
//
// Every test drives the runtime with a ManualClock and flush(), so it is
// deterministic: time moves only when the test says so, and callbacks run only
// inside flush(), which runs every timer due at or before the clock's reading
// and returns once those runs have returned (design.md, "Clocks"). The clock
// starts at kStart (1000 s), not at 0, so that due times in the past are
// representable.
#pragma once

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chime_test {

using namespace std::chrono_literals;

inline constexpr chime::TimePoint kStart = chime::TimePoint{} + std::chrono::seconds(1000);
inline constexpr chime::Duration kPrecision = std::chrono::milliseconds(1);

// The time `d` after the start of the manual clock.
inline chime::TimePoint at(chime::Duration d) { return kStart + d; }

// Options for a runtime on `clock` with 1 ms precision.
inline chime::RuntimeOptions manual_options(chime::ManualClock& clock, unsigned workers) {
  chime::RuntimeOptions options;
  options.precision = kPrecision;
  options.workers = workers;
  options.clock = &clock;
  return options;
}

// A clock the test sets, which the runtime treats as any clock other than
// the steady one and a ManualClock: the interval rule and slack apply, and a
// timer may run between flushes once due by it, so a test checks only what a
// flush guarantees (what is due by the clock has run; nothing ran early).
class SettableClock final : public chime::Clock {
 public:
  explicit SettableClock(chime::TimePoint start) noexcept : now_ns_(start.time_since_epoch().count()) {}
  chime::TimePoint now() const noexcept override { return chime::TimePoint(chime::Duration(now_ns_.load())); }
  void set(chime::TimePoint t) noexcept { now_ns_.store(t.time_since_epoch().count()); }
  void advance(chime::Duration d) noexcept { now_ns_.fetch_add(d.count()); }

 private:
  std::atomic<std::int64_t> now_ns_;
};

// Options for a runtime on `clock` (not a ManualClock) with 1 ms precision.
inline chime::RuntimeOptions settable_options(SettableClock& clock, unsigned workers) {
  chime::RuntimeOptions options;
  options.precision = kPrecision;
  options.workers = workers;
  options.clock = &clock;
  return options;
}

// The same with the interval rule for every timer (RuntimeOptions::slack at
// the precision): a timer runs when its precision interval ends.
inline chime::RuntimeOptions interval_rule_options(SettableClock& clock, unsigned workers) {
  chime::RuntimeOptions options = settable_options(clock, workers);
  options.slack = options.precision;
  return options;
}

// Options for a runtime on the steady clock with 1 ms precision.
inline chime::RuntimeOptions steady_options(unsigned workers) {
  chime::RuntimeOptions options;
  options.precision = kPrecision;
  options.workers = workers;
  return options;
}

// Moves the clock to `t` and waits for the runtime to catch up: a flush at
// the clock's old reading first (what is due by then runs with that reading as
// fired_at), then one at `t`.
// Then checks the runtime's invariants (Runtime::check_invariants: every
// filed timer held once, none lost); a broken one throws, failing the test.
inline void advance_to(chime::ManualClock& clock, chime::Runtime& rt, chime::TimePoint t) {
  rt.flush();
  clock.set(t);
  rt.flush();
  rt.check_invariants();
}
// The same on a SettableClock.
inline void advance_to(SettableClock& clock, chime::Runtime& rt, chime::TimePoint t) {
  rt.flush();
  clock.set(t);
  rt.flush();
  rt.check_invariants();
}

// One callback run as seen from inside the callback.
struct RunRecord {
  chime::Firing firing;
  int tag = 0;
  std::thread::id thread;
  chime::TimePoint clock_at_start;  // the runtime clock read at the start of the callback
};

// Records every run of the tasks it makes; thread-safe.
class Recorder {
 public:
  explicit Recorder(const chime::Clock* clock = nullptr) : clock_(clock) {}

  // A task that records its runs under `tag` (16 bytes: stored inline).
  chime::Task task(int tag = 0) {
    return [this, tag](const chime::Firing& f) { record(f, tag); };
  }

  void record(const chime::Firing& f, int tag) {
    RunRecord run{f, tag, std::this_thread::get_id(), clock_ != nullptr ? clock_->now() : chime::TimePoint{}};
    std::lock_guard<std::mutex> lock(mu_);
    runs_.push_back(run);
  }

  std::vector<RunRecord> runs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }
  std::size_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_.size();
  }
  std::size_t count(int tag) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (const RunRecord& r : runs_) n += r.tag == tag ? 1 : 0;
    return n;
  }
  std::vector<int> tags() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (const RunRecord& r : runs_) out.push_back(r.tag);
    return out;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.clear();
  }

 private:
  const chime::Clock* clock_;
  mutable std::mutex mu_;
  std::vector<RunRecord> runs_;
};

// Milliseconds since kStart, for readable failure messages.
inline double ms_since_start(chime::TimePoint t) {
  return std::chrono::duration<double, std::milli>(t - kStart).count();
}

// A runtime on a ManualClock at kStart (1 ms precision) with a Recorder;
// parameterized by the number of workers (see workers_name).
class ManualRuntimeTest : public testing::TestWithParam<unsigned> {
 protected:
  chime::ManualClock clock{kStart};
  Recorder rec{&clock};
  chime::Runtime rt{manual_options(clock, GetParam())};  // after clock and rec: destroyed (joined) first
};

// Periodic options with the first run at `t`.
inline chime::PeriodicOptions first_at(chime::TimePoint t, chime::Missed missed = chime::Missed::skip) {
  chime::PeriodicOptions o;
  o.first_due = t;
  o.on_missed = missed;
  return o;
}

// A callback that blocks its thread until released, and says when it
// started and when it returned.
struct Gate {
  std::atomic<bool> started{false};
  std::atomic<bool> released{false};
  std::atomic<bool> returned{false};
  chime::Task blocker() {
    return [this] { block(); };
  }
  // The blocker's body, for callbacks that do more around it.
  void block() {
    started.store(true);
    started.notify_all();
    while (!released.load()) released.wait(false);
    returned.store(true);
  }
  void wait_started() {
    while (!started.load()) started.wait(false);
  }
  void release() {
    released.store(true);
    released.notify_all();
  }
};

// "workers0", "workers1", ... for parameterized test names.
inline std::string workers_name(const testing::TestParamInfo<unsigned>& info) {
  return "workers" + std::to_string(info.param);
}

}  // namespace chime_test
