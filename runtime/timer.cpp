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
  struct Arm {
    TimePoint due;
    std::int64_t period_ns = 0;  // 0: one-shot
    Missed on_missed = Missed::skip;
  };

  TimerHandleState(RuntimeCore& runtime, Task t, LaneCore* l = nullptr) : rt(runtime), lane(l), task(std::move(t)) {
    rt.live_timer_handles().fetch_add(1, std::memory_order_relaxed);
  }
  ~TimerHandleState() {
    // release: pairs with the runtime destructor's acquire load of the count.
    rt.live_timer_handles().fetch_sub(1, std::memory_order_release);
  }

  // The trampoline's body: one run of the Task.
  void run(const Firing& f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      in_run = true;
      runner = std::this_thread::get_id();
      last_run = f.id;
    }
    try {
      task(f);
    } catch (...) {
      after_run();
      throw;  // to the runtime: counted, passed to on_error
    }
    after_run();
  }

  void after_run() noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    in_run = false;
    runner = std::thread::id();
    if (!deferred) return;
    const Arm a = *deferred;
    deferred.reset();
    if (dying) return;
    try {
      schedule_locked(a);
    } catch (...) {
      // Checked when the arm was made; shutdown or max_pending reached since:
      // the Timer is left disarmed (timer.hpp, Errors).
    }
  }

  // Schedules `a` as the current timer. Throws what schedule throws, leaving
  // the Timer disarmed.
  void schedule_locked(const Arm& a) {
    stopped = true;
    current = rt.schedule(a.due, a.period_ns, a.on_missed, Task([this](const Firing& f) { run(f); }), nullptr, lane);
    periodic = a.period_ns != 0;
    stopped = false;
  }

  void arm(const Arm& a) {
    std::lock_guard<std::mutex> lock(mutex);
    if (dying) return;  // an arm from a callback racing the destructor: dropped
    if (in_run) {
      defer_locked(a);
      return;
    }
    if (current) {
      // The fast path: a pending one-shot moved to the new due in place
      // (a later due posts no command). Throws std::out_of_range for a due
      // beyond the range, leaving the timer as it was.
      if (!stopped && !periodic && a.period_ns == 0 && rt.reschedule(current, a.due, nullptr)) return;
      const CancelResult r = rt.try_cancel(current);
      if (r == CancelResult::running && last_run != current) {
        // Started (B1), but the trampoline has not entered yet: it will run
        // the deferred arm when it returns.
        defer_locked(a);
        return;
      }
    }
    schedule_locked(a);
  }

  void defer_locked(const Arm& a) {
    rt.check_schedulable("Timer::arm", a.due);
    // A periodic timer whose run is in progress runs no more (C3).
    if (current && periodic && !stopped) rt.cancel(current, nullptr);
    stopped = true;
    deferred = a;
  }

  RuntimeCore& rt;
  LaneCore* lane;  // runs go to this lane; null: to the workers
  Task task;
  mutable std::mutex mutex;
  TimerId current;
  bool periodic = false;
  bool stopped = true;
  bool in_run = false;
  std::thread::id runner;
  TimerId last_run;
  std::optional<Arm> deferred;
  bool dying = false;
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
  state_ = std::make_unique<detail::TimerHandleState>(*lane.core_, std::move(task), lane.lane_);
}

Timer::Timer(Timer&& other) noexcept = default;

Timer& Timer::operator=(Timer&& other) noexcept {
  if (this != &other) {
    if (state_) {
      disarm_and_wait();  // as the destructor: our old task no longer runs
      state_.reset();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Timer::~Timer() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    CHIME_ASSERT(!(state_->in_run && state_->runner == std::this_thread::get_id()),
                 "a chime::Timer destroyed (or move-assigned) from its own callback");
    state_->dying = true;
  }
  disarm_and_wait();
}

void Timer::arm_at(TimePoint due) {
  if (!state_) throw_empty("arm_at");
  state_->arm({due, 0, Missed::skip});
}

void Timer::arm_after(Duration delay) {
  if (!state_) throw_empty("arm_after");
  state_->arm({detail::saturating_after(state_->rt.now(), delay), 0, Missed::skip});
}

void Timer::arm_every(Duration period, PeriodicOptions options) {
  if (!state_) throw_empty("arm_every");
  if (period <= Duration::zero()) {
    throw std::invalid_argument("chime::Timer::arm_every needs a positive period, got " +
                                std::to_string(period.count()) + " ns");
  }
  const TimePoint first = options.first_due ? *options.first_due : detail::saturating_after(state_->rt.now(), period);
  state_->arm({first, period.count(), options.on_missed});
}

bool Timer::disarm() {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  bool prevented = state_->deferred.has_value();
  state_->deferred.reset();
  if (state_->current && !state_->stopped) {
    prevented = state_->rt.cancel(state_->current, nullptr) || prevented;
    state_->stopped = true;
  }
  return prevented;
}

CancelResult Timer::disarm_and_wait() {
  if (!state_) return CancelResult::done;
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
  CancelResult r = current ? state_->rt.cancel_and_wait(current) : CancelResult::done;
  if (last_run && last_run != current) state_->rt.cancel_and_wait(last_run);
  if (r == CancelResult::unknown) r = CancelResult::done;  // its slot was reused long after it ended
  return had_deferred ? CancelResult::cancelled : r;
}

bool Timer::armed() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->deferred) return true;
  if (!state_->current || state_->stopped) return false;
  const TimerState s = state_->rt.state(state_->current);
  return s == TimerState::pending || (s == TimerState::running && state_->periodic);
}

std::optional<TimePoint> Timer::due() const {
  if (!state_) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->deferred) return state_->deferred->due;
  if (!state_->current || state_->stopped) return std::nullopt;
  return state_->rt.pending_due(state_->current);
}

TimerId Timer::id() const {
  if (!state_) return TimerId{};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->deferred ? TimerId{} : state_->current;
}

}  // namespace chime
