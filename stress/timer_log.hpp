// SPDX-License-Identifier: BSL-1.0
// stress/timer_log.hpp: what one one-shot timer of a stress test saw
// (TimerLog: its id, its runs, its winning cancels, what its callback read),
// what one periodic timer saw (PeriodicTimerLog: its runs and whether they
// overlapped), and the tally of a set of one-shots against the usual
// outcomes (Outcomes): each
// timer ran XOR had a winning cancel, neither happened twice, no run was
// early, each run saw its own id and its last due. The tally only counts;
// each test asserts on the counts it needs, with its own messages.
#pragma once

#include <chime/runtime.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "stress_support.hpp"

namespace stress_support {

// One one-shot timer, as the test's threads saw it: written by the thread
// that schedules it, the threads that cancel or reschedule it and its
// callback; read once the runtime is idle (the flush that found it idle
// orders every callback before the reads, so relaxed stores are enough). A
// test that records more derives from it.
struct TimerLog {
  std::atomic<std::uint64_t> id{0};        // packed TimerId (pack()), stored once scheduled; 0: not (yet)
  std::atomic<std::int64_t> due{0};        // the due the test checks runs against (its last successful one)
  std::atomic<int> runs{0};                // callback runs
  std::atomic<int> cancels_won{0};         // cancel() calls that returned true
  std::atomic<int> early{0};               // runs whose callback read the clock before the due it checks
  std::atomic<std::int64_t> fired_now{0};  // the runtime clock, read first thing by the last run
  std::atomic<std::int64_t> fired_due{0};  // Firing::due seen by the last run
  std::atomic<std::uint64_t> fired_id{0};  // Firing::id seen by the last run (packed)

  // What a callback records of its run: `now` is the runtime clock read
  // first thing in the callback. A run is early if `now` is before
  // Firing::due.
  void record_run(chime::TimePoint now, const chime::Firing& f) noexcept {
    if (now < f.due) early.fetch_add(1, std::memory_order_relaxed);
    fired_now.store(ns(now), std::memory_order_relaxed);
    fired_due.store(ns(f.due), std::memory_order_relaxed);
    fired_id.store(pack(f.id), std::memory_order_relaxed);
    runs.fetch_add(1, std::memory_order_relaxed);
  }
};

// One periodic timer: how many runs began, and how many began while
// another run of it was in flight (its runs must never overlap). Its
// callback brackets each run with run_begins() and run_ends(). Read once
// the runtime is idle, as TimerLog. A test that records more derives from
// it.
struct PeriodicTimerLog {
  std::atomic<bool> in_flight{false};
  std::atomic<int> overlaps{0};
  std::atomic<std::uint64_t> runs{0};

  void run_begins() noexcept {
    // acq_rel: pairs with run_ends' release of the run before, so an
    // overlap is a run that began before the last one ended.
    if (in_flight.exchange(true, std::memory_order_acq_rel)) overlaps.fetch_add(1, std::memory_order_relaxed);
    runs.fetch_add(1, std::memory_order_relaxed);
  }
  void run_ends() noexcept { in_flight.store(false, std::memory_order_release); }
};

// The tally of TimerLogs, one add() each. The last three look only at
// timers that ran, and at their last run (a timer that ran twice is counted
// in ran_twice); wrong_due means something only where the test keeps
// TimerLog::due.
struct Outcomes {
  std::size_t timers = 0;       // logs added
  std::size_t unpublished = 0;  // logs whose id is 0
  std::size_t runs = 0;         // runs, summed
  std::size_t cancels_won = 0;  // winning cancels, summed
  std::size_t ran = 0;          // timers that ran at least once
  std::size_t cancelled = 0;    // timers with at least one winning cancel
  std::size_t both = 0;         // timers that ran although a cancel won
  std::size_t neither = 0;      // timers that neither ran nor had a winning cancel: lost
  std::size_t ran_twice = 0;    // timers that ran more than once
  std::size_t twice = 0;        // timers that ran more than once or had more than one winning cancel
  std::size_t early_runs = 0;   // TimerLog::early, summed
  std::size_t fired_early = 0;  // timers whose last run read the clock before its Firing::due
  std::size_t wrong_due = 0;    // timers whose last run saw a Firing::due other than TimerLog::due
  std::size_t wrong_id = 0;     // timers whose last run saw a Firing::id other than TimerLog::id

  void add(const TimerLog& log) noexcept {
    const std::uint64_t id = log.id.load();
    const int r = log.runs.load();
    const int c = log.cancels_won.load();
    ++timers;
    if (id == 0) ++unpublished;
    runs += static_cast<std::size_t>(r);
    cancels_won += static_cast<std::size_t>(c);
    if (r > 0) ++ran;
    if (c > 0) ++cancelled;
    if (r > 0 && c > 0) ++both;
    if (r == 0 && c == 0) ++neither;
    if (r > 1) ++ran_twice;
    if (r > 1 || c > 1) ++twice;
    early_runs += static_cast<std::size_t>(log.early.load());
    if (r > 0) {
      if (log.fired_now.load() < log.fired_due.load()) ++fired_early;
      if (log.fired_due.load() != log.due.load()) ++wrong_due;
      if (log.fired_id.load() != id) ++wrong_id;
    }
  }
};

// The tally of every log of a range (a vector of TimerLog or of a type
// derived from it).
template <class Logs>
Outcomes tally(const Logs& logs) {
  Outcomes o;
  for (const TimerLog& log : logs) o.add(log);
  return o;
}

}  // namespace stress_support
