// SPDX-License-Identifier: BSL-1.0
// uv_echo_idle: a TCP echo server on libuv whose connections are closed after
// --idle-ms without input. Each connection's idle timeout is a chime::Timer on a
// chime::Lane, and the lane runs inside the uv_loop_t (chime::uv::LaneDriver,
// include/chime/uv.hpp): the timer callbacks run on the loop's thread, inside
// uv_run, beside the read callbacks, so closing a connection from one races
// with nothing. The counterpart of examples/asio_echo_idle.cpp.
//
//   uv_echo_idle [--port 0] [--idle-ms 1000]
//
// Listens on 127.0.0.1 (port 0: any free port), prints "listening on PORT",
// and serves until SIGINT or SIGTERM, then closes every handle and exits 0.
// tests/check_echo_idle.py drives it.
#include <uv.h>

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>
#include <chime/uv.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

namespace {

struct Options {
  int port = 0;
  long idle_ms = 1000;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--port") == 0) {
      o.port = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--idle-ms") == 0) {
      o.idle_ms = std::atol(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--port N] [--idle-ms N]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

void check(int rc, const char* what) {
  if (rc < 0) {
    std::fprintf(stderr, "uv_echo_idle: %s: %s\n", what, uv_strerror(rc));
    std::exit(2);
  }
}

struct Server;

// One connection. libuv needs the uv_tcp_t until its close callback, so the
// Conn is freed there (with its Timer: on the loop's thread, never inside the
// Timer's own callback).
struct Conn {
  uv_tcp_t tcp{};
  Server* server = nullptr;
  chime::Timer idle;  // its callback closes the connection
  char buf[4096] = {};
};

struct Server {
  chime::Lane* lane = nullptr;
  chime::Duration idle{};
  uv_tcp_t listener{};
  std::unordered_set<Conn*> conns;  // open: closed at stop
};

// An echo write owns a copy of what it writes until its callback.
struct WriteReq {
  uv_write_t req{};
  std::vector<char> data;
};

void close_conn(Conn* c) {
  if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&c->tcp)) != 0) return;
  c->idle.disarm();  // on the lane's thread: its callback will not run after this
  c->server->conns.erase(c);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
}

void on_read(uv_stream_t* stream, ssize_t n, const uv_buf_t* buf) {
  auto* c = static_cast<Conn*>(stream->data);
  if (n < 0) {  // UV_EOF or an error
    close_conn(c);
    return;
  }
  if (n == 0) return;
  c->idle.arm_after(c->server->idle);  // input: the idle clock restarts (the touch)
  auto* w = new WriteReq;
  w->data.assign(buf->base, buf->base + n);
  const uv_buf_t out = uv_buf_init(w->data.data(), static_cast<unsigned>(n));
  const int rc =
      uv_write(&w->req, stream, &out, 1, [](uv_write_t* req, int) { delete reinterpret_cast<WriteReq*>(req); });
  if (rc < 0) {
    delete w;
    close_conn(c);
  }
}

void on_connection(uv_stream_t* listener, int status) {
  if (status < 0) return;
  auto* server = static_cast<Server*>(listener->data);
  auto* c = new Conn;
  c->server = server;
  c->tcp.data = c;
  check(uv_tcp_init(listener->loop, &c->tcp), "uv_tcp_init");
  if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(&c->tcp)) < 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
    return;
  }
  server->conns.insert(c);
  // Runs inside uv_run, on this thread (the lane's), when the connection has been idle for `idle`.
  c->idle = chime::Timer(*server->lane, [c] {
    std::printf("closed an idle connection\n");
    std::fflush(stdout);
    close_conn(c);
  });
  c->idle.arm_after(server->idle);
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->tcp),
      [](uv_handle_t* h, std::size_t, uv_buf_t* b) {
        auto* conn = static_cast<Conn*>(h->data);
        *b = uv_buf_init(conn->buf, sizeof conn->buf);  // one read at a time per stream
      },
      on_read);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  chime::RuntimeOptions runtime_options;
  runtime_options.workers = 0;  // every timer here is a lane's
  chime::Runtime rt(runtime_options);
  chime::Lane lane = rt.lane();  // outlives the loop's handles: every Conn is freed inside uv_run

  uv_loop_t loop;
  check(uv_loop_init(&loop), "uv_loop_init");
  chime::uv::LaneDriver driver(&loop, lane);  // the lane's callbacks now run inside uv_run

  Server server;
  server.lane = &lane;
  server.idle = std::chrono::milliseconds(options.idle_ms);
  server.listener.data = &server;
  check(uv_tcp_init(&loop, &server.listener), "uv_tcp_init");
  sockaddr_in addr{};
  check(uv_ip4_addr("127.0.0.1", options.port, &addr), "uv_ip4_addr");
  check(uv_tcp_bind(&server.listener, reinterpret_cast<const sockaddr*>(&addr), 0), "uv_tcp_bind");
  check(uv_listen(reinterpret_cast<uv_stream_t*>(&server.listener), 128, on_connection), "uv_listen");
  int len = sizeof addr;
  check(uv_tcp_getsockname(&server.listener, reinterpret_cast<sockaddr*>(&addr), &len), "uv_tcp_getsockname");
  std::printf("listening on %u\n", static_cast<unsigned>(ntohs(addr.sin_port)));
  std::fflush(stdout);

  // SIGINT or SIGTERM: close every handle (the lane's poll too); uv_run then returns.
  struct Stop {
    uv_signal_t sigint{}, sigterm{};
    Server* server = nullptr;
    chime::uv::LaneDriver* driver = nullptr;
  } stop;
  stop.server = &server;
  stop.driver = &driver;
  for (uv_signal_t* s : {&stop.sigint, &stop.sigterm}) {
    check(uv_signal_init(&loop, s), "uv_signal_init");
    s->data = &stop;
    check(uv_signal_start(
              s,
              [](uv_signal_t* signal, int) {
                auto* st = static_cast<Stop*>(signal->data);
                uv_close(reinterpret_cast<uv_handle_t*>(&st->server->listener), nullptr);
                while (!st->server->conns.empty()) close_conn(*st->server->conns.begin());
                st->driver->close();
                uv_close(reinterpret_cast<uv_handle_t*>(&st->sigint), nullptr);
                uv_close(reinterpret_cast<uv_handle_t*>(&st->sigterm), nullptr);
              },
              s == &stop.sigint ? SIGINT : SIGTERM),
          "uv_signal_start");
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  check(uv_loop_close(&loop), "uv_loop_close");
  std::printf("stopped\n");
  return 0;
}
