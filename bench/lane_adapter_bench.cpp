// SPDX-License-Identifier: BSL-1.0
// lane_adapter_bench: what the loop adapters (include/chime/asio.hpp,
// include/chime/uv.hpp) cost per timer against the bare lane, in one binary
// and one run (docs/benchmarks.md, "Loop adapters").
//
// Drivers (the template argument; each is one chime::Runtime with workers = 0,
// one Lane, and the benchmark's thread as the lane's thread):
//   BareLane  the lane alone: run_ready() between slices, wait_and_run(deadline)
//             while waiting for runs.
//   AsioLane  an io_context (concurrency hint 1) with chime::asio::LaneDriver:
//             io.poll() between slices, io.run_one() while waiting.
//   UvLane    a uv_loop_t with chime::uv::LaneDriver: uv_run(UV_RUN_NOWAIT)
//             between slices, uv_run(UV_RUN_ONCE) while waiting. Built only if
//             pkg-config finds libuv (bench/CMakeLists.txt).
//
// Scenarios (wall time, UseRealTime: the wheel thread works too):
//   BM_LaneAdapterArmCancel<D>  on the lane's thread, 64 pairs of
//       lane.schedule_after(10 s) + lane.cancel (the request timeout that is
//       answered in time), then one non-blocking turn of the loop. The
//       cancel's run never becomes ready, so the adapter costs only the loop
//       turn, shared by 64 pairs. per_timer = wall time per pair.
//   BM_LaneAdapterArmFire<D>/batch:B  B timers armed due now
//       (lane.schedule_after(0ns): dispatched when the wheel thread applies
//       the command), then the loop runs until all B callbacks ran on this
//       thread. B = 1: every timer pays one wake-up of the loop (the eventfd,
//       epoll, the adapter's handler); B = 64: the wake-ups are shared.
//       per_timer = wall time per fired timer.
// Every cancel must win and every armed timer must fire once: the binary
// aborts otherwise (the ctest bench_lane_smoke runs each benchmark once).
//   chime_bench --benchmark_filter='^BM_LaneAdapter' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <chime/asio.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#if CHIME_BENCH_HAVE_LIBUV
#include <chime/uv.hpp>
#endif

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace {

using namespace std::chrono_literals;

constexpr std::size_t kSlice = 64;  // ArmCancel: pairs per loop turn

chime::RuntimeOptions runtime_options() {
  chime::RuntimeOptions o;
  o.workers = 0;  // every run goes to the lane
  return o;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "lane_adapter_bench: %s\n", what);
  std::abort();
}

class BareLane {
 public:
  explicit BareLane(chime::Lane& lane) : lane_(lane) {}
  void turn() { lane_.run_ready(); }
  template <class Done>
  void run_until(Done done) {
    while (!done()) lane_.wait_and_run(std::chrono::steady_clock::now() + 1s);
  }

 private:
  chime::Lane& lane_;
};

class AsioLane {
 public:
  explicit AsioLane(chime::Lane& lane) : driver_(io_, lane) {}
  ~AsioLane() {
    driver_.stop();
    io_.restart();
    io_.poll();  // the aborted wait's handler
  }
  AsioLane(const AsioLane&) = delete;
  AsioLane& operator=(const AsioLane&) = delete;
  void turn() { io_.poll(); }
  template <class Done>
  void run_until(Done done) {
    while (!done()) io_.run_one();
  }

 private:
  boost::asio::io_context io_{1};
  chime::asio::LaneDriver driver_;
};

#if CHIME_BENCH_HAVE_LIBUV
class UvLane {
 public:
  explicit UvLane(chime::Lane& lane) : driver_((uv_loop_init(&loop_), &loop_), lane) {}
  ~UvLane() {
    driver_.close();
    uv_run(&loop_, UV_RUN_DEFAULT);  // the close callback frees the poll handle
    uv_loop_close(&loop_);
  }
  UvLane(const UvLane&) = delete;
  UvLane& operator=(const UvLane&) = delete;
  void turn() { uv_run(&loop_, UV_RUN_NOWAIT); }
  template <class Done>
  void run_until(Done done) {
    while (!done()) uv_run(&loop_, UV_RUN_ONCE);
  }

 private:
  uv_loop_t loop_{};
  chime::uv::LaneDriver driver_;
};
#endif

void per_timer(benchmark::State& state, std::size_t timers_per_iteration) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(timers_per_iteration));
  state.counters["per_timer"] =
      benchmark::Counter(static_cast<double>(timers_per_iteration),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class Driver>
void BM_LaneAdapterArmCancel(benchmark::State& state) {
  chime::Runtime rt(runtime_options());
  chime::Lane lane = rt.lane();
  {
    Driver driver(lane);
    for (auto _ : state) {
      for (std::size_t i = 0; i < kSlice; ++i) {
        const chime::TimerId id = lane.schedule_after(10s, [] { fail("a cancelled timer ran"); });
        if (!lane.cancel(id)) fail("a cancel lost");
      }
      driver.turn();
    }
  }
  per_timer(state, kSlice);
}

template <class Driver>
void BM_LaneAdapterArmFire(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  chime::Runtime rt(runtime_options());
  chime::Lane lane = rt.lane();
  {
    Driver driver(lane);
    std::size_t fired = 0;
    for (auto _ : state) {
      fired = 0;
      for (std::size_t i = 0; i < batch; ++i) lane.schedule_after(0ns, [&fired] { ++fired; });
      driver.run_until([&] { return fired >= batch; });
      if (fired != batch) fail("a timer ran twice");
    }
  }
  per_timer(state, batch);
}

BENCHMARK_TEMPLATE(BM_LaneAdapterArmCancel, BareLane)->UseRealTime();
BENCHMARK_TEMPLATE(BM_LaneAdapterArmCancel, AsioLane)->UseRealTime();
#if CHIME_BENCH_HAVE_LIBUV
BENCHMARK_TEMPLATE(BM_LaneAdapterArmCancel, UvLane)->UseRealTime();
#endif
BENCHMARK_TEMPLATE(BM_LaneAdapterArmFire, BareLane)->ArgName("batch")->Arg(1)->Arg(64)->UseRealTime();
BENCHMARK_TEMPLATE(BM_LaneAdapterArmFire, AsioLane)->ArgName("batch")->Arg(1)->Arg(64)->UseRealTime();
#if CHIME_BENCH_HAVE_LIBUV
BENCHMARK_TEMPLATE(BM_LaneAdapterArmFire, UvLane)->ArgName("batch")->Arg(1)->Arg(64)->UseRealTime();
#endif

}  // namespace
