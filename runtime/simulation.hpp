// SPDX-License-Identifier: BSL-1.0
// runtime/simulation.hpp: chime::detail::Simulation, a test seam: a Runtime
// with no threads, whose wheel-thread passes the test runs itself.
//
// What it is: the deterministic simulation (docs/fuzzing.md), for the
// fuzz target fuzz/runtime_sim_fuzz.cpp and for tests. Not part of chime's
// public API (it lives in runtime/, not include/chime/), and it promises
// nothing beyond what the tests use.
//
// What it does: it constructs a Runtime (through the public constructor,
// with its options) that starts neither a wheel thread nor workers
// (workers must be 0: every callback runs inside a pass, on the calling
// thread, as the wheel thread runs them with workers = 0). The wheel
// thread's pass (runtime/wheel_thread.cpp, WheelThread::run_pass: apply the
// queued commands, read the clock and advance, dispatch, hand over, settle
// requests) is the very code the threaded runtime runs; only the loop around
// it (the sleep, the wake-up handshake) is replaced by the test's calls:
// - run_one_pass(): one pass now (of every shard, in shard order);
// - run_until_idle(): passes until one that had nothing to do;
// - the runtime's own blocking calls work: flush() and drain() run the
//   passes they wait for (and a flush on a lane's thread runs its lanes
//   between them, as the threaded flush does), shutdown() runs passes until
//   the stop is served, and a Lane's close is done at once, as from a
//   callback on the wheel thread (the thread that made the Simulation
//   counts as every shard's wheel thread);
// - lanes are run by the caller (Lane::run_ready), between passes.
// With a ManualClock, the same calls in the same order give the same runs:
// no thread, no wall-clock read decides anything (the steady clock is read
// only for run-time and lateness statistics and the slow-run hook).
//
// What it does not cover: memory orders and real races (a producer and the
// wheel thread at the same time, a cancel racing a claim, the wake-up
// handshake P1/P2, the sleep policy, a reschedule caught between R1 and R2,
// workers): nothing here runs concurrently. The threaded fuzz target
// (fuzz/runtime_fuzz.cpp), the stress tests under TSan and the SPIN model
// (docs/model-check.md) keep covering those.
//
// Thread: every call (and the Runtime's, its Producers', Lanes' and
// Timers') on the thread that made it; not from inside a callback. Not
// Lane::wait_and_run, which would wait for a pass nobody runs.
#pragma once

#include <cstddef>
#include <optional>

#include "chime/runtime.hpp"
#include "wheel_thread.hpp"

namespace chime::detail {

class RuntimeCore;
class Lanes;
struct Completion;
struct ThreadLanes;

class Simulation {
 public:
  // Throws what Runtime(options) throws, and std::invalid_argument if
  // options.workers != 0. May allocate.
  explicit Simulation(RuntimeOptions options);
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;
  // Shuts the runtime down (cancel_pending), running the passes that takes.
  ~Simulation() = default;

  Runtime& runtime() noexcept { return *runtime_; }

  // One pass of each shard's wheel thread (in shard order: a run replays
  // exactly) at the clock's current time. Returns true iff one did
  // something: applied commands or requests, dispatched runs, left work for
  // the next pass, or stopped (shutdown). After shutdown it does nothing and
  // returns false. May allocate.
  bool run_one_pass();
  // Passes until one returns false; returns how many passes did something.
  std::size_t run_until_idle();

  // What a simulated runtime (RuntimeCore::simulated) runs on the calling
  // thread. One pass of every shard, in shard order: true iff any did
  // something.
  static bool simulate_passes(const WheelThreads& shards);
  // Passes, and runs of the calling thread's `lanes`, until `done` is
  // signalled or every shard has stopped; throws std::logic_error if three
  // rounds in a row do nothing (a flush waits for runs nobody makes).
  static void simulate_until(Completion& done, const ThreadLanes& lanes, const WheelThreads& shards, Lanes& all_lanes);
  // Passes until every shard has stopped (shutdown).
  static void simulate_until_stopped(const WheelThreads& shards);

 private:
  std::optional<Runtime> runtime_;
  RuntimeCore* core_ = nullptr;
};

}  // namespace chime::detail
