// idle_timeout_server: a TCP echo server on 127.0.0.1 that closes connections idle for T, one
// chime runtime timer per connection, checked by a load client in the same program.
//
// Server: one listening thread (blocking accept4, SOCK_NONBLOCK) allocates a Conn for each
// connection, schedules its idle timer (schedule_after(T)) and hands it to one of several I/O
// threads, each with its own epoll fd (the epoll data is a unique connection id, never the fd,
// which the kernel reuses as soon as it is closed). Every read pushes the timer later:
// reschedule_after(timer, T), the "touch", a CAS pair that never involves the wheel thread.
// The timer's callback runs on a runtime worker and only calls shutdown(fd, SHUT_RDWR); the
// I/O thread that owns the fd then sees EOF/HUP, closes the fd and frees the Conn.
//
// Freeing safely. The callback holds a raw Conn*, so the Conn may be freed, and its fd closed
// (the number is then reused), only once no callback can be using them. A bare cancel() cannot
// tell that: false means it lost, and the callback may be running on a worker at that very
// moment. So close_conn() first calls cancel_and_wait(timer), chime's timer_delete_sync (the
// Linux kernel's del_timer_sync: deactivate the timer and wait for a handler still running on
// another CPU). It returns `cancelled` (the callback never runs), `done` (it ran and returned;
// `unknown`, for an id this runtime issued, says the same: its slot was reused since), or
// `running`: a run was in progress, and the call returned only after it did. In every case no
// callback touches the Conn afterwards, so the I/O thread closes the fd and deletes the Conn
// with no lock shared with the callback. The only other place a timer's memory may be freed
// is that timer's own callback. (chime::KeyedTimers suits values that own what `execute` uses,
// an id or a shared_ptr: its remove() does not wait for an execute in progress, so it cannot
// say when a raw pointer may be freed.) The report counts the frees where cancel_and_wait
// returned `running`: the cases where waiting mattered.
//
// Client: N connections (half idle by default). Every connection sends one byte and reads
// the echo; then the idle ones stay silent and the busy ones send a byte after a random
// pause shorter than T/2, for --busy-ms. The client checks that every idle connection got EOF
// from the server and no busy one did, and the close-time error of each idle one:
//   client: EOF seen - last byte sent - T      server: fd closed - last read - T
// Pass iff exactly the idle connections got EOF, and the server's figure is >= 0 (never early)
// and <= 2 * precision + allowance (default 200 ms, a scheduling allowance for a loaded 2-core
// machine; p50/p99/max are always reported). The client's figure is reported, not checked: it
// adds the client's own lag in noticing EOF. Connects are paced (--connect-rate, 5000/s) so the
// idle timeouts do not all come due in one burst.
//
// The client runs in a forked child of this program: 10,000 loopback connections need
// 20,000 fds in one process, over the common hard RLIMIT_NOFILE of 20000 when setrlimit
// cannot raise it; as two processes each needs N + a few. Exits 0 iff every check passes.
#include <chime/chime.hpp>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
  std::int64_t timeout_ms = 1000;
  std::int64_t precision_ms = 10;
  std::int64_t busy_ms = 3000;
  std::int64_t allowance_ms = 200;
  std::int64_t connect_rate = 5000;  // connections per second, all client threads together
  unsigned io_threads = 2;
  unsigned client_threads = 2;
  unsigned seed = 1;
};

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

// A connection's figures for the report: one per accepted connection, kept for the server's
// life (the Conn itself is freed when the connection closes).
struct ConnRecord {
  std::atomic<std::int64_t> last_read_ns{0};
  std::atomic<std::int64_t> close_ns{0};
  std::atomic<std::int64_t> fire_ns{0};  // when the idle callback shut it down
  std::atomic<bool> timed_out{false};
};

// A live connection: allocated on accept, freed by close_conn() after cancel_and_wait. Its
// idle callback reads fd and id, set before the timer is scheduled; nothing writes them after.
struct Conn {
  int fd = -1;
  std::uint64_t id = 0;  // unique, never reused: the index of its ConnRecord
  chime::TimerId timer;  // the idle timer, set before the Conn is published to its I/O thread
};

chime::RuntimeOptions runtime_options(const Options& o) {
  chime::RuntimeOptions r;
  r.precision = std::chrono::milliseconds(o.precision_ms);
  r.workers = 1;  // the callback only calls shutdown(2)
  return r;
}

class Server {
 public:
  Server(const Options& o, int listen_fd)
      : o_(o),
        listen_fd_(listen_fd),
        timeout_(std::chrono::milliseconds(o.timeout_ms)),
        capacity_(o.connections * 2 + 64),
        records_(new ConnRecord[capacity_]),
        live_(new std::atomic<Conn*>[capacity_]()),
        runtime_(runtime_options(o)) {
    for (unsigned i = 0; i < o.io_threads; ++i) {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      if (ep < 0) die("epoll_create1");
      epolls_.push_back(ep);
    }
    for (unsigned i = 0; i < o.io_threads; ++i) io_.emplace_back([this, i] { io_loop(epolls_[i]); });
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  void stop() {
    // The client has closed everything: let the I/O threads see the last EOFs (up to 2 s).
    for (int i = 0; i < 200 && open_count() != 0; ++i) std::this_thread::sleep_for(10ms);
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept4 with EINVAL
    acceptor_.join();
    for (auto& t : io_) t.join();
    // Connections the I/O threads did not close (none when the client behaved): the same rule.
    for (std::size_t id = 0; id < accepted_.load(); ++id) {
      if (Conn* c = live_[id].load(std::memory_order_acquire)) close_conn(-1, c);
    }
  }

  // Returns true iff the server-side checks pass; prints the server's figures.
  bool report(std::size_t expected_idle, std::int64_t busy_start_ns, std::int64_t busy_end_ns) {
    const double t_ms = static_cast<double>(o_.timeout_ms);
    std::vector<double> err, fire_err;
    std::size_t timed_out = 0, early = 0;
    for (std::size_t i = 0; i < accepted_.load(); ++i) {
      const ConnRecord& c = records_[i];
      if (!c.timed_out.load() || c.close_ns.load() == 0) continue;
      ++timed_out;
      double e = static_cast<double>(c.close_ns.load() - c.last_read_ns.load()) / 1e6 - t_ms;
      if (e < 0) ++early;
      err.push_back(e);
      fire_err.push_back(static_cast<double>(c.fire_ns.load() - c.last_read_ns.load()) / 1e6 - t_ms);
    }
    const Summary f = summarize(fire_err);
    const Summary s = summarize(err);
    const double busy_s = static_cast<double>(busy_end_ns - busy_start_ns) / 1e9;
    const std::uint64_t touches = touches_.load();
    std::printf("server: %zu connections accepted, %zu closed idle (expected %zu), %zu closed by the client\n",
                accepted_.load(), timed_out, expected_idle, closed_by_peer_.load());
    std::printf("server: %llu touches (Runtime::reschedule_after) over the %.2f s run = %.0f touches/s\n",
                static_cast<unsigned long long>(touches), busy_s, busy_s > 0 ? touches / busy_s : 0.0);
    std::printf("server: close time - last read - T: p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms\n", s.p50,
                s.p99, s.max, s.min);
    std::printf("server: bound: close time - last read - T <= 2 * precision (%lld ms) + scheduling allowance "
                "(%lld ms) = %lld ms, and >= 0\n",
                static_cast<long long>(2 * o_.precision_ms), static_cast<long long>(o_.allowance_ms),
                static_cast<long long>(2 * o_.precision_ms + o_.allowance_ms));
    std::printf("server: of which the idle callback ran at last read + T + p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
                f.p50, f.p99, f.max);
    const std::size_t freed = freed_cancelled_.load() + freed_running_.load() + freed_done_.load();
    std::printf(
        "server: %zu connections freed, each after cancel_and_wait on its idle timer returned: %zu "
        "cancelled (never ran), %zu done (had run), %zu running (waited for the callback to return "
        "before freeing: the frees where waiting mattered)\n",
        freed, freed_cancelled_.load(), freed_done_.load(), freed_running_.load());
    const chime::Stats st = runtime_.stats();
    std::printf("server: runtime lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; %llu timers fired\n",
                st.lateness.p50.count() / 1e6, st.lateness.p99.count() / 1e6, st.lateness.max.count() / 1e6,
                static_cast<unsigned long long>(st.fired));
    bool ok = true;
    if (freed != accepted_.load()) {
      std::printf("server: FAIL: %zu connections freed, %zu accepted\n", freed, accepted_.load());
      ok = false;
    }
    if (timed_out != expected_idle) {
      std::printf("server: FAIL: %zu connections closed idle, expected %zu\n", timed_out, expected_idle);
      ok = false;
    }
    if (early != 0) {
      std::printf("server: FAIL: %zu connections closed before T of idleness\n", early);
      ok = false;
    }
    if (s.max > 2.0 * o_.precision_ms + o_.allowance_ms) {
      std::printf("server: FAIL: max close error %.1f ms > 2 * precision + allowance = %lld ms\n", s.max,
                  static_cast<long long>(2 * o_.precision_ms + o_.allowance_ms));
      ok = false;
    }
    return ok;
  }

 private:
  std::size_t open_count() {
    std::size_t open = 0;
    for (std::size_t i = 0; i < accepted_.load(); ++i) open += records_[i].close_ns.load() == 0;
    return open;
  }

  // The idle timer's callback, on a runtime worker. Never closes or frees: the I/O thread owning
  // the fd does, after cancel_and_wait, so c.fd is open (and c alive) for as long as this runs.
  void on_idle(const Conn& c) {
    ConnRecord& rec = records_[c.id];
    char b;
    // The peer closed first and its EOF waits in the I/O thread's queue: not an idle close.
    const bool peer_closed = ::recv(c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    if (!peer_closed) rec.timed_out.store(true);
    rec.fire_ns.store(now_ns());
    ::shutdown(c.fd, SHUT_RDWR);  // wakes the owning I/O thread with EOF
  }

  void accept_loop() {
    std::size_t next = 0;
    while (!stop_.load()) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (stop_.load()) break;
        if (errno == EMFILE || errno == ENFILE) die("accept4 (raise RLIMIT_NOFILE)");
        die("accept4");
      }
      const std::uint64_t id = accepted_.load();
      if (id >= capacity_) {
        ::close(fd);
        continue;
      }
      records_[id].last_read_ns.store(now_ns());
      auto* c = new Conn{fd, id, {}};  // freed by close_conn
      // The callback may run as soon as T has passed; it uses only c->fd and c->id, set above.
      c->timer = runtime_.schedule_after(timeout_, [this, c] { on_idle(*c); });
      live_[id].store(c, std::memory_order_release);  // the I/O thread takes it from here
      accepted_.store(id + 1);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = id;
      if (epoll_ctl(epolls_[next++ % epolls_.size()], EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
    }
  }

  // Closes and frees a connection (on its I/O thread; ep < 0: after they stopped). The rule:
  // free only after cancel_and_wait returned. A bare cancel() that returned false could have
  // lost to a callback running right now, which would then use a freed Conn and a closed (or
  // already reused) fd.
  void close_conn(int ep, Conn* c) {
    switch (runtime_.cancel_and_wait(c->timer)) {
      case chime::CancelResult::cancelled:  // the callback never runs
        freed_cancelled_.fetch_add(1, std::memory_order_relaxed);
        break;
      case chime::CancelResult::running:  // it was running: the call returned when it had
        freed_running_.fetch_add(1, std::memory_order_relaxed);
        break;
      case chime::CancelResult::done:     // it ran and returned
      case chime::CancelResult::unknown:  // the same, and its slot was reused since
        freed_done_.fetch_add(1, std::memory_order_relaxed);
        break;
    }
    // From here on no callback touches *c or its fd, and what the callback wrote is visible.
    if (ep >= 0) epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    ConnRecord& rec = records_[c->id];
    rec.close_ns.store(now_ns());
    if (!rec.timed_out.load()) closed_by_peer_.fetch_add(1);
    live_[c->id].store(nullptr, std::memory_order_relaxed);
    delete c;
  }

  void io_loop(int ep) {
    std::vector<epoll_event> events(256);
    char buf[512];
    while (!stop_.load()) {
      int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 50);
      if (n < 0) {
        if (errno == EINTR) continue;
        die("epoll_wait");
      }
      for (int i = 0; i < n; ++i) {
        const std::uint64_t id = events[i].data.u64;
        Conn* c = live_[id].load(std::memory_order_acquire);  // only this thread frees it
        if (c == nullptr) continue;
        const int fd = c->fd;
        bool eof = (events[i].events & (EPOLLHUP | EPOLLERR)) != 0;
        bool got = false;
        for (;;) {
          ssize_t r = ::read(fd, buf, sizeof buf);
          if (r > 0) {
            got = true;
            ssize_t w = ::write(fd, buf, static_cast<std::size_t>(r));  // echo; tiny, fits the buffer
            (void)w;
            if (static_cast<std::size_t>(r) < sizeof buf) break;  // drained (level-triggered: no read for EAGAIN)
            continue;
          }
          if (r == 0 || (errno != EAGAIN && errno != EINTR)) eof = true;
          if (r < 0 && errno == EINTR) continue;
          break;
        }
        if (got && !eof) {
          // A byte read after the timer fired does not count: the connection is already shut.
          const std::int64_t t = now_ns();
          if (runtime_.reschedule_after(c->timer, timeout_)) {
            records_[id].last_read_ns.store(t);
            touches_.fetch_add(1, std::memory_order_relaxed);
          }
        }
        if (eof) close_conn(ep, c);
      }
    }
    ::close(ep);
  }

  Options o_;
  int listen_fd_;
  chime::Duration timeout_;
  std::size_t capacity_;
  std::unique_ptr<ConnRecord[]> records_;
  std::unique_ptr<std::atomic<Conn*>[]> live_;  // by id: the open connections (null once freed)
  chime::Runtime runtime_;                      // declared last of these: destroyed first
  std::vector<int> epolls_;
  std::vector<std::thread> io_;
  std::thread acceptor_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> accepted_{0};
  std::atomic<std::size_t> closed_by_peer_{0};
  std::atomic<std::uint64_t> touches_{0};
  // close_conn's cancel_and_wait results (unknown counts as done)
  std::atomic<std::size_t> freed_cancelled_{0};
  std::atomic<std::size_t> freed_running_{0};
  std::atomic<std::size_t> freed_done_{0};
};

// ---------------------------------------------------------------- client

struct ClientConn {
  int fd = -1;
  bool connected = false;
  bool idle = false;
  std::int64_t last_send_ns = 0;
  std::int64_t eof_ns = 0;
};

struct ClientResult {
  std::vector<double> idle_err_ms;
  std::size_t idle = 0, busy = 0, idle_eof = 0, busy_eof = 0, early = 0;
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
  const std::size_t idle_every = o.idle_fraction > 0 ? static_cast<std::size_t>(1.0 / o.idle_fraction + 0.5) : 0;

  auto send_byte = [&](std::size_t i) {
    char b = 'x';
    if (::write(conns[i].fd, &b, 1) == 1) {
      conns[i].last_send_ns = now_ns();
      ++out.sent;
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
    const auto allowed = static_cast<std::size_t>((now_ns() - t0) / 1'000'000 * o.connect_rate / 1000 /
                                                  o.client_threads) + 1;
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
      conns[i].idle = idle_every != 0 && (first + i) % idle_every == 0;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
      ev.data.u64 = i;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("client epoll_ctl");
    }
    const std::int64_t now = now_ns();
    if (connected == count && now >= busy_end) {
      // Give idle connections still open (a late connect) up to T + 2 s more.
      bool waiting = false;
      for (const ClientConn& c : conns) waiting |= c.idle && c.eof_ns == 0;
      if (!waiting || now >= busy_end + t_ns + 2'000'000'000) break;
    }
    while (!sends.empty() && sends.top().first <= now) {
      auto [due, i] = sends.top();
      sends.pop();
      if (conns[i].eof_ns != 0) continue;
      send_byte(i);
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
        send_byte(i);  // every connection talks once
        if (!c.idle) sends.emplace(now_ns() + pause(rng), i);
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
  const double t_ms = static_cast<double>(o.timeout_ms);
  for (ClientConn& c : conns) {
    (c.idle ? out.idle : out.busy) += 1;
    if (c.eof_ns != 0) {
      (c.idle ? out.idle_eof : out.busy_eof) += 1;
      if (c.idle) {
        double e = static_cast<double>(c.eof_ns - c.last_send_ns) / 1e6 - t_ms;
        if (e < 0) ++out.early;
        out.idle_err_ms.push_back(e);
      }
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
    all.busy += r.busy;
    all.idle_eof += r.idle_eof;
    all.busy_eof += r.busy_eof;
    all.early += r.early;
    all.sent += r.sent;
    all.echoed += r.echoed;
    all.idle_err_ms.insert(all.idle_err_ms.end(), r.idle_err_ms.begin(), r.idle_err_ms.end());
    all.busy_start_ns = std::max(all.busy_start_ns, r.busy_start_ns);
    all.busy_end_ns = std::min(all.busy_end_ns, r.busy_end_ns);
  }
  const Summary s = summarize(all.idle_err_ms);
  std::printf("client: %zu connections (%zu idle, %zu busy), %llu bytes sent, %llu echoed\n", all.idle + all.busy,
              all.idle, all.busy, static_cast<unsigned long long>(all.sent),
              static_cast<unsigned long long>(all.echoed));
  std::printf("client: idle closed by the server %zu/%zu, busy closed by the server %zu/%zu\n", all.idle_eof,
              all.idle, all.busy_eof, all.busy);
  std::printf("client: EOF seen - last byte sent - T: p50 %.1f ms, p99 %.1f ms, max %.1f ms, min %.1f ms\n", s.p50,
              s.p99, s.max, s.min);
  const double bound = 2.0 * o.precision_ms + o.allowance_ms;
  int status = 0;
  if (all.idle_eof != all.idle || all.busy_eof != 0) {
    std::printf("client: FAIL: the server did not close exactly the idle connections\n");
    status = 1;
  }
  std::printf("client: (the client's figure includes its own lag in noticing EOF, and is negative when it noticed\n"
              "client:  a connection late and sent its first byte after the server's timer had started; the bound\n"
              "client:  is checked on the server's figure below, the time its I/O thread closed the fd)\n");
  if (s.max > bound) std::printf("client: note: the client saw EOF up to %.1f ms past the bound\n", s.max - bound);
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
    if (a == "--connections") o.connections = std::strtoull(next(), nullptr, 10);
    else if (a == "--idle-fraction") o.idle_fraction = std::strtod(next(), nullptr);
    else if (a == "--timeout-ms") o.timeout_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--precision-ms") o.precision_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--busy-ms") o.busy_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--allowance-ms") o.allowance_ms = std::strtoll(next(), nullptr, 10);
    else if (a == "--connect-rate") o.connect_rate = std::strtoll(next(), nullptr, 10);
    else if (a == "--io-threads") o.io_threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (a == "--client-threads") o.client_threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (a == "--seed") o.seed = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else {
      std::fprintf(stderr,
                   "usage: idle_timeout_server [--connections N] [--idle-fraction F] [--timeout-ms T] "
                   "[--precision-ms P] [--busy-ms B] [--allowance-ms A] [--connect-rate R] [--io-threads K] [--client-threads C] "
                   "[--seed S]\n");
      return 2;
    }
  }
  if (o.connections == 0 || o.io_threads == 0 || o.client_threads == 0 || o.timeout_ms <= 0 ||
      o.precision_ms <= 0 || o.connect_rate <= 0 || o.busy_ms < 2 * o.timeout_ms) {
    std::fprintf(stderr, "idle_timeout_server: bad options (busy-ms must be >= 2 * timeout-ms)\n");
    return 2;
  }
  std::printf("idle_timeout_server: %zu connections, T = %lld ms, precision %lld ms, busy phase %lld ms, "
              "%u I/O threads, %u client threads, seed %u\n",
              o.connections, static_cast<long long>(o.timeout_ms), static_cast<long long>(o.precision_ms),
              static_cast<long long>(o.busy_ms), o.io_threads, o.client_threads, o.seed);
  raise_nofile(o.connections + 256);
  std::signal(SIGPIPE, SIG_IGN);  // a write to a connection the peer closed fails with EPIPE instead

  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
  const std::size_t expected_idle =
      o.idle_fraction > 0 ? (o.connections + static_cast<std::size_t>(1.0 / o.idle_fraction + 0.5) - 1) /
                                static_cast<std::size_t>(1.0 / o.idle_fraction + 0.5)
                          : 0;
  const bool server_ok = server.report(expected_idle, start, end);
  const bool client_ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) > 1) std::printf("client: FAIL: exited abnormally\n");
  std::printf("%s (run took %.1f s; errors above include loopback and epoll scheduling latency)\n",
              server_ok && client_ok ? "PASS" : "FAIL", (end - start) / 1e9);
  return server_ok && client_ok ? 0 : 1;
}
