// SPDX-License-Identifier: BSL-1.0
// AsioLoop: Boost.Asio's single-threaded event loop (one io_context run by
// one thread) with steady timers, as a peer of chime::Lane in
// bench/lane_bench.cpp.
//
// Shape: io_context constructed with concurrency hint 1 (the documented
// hint for a loop run by one thread), run by the loop thread; timers are
// steady_timer rebound to the io_context's own executor
// (steady_timer::rebind_executor<io_context::executor_type>::other), so no
// polymorphic any_io_executor is involved. Timers are preallocated in a pool
// (a std::deque, so they never move), created on the loop thread, and reused:
// a server keeps one timer per connection.
//
// Thread safety as the Asio reference states it: a timer is "Shared objects:
// Unsafe", so every operation on a timer runs on the loop thread; other
// threads arm a timer by boost::asio::post() to the io_context (safe from any
// thread), which allocates the posted handler (Asio's handler recycling
// caches blocks per thread, and a block allocated by a producer is freed on
// the loop thread) and takes the scheduler's mutex.
//
// Costs Asio pays by design, not by this harness: arming a timer that becomes
// the earliest one calls timerfd_settime (epoll_reactor::update_timeout); a
// cancel queues the wait's completion (operation_aborted), which runs on the
// loop like any handler.
//
// Contract: run() blocks the caller until the job's last slice ran on the
// loop thread and the completions that slice queued ran too (finish() is
// posted after them); one job at a time.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <deque>
#include <optional>
#include <thread>

#include "loop_job.hpp"

namespace chime_bench {

class AsioLoop {
 public:
  using Executor = boost::asio::io_context::executor_type;
  using Timer = boost::asio::steady_timer::rebind_executor<Executor>::other;

  AsioLoop() : io_(1), work_(io_.get_executor()) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~AsioLoop() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  AsioLoop(const AsioLoop&) = delete;
  AsioLoop& operator=(const AsioLoop&) = delete;

  boost::asio::io_context& io() noexcept { return io_; }

  // Runs the job's slices on the loop thread, each as a handler that posts
  // the next; returns once the last slice and what it queued have run.
  void run(LoopJob& job) {
    boost::asio::post(io_, Slice{this, &job});
    job.wait();
  }

  // Makes the pool hold at least n timers (created on the loop thread). May block.
  void reserve_timers(std::size_t n) {
    LoopJob job([this, n] {
      for (std::size_t k = 0; k < 4096 && timers_.size() < n; ++k) timers_.emplace_back(io_.get_executor());
      return timers_.size() < n;
    });
    run(job);
  }
  // Loop thread only (or while no job runs).
  Timer& timer(std::size_t i) noexcept { return timers_[i]; }

 private:
  struct Slice {
    AsioLoop* loop;
    LoopJob* job;
    void operator()() const {
      if (job->step()) {
        boost::asio::post(loop->io_, *this);
      } else {
        LoopJob* j = job;
        boost::asio::post(loop->io_, [j] { j->finish(); });  // after this slice's completions
      }
    }
  };

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<Executor>> work_;
  std::deque<Timer> timers_;
  std::thread thread_;
};

}  // namespace chime_bench
