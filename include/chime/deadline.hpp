// SPDX-License-Identifier: BSL-1.0
// chime/deadline.hpp: timeouts that cannot be left armed: chime::Deadline,
// a scoped guard that runs a callback if it is still alive at its due time,
// and chime::with_timeout, which races a coroutine's awaitable on a lane
// against a timeout.
//
//   {
//     chime::Deadline d(rt, 250ms, [&] { conn.abort(); });  // or (lane, ...): runs on the lane
//     conn.send_request();
//     ...                                    // every path out of the scope cancels it
//     if (d.expired()) { /* the timeout ran (or is running) */ }
//   }                                        // ~Deadline: cancels; waits for a run in progress
//
//   chime::Detached fetch(chime::Lane& lane, Socket& s) {
//     std::optional<Reply> r = co_await chime::with_timeout(lane, s.read_reply(), 250ms);
//     if (!r) { /* timed out: read_reply's awaiter was destroyed, its wait withdrawn */ }
//   }
//
// A Deadline is a chime::Timer (chime/timer.hpp) armed at construction (and
// by reset()) and disarmed by its destructor, with a flag that records
// whether its callback began: it has the Timer's rules for threads,
// shutdown, a Runtime or Lane destroyed first, and destruction from its own
// callback (G44-G47), and adds these.
//
// Guarantees, each with its ID:
// G55 (deadline cancel): destroying a Deadline, or calling cancel(), before
//   its callback has begun stops it: the callback never runs. When the
//   destructor or cancel() returns, a callback that began on another thread
//   has returned (they wait for it, as Timer's destructor does, G44), so
//   what it uses may be freed. From inside its own callback nothing waits:
//   the running closure stays alive until it returns (G46). Never throws,
//   also after shutdown and after its Runtime or Lane was destroyed (their
//   shutdown or destruction cancelled the pending callback).
// G56 (deadline expired): expired() is true iff the callback has begun (the
//   flag is set on the thread that runs it, just before it is invoked). The
//   callback runs at most once per Deadline, whatever reset() and shutdown
//   do; once expired() is true it stays true, and after cancel() returned
//   (or shutdown cancelled the pending run) its value is final.
//
// The race with the destructor, exactly: the callback begins on a worker
// (or on the lane's thread) while the guard is being destroyed elsewhere.
// The runtime's cancel decides it (G11): either the cancel won, and the
// callback has not run and never will, or the run had begun, and the
// destructor waits until it has returned (G27's `running`). There is no
// third outcome. cancel() tells which: true iff it stopped the callback.
// disarm-style cancel without waiting is not offered: its answer could not
// make expired() final.
//
// Shutdown: at shutdown a Deadline's pending callback is cancelled or run
// early, as the mode says (G45); expired() then says which.
//
// Construction: from a Runtime (the callback runs on a worker) or a Lane (on
// the lane's thread), a delay or a due time, and a callable invocable as
// void() or void(const chime::Firing&). Not from a Producer: a Producer is
// one thread's, while a guard's destructor runs wherever its scope ends, and
// a Producer's timers run on the workers exactly as the Runtime's do (one
// thread's calls keep their order through either handle, G12). Allocates
// twice (the Timer's state and the flag; the callable is stored inline
// when it fits Task's rule with 8 bytes of the 48 taken by the flag's
// pointer), then arms: throws what Timer's constructor and arm_* throw
// (G47), StoppedError after shutdown among them, and then nothing is armed.
//
// Preconditions, as for a Timer: used from one thread at a time (its own
// callback included); the destructor blocks while the callback runs on
// another thread, so the callback must not wait for the thread that
// destroys the guard.
//
// G57 (with_timeout): `co_await chime::with_timeout(lane, awaitable, d)`
//   resumes the awaiting coroutine exactly once, with exactly one outcome:
//   the awaitable's result (std::optional<T> holding it; true for an
//   awaitable of void) or the timeout (std::nullopt; false), at the first
//   of the awaitable's completion and the timeout's sleep on `lane`
//   (never early, G10; on a ManualClock at the flush reaching it, G28).
//   The loser is withdrawn before the co_await returns, so nothing of it
//   runs afterwards: when the awaitable wins, the timeout's sleep is
//   cancelled (G38); when the timeout wins, the awaitable, and the awaiter
//   it made, are destroyed while suspended. An exception the awaitable
//   throws is rethrown from the co_await; so is a sleep that cannot be
//   scheduled (StoppedError after shutdown, std::out_of_range), before the
//   awaitable is started. Destroying the awaiting coroutine's frame while
//   it waits destroys both (the awaitable, and the sleep, which cancels).
//
// What with_timeout needs of the awaitable, not detected:
// - It is given as an rvalue and is move-constructible (it is moved into a
//   small coroutine frame of its own when awaited), or it is a callable
//   that returns one (called when awaited; its result need not be movable:
//   `[&] { return lane.sleep_for(1s); }`). An lvalue does not compile.
// - Destroying it while a coroutine is suspended on it withdraws that
//   coroutine: it is never resumed afterwards. chime's LaneSleep does (G38);
//   so does a coroutine task type that owns its frame and awaits such
//   awaitables; an awaitable that keeps a bare coroutine_handle somewhere
//   that outlives it does not, and must not be given.
// - It resumes the coroutine on the lane's thread, and the co_await is made
//   on the lane's thread (or while no thread runs the lane): the race is
//   decided on that one thread, without atomics.
// - Its result is void or an object type (not a reference).
// If shutdown or the Lane's destruction cancels the timeout's sleep, only
// the awaitable can still resume the coroutine (as a cancelled sleep_for
// never resumes its own).
#pragma once

#include <atomic>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "chime/lane.hpp"
#include "chime/runtime.hpp"
#include "chime/timer.hpp"

namespace chime {

namespace detail {
// The Timer's task of a Deadline: marks the flag, then runs the callable,
// at most once (a run left over from a reset that raced the first run finds
// the flag set and does nothing). acq_rel: the callback's begin is ordered
// with expired()'s acquire load.
template <class F>
struct DeadlineRun {
  std::atomic<bool>* began;
  F f;
  void operator()(const Firing& firing) {
    if (began->exchange(true, std::memory_order_acq_rel)) return;
    if constexpr (std::is_invocable_v<F&, const Firing&>) {
      std::invoke(f, firing);
    } else {
      std::invoke(f);
    }
  }
};
}  // namespace detail

class Deadline {
 public:
  // Empty: expired() and cancel() are false; reset() throws std::logic_error.
  Deadline() noexcept = default;

  // Arms `on_timeout` to run at now + delay (the runtime's clock) / at `due`,
  // on a worker. `options`: as schedule_at's (the slack, G25).
  template <TaskCallable F>
  Deadline(Runtime& runtime, Duration delay, F&& on_timeout, ScheduleOptions options = {})
      : began_(std::make_unique<std::atomic<bool>>(false)), timer_(runtime, task(std::forward<F>(on_timeout))) {
    timer_.arm_after(delay, options);
  }
  template <TaskCallable F>
  Deadline(Runtime& runtime, TimePoint due, F&& on_timeout, ScheduleOptions options = {})
      : began_(std::make_unique<std::atomic<bool>>(false)), timer_(runtime, task(std::forward<F>(on_timeout))) {
    timer_.arm_at(due, options);
  }
  // The same on `lane`: the callback runs on the lane's thread. The guard
  // may outlive the Lane (its destruction cancelled the callback); reset()
  // then throws std::logic_error. Throws std::logic_error for an empty Lane
  // or one whose Runtime is gone.
  template <TaskCallable F>
  Deadline(Lane& lane, Duration delay, F&& on_timeout, ScheduleOptions options = {})
      : began_(std::make_unique<std::atomic<bool>>(false)), timer_(lane, task(std::forward<F>(on_timeout))) {
    timer_.arm_after(delay, options);
  }
  template <TaskCallable F>
  Deadline(Lane& lane, TimePoint due, F&& on_timeout, ScheduleOptions options = {})
      : began_(std::make_unique<std::atomic<bool>>(false)), timer_(lane, task(std::forward<F>(on_timeout))) {
    timer_.arm_at(due, options);
  }

  // Never blocks, never allocates; `other` is left empty.
  Deadline(Deadline&& other) noexcept = default;
  // Cancels this guard's callback and waits, as the destructor does, then
  // takes other's. Never throws.
  Deadline& operator=(Deadline&& other) noexcept {
    if (this != &other) {
      timer_ = std::move(other.timer_);  // closes ours first: our callback has returned or never runs
      began_ = std::move(other.began_);
      cancelled_ = other.cancelled_;
    }
    return *this;
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  // G55: cancels a callback that has not begun; waits for one in progress
  // on another thread. Never allocates, never throws. (timer_ is declared
  // after began_, so it is destroyed, and has waited, before the flag is freed.)
  ~Deadline() = default;

  // G56: the callback has begun (it may still be running). Any thread.
  // Never blocks, never allocates. False for an empty guard.
  bool expired() const noexcept { return began_ != nullptr && began_->load(std::memory_order_acquire); }

  // G55: stops the callback if it has not begun; true iff this call stopped
  // it. False if it had begun (it has then returned, unless this is its own
  // callback), if it was stopped before (an earlier cancel(), or shutdown),
  // and for an empty guard. Afterwards expired() is final. Blocks (futex)
  // while the callback runs on another thread. Never throws.
  bool cancel() noexcept {
    if (began_ == nullptr) return false;
    cancelled_ = true;
    const CancelResult r = timer_.disarm_and_wait();
    return r == CancelResult::cancelled && !began_->load(std::memory_order_acquire);
  }

  // Moves the due time to now + delay (the touch of an idle timeout: a later
  // due is one CAS, G42). False, changing nothing, once the callback has
  // begun or the guard was cancelled. True: it is armed at the new due;
  // still, a callback that was beginning on another thread at the call may
  // be the one that runs (at most one runs, G56; expired() then turns true).
  // Throws as Timer::arm_after (StoppedError after shutdown; std::logic_error
  // for an empty guard or one whose Lane or Runtime is gone), leaving the
  // guard as it was.
  bool reset(Duration delay, ScheduleOptions options = {}) {
    if (!armable("reset")) return false;
    timer_.arm_after(delay, options);
    return !expired();
  }
  bool reset_at(TimePoint due, ScheduleOptions options = {}) {
    if (!armable("reset_at")) return false;
    timer_.arm_at(due, options);
    return !expired();
  }

  // The pending due time; std::nullopt once the callback has begun, after
  // cancel(), and for an empty guard. Any thread.
  std::optional<TimePoint> due() const {
    if (began_ == nullptr || expired()) return std::nullopt;
    return timer_.due();
  }
  // The runtime timer behind it (Timer::id()): for state() and logs.
  TimerId id() const { return timer_.id(); }
  // Not empty (not default-constructed or moved-from).
  explicit operator bool() const noexcept { return began_ != nullptr; }

 private:
  template <class F>
  Task task(F&& f) {
    return Task(detail::DeadlineRun<std::decay_t<F>>{began_.get(), std::forward<F>(f)});
  }
  bool armable(const char* what) const {
    if (began_ == nullptr) {
      throw std::logic_error(std::string("chime::Deadline::") + what +
                             " on an empty Deadline (default-constructed or moved-from)");
    }
    return !cancelled_ && !expired();
  }

  std::unique_ptr<std::atomic<bool>> began_;  // G56's flag, at a fixed address the task points to
  bool cancelled_ = false;                    // cancel() was called: reset() no longer re-arms
  Timer timer_;
};

namespace detail {

// The awaiter `co_await a` uses: a's operator co_await, a free one, or a.
template <class A>
decltype(auto) timeout_awaiter(A&& a) {
  if constexpr (requires { static_cast<A&&>(a).operator co_await(); }) {
    return static_cast<A&&>(a).operator co_await();
  } else if constexpr (requires { operator co_await(static_cast<A&&>(a)); }) {
    return operator co_await(static_cast<A&&>(a));
  } else {
    return static_cast<A&&>(a);
  }
}
template <class A>
concept TimeoutAwaitable = requires(A&& a) {
  timeout_awaiter(static_cast<A&&>(a)).await_ready();
};

// What with_timeout awaits: the awaitable itself, or what the callable returns.
template <class A>
struct TimeoutAwaited {
  using type = A;
};
template <class A>
requires(!TimeoutAwaitable<A> && std::is_invocable_v<A&>) struct TimeoutAwaited<A> {
  using type = std::invoke_result_t<A&>;
};
template <class A>
using timeout_result_t = decltype(timeout_awaiter(std::declval<typename TimeoutAwaited<A>::type>()).await_resume());

inline TimePoint timeout_due(TimePoint now, Duration delay) noexcept {
  if (delay > Duration::zero() && now > TimePoint::max() - delay) return TimePoint::max();
  if (delay < Duration::zero() && now < TimePoint::min() - delay) return TimePoint::min();
  return now + delay;
}

// A with_timeout's race, decided on the lane's thread: the first leg to end
// calls finished(), which withdraws the other and returns what to resume.
class TimeoutRace {
 public:
  virtual std::coroutine_handle<> finished(bool timer_leg) noexcept = 0;

 protected:
  TimeoutRace() = default;
  ~TimeoutRace() = default;
  TimeoutRace(const TimeoutRace&) = default;
  TimeoutRace& operator=(const TimeoutRace&) = default;
};

// One leg of the race: a coroutine that awaits one thing (the awaitable, or
// the timeout's sleep), started by with_timeout's await_suspend and owned
// by it. Its final suspension reports to the race and transfers to what it
// returns (the awaiting coroutine, or nothing while await_suspend still runs).
class TimeoutLeg {
 public:
  struct promise_type {  // NOLINT(readability-identifier-naming): the name C++ looks up
    TimeoutRace* race = nullptr;
    bool timer_leg = false;
    std::exception_ptr error;

    TimeoutLeg get_return_object() noexcept {
      return TimeoutLeg(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
        return h.promise().race->finished(h.promise().timer_leg);
      }
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  TimeoutLeg() noexcept = default;
  TimeoutLeg(TimeoutLeg&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  TimeoutLeg& operator=(TimeoutLeg&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  TimeoutLeg(const TimeoutLeg&) = delete;
  TimeoutLeg& operator=(const TimeoutLeg&) = delete;
  ~TimeoutLeg() { reset(); }

  void start(TimeoutRace* race, bool timer_leg) {
    h_.promise().race = race;
    h_.promise().timer_leg = timer_leg;
    h_.resume();
  }
  // Destroys the frame wherever it is suspended (withdrawing what it awaits).
  void reset() noexcept {
    if (h_) std::exchange(h_, {}).destroy();
  }
  std::exception_ptr error() const noexcept { return h_ ? h_.promise().error : nullptr; }

 private:
  explicit TimeoutLeg(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

}  // namespace detail

// The awaitable chime::with_timeout returns (G57). Await it in the
// expression that made it: `co_await chime::with_timeout(...)`.
template <class A>
class [[nodiscard]] WithTimeout final : private detail::TimeoutRace {
  using Awaited = typename detail::TimeoutAwaited<A>::type;
  using T = detail::timeout_result_t<A>;
  static_assert(std::is_void_v<T> || std::is_object_v<T>,
                "chime::with_timeout: the awaitable's result must be void or an object type, not a reference");

 public:
  // std::optional<T>: the result, or std::nullopt on timeout; for a void
  // awaitable, true iff it completed.
  using result_type = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

  WithTimeout(const Lane& lane, A&& awaitable, TimePoint due, ScheduleOptions options)
      : awaitable_(std::move(awaitable)) {
    sleep_.emplace(lane, due, options.slack);
  }
  WithTimeout(const WithTimeout&) = delete;
  WithTimeout& operator=(const WithTimeout&) = delete;
  ~WithTimeout() {
    value_leg_.reset();  // the awaitable, destroyed where it waits
    timer_leg_.reset();
    sleep_.reset();  // cancels the sleep if it is still pending (G38)
  }

  bool await_ready() const noexcept { return false; }
  // Starts the sleep, then the awaitable; false (resume at once) when one of
  // them ended already: a sleep that could not be scheduled, or an
  // awaitable that completed without suspending.
  bool await_suspend(std::coroutine_handle<> awaiting) {
    awaiting_ = awaiting;
    in_suspend_ = true;
    timer_leg_ = sleep_leg(*sleep_);
    timer_leg_.start(this, true);
    if (!decided_) {
      value_leg_ = value_leg(awaitable_, result_);
      value_leg_.start(this, false);
    }
    in_suspend_ = false;
    return !decided_;
  }
  result_type await_resume() {
    if (std::exception_ptr e = timer_won_ ? timer_leg_.error() : value_leg_.error()) std::rethrow_exception(e);
    if constexpr (std::is_void_v<T>) {
      return !timer_won_;
    } else {
      return timer_won_ ? std::nullopt : std::move(result_);
    }
  }

 private:
  // The result's slot: the value, or (void) whether the awaitable completed.
  using Slot = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

  static detail::TimeoutLeg sleep_leg(LaneSleep& sleep) { co_await sleep; }
  static detail::TimeoutLeg value_leg(A& awaitable, Slot& out) {
    if constexpr (std::is_void_v<T>) {
      co_await awaited(awaitable);
      out = true;
    } else {
      out.emplace(co_await awaited(awaitable));
    }
  }
  // A prvalue, so that the awaitable and its awaiter live in the leg's frame.
  static Awaited awaited(A& awaitable) {
    if constexpr (std::is_same_v<Awaited, A>) {
      return A(std::move(awaitable));
    } else {
      return awaitable();
    }
  }

  std::coroutine_handle<> finished(bool timer_leg) noexcept override {
    decided_ = true;
    timer_won_ = timer_leg;
    // Withdraw the loser now, before the awaiting coroutine runs again. The
    // winner's frame stays (suspended at its end) for await_resume.
    if (timer_leg) {
      value_leg_.reset();
    } else {
      timer_leg_.reset();
      sleep_.reset();
    }
    if (in_suspend_) return std::noop_coroutine();  // await_suspend returns false instead
    return awaiting_;
  }

  A awaitable_;
  std::optional<LaneSleep> sleep_;
  Slot result_{};
  detail::TimeoutLeg timer_leg_;
  detail::TimeoutLeg value_leg_;
  std::coroutine_handle<> awaiting_;
  bool in_suspend_ = false;
  bool decided_ = false;
  bool timer_won_ = false;
};

// G57: `co_await with_timeout(lane, awaitable, d)` resumes on the lane with
// the awaitable's result or, at now + d (the runtime's clock, read here), a
// timeout. The awaitable is an rvalue (moved) or a callable returning one.
// `options`: the timeout sleep's (the slack, G25). Throws std::logic_error
// for an empty Lane or one whose Runtime is gone; the sleep's scheduling
// errors come from the co_await.
template <class A>
requires(!std::is_lvalue_reference_v<A> && std::is_move_constructible_v<A> &&
         (detail::TimeoutAwaitable<A> ||
          std::is_invocable_v<A&>)) WithTimeout<A> with_timeout(Lane& lane, A&& awaitable, Duration timeout,
                                                                ScheduleOptions options = {}) {
  return WithTimeout<A>(lane, std::forward<A>(awaitable), detail::timeout_due(lane.clock().now(), timeout), options);
}
template <class A>
requires(!std::is_lvalue_reference_v<A> && std::is_move_constructible_v<A> &&
         (detail::TimeoutAwaitable<A> ||
          std::is_invocable_v<A&>)) WithTimeout<A> with_timeout(Lane& lane, A&& awaitable, TimePoint due,
                                                                ScheduleOptions options = {}) {
  lane.clock();  // an empty Lane, or its Runtime gone: std::logic_error here
  return WithTimeout<A>(lane, std::forward<A>(awaitable), due, options);
}

}  // namespace chime
