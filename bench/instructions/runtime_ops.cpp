// SPDX-License-Identifier: BSL-1.0
// runtime_ops: a fixed amount of one runtime operation, for instruction
// counts under `valgrind --tool=callgrind` (repeatable on a noisy machine,
// where wall-clock times are not). Every thread of the process is counted:
// producers, the wheel/timer thread and the workers.
//
//   chime_runtime_ops SERVICE OP N [SLACK_US]
//     SERVICE  chime (chime::Runtime, workers = 2, 1 ms precision) or
//              mutex_heap (bench/runtime_peers/mutex_heap_service.hpp, 2 pool workers)
//     OP       schedule_cancel  N pairs: schedule a timer due in 10 s, cancel it
//              touch            N reschedules (to now + 600 s) over 10,000 pending
//                               timers in a fixed random order
//              fire             N timers due within 2 ms, all run; waits for the last
//     SLACK_US chime only: RuntimeOptions::slack in us (>= 1000, the precision: the
//              interval rule); without it, or 0, the default slack (proportional to
//              each timer's delay on a chime that has it)
//
// Per-operation cost = (Ir(2N) - Ir(N)) / N, which cancels the fixed cost of
// starting the service and its threads (docs/benchmarks.md gives the
// commands). Uses only the public API, so the same file builds against an
// older chime for before/after counts.
#include <chime/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../runtime_peers/mutex_heap_service.hpp"

namespace {

using namespace std::chrono_literals;

std::atomic<std::uint64_t> g_fired{0};

void wait_fired(std::uint64_t n) {
  for (std::uint64_t v = g_fired.load(); v < n; v = g_fired.load()) g_fired.wait(v);
}

struct Count {
  std::uint64_t target;
  void operator()() const {
    if (g_fired.fetch_add(1) + 1 == target) g_fired.notify_all();
  }
};

template <class Handle, class Sync>
int run(Handle& h, Sync sync, const std::string& op, std::size_t n) {
  if (op == "schedule_cancel") {
    for (std::size_t k = 0; k < n; ++k) {
      auto id = h.schedule_after(10s, Count{~0ull});
      if (!h.cancel(id)) return 3;
    }
    sync();
  } else if (op == "touch") {
    constexpr std::size_t kSet = 10'000;
    std::vector<decltype(h.schedule_after(1s, Count{~0ull}))> ids;
    for (std::size_t k = 0; k < kSet; ++k) ids.push_back(h.schedule_after(600s, Count{~0ull}));
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(20240601));
    sync();
    for (std::size_t k = 0; k < n; ++k) {
      if (!h.reschedule_after(ids[k % kSet], 600s)) return 3;
    }
    sync();
    for (auto& id : ids) h.cancel(id);
    sync();
  } else if (op == "fire") {
    for (std::size_t k = 0; k < n; ++k) h.schedule_after(std::chrono::microseconds(k * 2000 / n), Count{n});
    wait_fired(n);
    sync();
  } else {
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s chime|mutex_heap schedule_cancel|touch|fire N [SLACK_US]\n", argv[0]);
    return 2;
  }
  const std::string service = argv[1], op = argv[2];
  const std::size_t n = std::strtoull(argv[3], nullptr, 10);
  if (service == "chime") {
    chime::RuntimeOptions o;
    o.workers = 2;
    if (argc == 5) o.slack = std::chrono::microseconds(std::strtoll(argv[4], nullptr, 10));
    chime::Runtime rt(o);
    chime::Producer p = rt.producer();
    return run(p, [&] { rt.flush(); }, op, n);
  }
  if (service == "mutex_heap") {
    chime_bench::MutexHeapService s(2);
    return run(s, [] { std::this_thread::sleep_for(20ms); }, op, n);
  }
  return 2;
}
