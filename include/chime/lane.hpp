// SPDX-License-Identifier: BSL-1.0
// chime/lane.hpp: chime::Lane, timer callbacks on your own thread (an epoll
// loop, a game's main loop), and C++20 coroutines that sleep on it.
//
//   chime::Lane lane = rt.lane();
//   lane.schedule_after(30s, [&] { close_idle(conn); });   // from any thread
//   // in the loop:  epoll_ctl(ep, EPOLL_CTL_ADD, lane.ready_fd(), ...);
//   //               ... when it is readable: lane.run_ready();
//   // or a game loop: lane.wait_and_run(next_frame);
//
// The lane keeps the runtime's multi-producer wheel: schedule, cancel and
// reschedule come from any thread (from one thread they keep that thread's
// order). The wheel thread hands a lane's due runs to the lane's ready queue
// in batches (one eventfd write per batch, none while the lane is already
// signalled), and they run only on the thread that calls run_ready or
// wait_and_run: the lane's thread, one thread at a time.
//
// Guarantees (design.md, "Lanes"), each with its ID:
// G30 (lane cancel wins): cancel wins until the callback starts: a cancel that returns true means
//   the callback will not run, even if the run is already in the ready queue.
//   On the lane's thread, where no run is in progress outside run_ready, a
//   cancel of a timer that has not run returns true.
// G31 (lane reschedule): so does a reschedule on the lane's thread: Lane::reschedule_* of a run
//   of this lane already in the ready queue returns true, that run never
//   happens, and the timer runs at its new due (as Timer::arm_* does). On
//   any other thread (and through Runtime's or a Producer's reschedule) a
//   run already handed over is as for workers: reschedule returns false and
//   the run goes ahead at its old due.
// G32 (lane order): never early; runs of one lane go in due order (interval order within one
//   wheel advance, as for workers = 1).
// G33 (ready_fd): ready_fd() is readable whenever a run is ready (level-triggered: it stays
//   readable until run_ready consumes the signal); it may be readable with
//   nothing left to run (after a cancel), and run_ready then returns 0.
// G34 (lane errors): a callback's exception never escapes run_ready: it is counted
//   (stats().callback_errors) and passed to on_error, on the lane's thread.
// G35 (lane flush): flush() covers lanes: it returns once every run made ready before or by
//   its advance has run. Called on the lane's thread (the last thread that
//   called run_ready or wait_and_run, or the thread that made the lane until
//   another runs it), it runs them itself; called elsewhere,
//   it waits for the lane's thread to run them, so a thread that blocks the
//   lane's thread while it flushes deadlocks.
// G36 (lane shutdown): shutdown(cancel_pending) cancels a lane's pending and ready runs;
//   shutdown(fire_pending) makes them ready at once (they run at the lane's
//   next run_ready, as final runs: periodic timers are not re-armed) and
//   does not wait for them. shutdown waits for a lane callback in progress.
// G37 (lane destruction): destroying a Lane cancels its pending and ready runs (counted as
//   cancelled) and returns once none of them can run. It waits for one
//   pass of the wheel thread, which looks at every filed timer once: lanes
//   are meant to live as long as their loop, not to be made per request.
//
// Preconditions, and what is detected (in every build unless said):
// G39 (one lane thread): one thread at a time runs the lane: run_ready or wait_and_run entered
//   while another thread is inside either of them throws std::logic_error
//   (one CAS per call).
// - run_ready and wait_and_run are not called from inside a callback of the
//   same runtime: they throw std::logic_error.
// - A Lane does not outlive its Runtime. Detected: every call afterwards
//   throws std::logic_error, and destroying it touches nothing of the
//   runtime. Not detected: a use racing the Runtime's destruction.
// - It is destroyed or move-assigned on its thread or while no thread runs
//   it. Debug builds abort when a lane is destroyed from its own callback;
//   otherwise not detected.
// - A Timer bound to the lane does not outlive it: arming it afterwards
//   throws std::logic_error (chime/timer.hpp).
// - A LaneSleep is awaited while its Lane (or the Lane it was moved to) is
//   alive: a co_await after that throws std::logic_error. A coroutine's
//   frame may outlive the Lane (Coroutines, below).
//
// Not guaranteed: a run taken back from the ready queue by a reschedule on
// the lane's thread leaves its record in the queue, told stale by the timer's
// 24-bit version; a record that waits there across 2^24 reschedules of its
// timer could run (docs/state-machine.md, R4).
//
// Memory ordering: everything a thread did before a schedule_* on the lane
// happens-before the callback runs on the lane's thread; everything a
// callback did happens-before a flush() that waited for it returns, a
// cancel_and_wait that waited for it returns, and the next run of the same
// periodic timer. A cancel that returned true guarantees the callback never
// runs; the task (and what it captured) is destroyed before cancel returns
// if the run was not yet ready, else by the thread that next dequeues it
// (run_ready) or destroys the lane. Threads that take turns running the
// lane: everything one did inside run_ready or wait_and_run happens-before
// the next one enters.
//
// The nine timer operations (schedule_at, schedule_after, schedule_every,
// cancel, try_cancel, cancel_and_wait, reschedule_at, reschedule_after,
// state) have the contract of runtime.hpp's table, with the runs on this
// lane. They differ in:
// - order: from one thread in that thread's order; on the lane's thread
//   through the lane's own queue token;
// - cancel: true also for a run already in the ready queue (G30);
// - cancel_and_wait: blocks only while the run is in progress on another
//   thread;
// - reschedule_*: on the lane's thread a run in this lane's ready queue is
//   taken back (G31), which posts a command, as an earlier due does;
// - every call but operator bool, sleep_until and the moves throws
//   std::logic_error on an empty Lane or one whose Runtime is gone.
// The other calls say their thread, blocking, allocation and errors below.
//
// G38 (coroutines): `co_await lane.sleep_for(d)` / `co_await lane.sleep_until(tp)`
// suspend the coroutine and resume it on the lane's thread, from inside
// run_ready, when the sleep is due. Each sleep is one timer of the lane (no
// allocation beyond the coroutine frame: the resumer is the 8-byte
// coroutine handle, stored inline). Destroying the suspended frame on the
// lane's thread cancels its timer; destroying it on another thread races the
// resumption and is a precondition violation. A sleep belongs to the lane,
// not to the Lane object (it holds the lane's core, as a Timer does): the
// Lane may be moved (constructed or assigned from) while coroutines sleep
// on it, and every rule here holds for the Lane it was moved to. A frame
// destroyed after its Lane was destroyed (or after its Runtime was) is safe
// on any thread: the Lane's destruction cancelled the sleep, and the
// frame's destruction touches nothing of the lane (whose core may serve a
// new Lane by then) but its own timer's settled state. A sleep whose
// schedule fails (after shutdown: StoppedError; beyond range:
// std::out_of_range) throws from the co_await. chime::Detached is a fire-and-forget coroutine type
// whose uncaught exceptions after the first suspension go to on_error.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>

#include "chime/runtime.hpp"

namespace chime {

namespace detail {
struct LaneCore;
// The exception escaping a chime::Detached coroutine that a lane run resumed:
// counted and passed to on_error as that run's. Outside any run (before the
// coroutine's first suspension) there is nobody to tell: std::terminate, as
// for an exception escaping a std::thread.
void report_coroutine_exception(std::exception_ptr e) noexcept;
}  // namespace detail

struct LaneSleepResumer;  // runtime/lane.cpp
class Lane;

// A fire-and-forget coroutine: starts at once, runs until its first
// suspension on the caller's thread, and frees its frame when it returns.
//   chime::Detached think(chime::Lane& lane, Entity& e) {
//     for (;;) { co_await lane.sleep_for(100ms); e.think(); }
//   }
// An exception escaping it after a sleep resumed it goes to on_error (the
// sleep's TimerId) and the frame is freed; one escaping before its first
// suspension calls std::terminate. Nobody else holds its frame, so a sleep
// of a Detached coroutine that is cancelled by anything but its resumption
// (its lane destroyed, shutdown) destroys the frame: nothing leaks. The
// frame is then destroyed on the thread that cancelled the sleep (the wheel
// thread, for a sleep still pending when its lane is destroyed; shutdown's
// caller): the destructors of its locals must not wait on the runtime.
struct Detached {
  struct promise_type {  // NOLINT(readability-identifier-naming): the name C++ looks up
    Detached get_return_object() const noexcept { return {}; }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { detail::report_coroutine_exception(std::current_exception()); }
  };
};

// The awaitable of Lane::sleep_for / sleep_until.
class [[nodiscard]] LaneSleep {
 public:
  LaneSleep(const Lane& lane, TimePoint due, std::optional<Duration> slack = std::nullopt) noexcept;
  LaneSleep(const LaneSleep&) = delete;
  LaneSleep& operator=(const LaneSleep&) = delete;
  // A sleep still pending (the frame is destroyed while suspended): cancelled.
  ~LaneSleep();

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) { suspend(h, false); }
  // A Detached coroutine's frame belongs to its sleep while it sleeps.
  void await_suspend(std::coroutine_handle<Detached::promise_type> h) { suspend(h, true); }
  void await_resume() noexcept { id_ = TimerId{}; }

 private:
  friend struct LaneSleepResumer;
  void suspend(std::coroutine_handle<> h, bool owns_frame);
  void wait_scheduled() const noexcept;
  bool runtime_alive() const noexcept { return alive_ != nullptr && (*alive_)(); }

  // The lane itself, not the Lane handle, which may be moved or destroyed
  // while the coroutine sleeps (as a Timer holds it, chime/timer.hpp): both
  // cores live as long as the Runtime, which alive_ tells; the generation
  // tells whether the Lane is still open (runtime/lane_core.hpp).
  detail::RuntimeCore* core_;
  detail::LaneCore* lane_;
  std::shared_ptr<const detail::RuntimeAlive> alive_;
  std::uint32_t lane_generation_ = 0;
  TimePoint due_;
  std::optional<Duration> slack_;  // checked at the co_await (as schedule_at's)
  TimerId id_;
  std::coroutine_handle<> handle_;
  std::thread::id scheduler_;             // the thread in await_suspend
  std::atomic<bool> scheduled_{false};    // the schedule returned and id_ is written
  std::atomic<bool> frame_dying_{false};  // ~LaneSleep: the frame is being destroyed
  // A Detached sleep's task, where it lives now (its move constructor keeps
  // this current; it clears it before it destroys the frame itself), so that
  // ~LaneSleep can disown it: see runtime/lane.cpp, ~LaneSleep.
  LaneSleepResumer* resumer_ = nullptr;
};

class Lane : public detail::TimerOperations<Lane> {
 public:
  // Empty: every call but operator bool throws std::logic_error.
  Lane() noexcept = default;
  // Never blocks, never allocates.
  Lane(Lane&& other) noexcept;
  // Closes this lane (as the destructor does), then takes other's.
  Lane& operator=(Lane&& other) noexcept;
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  // Cancels the lane's pending and ready runs. On the lane's thread or while
  // no thread runs it. Blocks until the wheel thread has served the close
  // (one pass; during shutdown, until the wheel thread exited). May allocate
  // (the close command). Never throws.
  ~Lane();

  // The nine timer operations (detail::TimerOperations, runtime.hpp): its
  // table, and the differences above. reschedule_*: true iff the timer was
  // pending, or (on the lane's thread only) its run was in this lane's ready
  // queue and has been taken back, and it now has the new due time; false
  // once its run started, or for a run handed over when called on another
  // thread.

  // An eventfd (non-blocking, close-on-exec), owned by the lane: readable
  // whenever a run is ready. Add it to epoll/poll for reading; do not read
  // it yourself (run_ready does). Any thread. Never blocks, never allocates.
  int ready_fd() const;
  // Runs up to `max` ready callbacks on this thread, in due order; returns
  // how many ran (cancelled and taken-back ones are skipped, not counted).
  // Makes this thread the lane's thread. Never blocks on the wheel (only
  // while a shutdown in progress finishes its sweep); never lets a
  // callback's exception escape. No allocation in steady state beyond what
  // the callbacks do (a periodic run posts its re-arm). Throws
  // std::logic_error while another thread is inside run_ready or
  // wait_and_run of this lane, or from inside a callback.
  std::size_t run_ready(std::size_t max = SIZE_MAX);
  // Blocks until a run is ready or the runtime's clock reaches `deadline`,
  // then runs what is ready; returns how many ran. A deadline already
  // passed does not block. With a ManualClock the deadline is reached when
  // the clock is moved past it (checked every millisecond). Otherwise as
  // run_ready (thread, allocation, errors).
  std::size_t wait_and_run(TimePoint deadline);

  // co_await lane.sleep_for(d): resumes on this lane at now + d (the
  // runtime's clock, read at this call). Any thread; the sleep's timer is
  // scheduled at the co_await (errors then: as schedule_at). Never blocks,
  // never allocates.
  // `slack`: as schedule_at's (design.md, "Slack").
  LaneSleep sleep_for(Duration delay, ScheduleOptions options = {});
  LaneSleep sleep_until(TimePoint due, ScheduleOptions options = {}) noexcept {
    return LaneSleep(*this, due, options.slack);
  }
  [[deprecated("pass the slack in ScheduleOptions: sleep_for(delay, {.slack = s})")]] LaneSleep sleep_for(
      Duration delay, std::optional<Duration> slack) {
    return sleep_for(delay, ScheduleOptions{.slack = slack});
  }
  [[deprecated("pass the slack in ScheduleOptions: sleep_until(due, {.slack = s})")]] LaneSleep sleep_until(
      TimePoint due, std::optional<Duration> slack) noexcept {
    return sleep_until(due, ScheduleOptions{.slack = slack});
  }

  // The runtime's clock. Any thread. Never blocks, never allocates.
  const Clock& clock() const;
  explicit operator bool() const noexcept { return lane_ != nullptr; }

 private:
  friend class Runtime;
  friend class Timer;
  friend class LaneSleep;
  friend class LaneRef;
  friend class detail::TimerOperations<Lane>;
  detail::OpsTarget ops_target(const char* what) const {
    check(what);
    return {core_, nullptr, lane_};
  }
  Lane(detail::RuntimeCore* core, detail::LaneCore* lane, std::shared_ptr<const detail::RuntimeAlive> alive) noexcept
      : core_(core), lane_(lane), alive_(std::move(alive)) {}
  // Throws std::logic_error for an empty Lane, or one whose Runtime is gone.
  void check(const char* what) const;
  bool runtime_alive() const noexcept { return alive_ != nullptr && (*alive_)(); }
  detail::RuntimeCore* core_ = nullptr;
  detail::LaneCore* lane_ = nullptr;
  std::shared_ptr<const detail::RuntimeAlive> alive_;  // chime/runtime.hpp
};

// A reference to a lane itself, not to the Lane handle that owns it: it
// stays valid while that handle is moved (as a Timer's or a sleep's does,
// G38), so an adapter that holds one (chime/asio.hpp, chime/uv.hpp)
// follows the lane wherever its Lane moves. It never closes the lane.
// Every call throws std::logic_error once the lane was destroyed (its
// generation moved on; runtime/lane_core.hpp) or its Runtime is gone;
// otherwise each call is the Lane's of the same name (threads, blocking,
// allocation, errors). Copyable.
class LaneRef {
 public:
  // Empty: every call throws std::logic_error.
  LaneRef() noexcept = default;
  // Throws std::logic_error for an empty Lane, or one whose Runtime is gone.
  explicit LaneRef(const Lane& lane);

  TimerId schedule_at(TimePoint due, Task task, ScheduleOptions options = {}) const;
  [[deprecated("pass the slack in ScheduleOptions: schedule_at(due, task, {.slack = s})")]] TimerId schedule_at(
      TimePoint due, Task task, std::optional<Duration> slack) const {
    return schedule_at(due, std::move(task), ScheduleOptions{.slack = slack});
  }
  bool cancel(TimerId id) const;
  int ready_fd() const;
  std::size_t run_ready(std::size_t max = SIZE_MAX) const;
  const Clock& clock() const;

 private:
  void check(const char* what) const;
  detail::RuntimeCore* core_ = nullptr;
  detail::LaneCore* lane_ = nullptr;
  std::shared_ptr<const detail::RuntimeAlive> alive_;
  std::uint32_t lane_generation_ = 0;
};

}  // namespace chime
