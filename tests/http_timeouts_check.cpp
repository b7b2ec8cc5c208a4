// SPDX-License-Identifier: BSL-1.0
// http_timeouts_check: starts bench/http_server/http_timeouts_server.cpp (the executable given as the
// first argument) on an ephemeral 127.0.0.1 port and checks it with real sockets:
//   keep_alive           two requests on one connection, then Connection: close ends it
//   not_found_keeps_open 404 for an unknown path, and the connection serves the next request
//   malformed_is_400     a request line without a version: 400, then the server closes
//   oversized_is_431     a header over --max-header: 431, then the server closes
//   idle_timeout         an idle connection is closed, not before --idle-ms after its request
//   request_deadline     a header left unfinished: 408 and close, not before --request-ms
//   sleep_answers_late   GET /sleep?ms=K answers after >= K ms, and another connection is
//                        answered meanwhile (a timer, not a blocking sleep)
//   metrics_openmetrics  GET /metrics: 200 with the OpenMetrics text (labelled service=...,
//                        ending in # EOF) from a chime service; 404 from the others
//   sigterm_exits_0      SIGTERM: the server exits 0 and prints its "stopped:" line
//   server_close_times   (--record-close) the server timed the idle and request closes above
//                        against their deadlines: at least one of each, none before its deadline
// With --no-timers (the build without a timer service): /sleep answers 501, and the timeout
// checks are skipped. Upper bounds are generous (2 s) for a loaded 2-core machine; lower bounds
// are exact. Exits 0 iff every check passes; the whole run is bounded by alarm(18).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kIdleMs = 1000, kRequestMs = 600, kSleepMs = 400, kSlackMs = 2000;

int g_failures = 0;
std::uint16_t g_port = 0;

void check(bool ok, const char* name, const std::string& detail) {
  std::printf("%s %s: %s\n", ok ? "PASS" : "FAIL", name, detail.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int connect_server() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(g_port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    std::perror("http_timeouts_check: connect");
    std::exit(2);
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t w = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;  // the server closed: what it answered is still readable
    off += static_cast<std::size_t>(w);
  }
}

// One response read from a connection (with its own buffer for what follows it).
struct Reader {
  int fd;
  std::string buf;
  bool eof = false;

  // Reads until `pred` holds, EOF, or timeout_ms. Returns false on timeout.
  template <class Pred>
  bool read_until(Pred pred, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred() && !eof) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char tmp[4096];
      const ssize_t r = ::recv(fd, tmp, sizeof tmp, 0);
      if (r <= 0) {
        eof = true;  // FIN, or a reset
      } else {
        buf.append(tmp, static_cast<std::size_t>(r));
      }
    }
    return true;
  }

  // The next response's status (0: none within timeout_ms, or malformed); its body in *body.
  int response(int timeout_ms, std::string* body = nullptr) {
    std::size_t head_end = std::string::npos;
    read_until([&] { return (head_end = buf.find("\r\n\r\n")) != std::string::npos; }, timeout_ms);
    if (head_end == std::string::npos || buf.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
    const int status = std::atoi(buf.c_str() + 9);
    std::size_t len = 0;
    if (const std::size_t cl = buf.find("Content-Length: "); cl != std::string::npos && cl < head_end) {
      len = std::strtoul(buf.c_str() + cl + 16, nullptr, 10);
    }
    const std::size_t total = head_end + 4 + len;
    read_until([&] { return buf.size() >= total; }, timeout_ms);
    if (buf.size() < total) return 0;
    if (body != nullptr) *body = buf.substr(head_end + 4, len);
    buf.erase(0, total);
    return status;
  }

  // Waits for EOF; returns false if none came within timeout_ms or data came first.
  bool closed(int timeout_ms) {
    read_until([] { return false; }, timeout_ms);
    return eof && buf.empty();
  }
};

const std::string kGet = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

void keep_alive() {
  Reader r{connect_server(), {}};
  std::string body;
  send_all(r.fd, kGet);
  const int s1 = r.response(kSlackMs, &body);
  send_all(r.fd, kGet);
  const int s2 = r.response(kSlackMs);
  send_all(r.fd, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  const int s3 = r.response(kSlackMs);
  const bool closed = r.closed(kSlackMs);
  check(s1 == 200 && s2 == 200 && s3 == 200 && body == "Hello, world\n" && closed, "keep_alive",
        "statuses " + std::to_string(s1) + ", " + std::to_string(s2) + ", " + std::to_string(s3) +
            " on one connection; closed after Connection: close: " + (closed ? "yes" : "no"));
  ::close(r.fd);
}

void not_found_keeps_open() {
  Reader r{connect_server(), {}};
  send_all(r.fd, "GET /nope HTTP/1.1\r\n\r\n");
  const int s1 = r.response(kSlackMs);
  send_all(r.fd, kGet);
  const int s2 = r.response(kSlackMs);
  check(s1 == 404 && s2 == 200, "not_found_keeps_open", "statuses " + std::to_string(s1) + ", " + std::to_string(s2));
  ::close(r.fd);
}

void malformed_is_400() {
  Reader r{connect_server(), {}};
  send_all(r.fd, "GET /\r\n\r\n");
  const int s = r.response(kSlackMs);
  const bool closed = r.closed(kSlackMs);
  check(s == 400 && closed, "malformed_is_400", "status " + std::to_string(s) + ", closed: " + (closed ? "yes" : "no"));
  ::close(r.fd);
}

void oversized_is_431() {
  Reader r{connect_server(), {}};
  send_all(r.fd, "GET / HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n");
  const int s = r.response(kSlackMs);
  const bool closed = r.closed(kSlackMs);
  check(s == 431 && closed, "oversized_is_431", "status " + std::to_string(s) + ", closed: " + (closed ? "yes" : "no"));
  ::close(r.fd);
}

void idle_timeout() {
  Reader r{connect_server(), {}};
  const auto t0 = Clock::now();  // before the request: the server re-arms its idle timer after
  send_all(r.fd, kGet);
  const int s = r.response(kSlackMs);
  const bool closed = r.closed(kIdleMs + kSlackMs);
  const double ms = ms_since(t0);
  check(s == 200 && closed && ms >= kIdleMs && ms <= kIdleMs + kSlackMs, "idle_timeout",
        "closed " + std::to_string(ms) + " ms after the last request (idle timeout " + std::to_string(kIdleMs) +
            " ms, allowed up to +" + std::to_string(kSlackMs) + " ms)");
  ::close(r.fd);
}

void request_deadline() {
  Reader r{connect_server(), {}};
  const auto t0 = Clock::now();  // before the first byte: the server starts the deadline after
  send_all(r.fd, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  const int s = r.response(kRequestMs + kSlackMs);
  const double ms = ms_since(t0);
  const bool closed = r.closed(kSlackMs);
  check(s == 408 && closed && ms >= kRequestMs && ms <= kRequestMs + kSlackMs, "request_deadline",
        "status " + std::to_string(s) + " " + std::to_string(ms) + " ms after the first byte (deadline " +
            std::to_string(kRequestMs) + " ms), closed: " + (closed ? "yes" : "no"));
  ::close(r.fd);
}

void sleep_answers_late(bool timers) {
  Reader a{connect_server(), {}}, b{connect_server(), {}};
  const auto t0 = Clock::now();
  send_all(a.fd, "GET /sleep?ms=" + std::to_string(kSleepMs) + " HTTP/1.1\r\n\r\n");
  if (!timers) {
    const int s = a.response(kSlackMs);
    check(s == 501, "sleep_is_501_without_timers", "status " + std::to_string(s));
  } else {
    send_all(b.fd, kGet);
    const int sb = b.response(kSlackMs);
    const double ms_b = ms_since(t0);
    const int sa = a.response(kSleepMs + kSlackMs);
    const double ms_a = ms_since(t0);
    check(sa == 200 && sb == 200 && ms_a >= kSleepMs && ms_a <= kSleepMs + kSlackMs && ms_b < ms_a,
          "sleep_answers_late",
          "/sleep?ms=" + std::to_string(kSleepMs) + " answered " + std::to_string(sa) + " after " +
              std::to_string(ms_a) + " ms; GET / on another connection meanwhile: " + std::to_string(sb) + " after " +
              std::to_string(ms_b) + " ms");
    send_all(a.fd, kGet);  // the connection goes on after the sleep
    const int s2 = a.response(kSlackMs);
    check(s2 == 200, "keep_alive_after_sleep", "status " + std::to_string(s2));
  }
  ::close(a.fd);
  ::close(b.fd);
}

void metrics_openmetrics(bool chime_service) {
  Reader r{connect_server(), {}};
  std::string body;
  send_all(r.fd, "GET /metrics HTTP/1.1\r\n\r\n");
  const int s = r.response(kSlackMs, &body);
  const bool text_ok = body.find("chime_scheduled_total{service=\"") != std::string::npos &&
                       body.find("chime_lateness_seconds_bucket{service=\"") != std::string::npos && body.size() >= 6 &&
                       body.compare(body.size() - 6, 6, "# EOF\n") == 0;
  check(chime_service ? (s == 200 && text_ok) : s == 404, "metrics_openmetrics",
        "status " + std::to_string(s) + (chime_service ? ", body: " + body.substr(0, 200) : std::string()));
  ::close(r.fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: http_timeouts_check SERVER [--no-timers]\n");
    return 2;
  }
  const bool timers = !(argc > 2 && std::strcmp(argv[2], "--no-timers") == 0);
  alarm(18);  // the whole check, whatever hangs
  int out[2];
  if (::pipe(out) < 0) return 2;
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    const std::string idle = std::to_string(kIdleMs), request = std::to_string(kRequestMs);
    execl(argv[1], argv[1], "--port", "0", "--threads", "2", "--idle-ms", idle.c_str(), "--request-ms", request.c_str(),
          "--write-ms", "2000", "--duration", "30", "--record-close", static_cast<char*>(nullptr));
    std::perror("http_timeouts_check: exec");
    std::_Exit(127);
  }
  ::close(out[1]);
  FILE* server_out = fdopen(out[0], "r");
  char line[512];
  if (std::fgets(line, sizeof line, server_out) == nullptr) {
    std::fprintf(stderr, "http_timeouts_check: the server printed nothing\n");
    return 1;
  }
  std::printf("server: %s", line);
  const char* p = std::strstr(line, "127.0.0.1:");
  g_port = p != nullptr ? static_cast<std::uint16_t>(std::atoi(p + 10)) : 0;
  if (g_port == 0) {
    std::fprintf(stderr, "http_timeouts_check: no port in the server's first line\n");
    return 1;
  }

  keep_alive();
  not_found_keeps_open();
  malformed_is_400();
  oversized_is_431();
  sleep_answers_late(timers);
  metrics_openmetrics(std::strstr(line, "service=lanes") != nullptr || std::strstr(line, "service=workers") != nullptr);
  if (timers) {
    idle_timeout();
    request_deadline();
  }

  ::kill(pid, SIGTERM);
  std::string rest;
  while (std::fgets(line, sizeof line, server_out) != nullptr) rest += line;
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("server: %s", rest.c_str());
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && rest.find("stopped:") != std::string::npos, "sigterm_exits_0",
        WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : std::string("killed by a signal"));
  if (timers) {
    for (const char* kind : {"idle", "request"}) {
      const std::string tag = std::string("close_lateness kind=") + kind + " ";
      const std::size_t at = rest.find(tag);
      unsigned long n = 0;
      long early = -1;
      if (at != std::string::npos) std::sscanf(rest.c_str() + at + tag.size(), "n=%lu early=%ld", &n, &early);
      check(n >= 1 && early == 0, "server_close_times",
            std::string(kind) + ": " +
                (at == std::string::npos ? "no close_lateness line" : rest.substr(at, rest.find('\n', at) - at)));
    }
  }
  std::printf("%s: %d failed\n", g_failures == 0 ? "PASS" : "FAIL", g_failures);
  return g_failures == 0 ? 0 : 1;
}
