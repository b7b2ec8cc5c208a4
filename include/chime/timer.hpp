// SPDX-License-Identifier: BSL-1.0
// chime/timer.hpp: chime::Timer, a reusable timer handle (RAII).
//
// What it is: the object a server or a game holds per connection or entity
// (Linux timer_list + mod_timer, Go's time.Timer.Reset, Tokio's
// Sleep::reset, Folly's HHWheelTimer::Callback). It is bound to a Runtime
// and keeps one task, which every arm reuses:
//
//   chime::Timer t(rt, [&](const chime::Firing& f) { ... });   // bound, not armed
//   t.arm_after(30s);        // arm, or re-arm: replaces a pending due time
//   t.arm_after(30s);        // a later due: the reschedule fast path (no wheel round trip)
//   t.disarm();              // true iff a pending run was prevented
//   // ~Timer(): disarm_and_wait(): the task no longer runs, and is destroyed
//
// Guarantees, each with its ID:
// G40 (timer runs): the task is invoked once per arm (or per period), never concurrently
//   with itself: an arm made while a run is in progress (from inside the
//   callback, which is how variable-delay self-rescheduling is written, or
//   from another thread) takes effect when that run returns.
// G41 (timer re-arms): after a run finished or after a disarm, arming arms it again.
// G42 (timer touch): re-arming an armed one-shot to a later time takes the runtime's
//   reschedule fast path (a CAS on the timer's state word; no command).
// G43 (timer allocation): no allocation per arm: each arm schedules a runtime timer whose task is
//   an 8-byte trampoline to this handle's state (stored inline in the slot).
// G44 (timer destructor): the destructor is disarm_and_wait(): when it returns, no run is pending
//   or in progress (a run that started finishes first; an arm its callback
//   makes meanwhile is dropped), and the task is destroyed. This holds even
//   when the destructor races a run that re-arms the timer on a worker.
// G45 (timer shutdown): at shutdown an armed Timer's pending run is fired or cancelled as the
//   mode says, like any pending timer; arming after shutdown throws
//   chime::StoppedError.
// G46 (timer own callback): destroying a Timer, or assigning another Timer to it, from inside its
//   own callback is allowed (the idle handler that erases the connection
//   owning the Timer): as with Asio's timers, the running callback's closure
//   stays alive until the callback returns, and nothing of the destroyed
//   Timer is touched after that; no further run starts.
//
// Preconditions, and what is detected (in every build unless said):
// - A Timer does not outlive its Runtime. Detected: arming it afterwards
//   throws std::logic_error (one load per arm); disarm / armed / due answer
//   "nothing armed" and destroying it touches nothing of the runtime. Not
//   detected: a use racing the Runtime's destruction.
// - A lane's Timer does not outlive its Lane. Detected: arming it afterwards
//   throws std::logic_error, also once another Lane reuses the lane's core,
//   and its runs are never delivered to another lane (an arm racing the
//   Lane's destruction is cancelled by the wheel thread).
// - Used from one thread at a time, its own callback included. Calls from
//   several threads are serialized by a small mutex in the handle
//   (uncontended in the intended use), so they are safe, not ordered.
//
// G47 (timer errors): arming an empty Timer (default-constructed or moved-from), one
// whose Runtime or Lane is gone, throws std::logic_error; a due time beyond the wheel's range throws
// std::out_of_range, a period <= 0 std::invalid_argument, after shutdown
// chime::StoppedError, with the command queue at max_queue_depth or over
// max_pending chime::CapacityError, all naming the values and all at the
// arm call; out of memory for what the new timer needs, std::bad_alloc. An
// arm that throws leaves the Timer exactly as it was: its pending run
// (one-shot or periodic) is kept, because the new timer is validated and
// its slot, its side record and its ADD's place in the command queue are
// reserved before the pending run is replaced, so an arm never waits for
// memory. A
// re-arm that replaces a pending run counts in max_pending in its place
// (the two may exceed it by one until the replaced run has ended). The one
// exception: an arm that races shutdown may throw StoppedError after its
// pending run was cancelled (as shutdown(cancel_pending) would have).
// An arm deferred until a run returns is checked when it is made,
// and if the schedule then still fails (shutdown, or capacity or the queue's
// bound reached meanwhile) the Timer is left disarmed. A re-arm to a later
// due of a pending timer (the touch) posts nothing and is never refused.
//
// Memory ordering: everything a thread did before an arm_* happens-before
// the run that arm makes; everything a run did happens-before the next run
// of the same Timer (runs never overlap), and before a disarm_and_wait (or
// the destructor) that waited for it returns. disarm() returning true means
// the prevented run never starts; it does not wait for, nor order anything
// with, a run already in progress.
//
// Contract lines below: which threads may call, whether the call blocks,
// whether it allocates, what it throws. "Any thread" calls take the
// handle's mutex for a few loads and stores (never while the task runs or
// while waiting for a run), so they block only on each other.
#pragma once

#include <memory>
#include <optional>

#include "chime/runtime.hpp"

namespace chime {

namespace detail {
struct TimerHandleState;
}
class Lane;  // chime/lane.hpp

class Timer {
 public:
  // Empty: arming it throws std::logic_error.
  Timer() noexcept;
  // Bound to `runtime`, not armed; `task` is kept and reused by every arm.
  // Any thread. Allocates the handle's state once (std::bad_alloc).
  Timer(Runtime& runtime, Task task);
  // Bound to `lane`: its runs go to the lane's thread (chime/lane.hpp). The
  // lane must outlive the Timer (arming it after that throws). Any thread.
  // Allocates the handle's state once. Throws std::logic_error for an empty
  // Lane or one whose Runtime is gone.
  Timer(Lane& lane, Task task);
  // Never blocks, never allocates.
  Timer(Timer&& other) noexcept;
  // Disarms and waits for this Timer (as the destructor does), then takes
  // other's. From this Timer's own callback: as the destructor, the running
  // closure stays alive until the callback returns.
  Timer& operator=(Timer&& other) noexcept;
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // disarm_and_wait(), then frees the state: blocks while a run is in
  // progress on another thread (not from the Timer's own callback, which
  // then frees the state when it returns). Never allocates; never throws.
  ~Timer();

  // Arm (or re-arm) one run at `due` / `delay` from now (the runtime's
  // clock), replacing a pending run. A due at or before the clock's time is
  // due now. Called while a run is in progress (from its callback or
  // elsewhere), it takes effect when that run returns; a periodic timer's
  // further runs are then stopped. Any thread, its own callback included.
  // Never waits for a run. No allocation in steady state (as
  // Runtime::schedule_at: a slab or queue growth). Throws as listed under
  // Errors above.
  void arm_at(TimePoint due, ScheduleOptions options = {});
  void arm_after(Duration delay, ScheduleOptions options = {});
  // Arm a fixed-rate periodic run (Runtime::schedule_every), replacing a
  // pending run. As arm_at; also std::invalid_argument for a period <= 0.
  void arm_every(Duration period, PeriodicOptions options = {});
  // The spellings with a trailing slack, kept for one release.
  [[deprecated("pass the slack in ScheduleOptions: arm_at(due, {.slack = s})")]] void arm_at(
      TimePoint due, std::optional<Duration> slack) {
    arm_at(due, ScheduleOptions{.slack = slack});
  }
  [[deprecated("pass the slack in ScheduleOptions: arm_after(delay, {.slack = s})")]] void arm_after(
      Duration delay, std::optional<Duration> slack) {
    arm_after(delay, ScheduleOptions{.slack = slack});
  }
  [[deprecated("pass the slack in PeriodicOptions: arm_every(period, {.slack = s})")]] void arm_every(
      Duration period, PeriodicOptions options, std::optional<Duration> slack) {
    options.slack = slack;
    arm_every(period, options);
  }

  // True iff a pending run was prevented (a pending run, or an arm waiting
  // for the run in progress to return). Does not wait for a run in progress.
  // Any thread. No allocation in steady state. False, without throwing, for
  // an empty Timer or one whose Runtime is gone.
  bool disarm();
  // Disarms; when a run is in progress, returns only after it has returned
  // (from the Timer's own callback it does not wait). cancelled: a pending
  // run was prevented; running: a run was in progress (and has returned,
  // unless called from the callback); done: nothing was armed or running.
  // Any thread. Blocks (futex) while a run is in progress elsewhere. No
  // allocation in steady state. Never throws for an empty Timer (done).
  CancelResult disarm_and_wait();

  // A run is pending: armed and not yet started (or periodic and not
  // disarmed), or an arm waits for the run in progress to return. Any
  // thread. Never allocates. False for an empty Timer.
  bool armed() const;
  // The pending run's due time, if armed(). Any thread (waits, yielding then
  // sleeping briefly, while a reschedule of its timer is two stores from
  // done). Never allocates.
  std::optional<TimePoint> due() const;
  // The runtime timer the last arm scheduled ({} before the first arm, and
  // while an arm waits for a run in progress). Any thread. Never allocates.
  TimerId id() const;
  // Bound to a runtime (not empty).
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  void close() noexcept;
  void check_armable(const char* what) const;
  std::unique_ptr<detail::TimerHandleState> state_;
};

}  // namespace chime
