// SPDX-License-Identifier: BSL-1.0
// examples/simulation.cpp: a retry-with-backoff client, tested as a
// deterministic simulation on a chime::ManualClock.
//
// The client sends a request to a flaky server and waits for the reply with
// a timeout; on a timeout it retries after an exponential backoff (50 ms,
// 100 ms, ... capped at 800 ms), up to 6 attempts. The server answers after
// a latency drawn from a seeded generator, or never (a lost request). Every
// timer (the server's reply, the client's timeout, its backoff) is a chime
// timer, and the callbacks run on two worker threads.
//
// The runtime drives the clock itself: Runtime::run_until_idle() moves the
// ManualClock from due to due and flushes at each (G28): the timers of one
// step run one at a time, in due order, ties in call order. So the log is
// the same in every run, though two threads run the callbacks: the example
// runs the scenario 20 times and compares the logs. Exit status 0 iff all 20
// are identical and every client finished.
//
//   simulation [--clients N] [--runs R] [--seed S] [--print]
#include <chime/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct Options {
  int clients = 8;
  int runs = 20;
  unsigned seed = 7;
  bool print = false;
};

// One scenario: `clients` clients against one flaky server, from t = 0 to
// the end, on a runtime with two workers. Returns the log.
std::vector<std::string> simulate(const Options& o, std::size_t& steps) {
  chime::ManualClock clock;
  chime::Runtime rt({.precision = 1ms, .workers = 2, .clock = &clock});
  std::mutex m;
  std::vector<std::string> log;
  auto note = [&](int client, const std::string& what) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock.now().time_since_epoch()).count();
    std::lock_guard<std::mutex> lock(m);
    log.push_back(std::to_string(ms) + " ms  client " + std::to_string(client) + ": " + what);
  };
  // The server's latency for a request, or -1 for a lost one; drawn under
  // the log's mutex, in the order the requests are sent (call order).
  std::mt19937 rng(o.seed);
  auto server_latency_ms = [&]() {
    std::lock_guard<std::mutex> lock(m);
    const int r = static_cast<int>(rng() % 100);
    return r < 35 ? -1 : 20 + r * 2;  // 35% lost, else 90..218 ms
  };

  struct Client {
    int id = 0;
    int attempt = 0;
    bool done = false;
    chime::TimerId timeout;
  };
  constexpr int kMaxAttempts = 6;
  constexpr auto kTimeout = 150ms;
  std::vector<std::shared_ptr<Client>> clients;
  std::shared_ptr<std::function<void(std::shared_ptr<Client>)>> send =
      std::make_shared<std::function<void(std::shared_ptr<Client>)>>();
  *send = [&, send](std::shared_ptr<Client> c) {
    ++c->attempt;
    note(c->id, "attempt " + std::to_string(c->attempt));
    const int latency = server_latency_ms();
    const int attempt = c->attempt;
    if (latency >= 0) {
      rt.schedule_after(std::chrono::milliseconds(latency), [&, c, attempt] {
        // A reply: it counts if it answers the attempt still waiting.
        if (c->done || attempt != c->attempt || !rt.cancel(c->timeout)) {
          note(c->id, "late reply to attempt " + std::to_string(attempt) + " ignored");
          return;
        }
        c->done = true;
        note(c->id, "reply to attempt " + std::to_string(attempt));
      });
    }
    c->timeout = rt.schedule_after(kTimeout, [&, c, send] {
      note(c->id, "timeout of attempt " + std::to_string(c->attempt));
      if (c->attempt == kMaxAttempts) {
        c->done = true;
        note(c->id, "gave up");
        return;
      }
      const auto backoff = std::min(800ms, 50ms * (1 << (c->attempt - 1)));
      rt.schedule_after(backoff, [c, send] { (*send)(c); });
    });
  };
  for (int i = 0; i < o.clients; ++i) {
    auto c = std::make_shared<Client>();
    c->id = i;
    clients.push_back(c);
    rt.schedule_after(std::chrono::milliseconds(10 * (i % 3)), [c, send] { (*send)(c); });
  }
  steps = rt.run_until_idle();
  *send = nullptr;  // it held itself (each attempt schedules the next)
  for (const auto& c : clients) {
    if (!c->done) log.push_back("client " + std::to_string(c->id) + " never finished");
  }
  return log;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "simulation: %s needs a value\n", name);
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (std::strcmp(argv[i], "--clients") == 0) {
      o.clients = value("--clients");
    } else if (std::strcmp(argv[i], "--runs") == 0) {
      o.runs = value("--runs");
    } else if (std::strcmp(argv[i], "--seed") == 0) {
      o.seed = static_cast<unsigned>(value("--seed"));
    } else if (std::strcmp(argv[i], "--print") == 0) {
      o.print = true;
    } else {
      std::fprintf(stderr, "usage: simulation [--clients N] [--runs R] [--seed S] [--print]\n");
      return 2;
    }
  }
  if (o.clients < 1 || o.runs < 1) {
    std::fprintf(stderr, "simulation: --clients %d and --runs %d must be at least 1\n", o.clients, o.runs);
    return 2;
  }
  std::size_t steps = 0;
  const std::vector<std::string> first = simulate(o, steps);
  int same = 1;
  for (int r = 1; r < o.runs; ++r) {
    std::size_t s = 0;
    const std::vector<std::string> log = simulate(o, s);
    if (log == first && s == steps) {
      ++same;
    } else {
      std::size_t k = 0;
      while (k < log.size() && k < first.size() && log[k] == first[k]) ++k;
      std::fprintf(stderr, "run %d differs from run 1 at line %zu: \"%s\" vs \"%s\"\n", r + 1, k + 1,
                   k < log.size() ? log[k].c_str() : "(end)", k < first.size() ? first[k].c_str() : "(end)");
    }
  }
  if (o.print) {
    for (const std::string& line : first) std::printf("%s\n", line.c_str());
  }
  bool finished = true;
  for (const std::string& line : first) {
    if (line.find("never finished") != std::string::npos) finished = false;
  }
  std::printf("%d clients, %zu log lines, %zu steps of the clock; %d of %d runs gave the same log%s\n", o.clients,
              first.size(), steps, same, o.runs, finished ? "" : "; a client never finished");
  return same == o.runs && finished ? 0 : 1;
}
