// SPDX-License-Identifier: BSL-1.0
// http_timer_service.hpp: the timer service of bench/http_server/http_timeouts_server.cpp, chosen at
// compile time by HTTP_TIMER_SERVICE (one executable per choice, bench/http_server/CMakeLists.txt):
//
//   value | executable                       | where a connection's timer runs its callback
//   ------+----------------------------------+-------------------------------------------------
//   0     | http_timeouts_server             | chime::Timer(lane): on the loop thread, in run_ready
//   1     | http_timeouts_server_workers     | chime::Timer(runtime): on a runtime worker, which
//         |                                  | posts (connection, kind) to the loop's mailbox
//   2     | http_timeouts_server_heap        | bench/runtime_peers/mutex_heap_service.hpp (one
//         |                                  | mutex, one heap, one timer thread, one worker), which
//         |                                  | posts to the loop's mailbox
//   3     | http_timeouts_server_none        | nowhere: timeouts off, the upper bound
//
// The server sees three types: Service (one per process), LoopTimers (one per event loop: an
// fd for its epoll set and run_ready(), which delivers fired timers to the loop) and
// ConnTimers (one per connection: arm(kind, delay), disarm(kind)). Every call is made on the
// connection's loop thread; each fire reaches the loop as sink(conn_id, kind) on that thread.
//
// What a fire means differs, and the loop has to know it:
// - lanes: a disarm or re-arm on the loop thread always wins against the callback (lane.hpp:
//   "cancel wins until the callback starts"), so a delivered fire is always current.
// - workers, heap: the callback ran on another thread and only posted a message; by the time
//   the loop reads it the timer may have been re-armed, disarmed or its connection closed.
//   ConnTimers keeps the due time of each arm and current(kind, now) says whether the fire is
//   still due (the check-on-fire every such server needs); a closed connection's id is no
//   longer in the loop's table.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef HTTP_TIMER_SERVICE
#define HTTP_TIMER_SERVICE 0
#endif

#if HTTP_TIMER_SERVICE == 0 || HTTP_TIMER_SERVICE == 1
#include <chime/chime.hpp>
#elif HTTP_TIMER_SERVICE == 2
#include "mutex_heap_service.hpp"
#endif

namespace http_timers {

enum class Kind : std::uint8_t { idle, request, write, sleep };
constexpr std::size_t kKinds = 4;
using SteadyClock = std::chrono::steady_clock;

// The sink: the loop's handler of a fire, (connection id, kind), on the loop thread.
class Sink {
 public:
  virtual void on_timer(std::uint64_t conn_id, Kind kind) = 0;

 protected:
  ~Sink() = default;
};

// A loop's inbox for fires made on other threads: a mutex-guarded vector and an eventfd that
// is written when the vector goes from empty to non-empty. Any thread posts; the loop drains.
class Mailbox {
 public:
  Mailbox() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("eventfd failed");
  }
  ~Mailbox() { ::close(fd_); }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Any thread. May block (the mutex). May allocate.
  void post(std::uint64_t conn_id, Kind kind) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_empty = items_.empty();
      items_.emplace_back(conn_id, kind);
    }
    if (was_empty) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = ::write(fd_, &one, sizeof one);
    }
  }
  // The loop thread: delivers everything posted so far.
  void drain(Sink& sink) {
    std::uint64_t v;
    [[maybe_unused]] const ssize_t r = ::read(fd_, &v, sizeof v);
    {
      std::lock_guard<std::mutex> lock(mu_);
      taken_.swap(items_);
    }
    for (const auto& [id, kind] : taken_) sink.on_timer(id, kind);
    taken_.clear();
  }
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, Kind>> items_;  // guarded by mu_
  std::vector<std::pair<std::uint64_t, Kind>> taken_;  // the loop thread's
};

#if HTTP_TIMER_SERVICE == 0  // ------------------------------------------------ chime lanes

inline constexpr const char* kServiceName = "lanes";

struct Service {
  explicit Service(std::chrono::milliseconds precision) : runtime(options(precision)) {}
  static chime::RuntimeOptions options(std::chrono::milliseconds precision) {
    chime::RuntimeOptions o;
    o.precision = precision;
    o.workers = 0;  // every timer runs on a lane
    return o;
  }
  chime::Runtime runtime;
};

// Made on the loop thread (the lane's thread from then on).
class LoopTimers {
 public:
  LoopTimers(Service& s, Mailbox& /*unused*/, Sink& sink) : lane_(s.runtime.lane()), sink_(sink) {}
  int fd() const { return lane_.ready_fd(); }
  void run_ready() { lane_.run_ready(1024); }  // more left: ready_fd() stays readable
  chime::Lane& lane() { return lane_; }
  Sink& sink() { return sink_; }

 private:
  chime::Lane lane_;
  Sink& sink_;
};

class ConnTimers {
 public:
  ConnTimers(LoopTimers& loop, std::uint64_t id) : loop_(loop), id_(id) {}
  void arm(Kind k, std::chrono::nanoseconds delay) {
    chime::Timer& t = timers_[static_cast<std::size_t>(k)];
    if (!t) t = chime::Timer(loop_.lane(), [sink = &loop_.sink(), id = id_, k] { sink->on_timer(id, k); });
    t.arm_after(delay);
  }
  void disarm(Kind k) {
    chime::Timer& t = timers_[static_cast<std::size_t>(k)];
    if (t) t.disarm();
  }
  bool current(Kind /*unused*/, SteadyClock::time_point /*unused*/) const { return true; }

 private:
  LoopTimers& loop_;
  std::uint64_t id_;
  std::array<chime::Timer, kKinds> timers_;  // each made at its first arm
};

#elif HTTP_TIMER_SERVICE == 1 || HTTP_TIMER_SERVICE == 2  // ------- fires through a mailbox

// The due time of each arm, for the check-on-fire (see the top of this file).
class DueTimes {
 public:
  SteadyClock::time_point set(Kind k, std::chrono::nanoseconds delay) {
    return due_[static_cast<std::size_t>(k)] = SteadyClock::now() + delay;
  }
  void clear(Kind k) { due_[static_cast<std::size_t>(k)] = {}; }
  bool current(Kind k, SteadyClock::time_point now) const {
    const auto d = due_[static_cast<std::size_t>(k)];
    return d != SteadyClock::time_point{} && d <= now;
  }

 private:
  std::array<SteadyClock::time_point, kKinds> due_{};
};

struct Service;  // below, one per choice

class LoopTimers {
 public:
  LoopTimers(Service& s, Mailbox& mailbox, Sink& sink) : service_(s), mailbox_(mailbox), sink_(sink) {}
  int fd() const { return mailbox_.fd(); }
  void run_ready() { mailbox_.drain(sink_); }
  Service& service() { return service_; }
  Mailbox& mailbox() { return mailbox_; }

 private:
  Service& service_;
  Mailbox& mailbox_;  // owned by the server: outlives every callback that may post to it
  Sink& sink_;
};

#if HTTP_TIMER_SERVICE == 1

inline constexpr const char* kServiceName = "workers";

struct Service {
  explicit Service(std::chrono::milliseconds precision) : runtime(options(precision)) {}
  static chime::RuntimeOptions options(std::chrono::milliseconds precision) {
    chime::RuntimeOptions o;
    o.precision = precision;
    o.workers = 1;  // the callback only posts to a mailbox
    return o;
  }
  chime::Runtime runtime;
};

class ConnTimers {
 public:
  ConnTimers(LoopTimers& loop, std::uint64_t id) : loop_(loop), id_(id) {}
  void arm(Kind k, std::chrono::nanoseconds delay) {
    chime::Timer& t = timers_[static_cast<std::size_t>(k)];
    if (!t) t = chime::Timer(loop_.service().runtime, [box = &loop_.mailbox(), id = id_, k] { box->post(id, k); });
    due_.set(k, delay);
    t.arm_after(delay);
  }
  void disarm(Kind k) {
    chime::Timer& t = timers_[static_cast<std::size_t>(k)];
    if (t) t.disarm();
    due_.clear(k);
  }
  bool current(Kind k, SteadyClock::time_point now) const { return due_.current(k, now); }

 private:
  LoopTimers& loop_;
  std::uint64_t id_;
  DueTimes due_;
  std::array<chime::Timer, kKinds> timers_;  // ~Timer: disarm_and_wait
};

#else

inline constexpr const char* kServiceName = "heap";

struct Service {
  explicit Service(std::chrono::milliseconds /*unused*/) : heap(1) {}
  chime_bench::MutexHeapService heap;
};

class ConnTimers {
 public:
  ConnTimers(LoopTimers& loop, std::uint64_t id) : loop_(loop), id_(id) {}
  ~ConnTimers() {
    for (std::size_t k = 0; k < kKinds; ++k) heap().cancel(ids_[k]);
  }
  ConnTimers(const ConnTimers&) = delete;
  ConnTimers& operator=(const ConnTimers&) = delete;
  void arm(Kind k, std::chrono::nanoseconds delay) {
    const auto i = static_cast<std::size_t>(k);
    const auto due = due_.set(k, delay);
    if (heap().reschedule_at(ids_[i], due)) return;
    ids_[i] = heap().schedule_at(
        due, [box = &loop_.mailbox(), key = id_ << 2 | i] { box->post(key >> 2, static_cast<Kind>(key & 3)); });
  }
  void disarm(Kind k) {
    heap().cancel(ids_[static_cast<std::size_t>(k)]);
    due_.clear(k);
  }
  bool current(Kind k, SteadyClock::time_point now) const { return due_.current(k, now); }

 private:
  chime_bench::MutexHeapService& heap() { return loop_.service().heap; }
  LoopTimers& loop_;
  std::uint64_t id_;
  DueTimes due_;
  std::array<chime_bench::MutexHeapService::Id, kKinds> ids_{};
};

#endif

#elif HTTP_TIMER_SERVICE == 3  // ------------------------------------------------ none

inline constexpr const char* kServiceName = "none";

struct Service {
  explicit Service(std::chrono::milliseconds /*unused*/) {}
};

class LoopTimers {
 public:
  LoopTimers(Service& /*unused*/, Mailbox& /*unused*/, Sink& /*unused*/) {}
  int fd() const { return -1; }
  void run_ready() {}
};

class ConnTimers {
 public:
  ConnTimers(LoopTimers& /*unused*/, std::uint64_t /*unused*/) {}
  void arm(Kind /*unused*/, std::chrono::nanoseconds /*unused*/) {}
  void disarm(Kind /*unused*/) {}
  bool current(Kind /*unused*/, SteadyClock::time_point /*unused*/) const { return false; }
};

#else
#error "HTTP_TIMER_SERVICE must be 0 (lanes), 1 (workers), 2 (heap) or 3 (none)"
#endif

inline constexpr bool kHasTimers = HTTP_TIMER_SERVICE != 3;

// GET /metrics: the chime runtime's Stats in the OpenMetrics text format, labelled with the
// service; empty in the builds without a chime runtime.
inline std::string metrics_text([[maybe_unused]] Service& s) {
#if HTTP_TIMER_SERVICE == 0 || HTTP_TIMER_SERVICE == 1
  std::ostringstream out;
  chime::write_openmetrics(out, s.runtime.stats(), "chime", {{"service", kServiceName}});
  return out.str();
#else
  return {};
#endif
}

}  // namespace http_timers
