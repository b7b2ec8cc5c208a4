// SPDX-License-Identifier: BSL-1.0
// http_timeouts_server: an HTTP/1.1 keep-alive server on 127.0.0.1 with the three timeouts a
// real server keeps per connection, for measuring a timer service under a load generator
// nobody here wrote (scripts/bench-server runs wrk against it; docs/server-benchmark.md).
//
//   GET /              200, a small fixed body
//   GET /sleep?ms=K    200 after K ms (a timer of the connection, not a blocking sleep;
//                      501 in the build without timers)
//   GET /metrics       200, the chime runtime's Stats in the OpenMetrics text format
//                      (chime/metrics.hpp; a Prometheus scrape target); 404 in the builds
//                      without a chime runtime
//   anything else      404 (unknown path), 405 (not GET), 400 (malformed: no request line,
//                      a body, a bad version), 431 (header over --max-header bytes)
//
// Per connection (each a timer of the connection, see http_timer_service.hpp):
// - idle (--idle-ms): armed at accept and re-armed for every request (the touch: one arm per
//   request, a later due); when it fires the connection is closed without a response.
// - request deadline (--request-ms): armed when a read leaves a request's header unfinished,
//   disarmed when the header is complete: the whole header must arrive within it (the
//   slowloris defence, nginx's client_header_timeout). When it fires: 408, then close.
// - write (--write-ms): armed while output is blocked (write returned EAGAIN), disarmed when
//   it drains; when it fires the connection is closed. While output is blocked no further
//   request is read (the backpressure that bounds a pipelining client).
// - sleep: the /sleep request's timer; the idle timer is off while it runs.
//
// Threads: --threads event loops, each with its own SO_REUSEPORT listener on the same port,
// its own epoll set and its own connection table (no lock: only its thread touches it). The
// epoll data of a connection is its id, unique and never reused (the kernel reuses fds at
// once). The timer service is a compile-time choice (HTTP_TIMER_SERVICE): with chime lanes
// (the default) every timer callback runs on the loop thread in lane.run_ready(), so a disarm
// or re-arm on that thread always wins and a callback can close the connection itself; with
// the others the callback posts to the loop's mailbox and the loop checks the fire is still
// due. A connection closed during a batch of events is freed after the batch (a chime::Timer
// may not be destroyed from its own callback).
//
// Output: the first line on stdout is "listening 127.0.0.1:PORT service=... threads=..."
// (--port 0: an ephemeral port; a test reads it there). On SIGINT, SIGTERM or after
// --duration seconds it stops: the loops close their connections, and the last line on stdout
// is "stopped: ..." with the requests served, the connections closed by each reason and the
// process's CPU time (getrusage: every thread, the timer service's included) per request.
// With --record-close, each idle or request-deadline close is also timed against its
// deadline (the steady clock's time at the arm plus the timeout, read just before the arm,
// so never later than the timer's own due): before "stopped:" come two lines
// "close_lateness kind=idle|request n=... early=... p50_ms=... p99_ms=... max_ms=...",
// where early counts closes before the deadline. Off by default: it reads the clock at
// every arm, which the CPU-per-request comparison of the timer services must not include.
// Exits 0. It raises RLIMIT_NOFILE to its hard limit and says on stderr how many connections
// that allows when it is under --max-conns.
#include "http_timer_service.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using http_timers::Kind;
using SteadyClock = std::chrono::steady_clock;

struct Options {
  unsigned threads = 1;
  std::uint16_t port = 8080;
  double duration_s = 0;  // 0: until a signal
  std::int64_t idle_ms = 30000;
  std::int64_t request_ms = 10000;
  std::int64_t write_ms = 10000;
  std::int64_t precision_ms = 1;
  std::size_t max_header = 8192;
  std::size_t max_conns = 10000;  // for the fd-limit message only
  bool record_close = false;      // time idle and request closes against their deadlines
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "http_timeouts_server: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

// Why a connection was closed (the counters of the "stopped:" line).
enum class Closed : std::uint8_t { peer, idle, request, write, bad_request, too_large, stop, count };
constexpr const char* kClosedNames[] = {"peer", "idle", "request_408", "write", "bad_400", "large_431", "stop"};

constexpr std::string_view kHello =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, world\n";

std::string response(int status, const char* reason, std::string_view body, bool close,
                     std::string_view content_type = "text/plain") {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                  "\r\nContent-Type: " + std::string(content_type) +
                  "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (close) r += "Connection: close\r\n";
  r += "\r\n";
  r += body;
  return r;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return (x | 0x20) == (y | 0x20); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One parsed request header (views into the connection's input buffer).
struct Request {
  std::string_view method, target;
  bool keep_alive = true;
};

// Parses head (the header without its final CRLFCRLF). Returns false iff it is malformed.
bool parse(std::string_view head, Request& req) {
  std::size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1) return false;
  req.method = line.substr(0, sp1);
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version == "HTTP/1.1") {
    req.keep_alive = true;
  } else if (version == "HTTP/1.0") {
    req.keep_alive = false;
  } else {
    return false;
  }
  while (eol != std::string_view::npos) {
    const std::size_t start = eol + 2;
    eol = head.find("\r\n", start);
    const std::string_view h = head.substr(start, eol == std::string_view::npos ? eol : eol - start);
    const std::size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    if (iequals(name, "Connection")) {
      if (iequals(value, "close")) req.keep_alive = false;
      if (iequals(value, "keep-alive")) req.keep_alive = true;
    } else if ((iequals(name, "Content-Length") && value != "0") || iequals(name, "Transfer-Encoding")) {
      return false;  // this server takes no request bodies
    }
  }
  return true;
}

struct Conn {
  Conn(http_timers::LoopTimers& lt, std::uint64_t conn_id, int conn_fd) : fd(conn_fd), id(conn_id), timers(lt, id) {}
  int fd;
  std::uint64_t id;
  std::string in;   // bytes read and not yet consumed
  std::string out;  // bytes to write from out_off
  std::size_t out_off = 0;
  bool request_armed = false;  // a header is unfinished: the request deadline runs
  bool sleeping = false;       // a /sleep request waits for its timer
  bool close_after_write = false;
  bool epollout = false;  // output is blocked: the epoll events are EPOLLOUT only
  bool closing = false;   // closed; freed after the batch of events
  SteadyClock::time_point deadline[2] = {};  // --record-close: idle, request
  http_timers::ConnTimers timers;
};

struct LoopStats {
  std::uint64_t requests = 0;
  std::uint64_t accepted = 0;
  std::uint64_t closed[static_cast<int>(Closed::count)] = {};
  std::vector<std::int64_t> close_late_ns[2];  // --record-close: idle, request; close time - deadline
};

constexpr std::uint64_t kListenKey = ~std::uint64_t{0};
constexpr std::uint64_t kTimersKey = kListenKey - 1;
constexpr std::uint64_t kStopKey = kListenKey - 2;

struct Shared {
  Options o;
  std::atomic<std::uint64_t> next_id{0};
  int stop_fd = -1;  // an eventfd in every loop's epoll set, written once to stop them
};

// One event loop; built, run and destroyed on its own thread.
class EventLoop final : public http_timers::Sink {
 public:
  EventLoop(Shared& sh, http_timers::Service& service, http_timers::Mailbox& mailbox, int listen_fd, LoopStats& stats)
      : sh_(sh),
        o_(sh.o),
        listen_fd_(listen_fd),
        stats_(stats),
        service_(service),
        timers_(service, mailbox, *this),
        idle_(std::chrono::milliseconds(o_.idle_ms)),
        request_(std::chrono::milliseconds(o_.request_ms)),
        write_(std::chrono::milliseconds(o_.write_ms)) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) die("epoll_create1");
    add(listen_fd_, kListenKey);
    add(sh_.stop_fd, kStopKey);
    if (timers_.fd() >= 0) add(timers_.fd(), kTimersKey);  // level-triggered
  }
  ~EventLoop() {
    while (!conns_.empty()) close_conn(*conns_.begin()->second, Closed::stop);
    closed_.clear();  // the Timers go here, on the loop's thread, before the lane
    ::close(ep_);
  }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void run() {
    std::vector<epoll_event> events(512);
    for (;;) {
      const int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        die("epoll_wait");
      }
      for (int i = 0; i < n; ++i) {
        const std::uint64_t key = events[i].data.u64;
        if (key == kStopKey) return;
        if (key == kListenKey) {
          accept_some();
        } else if (key == kTimersKey) {
          timers_.run_ready();
        } else if (auto it = conns_.find(key); it != conns_.end()) {
          serve(*it->second, events[i].events);
        }
        // else: closed earlier in this batch; its event is stale.
      }
      closed_.clear();  // no timer callback of theirs is running now
    }
  }

  // A timer of connection `id` fired (on this thread; see http_timer_service.hpp).
  void on_timer(std::uint64_t id, Kind kind) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    if (!c.timers.current(kind, SteadyClock::now())) return;  // re-armed or disarmed since (mailbox services)
    switch (kind) {
      case Kind::idle:
        record_close(c, kind);
        close_conn(c, Closed::idle);
        break;
      case Kind::request:
        record_close(c, kind);
        fail(c, 408, "Request Timeout", Closed::request);
        break;
      case Kind::write:
        close_conn(c, Closed::write);
        break;
      case Kind::sleep:
        c.timers.disarm(Kind::sleep);  // for the due-time check of the mailbox services
        c.sleeping = false;
        ++stats_.requests;
        c.out += response(200, "OK", "slept\n", !c.close_after_write);
        arm(c, Kind::idle, idle_);
        if (flush(c)) process(c);
        break;
    }
  }

 private:
  // Arms an idle or request timer, noting its deadline first with --record-close.
  void arm(Conn& c, Kind k, std::chrono::milliseconds timeout) {
    if (o_.record_close) c.deadline[k == Kind::idle ? 0 : 1] = SteadyClock::now() + timeout;
    c.timers.arm(k, timeout);
  }
  void record_close(const Conn& c, Kind k) {
    if (!o_.record_close) return;
    const int i = k == Kind::idle ? 0 : 1;
    stats_.close_late_ns[i].push_back((SteadyClock::now() - c.deadline[i]).count());
  }

  void add(int fd, std::uint64_t key) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
  }

  void accept_some() {
    for (int i = 0; i < 256; ++i) {  // then back to the other events; level-triggered: more later
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          if (!warned_fds_) std::fprintf(stderr, "http_timeouts_server: accept4: out of fds (RLIMIT_NOFILE)\n");
          warned_fds_ = true;
        }
        return;  // EAGAIN: nothing left
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const std::uint64_t id = sh_.next_id.fetch_add(1, std::memory_order_relaxed);
      auto owned = std::make_unique<Conn>(timers_, id, fd);
      Conn& c = *owned;
      conns_.emplace(id, std::move(owned));
      ++stats_.accepted;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = id;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl (connection)");
      arm(c, Kind::idle, idle_);
    }
  }

  void serve(Conn& c, std::uint32_t events) {
    if ((events & EPOLLOUT) != 0 && !c.out.empty()) {
      if (!flush(c)) return;  // closed, or still blocked
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) {
      process(c);
      return;
    }
    char buf[16384];
    bool eof = false;
    for (;;) {
      const ssize_t r = ::read(c.fd, buf, sizeof buf);
      if (r > 0) {
        c.in.append(buf, static_cast<std::size_t>(r));
        if (static_cast<std::size_t>(r) < sizeof buf || c.in.size() > o_.max_header + sizeof buf) break;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
      break;
    }
    process(c);
    if (c.closing) return;
    if (eof) {
      close_conn(c, Closed::peer);
    } else if (c.in.size() > 2 * o_.max_header + sizeof buf) {
      fail(c, 431, "Request Header Fields Too Large", Closed::too_large);  // pipelined past a /sleep
    }
  }

  // Answers the complete requests in c.in, one at a time, while output is not blocked and no
  // /sleep is pending.
  void process(Conn& c) {
    while (!c.closing && !c.sleeping && c.out.empty()) {
      const std::size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos || end + 4 > o_.max_header) {
        if (c.in.size() > o_.max_header) {
          fail(c, 431, "Request Header Fields Too Large", Closed::too_large);
        } else if (!c.in.empty() && !c.request_armed) {
          arm(c, Kind::request, request_);  // the deadline for the whole header
          c.request_armed = true;
        }
        return;
      }
      if (c.request_armed) {
        c.timers.disarm(Kind::request);
        c.request_armed = false;
      }
      Request req;
      if (!parse(std::string_view(c.in).substr(0, end), req)) {
        fail(c, 400, "Bad Request", Closed::bad_request);
        return;
      }
      c.close_after_write = !req.keep_alive;
      bool sleeping = false;
      if (req.method != "GET") {
        c.out += response(405, "Method Not Allowed", "GET only\n", !req.keep_alive);
      } else if (req.target == "/") {
        c.out += req.keep_alive ? kHello : response(200, "OK", "Hello, world\n", true);
      } else if (const std::string metrics = req.target == "/metrics" ? http_timers::metrics_text(service_) : "";
                 !metrics.empty()) {
        c.out +=
            response(200, "OK", metrics, !req.keep_alive, "application/openmetrics-text; version=1.0.0; charset=utf-8");
      } else if (req.target.rfind("/sleep?ms=", 0) == 0) {
        std::int64_t ms = -1;
        const std::string_view v = req.target.substr(10);
        const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
        if (ec != std::errc() || p != v.data() + v.size() || ms < 0 || ms > 600000) {
          c.out += response(400, "Bad Request", "ms: 0 to 600000\n", !req.keep_alive);
        } else if (!http_timers::kHasTimers) {
          c.out += response(501, "Not Implemented", "no timer service in this build\n", !req.keep_alive);
        } else {
          sleeping = true;
        }
      } else {
        c.out += response(404, "Not Found", "not found\n", !req.keep_alive);
      }
      c.in.erase(0, end + 4);
      if (sleeping) {
        c.sleeping = true;
        c.timers.disarm(Kind::idle);
        std::int64_t ms = 0;
        const std::string_view v = req.target.substr(10);
        std::from_chars(v.data(), v.data() + v.size(), ms);
        c.timers.arm(Kind::sleep, std::chrono::milliseconds(ms));
        return;
      }
      ++stats_.requests;
      arm(c, Kind::idle, idle_);  // the touch
      if (!flush(c)) return;
    }
  }

  // Writes c.out. Returns true iff it is all written and the connection is still open.
  bool flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (w > 0) {
        c.out_off += static_cast<std::size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.epollout) {
          set_events(c, EPOLLOUT);  // no reads while blocked: level-triggered EPOLLIN would spin
          c.timers.arm(Kind::write, write_);
        }
        return false;
      }
      close_conn(c, Closed::peer);
      return false;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.epollout) {
      set_events(c, EPOLLIN | EPOLLRDHUP);
      c.timers.disarm(Kind::write);
    }
    if (c.close_after_write) {
      close_conn(c, Closed::peer);
      return false;
    }
    return true;
  }

  void set_events(Conn& c, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    c.epollout = (events & EPOLLOUT) != 0;
  }

  // An error status, then close. The unread input is drained first, so the close sends a FIN
  // and not a reset that could destroy the response before the client reads it.
  void fail(Conn& c, int status, const char* reason, Closed why) {
    char buf[16384];
    while (::read(c.fd, buf, sizeof buf) > 0) {
    }
    const std::string r = response(status, reason, std::string(reason) + "\n", true);
    [[maybe_unused]] const ssize_t w = ::send(c.fd, r.data(), r.size(), MSG_NOSIGNAL);
    ::shutdown(c.fd, SHUT_WR);
    close_conn(c, why);
  }

  void close_conn(Conn& c, Closed why) {
    if (c.closing) return;
    c.closing = true;
    for (const Kind k : {Kind::idle, Kind::request, Kind::write, Kind::sleep}) c.timers.disarm(k);
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    ++stats_.closed[static_cast<int>(why)];
    auto it = conns_.find(c.id);
    closed_.push_back(std::move(it->second));  // freed after this batch of events
    conns_.erase(it);
  }

  Shared& sh_;
  const Options& o_;
  int listen_fd_;
  LoopStats& stats_;
  http_timers::Service& service_;
  http_timers::LoopTimers timers_;  // outlives the Conns' timers (declared before them)
  std::chrono::milliseconds idle_, request_, write_;
  int ep_ = -1;
  bool warned_fds_ = false;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> closed_;
};

int listen_on(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) die("setsockopt(SO_REUSEPORT)");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) die("bind");
  if (::listen(fd, 65535) < 0) die("listen");
  return fd;
}

std::uint16_t port_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) die("getsockname");
  return ntohs(addr.sin_port);
}

void raise_nofile(std::size_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) die("getrlimit");
  const rlim_t need = want + 64;
  if (rl.rlim_max < need) {
    rlimit up{need, need};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) return;
  }
  rlimit soft{rl.rlim_max, rl.rlim_max};
  setrlimit(RLIMIT_NOFILE, &soft);
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < need) {
    std::fprintf(stderr,
                 "http_timeouts_server: RLIMIT_NOFILE is %llu and cannot be raised (hard limit %llu): at most about "
                 "%llu connections, not --max-conns %zu; raise `ulimit -Hn` as root\n",
                 static_cast<unsigned long long>(rl.rlim_cur), static_cast<unsigned long long>(rl.rlim_max),
                 static_cast<unsigned long long>(rl.rlim_cur > 64 ? rl.rlim_cur - 64 : 0), want);
  }
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "http_timeouts_server: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--port") {
      o.port = static_cast<std::uint16_t>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--duration") {
      o.duration_s = std::strtod(next(), nullptr);
    } else if (a == "--idle-ms") {
      o.idle_ms = std::strtoll(next(), nullptr, 10);
    } else if (a == "--request-ms") {
      o.request_ms = std::strtoll(next(), nullptr, 10);
    } else if (a == "--write-ms") {
      o.write_ms = std::strtoll(next(), nullptr, 10);
    } else if (a == "--precision-ms") {
      o.precision_ms = std::strtoll(next(), nullptr, 10);
    } else if (a == "--max-header") {
      o.max_header = std::strtoull(next(), nullptr, 10);
    } else if (a == "--max-conns") {
      o.max_conns = std::strtoull(next(), nullptr, 10);
    } else if (a == "--record-close") {
      o.record_close = true;
    } else {
      std::fprintf(stderr,
                   "usage: http_timeouts_server [--threads N] [--port P (0: ephemeral)] [--duration S] [--idle-ms T] "
                   "[--request-ms R] [--write-ms W] [--precision-ms P] [--max-header B] [--max-conns N] "
                   "[--record-close]\n");
      return 2;
    }
  }
  if (o.threads == 0 || o.idle_ms <= 0 || o.request_ms <= 0 || o.write_ms <= 0 || o.precision_ms <= 0 ||
      o.max_header < 64) {
    std::fprintf(stderr, "http_timeouts_server: bad options\n");
    return 2;
  }
  raise_nofile(o.max_conns);
  // SIGINT and SIGTERM are taken by the main thread's sigtimedwait; every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::vector<int> listeners;
  listeners.push_back(listen_on(o.port));
  const std::uint16_t port = port_of(listeners[0]);
  for (unsigned i = 1; i < o.threads; ++i) listeners.push_back(listen_on(port));

  Shared sh;
  sh.o = o;
  sh.stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (sh.stop_fd < 0) die("eventfd");
  std::vector<LoopStats> stats(o.threads);
  std::vector<std::unique_ptr<http_timers::Mailbox>> mailboxes;  // outlive the service's callbacks
  for (unsigned i = 0; i < o.threads; ++i) mailboxes.push_back(std::make_unique<http_timers::Mailbox>());
  const double cpu_start = cpu_seconds();
  const auto start = SteadyClock::now();
  {
    http_timers::Service service(std::chrono::milliseconds(o.precision_ms));
    std::vector<std::thread> loops;
    for (unsigned i = 0; i < o.threads; ++i) {
      loops.emplace_back([&, i] { EventLoop(sh, service, *mailboxes[i], listeners[i], stats[i]).run(); });
    }
    std::printf(
        "listening 127.0.0.1:%u service=%s threads=%u idle_ms=%lld request_ms=%lld write_ms=%lld precision_ms=%lld\n",
        port, http_timers::kServiceName, o.threads, static_cast<long long>(o.idle_ms),
        static_cast<long long>(o.request_ms), static_cast<long long>(o.write_ms),
        static_cast<long long>(o.precision_ms));
    std::fflush(stdout);

    const auto end =
        o.duration_s > 0
            ? start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(o.duration_s))
            : SteadyClock::time_point::max();
    int sig = 0;
    for (;;) {
      const auto now = SteadyClock::now();
      if (now >= end) break;
      const auto left = std::min<SteadyClock::duration>(end - now, std::chrono::hours(1));
      const auto s = std::chrono::duration_cast<std::chrono::seconds>(left);
      const timespec ts{static_cast<time_t>(s.count()),
                        static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(left - s).count())};
      sig = sigtimedwait(&stop_signals, nullptr, &ts);
      if (sig > 0) break;
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(sh.stop_fd, &one, sizeof one);  // level-triggered: every loop sees it
    for (auto& t : loops) t.join();
  }
  const double cpu = cpu_seconds() - cpu_start;
  const double wall = std::chrono::duration<double>(SteadyClock::now() - start).count();
  LoopStats all;
  for (const LoopStats& s : stats) {
    all.requests += s.requests;
    all.accepted += s.accepted;
    for (int k = 0; k < static_cast<int>(Closed::count); ++k) all.closed[k] += s.closed[k];
    for (int i = 0; i < 2; ++i)
      all.close_late_ns[i].insert(all.close_late_ns[i].end(), s.close_late_ns[i].begin(), s.close_late_ns[i].end());
  }
  if (o.record_close) {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::int64_t>& v = all.close_late_ns[i];
      std::sort(v.begin(), v.end());
      auto q = [&](double p) {
        return v.empty() ? 0.0
                         : static_cast<double>(
                               v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))]) /
                               1e6;
      };
      const auto early = std::count_if(v.begin(), v.end(), [](std::int64_t x) { return x < 0; });
      std::printf("close_lateness kind=%s n=%zu early=%lld p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
                  i == 0 ? "idle" : "request", v.size(), static_cast<long long>(early), q(0.5), q(0.99),
                  v.empty() ? 0.0 : static_cast<double>(v.back()) / 1e6);
    }
  }
  std::printf("stopped: service=%s requests=%llu accepted=%llu wall_s=%.3f cpu_s=%.3f cpu_us_per_request=%.3f closed:",
              http_timers::kServiceName, static_cast<unsigned long long>(all.requests),
              static_cast<unsigned long long>(all.accepted), wall, cpu,
              all.requests != 0 ? cpu * 1e6 / static_cast<double>(all.requests) : 0.0);
  for (int k = 0; k < static_cast<int>(Closed::count); ++k) {
    std::printf(" %s=%llu", kClosedNames[k], static_cast<unsigned long long>(all.closed[k]));
  }
  std::printf("\n");
  std::fflush(stdout);
  for (const int fd : listeners) ::close(fd);
  ::close(sh.stop_fd);
  return 0;
}
