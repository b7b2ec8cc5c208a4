// idle_timeout_server: a TCP echo server on 127.0.0.1 that closes connections idle for T and
// connections that leave a request unfinished for R, with both timers running on its epoll
// threads through chime::Lane; checked by a load client in the same program over real loopback
// sockets.
//
// Server: K event loops (--io-threads), each a thread with its own epoll fd, its own chime::Lane
// (Runtime::lane()) and its own table of connections. Each loop's epoll set holds the shared
// listening socket (non-blocking, EPOLLEXCLUSIVE: the loop that wakes accepts until EAGAIN and
// keeps what it accepted), its lane's ready_fd(), and its connections (the epoll data is a
// unique connection id, never the fd, which the kernel reuses as soon as it is closed). When
// ready_fd() is readable the loop calls lane.run_ready(), so every timer callback of a
// connection runs on the loop thread that owns it. A request is a line ('\n'); the server echoes
// what it reads. Each connection has two chime::Timer bound to the loop's lane:
// - idle: armed for T on accept, re-armed for T on every read (arm_after(T), the "touch": the
//   runtime's reschedule fast path, a CAS pair that does not involve the wheel thread);
// - request: armed for R when a read leaves a line unfinished, disarmed when a read finishes it
//   (a deadline for reading a request, like nginx's client_header_timeout or Go's
//   http.Server.ReadHeaderTimeout).
// Either callback closes the connection itself: epoll_ctl(DEL), close(fd), record why.
//
// No lock, and no defence against a callback racing the close. The connection table is the
// loop's alone, and the callbacks run on the loop thread, one at a time, never while the loop is
// doing anything else. On that thread a cancel of a run that has not started always wins, even
// when the wheel thread has already put the run in the lane's ready queue (lane.hpp: "cancel
// wins until the callback starts"). So when a read or an EOF comes in after a timer's due time
// but before its callback ran, the re-arm or the disarm simply wins: the callback never runs and
// the connection stays open, or is closed once, by the EOF. Closing on EOF is disarm() both
// timers, close(fd), free the Conn. The one rule left is chime::Timer's: a Timer may not be
// destroyed from its own callback, so a connection a timer closed is freed after run_ready
// returns. (With callbacks on runtime workers the loop would have to cancel_and_wait before
// freeing, and the callback could only shutdown(2) the socket and let the loop close it.) The
// report counts the re-arms and disarms that found their timer's due already passed: the cases
// where a worker's callback would have been racing the loop.
//
// Client: N connections over loopback TCP. Every connection sends one line and reads the echo;
// then the idle ones (--idle-fraction, half by default) stay silent, the stalled ones
// (--stalled-fraction, a tenth) send the start of a line after a random pause and then stay
// silent, and the busy ones send a full line after each random pause shorter than T/2, for
// --busy-ms. The client checks that every idle and every stalled connection got EOF from the
// server and no busy one did; the server checks that it closed exactly that many for each
// reason, and the close-time error of each:
//   idle:     server: fd closed - last read - T            client: EOF seen - last send - T
//   stalled:  server: fd closed - start of the request - R client: EOF seen - last send - R
// Pass iff the counts match and the server's figures are >= 0 (never early) and <= 2 * precision
// + allowance (default 200 ms, a scheduling allowance for a loaded 2-core machine; p50/p99/max
// are always reported). The client's figures are reported, not checked: they add the client's
// own lag in noticing EOF. Connects are paced (--connect-rate, 5000/s) so the idle timeouts do
// not all come due in one burst.
//
// The client runs in a forked child of this program: 10,000 loopback connections need
// 20,000 fds in one process, over the common hard RLIMIT_NOFILE of 20000 when setrlimit
// cannot raise it; as two processes each needs N + a few. Exits 0 iff every check passes.
#include <chime/chime.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: the same in parent and child

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Options {
  std::size_t connections = 10000;
  double idle_fraction = 0.5;
  double stalled_fraction = 0.1;
  std::int64_t timeout_ms = 1000;
  std::int64_t request_timeout_ms = -1;  // default T / 4
  std::int64_t precision_ms = 10;
  std::int64_t busy_ms = 3000;
  std::int64_t allowance_ms = 200;
  std::int64_t connect_rate = 5000;  // connections per second, all client threads together
  unsigned io_threads = 2;
  unsigned client_threads = 2;
  unsigned seed = 1;
};

// What the client does with its connection number i (both processes compute it).
enum class Kind { busy, idle, stalled };

std::size_t every(double fraction) { return fraction > 0 ? static_cast<std::size_t>(1.0 / fraction + 0.5) : 0; }

Kind kind_of(const Options& o, std::size_t i) {
  const std::size_t idle = every(o.idle_fraction), stalled = every(o.stalled_fraction);
  if (idle != 0 && i % idle == 0) return Kind::idle;
  if (stalled != 0 && i % stalled == stalled / 2) return Kind::stalled;
  return Kind::busy;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "idle_timeout_server: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

struct Summary {
  double p50 = 0, p99 = 0, max = 0, min = 0;
};
Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  s.max = v.back();
  s.min = v.front();
  return s;
}

// ---------------------------------------------------------------- server

// Why the server closed a connection.
enum class Closed : std::uint8_t { open, idle, request, peer, stop };

// A connection's figures for the report: one per accepted connection, kept for the server's
// life (the Conn itself is freed when the connection closes). Written only by the connection's
// loop thread; read by report() after the loops are joined.
struct ConnRecord {
  std::int64_t last_read_ns = 0;
  std::int64_t request_start_ns = 0;  // the read that left the last request unfinished
  std::int64_t close_ns = 0;
  Closed why = Closed::open;
};

// A live connection, owned by its loop's table. Its timers are bound to the loop's lane, so
// their callbacks run on the loop thread, which is the only thread that touches the Conn.
struct Conn {
  int fd = -1;
  std::uint64_t id = 0;  // unique, never reused: the index of its ConnRecord
  chime::Timer idle;
  chime::Timer request;
};

chime::RuntimeOptions runtime_options(const Options& o) {
  chime::RuntimeOptions r;
  r.precision = std::chrono::milliseconds(o.precision_ms);
  r.workers = 0;  // every timer here runs on a lane: the runtime needs no worker threads
  return r;
}

constexpr std::uint64_t kListenKey = ~std::uint64_t{0};  // epoll data of the listening socket
constexpr std::uint64_t kLaneKey = kListenKey - 1;       // and of the lane's ready_fd()

class Server;

// One event loop: an epoll fd, a lane, and the connections it accepted. Built, run and destroyed
// on its own thread; nothing in it is touched by any other thread.
class EventLoop {
 public:
  explicit EventLoop(Server& s);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  void run();

 private:
  void accept_all();
  void serve(Conn& c, std::uint32_t events);
  void on_timeout(Conn& c, Closed why);
  std::unique_ptr<Conn> close_conn(Conn& c, Closed why);

  Server& s_;
  chime::Lane lane_;  // outlives the Timers in conns_ and closed_ (declared before them)
  int ep_ = -1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;  // by id; no lock: one thread
  std::vector<std::unique_ptr<Conn>> closed_;                       // closed by a timer callback; freed after run_ready
  std::vector<epoll_event> events_ = std::vector<epoll_event>(256);
};

class Server {
 public:
  Server(const Options& o, int listen_fd)
      : o_(o),
        listen_fd_(listen_fd),
        timeout_(std::chrono::milliseconds(o.timeout_ms)),
        request_timeout_(std::chrono::milliseconds(o.request_timeout_ms)),
        capacity_(o.connections * 2 + 64),
        records_(new ConnRecord[capacity_]),
        runtime_(runtime_options(o)) {
    for (unsigned i = 0; i < o.io_threads; ++i) loops_.emplace_back([this] { EventLoop(*this).run(); });
  }

  void stop() {
    // The client has closed everything: let the loops see the last EOFs (up to 2 s).
    for (int i = 0; i < 200 && open_.load() != 0; ++i) std::this_thread::sleep_for(10ms);
    stop_.store(true);
    for (auto& t : loops_) t.join();  // each closes what it still has, then destroys its lane
  }

  // Returns true iff the server-side checks pass; prints the server's figures.
  bool report(std::size_t expected_idle, std::size_t expected_stalled, std::int64_t busy_start_ns,
              std::int64_t busy_end_ns) {
    const double t_ms = static_cast<double>(o_.timeout_ms), r_ms = static_cast<double>(o_.request_timeout_ms);
    std::vector<double> idle_err, request_err;
    std::size_t by[5] = {};
    std::size_t early = 0;
    const std::size_t accepted = std::min(accepted_.load(), capacity_);
    for (std::size_t i = 0; i < accepted; ++i) {
      const ConnRecord& c = records_[i];
      ++by[static_cast<int>(c.why)];
      double e = 0;
      if (c.why == Closed::idle) {
        e = static_cast<double>(c.close_ns - c.last_read_ns) / 1e6 - t_ms;
        idle_err.push_back(e);
      } else if (c.why == Closed::request) {
        e = static_cast<double>(c.close_ns - c.request_start_ns) / 1e6 - r_ms;
        request_err.push_back(e);
      }
      if (e < 0) ++early;
    }
    const std::size_t closed_idle = by[static_cast<int>(Closed::idle)];
    const std::size_t closed_request = by[static_cast<int>(Closed::request)];
    const std::size_t still_open = by[static_cast<int>(Closed::open)];
    const Summary si = summarize(idle_err), sr = summarize(request_err);
    const double busy_s = static_cast<double>(busy_end_ns - busy_start_ns) / 1e9;
    const std::uint64_t touches = touches_.load();
    const double bound = 2.0 * o_.precision_ms + o_.allowance_ms;
    std::printf(
        "server: %zu connections accepted by %u event loops; closed: %zu idle (expected %zu), %zu at the "
        "request timeout (expected %zu), %zu by the client, %zu at stop\n",
        accepted, o_.io_threads, closed_idle, expected_idle, closed_request, expected_stalled,
        by[static_cast<int>(Closed::peer)], by[static_cast<int>(Closed::stop)]);
    std::printf("server: %llu touches (Timer::arm_after on the loop thread) over the %.2f s run = %.0f touches/s\n",
                static_cast<unsigned long long>(touches), busy_s, busy_s > 0 ? touches / busy_s : 0.0);
    std::printf(
        "server: idle:    close time - last read - T:        p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f "
        "ms\n",
        si.p50, si.p99, si.max, si.min);
    std::printf(
        "server: stalled: close time - request start - R:    p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f "
        "ms\n",
        sr.p50, sr.p99, sr.max, sr.min);
    std::printf("server: bound: each <= 2 * precision (%lld ms) + scheduling allowance (%lld ms) = %.0f ms, and >= 0\n",
                static_cast<long long>(2 * o_.precision_ms), static_cast<long long>(o_.allowance_ms), bound);
    std::printf(
        "server: %llu re-arms or disarms on the loop thread found their timer's due already passed and its "
        "callback not run (its run perhaps already in the lane's ready queue); each won, and that callback "
        "never ran\n",
        static_cast<unsigned long long>(beat_due_.load()));
    const chime::Stats st = runtime_.stats();
    std::printf("server: runtime lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; %llu timers fired, %llu cancelled\n",
                st.lateness.p50.count() / 1e6, st.lateness.p99.count() / 1e6, st.lateness.max.count() / 1e6,
                static_cast<unsigned long long>(st.fired), static_cast<unsigned long long>(st.cancelled));
    bool ok = true;
    if (still_open != 0) {
      std::printf("server: FAIL: %zu connections never closed\n", still_open);
      ok = false;
    }
    if (closed_idle != expected_idle || closed_request != expected_stalled) {
      std::printf("server: FAIL: %zu closed idle and %zu at the request timeout, expected %zu and %zu\n", closed_idle,
                  closed_request, expected_idle, expected_stalled);
      ok = false;
    }
    if (early != 0) {
      std::printf("server: FAIL: %zu connections closed before their timeout\n", early);
      ok = false;
    }
    if (std::max(si.max, sr.max) > bound) {
      std::printf("server: FAIL: max close error %.1f ms > 2 * precision + allowance = %.0f ms\n",
                  std::max(si.max, sr.max), bound);
      ok = false;
    }
    return ok;
  }

 private:
  friend class EventLoop;

  Options o_;
  int listen_fd_;
  chime::Duration timeout_;
  chime::Duration request_timeout_;
  std::size_t capacity_;
  std::unique_ptr<ConnRecord[]> records_;
  chime::Runtime runtime_;  // outlives the loops' lanes: they are joined in stop()
  std::vector<std::thread> loops_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> accepted_{0};  // ids handed out (all loops; may pass capacity_)
  std::atomic<std::size_t> open_{0};
  std::atomic<std::uint64_t> touches_{0};
  std::atomic<std::uint64_t> beat_due_{0};
};

EventLoop::EventLoop(Server& s) : s_(s), lane_(s.runtime_.lane()) {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) die("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.u64 = kListenKey;
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, s_.listen_fd_, &ev) < 0) die("epoll_ctl (listening socket)");
  ev.events = EPOLLIN;  // level-triggered: readable until run_ready has consumed the signal
  ev.data.u64 = kLaneKey;
  if (epoll_ctl(ep_, EPOLL_CTL_ADD, lane_.ready_fd(), &ev) < 0) die("epoll_ctl (lane)");
}

EventLoop::~EventLoop() {
  // Connections still open (none when the client behaved): closed like the others. Their
  // Timers go here, on the lane's thread, before the lane.
  while (!conns_.empty()) close_conn(*conns_.begin()->second, Closed::stop);
  closed_.clear();
  ::close(ep_);
}

void EventLoop::run() {
  while (!s_.stop_.load()) {
    const int n = epoll_wait(ep_, events_.data(), static_cast<int>(events_.size()), 50);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t key = events_[i].data.u64;
      if (key == kListenKey) {
        accept_all();
      } else if (key == kLaneKey) {
        lane_.run_ready(1024);  // the timers' callbacks, here; more left: ready_fd() stays readable
        closed_.clear();        // the Conns they closed: no callback of theirs is running now
      } else if (auto it = conns_.find(key); it != conns_.end()) {
        serve(*it->second, events_[i].events);
      }
      // else: closed earlier in this batch (by a timer or an EOF): its event is stale.
    }
  }
}

void EventLoop::accept_all() {
  for (;;) {
    const int fd = ::accept4(s_.listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // another loop may have taken it
      if (errno == EMFILE || errno == ENFILE) die("accept4 (raise RLIMIT_NOFILE)");
      die("accept4");
    }
    const std::uint64_t id = s_.accepted_.fetch_add(1);
    if (id >= s_.capacity_) {
      ::close(fd);
      continue;
    }
    s_.records_[id].last_read_ns = now_ns();
    auto owned = std::make_unique<Conn>();
    Conn& c = *owned;
    c.fd = fd;
    c.id = id;
    c.idle = chime::Timer(lane_, [this, &c] { on_timeout(c, Closed::idle); });
    c.request = chime::Timer(lane_, [this, &c] { on_timeout(c, Closed::request); });
    c.idle.arm_after(s_.timeout_);
    conns_.emplace(id, std::move(owned));
    s_.open_.fetch_add(1);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
  }
}

void EventLoop::serve(Conn& c, std::uint32_t events) {
  char buf[512];
  bool eof = (events & (EPOLLHUP | EPOLLERR)) != 0;
  bool got = false;
  char last = 0;
  for (;;) {
    const ssize_t r = ::read(c.fd, buf, sizeof buf);
    if (r > 0) {
      got = true;
      last = buf[r - 1];
      const ssize_t w = ::write(c.fd, buf, static_cast<std::size_t>(r));  // echo; tiny, fits the buffer
      (void)w;
      if (static_cast<std::size_t>(r) < sizeof buf) break;  // drained (level-triggered: no read for EAGAIN)
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno != EAGAIN) eof = true;
    break;
  }
  const chime::TimePoint now = lane_.clock().now();
  // A re-arm or disarm that finds the due passed: the callback has not run (it would have closed
  // the connection), and it now never will. Here that is the whole story; on a worker it would
  // be running, or about to.
  auto due_passed = [&](const chime::Timer& t) {
    const auto due = t.due();
    if (due && *due <= now) s_.beat_due_.fetch_add(1, std::memory_order_relaxed);
  };
  if (eof) {
    due_passed(c.idle);
    due_passed(c.request);
    close_conn(c, Closed::peer);  // the Conn is freed here: no run of its timers starts after the disarms
    return;
  }
  if (!got) return;
  ConnRecord& rec = s_.records_[c.id];
  rec.last_read_ns = now_ns();
  due_passed(c.idle);
  c.idle.arm_after(s_.timeout_);  // the touch: replaces the pending run, even one already due
  s_.touches_.fetch_add(1, std::memory_order_relaxed);
  if (last == '\n') {
    if (c.request.armed()) {
      due_passed(c.request);
      c.request.disarm();  // the request is complete
    }
  } else if (!c.request.armed()) {
    rec.request_start_ns = rec.last_read_ns;
    c.request.arm_after(s_.request_timeout_);  // a request started: it must end within R
  }
}

// A timer's callback, inside lane_.run_ready() on this thread: nothing else touches c meanwhile.
void EventLoop::on_timeout(Conn& c, Closed why) {
  // Not destroyed here (this Timer's own callback): freed when run_ready returns.
  closed_.push_back(close_conn(c, why));
}

// Closes c (on this thread) and takes it out of the table; the caller frees it.
std::unique_ptr<Conn> EventLoop::close_conn(Conn& c, Closed why) {
  // On the lane's thread, outside a run of these timers, a disarm always wins: neither callback
  // runs after this, even if its run is already in the lane's ready queue. From one of the two
  // callbacks, that one's disarm finds nothing pending and the other's wins.
  c.idle.disarm();
  c.request.disarm();
  epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  ConnRecord& rec = s_.records_[c.id];
  rec.close_ns = now_ns();
  rec.why = why;
  s_.open_.fetch_sub(1);
  auto node = conns_.extract(c.id);
  return std::move(node.mapped());
}

// ---------------------------------------------------------------- client

struct ClientConn {
  int fd = -1;
  bool connected = false;
  Kind kind = Kind::busy;
  bool stalled = false;  // a stalled connection has sent the start of its last request
  std::int64_t last_send_ns = 0;
  std::int64_t eof_ns = 0;
};

struct ClientResult {
  std::vector<double> idle_err_ms, stalled_err_ms;
  std::size_t idle = 0, stalled = 0, busy = 0, idle_eof = 0, stalled_eof = 0, busy_eof = 0;
  std::uint64_t sent = 0, echoed = 0;
  std::int64_t busy_start_ns = 0, busy_end_ns = 0;
};

void client_thread(const Options& o, std::uint16_t port, std::size_t first, std::size_t count, unsigned seed,
                   ClientResult& out) {
  const std::int64_t t_ns = o.timeout_ms * 1'000'000;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> pause(t_ns / 10, t_ns / 2);  // pauses < T/2
  std::vector<ClientConn> conns(count);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  using Due = std::pair<std::int64_t, std::size_t>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> sends;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

  // A request: a full line, or (a stalled connection's last) only its start.
  auto send = [&](std::size_t i, bool whole) {
    const char line[] = "x\n";
    const std::size_t n = whole ? 2 : 1;
    if (::write(conns[i].fd, line, n) == static_cast<ssize_t>(n)) {
      conns[i].last_send_ns = now_ns();
      out.sent += n;
    }
  };

  std::size_t started = 0, connected = 0;
  const std::int64_t t0 = now_ns();
  std::int64_t busy_end = 0;
  std::vector<epoll_event> events(256);
  char buf[512];
  for (;;) {
    // Nonblocking connects, at most 256 in flight, so busy connections keep talking while
    // the rest connect (a blocking connect can stall a second on a dropped SYN).
    // Paced, so the idle connections' timeouts do not all come due in one burst.
    const auto allowed =
        static_cast<std::size_t>((now_ns() - t0) / 1'000'000 * o.connect_rate / 1000 / o.client_threads) + 1;
    while (started < count && started < allowed && started - connected < 256) {
      std::size_t i = started++;
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) die("client socket (raise RLIMIT_NOFILE)");
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 && errno != EINPROGRESS) {
        die("client connect");
      }
      conns[i].fd = fd;
      conns[i].kind = kind_of(o, first + i);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
      ev.data.u64 = i;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("client epoll_ctl");
    }
    const std::int64_t now = now_ns();
    if (connected == count && now >= busy_end) {
      // Give idle and stalled connections still open (a late connect) up to T + 2 s more.
      bool waiting = false;
      for (const ClientConn& c : conns) waiting |= c.kind != Kind::busy && c.eof_ns == 0;
      if (!waiting || now >= busy_end + t_ns + 2'000'000'000) break;
    }
    while (!sends.empty() && sends.top().first <= now) {
      auto [due, i] = sends.top();
      sends.pop();
      if (conns[i].eof_ns != 0) continue;
      if (conns[i].kind == Kind::stalled) {
        send(i, false);  // the start of a request, never finished
        conns[i].stalled = true;
        continue;
      }
      send(i, true);
      sends.emplace(now_ns() + pause(rng), i);
    }
    int timeout = 10;
    if (connected == count || started == count) {
      std::int64_t next = sends.empty() ? now + 10'000'000 : sends.top().first;
      if (connected == count && now < busy_end) next = std::min(next, busy_end);
      // Rounded up: a timeout of 0 for a send due in under 1 ms would spin.
      timeout = static_cast<int>(std::clamp<std::int64_t>((next - now_ns() + 999'999) / 1'000'000, 0, 10));
    }
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), timeout);
    if (n < 0 && errno != EINTR) die("client epoll_wait");
    for (int k = 0; k < n; ++k) {
      std::size_t i = events[k].data.u64;
      ClientConn& c = conns[i];
      if (!c.connected) {
        if ((events[k].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) continue;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          errno = err;
          die("client connect");
        }
        c.connected = true;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = i;
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        send(i, true);  // every connection sends one full request
        if (c.kind != Kind::idle) sends.emplace(now_ns() + pause(rng), i);
        if (++connected == count) {
          out.busy_start_ns = now_ns();
          busy_end = out.busy_start_ns + o.busy_ms * 1'000'000;
        }
        continue;
      }
      for (;;) {
        ssize_t r = ::read(c.fd, buf, sizeof buf);
        if (r > 0) {
          out.echoed += static_cast<std::uint64_t>(r);
          if (static_cast<std::size_t>(r) < sizeof buf) break;
          continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) break;
        c.eof_ns = now_ns();  // the server closed it (EOF or reset)
        epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        break;
      }
    }
  }
  out.busy_end_ns = now_ns();
  const double t_ms = static_cast<double>(o.timeout_ms), r_ms = static_cast<double>(o.request_timeout_ms);
  for (ClientConn& c : conns) {
    const bool eof = c.eof_ns != 0;
    const double since_send = static_cast<double>(c.eof_ns - c.last_send_ns) / 1e6;
    switch (c.kind) {
      case Kind::busy:
        ++out.busy;
        out.busy_eof += eof;
        break;
      case Kind::idle:
        ++out.idle;
        out.idle_eof += eof;
        if (eof) out.idle_err_ms.push_back(since_send - t_ms);
        break;
      case Kind::stalled:
        ++out.stalled;
        out.stalled_eof += eof;
        if (eof && c.stalled) out.stalled_err_ms.push_back(since_send - r_ms);
        break;
    }
    ::close(c.fd);
  }
  ::close(ep);
}

// Runs in the child; returns the exit status.
int run_client(const Options& o, std::uint16_t port) {
  std::vector<ClientResult> results(o.client_threads);
  std::vector<std::thread> threads;
  const std::size_t per = o.connections / o.client_threads;
  std::size_t first = 0;
  for (unsigned t = 0; t < o.client_threads; ++t) {
    std::size_t count = t + 1 == o.client_threads ? o.connections - first : per;
    threads.emplace_back(client_thread, std::cref(o), port, first, count, o.seed + t, std::ref(results[t]));
    first += count;
  }
  for (auto& th : threads) th.join();
  ClientResult all;
  all.busy_start_ns = results[0].busy_start_ns;
  all.busy_end_ns = results[0].busy_end_ns;
  for (auto& r : results) {
    all.idle += r.idle;
    all.stalled += r.stalled;
    all.busy += r.busy;
    all.idle_eof += r.idle_eof;
    all.stalled_eof += r.stalled_eof;
    all.busy_eof += r.busy_eof;
    all.sent += r.sent;
    all.echoed += r.echoed;
    all.idle_err_ms.insert(all.idle_err_ms.end(), r.idle_err_ms.begin(), r.idle_err_ms.end());
    all.stalled_err_ms.insert(all.stalled_err_ms.end(), r.stalled_err_ms.begin(), r.stalled_err_ms.end());
    all.busy_start_ns = std::max(all.busy_start_ns, r.busy_start_ns);
    all.busy_end_ns = std::min(all.busy_end_ns, r.busy_end_ns);
  }
  const Summary si = summarize(all.idle_err_ms), ss = summarize(all.stalled_err_ms);
  std::printf("client: %zu loopback TCP connections (%zu idle, %zu stalled, %zu busy), %llu bytes sent, %llu echoed\n",
              all.idle + all.stalled + all.busy, all.idle, all.stalled, all.busy,
              static_cast<unsigned long long>(all.sent), static_cast<unsigned long long>(all.echoed));
  std::printf("client: closed by the server: idle %zu/%zu, stalled %zu/%zu, busy %zu/%zu\n", all.idle_eof, all.idle,
              all.stalled_eof, all.stalled, all.busy_eof, all.busy);
  std::printf("client: idle:    EOF seen - last byte sent - T: p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms\n",
              si.p50, si.p99, si.max, si.min);
  std::printf("client: stalled: EOF seen - last byte sent - R: p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms\n",
              ss.p50, ss.p99, ss.max, ss.min);
  const double bound = 2.0 * o.precision_ms + o.allowance_ms;
  int status = 0;
  if (all.idle_eof != all.idle || all.stalled_eof != all.stalled || all.busy_eof != 0) {
    std::printf("client: FAIL: the server did not close exactly the idle and the stalled connections\n");
    status = 1;
  }
  std::printf(
      "client: (the client's figures include its own lag in noticing EOF, and are negative when it noticed\n"
      "client:  a connection late and sent its first byte after the server's timer had started; the bound\n"
      "client:  is checked on the server's figures below, the times its event loops closed the fd)\n");
  const double worst = std::max(si.max, ss.max);
  if (worst > bound) std::printf("client: note: the client saw EOF up to %.1f ms past the bound\n", worst - bound);
  std::fflush(stdout);
  return status;
}

void raise_nofile(std::size_t need) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) die("getrlimit");
  const rlim_t want = std::max<rlim_t>(30000, need);
  rlimit up{want, std::max(rl.rlim_max, want)};
  if (setrlimit(RLIMIT_NOFILE, &up) == 0) return;
  // Not privileged to raise the hard limit: take what it allows.
  rlimit soft{rl.rlim_max, rl.rlim_max};
  if (setrlimit(RLIMIT_NOFILE, &soft) < 0 || rl.rlim_max < need) {
    std::fprintf(stderr,
                 "idle_timeout_server: RLIMIT_NOFILE: need %zu fds per process, hard limit is %llu and setrlimit "
                 "to %llu failed (%s); run with a higher `ulimit -Hn` or fewer --connections\n",
                 need, static_cast<unsigned long long>(rl.rlim_max), static_cast<unsigned long long>(want),
                 std::strerror(errno ? errno : EPERM));
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "idle_timeout_server: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--connections")
      o.connections = std::strtoull(next(), nullptr, 10);
    else if (a == "--idle-fraction")
      o.idle_fraction = std::strtod(next(), nullptr);
    else if (a == "--stalled-fraction")
      o.stalled_fraction = std::strtod(next(), nullptr);
    else if (a == "--timeout-ms")
      o.timeout_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--request-timeout-ms")
      o.request_timeout_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--precision-ms")
      o.precision_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--busy-ms")
      o.busy_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--allowance-ms")
      o.allowance_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--connect-rate")
      o.connect_rate = std::strtoll(next(), nullptr, 10);
    else if (a == "--io-threads")
      o.io_threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (a == "--client-threads")
      o.client_threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (a == "--seed")
      o.seed = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else {
      std::fprintf(stderr,
                   "usage: idle_timeout_server [--connections N] [--idle-fraction F] [--stalled-fraction F] "
                   "[--timeout-ms T] [--request-timeout-ms R] [--precision-ms P] [--busy-ms B] [--allowance-ms A] "
                   "[--connect-rate C] [--io-threads K] [--client-threads C] [--seed S]\n");
      return 2;
    }
  }
  if (o.request_timeout_ms < 0) o.request_timeout_ms = o.timeout_ms / 4;
  if (o.connections == 0 || o.io_threads == 0 || o.client_threads == 0 || o.timeout_ms <= 0 || o.precision_ms <= 0 ||
      o.connect_rate <= 0 || o.busy_ms < 2 * o.timeout_ms || o.request_timeout_ms <= 0 ||
      o.request_timeout_ms >= o.timeout_ms) {
    std::fprintf(stderr,
                 "idle_timeout_server: bad options (busy-ms must be >= 2 * timeout-ms, and 0 < request-timeout-ms "
                 "< timeout-ms)\n");
    return 2;
  }
  std::printf(
      "idle_timeout_server: %zu connections, T = %lld ms, R = %lld ms, precision %lld ms, busy phase %lld ms, "
      "%u event loops, %u client threads, seed %u\n",
      o.connections, static_cast<long long>(o.timeout_ms), static_cast<long long>(o.request_timeout_ms),
      static_cast<long long>(o.precision_ms), static_cast<long long>(o.busy_ms), o.io_threads, o.client_threads,
      o.seed);
  raise_nofile(o.connections + 256);
  std::signal(SIGPIPE, SIG_IGN);  // a write to a connection the peer closed fails with EPIPE instead

  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) die("bind");
  if (::listen(lfd, 4096) < 0) die("listen");
  socklen_t len = sizeof addr;
  if (getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) die("getsockname");
  const std::uint16_t port = ntohs(addr.sin_port);
  std::fflush(stdout);

  // Fork before any thread exists.
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    ::close(lfd);
    std::_Exit(run_client(o, port));
  }

  const std::int64_t start = now_ns();
  Server server(o, lfd);
  int wstatus = 0;
  while (waitpid(child, &wstatus, 0) < 0) {
    if (errno != EINTR) die("waitpid");
  }
  const std::int64_t end = now_ns();
  server.stop();
  ::close(lfd);
  std::size_t expected_idle = 0, expected_stalled = 0;
  for (std::size_t i = 0; i < o.connections; ++i) {
    const Kind k = kind_of(o, i);
    expected_idle += k == Kind::idle;
    expected_stalled += k == Kind::stalled;
  }
  const bool server_ok = server.report(expected_idle, expected_stalled, start, end);
  const bool client_ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) > 1) std::printf("client: FAIL: exited abnormally\n");
  std::printf("%s (run took %.1f s; errors above include loopback and epoll scheduling latency)\n",
              server_ok && client_ok ? "PASS" : "FAIL", (end - start) / 1e9);
  return server_ok && client_ok ? 0 : 1;
}
