// SPDX-License-Identifier: BSL-1.0
// idle_timeout_server: a TCP echo server on 127.0.0.1 that closes connections idle for T, and
// connections that leave a request (a line) unfinished for R, with both timers on its epoll threads.
//
//   idle_timeout_server [--port 0] [--io-threads 2] [--timeout-ms 1000] [--request-timeout-ms T/4]
//                       [--precision-ms 10]
//
// K event loops, each a thread with its own epoll set, its own chime::Lane and its own table of
// connections. The epoll set holds the shared listening socket (EPOLLEXCLUSIVE), a stop eventfd,
// the lane's ready_fd() (readable: call lane.run_ready(), so every timer callback of a connection
// runs on the loop thread that owns it), and its connections (keyed by a unique id, never the fd,
// which the kernel reuses). Each connection has two chime::Timers bound to that lane: idle, armed
// for T on accept and re-armed on every read (the "touch", a CAS pair that does not involve the
// wheel thread); request, armed for R when a read leaves a line unfinished and disarmed when one
// finishes it (nginx's client_header_timeout). Either callback closes the connection itself.
//
// No lock, and no defence against a callback racing the close: the table is the loop's alone, and
// on the lane's thread a cancel of a run that has not started always wins, even when the run
// already waits in the lane's ready queue. A read or an EOF that comes after a timer's due but
// before its callback ran simply wins. Destroying a Timer from its own callback is allowed
// (chime/timer.hpp); still, a connection a timer closed is freed after run_ready, so that nothing
// a running callback captured is freed under it.
//
// Prints "listening on 127.0.0.1:PORT", serves until SIGINT or SIGTERM, closes what is still open
// and prints a "stopped:" line: connections accepted, closed by each reason, how late the closes
// came after their deadlines (last read + T, request start + R: min..max in microseconds), the
// touches, and the re-arms or disarms that found their timer's due passed and won (beat_due).
// tests/idle_timeout_load.cpp drives it with 10,000 connections (ctest example_idle_timeout_server).
#include <chime/chime.hpp>

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Options {
  std::uint16_t port;
  unsigned io_threads;
  std::chrono::milliseconds timeout, request_timeout, precision;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "idle_timeout_server: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

enum Closed { by_idle, by_request, by_peer, at_stop, kinds };  // why a connection was closed

// A loop's counters, summed after the loops are joined. late_us: close time - deadline.
struct LoopStats {
  long long accepted = 0, closed[kinds] = {}, touches = 0, beat_due = 0;
  long long late_min_us[2] = {LLONG_MAX, LLONG_MAX}, late_max_us[2] = {LLONG_MIN, LLONG_MIN};
};

// A live connection, owned by its loop's table; only the loop's thread touches it.
struct Conn {
  int fd = -1;
  std::uint64_t id = 0;
  SteadyClock::time_point last_read, request_start;  // read before the arms: never after the timers' dues
  chime::Timer idle;
  chime::Timer request;
};

constexpr std::uint64_t kListenKey = ~std::uint64_t{0}, kLaneKey = kListenKey - 1, kStopKey = kListenKey - 2;

class EventLoop {
 public:
  EventLoop(chime::Runtime& rt, const Options& o, int listen_fd, int stop_fd, std::atomic<std::uint64_t>& ids,
            LoopStats& stats)
      : o_(o), listen_fd_(listen_fd), ids_(ids), stats_(stats), lane_(rt.lane()), ep_(epoll_create1(EPOLL_CLOEXEC)) {
    if (ep_ < 0) die("epoll_create1");
    add(listen_fd_, kListenKey, EPOLLIN | EPOLLEXCLUSIVE);
    add(stop_fd, kStopKey, EPOLLIN);
    add(lane_.ready_fd(), kLaneKey, EPOLLIN);  // level-triggered: readable while runs are ready
  }
  ~EventLoop() {
    // Still open at stop: closed like the others. Their Timers go here, on the lane's thread.
    while (!conns_.empty()) closed_.push_back(close_conn(*conns_.begin()->second, at_stop));
    closed_.clear();
    ::close(ep_);
  }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void run() {
    std::vector<epoll_event> events(256);
    for (;;) {
      const int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), -1);
      if (n < 0 && errno != EINTR) die("epoll_wait");
      for (int i = 0; i < n; ++i) {
        const std::uint64_t key = events[i].data.u64;
        if (key == kStopKey) return;
        if (key == kListenKey) {
          accept_all();
        } else if (key == kLaneKey) {
          lane_.run_ready(1024);  // the timers' callbacks, here; more left: ready_fd() stays readable
          closed_.clear();        // the Conns they closed: no callback of theirs is running now
        } else if (auto it = conns_.find(key); it != conns_.end()) {
          serve(*it->second, events[i].events);
        }
        // else: closed earlier in this batch (by a timer or an EOF): its event is stale.
      }
    }
  }

 private:
  void add(int fd, std::uint64_t key, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = key;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // another loop may have taken it
        die("accept4 (raise RLIMIT_NOFILE?)");
      }
      auto owned = std::make_unique<Conn>();
      Conn& c = *owned;
      c.fd = fd;
      c.id = ids_.fetch_add(1, std::memory_order_relaxed);
      c.idle = chime::Timer(lane_, [this, &c] { closed_.push_back(close_conn(c, by_idle)); });
      c.request = chime::Timer(lane_, [this, &c] { closed_.push_back(close_conn(c, by_request)); });
      c.last_read = SteadyClock::now();
      c.idle.arm_after(o_.timeout);
      conns_.emplace(c.id, std::move(owned));
      ++stats_.accepted;
      add(fd, c.id, EPOLLIN | EPOLLRDHUP);
    }
  }

  void serve(Conn& c, std::uint32_t events) {
    char buf[512];
    bool eof = (events & (EPOLLHUP | EPOLLERR)) != 0, got = false;
    char last = 0;
    for (;;) {
      const ssize_t r = ::read(c.fd, buf, sizeof buf);
      if (r > 0) {
        got = true;
        last = buf[r - 1];
        [[maybe_unused]] const ssize_t w = ::write(c.fd, buf, static_cast<std::size_t>(r));  // echo; tiny
        if (static_cast<std::size_t>(r) < sizeof buf) break;  // drained (level-triggered)
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || errno != EAGAIN) eof = true;
      break;
    }
    // A re-arm or disarm that finds the due passed: the callback has not run (it would have
    // closed the connection), and now it never will. On a worker it would be running, or about to.
    const chime::TimePoint now = lane_.clock().now();
    auto count_beaten = [&](const chime::Timer& t) {
      if (const auto due = t.due(); due && *due <= now) ++stats_.beat_due;
    };
    if (eof) {
      count_beaten(c.idle);
      count_beaten(c.request);
      close_conn(c, by_peer);  // frees c: no run of its timers starts after close_conn's disarms
      return;
    }
    if (!got) return;
    c.last_read = SteadyClock::now();
    count_beaten(c.idle);
    c.idle.arm_after(o_.timeout);  // the touch: replaces the pending run, even one already due
    ++stats_.touches;
    if (last == '\n' && c.request.armed()) {
      count_beaten(c.request);
      c.request.disarm();  // the request is complete
    } else if (last != '\n' && !c.request.armed()) {
      c.request_start = c.last_read;
      c.request.arm_after(o_.request_timeout);  // a request started: it must end within R
    }
  }

  // Closes c and takes it out of the table; the caller frees it (a timer's callback: after run_ready).
  std::unique_ptr<Conn> close_conn(Conn& c, Closed why) {
    // On the lane's thread, outside a run of these timers, a disarm always wins: neither callback
    // runs after this, even if its run is already in the lane's ready queue. From one of the two
    // callbacks, that one's disarm finds nothing pending and the other's wins.
    c.idle.disarm();
    c.request.disarm();
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    ++stats_.closed[why];
    if (why == by_idle || why == by_request) {
      const auto deadline = why == by_idle ? c.last_read + o_.timeout : c.request_start + o_.request_timeout;
      const long long late =
          std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - deadline).count();
      stats_.late_min_us[why] = std::min(stats_.late_min_us[why], late);
      stats_.late_max_us[why] = std::max(stats_.late_max_us[why], late);
    }
    return std::move(conns_.extract(c.id).mapped());
  }

  const Options& o_;
  int listen_fd_;
  std::atomic<std::uint64_t>& ids_;
  LoopStats& stats_;
  chime::Lane lane_;  // outlives the Timers in conns_ and closed_ (declared before them)
  int ep_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> closed_;  // closed by a timer callback; freed after run_ready
};

Options parse(int argc, char** argv) {
  long long port = 0, io_threads = 2, timeout_ms = 1000, request_timeout_ms = -1, precision_ms = 10;
  const std::pair<std::string_view, long long*> flags[] = {{"--port", &port},
                                                           {"--io-threads", &io_threads},
                                                           {"--timeout-ms", &timeout_ms},
                                                           {"--request-timeout-ms", &request_timeout_ms},
                                                           {"--precision-ms", &precision_ms}};
  bool bad = argc % 2 == 0;
  for (int i = 1; i + 1 < argc && !bad; i += 2) {
    const auto* f = std::find_if(std::begin(flags), std::end(flags), [&](const auto& x) { return x.first == argv[i]; });
    bad = f == std::end(flags);
    if (!bad) *f->second = std::strtoll(argv[i + 1], nullptr, 10);
  }
  if (request_timeout_ms < 0) request_timeout_ms = timeout_ms / 4;
  if (bad || io_threads <= 0 || timeout_ms <= 0 || request_timeout_ms <= 0 || precision_ms <= 0) {
    std::fprintf(stderr,
                 "usage: idle_timeout_server [--port P] [--io-threads K] [--timeout-ms T] [--request-timeout-ms R] "
                 "[--precision-ms P]\n");
    std::exit(2);
  }
  return {static_cast<std::uint16_t>(port), static_cast<unsigned>(io_threads), std::chrono::milliseconds(timeout_ms),
          std::chrono::milliseconds(request_timeout_ms), std::chrono::milliseconds(precision_ms)};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rlimit rl{};  // one fd per connection: take all the hard limit allows
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  sigset_t stop_signals;  // taken by the main thread's sigwait; every thread inherits the mask
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) die("socket");
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(o.port);
  socklen_t len = sizeof addr;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(lfd, 4096) < 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    die("bind/listen");
  }
  const int stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0) die("eventfd");

  chime::RuntimeOptions options;
  options.precision = o.precision;
  options.workers = 0;  // every timer here runs on a lane: the runtime needs no worker threads
  chime::Runtime rt(options);
  std::atomic<std::uint64_t> ids{0};
  std::vector<LoopStats> stats(o.io_threads);
  std::vector<std::thread> loops;
  for (unsigned i = 0; i < o.io_threads; ++i) {
    loops.emplace_back([&, i] { EventLoop(rt, o, lfd, stop_fd, ids, stats[i]).run(); });
  }
  std::printf("listening on 127.0.0.1:%u\n", static_cast<unsigned>(ntohs(addr.sin_port)));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const std::uint64_t stop_now = 1;
  [[maybe_unused]] const ssize_t w = ::write(stop_fd, &stop_now, sizeof stop_now);  // every loop sees it
  for (auto& t : loops) t.join();  // each closes what it still has, then its lane

  LoopStats all;
  for (const LoopStats& s : stats) {
    all.accepted += s.accepted;
    all.touches += s.touches;
    all.beat_due += s.beat_due;
    for (int k = 0; k < kinds; ++k) all.closed[k] += s.closed[k];
    for (int k = 0; k < 2; ++k) {
      all.late_min_us[k] = std::min(all.late_min_us[k], s.late_min_us[k]);
      all.late_max_us[k] = std::max(all.late_max_us[k], s.late_max_us[k]);
    }
  }
  for (int k = 0; k < 2; ++k) {
    if (all.closed[k] == 0) all.late_min_us[k] = all.late_max_us[k] = 0;
  }
  const long long p99_us = std::chrono::duration_cast<std::chrono::microseconds>(rt.stats().lateness.p99).count();
  std::printf(
      "stopped: accepted=%lld idle=%lld request=%lld peer=%lld stop=%lld idle_late_us=%lld..%lld "
      "request_late_us=%lld..%lld touches=%lld beat_due=%lld lateness_p99_us=%lld\n",
      all.accepted, all.closed[by_idle], all.closed[by_request], all.closed[by_peer], all.closed[at_stop],
      all.late_min_us[by_idle], all.late_max_us[by_idle], all.late_min_us[by_request], all.late_max_us[by_request],
      all.touches, all.beat_due, p99_us);
  ::close(stop_fd);
  ::close(lfd);
  return 0;
}
