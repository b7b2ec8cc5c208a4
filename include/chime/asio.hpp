// SPDX-License-Identifier: BSL-1.0
// chime/asio.hpp: a chime::Lane inside a Boost.Asio io_context (optional:
// header-only, needs only Boost.Asio's headers; chime::runtime does not use it).
//
//   boost::asio::io_context io;
//   chime::Lane lane = rt.lane();
//   chime::asio::LaneDriver driver(io, lane);  // the lane's callbacks now run inside io.run()
//   lane.schedule_after(30s, [&] { close_idle(conn); });
//   // in a boost::asio::awaitable<void> coroutine on io:
//   co_await chime::asio::sleep_for(lane, 10ms);
//   // to cancel a wait, Asio's way: a LaneTimer, whose cancel() completes the
//   // wait with boost::asio::error::operation_aborted
//   chime::asio::LaneTimer timer(io, lane);
//   timer.expires_after(5s);
//   co_await timer.async_wait(boost::asio::use_awaitable);
//   driver.stop();  // or its destructor; io.run() returns once nothing else is pending
//
// Threads: one thread runs the io_context; it is the lane's thread (the
// driver's first handler calls run_ready there). Asio's epoll reactor waits
// on descriptors edge-triggered: with several threads in io.run() a wake of
// the lane can reach a thread before the driver has re-armed its wait, and
// be lost, so an io_context with a LaneDriver is run by one thread. The
// driver enforces it: the thread that runs its first handler is its thread
// for as long as it runs, and its handler on any other thread throws
// std::logic_error out of that thread's io.run() (before running anything
// of the lane) and stops the driver. Asio moves the reactor between the
// threads in io.run(), so a second thread is caught within a wake or two
// (tests/runtime_asio_test.cpp). To move the lane to another thread, stop
// the driver and construct a new one. To use several threads, run several
// io_contexts, each with its own lane and driver
// (examples/asio_multi_loop.cpp). LaneDriver and LaneTimer, like Asio's I/O
// objects, are used on that thread (or while no thread runs the
// io_context); the lane's schedule, cancel and reschedule calls still come
// from any thread.
//
// Lifetimes: the Runtime outlives the Lane, the lane outlives its LaneDriver
// and LaneTimers (they hold a chime::LaneRef, the lane itself, so the Lane
// handle may be moved meanwhile, G38), and the io_context outlives every pending wait of a
// LaneTimer (its completion is posted there): end the coroutines (cancel
// their timers, let io.run() return) before destroying the lane, as the
// example examples/asio_echo_idle.cpp does.
//
// Boost 1.74 (Debian 12) has no per-operation cancellation slots, and its
// co_await support (BOOST_ASIO_HAS_CO_AWAIT) is GCC's only; sleep_for and
// sleep_until exist where it is defined. LaneTimer's async_wait takes any
// completion token (callbacks, use_future, use_awaitable).
#pragma once

#include <fcntl.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/system/error_code.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "chime/lane.hpp"
#include "chime/runtime.hpp"
#include "chime/time.hpp"

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#endif

namespace chime::asio {

// Runs a Lane's ready callbacks inside an io_context: an async_wait for
// reading on a duplicate of lane.ready_fd() (a posix::stream_descriptor, so
// the lane's own eventfd is closed only by the lane), whose handler calls
// lane.run_ready(max_per_wake) and waits again. While it runs, io.run() does
// not return (the wait is outstanding work).
class LaneDriver {
 public:
  // Starts driving: posts the first run_ready to io, then waits on the fd.
  // max_per_wake bounds the callbacks one handler runs (the rest stay ready,
  // the fd readable), so other handlers of io get their turn.
  // Thread: io's thread, or any thread while no thread runs io. Blocking: no.
  // Allocation: one shared state (with the descriptor); the waits use Asio's
  // recycled handler memory. Throws std::system_error if the fd cannot be
  // duplicated or registered.
  LaneDriver(boost::asio::io_context& io, Lane& lane, std::size_t max_per_wake = SIZE_MAX)
      : state_(std::make_shared<State>(io, lane, max_per_wake)) {
    boost::asio::post(io, [s = state_] { on_ready(s, {}); });
  }
  LaneDriver(LaneDriver&&) noexcept = default;
  // Stops this driver (as stop()), then takes other's.
  LaneDriver& operator=(LaneDriver&& other) noexcept {
    if (this != &other) {
      stop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  LaneDriver(const LaneDriver&) = delete;
  LaneDriver& operator=(const LaneDriver&) = delete;
  // Stops (as stop()).
  ~LaneDriver() { stop(); }

  // Cancels the wait and closes the duplicate fd: no run_ready from this
  // driver starts afterwards (one in progress, when stop() is called from a
  // lane callback, finishes its batch). The cancelled handler still runs
  // once, with operation_aborted, and touches only the shared state it
  // holds: this object and the lane may be destroyed at once. Idempotent.
  // Thread: io's thread, or any thread while no thread runs io. Blocking:
  // no. Allocation: none.
  void stop() noexcept {
    if (!state_ || state_->stopped) return;
    state_->stopped = true;
    boost::system::error_code ignored;
    state_->fd.close(ignored);
  }

  // False after stop(), after a wait failed (error() says why), or after
  // run_ready threw or a second thread ran the driver's handler (misuses,
  // std::logic_error: it propagates out of io.run(), as a handler's
  // exception does). Thread: io's thread.
  bool running() const noexcept { return state_ && !state_->stopped; }
  // The error that stopped the wait (none after a plain stop()).
  boost::system::error_code error() const noexcept { return state_ ? state_->error : boost::system::error_code{}; }

 private:
  struct State {
    State(boost::asio::io_context& io, Lane& l, std::size_t max) : lane(l), max_per_wake(max), fd(io, dup_fd(l)) {}
    LaneRef lane;  // follows the lane when its Lane is moved
    std::size_t max_per_wake;
    boost::asio::posix::stream_descriptor fd;
    bool stopped = false;
    boost::system::error_code error;
    // The thread that ran the first handler. The handlers never overlap (one
    // wait at a time) and Asio orders each after the previous one.
    std::thread::id thread;
  };

  static int dup_fd(const Lane& lane) {
    const int fd = ::fcntl(lane.ready_fd(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "chime::asio::LaneDriver: dup of ready_fd");
    return fd;
  }

  static void on_ready(const std::shared_ptr<State>& s, const boost::system::error_code& ec) {
    if (s->stopped) return;  // stop() came first: the lane may be gone
    const std::thread::id me = std::this_thread::get_id();
    if (s->thread == std::thread::id{}) {
      s->thread = me;
    } else if (s->thread != me) {
      s->stopped = true;
      boost::system::error_code ignored;
      s->fd.close(ignored);
      throw std::logic_error(
          "chime::asio::LaneDriver: a second thread runs the io_context of a lane's driver; an io_context with a "
          "LaneDriver is run by one thread (the one that ran its first handler), or wake-ups of the lane are lost");
    }
    if (ec) {
      s->error = ec;
      s->stopped = true;
      return;
    }
    try {
      s->lane.run_ready(s->max_per_wake);
    } catch (...) {
      s->stopped = true;
      boost::system::error_code ignored;
      s->fd.close(ignored);
      throw;
    }
    if (s->stopped) return;  // a callback called stop()
    s->fd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [s](const boost::system::error_code& e) { on_ready(s, e); });
  }

  std::shared_ptr<State> state_;
};

namespace detail {

// One LaneTimer wait, as the task of its lane timer: run, it posts the
// handler with success; destroyed without having run (cancelled by
// LaneTimer::cancel, the lane's destruction, shutdown, or a schedule that
// threw), it posts it with operation_aborted. Either way exactly once, to
// the handler's executor, whose outstanding work it holds until then.
template <class Handler, class WorkExecutor>
class LaneWaitOp {
 public:
  LaneWaitOp(Handler&& handler, WorkExecutor work) : handler_(std::move(handler)), work_(std::move(work)) {}
  LaneWaitOp(LaneWaitOp&& other) noexcept(
      std::is_nothrow_move_constructible_v<Handler>&& std::is_nothrow_move_constructible_v<WorkExecutor>)
      : handler_(std::move(other.handler_)), work_(std::move(other.work_)) {
    other.handler_.reset();
  }
  LaneWaitOp& operator=(LaneWaitOp&&) = delete;
  ~LaneWaitOp() { complete(boost::asio::error::operation_aborted); }
  void operator()() { complete({}); }

 private:
  void complete(boost::system::error_code ec) {
    if (!handler_) return;
    Handler handler = std::move(*handler_);
    handler_.reset();
    WorkExecutor work = std::move(work_);  // released once the completion is posted
    boost::asio::post(work, [handler = std::move(handler), ec]() mutable { std::move(handler)(ec); });
  }

  std::optional<Handler> handler_;
  WorkExecutor work_;
};

inline TimePoint saturating_after(TimePoint now, Duration delay) noexcept {
  if (delay > Duration::zero() && now > TimePoint::max() - delay) return TimePoint::max();
  return now + delay;
}

// Schedules a LaneWaitOp for handler at due on the lane; returns its id, or
// an empty id if the lane refused the schedule (the op, destroyed unrun,
// has then posted operation_aborted).
// `lane`: a Lane or a LaneRef.
template <class LaneLike, class Handler, class Executor>
TimerId start_lane_wait(LaneLike& lane, TimePoint due, Handler handler, const Executor& fallback) {
  auto ex = boost::asio::get_associated_executor(handler, fallback);
  auto work = boost::asio::prefer(std::move(ex), boost::asio::execution::outstanding_work.tracked);
  LaneWaitOp<Handler, decltype(work)> op(std::move(handler), std::move(work));
  try {
    return lane.schedule_at(due, Task(std::move(op)));
  } catch (...) {
    return TimerId{};
  }
}

}  // namespace detail

// A one-shot timer of a lane with Asio's interface (as steady_timer's): set
// the expiry, async_wait(token), cancel(). The wait's timer is a lane timer:
// it becomes due on the runtime's wheel and runs on the lane; the completion
// (error_code: success, or operation_aborted) is then posted to the
// handler's associated executor (default: this timer's), never invoked from
// inside async_wait or from inside run_ready.
// One wait at a time: a new async_wait, expires_at or expires_after cancels
// the pending one (it completes with operation_aborted).
class LaneTimer {
 public:
  using executor_type = boost::asio::any_io_executor;

  // Expiry: now. Thread: any. Blocking: no. Allocation: none. Throws
  // std::logic_error for an empty Lane, or one whose Runtime is gone.
  LaneTimer(executor_type ex, Lane& lane) : ex_(std::move(ex)), lane_(lane) {}
  LaneTimer(boost::asio::io_context& io, Lane& lane) : LaneTimer(io.get_executor(), lane) {}
  LaneTimer(const LaneTimer&) = delete;
  LaneTimer& operator=(const LaneTimer&) = delete;
  // Cancels a pending wait (as cancel(); nothing if the runtime is gone).
  ~LaneTimer() {
    try {
      cancel();
    } catch (...) {  // std::logic_error: the runtime is gone, and with it the wait
    }
  }

  executor_type get_executor() const noexcept { return ex_; }
  TimePoint expiry() const noexcept { return expiry_; }

  // Set the expiry on the runtime's clock, cancelling a pending wait; return
  // how many waits were cancelled (0 or 1). Thread: the io_context's.
  // Blocking: no. Allocation: none.
  std::size_t expires_at(TimePoint due) {
    const std::size_t n = cancel();
    expiry_ = due;
    return n;
  }
  std::size_t expires_after(Duration delay) { return expires_at(detail::saturating_after(lane_.clock().now(), delay)); }

  // Waits until the expiry (never earlier), then completes with success, or
  // with operation_aborted when cancelled: by cancel(), expires_*, another
  // async_wait, this timer's destruction, the lane's destruction or the
  // runtime's shutdown, or when the lane refuses the schedule (after
  // shutdown, an expiry beyond range). Thread: the io_context's. Blocking:
  // no. Allocation: the handler and a work-tracking executor go into the
  // lane timer's Task (inline up to Task::inline_size, else one allocation);
  // the completion is one Asio post.
  template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait(CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        [this](auto handler) { start(std::move(handler)); }, token);
  }

  // Cancels the pending wait, if its timer has not started to run: it
  // completes with operation_aborted. Returns how many waits it cancelled
  // (0 or 1). Thread: the io_context's (there, a wait that has not completed
  // is always cancelled). Blocking: no. Allocation: none.
  std::size_t cancel() {
    if (!id_) return 0;
    const TimerId id = std::exchange(id_, TimerId{});
    return lane_.cancel(id) ? 1 : 0;
  }

 private:
  template <class Handler>
  void start(Handler handler) {
    cancel();
    id_ = detail::start_lane_wait(lane_, expiry_, std::move(handler), ex_);
  }

  executor_type ex_;
  LaneRef lane_;  // follows the lane when its Lane is moved
  TimePoint expiry_{};
  TimerId id_;
};

#if defined(BOOST_ASIO_HAS_CO_AWAIT)
// co_await chime::asio::sleep_until(lane, tp) / sleep_for(lane, d) in a
// boost::asio::awaitable coroutine: resumes on the coroutine's executor
// once the lane timer ran (never before the due, on the runtime's clock).
// Throws boost::system::system_error (operation_aborted) if the lane or the
// runtime cancels it (the lane destroyed, shutdown, or a due it refuses);
// to cancel it yourself, use a LaneTimer. Thread: the coroutine's.
// Allocation: a coroutine frame (Asio's recycled memory), and as
// LaneTimer::async_wait.
inline boost::asio::awaitable<void> sleep_until(Lane& lane, TimePoint due) {
  // No LaneTimer: nothing of the frame refers to the lane once the wait is
  // posted, so a sleep that the lane's destruction aborted leaves a frame
  // that may outlive the lane.
  const auto ex = co_await boost::asio::this_coro::executor;
  co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(boost::system::error_code)>(
      [&lane, due, &ex](auto handler) { detail::start_lane_wait(lane, due, std::move(handler), ex); },
      boost::asio::use_awaitable);
}
// The due is the runtime's clock read at this call, plus delay.
inline boost::asio::awaitable<void> sleep_for(Lane& lane, Duration delay) {
  return sleep_until(lane, detail::saturating_after(lane.clock().now(), delay));
}
#endif

}  // namespace chime::asio
