// SPDX-License-Identifier: BSL-1.0
// UvLoop: libuv's event loop (uv_run on one thread) with uv_timer_t timers,
// as a peer of chime::Lane in bench/lane_bench.cpp.
//
// Shape: one uv_loop_t run by the loop thread (uv_run, UV_RUN_DEFAULT).
// Timers are preallocated in a pool (a std::deque of UvTimer, so they never
// move), initialized on the loop thread and reused; each holds its callback
// (std::function<void()>, set when it is armed from another thread, once for
// the request-timeout ring). libuv timers are intrusive: uv_timer_start links
// the handle into the loop's min-heap and allocates nothing, and it takes a
// function pointer, not a closure; uv_timer_stop unlinks it, synchronously.
//
// Thread safety as the libuv documentation states it: only uv_async_send may
// be called from another thread. Producers arm timers through a
// mutex-guarded queue and uv_async_send (which coalesces: one wake-up for
// many sends); the loop's async callback drains the queue and starts the
// timers.
//
// Resolution: libuv timeouts are whole milliseconds from the loop's cached
// time (uv_now: milliseconds of uv_hrtime(UV_CLOCK_FAST), which is
// CLOCK_MONOTONIC_COARSE where that clock has 1 ms resolution or better). A
// due time (steady_clock, i.e. CLOCK_MONOTONIC) is rounded up to the next
// whole millisecond, so a timer never fires before it: the coarse clock
// never runs ahead of CLOCK_MONOTONIC.
//
// Contract: run() blocks the caller until the job's last slice ran on the
// loop thread (slices run from a uv_idle_t callback, one per loop
// iteration); one job at a time.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loop_job.hpp"

namespace chime_bench {

class UvLoop {
 public:
  struct UvTimer {
    uv_timer_t handle;
    std::function<void()> callback;
  };

  UvLoop() {
    check(uv_loop_init(&loop_), "uv_loop_init");
    check(uv_async_init(&loop_, &control_, on_control), "uv_async_init");
    control_.data = this;
    check(uv_async_init(&loop_, &arm_, on_arm), "uv_async_init");
    arm_.data = this;
    check(uv_idle_init(&loop_, &idle_), "uv_idle_init");
    idle_.data = this;
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  }
  // Stops and joins the loop thread. The handles stay open (the process is
  // ending; uv_loop_close would refuse a loop with active timers).
  ~UvLoop() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    uv_async_send(&control_);
    thread_.join();
  }
  UvLoop(const UvLoop&) = delete;
  UvLoop& operator=(const UvLoop&) = delete;

  uv_loop_t* loop() noexcept { return &loop_; }

  // Runs the job's slices on the loop thread; returns after the last. May block.
  void run(LoopJob& job) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      submitted_ = &job;
    }
    uv_async_send(&control_);
    job.wait();
  }

  // Makes the pool hold at least n timers (initialized on the loop thread). May block.
  void reserve_timers(std::size_t n) {
    LoopJob job([this, n] {
      for (std::size_t k = 0; k < 4096 && timers_.size() < n; ++k) {
        UvTimer& t = timers_.emplace_back();
        uv_timer_init(&loop_, &t.handle);
        t.handle.data = &t;
      }
      return timers_.size() < n;
    });
    run(job);
  }
  // Loop thread only (or while no job runs).
  UvTimer& timer(std::size_t i) noexcept { return timers_[i]; }

  // The uv_timer_cb of every pool timer: runs its callback.
  static void on_timer(uv_timer_t* h) { static_cast<UvTimer*>(h->data)->callback(); }

  // Whole milliseconds of the loop's clock at or after `due`.
  static std::uint64_t due_ms(std::chrono::steady_clock::time_point due) noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count();
    return static_cast<std::uint64_t>((ns + 999'999) / 1'000'000);
  }
  // Loop thread: starts pool timer i, due at loop millisecond `ms` (at once if past).
  void start_at(std::size_t i, std::uint64_t ms) noexcept {
    const std::uint64_t now = uv_now(&loop_);
    uv_timer_start(&timers_[i].handle, on_timer, ms > now ? ms - now : 0, 0);
  }

  // Any thread: arms pool timer i (not armed now) with `callback`, due at
  // `due`, through the queue and uv_async_send. May block (the queue's mutex).
  void arm_from_any_thread(std::size_t i, std::chrono::steady_clock::time_point due, std::function<void()> callback) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      arms_.push_back(Arm{i, due_ms(due), std::move(callback)});
    }
    uv_async_send(&arm_);
  }

 private:
  struct Arm {
    std::size_t index;
    std::uint64_t due_ms;
    std::function<void()> callback;
  };

  static void check(int rc, const char* what) {
    if (rc != 0) throw std::runtime_error(std::string("UvLoop: ") + what + ": " + uv_strerror(rc));
  }

  static void on_control(uv_async_t* h) {
    auto* self = static_cast<UvLoop*>(h->data);
    const std::lock_guard<std::mutex> lock(self->mutex_);
    if (self->stop_) {
      uv_stop(&self->loop_);
      return;
    }
    if (self->submitted_ != nullptr) {
      self->job_ = std::exchange(self->submitted_, nullptr);
      uv_idle_start(&self->idle_, on_idle);
    }
  }

  static void on_idle(uv_idle_t* h) {
    auto* self = static_cast<UvLoop*>(h->data);
    if (!self->job_->step()) {
      uv_idle_stop(h);
      std::exchange(self->job_, nullptr)->finish();
    }
  }

  static void on_arm(uv_async_t* h) {
    auto* self = static_cast<UvLoop*>(h->data);
    {
      const std::lock_guard<std::mutex> lock(self->mutex_);
      self->draining_.swap(self->arms_);
    }
    for (Arm& a : self->draining_) {
      self->timers_[a.index].callback = std::move(a.callback);
      self->start_at(a.index, a.due_ms);
    }
    self->draining_.clear();
  }

  uv_loop_t loop_{};
  uv_async_t control_{};
  uv_async_t arm_{};
  uv_idle_t idle_{};
  std::deque<UvTimer> timers_;
  std::mutex mutex_;
  LoopJob* submitted_ = nullptr;  // guarded by mutex_
  bool stop_ = false;             // guarded by mutex_
  std::vector<Arm> arms_;         // guarded by mutex_
  std::vector<Arm> draining_;     // loop thread
  LoopJob* job_ = nullptr;        // loop thread
  std::thread thread_;
};

}  // namespace chime_bench
