// fuzz/runtime_fuzz.cpp: libFuzzer target that drives chime::Runtime with a
// ManualClock from the fuzzer's bytes, and checks every outcome against a
// model. Most inputs use workers = 0 (callbacks run on the wheel thread, in
// the batches the wheel thread hands over); some use 1 or 2 workers, so that
// cancel_and_wait waits for a run on another thread. It is linked against
// runtime sources built with CHIME_ZOMBIE_SWEEP_MIN=2 (fuzz/CMakeLists.txt):
// cancels of filed timers leave zombies that the wheel reclaims lazily, and
// two of them already trigger a sweep, so the lazy-cancel paths (ADD no-op,
// reclaim at the alarm, sweep, slot reuse after a sweep) are all reached by
// small inputs.
//
// Input layout (every read past the end is 0, so any byte string is valid):
//   byte 0   precision, from {1, 3, 1000, 1000000} ns (bits 0-1); workers (bits 2-4: 0, or 1-2 when bits 2-3 are set)
//   byte 1   level bits, from kBitSets (tiny ones make the due-time range a few intervals)
//   byte 2   start of the clock: a selector byte and its operand (see pick_start)
//   next     max_pending (0 = unbounded, else 1..8), the command queue backend (0x80) and
//            RuntimeOptions::slow_run (0x40: 0 ns, every run is slow; else the default 10 ms)
//   then     operations, at most kMaxOps: an op byte and its operand bytes (see step()).
//
// The model (include/chime/runtime.hpp's rules). The clock moves only in the
// "advance + flush" operation, which flushes before it moves the clock and
// again after (as tests/runtime_test_support.hpp's advance_to does), so every
// command is applied while the clock is at the time the model knows (c_), and
// between operations the wheel's time W equals the clock (clamped to the
// wheel's last interval, and frozen by shutdown).
// - Due now at application: a timer scheduled (or rescheduled to an EARLIER
//   due, which posts a command) with its due d <= the clock is due now: it may
//   run at any moment after the call, and must have run by the next flush,
//   exactly once, with Firing::due = d and never before d by the clock. Such
//   a one-shot is `ambiguous` in the model until that flush: cancel /
//   try_cancel / reschedule may see either outcome.
// - Otherwise the interval rule: a run due at d is ripe once
//   W >= interval_start(d) + precision (interval_start relative to the
//   clock's time at construction). A timer that is not ripe and not due now
//   has not run: cancel and reschedule must return true, try_cancel
//   `cancelled`, state() pending.
// - A reschedule to a LATER due (a "touch") posts no command: the timer keeps
//   the interval rule of its filed alarm; one due now stays so iff its new
//   due is still <= the clock.
// - Periodic timers are only made runnable under a flush (the harness
//   flushes right after scheduling one due now, or rescheduling one earlier
//   to a due <= the clock), so their runs are exact. Their first run after
//   such an application is due now: Missed::skip / delay coalesce the runs due
//   up to the clock (the wheel's fired_at) into one (due = the latest,
//   missed = the others); catch_up runs the first due one. Their re-arms keep
//   the interval rule: skip / delay coalesce every run due before the
//   boundary (the wheel's interval start), catch_up runs each in order. The
//   next run after a skip / catch_up run is due + period; after a delay run,
//   the clock's time when the run returned + period (the ManualClock cannot
//   move during a run).
// Inside each callback the harness checks state(self) == running and that
// the run is not early (by the rule that applies to it), except in drain()
// and shutdown(fire_pending), which run timers early by contract. Callbacks
// may cancel themselves (cancel, try_cancel, cancel_and_wait: `running`,
// without waiting, and state(self) stays `running` until the run returns),
// throw, call flush/drain/shutdown (std::logic_error), or sleep (so that the
// harness's cancel_and_wait finds a run in progress and must return only
// after it ended). The harness checks try_cancel / cancel_and_wait against
// the model (cancelled / running / done / unknown), the due-time range
// (std::out_of_range exactly at the limit the wheel guarantees), max_pending
// (CapacityError when the model says the runtime must be full, success when
// it cannot be), drain()'s count, stats() after each flush (run_time's
// percentiles ordered, slow_runs and on_slow_run), on_error for throwing
// callbacks, stale and forged TimerIds (forged with this runtime's tag to
// alias, with another tag, tag 0, or an id from a second Runtime, which must
// be unknown everywhere), and at the end shutdown()'s count of pending
// timers and the behaviour after shutdown.
//
// No input is skipped for a known bug: the ten findings so far are fixed
// and their inputs replay as fuzz/corpus/runtime/regression-*. Each input is
// bounded: kMaxOps operations, kMaxRuns callback runs.
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

namespace {

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

std::int64_t clamp64(i128 v) {
  if (v > kI64Max) return kI64Max;
  if (v < kI64Min) return kI64Min;
  return static_cast<std::int64_t>(v);
}
i128 floor_div(i128 a, i128 b) {
  const i128 q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
TimePoint T(std::int64_t ns) { return TimePoint{Duration{ns}}; }
std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

const char* state_name(TimerState s) {
  switch (s) {
    case TimerState::pending: return "pending";
    case TimerState::running: return "running";
    case TimerState::fired: return "fired";
    case TimerState::cancelled: return "cancelled";
    default: return "unknown";
  }
}
unsigned bit(TimerState s) { return 1u << static_cast<unsigned>(s); }
const char* result_name(CancelResult r) {
  switch (r) {
    case CancelResult::cancelled: return "cancelled";
    case CancelResult::running: return "running";
    case CancelResult::done: return "done";
    default: return "unknown";
  }
}
unsigned bit(CancelResult r) { return 1u << static_cast<unsigned>(r); }


const std::vector<std::vector<int>>& bit_sets() {
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
  enum class St { pending, fired, cancelled } st = St::pending;
  // One-shot due now at its application (scheduled, or rescheduled earlier, to a due <= the clock), outside
  // a flush: it may run at any moment, and has run by the next flush. Stays set once it ran.
  bool ambiguous = false;
  std::uint64_t ripe_sched = 0;   // schedules counted when it became ambiguous
  // Periodic: its next run is due now (the harness flushed right after the application that made it so):
  // the run coalesces up to the clock, not the boundary. Cleared by that run.
  bool due_now = false;
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
  explicit RuntimeFuzz(Input& in) : in_(in) {
    const std::uint8_t b0 = in_.u8();
    p_ = kPrecisions[b0 % 4];
    workers_ = ((b0 >> 2) & 3) == 3 ? 1 + ((b0 >> 4) & 1) : 0;
    const auto& sets = bit_sets();
    bits_v_ = sets[in_.u8() % sets.size()];
    num_bits_ = 0;
    for (int b : bits_v_) num_bits_ += b;
    start_ = pick_start();
    const std::uint8_t opts = in_.u8();
    const std::size_t max_pending = (opts & 7) < 5 ? 0 : 1 + (opts >> 3) % 8;
    const bool boost_queue = (opts & 0x80) != 0;
    slow_all_ = (opts & 0x40) != 0;
    clock_.emplace(T(start_));
    c_ = wheel_now_ = start_;
    k_max_ = (static_cast<i128>(kI64Max) - start_) / p_;
    FUZZ_TRACE("Runtime precision=" << p_ << "ns bits=" << num_bits_ << "(" << bits_v_.size()
                                    << " levels) start=" << start_ << " max_pending=" << max_pending
                                    << " queue=" << (boost_queue ? "boost" : "moodycamel") << " workers=" << workers_
                                    << (slow_all_ ? " slow_run=0" : ""));
    chime::RuntimeOptions o;
    o.precision = Duration{p_};
    o.level_bits = chime::LevelBits::create(std::span<const int>(bits_v_));
    o.workers = workers_;
    o.clock = &*clock_;
    o.max_pending = max_pending;
    o.on_error = [this](TimerId id, std::exception_ptr e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ids_.push_back(id);
      if (!e) bad_error_ = true;
    };
    if (slow_all_) o.slow_run = Duration{0};  // every run is slow (a run takes more than 0 ns)
    o.on_slow_run = [this](TimerId id, Duration took) {
      const std::uint64_t n = slow_calls_.fetch_add(1, std::memory_order_relaxed) + 1;
      if (!id || took <= (slow_all_ ? Duration{0} : Duration{std::chrono::milliseconds(10)})) bad_slow_ = true;
      if (n % 3 == 0) throw std::runtime_error("chime fuzz: on_slow_run throws (swallowed)");
    };
    o.command_queue = boost_queue ? chime::CommandQueueBackend::boost_lockfree : chime::CommandQueueBackend::moodycamel;
    max_pending_ = max_pending;
    if (k_max_ < 2) {
      // Fewer than two intervals before TimePoint::max(): the runtime refuses the clock, naming its time.
      bool refused = false;
      try {
        rt_.emplace(o);
      } catch (const std::invalid_argument& e) {
        refused = std::string(e.what()).find(std::to_string(start_)) != std::string::npos;
      }
      FUZZ_CHECK(refused, "a clock at " << start_ << " (" << static_cast<std::int64_t>(k_max_)
                                        << " intervals before the end of time) was not refused by name");
      return;
    }
    rt_.emplace(o);
    producer_.emplace(rt_->producer());
    FUZZ_CHECK(rt_->precision() == Duration{p_} && N(rt_->clock().now()) == start_, "precision()/clock()");
  }

  ~RuntimeFuzz() {
    producer_.reset();
    rt_.reset();
  }

  void run() {
    if (!rt_) return;  // refused at construction (checked there)
    for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) step(in_.u8());
    if (!stopped_) op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending : chime::ShutdownMode::cancel_pending);
    after_shutdown_checks();
  }

  // On the wheel thread.
  void on_run(std::size_t tag, const chime::Firing& f) {
    // The timer's callback is in progress until this returns (or throws): what cancel_and_wait waits for.
    active_.at(tag).fetch_add(1, std::memory_order_acq_rel);
    struct Leave {
      std::atomic<int>& a;
      ~Leave() { a.fetch_sub(1, std::memory_order_acq_rel); }
    } leave{active_[tag]};
    Run r;
    r.tag = tag;
    r.firing = f;
    r.clock_at_start = N(clock_->now());
    r.state_inside = rt_->state(f.id);
    r.draining = draining_.load(std::memory_order_acquire);
    Action action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      action = actions_.at(tag);
    }
    switch (action) {
      case Action::try_blocking: {
        int refused = 0;
        try {
          rt_->flush();
        } catch (const std::logic_error&) {
          ++refused;
        }
        try {
          (void)rt_->drain();
        } catch (const std::logic_error&) {
          ++refused;
        }
        try {
          (void)rt_->shutdown();
        } catch (const std::logic_error&) {
          ++refused;
        }
        r.blocking_refused = refused == 3;
        break;
      }
      case Action::cancel_self:
        r.self_result = rt_->cancel(f.id);
        r.state_after = rt_->state(f.id);
        break;
      case Action::try_cancel_self:
        r.self_cancel = rt_->try_cancel(f.id);
        r.self_result = rt_->cancel(f.id);  // a second cancel: false
        r.state_after = rt_->state(f.id);
        break;
      case Action::wait_self:
        r.self_cancel = rt_->cancel_and_wait(f.id);  // must not wait for itself
        r.state_after = rt_->state(f.id);
        break;
      case Action::slow:
        if (slow_left_.fetch_sub(1, std::memory_order_relaxed) > 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        break;
      case Action::reschedule_self:
        // The timer is running, so the answer must be false. (Its own due may be out of range: a periodic
        // timer's next due can be beyond the wheel's range, and the wheel's last interval accepts nothing;
        // then std::out_of_range, which is not an answer and is not checked here.)
        try {
          r.self_result = rt_->reschedule_at(f.id, f.due);
        } catch (const std::out_of_range&) {
          r.self_result = false;
        }
        break;
      default: break;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs_.push_back(r);
    }
    if (action == Action::throw_std) throw std::runtime_error("chime fuzz: a callback throws");
    if (action == Action::throw_other) throw 42;
  }

 private:
  // ---- configuration and model arithmetic ---------------------------------

  std::int64_t pick_start() {
    switch (in_.u8() % 7) {
      case 0: return 0;
      case 1: return 1'000'000'000'000;  // 1000 s
      case 2: return -static_cast<std::int64_t>(in_.u64() & ((std::uint64_t{1} << 62) - 1));
      case 3: return kI64Min + in_.u16();
      case 4: return kI64Max - static_cast<std::int64_t>(in_.u32());
      case 5: return static_cast<std::int64_t>(in_.u64());
      default: return in_.u32();
    }
  }

  i128 key(i128 t) const { return floor_div(t - start_, p_); }
  i128 interval_start(i128 t) const { return start_ + key(t) * p_; }
  // The least clock time at which a run due at d may start.
  i128 ripe_at(i128 d) const { return interval_start(d) + p_; }
  // The horizon: the wheel advances into interval H = min(K_max, 2^61 - 1) - 1 and no further, whatever
  // the clock (runtime.cpp, horizon_key); runs due from start(H) on never happen.
  i128 horizon_key() const { return std::min<i128>(kMaxRepresentableKey, k_max_) - 1; }
  i128 max_wheel_now() const { return start_ + horizon_key() * p_; }
  i128 wheel_at(i128 c) const { return std::min(c, max_wheel_now()); }
  // Ripe: due to run by the wheel's time (the clock's, clamped as above; frozen by shutdown).
  bool ripe(std::int64_t d) const { return ripe_at(d) <= wheel_now_; }
  // Due times below this are accepted, at or above it refused with std::out_of_range: 2^num_bits - 1
  // intervals past the wheel's, at most the horizon's start (producer_ops.cpp, due_limit_for).
  i128 limit() const {
    const i128 k = std::min<i128>(key(wheel_now_) + ((i128{1} << num_bits_) - 1), horizon_key());
    return start_ + k * p_;
  }

  // Catch-up runs a periodic timer due at `due` makes when the clock reaches c: each run due before the
  // boundary; when it is due now (applied with due <= c), its first run whatever the boundary.
  i128 catch_up_runs(i128 due, i128 period, i128 c, bool due_now = false) const {
    const i128 boundary = interval_start(wheel_at(c));
    const i128 n = due >= boundary ? 0 : (boundary - due + period - 1) / period;
    return due_now ? std::max<i128>(n, 1) : n;
  }
  // Runs the next flush to clock c will make, at most.
  i128 runs_at(i128 c) const {
    i128 n = 0;
    for (const MTimer& t : timers_) {
      if (t.st != MTimer::St::pending) continue;
      if (!t.periodic) {
        n += t.ambiguous || ripe_at(t.due) <= wheel_at(c) ? 1 : 0;
      } else if (t.on_missed == Missed::catch_up) {
        n += catch_up_runs(t.due, t.period, c, t.due_now);
      } else {
        n += t.due_now || interval_start(wheel_at(c)) > t.due ? 1 : 0;
      }
    }
    return n;
  }
  // A pending timer that may have run (or be running) already: a one-shot due now at its application.
  // Periodic timers never are (the harness flushes them at once).
  static bool may_run(const MTimer& t) { return !t.periodic && t.ambiguous; }

  std::optional<std::size_t> pick_timer() {
    if (timers_.empty()) return std::nullopt;
    return in_.below(timers_.size());
  }

  // A due time: at or around now, the range limit, the past (near and far), an existing timer's due, anything.
  i128 pick_due() {
    const i128 c = c_;
    const i128 p = p_;
    const i128 l = limit();
    switch (in_.u8() % 12) {
      case 0: return c;
      case 1: return c + in_.u8();
      case 2: return c + static_cast<i128>(in_.u8()) * p + in_.u8() % p;
      case 3: return c + in_.log_uniform();
      case 4: return l - 1 - in_.u8() % p;
      case 5: return l;
      case 6: return l + 1 + in_.log_uniform();
      case 7: return c - 1 - in_.u16();
      case 8: return interval_start(c) - (in_.flag() ? 1 : 0);
      case 9: return c - in_.log_uniform();
      case 10:
        if (const auto i = pick_timer()) return static_cast<i128>(timers_[*i].due) + in_.u8() % 2;
        return c;
      default: return static_cast<std::int64_t>(in_.u64());
    }
  }
  i128 pick_delay() {
    const i128 p = p_;
    switch (in_.u8() % 9) {
      case 0: return 0;
      case 1: return in_.u8();
      case 2: return static_cast<i128>(in_.u8()) * p;
      case 3: return in_.log_uniform();
      case 4: return -static_cast<i128>(in_.u16());
      case 5: return limit() - c_ - 1 - in_.u8() % p;
      case 6: return limit() - c_;
      case 7: return -static_cast<i128>(in_.log_uniform());
      default: return static_cast<std::int64_t>(in_.u64());
    }
  }
  i128 pick_period() {
    const i128 p = p_;
    switch (in_.u8() % 7) {
      case 0: return p;
      case 1: return 1 + in_.u8();
      case 2: return (1 + static_cast<i128>(in_.u8())) * p;
      case 3: return 1 + static_cast<i128>(in_.log_uniform());
      case 4: return ((i128{1} << num_bits_) - 1) * p - in_.u8();
      case 5: return -static_cast<i128>(in_.u8());
      default: return static_cast<std::int64_t>(in_.u64());
    }
  }

  Action pick_action() {
    const std::uint8_t b = in_.u8();
    return b < 150 ? Action::record : static_cast<Action>(1 + (b - 150) % (kNumActions - 1));
  }
  static const char* missed_name(Missed m) {
    return m == Missed::catch_up ? "catch_up" : m == Missed::delay ? "delay" : "skip";
  }

  // ---- operations ---------------------------------------------------------

  void step(std::uint8_t op) {
    process_runs();
    switch (op % 16) {
      case 0:
      case 1: return op_schedule_at();
      case 2: return op_schedule_after();
      case 3: return op_schedule_every();
      case 4: return op_cancel();
      case 5: return op_reschedule(false);
      case 6: return op_reschedule(true);
      case 7:
      case 8:
      case 9: return op_advance_and_flush();
      case 10: return op_flush("flush");
      case 11: return op_drain();
      case 12: return op_state();
      case 13: return op_stats();
      case 14: return op_forged_id();
      default:
        // Rare: shutdown in the middle; the remaining operations check the behaviour after it.
        if (in_.u8() < 32) return op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending
                                                         : chime::ShutdownMode::cancel_pending);
        return op_state();
    }
  }

  // Live-timer bounds for max_pending: `definite` are certainly holding a slot, `possible` may be.
  void live_bounds(std::size_t& definite, std::size_t& possible) const {
    definite = possible = 0;
    for (const MTimer& t : timers_) {
      if (t.st == MTimer::St::pending) {
        ++possible;
        if (!may_run(t)) ++definite;
      } else if (!t.settled) {
        ++possible;
      }
    }
  }

  chime::Task make_task(std::size_t tag, bool big) {
    if (big) return BigCallback{Callback{this, tag}, {}};
    return Callback{this, tag};
  }

  enum class Via { runtime, producer };
  enum class Outcome { accepted, stopped, out_of_range, capacity, invalid };

  const char* outcome_name(Outcome o) {
    switch (o) {
      case Outcome::accepted: return "accepted";
      case Outcome::stopped: return "StoppedError";
      case Outcome::out_of_range: return "out_of_range";
      case Outcome::capacity: return "CapacityError";
      default: return "invalid_argument";
    }
  }

  // Runs one schedule call and classifies what happened.
  template <class F>
  Outcome attempt(F&& f, TimerId& id) {
    try {
      id = f();
      return Outcome::accepted;
    } catch (const chime::StoppedError&) {
      return Outcome::stopped;
    } catch (const chime::CapacityError&) {
      return Outcome::capacity;
    } catch (const std::out_of_range&) {
      return Outcome::out_of_range;
    } catch (const std::invalid_argument&) {
      return Outcome::invalid;
    }
  }

  // Checks a schedule's outcome against the model; registers the timer if accepted.
  void schedule_outcome(const char* what, Outcome got, TimerId id, i128 due, bool periodic, Missed on_missed,
                        i128 period, Action action, std::size_t tag, bool period_invalid) {
    std::size_t definite = 0, possible = 0;
    live_bounds(definite, possible);
    // Expected, in the documented order: StoppedError, out_of_range, CapacityError.
    if (period_invalid) {
      // schedule_every checks its period first (before StoppedError: the contract does not order these two).
      FUZZ_CHECK(got == Outcome::invalid || (stopped_ && got == Outcome::stopped),
                 what << ": period " << static_cast<std::int64_t>(period) << " gave " << outcome_name(got));
      return;
    }
    if (stopped_) {
      FUZZ_CHECK(got == Outcome::stopped, what << " after shutdown gave " << outcome_name(got));
      return;
    }
    if (due >= limit()) {
      FUZZ_CHECK(got == Outcome::out_of_range, what << ": due " << static_cast<std::int64_t>(due) << " >= limit "
                                                    << static_cast<std::int64_t>(limit()) << " gave "
                                                    << outcome_name(got));
      return;
    }
    if (max_pending_ != 0 && definite >= max_pending_) {
      FUZZ_CHECK(got == Outcome::capacity, what << ": " << definite << " timers certainly pending, max_pending "
                                                << max_pending_ << ", gave " << outcome_name(got));
      return;
    }
    if (max_pending_ == 0 || possible < max_pending_) {
      FUZZ_CHECK(got == Outcome::accepted, what << ": due " << static_cast<std::int64_t>(due) << " (limit "
                                                << static_cast<std::int64_t>(limit()) << ", " << possible
                                                << " possibly pending) gave " << outcome_name(got));
    } else {
      FUZZ_CHECK(got == Outcome::accepted || got == Outcome::capacity, what << " gave " << outcome_name(got));
    }
    if (got != Outcome::accepted) return;
    FUZZ_CHECK(static_cast<bool>(id), what << " returned an invalid TimerId");
    if (tag_ == 0) tag_ = id.runtime();
    FUZZ_CHECK(id.runtime() != 0 && id.runtime() == tag_,
               what << " returned an id tagged " << id.runtime() << ", the runtime's earlier ids " << tag_);
    for (const MTimer& t : timers_) {
      if (t.id == id) FUZZ_CHECK(t.st != MTimer::St::pending, what << " returned the id of a pending timer");
    }
    ++sched_count_;
    ++accepted_;
    MTimer t;
    t.id = id;
    t.periodic = periodic;
    t.on_missed = on_missed;
    t.period = static_cast<std::int64_t>(period);
    t.due = static_cast<std::int64_t>(due);
    t.action = action;
    // Due now at its application (the clock cannot move before the command is applied).
    if (t.due <= c_) {
      if (periodic) {
        t.due_now = true;  // the caller flushes at once
      } else {
        t.ambiguous = true;
        t.ripe_sched = sched_count_;
      }
    }
    FUZZ_CHECK(tag == timers_.size(), "tag bookkeeping");
    timers_.push_back(t);
  }

  // Reserves a tag (and its action, which the callback reads) for a timer about to be scheduled.
  std::size_t reserve_tag(Action action) {
    std::lock_guard<std::mutex> lock(mu_);
    actions_.push_back(action);
    return actions_.size() - 1;
  }
  void release_tag() {
    std::lock_guard<std::mutex> lock(mu_);
    actions_.pop_back();
  }

  void op_schedule_at() {
    const i128 due = pick_due();
    const Action action = pick_action();
    const std::uint8_t how = in_.u8();
    const Via via = (how & 1) ? Via::producer : Via::runtime;
    const bool big = (how & 6) == 6;
    const std::int64_t d = clamp64(due);
    FUZZ_TRACE("schedule_at due=" << d << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                                  << ") action=" << int(action) << (via == Via::producer ? " via producer" : "")
                                  << (big ? " big task" : ""));
    const std::size_t tag = reserve_tag(action);
    TimerId id;
    const Outcome got = attempt(
        [&] { return via == Via::producer ? producer_->schedule_at(T(d), make_task(tag, big))
                                          : rt_->schedule_at(T(d), make_task(tag, big)); },
        id);
    if (got != Outcome::accepted) release_tag();
    schedule_outcome("schedule_at", got, id, d, false, Missed::skip, 0, action, tag, false);
  }

  void op_schedule_after() {
    const i128 delay = pick_delay();
    const Action action = pick_action();
    const Via via = in_.flag() ? Via::producer : Via::runtime;
    const std::int64_t dl = clamp64(delay);
    FUZZ_TRACE("schedule_after delay=" << dl << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                                       << ") action=" << int(action));
    const std::size_t tag = reserve_tag(action);
    TimerId id;
    const Outcome got = attempt(
        [&] { return via == Via::producer ? producer_->schedule_after(Duration{dl}, make_task(tag, false))
                                          : rt_->schedule_after(Duration{dl}, make_task(tag, false)); },
        id);
    if (got != Outcome::accepted) release_tag();
    // now + delay saturates at the ends of time (runtime.cpp).
    schedule_outcome("schedule_after", got, id, clamp64(static_cast<i128>(c_) + dl), false, Missed::skip, 0, action,
                     tag, false);
  }

  void op_schedule_every() {
    const i128 period = pick_period();
    const bool has_first = in_.flag();
    const i128 first = has_first ? pick_due() : 0;
    const std::uint8_t m = in_.u8();
    const Missed on_missed = (m & 1) ? Missed::catch_up : (m & 2) ? Missed::delay : Missed::skip;
    const Action action = pick_action();
    const Via via = in_.flag() ? Via::producer : Via::runtime;
    const std::int64_t per = clamp64(period);
    const std::int64_t f = clamp64(first);
    const bool period_invalid = per <= 0;
    const i128 due = has_first ? i128{f} : clamp64(c_ + i128{per});  // saturating, as schedule_after
    if (!period_invalid) {
      // Bound the work: the runs it makes now (it is flushed at once if ripe) must fit in the budget.
      const bool due_now = due <= c_;
      const i128 now_runs = on_missed == Missed::catch_up ? catch_up_runs(due, per, c_, due_now) : i128{due_now};
      if (runs_seen_ + runs_at(c_) + now_runs > kMaxRuns) return;
    }
    FUZZ_TRACE("schedule_every period=" << per << " first=" << (has_first ? std::to_string(f) : "default") << " "
                                        << missed_name(on_missed) << " (clock=" << c_
                                        << " limit=" << static_cast<std::int64_t>(limit()) << ") action="
                                        << int(action));
    const std::size_t tag = reserve_tag(action);
    chime::PeriodicOptions po;
    if (has_first) po.first_due = T(f);
    po.on_missed = on_missed;
    TimerId id;
    const Outcome got = attempt(
        [&] { return via == Via::producer ? producer_->schedule_every(Duration{per}, make_task(tag, false), po)
                                          : rt_->schedule_every(Duration{per}, make_task(tag, false), po); },
        id);
    if (got != Outcome::accepted) release_tag();
    schedule_outcome("schedule_every", got, id, due, true, on_missed, per, action, tag, period_invalid);
    // A periodic timer is made runnable only under a flush, so that its runs are deterministic.
    if (got == Outcome::accepted && timers_.back().due_now) op_flush("periodic scheduled due now");
  }

  // An id to operate on: a model timer's (most of the time), the default id, or a forged one.
  struct Target {
    std::optional<std::size_t> index;
    TimerId id;
  };
  Target pick_target() {
    const std::uint8_t b = in_.u8();
    if (b < 224 && !timers_.empty()) {
      const std::size_t i = in_.below(timers_.size());
      return {i, timers_[i].id};
    }
    if (b < 240) return {std::nullopt, TimerId{}};
    return {std::nullopt, forged_id()};
  }
  // An id this runtime never issued, so `unknown` / false everywhere: with this runtime's tag, a slot the
  // model knows with a generation it never saw, or a far slot; a real timer's slot and generation with
  // another tag (0, or one no runtime of ours has); or an id issued by a second runtime.
  TimerId forged_id() {
    const std::uint8_t how = in_.u8();
    if (how % 4 == 2 && !timers_.empty()) {
      const TimerId real = timers_[in_.below(timers_.size())].id;
      const std::uint32_t foreign = (how & 4) ? 0u : tag_ + 1u + in_.u8();
      return TimerId(real.slot(), real.generation(), foreign);
    }
    if (how % 4 == 3) {
      if (const auto id = other_runtime_id()) return *id;
    }
    const std::uint32_t slot = (how & 4) ? in_.u8() % 16 : in_.u32();
    std::uint32_t gen = in_.u32() | 1u;
    for (;;) {
      bool clash = false;
      for (const MTimer& t : timers_) clash = clash || (t.id.slot() == slot && t.id.generation() == gen);
      if (!clash) return TimerId(slot, gen, tag_);
      gen += 2;
    }
  }
  // A pending timer's id in a second runtime (made once per input, on its own ManualClock that never
  // moves, so its timer never runs); nullopt if that runtime refuses the clock or the due time.
  std::optional<TimerId> other_runtime_id() {
    if (!other_rt_ && !other_clock_) {
      other_clock_.emplace(T(start_));
      try {
        chime::RuntimeOptions o;
        o.precision = Duration{1};
        o.workers = 0;
        o.clock = &*other_clock_;
        other_rt_.emplace(o);
        other_id_ = other_rt_->schedule_after(Duration{1}, [] {});
      } catch (const std::exception&) {
        other_rt_.reset();
      }
      if (other_rt_) {
        FUZZ_CHECK(other_id_.runtime() != 0 && other_id_.runtime() != tag_, "two runtimes share the tag " << tag_);
        // Ours are unknown to it.
        for (const MTimer& t : timers_) {
          FUZZ_CHECK(other_rt_->state(t.id) == TimerState::unknown && !other_rt_->cancel(t.id) &&
                         other_rt_->try_cancel(t.id) == CancelResult::unknown,
                     "another runtime took timer " << t.id.slot() << "/" << t.id.generation() << " for its own");
        }
      }
    }
    if (!other_rt_) return std::nullopt;
    return other_id_;
  }

  // What try_cancel / cancel_and_wait of model timer t may answer, decided from the model before the call.
  unsigned allowed_cancel_results(const MTimer& t) const {
    switch (t.st) {
      case MTimer::St::pending:
        if (!may_run(t)) return bit(CancelResult::cancelled);  // not started, and cannot start before a flush
        // Due now: it may have started, or finished (and its slot been reused by a later schedule).
        return bit(CancelResult::cancelled) | bit(CancelResult::running) | bit(CancelResult::done) |
               (sched_count_ != t.ripe_sched ? bit(CancelResult::unknown) : 0);
      case MTimer::St::fired:
      case MTimer::St::cancelled:
        // `running` while the run that ended it has not returned (the model learns of a run from inside it).
        return bit(CancelResult::done) | (t.settled ? 0 : bit(CancelResult::running)) |
               (sched_count_ != t.terminal_sched ? bit(CancelResult::unknown) : 0);
    }
    return 0;
  }

  // cancel, try_cancel or cancel_and_wait (the operand's bits 1-2), through the Runtime or the Producer.
  void op_cancel() {
    const Target tg = pick_target();
    const std::uint8_t how = in_.u8();
    const Via via = (how & 1) ? Via::producer : Via::runtime;
    const int kind = (how >> 1) % 4;  // 0, 1: cancel; 2: try_cancel; 3: cancel_and_wait
    const char* what = kind == 2 ? "try_cancel" : kind == 3 ? "cancel_and_wait" : "cancel";
    FUZZ_TRACE(what << " " << (tg.index ? "timer #" + std::to_string(*tg.index) : std::string("forged/default id"))
                    << " slot=" << tg.id.slot() << " gen=" << tg.id.generation() << " tag=" << tg.id.runtime()
                    << (via == Via::producer ? " via producer" : ""));
    if (kind >= 2) {
      // Bit 3: first give a due-now timer up to 2 ms to start, so that a slow callback is found in progress.
      if ((how & 8) && tg.index && timers_[*tg.index].st == MTimer::St::pending && may_run(timers_[*tg.index])) {
        for (int i = 0; i < 40 && active_.at(*tg.index).load(std::memory_order_acquire) == 0; ++i) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      return op_try_cancel(tg, via, kind == 3);
    }
    // The model is updated from the answer before the runs recorded meanwhile are checked: a run that started
    // before the call is consistent with either answer, one after a successful cancel is a bug.
    const bool got = via == Via::producer ? producer_->cancel(tg.id) : rt_->cancel(tg.id);
    struct After {
      RuntimeFuzz* h;
      ~After() { h->process_runs(); }
    } after{this};
    if (!tg.index) {
      FUZZ_CHECK(!got, "cancel of a default or forged id returned true");
      return;
    }
    MTimer& t = timers_[*tg.index];
    if (t.st != MTimer::St::pending || stopped_) {
      FUZZ_CHECK(!got, "cancel of a " << (t.st == MTimer::St::fired ? "fired" : "cancelled")
                                      << " timer returned true");
      return;
    }
    if (!may_run(t)) {
      FUZZ_CHECK(got, "cancel of timer #" << *tg.index << " (due " << t.due << ", clock " << c_
                                          << ", not due) returned false");
    }
    if (got) mark_cancelled(t);
  }

  void mark_cancelled(MTimer& t) {
    t.st = MTimer::St::cancelled;
    t.terminal_sched = sched_count_;
    t.settled = false;
    ++cancels_;
  }

  void op_try_cancel(const Target& tg, Via via, bool wait) {
    const CancelResult got = wait ? (via == Via::producer ? producer_->cancel_and_wait(tg.id) : rt_->cancel_and_wait(tg.id))
                                  : (via == Via::producer ? producer_->try_cancel(tg.id) : rt_->try_cancel(tg.id));
    // cancel_and_wait returned `running` only after that run returned: the callback is not in progress.
    const bool still_running = tg.index && active_.at(*tg.index).load(std::memory_order_acquire) != 0;
    const char* what = wait ? "cancel_and_wait" : "try_cancel";
    FUZZ_TRACE("  = " << result_name(got));
    struct After {
      RuntimeFuzz* h;
      ~After() { h->process_runs(); }
    } after{this};
    if (!tg.index) {
      FUZZ_CHECK(got == CancelResult::unknown, what << " of a default or forged id is " << result_name(got));
      return;
    }
    MTimer& t = timers_[*tg.index];
    const bool was_pending = t.st == MTimer::St::pending;
    const unsigned allowed = allowed_cancel_results(t);
    FUZZ_CHECK((allowed & bit(got)) != 0, what << " of timer #" << *tg.index << " (model state " << int(t.st)
                                               << ", due " << t.due << ", clock " << c_ << ") is "
                                               << result_name(got));
    if (wait && got == CancelResult::running) {
      FUZZ_CHECK(!still_running, "cancel_and_wait of timer #" << *tg.index << " returned `running` while its "
                                                              << "callback was still in progress");
    }
    if (got == CancelResult::cancelled) {
      mark_cancelled(t);
      return;
    }
    if (!was_pending) return;
    // A one-shot due now that started: its run is recorded before its callback returns, so once the answer
    // says the run is over (done, or cancel_and_wait's running), the model has seen it.
    if (got == CancelResult::done || (wait && got == CancelResult::running)) {
      process_runs();
      FUZZ_CHECK(t.st == MTimer::St::fired, what << " of timer #" << *tg.index << " said its run is over, but "
                                                 << "no run was recorded");
    }
  }

  void op_reschedule(bool after) {
    const Target tg = pick_target();
    i128 due;
    std::int64_t delay = 0;
    if (after) {
      delay = clamp64(pick_delay());
      due = clamp64(static_cast<i128>(c_) + delay);  // saturating, as in runtime.cpp
    } else {
      switch (in_.u8() % 3) {
        case 0:  // earlier
          due = tg.index ? static_cast<i128>(timers_[*tg.index].due) - in_.log_uniform() : pick_due();
          break;
        case 1:  // later
          due = tg.index ? static_cast<i128>(timers_[*tg.index].due) + in_.log_uniform() : pick_due();
          break;
        default: due = pick_due(); break;
      }
      due = clamp64(due);
    }
    const Via via = in_.flag() ? Via::producer : Via::runtime;
    const bool periodic = tg.index && timers_[*tg.index].periodic;
    const bool pending = tg.index && timers_[*tg.index].st == MTimer::St::pending && !stopped_;
    if (periodic && pending && due < timers_[*tg.index].due && due <= c_) {
      // Earlier, to a due <= the clock: due now at the command's application (flushed at once).
      const MTimer& t = timers_[*tg.index];
      const i128 now_runs = t.on_missed == Missed::catch_up ? catch_up_runs(due, t.period, c_, true) : 1;
      if (runs_seen_ + runs_at(c_) + now_runs > kMaxRuns) return;
    }
    const std::int64_t d = clamp64(due);
    FUZZ_TRACE("reschedule" << (after ? "_after" : "_at") << " "
                            << (tg.index ? "timer #" + std::to_string(*tg.index) : std::string("forged/default id"))
                            << " to " << d << " (clock=" << c_ << " limit=" << static_cast<std::int64_t>(limit())
                            << ")");
    bool got = false;
    bool out_of_range = false;
    try {
      if (after) {
        got = via == Via::producer ? producer_->reschedule_after(tg.id, Duration{delay})
                                   : rt_->reschedule_after(tg.id, Duration{delay});
      } else {
        got = via == Via::producer ? producer_->reschedule_at(tg.id, T(d)) : rt_->reschedule_at(tg.id, T(d));
      }
    } catch (const std::out_of_range&) {
      out_of_range = true;
    }
    // As in op_cancel: update the model from the answer, then check the runs recorded meanwhile.
    struct After {
      RuntimeFuzz* h;
      ~After() { h->process_runs(); }
    } after_call{this};
    // The range is checked first, for any id (after shutdown too).
    if (due >= limit()) {
      FUZZ_CHECK(out_of_range, "reschedule to " << d << " >= limit " << static_cast<std::int64_t>(limit())
                                                << " did not throw out_of_range");
      return;
    }
    FUZZ_CHECK(!out_of_range, "reschedule to " << d << " < limit " << static_cast<std::int64_t>(limit())
                                               << " threw out_of_range");
    if (!tg.index) {
      FUZZ_CHECK(!got, "reschedule of a default or forged id returned true");
      return;
    }
    MTimer& t = timers_[*tg.index];
    if (!pending) {
      FUZZ_CHECK(!got, "reschedule of a finished timer #" << *tg.index << " returned true");
      return;
    }
    if (!may_run(t)) {
      FUZZ_CHECK(got, "reschedule of pending timer #" << *tg.index << " (due " << t.due << ", clock " << c_
                                                      << ") returned false");
    }
    if (!got) return;  // it ran (or is running): the next flush checks that it did
    ++reschedules_;
    // Earlier: a command, applied at the clock c_: due now iff d <= c_, else the interval rule (not ripe: d >
    // c_). Later or equal (a touch): no command; the filed alarm's rule stays: interval (a timer that is not
    // due now is not ripe, nor at a later due), or due now while d <= c_.
    const bool earlier = d < t.due;
    t.due = d;
    if (!t.periodic) {
      const bool now_due = earlier ? d <= c_ : t.ambiguous && d <= c_;
      if (now_due && !t.ambiguous) t.ripe_sched = sched_count_;
      t.ambiguous = now_due;
    } else if (earlier && d <= c_) {
      t.due_now = true;
      op_flush("periodic rescheduled earlier, due now");
    }
  }

  // The clock's next time: tiny and huge steps, exactly to a timer's ripe time (or just before), to a due time.
  i128 pick_clock() {
    const i128 c = c_;
    const i128 p = p_;
    switch (in_.u8() % 10) {
      case 0: return c;
      case 1: return c + 1;
      case 2: return c + in_.u8() % p;
      case 3: return c + p;
      case 4: return c + static_cast<i128>(in_.u8()) * p;
      case 5:
        if (const auto i = pick_timer()) return ripe_at(timers_[*i].due) - (in_.flag() ? 1 : 0);
        return c + p;
      case 6:
        if (const auto i = pick_timer()) return static_cast<i128>(timers_[*i].due) + in_.u8() % 2;
        return c + 1;
      case 7: return c + in_.log_uniform();
      case 8: return limit() + in_.u16();
      default: return c + static_cast<i128>(in_.u16()) * p;
    }
  }

  void op_advance_and_flush() {
    i128 to = std::min<i128>(std::max<i128>(pick_clock(), c_), kI64Max);  // the clock saturates at TimePoint::max()
    // Bound the work: the runs this flush makes must fit in the budget, or the clock stays.
    if (runs_seen_ + runs_at(to) > kMaxRuns) to = c_;
    FUZZ_TRACE("advance clock " << c_ << " -> " << static_cast<std::int64_t>(to) << " (+"
                                << static_cast<std::int64_t>(to - c_) << ")");
    // Commands posted so far are applied at the clock's current time (the model's c_), before it moves.
    op_flush("flush before the clock moves");
    clock_->set(T(static_cast<std::int64_t>(to)));
    op_flush("flush");
  }

  // flush() at the clock's time; then everything ripe has run and every finished timer's slot is free.
  void op_flush(const char* why) {
    FUZZ_TRACE(why << " (clock " << N(clock_->now()) << ")");
    const std::int64_t before = c_;
    c_ = N(clock_->now());
    FUZZ_CHECK(c_ >= before, "the clock went back");
    rt_->flush();
    if (!stopped_) wheel_now_ = static_cast<std::int64_t>(wheel_at(c_));
    process_runs();
    if (stopped_) return;
    // Everything ripe has run; every finished timer's slot is free.
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      MTimer& t = timers_[i];
      if (t.st == MTimer::St::pending) {
        FUZZ_CHECK(!t.ambiguous && !t.due_now, "timer #" << i << " due " << t.due << " was due now at its "
                                                          << "application and did not run by the flush at " << c_);
        if (!t.periodic) {
          FUZZ_CHECK(!ripe(t.due), "one-shot #" << i << " due " << t.due << " (ripe at "
                                                << static_cast<std::int64_t>(ripe_at(t.due)) << ") did not run by the "
                                                << "flush at " << c_ << " (wheel at " << wheel_now_ << ")");
        } else {
          FUZZ_CHECK(t.due >= interval_start(wheel_now_), "periodic #" << i << " next due " << t.due
                                                                       << " is behind the wheel's time " << wheel_now_
                                                                       << " after a flush");
        }
      } else {
        t.settled = true;
      }
    }
    check_stats_exact();
  }

  void op_drain() {
    std::size_t definite = 0, ambiguous = 0;
    std::vector<std::uint64_t> runs_before(timers_.size());
    std::vector<bool> was_pending(timers_.size());
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      const MTimer& t = timers_[i];
      runs_before[i] = t.runs;
      was_pending[i] = t.st == MTimer::St::pending;
      if (t.st != MTimer::St::pending) continue;
      if (!may_run(t)) {
        ++definite;
      } else {
        ++ambiguous;
      }
    }
    FUZZ_TRACE("drain (expect " << definite << ".." << definite + ambiguous << ")");
    draining_.store(true, std::memory_order_release);
    const std::size_t n = rt_->drain();
    // drain() returns once the runs are handed over; with workers they may still be running: wait for them
    // (the clock has not moved, so this flush runs nothing the drain did not).
    if (workers_ != 0) rt_->flush();
    draining_.store(false, std::memory_order_release);
    process_runs();
    if (stopped_) {
      FUZZ_CHECK(n == 0, "drain after shutdown returned " << n);
      return;
    }
    FUZZ_CHECK(n >= definite && n <= definite + ambiguous,
               "drain returned " << n << ", expected " << definite << ".." << definite + ambiguous);
    for (std::size_t i = 0; i < runs_before.size(); ++i) {
      MTimer& t = timers_[i];
      if (t.periodic && was_pending[i]) {
        FUZZ_CHECK(t.runs == runs_before[i] + 1, "drain ran periodic #" << i << " " << t.runs - runs_before[i]
                                                                        << " times");
      }
      if (!t.periodic) FUZZ_CHECK(t.st != MTimer::St::pending, "drain left one-shot #" << i << " pending");
      if (t.st != MTimer::St::pending) t.settled = true;
    }
  }

  void op_state() {
    const Target tg = pick_target();
    // The answer may be newer than the model (a ripe one-shot may run meanwhile): what is allowed is decided
    // from the model before the call.
    unsigned allowed = bit(TimerState::unknown);
    std::string model = "forged/default id";
    if (tg.index) {
      const MTimer& t = timers_[*tg.index];
      model = "timer #" + std::to_string(*tg.index) + " model state " + std::to_string(int(t.st)) + " due " +
              std::to_string(t.due) + " clock " + std::to_string(c_);
      switch (t.st) {
        case MTimer::St::pending:
          allowed = !may_run(t)
                        ? bit(TimerState::pending)
                        : bit(TimerState::pending) | bit(TimerState::running) | bit(TimerState::fired) |
                              (sched_count_ != t.ripe_sched ? bit(TimerState::unknown) : 0);
          break;
        case MTimer::St::fired:
          allowed = bit(TimerState::fired) | (t.settled ? 0 : bit(TimerState::running)) |
                    (sched_count_ != t.terminal_sched ? bit(TimerState::unknown) : 0);
          break;
        case MTimer::St::cancelled:
          allowed = bit(TimerState::cancelled) | (sched_count_ != t.terminal_sched ? bit(TimerState::unknown) : 0);
          break;
      }
    }
    const TimerState s = rt_->state(tg.id);
    FUZZ_TRACE("state of " << model << " = " << state_name(s));
    FUZZ_CHECK((allowed & bit(s)) != 0, "state of " << model << " is " << state_name(s));
  }

  void op_forged_id() {
    const TimerId id = in_.flag() ? TimerId{} : forged_id();
    FUZZ_TRACE("forged id slot=" << id.slot() << " gen=" << id.generation() << " tag=" << id.runtime()
                                 << " (ours " << tag_ << ")");
    FUZZ_CHECK(rt_->state(id) == TimerState::unknown, "state of a forged id");
    FUZZ_CHECK(!rt_->cancel(id) && !producer_->cancel(id), "cancel of a forged id returned true");
    FUZZ_CHECK(rt_->try_cancel(id) == CancelResult::unknown && producer_->try_cancel(id) == CancelResult::unknown,
               "try_cancel of a forged id is not unknown");
    FUZZ_CHECK(rt_->cancel_and_wait(id) == CancelResult::unknown &&
                   producer_->cancel_and_wait(id) == CancelResult::unknown,
               "cancel_and_wait of a forged id is not unknown");
    const std::int64_t d = clamp64(std::min<i128>(limit() - 1, c_));
    FUZZ_CHECK(!rt_->reschedule_at(id, T(d)) && !producer_->reschedule_at(id, T(d)),
               "reschedule of a forged id returned true");
    if (other_rt_) {
      FUZZ_CHECK(other_rt_->state(other_id_) == TimerState::pending,
                 "the second runtime's timer is " << state_name(other_rt_->state(other_id_)));
    }
    process_runs();
  }

  void op_stats() {
    FUZZ_TRACE("stats");
    const chime::Stats s = rt_->stats();
    FUZZ_CHECK(s.scheduled == accepted_, "stats().scheduled " << s.scheduled << " != " << accepted_);
    FUZZ_CHECK(s.rescheduled == reschedules_, "stats().rescheduled " << s.rescheduled << " != " << reschedules_);
  }

  // After a flush, every count is exact.
  void check_stats_exact() {
    const chime::Stats s = rt_->stats();
    std::size_t definite = 0, possible = 0;
    live_bounds(definite, possible);
    std::size_t errors = 0;
    bool bad = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors = error_ids_.size();
      bad = bad_error_;
    }
    FUZZ_CHECK(s.scheduled == accepted_, "stats().scheduled " << s.scheduled << " != " << accepted_);
    FUZZ_CHECK(s.rescheduled == reschedules_, "stats().rescheduled " << s.rescheduled << " != " << reschedules_);
    FUZZ_CHECK(s.fired == runs_seen_, "stats().fired " << s.fired << " != runs " << runs_seen_);
    FUZZ_CHECK(s.cancelled == cancels_, "stats().cancelled " << s.cancelled << " != " << cancels_);
    FUZZ_CHECK(s.callback_errors == throws_, "stats().callback_errors " << s.callback_errors << " != " << throws_);
    FUZZ_CHECK(errors == throws_ && !bad, "on_error called " << errors << " times for " << throws_ << " throwing runs");
    FUZZ_CHECK(s.pending == definite, "stats().pending " << s.pending << " != " << definite);
    check_run_time(s);
  }

  // Run times and slow runs, once the runs are over (after a flush or shutdown): the percentiles are
  // ordered and at most max; every run is timed; slow_runs counts runs, each reported to on_slow_run;
  // with slow_run = 0 every run is slow.
  void check_run_time(const chime::Stats& s) {
    const chime::DurationStats& t = s.run_time;
    FUZZ_CHECK(t.p50 >= Duration{0} && t.p50 <= t.p99 && t.p99 <= t.p999 && t.p999 <= t.max,
               "run_time p50 " << t.p50.count() << " p99 " << t.p99.count() << " p999 " << t.p999.count()
                               << " max " << t.max.count() << " not ordered");
    FUZZ_CHECK(s.lateness.p50 <= s.lateness.p99 && s.lateness.p99 <= s.lateness.p999 &&
                   s.lateness.p999 <= s.lateness.max,
               "lateness percentiles not ordered");
    FUZZ_CHECK(s.slow_runs <= s.fired, "slow_runs " << s.slow_runs << " > fired " << s.fired);
    if (slow_all_) FUZZ_CHECK(s.slow_runs == s.fired, "slow_run = 0: slow_runs " << s.slow_runs << " != runs " << s.fired);
    if (s.fired == 0) FUZZ_CHECK(t.max == Duration{0} && s.slow_runs == 0, "run_time without runs");
    FUZZ_CHECK(slow_calls_.load(std::memory_order_relaxed) == s.slow_runs && !bad_slow_.load(),
               "on_slow_run called " << slow_calls_.load() << " times for " << s.slow_runs << " slow runs"
                                     << (bad_slow_.load() ? " (with a bad id or duration)" : ""));
  }

  void op_shutdown(chime::ShutdownMode mode) {
    std::size_t definite = 0;
    std::vector<std::uint64_t> runs_before(timers_.size());
    std::vector<bool> was_pending(timers_.size());
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      const MTimer& t = timers_[i];
      runs_before[i] = t.runs;
      was_pending[i] = t.st == MTimer::St::pending;
      if (t.st == MTimer::St::pending && !may_run(t)) ++definite;
    }
    const bool fire = mode == chime::ShutdownMode::fire_pending;
    FUZZ_TRACE("shutdown(" << (fire ? "fire_pending" : "cancel_pending") << ") expect " << (fire ? 0 : definite));
    if (fire) draining_.store(true, std::memory_order_release);
    const std::size_t n = rt_->shutdown(mode);
    draining_.store(false, std::memory_order_release);
    const bool was_stopped = stopped_;
    stopped_ = true;
    fire_shutdown_ = fire && !was_stopped;
    process_runs();
    fire_shutdown_ = false;
    if (was_stopped) {
      FUZZ_CHECK(n == 0, "a second shutdown returned " << n);
      return;
    }
    FUZZ_CHECK(n == (fire ? 0 : definite), "shutdown returned " << n << ", expected " << (fire ? 0 : definite));
    for (std::size_t i = 0; i < runs_before.size(); ++i) {
      MTimer& t = timers_[i];
      if (t.periodic && was_pending[i]) {
        FUZZ_CHECK(t.runs == runs_before[i] + (fire ? 1 : 0),
                   "shutdown ran periodic #" << i << " " << t.runs - runs_before[i] << " times");
      }
      if (t.st == MTimer::St::pending) {
        FUZZ_CHECK(!fire, "shutdown(fire_pending) left timer #" << i << " pending");
        if (!t.periodic) {
          FUZZ_CHECK(!ripe(t.due) && !t.ambiguous, "shutdown left ripe or due-now one-shot #" << i << " (due "
                                                                                             << t.due << ") unrun");
        }
        t.st = MTimer::St::cancelled;  // by the sweep
        t.terminal_sched = sched_count_;
        ++cancels_;
      }
      t.settled = true;
    }
    check_stats_final();
  }

  void check_stats_final() {
    const chime::Stats s = rt_->stats();
    FUZZ_CHECK(s.scheduled == accepted_ && s.fired == runs_seen_ && s.cancelled == cancels_ && s.pending == 0 &&
                   s.callback_errors == throws_ && s.rescheduled == reschedules_,
               "stats after shutdown: scheduled " << s.scheduled << "/" << accepted_ << " fired " << s.fired << "/"
                                                  << runs_seen_ << " cancelled " << s.cancelled << "/" << cancels_
                                                  << " pending " << s.pending << " errors " << s.callback_errors << "/"
                                                  << throws_ << " rescheduled " << s.rescheduled << "/"
                                                  << reschedules_);
    check_run_time(s);
  }

  void after_shutdown_checks() {
    FUZZ_CHECK(rt_->shutdown() == 0, "a second shutdown returned non-zero");
    rt_->flush();
    FUZZ_CHECK(rt_->drain() == 0, "drain after shutdown returned non-zero");
    bool stopped = false;
    try {
      (void)rt_->schedule_after(Duration{0}, [] {});
    } catch (const chime::StoppedError&) {
      stopped = true;
    }
    FUZZ_CHECK(stopped, "schedule after shutdown did not throw StoppedError");
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      const MTimer& t = timers_[i];
      const TimerState s = rt_->state(t.id);
      const TimerState want = t.st == MTimer::St::fired ? TimerState::fired : TimerState::cancelled;
      // After shutdown no slot is reused again, but one may have been before it.
      FUZZ_CHECK(s == want || (s == TimerState::unknown && sched_count_ != t.terminal_sched),
                 "after shutdown, timer #" << i << " is " << state_name(s) << ", expected " << state_name(want));
      FUZZ_CHECK(!rt_->cancel(t.id), "cancel after shutdown returned true");
      const CancelResult tc = rt_->try_cancel(t.id);
      const CancelResult cw = producer_->cancel_and_wait(t.id);
      const bool reused = sched_count_ != t.terminal_sched;
      FUZZ_CHECK((tc == CancelResult::done || (reused && tc == CancelResult::unknown)) && tc == cw,
                 "after shutdown, try_cancel / cancel_and_wait of timer #" << i << " are " << result_name(tc) << " / "
                                                                           << result_name(cw));
    }
    process_runs();
    check_stats_final();
  }

  // Takes the runs recorded by callbacks and checks each against the model.
  void process_runs() {
    std::vector<Run> runs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs.swap(runs_);
    }
    for (const Run& r : runs) check_run(r);
  }

  void check_run(const Run& r) {
    ++runs_seen_;
    FUZZ_CHECK(r.tag < timers_.size(), "a run of an unknown timer tag " << r.tag);
    MTimer& t = timers_[r.tag];
    const std::int64_t due = N(r.firing.due);
    const std::int64_t fired_at = N(r.firing.fired_at);
    const std::string who = "run of " + std::string(t.periodic ? "periodic" : "one-shot") + " #" +
                            std::to_string(r.tag) + " (due " + std::to_string(due) + ", fired_at " +
                            std::to_string(fired_at) + ", clock " + std::to_string(r.clock_at_start) + ")";
    FUZZ_TRACE("  " << who << " missed " << r.firing.missed << (r.draining ? " drained" : ""));
    FUZZ_CHECK(r.firing.id == t.id, who << ": Firing::id is not the timer's id");
    FUZZ_CHECK(t.st == MTimer::St::pending, who << ": the timer is " << (t.st == MTimer::St::fired ? "fired" : "cancelled"));
    FUZZ_CHECK(r.state_inside == TimerState::running, who << ": state inside the callback is " << state_name(r.state_inside));
    FUZZ_CHECK(r.blocking_refused, who << ": flush/drain/shutdown inside a callback did not throw logic_error");
    FUZZ_CHECK(fired_at <= r.clock_at_start, who << ": fired_at is after the clock");
    if (!r.draining) {
      // Never early: a run due now at its application (a one-shot's only run, a periodic's first after such an
      // application) never before its due by the clock; any other not before interval_start(due) + precision.
      const bool due_now = t.periodic ? t.due_now : t.ambiguous;
      if (due_now) {
        FUZZ_CHECK(due <= fired_at, who << ": a run due now at its application ran before its due");
      } else {
        FUZZ_CHECK(ripe_at(due) <= fired_at && ripe_at(due) <= r.clock_at_start,
                   who << ": ran before interval_start(due) + precision = "
                       << static_cast<std::int64_t>(ripe_at(due)));
      }
    }
    ++t.runs;
    if (t.action == Action::throw_std || t.action == Action::throw_other) ++throws_;
    // A callback that cancelled itself: its run is in progress, so state(self) is still running, and
    // try_cancel / cancel_and_wait say `running` (the latter without waiting for itself). A periodic timer's
    // later runs are cancelled (C3): the first cancel is true (try_cancel: running), a second is false.
    const bool self_cancel = t.action == Action::cancel_self || t.action == Action::try_cancel_self ||
                             t.action == Action::wait_self;
    if (self_cancel) {
      FUZZ_CHECK(r.state_after == TimerState::running,
                 who << ": state(self) after cancelling itself in its run is " << state_name(r.state_after));
    }
    if (t.action == Action::try_cancel_self || t.action == Action::wait_self) {
      FUZZ_CHECK(r.self_cancel == CancelResult::running,
                 who << ": " << (t.action == Action::wait_self ? "cancel_and_wait" : "try_cancel")
                     << " of itself in its run is " << result_name(r.self_cancel));
    }
    if (t.action == Action::try_cancel_self) {
      FUZZ_CHECK(!r.self_result, who << ": a second cancel of itself (after try_cancel) returned true");
    }
    if (!t.periodic) {
      FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": model due " << t.due);
      if (t.action == Action::cancel_self || t.action == Action::reschedule_self) {
        FUZZ_CHECK(!r.self_result, who << ": cancel/reschedule of itself while running returned true");
      }
      t.st = MTimer::St::fired;
      t.terminal_sched = t.ambiguous ? t.ripe_sched : sched_count_;
      t.settled = false;
      return;
    }
    // Periodic. Never runnable outside a flush, so every run outside drain() and shutdown(fire_pending) is due.
    if (r.draining) {
      // drain() / shutdown(fire_pending): the next run, early, with its own due; the schedule stays.
      FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": a drained run, model next due " << t.due);
    } else {
      // The runs that may run now: up to the clock (fired_at) when due now at its application, else those due
      // before the boundary (the start of the wheel's interval). Missed::skip and delay coalesce them into the
      // latest; catch_up runs the first (and its re-arms the others).
      const i128 boundary = interval_start(fired_at);
      const i128 last = t.due_now ? std::max<i128>(boundary - 1, fired_at) : boundary - 1;
      FUZZ_CHECK(t.due <= last, who << ": model next due " << t.due << " is after "
                                    << static_cast<std::int64_t>(last) << (t.due_now ? " (due now)" : ""));
      if (t.on_missed != Missed::catch_up) {
        const i128 k = (last - t.due) / t.period;
        const i128 want = t.due + k * t.period;
        FUZZ_CHECK(due == want && r.firing.missed == static_cast<std::uint64_t>(k),
                   who << ": " << missed_name(t.on_missed) << " expected due " << static_cast<std::int64_t>(want)
                       << " missed " << static_cast<std::int64_t>(k) << ", got missed " << r.firing.missed
                       << (t.due_now ? " (due now)" : ""));
        // delay: the fixed rate restarts from the end of the run, on the runtime clock (the ManualClock does
        // not move while a run is in progress).
        t.due = t.on_missed == Missed::delay ? clamp64(static_cast<i128>(r.clock_at_start) + t.period)
                                             : clamp64(want + t.period);
      } else {
        FUZZ_CHECK(due == t.due && r.firing.missed == 0, who << ": catch_up expected due " << t.due);
        t.due = clamp64(static_cast<i128>(t.due) + t.period);
      }
      t.due_now = false;  // its re-arms keep the interval rule
    }
    if (t.action == Action::reschedule_self) FUZZ_CHECK(!r.self_result, who << ": reschedule of itself returned true");
    if (t.action == Action::cancel_self) {
      FUZZ_CHECK(r.self_result, who << ": a periodic timer cancelling itself inside its run got false");
    }
    if (self_cancel) {
      mark_cancelled(t);
    } else if (fire_shutdown_) {
      t.st = MTimer::St::fired;  // shutdown(fire_pending): its last run
      t.terminal_sched = sched_count_;
    }
  }

  Input& in_;
  std::int64_t p_ = 1;
  std::vector<int> bits_v_;
  int num_bits_ = 0;
  std::int64_t start_ = 0;
  i128 k_max_ = 0;
  std::size_t max_pending_ = 0;
  unsigned workers_ = 0;
  bool slow_all_ = false;   // RuntimeOptions::slow_run = 0: every run counts as slow
  std::uint32_t tag_ = 0;   // this runtime's tag (from the first id it issued; 0 before)
  std::optional<chime::ManualClock> other_clock_;  // a second runtime, for ids from another runtime
  std::optional<chime::Runtime> other_rt_;
  TimerId other_id_;
  std::optional<chime::ManualClock> clock_;
  std::optional<chime::Runtime> rt_;
  std::optional<chime::Producer> producer_;
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

void Callback::operator()(const chime::Firing& f) const { h->on_run(tag, f); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  chime_fuzz::Trace::get().reset();
  Input in(data, size);
  try {
    RuntimeFuzz(in).run();
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: " << e.what());
  }
  return 0;
}
