// SPDX-License-Identifier: BSL-1.0
// The per-request timer work of bench/http_server/http_timeouts_server.cpp, alone: re-arming one
// connection's idle timeout (the touch), with N connections' timers armed 30 s ahead and
// touched in turn, on one thread, as the server's loop does it per request.
//   BM_ServerTouch<lane_timer>:       chime::Timer(lane)::arm_after (the lanes build)
//   BM_ServerTouch<runtime>:          Runtime::reschedule_after (what the workers build's touch costs in chime)
//   BM_ServerTouch<mutex_heap>:       MutexHeapService::reschedule_at(now + 30 s) (the heap build)
// CPU time per touch; docs/server-benchmark.md sets it against the server's CPU per request.
//   chime_bench --benchmark_filter='^BM_ServerTouch' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <chime/chime.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

#include "runtime_peers/mutex_heap_service.hpp"

namespace {

using namespace std::chrono_literals;

void BM_ServerTouchLaneTimer(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  chime::RuntimeOptions options;
  options.workers = 1;
  chime::Runtime rt(options);
  chime::Lane lane = rt.lane();
  std::vector<chime::Timer> timers;
  timers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    timers.emplace_back(lane, [] {});
    timers.back().arm_after(30s);
  }
  rt.flush();
  std::size_t i = 0;
  for (auto _ : state) {
    timers[i].arm_after(30s);
    if (++i == n) i = 0;
  }
  for (auto& t : timers) t.disarm();
}

void BM_ServerTouchRuntime(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  chime::RuntimeOptions options;
  options.workers = 1;
  chime::Runtime rt(options);
  std::vector<chime::TimerId> ids;
  ids.reserve(n);
  for (std::size_t k = 0; k < n; ++k) ids.push_back(rt.schedule_after(30s, [] {}));
  rt.flush();
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(rt.reschedule_after(ids[i], 30s));
    if (++i == n) i = 0;
  }
  for (const auto& id : ids) rt.cancel(id);
}

void BM_ServerTouchMutexHeap(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  chime_bench::MutexHeapService heap(1);
  std::vector<chime_bench::MutexHeapService::Id> ids;
  ids.reserve(n);
  for (std::size_t k = 0; k < n; ++k) ids.push_back(heap.schedule_at(std::chrono::steady_clock::now() + 30s, [] {}));
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(heap.reschedule_at(ids[i], std::chrono::steady_clock::now() + 30s));
    if (++i == n) i = 0;
  }
  for (const auto& id : ids) heap.cancel(id);
}

}  // namespace

BENCHMARK(BM_ServerTouchLaneTimer)->Name("BM_ServerTouch<lane_timer>")->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_ServerTouchRuntime)->Name("BM_ServerTouch<runtime>")->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_ServerTouchMutexHeap)->Name("BM_ServerTouch<mutex_heap>")->Arg(100)->Arg(1000)->Arg(10000);
