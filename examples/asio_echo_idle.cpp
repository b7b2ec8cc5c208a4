// SPDX-License-Identifier: BSL-1.0
// asio_echo_idle: a TCP echo server on Boost.Asio whose connections are
// closed after --idle-ms without input. Each connection's idle timeout is a
// chime::Timer on a chime::Lane, and the lane runs inside the io_context
// (chime::asio::LaneDriver, include/chime/asio.hpp): the timer callbacks run
// on the io_context's thread, beside the socket handlers, so closing a socket
// from one races with nothing.
//
//   asio_echo_idle [--port 0] [--idle-ms 1000]
//
// Listens on 127.0.0.1 (port 0: any free port), prints "listening on PORT",
// and serves until SIGINT or SIGTERM. tests/check_echo_idle.py drives it.
#include <chime/asio.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

using boost::asio::ip::tcp;

struct Options {
  unsigned short port = 0;
  long idle_ms = 1000;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--port") == 0) {
      o.port = static_cast<unsigned short>(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--idle-ms") == 0) {
      o.idle_ms = std::atol(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--port N] [--idle-ms N]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// One connection: echo what arrives; no input for `idle` closes it. The
// shared_ptr is held by the pending read or write; closing the socket ends
// them, and the last one frees the Session (its Timer first: disarmed, so the
// callback's `this` is never dangling).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, chime::Lane& lane, chime::Duration idle)
      : socket_(std::move(socket)), idle_(idle), idle_timer_(lane, [this] { close_idle(); }) {}

  void start() {
    idle_timer_.arm_after(idle_);
    read();
  }

 private:
  void read() {
    socket_.async_read_some(boost::asio::buffer(data_),
                            [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                              if (ec) return;                            // closed: by the peer or the idle timer
                              self->idle_timer_.arm_after(self->idle_);  // input: the idle clock restarts
                              self->write(n);
                            });
  }
  void write(std::size_t n) {
    boost::asio::async_write(socket_, boost::asio::buffer(data_, n),
                             [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                               if (!ec) self->read();
                             });
  }
  // On the io_context's thread (the lane's): the pending read completes
  // with operation_aborted and lets go of the Session.
  void close_idle() {
    std::printf("closed an idle connection\n");
    std::fflush(stdout);
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  chime::Duration idle_;
  std::array<char, 4096> data_{};
  chime::Timer idle_timer_;  // last: destroyed first
};

void accept(tcp::acceptor& acceptor, chime::Lane& lane, chime::Duration idle) {
  acceptor.async_accept([&acceptor, &lane, idle](boost::system::error_code ec, tcp::socket socket) {
    if (ec) return;  // the acceptor was closed
    std::make_shared<Session>(std::move(socket), lane, idle)->start();
    accept(acceptor, lane, idle);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  chime::RuntimeOptions runtime_options;
  runtime_options.workers = 0;  // every timer here is a lane's
  chime::Runtime rt(runtime_options);
  // Declared before the io_context: the Sessions its destructor frees
  // (with their Timers) go before the lane, and the lane before the runtime.
  chime::Lane lane = rt.lane();
  boost::asio::io_context io(1);
  chime::asio::LaneDriver driver(io, lane);

  tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::address_v4::loopback(), options.port));
  std::printf("listening on %u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  accept(acceptor, lane, std::chrono::milliseconds(options.idle_ms));

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    driver.stop();
    io.stop();  // open Sessions are freed by ~io_context
  });
  io.run();
  std::printf("stopped\n");
  return 0;
}
