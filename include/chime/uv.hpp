// SPDX-License-Identifier: BSL-1.0
// chime/uv.hpp: a chime::Lane inside a libuv loop (optional: header-only,
// needs libuv's uv.h and its library, e.g. pkg-config libuv; chime::runtime
// does not use it).
//
//   uv_loop_t* loop = uv_default_loop();
//   chime::Lane lane = rt.lane();
//   chime::uv::LaneDriver driver(loop, lane);  // the lane's callbacks now run inside uv_run
//   lane.schedule_after(30s, [&] { close_idle(conn); });
//   uv_run(loop, UV_RUN_DEFAULT);
//   // to end: driver.close() (or its destructor) on the loop's thread; the
//   // loop's next iteration frees the handle, then uv_run returns once
//   // nothing else is active
//
// A uv_poll_t watches a duplicate of lane.ready_fd() for reading (libuv's
// poll is level-triggered: the fd stays readable while runs are ready), so
// the lane's own eventfd is closed only by the lane and libuv never polls a
// closed fd; its callback calls lane.run_ready(max_per_wake). While the poll
// is open, uv_run does not return (it is an active handle).
//
// Threads: the loop's thread is the lane's thread. LaneDriver is used on it,
// or while no thread runs the loop, as libuv's handles are; the lane's
// schedule, cancel and reschedule calls still come from any thread.
//
// Lifetimes: libuv needs a handle's memory until its close callback, which
// runs on a later iteration of the loop. So the uv_poll_t is not a member:
// it lives in a heap block that the close callback frees. The LaneDriver
// itself may be destroyed as soon as close() returned (its destructor
// closes); the loop must run once more (uv_run, any mode) before
// uv_loop_close, which returns UV_EBUSY until then. The lane outlives the
// LaneDriver (until close()), though its Lane handle may be moved meanwhile
// (the driver holds a chime::LaneRef, the lane itself); after close() no
// callback touches the lane.
// The Runtime outlives the Lane. Detected: a Runtime destroyed first wakes
// the poll (a lane's eventfd is written as the runtime frees it), whose
// run_ready throws std::logic_error; the driver keeps it (failure()),
// stops the poll and calls uv_stop, so uv_run returns and the caller can
// rethrow it. An exception cannot cross libuv's C frames: any other one
// run_ready throws (another thread inside run_ready of the lane) is kept
// the same way.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <system_error>
#include <utility>

#include "chime/lane.hpp"

namespace chime::uv {

class LaneDriver {
 public:
  // Starts polling lane.ready_fd() in loop. max_per_wake bounds the
  // callbacks one poll callback runs (the rest stay ready, the fd readable).
  // Thread: the loop's, or any while no thread runs it. Blocking: no.
  // Allocation: one heap block (the uv_poll_t). Throws std::system_error
  // if the fd cannot be duplicated, or with libuv's error if uv_poll_init
  // or uv_poll_start fails; std::logic_error for an empty Lane or one whose
  // Runtime is gone.
  LaneDriver(uv_loop_t* loop, Lane& lane, std::size_t max_per_wake = SIZE_MAX)
      : handle_(new Handle{{}, LaneRef(lane), max_per_wake, 0, dup_fd(lane), {}}) {
    handle_->poll.data = handle_;
    int rc = uv_poll_init(loop, &handle_->poll, handle_->fd);
    if (rc != 0) {
      ::close(handle_->fd);
      delete std::exchange(handle_, nullptr);  // never initialised: no close needed
      throw std::system_error(-rc, std::generic_category(), "chime::uv::LaneDriver: uv_poll_init");
    }
    rc = uv_poll_start(&handle_->poll, UV_READABLE, &on_poll);
    if (rc != 0) {
      close();
      throw std::system_error(-rc, std::generic_category(), "chime::uv::LaneDriver: uv_poll_start");
    }
  }
  LaneDriver(LaneDriver&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  // Closes this driver (as close()), then takes other's.
  LaneDriver& operator=(LaneDriver&& other) noexcept {
    if (this != &other) {
      close();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  LaneDriver(const LaneDriver&) = delete;
  LaneDriver& operator=(const LaneDriver&) = delete;
  // Closes (as close()).
  ~LaneDriver() { close(); }

  // Stops the poll at once (no run_ready from this driver starts
  // afterwards; one in progress, when close() is called from a lane
  // callback, finishes its batch) and uv_close()s the handle; its close
  // callback frees it (and closes the duplicate fd) on the loop's next
  // iteration. Idempotent. Thread: the loop's, or any while no thread runs
  // it. Blocking: no. Allocation: none.
  void close() noexcept {
    if (handle_ == nullptr) return;
    uv_close(reinterpret_cast<uv_handle_t*>(&std::exchange(handle_, nullptr)->poll), &on_close);
  }

  // False after close(). Thread: the loop's.
  bool running() const noexcept { return handle_ != nullptr; }
  // The libuv error (negative) that the poll reported, 0 if none; after one,
  // the poll is stopped (close() is still needed). Thread: the loop's.
  int error() const noexcept { return handle_ != nullptr ? handle_->error : 0; }
  // The exception lane.run_ready threw inside the poll's callback (a
  // std::logic_error: the Runtime destroyed before the lane, another thread
  // inside run_ready of the lane), null if none; after one the poll is
  // stopped and uv_stop() made uv_run return (close() is still needed).
  // Rethrow it with std::rethrow_exception. Thread: the loop's.
  std::exception_ptr failure() const noexcept { return handle_ != nullptr ? handle_->failure : nullptr; }

 private:
  struct Handle {
    uv_poll_t poll;
    LaneRef lane;  // the lane itself: follows it when its Lane is moved (G38)
    std::size_t max_per_wake;
    int error;
    int fd;                      // the duplicate of lane.ready_fd() the poll watches
    std::exception_ptr failure;  // what run_ready threw
  };

  static int dup_fd(const Lane& lane) {
    const int fd = ::fcntl(lane.ready_fd(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "chime::uv::LaneDriver: dup of ready_fd");
    return fd;
  }

  // run_ready's exception cannot cross libuv's C frames: kept for failure().
  static void on_poll(uv_poll_t* poll, int status, int /*events*/) noexcept {
    auto* h = static_cast<Handle*>(poll->data);
    if (status < 0) {
      h->error = status;
      uv_poll_stop(poll);
      return;
    }
    try {
      h->lane.run_ready(h->max_per_wake);
    } catch (...) {
      h->failure = std::current_exception();
      uv_poll_stop(poll);
      uv_stop(poll->loop);
    }
  }
  static void on_close(uv_handle_t* handle) noexcept {
    auto* h = static_cast<Handle*>(handle->data);
    ::close(h->fd);
    delete h;
  }

  Handle* handle_;
};

}  // namespace chime::uv
