// SPDX-License-Identifier: BSL-1.0
// runtime/timer.cpp: chime::Timer (include/chime/timer.hpp), a reusable
// handle on top of the runtime's one-shot and periodic timers.
//
// How: the handle's state (TimerHandleState) lives on the heap, at a fixed
// address, for the handle's life. Each arm schedules a runtime timer whose
// task is a trampoline (one pointer, stored inline in the slot: no
// allocation) that runs the handle's one Task. A small mutex guards the
// handle's bookkeeping; it is never held while the Task runs, nor while
// waiting for a run.
//
// Invariants (all under the mutex):
// - `current` is the runtime timer the last arm scheduled; `stopped` says we
//   cancelled it (or could not keep it), so it no longer counts as armed.
// - `in_run` is true from the moment the trampoline enters a run until it
//   has finished its bookkeeping after the Task returned; `last_run` is the
//   id of the latest run the trampoline entered.
// - An arm made while a run is in progress (in_run, or a run that has
//   started (B1) but whose trampoline has not yet entered: try_cancel says
//   running and last_run != current) is kept in `deferred` and scheduled by
//   the trampoline when the run returns: runs never overlap, and the arm is
//   never lost.
// - `dying` (the destructor has begun): the trampoline schedules nothing.
//
// Teardown (disarm_and_wait, the destructor): cancel_and_wait(current)
// stops a pending run or waits for the one in progress; cancel_and_wait
// (last_run) then waits for a previous run whose trampoline may still be
// returning (it scheduled `current` from its bookkeeping). Both return only
// after the worker's end-of-run transition, which comes after the
// trampoline has returned, so the state is never freed under a running
// trampoline.
#include "chime/timer.hpp"

#include "chime/lane.hpp"

#include <mutex>
#include <thread>

#include "runtime_core.hpp"

namespace chime {
namespace detail {

struct TimerHandleState {
  // What an arm asks for: its due, period, missed rule and slack (the lane
  // fields are the Timer's own: request() fills them in).
  using Arm = ScheduleRequest;

  TimerHandleState(RuntimeCore& runtime, Task t, LaneCore* l = nullptr, std::uint32_t l_generation = 0)
      : rt(runtime), alive(runtime.alive()), lane(l), lane_generation(l_generation), task(std::move(t)) {}

  // False once the Runtime is destroyed: nothing of it may be touched.
  bool runtime_alive() const noexcept { return (*alive)(); }

  // The trampoline's body: one run of the Task. If the Timer was destroyed
  // (or assigned over) from this run's own callback, the state was handed
  // to this run (`orphaned`): it is freed here, after the Task returned, and
  // nothing of it is touched afterwards.
  void run(const Firing& f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      // A run of a timer this handle has replaced: it began (B1) before an
      // arm on another thread cancelled it, but had not entered here, so
      // the arm could not tell it from a run that had returned (a periodic
      // timer's runs share its id). It does not run beside the replacing
      // timer's runs: it ends without the task. (The destructor waits for
      // it: it is last_run's timer, whose earlier run entered.)
      if (f.id != current) [[unlikely]]
        return;
      in_run = true;
      runner = std::this_thread::get_id();
      last_run = f.id;
    }
    try {
      task(f);
    } catch (...) {
      if (after_run()) delete this;
      throw;  // to the runtime: counted, passed to on_error
    }
    if (after_run()) delete this;
  }

  // True iff the state is orphaned: the caller frees it (after the lock is
  // released).
  bool after_run() noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    in_run = false;
    runner = std::thread::id();
    if (orphaned) return true;
    if (!deferred) return false;
    const Arm a = *deferred;
    deferred.reset();
    if (dying) return false;
    try {
      schedule_locked(a);
    } catch (...) {
      // Checked when the arm was made; shutdown or max_pending reached since:
      // the Timer is left disarmed (timer.hpp, Errors).
    }
    return false;
  }

  // Throws std::logic_error if the Timer's lane was destroyed: its LaneCore
  // may serve another Lane by now (generation bumped), which must never get
  // this Timer's runs. acquire: pairs with close_lane's release bump.
  void check_lane(const char* what) const {
    if (lane != nullptr && lane->generation.load(std::memory_order_acquire) != lane_generation) {
      throw std::logic_error(std::string("chime::Timer::") + what +
                             " on a Timer whose Lane was destroyed (a Timer must not outlive its Lane)");
    }
  }

  // Schedules `a` as the current timer (nothing is armed). Throws what
  // schedule throws, leaving the Timer disarmed: only for an arm deferred
  // until a run returned (after_run). A lane's timer is scheduled with the
  // generation the Timer was made with: if the lane is destroyed meanwhile,
  // the wheel thread cancels it (L1), never hands it to the lane's next user.
  void schedule_locked(const Arm& a) {
    stopped = true;
    check_lane("arm");
    current = rt.producer_ops().schedule(request(a), trampoline(), nullptr);
    periodic = a.period_ns != 0;
    slack_code = a.slack_code;
    stopped = false;
  }

  ScheduleRequest request(const Arm& a) const noexcept {
    ScheduleRequest q = a;
    q.lane = lane;
    q.lane_generation = lane_generation;
    return q;
  }

  Task trampoline() {
    return Task([this](const Firing& f) { run(f); });
  }

  // An arm replaces the pending run only once the new one is sure to be
  // accepted: everything that can refuse it (the range, shutdown, the
  // queue's bound, max_pending, memory for the slot, for its side record and
  // for its ADD in the queue) is checked and reserved first (reserve_schedule,
  // then reserve_add, which queues the ADD before the timer is published),
  // so an arm that throws leaves the Timer as it was.
  void arm(const Arm& a) {
    std::lock_guard<std::mutex> lock(mutex);
    if (dying) return;  // an arm from a callback racing the destructor: dropped
    check_lane("arm");
    if (in_run) {
      defer_locked(a);
      return;
    }
    // A run to replace: pending (one-shot), or pending or running (periodic).
    const TimerState now = current && !stopped ? rt.producer_ops().state(current) : TimerState::unknown;
    const bool replaces = now == TimerState::pending || (periodic && now == TimerState::running);
    // The fast path: a pending one-shot moved to the new due in place (a
    // later due posts no command). Throws std::out_of_range for a due
    // beyond the range, leaving the timer as it was.
    // (Only with the same slack: a reschedule keeps the timer's.)
    if (replaces && !periodic && a.period_ns == 0 && a.slack_code == slack_code &&
        rt.producer_ops().reschedule(current, a.due, nullptr)) {
      return;
    }
    // The run it replaces ends below (or has already): max_pending may be
    // exceeded by it meanwhile.
    ProducerOps::ScheduleReservation r = rt.producer_ops().reserve_schedule(a.due, nullptr, lane, replaces ? 1 : 0);
    try {
      // A periodic or lane timer needs the slot's side record (the
      // trampoline always fits in the slot).
      rt.producer_ops().reserve_add(r, a.period_ns != 0, a.period_ns != 0 || lane != nullptr);
    } catch (...) {
      rt.producer_ops().release_reservation(r);
      throw;
    }
    if (current) {
      const CancelResult c = rt.producer_ops().try_cancel(current);
      if (c == CancelResult::running && last_run != current) {
        // Started (B1), but the trampoline has not entered yet: it will run
        // the deferred arm when it returns.
        rt.producer_ops().release_reservation(r);
        defer_locked(a);
        return;
      }
    }
    stopped = true;
    // Only shutdown, begun since the reservation, can refuse it now: the
    // Timer is then disarmed, as shutdown would have left it.
    current = rt.producer_ops().commit_schedule(r, request(a), trampoline());
    periodic = a.period_ns != 0;
    slack_code = a.slack_code;
    stopped = false;
  }

  void defer_locked(const Arm& a) {
    rt.producer_ops().check_schedulable("Timer::arm", a.due);
    // A periodic timer whose run is in progress runs no more (C3).
    if (current && periodic && !stopped) rt.producer_ops().cancel(current, nullptr);
    stopped = true;
    deferred = a;
  }

  RuntimeCore& rt;
  std::shared_ptr<const RuntimeAlive> alive;  // runtime.hpp
  LaneCore* lane;                             // runs go to this lane; null: to the workers
  std::uint32_t lane_generation;              // the lane's generation when the Timer was made (lane_core.hpp)
  Task task;
  mutable std::mutex mutex;
  TimerId current;
  bool periodic = false;
  std::uint8_t slack_code = SlackCode::runtime_default;  // the current run's (slack.hpp)
  bool stopped = true;
  bool in_run = false;
  std::thread::id runner;
  TimerId last_run;
  std::optional<Arm> deferred;
  bool dying = false;
  // The Timer was destroyed (or assigned over) from this state's own
  // callback: the run in progress owns the state and frees it when the
  // callback has returned (run()).
  bool orphaned = false;
};

}  // namespace detail

namespace {
[[noreturn]] void throw_empty(const char* what) {
  throw std::logic_error(std::string("chime::Timer::") + what +
                         " on an empty Timer (default-constructed or moved-from)");
}
}  // namespace

Timer::Timer() noexcept = default;

Timer::Timer(Runtime& runtime, Task task)
    : state_(std::make_unique<detail::TimerHandleState>(*runtime.core_, std::move(task))) {}

Timer::Timer(Lane& lane, Task task) {
  if (!lane) throw std::logic_error("chime::Timer(lane, task) on an empty Lane (default-constructed or moved-from)");
  lane.check("Timer(lane, task)");  // its runtime is gone
  // relaxed: the Lane is alive, so its generation is stable.
  state_ = std::make_unique<detail::TimerHandleState>(*lane.core_, std::move(task), lane.lane_,
                                                      lane.lane_->generation.load(std::memory_order_relaxed));
}

Timer::Timer(Timer&& other) noexcept = default;

Timer& Timer::operator=(Timer&& other) noexcept {
  if (this != &other) {
    close();  // as the destructor: our old task no longer runs
    state_ = std::move(other.state_);
  }
  return *this;
}

Timer::~Timer() { close(); }

// The destructor's work (and a move-assignment's over this Timer):
// disarm_and_wait, then free the state. From the Timer's own callback the
// run in progress is on this thread's stack, using the Task in the state:
// the state is handed to that run (orphaned), which frees it when the
// callback has returned (TimerHandleState::run), so the callback's closure
// stays alive until then and nothing of this Timer is touched afterwards.
void Timer::close() noexcept {
  if (!state_) return;
  if (!state_->runtime_alive()) {
    // Its runtime is gone (shutdown cancelled its runs and joined its
    // threads): only the state is left to free.
    state_.reset();
    return;
  }
  bool from_own_callback;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->dying = true;
    from_own_callback = state_->in_run && state_->runner == std::this_thread::get_id();
  }
  disarm_and_wait();  // from the own callback: does not wait for the run
  if (from_own_callback) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->orphaned = true;
    state_.release();  // NOLINT(bugprone-unused-return-value): the run frees it
    return;
  }
  state_.reset();
}

void Timer::check_armable(const char* what) const {
  if (!state_) throw_empty(what);
  if (!state_->runtime_alive()) detail::throw_runtime_gone("Timer");
}

void Timer::arm_at(TimePoint due, ScheduleOptions options) {
  check_armable("arm_at");
  state_->arm({due, 0, Missed::skip, state_->rt.config().slack_code(options.slack, "Timer::arm_at")});
}

void Timer::arm_after(Duration delay, ScheduleOptions options) {
  check_armable("arm_after");
  const std::uint8_t slack_code = state_->rt.config().slack_code_after(options.slack, delay, "Timer::arm_after");
  state_->arm({detail::saturating_after(state_->rt.now(), delay), 0, Missed::skip, slack_code});
}

void Timer::arm_every(Duration period, PeriodicOptions options) {
  check_armable("arm_every");
  const std::uint8_t slack_code = state_->rt.config().slack_code(options.slack, "Timer::arm_every");
  if (period <= Duration::zero()) {
    throw std::invalid_argument("chime::Timer::arm_every needs a positive period, got " +
                                std::to_string(period.count()) + " ns");
  }
  const TimePoint first = options.first_due ? *options.first_due : detail::saturating_after(state_->rt.now(), period);
  state_->arm({first, period.count(), options.on_missed, slack_code});
}

bool Timer::disarm() {
  if (!state_ || !state_->runtime_alive()) return false;  // its runtime cancelled everything at shutdown
  std::lock_guard<std::mutex> lock(state_->mutex);
  bool prevented = state_->deferred.has_value();
  state_->deferred.reset();
  if (state_->current && !state_->stopped) {
    prevented = state_->rt.producer_ops().cancel(state_->current, nullptr) || prevented;
    state_->stopped = true;
  }
  return prevented;
}

CancelResult Timer::disarm_and_wait() {
  if (!state_ || !state_->runtime_alive()) return CancelResult::done;
  TimerId current, last_run;
  bool had_deferred;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    had_deferred = state_->deferred.has_value();
    state_->deferred.reset();
    current = state_->current;
    last_run = state_->last_run;
    state_->stopped = true;
  }
  // Outside the lock: the run we wait for takes it when it returns. From the
  // Timer's own callback, cancel_and_wait does not wait for that run.
  const CancelResult r = current ? state_->rt.producer_ops().cancel_and_wait(current) : CancelResult::done;
  if (last_run && last_run != current) state_->rt.producer_ops().cancel_and_wait(last_run);
  return had_deferred ? CancelResult::cancelled : r;
}

bool Timer::armed() const {
  if (!state_ || !state_->runtime_alive()) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->deferred) return true;
  if (!state_->current || state_->stopped) return false;
  const TimerState s = state_->rt.producer_ops().state(state_->current);
  return s == TimerState::pending || (s == TimerState::running && state_->periodic);
}

std::optional<TimePoint> Timer::due() const {
  if (!state_ || !state_->runtime_alive()) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->deferred) return state_->deferred->due;
  if (!state_->current || state_->stopped) return std::nullopt;
  return state_->rt.producer_ops().pending_due(state_->current);
}

TimerId Timer::id() const {
  if (!state_) return TimerId{};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->deferred ? TimerId{} : state_->current;
}

}  // namespace chime
