// SPDX-License-Identifier: BSL-1.0
// asio_multi_loop: the echo server of asio_echo_idle.cpp on N threads, the
// way an io_context with a chime::asio::LaneDriver scales: one io_context per
// thread, each with its own chime::Lane and LaneDriver (an io_context with a
// LaneDriver is run by one thread: include/chime/asio.hpp). Loop 0 accepts;
// the connections go round-robin to the loops, each socket on its loop's
// io_context and each idle timeout a chime::Timer on that loop's lane, so the
// timer's callback runs on the thread that owns the socket and closes it
// racing nothing.
//
//   asio_multi_loop [--port 0] [--idle-ms 1000] [--loops 4]
//
// Listens on 127.0.0.1 (port 0: any free port), prints "listening on PORT",
// one line "closed an idle connection on loop K" per idle close, and on
// SIGINT or SIGTERM a summary, "stopped: L loops, accepted A, idle closes C,
// closes off their loop's thread X" (X is 0 unless a Timer ran on the wrong
// thread), then exits 0. tests/check_asio_multi_loop.py drives and judges it.
#include <chime/asio.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace {

using boost::asio::ip::tcp;

struct Options {
  unsigned short port = 0;
  long idle_ms = 1000;
  unsigned loops = 4;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--port") == 0) {
      o.port = static_cast<unsigned short>(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--idle-ms") == 0) {
      o.idle_ms = std::atol(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--loops") == 0 && std::atoi(argv[i + 1]) > 0) {
      o.loops = static_cast<unsigned>(std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--port N] [--idle-ms N] [--loops N]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// One event loop: a thread running its own io_context, whose LaneDriver runs
// the loop's own lane. Members in destruction order, last first: the driver,
// then the io_context (freeing the Sessions still pending, with their Timers),
// then the lane.
struct Loop {
  explicit Loop(chime::Runtime& rt, unsigned index) : index(index), lane(rt.lane()) {}
  unsigned index;
  chime::Lane lane;
  boost::asio::io_context io{1};
  std::optional<chime::asio::LaneDriver> driver;
  std::thread thread;
  std::atomic<std::thread::id> thread_id{};
  std::atomic<unsigned> accepted{0};
  std::atomic<unsigned> idle_closes{0};
  std::atomic<unsigned> off_thread{0};
};

// One connection, on one loop: echo what arrives; no input for `idle` closes
// it. As in asio_echo_idle.cpp, the pending read or write holds the Session.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Loop& loop, chime::Duration idle)
      : socket_(std::move(socket)), loop_(loop), idle_(idle), idle_timer_(loop.lane, [this] { close_idle(); }) {}

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
  // On the lane's thread, which is this loop's: the one running the
  // socket's io_context. Counted if it is not.
  void close_idle() {
    if (std::this_thread::get_id() != loop_.thread_id.load() || !loop_.io.get_executor().running_in_this_thread()) {
      ++loop_.off_thread;
    }
    ++loop_.idle_closes;
    std::printf("closed an idle connection on loop %u\n", loop_.index);
    std::fflush(stdout);
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  Loop& loop_;
  chime::Duration idle_;
  std::array<char, 4096> data_{};
  chime::Timer idle_timer_;  // last: destroyed first
};

// On loop 0: each accepted socket is created on the next loop's io_context
// and its Session started on that loop's thread.
void accept(tcp::acceptor& acceptor, std::vector<std::unique_ptr<Loop>>& loops, unsigned next, chime::Duration idle) {
  Loop& target = *loops[next];
  acceptor.async_accept(target.io,
                        [&acceptor, &loops, &target, next, idle](boost::system::error_code ec, tcp::socket socket) {
                          if (ec) return;  // the acceptor was closed
                          ++target.accepted;
                          boost::asio::post(target.io, [&target, idle, s = std::move(socket)]() mutable {
                            std::make_shared<Session>(std::move(s), target, idle)->start();
                          });
                          accept(acceptor, loops, static_cast<unsigned>((next + 1) % loops.size()), idle);
                        });
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  chime::RuntimeOptions runtime_options;
  runtime_options.workers = 0;  // every timer here is a lane's
  chime::Runtime rt(runtime_options);
  std::vector<std::unique_ptr<Loop>> loops;
  for (unsigned i = 0; i < options.loops; ++i) {
    loops.push_back(std::make_unique<Loop>(rt, i));
    loops.back()->driver.emplace(loops.back()->io, loops.back()->lane);
  }

  Loop& first = *loops.front();
  tcp::acceptor acceptor(first.io, tcp::endpoint(boost::asio::ip::address_v4::loopback(), options.port));
  std::printf("listening on %u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  accept(acceptor, loops, 0, std::chrono::milliseconds(options.idle_ms));

  boost::asio::signal_set signals(first.io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& loop : loops) {
      boost::asio::post(loop->io, [&l = *loop] {
        l.driver->stop();
        l.io.stop();  // open Sessions are freed by ~io_context
      });
    }
  });
  for (auto& loop : loops) {
    loop->thread = std::thread([&l = *loop] {
      l.thread_id = std::this_thread::get_id();
      l.io.run();
    });
  }
  for (auto& loop : loops) loop->thread.join();

  unsigned accepted = 0;
  unsigned idle_closes = 0;
  unsigned off_thread = 0;
  for (const auto& loop : loops) {
    accepted += loop->accepted;
    idle_closes += loop->idle_closes;
    off_thread += loop->off_thread;
  }
  std::printf("stopped: %zu loops, accepted %u, idle closes %u, closes off their loop's thread %u\n", loops.size(),
              accepted, idle_closes, off_thread);
  return 0;
}
