// SPDX-License-Identifier: BSL-1.0
// ChimeLaneLoop: the event loop a user of chime::Lane writes, as a peer of
// Asio's io_context and libuv's loop in bench/lane_bench.cpp.
//
// Shape: one chime::Runtime (its wheel thread; no workers: the lane's runs
// never go to them) and one Lane, run by one loop thread that poll()s the
// lane's ready_fd() and a control eventfd, and calls run_ready() when the
// former is readable:
//
//   for (;;) { poll({ready_fd, control}, job ? 0 : -1);
//              if ready_fd readable: lane.run_ready();
//              if control readable: take the submitted job;
//              if job: run one slice of it (LoopJob) }
//
// The loop thread calls run_ready() once before anything else, so it is the
// lane's thread from the start: its schedule calls take the lane's own
// queue token and slot cache (the fast path of lane.hpp), as in a server
// whose loop has run once. Other threads call the Lane's schedule_* directly
// (any thread; no Producer).
//
// Contract: run() blocks the caller until the job's last slice ran on the
// loop thread; one job at a time. The destructor stops and joins the loop
// thread, then destroys the Lane (no thread runs it) and the Runtime.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include "loop_job.hpp"

namespace chime_bench {

class ChimeLaneLoop {
 public:
  explicit ChimeLaneLoop(chime::RuntimeOptions options)
      : rt_(std::move(options)), lane_(rt_.lane()), control_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (control_ < 0) throw std::system_error(errno, std::generic_category(), "ChimeLaneLoop: eventfd");
    thread_ = std::thread([this] { loop(); });
  }
  ~ChimeLaneLoop() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    poke();
    thread_.join();
    ::close(control_);
  }
  ChimeLaneLoop(const ChimeLaneLoop&) = delete;
  ChimeLaneLoop& operator=(const ChimeLaneLoop&) = delete;

  chime::Runtime& runtime() noexcept { return rt_; }
  chime::Lane& lane() noexcept { return lane_; }

  // Runs the job's slices on the loop thread; returns after the last. May block.
  void run(LoopJob& job) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      submitted_ = &job;
    }
    poke();
    job.wait();
  }

 private:
  void poke() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = ::write(control_, &one, sizeof one);
  }

  void loop() {
    lane_.run_ready();  // this thread is the lane's thread from now on
    pollfd fds[2] = {{lane_.ready_fd(), POLLIN, 0}, {control_, POLLIN, 0}};
    LoopJob* job = nullptr;
    for (;;) {
      ::poll(fds, 2, job != nullptr ? 0 : -1);
      if ((fds[0].revents & POLLIN) != 0) lane_.run_ready();
      if ((fds[1].revents & POLLIN) != 0) {
        std::uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = ::read(control_, &count, sizeof count);
        const std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        if (submitted_ != nullptr) job = std::exchange(submitted_, nullptr);
      }
      if (job != nullptr && !job->step()) {
        job->finish();
        job = nullptr;
      }
    }
  }

  chime::Runtime rt_;
  chime::Lane lane_;
  const int control_;
  std::mutex mutex_;
  LoopJob* submitted_ = nullptr;  // guarded by mutex_
  bool stop_ = false;             // guarded by mutex_
  std::thread thread_;
};

}  // namespace chime_bench
