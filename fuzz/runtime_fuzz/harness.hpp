// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/harness.hpp: the runtime fuzz target's shared parts:
// the model's types (one MTimer per timer, one Run per callback run), the
// callbacks' actions, and class RuntimeFuzz, the harness: its state (the
// runtime under test, the model, what callbacks recorded) and its member
// functions, declared here by operation family and defined one family per
// file of this folder (fuzz/runtime_fuzz.cpp includes them all once, and
// holds the configuration, the operation table and the entry point).
// What the target checks and how the model works: fuzz/runtime_fuzz.cpp's
// header comment and docs/fuzzing.md.
#pragma once

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_input.hpp"
#include "simulation.hpp"  // runtime/: the deterministic simulation (a test seam)

namespace chime_fuzz::runtime_target {

using chime::CancelResult;
using chime::Duration;
using chime::Missed;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;
using chime_fuzz::Input;

__extension__ typedef __int128 i128;

constexpr int kMaxOps = 256;
constexpr std::uint64_t kMaxRuns = 4096;  // callback runs per input, catch-up runs included
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr i128 kMaxRepresentableKey = (i128{1} << 61) - 1;

inline std::int64_t clamp64(i128 v) {
  if (v > kI64Max) return kI64Max;
  if (v < kI64Min) return kI64Min;
  return static_cast<std::int64_t>(v);
}
inline i128 floor_div(i128 a, i128 b) {
  const i128 q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline TimePoint T(std::int64_t ns) { return TimePoint{Duration{ns}}; }
inline std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

inline const char* state_name(TimerState s) {
  switch (s) {
    case TimerState::pending: return "pending";
    case TimerState::running: return "running";
    case TimerState::fired: return "fired";
    case TimerState::cancelled: return "cancelled";
    default: return "unknown";
  }
}
inline unsigned bit(TimerState s) { return 1u << static_cast<unsigned>(s); }
inline const char* result_name(CancelResult r) {
  switch (r) {
    case CancelResult::cancelled: return "cancelled";
    case CancelResult::running: return "running";
    case CancelResult::done: return "done";
    default: return "unknown";
  }
}
inline unsigned bit(CancelResult r) { return 1u << static_cast<unsigned>(r); }

inline const std::vector<std::vector<int>>& bit_sets() {
  static const std::vector<std::vector<int>> sets = {{1}, {2, 1, 3}, {4, 4}, {8, 8, 8}, {11, 10, 10, 10, 10, 10}, {3, 1}};
  return sets;
}
constexpr std::int64_t kPrecisions[] = {1, 3, 1000, 1000000};

// What a callback does besides recording its run.
enum class Action : std::uint8_t {
  record,         // nothing else
  throw_std,      // throws std::runtime_error: on_error must see it
  throw_other,    // throws an int
  try_blocking,   // flush, drain, shutdown: each must throw std::logic_error
  cancel_self,    // periodic: true, and no later run; one-shot: false (it is running); state(self) stays running
  reschedule_self, // false: it is running, not pending
  try_cancel_self, // `running` (periodic: and no later run); a second cancel is false; state(self) stays running
  wait_self,       // cancel_and_wait(self): `running` at once, without waiting for itself (periodic: no later run)
  slow             // sleeps 1 ms (at most kMaxSlowRuns times per input): a run the harness can find in progress
};
constexpr int kNumActions = 9;
constexpr int kMaxSlowRuns = 8;

// One callback run, as seen from inside the callback (on the wheel thread).
struct Run {
  std::size_t tag = 0;
  chime::Firing firing;
  std::int64_t clock_at_start = 0;
  TimerState state_inside = TimerState::unknown;
  bool draining = false;  // drain() or shutdown(fire_pending) was in progress
  bool blocking_refused = true;
  bool self_result = false;
  CancelResult self_cancel = CancelResult::unknown;  // try_cancel_self, wait_self
  TimerState state_after = TimerState::running;      // state(self) after cancelling itself
};

// The model of one timer.
struct MTimer {
  TimerId id;
  bool periodic = false;
  Missed on_missed = Missed::skip;
  std::int64_t period = 0;
  std::int64_t due = 0;  // one-shot: its due time; periodic: its next run's due time
  Action action = Action::record;
  // Pending: it has not run (on a ManualClock nothing runs between calls; a flush runs it once its due
  // is at or before the flush's reading).
  enum class St { pending, fired, cancelled } st = St::pending;
  std::uint64_t terminal_sched = 0;  // schedules counted when its slot could first have been freed
  bool settled = false;           // terminal and its slot certainly freed (a flush or drain since)
  std::uint64_t runs = 0;
};

class RuntimeFuzz;

// The callback: 16 bytes (stored inline) or, with `big`, 80 bytes (on the heap).
struct Callback {
  RuntimeFuzz* h;
  std::size_t tag;
  void operator()(const chime::Firing& f) const;
};
struct BigCallback {
  Callback inner;
  std::array<std::uint64_t, 8> padding{};
  void operator()(const chime::Firing& f) const { inner(f); }
};

class RuntimeFuzz {
 public:
  // Decodes the configuration and starts the runtime (runtime_fuzz/setup.hpp): threaded, or with
  // `simulated` the deterministic simulation (runtime/simulation.hpp), whose passes the operations run.
  explicit RuntimeFuzz(Input& in, bool simulated = false);

  ~RuntimeFuzz() {
    lane_.reset();  // a Lane must not outlive its Runtime
    producer_.reset();
    rt_ = nullptr;
    threaded_rt_.reset();
    sim_rt_.reset();
  }

  // Runs the operations, then shutdown and the checks after it.
  void run();
  // The callback of timer `tag`, on the wheel thread or a worker (runtime_fuzz/runs.hpp).
  void on_run(std::size_t tag, const chime::Firing& f);

 private:
  // ---- configuration and model arithmetic ---------------------------------

  i128 key(i128 t) const { return floor_div(t - start_, p_); }
  i128 interval_start(i128 t) const { return start_ + key(t) * p_; }  // the wheel's grid: due times on and off it
  // The horizon: the wheel advances into interval H = min(K_max, 2^61 - 1) - 1 and no further, whatever
  // the clock (runtime.cpp, horizon_key); runs due from start(H) on never happen.
  i128 horizon_key() const { return std::min<i128>(kMaxRepresentableKey, k_max_) - 1; }
  i128 max_wheel_now() const { return start_ + horizon_key() * p_; }
  // The reading a flush at clock c runs timers to (each run's fired_at): c, clamped as above.
  i128 wheel_at(i128 c) const { return std::min(c, max_wheel_now()); }
  // Due times below this are accepted, at or above it refused with std::out_of_range: 2^num_bits - 1
  // intervals past the wheel's or the clock's time, whichever is later (a wheel no pass has advanced yet
  // leaves the clock ahead: the simulation's clock moves), at most the horizon's start (producer_ops.cpp,
  // check_due_in_range, due_limit_for).
  i128 limit() const {
    const i128 k = std::min<i128>(key(std::max<i128>(wheel_now_, c_)) + ((i128{1} << num_bits_) - 1), horizon_key());
    return start_ + k * p_;
  }

  static const char* missed_name(Missed m) {
    return m == Missed::catch_up ? "catch_up" : m == Missed::delay ? "delay" : "skip";
  }

  // One operation: the op byte picks it (runtime_fuzz.cpp).
  void step(std::uint8_t op);

  enum class Via { runtime, producer, lane };
  enum class Outcome { accepted, stopped, out_of_range, capacity, invalid };

  // An id to operate on: a model timer's (most of the time), the default id, or a forged one.
  struct Target {
    std::optional<std::size_t> index;
    TimerId id;
  };
  // ---- the model: what may and must have run, what an answer may be (runtime_fuzz/model.hpp)
  i128 catch_up_runs(i128 due, i128 period, i128 c) const;
  i128 runs_at(i128 c) const;
  void live_bounds(std::size_t& definite, std::size_t& possible) const;
  unsigned allowed_cancel_results(const MTimer& t) const;
  void mark_cancelled(MTimer& t);

  // ---- what the input bytes mean: the configuration, due times, delays, periods, clocks, targets and forged ids
  //      (runtime_fuzz/decode.hpp)
  std::int64_t pick_start();
  std::optional<std::size_t> pick_timer();
  i128 pick_due();
  i128 pick_delay();
  i128 pick_period();
  Action pick_action();
  i128 pick_clock();
  Target pick_target();
  TimerId forged_id();
  std::optional<TimerId> other_runtime_id();

  // ---- schedule_at, schedule_after, schedule_every and the checks of their outcome (runtime_fuzz/schedule_ops.hpp)
  chime::Task make_task(std::size_t tag, bool big);
  const char* outcome_name(Outcome o);
  template <class F>
  Outcome attempt(F&& f, TimerId& id);
  void schedule_outcome(const char* what, Outcome got, TimerId id, i128 due, bool periodic, Missed on_missed,
                        i128 period, Action action, std::size_t tag, bool period_invalid);
  std::size_t reserve_tag(Action action);
  void release_tag();
  void op_schedule_at();
  void op_schedule_after();
  void op_schedule_every();

  // ---- cancel, try_cancel, cancel_and_wait and reschedule (runtime_fuzz/cancel_ops.hpp)
  void op_cancel();
  void op_try_cancel(const Target& tg, Via via, bool wait);
  void op_reschedule(bool after);

  // ---- the clock, flush, drain and shutdown, and what must hold after each (runtime_fuzz/flush_ops.hpp)
  void op_advance_and_flush();
  void op_flush(const char* why);
  void op_drain();
  void op_shutdown(chime::ShutdownMode mode);
  void flush_first(const char* what);  // the flush drain() and shutdown(fire_pending) begin with
  void after_shutdown_checks();

  // ---- state, forged ids and stats (runtime_fuzz/observe_ops.hpp)
  void op_state();
  void op_forged_id();
  void op_stats();
  void check_stats_exact();
  void check_run_time(const chime::Stats& s);
  void check_stats_final();

  // ---- the simulation's own operations: a pass, passes until idle, a clock move without a flush, a
  //      lane's run_ready (runtime_fuzz/sim_ops.hpp; fuzz/runtime_sim_fuzz.cpp's table)
  void start_runtime(const chime::RuntimeOptions& o);  // runtime_fuzz/setup.hpp
  void op_pass(bool until_idle);
  void op_move_clock();
  void op_run_ready();
  void check_after_pass();

  // ---- the callback (on the wheel thread or a worker) and the check of every run against the model
  //      (runtime_fuzz/runs.hpp)
  void process_runs();
  void check_run(const Run& r);

  Input& in_;
  std::int64_t p_ = 1;
  std::vector<int> bits_v_;
  int num_bits_ = 0;
  std::int64_t start_ = 0;
  i128 k_max_ = 0;
  std::size_t max_pending_ = 0;
  unsigned workers_ = 0;
  unsigned shards_ = 1;     // RuntimeOptions::shards (setup.hpp)
  bool slow_all_ = false;   // RuntimeOptions::slow_run = 0: every run counts as slow
  std::uint32_t tag_ = 0;   // this runtime's tag (from the first id it issued; 0 before)
  std::optional<chime::ManualClock> other_clock_;  // a second runtime, for ids from another runtime
  std::optional<chime::Runtime> other_threaded_;
  std::optional<chime::detail::Simulation> other_sim_;  // the same, simulated
  chime::Runtime* other_rt_ = nullptr;                  // one of the two
  TimerId other_id_;
  std::optional<chime::ManualClock> clock_;
  // The runtime under test: threaded_rt_'s, or with sim_ the simulation's (start_runtime).
  bool sim_ = false;
  chime::Runtime* rt_ = nullptr;
  std::optional<chime::Runtime> threaded_rt_;
  std::optional<chime::detail::Simulation> sim_rt_;

  std::optional<chime::Producer> producer_;
  // Lane mode: every timer is scheduled through a Lane made (and so run) by
  // the fuzzing thread, whose flushes run its callbacks (include/chime/lane.hpp).
  bool lane_mode_ = false;
  std::optional<chime::Lane> lane_;
  std::int64_t c_ = 0;          // the clock, as of the last operation that moved it
  std::int64_t wheel_now_ = 0;  // the wheel's time: c_, except that it stops at shutdown

  std::vector<MTimer> timers_;  // index = tag
  std::uint64_t sched_count_ = 0;
  std::uint64_t accepted_ = 0;
  std::uint64_t cancels_ = 0;
  std::uint64_t reschedules_ = 0;
  std::uint64_t runs_seen_ = 0;
  std::uint64_t throws_ = 0;
  bool stopped_ = false;
  bool fire_shutdown_ = false;  // processing the runs of shutdown(fire_pending)

  // Shared with the wheel thread.
  std::mutex mu_;
  std::vector<Action> actions_;  // by tag
  std::vector<Run> runs_;
  std::vector<TimerId> error_ids_;
  bool bad_error_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> slow_calls_{0};  // on_slow_run calls
  std::atomic<bool> bad_slow_{false};         // on_slow_run got an invalid id or a run not slower than slow_run
  std::atomic<int> slow_left_{kMaxSlowRuns};  // sleeps the `slow` action may still take
  std::array<std::atomic<int>, kMaxOps + 1> active_{};  // by tag: callbacks of the timer in progress
};

}  // namespace chime_fuzz::runtime_target
