// SPDX-License-Identifier: BSL-1.0
// idle_timeout_load: the load client and judge of examples/idle_timeout_server.cpp (ctest
// example_idle_timeout_server). Usage: idle_timeout_load SERVER [options below].
//
// Starts SERVER --port 0 with the timeouts and event loops asked for, reads the port from its
// first line, and opens N connections (--connections) to it over loopback TCP from client
// threads. Every connection sends one line and reads the echo; then the idle ones
// (--idle-fraction, half by default) stay silent, the stalled ones (--stalled-fraction, a tenth)
// send the start of a line after a random pause and then stay silent, and the busy ones send a
// full line after each random pause shorter than T/2, for --busy-ms. Connects are paced
// (--connect-rate, 5000/s) so the idle timeouts do not all come due in one burst. Then the
// client closes everything, sends SIGTERM and reads the server's "stopped:" line.
//
// The guarantees checked (exit 0 iff all hold):
// - exactly the idle and the stalled connections are closed by the server, each by the right
//   timer: the client saw EOF on every idle and stalled connection and on no busy one, and the
//   server counts exactly that many closes at the idle timeout and at the request timeout;
// - never early: each close at a timeout came after its deadline (the server's last read + T,
//   or the request's start + R: the server's minimum close - deadline is >= 0);
// - on time: each came within 2 * precision + --allowance-ms of its deadline (default 200 ms, a
//   scheduling allowance for a loaded 2-core machine; the server's maximum);
// - every connection was accepted and closed (accepted = N = the closes by all reasons), and
//   SIGTERM stops the server with exit status 0.
// The client's own EOF-time figures are reported, not checked: they add its lag in noticing EOF.
// The server runs in its own process: 10,000 loopback connections need 20,000 fds in one
// process, over the common hard RLIMIT_NOFILE of 20000 when setrlimit cannot raise it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

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

// What the client does with its connection number i.
enum class Kind { busy, idle, stalled };

std::size_t every(double fraction) { return fraction > 0 ? static_cast<std::size_t>(1.0 / fraction + 0.5) : 0; }

Kind kind_of(const Options& o, std::size_t i) {
  const std::size_t idle = every(o.idle_fraction), stalled = every(o.stalled_fraction);
  if (idle != 0 && i % idle == 0) return Kind::idle;
  if (stalled != 0 && i % stalled == stalled / 2) return Kind::stalled;
  return Kind::busy;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "idle_timeout_load: %s: %s\n", what, std::strerror(errno));
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

// Runs the client threads; returns true iff the server closed exactly the idle and the stalled
// connections (as the client saw them). Prints the client's figures.
bool run_client(const Options& o, std::uint16_t port, std::int64_t& busy_start_ns, std::int64_t& busy_end_ns) {
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
  busy_start_ns = all.busy_start_ns;
  busy_end_ns = all.busy_end_ns;
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
  std::printf(
      "client: (the client's figures include its own lag in noticing EOF, and are negative when it noticed\n"
      "client:  a connection late and sent its first byte after the server's timer had started; the bounds\n"
      "client:  are checked on the server's figures, the times its event loops closed the fd)\n");
  if (all.idle_eof != all.idle || all.stalled_eof != all.stalled || all.busy_eof != 0) {
    std::printf("FAIL: the server did not close exactly the idle and the stalled connections\n");
    return false;
  }
  return true;
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
                 "idle_timeout_load: RLIMIT_NOFILE: need %zu fds per process, hard limit is %llu and setrlimit "
                 "to %llu failed (%s); run with a higher `ulimit -Hn` or fewer --connections\n",
                 need, static_cast<unsigned long long>(rl.rlim_max), static_cast<unsigned long long>(want),
                 std::strerror(errno ? errno : EPERM));
    std::exit(2);
  }
}

// The server's process and the read end of its stdout.
struct Server {
  pid_t pid = -1;
  FILE* out = nullptr;
};

Server start_server(const char* path, const Options& o) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) die("pipe2");
  const std::vector<std::string> args = {path,
                                         "--port",
                                         "0",
                                         "--io-threads",
                                         std::to_string(o.io_threads),
                                         "--timeout-ms",
                                         std::to_string(o.timeout_ms),
                                         "--request-timeout-ms",
                                         std::to_string(o.request_timeout_ms),
                                         "--precision-ms",
                                         std::to_string(o.precision_ms)};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);       // the copy does not inherit O_CLOEXEC
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a judge that dies takes the server with it
    execv(path, argv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  return {pid, fdopen(fds[0], "r")};
}

// The number after " key=" in line, or -1 if absent; of "key=a..b", a, or b with max_of_range.
long long field(const std::string& line, const char* key, bool max_of_range = false) {
  const std::string k = std::string(" ") + key + "=";
  const std::size_t at = line.find(k);
  if (at == std::string::npos) return -1;
  char* endp = nullptr;
  long long v = std::strtoll(line.c_str() + at + k.size(), &endp, 10);
  if (max_of_range && std::strncmp(endp, "..", 2) == 0) v = std::strtoll(endp + 2, nullptr, 10);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: idle_timeout_load SERVER [--connections N] [--idle-fraction F] [--stalled-fraction F] "
                 "[--timeout-ms T] [--request-timeout-ms R] [--precision-ms P] [--busy-ms B] [--allowance-ms A] "
                 "[--connect-rate C] [--io-threads K] [--client-threads C] [--seed S]\n");
    return 2;
  }
  const char* server_path = argv[1];
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "idle_timeout_load: %s needs a value\n", a.c_str());
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
      std::fprintf(stderr, "idle_timeout_load: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.request_timeout_ms < 0) o.request_timeout_ms = o.timeout_ms / 4;
  if (o.connections == 0 || o.io_threads == 0 || o.client_threads == 0 || o.timeout_ms <= 0 || o.precision_ms <= 0 ||
      o.connect_rate <= 0 || o.busy_ms < 2 * o.timeout_ms || o.request_timeout_ms <= 0 ||
      o.request_timeout_ms >= o.timeout_ms) {
    std::fprintf(stderr,
                 "idle_timeout_load: bad options (busy-ms must be >= 2 * timeout-ms, and 0 < request-timeout-ms "
                 "< timeout-ms)\n");
    return 2;
  }
  std::printf(
      "idle_timeout_load: %zu connections, T = %lld ms, R = %lld ms, precision %lld ms, busy phase %lld ms, "
      "%u event loops, %u client threads, seed %u\n",
      o.connections, static_cast<long long>(o.timeout_ms), static_cast<long long>(o.request_timeout_ms),
      static_cast<long long>(o.precision_ms), static_cast<long long>(o.busy_ms), o.io_threads, o.client_threads,
      o.seed);
  std::fflush(stdout);
  raise_nofile(o.connections + 256);  // before the fork: the server inherits it
  std::signal(SIGPIPE, SIG_IGN);

  const std::int64_t start = now_ns();
  Server server = start_server(server_path, o);
  char buf[1024];
  unsigned port = 0;
  if (std::fgets(buf, sizeof buf, server.out) == nullptr || std::sscanf(buf, "listening on 127.0.0.1:%u", &port) != 1) {
    std::printf("FAIL: the server's first line is not \"listening on 127.0.0.1:PORT\"\n");
    kill(server.pid, SIGKILL);
    return 1;
  }
  std::int64_t busy_start = 0, busy_end = 0;
  bool ok = run_client(o, static_cast<std::uint16_t>(port), busy_start, busy_end);

  // The client has closed everything; the server closes what it has not seen closed yet at SIGTERM.
  kill(server.pid, SIGTERM);
  std::string stopped;
  while (std::fgets(buf, sizeof buf, server.out) != nullptr) {
    if (std::strncmp(buf, "stopped:", 8) == 0) stopped = buf;
    std::fputs(buf, stdout);
  }
  std::fclose(server.out);
  int wstatus = 0;
  while (waitpid(server.pid, &wstatus, 0) < 0) {
    if (errno != EINTR) die("waitpid");
  }
  const std::int64_t end = now_ns();

  std::size_t expected_idle = 0, expected_stalled = 0;
  for (std::size_t i = 0; i < o.connections; ++i) {
    const Kind k = kind_of(o, i);
    expected_idle += k == Kind::idle;
    expected_stalled += k == Kind::stalled;
  }
  auto fail = [&ok](const char* what) {
    std::printf("FAIL: %s\n", what);
    ok = false;
  };
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) fail("SIGTERM did not stop the server with exit status 0");
  if (stopped.empty()) {
    fail("the server printed no \"stopped:\" line");
  } else {
    const long long accepted = field(stopped, "accepted"), idle = field(stopped, "idle"),
                    request = field(stopped, "request"), peer = field(stopped, "peer"), stop = field(stopped, "stop");
    const long long idle_min = field(stopped, "idle_late_us"), idle_max = field(stopped, "idle_late_us", true);
    const long long req_min = field(stopped, "request_late_us"), req_max = field(stopped, "request_late_us", true);
    const long long bound_us = (2 * o.precision_ms + o.allowance_ms) * 1000;
    const double busy_s = static_cast<double>(busy_end - busy_start) / 1e9;
    const double touches = static_cast<double>(field(stopped, "touches"));
    std::printf(
        "server: closed %lld idle (expected %zu), %lld at the request timeout (expected %zu); close - deadline: "
        "idle %.1f to %.1f ms, request %.1f to %.1f ms (must be >= 0 and <= 2 * precision + allowance = %lld ms); "
        "%.0f touches/s over the %.2f s busy phase\n",
        idle, expected_idle, request, expected_stalled, static_cast<double>(idle_min) / 1e3,
        static_cast<double>(idle_max) / 1e3, static_cast<double>(req_min) / 1e3, static_cast<double>(req_max) / 1e3,
        bound_us / 1000, busy_s > 0 ? touches / busy_s : 0.0, busy_s);
    if (idle != static_cast<long long>(expected_idle) || request != static_cast<long long>(expected_stalled)) {
      fail("the server did not close exactly the expected numbers at the idle and the request timeouts");
    }
    if (accepted != static_cast<long long>(o.connections) || idle + request + peer + stop != accepted) {
      fail("not every connection was accepted and closed");
    }
    if (idle_min < 0 || req_min < 0) fail("a connection was closed before its timeout");
    if (std::max(idle_max, req_max) > bound_us) fail("a close came later than 2 * precision + allowance");
  }
  std::printf("%s (run took %.1f s; the bounds include loopback and epoll scheduling latency)\n", ok ? "PASS" : "FAIL",
              static_cast<double>(end - start) / 1e9);
  return ok ? 0 : 1;
}
