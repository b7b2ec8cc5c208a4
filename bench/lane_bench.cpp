// SPDX-License-Identifier: BSL-1.0
// lane_bench: chime::Lane (timer callbacks on the user's own loop thread)
// beside Boost.Asio's io_context + steady_timer and libuv's uv_timer, each on
// ONE loop thread, and beside chime's worker-pool delivery, in one binary and
// one run (docs/benchmarks.md, "Lanes").
//
// Services (each named by the parameters it is built with; see name()):
//   chime_lane,precision=P,loop=poll     lane_peers/chime_lane_loop.hpp: a
//       chime::Runtime (workers = 0: the lane's runs never go to workers;
//       its wheel thread is the second thread) and one Lane, run by a loop
//       thread that poll()s ready_fd() and calls run_ready(). P = 1ms and 100us.
//       No ",slack=" in the name: the default slack (RuntimeOptions::slack
//       unset: proportional to each timer's delay, runtime/slack.hpp);
//       BM_LaneLateness also runs ",slack=interval_rule" (slack = precision:
//       a timer runs when its precision interval ends) and ",slack=50us".
//   chime_workers,precision=P,workers=2  a plain chime::Runtime whose 2 workers
//       run the callbacks (no loop thread; the delivery lanes replace).
//   asio,loop=io_context,threads=1       lane_peers/asio_loop.hpp: io_context
//       (concurrency hint 1) run by one thread; steady_timer rebound to the
//       io_context's executor, preallocated and reused.
//   libuv,loop=uv_run,threads=1          lane_peers/uv_loop.hpp: uv_loop_t run by
//       one thread; uv_timer_t preallocated and reused (libuv timers are
//       intrusive: arming allocates nothing). Built only if pkg-config finds
//       libuv (bench/CMakeLists.txt).
// Each service, before its first benchmark, gets `pending` background timers
// due 1 h .. 1 h 10 min out (fixed pseudo-random spread) that stay pending for
// the whole run (one instance per service, built on first use, kept until
// exit; chime: on the lane, or on the runtime for chime_workers; Asio and
// libuv: in their loop, armed on the loop thread). A background timer that
// fires aborts the binary.
//
// Scenarios (each one Google Benchmark with manual time = wall time measured
// here):
//   BM_LaneScheduleCancel  the request-timeout pattern: the loop thread arms a
//       timer due now + 10 s and cancels it, over and over for `round` of
//       wall time, in slices of 64 pairs with the loop's own iteration
//       between slices (LoopJob: one poll/epoll_wait with a zero timeout,
//       and whatever is ready: Asio's aborted completions run there).
//       chime_lane: lane.schedule_after + lane.cancel; asio: expires_after +
//       async_wait + cancel on one of a ring of 1,024 preallocated timers;
//       libuv: uv_timer_start + uv_timer_stop on such a ring; chime_workers:
//       a chime::Producer on a plain thread. The iteration ends when the
//       service has applied everything (chime: flush(); Asio: the last
//       slice's aborted completions ran; libuv applies each call before it
//       returns). items = pairs; caller_items_per_second = pairs per second
//       until the loop thread was done; cpu_ns_per_op = process CPU per pair.
//   BM_LaneScheduleToFire  2 producer threads arm `fire_timers` timers in
//       total, due now + 0..2 ms, as fast as they can; they run on the loop
//       thread (chime_workers: on its 2 workers). chime_lane: each producer
//       calls lane.schedule_at (any thread, no Producer); asio: each producer
//       boost::asio::post()s "expires_at + async_wait" to the io_context;
//       libuv: each producer pushes to a mutex-guarded queue and calls
//       uv_async_send; chime_workers: a chime::Producer per producer. The
//       iteration ends when the last callback ran. items = timers fired;
//       cpu_ns_per_fired = process CPU per fired timer.
//   BM_LaneLateness  2 producers, paced on a 1 ms tick for `run`, arm
//       `fire_rate` timers/s in total, due now + 1 ms .. 2 ms (fixed
//       pseudo-random); each callback's first act is steady_clock::now();
//       lateness = that minus the due time the producer recorded. Counters
//       p50_us, p99_us, p999_us, max_us (nearest rank over the run).
//
// CPU counters: clock_gettime(CLOCK_PROCESS_CPUTIME_ID) before the work
// starts and after the iteration's end: every thread of the process,
// including the other services built earlier (idle: their timers are due in
// an hour) and the benchmark's own threads (producers, the waiting main
// thread), which do the same work for every service.
//
// CHIME_BENCH_LANE=smoke shrinks every size (the names say which) so the
// ctest bench_lane_smoke runs each benchmark once in seconds.
#include <benchmark/benchmark.h>

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "lane_peers/asio_loop.hpp"
#include "lane_peers/chime_lane_loop.hpp"
#include "lane_peers/loop_job.hpp"
#if CHIME_BENCH_HAVE_LIBUV
#include "lane_peers/uv_loop.hpp"
#endif

namespace chime_bench::lane {
namespace {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// Parameters. Every benchmark name is built from these.

constexpr unsigned kProducers = 2;                             // (b) and (c)
constexpr unsigned kWorkers = 2;                               // chime_workers
constexpr std::chrono::nanoseconds kBackgroundDue = 1h;        // background timers: 1 h ..
constexpr std::chrono::nanoseconds kBackgroundSpread = 10min;  // .. 1 h 10 min out
constexpr std::chrono::nanoseconds kCancelDelay = 10s;         // (a): the request timeout
constexpr std::size_t kSlice = 64;                             // (a): pairs per loop iteration
constexpr std::size_t kRing = 1024;                            // (a): Asio/libuv timers reused
constexpr std::chrono::nanoseconds kFireSpread = 2ms;          // (b): due now + [0, 2ms)
constexpr std::chrono::nanoseconds kLatenessDelay = 1ms;       // (c): due now + [1ms, 2ms)
static_assert((kRing & (kRing - 1)) == 0, "kRing is a power of two");

struct Sizes {
  const char* label;
  std::size_t pending;              // background timers
  std::chrono::milliseconds round;  // (a): wall time per iteration
  std::size_t fire_timers;          // (b): timers per iteration
  std::chrono::milliseconds run;    // (c): run
  std::size_t fire_rate;            // (c): timers fired per second, all producers
};

const Sizes& sizes() {
  static const Sizes s = [] {
    const char* env = std::getenv("CHIME_BENCH_LANE");
    if (env != nullptr && std::string(env) == "smoke") return Sizes{"smoke", 1'000, 5ms, 4'000, 100ms, 20'000};
    return Sizes{"full", 1'000'000, 200ms, 200'000, 1'000ms, 20'000};
  }();
  return s;
}

// Timers of (b) and (c) that may be armed at once: a pool this large per peer.
std::size_t fire_pool() {
  const Sizes& z = sizes();
  return std::max<std::size_t>(z.fire_timers, z.fire_rate * static_cast<std::size_t>(z.run.count()) / 1000);
}

std::int64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double seconds_since(TimePoint t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------
// Callbacks: all <= 16 trivially copyable bytes, so chime::Task,
// std::function (libstdc++) and Asio's handler store them inline.

std::atomic<std::uint64_t> g_background_fired{0};
std::atomic<std::uint64_t> g_cancelled_fired{0};  // (a): timers that were cancelled and ran anyway

struct BackgroundCallback {
  void operator()() const { g_background_fired.fetch_add(1, std::memory_order_relaxed); }
};
struct CancelledCallback {
  void operator()() const { g_cancelled_fired.fetch_add(1, std::memory_order_relaxed); }
};

// ---------------------------------------------------------------------------
// The services behind one interface:
//   static std::string name();      built from the parameters it runs with
//   S();                             starts it and arms the background timers
//   void run(LoopJob&);              the job's slices on the loop thread
//   bool pair(std::size_t k);        loop thread: arm a timer due in
//                                    kCancelDelay and cancel it; false if the
//                                    cancel reports that it lost
//   void sync();                     what run() left in flight is applied
//   void arm(unsigned p, std::size_t index, TimePoint due, F f);
//                                    producer thread p: timer `index` of
//                                    (b)/(c) runs f at `due`

// SlackNs: RuntimeOptions::slack (0: unset, the default slack, proportional
// to each timer's delay; PrecisionNs: the interval rule; 50'000: 50 us).
template <std::int64_t PrecisionNs, std::int64_t SlackNs = 0>
class ChimeLane {
 public:
  static constexpr std::chrono::nanoseconds kPrecision{PrecisionNs};
  static chime::RuntimeOptions options() {
    chime::RuntimeOptions o;
    o.precision = kPrecision;
    o.workers = 0;
    o.slack = std::chrono::nanoseconds(SlackNs);
    return o;
  }
  static std::string name() {
    std::string slack;
    if constexpr (SlackNs >= PrecisionNs) {
      slack = ",slack=interval_rule";
    } else if constexpr (SlackNs != 0) {
      slack = ",slack=" + fmt(options().slack);
    }
    return "chime_lane,precision=" + fmt(options().precision) + slack + ",loop=poll";
  }

  ChimeLane() : loop_(options()) {
    const TimePoint base = Clock::now() + kBackgroundDue;
    const auto spread = static_cast<std::uint64_t>(kBackgroundSpread.count());
    for (std::size_t i = 0; i < sizes().pending; ++i)
      loop_.lane().schedule_at(base + std::chrono::nanoseconds(mix(i) % spread), BackgroundCallback{});
    loop_.runtime().flush();
    if (loop_.runtime().stats().pending != sizes().pending)
      fail(name(), "background pending", loop_.runtime().stats().pending, sizes().pending);
  }

  void run(LoopJob& job) { loop_.run(job); }
  bool pair(std::size_t /*k*/) {
    const chime::TimerId id = loop_.lane().schedule_after(kCancelDelay, CancelledCallback{});
    return loop_.lane().cancel(id);
  }
  void sync() { loop_.runtime().flush(); }
  template <class F>
  void arm(unsigned /*p*/, std::size_t /*index*/, TimePoint due, F f) {
    loop_.lane().schedule_at(due, chime::Task(f));
  }

 private:
  ChimeLaneLoop loop_;
};

template <std::int64_t PrecisionNs>
class ChimeWorkers {
 public:
  static constexpr std::chrono::nanoseconds kPrecision{PrecisionNs};
  static chime::RuntimeOptions options() {
    chime::RuntimeOptions o;
    o.precision = kPrecision;
    o.workers = kWorkers;
    return o;
  }
  static std::string name() {
    return "chime_workers,precision=" + fmt(options().precision) + ",workers=" + std::to_string(options().workers);
  }

  ChimeWorkers() : rt_(options()) {
    for (unsigned p = 0; p <= kProducers; ++p) producers_.push_back(rt_.producer());
    chime::Producer& bg = producers_[kProducers];
    const TimePoint base = Clock::now() + kBackgroundDue;
    const auto spread = static_cast<std::uint64_t>(kBackgroundSpread.count());
    for (std::size_t i = 0; i < sizes().pending; ++i)
      bg.schedule_at(base + std::chrono::nanoseconds(mix(i) % spread), BackgroundCallback{});
    rt_.flush();
    if (rt_.stats().pending != sizes().pending)
      fail(name(), "background pending", rt_.stats().pending, sizes().pending);
  }

  // No loop: the slices run back to back on a plain thread.
  void run(LoopJob& job) {
    std::thread t([&job] {
      while (job.step()) {
      }
      job.finish();
    });
    job.wait();
    t.join();
  }
  bool pair(std::size_t /*k*/) {
    chime::Producer& p = producers_[kProducers];  // the thread of run(), one at a time
    const chime::TimerId id = p.schedule_after(kCancelDelay, CancelledCallback{});
    return p.cancel(id);
  }
  void sync() { rt_.flush(); }
  template <class F>
  void arm(unsigned p, std::size_t /*index*/, TimePoint due, F f) {
    producers_[p].schedule_at(due, chime::Task(f));
  }

 private:
  chime::Runtime rt_;
  std::vector<chime::Producer> producers_;  // [p]: producer thread p; [kProducers]: run()'s thread
};

// Pool layout of the Asio and libuv peers: [0, kRing) the ring of (a), then
// the background timers, then fire_pool() timers for (b) and (c).
std::size_t background_base() { return kRing; }
std::size_t fire_base() { return kRing + sizes().pending; }
std::size_t pool_size() { return fire_base() + fire_pool(); }

class Asio {
 public:
  static std::string name() { return "asio,loop=io_context,threads=1"; }

  Asio() {
    loop_.reserve_timers(pool_size());
    const TimePoint base = Clock::now() + kBackgroundDue;
    const auto spread = static_cast<std::uint64_t>(kBackgroundSpread.count());
    std::size_t i = 0;
    LoopJob job([&] {
      for (std::size_t k = 0; k < 4096 && i < sizes().pending; ++k, ++i) {
        AsioLoop::Timer& t = loop_.timer(background_base() + i);
        t.expires_at(base + std::chrono::nanoseconds(mix(i) % spread));
        t.async_wait(Handler<BackgroundCallback>{{}});
      }
      return i < sizes().pending;
    });
    loop_.run(job);
  }

  void run(LoopJob& job) { loop_.run(job); }
  bool pair(std::size_t k) {
    AsioLoop::Timer& t = loop_.timer(k & (kRing - 1));
    t.expires_after(kCancelDelay);
    t.async_wait(Handler<CancelledCallback>{{}});
    return t.cancel() == 1;
  }
  void sync() {}  // run() returned after the last slice's completions ran
  template <class F>
  void arm(unsigned /*p*/, std::size_t index, TimePoint due, F f) {
    boost::asio::post(loop_.io(), [this, i = fire_base() + index, due, f] {
      AsioLoop::Timer& t = loop_.timer(i);
      t.expires_at(due);
      t.async_wait(Handler<F>{f});
    });
  }

 private:
  // A wait's completion: runs f unless the wait was cancelled.
  template <class F>
  struct Handler {
    F f;
    void operator()(const boost::system::error_code& ec) const {
      if (!ec) f();
    }
  };
  AsioLoop loop_;
};

#if CHIME_BENCH_HAVE_LIBUV
class Uv {
 public:
  static std::string name() { return "libuv,loop=uv_run,threads=1"; }

  Uv() {
    loop_.reserve_timers(pool_size());
    const std::uint64_t base = UvLoop::due_ms(Clock::now() + kBackgroundDue);
    const auto spread_ms = static_cast<std::uint64_t>(kBackgroundSpread / 1ms);
    // The ring of (a): its callback is set once, as a connection's is (no job runs now).
    for (std::size_t r = 0; r < kRing; ++r) loop_.timer(r).callback = CancelledCallback{};
    std::size_t i = 0;
    LoopJob job([&] {
      for (std::size_t k = 0; k < 4096 && i < sizes().pending; ++k, ++i) {
        const std::size_t index = background_base() + i;
        loop_.timer(index).callback = BackgroundCallback{};
        loop_.start_at(index, base + mix(i) % spread_ms);
      }
      return i < sizes().pending;
    });
    loop_.run(job);
  }

  void run(LoopJob& job) { loop_.run(job); }
  bool pair(std::size_t k) {
    uv_timer_t* h = &loop_.timer(k & (kRing - 1)).handle;
    uv_timer_start(h, UvLoop::on_timer, static_cast<std::uint64_t>(kCancelDelay / 1ms), 0);
    uv_timer_stop(h);  // synchronous, cannot lose: the callback can only run on this thread
    return true;
  }
  void sync() {}  // every call is applied before it returns
  template <class F>
  void arm(unsigned /*p*/, std::size_t index, TimePoint due, F f) {
    loop_.arm_from_any_thread(fire_base() + index, due, f);
  }

 private:
  UvLoop loop_;
};
#endif

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kFine = 100'000;  // 100 us

// One instance per service, built on first use (outside any timed region)
// and destroyed at exit.
template <class S>
S& service() {
  static const std::unique_ptr<S> instance = std::make_unique<S>();
  return *instance;
}

void check_background(const std::string& bench) {
  const std::uint64_t n = g_background_fired.load(std::memory_order_relaxed);
  if (n != 0) fail(bench, "background timers fired", n, 0);
}

// Starts P threads that wait at a gate, records the time, opens the gate,
// joins them, and returns the recorded time. body(p) runs on thread p.
template <class Body>
TimePoint run_producers(unsigned P, Body&& body) {
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  threads.reserve(P);
  for (unsigned p = 0; p < P; ++p) {
    threads.emplace_back([&go, &body, p] {
      go.wait(false, std::memory_order_acquire);  // pairs with the release store below
      body(p);
    });
  }
  const TimePoint t0 = Clock::now();
  go.store(true, std::memory_order_release);
  go.notify_all();
  for (std::thread& t : threads) t.join();
  return t0;
}

// ---------------------------------------------------------------------------
// (a) one loop thread arms and cancels

template <class S>
void BM_ScheduleCancel(benchmark::State& state, std::string bench) {
  S& s = service<S>();
  double caller_secs = 0;
  std::uint64_t items = 0;
  std::int64_t cpu_ns = 0;
  for (auto _ : state) {
    const TimePoint deadline = Clock::now() + sizes().round;
    std::uint64_t k = 0;
    LoopJob job([&] {
      for (std::size_t b = 0; b < kSlice; ++b, ++k) {
        if (!s.pair(k)) fail(bench, "cancel of a timer 10 s out lost", k, 0);
      }
      return Clock::now() < deadline;
    });
    const std::int64_t cpu0 = process_cpu_ns();
    const TimePoint t0 = Clock::now();
    s.run(job);
    caller_secs += seconds_since(t0);
    s.sync();
    state.SetIterationTime(seconds_since(t0));
    cpu_ns += process_cpu_ns() - cpu0;
    items += k;
  }
  if (g_cancelled_fired.load() != 0) fail(bench, "cancelled timers fired", g_cancelled_fired.load(), 0);
  check_background(bench);
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.counters["caller_items_per_second"] = static_cast<double>(items) / caller_secs;
  state.counters["cpu_ns_per_op"] =
      static_cast<double>(cpu_ns) / static_cast<double>(std::max<std::uint64_t>(items, 1));
}

// (b) producers arm, the loop thread runs

template <class S>
void BM_ScheduleToFire(benchmark::State& state, std::string bench) {
  S& s = service<S>();
  const std::size_t per = sizes().fire_timers / kProducers;
  const std::uint64_t target = per * kProducers;
  const auto spread_ns = static_cast<std::uint64_t>(kFireSpread.count());
  std::atomic<std::uint64_t> fired{0};
  std::int64_t cpu_ns = 0;
  for (auto _ : state) {
    fired.store(0, std::memory_order_relaxed);
    const std::int64_t cpu0 = process_cpu_ns();
    const TimePoint t0 = run_producers(kProducers, [&](unsigned p) {
      for (std::size_t k = 0; k < per; ++k) {
        const std::size_t index = p * per + k;
        s.arm(p, index, Clock::now() + std::chrono::nanoseconds(mix(index) % spread_ns), FireCallback{&fired, target});
      }
    });
    wait_for_count(fired, target);
    state.SetIterationTime(seconds_since(t0));
    cpu_ns += process_cpu_ns() - cpu0;
    s.sync();
    if (fired.load() != target) fail(bench, "timers fired", fired.load(), target);
  }
  check_background(bench);
  const auto total = static_cast<double>(state.iterations()) * static_cast<double>(target);
  state.SetItemsProcessed(static_cast<std::int64_t>(total));
  state.counters["cpu_ns_per_fired"] = static_cast<double>(cpu_ns) / total;
}

// (c) lateness: fired_at - due

template <class S>
void BM_Lateness(benchmark::State& state, std::string bench) {
  S& s = service<S>();
  const Sizes& z = sizes();
  const std::size_t ticks = static_cast<std::size_t>(z.run / 1ms);
  const std::size_t batch = z.fire_rate / 1000 / kProducers;  // per producer per 1 ms tick
  const std::size_t per = ticks * batch;
  const auto delay_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(kLatenessDelay).count());
  LatenessRecord record(per * kProducers);
  record.target = per * kProducers;
  std::vector<std::int64_t> sorted;
  for (auto _ : state) {
    record.fired.store(0, std::memory_order_relaxed);
    const TimePoint t0 = run_producers(kProducers, [&](unsigned p) {
      std::size_t index = p * per;
      const TimePoint start = Clock::now();
      for (std::size_t t = 0; t < ticks; ++t) {
        std::this_thread::sleep_until(start + std::chrono::milliseconds(static_cast<std::int64_t>(t)));
        for (std::size_t b = 0; b < batch; ++b, ++index) {
          const TimePoint due = Clock::now() + kLatenessDelay + std::chrono::microseconds(mix(index) % delay_us);
          record.due_ns[index] = ns_of(due);
          s.arm(p, index, due, LatenessCallback{&record, index});
        }
      }
    });
    wait_for_count(record.fired, record.target);
    state.SetIterationTime(seconds_since(t0));
    s.sync();
    sorted = record.late_ns;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0) fail(bench, "a callback ran before its due time (ns early)", -sorted.front(), 0);
  }
  check_background(bench);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * record.target));
  state.counters["p50_us"] = percentile_us(sorted, 0.50);
  state.counters["p99_us"] = percentile_us(sorted, 0.99);
  state.counters["p999_us"] = percentile_us(sorted, 0.999);
  state.counters["max_us"] = sorted.empty() ? 0 : static_cast<double>(sorted.back()) / 1e3;
}

// ---------------------------------------------------------------------------
// Registration: scenario, then service, so peers sit side by side.

template <class S, class Fn>
void add(const std::string& scenario, const std::string& params, Fn fn, int iterations) {
  const std::string name = "BM_Lane" + scenario + "<" + S::name() + ">/" + params;
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn, name);
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(iterations);
}

template <class Fn>
void for_services(Fn&& fn) {
  fn(static_cast<ChimeLane<kMs>*>(nullptr));
  fn(static_cast<ChimeLane<kFine>*>(nullptr));
  fn(static_cast<ChimeWorkers<kMs>*>(nullptr));
  fn(static_cast<ChimeWorkers<kFine>*>(nullptr));
  fn(static_cast<Asio*>(nullptr));
#if CHIME_BENCH_HAVE_LIBUV
  fn(static_cast<Uv*>(nullptr));
#endif
}

void register_all() {
  const Sizes& z = sizes();
  const std::string pending = "pending:" + std::to_string(z.pending);
  const std::string prod = "/producers:" + std::to_string(kProducers);
  for_services([&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    add<S>("ScheduleCancel",
           pending + "/delay:" + fmt(kCancelDelay) + "/slice:" + std::to_string(kSlice) + "/round:" + fmt(z.round),
           BM_ScheduleCancel<S>, 2);
  });
  for_services([&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    add<S>("ScheduleToFire",
           pending + "/due:0.." + fmt(kFireSpread) + "/timers:" + std::to_string(z.fire_timers) + prod,
           BM_ScheduleToFire<S>, 3);
  });
  // Lateness: also chime's lane at the interval rule and at a fixed 50 us
  // slack, beside its default slack (design.md, "Slack").
  const std::string lateness = pending + "/due:" + fmt(kLatenessDelay) + ".." + fmt(2 * kLatenessDelay) +
                               "/fire_rate:" + std::to_string(z.fire_rate) + "/run:" + fmt(z.run) + prod;
  add<ChimeLane<kMs, kMs>>("Lateness", lateness, BM_Lateness<ChimeLane<kMs, kMs>>, 1);
  add<ChimeLane<kMs, 50'000>>("Lateness", lateness, BM_Lateness<ChimeLane<kMs, 50'000>>, 1);
  for_services([&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    add<S>("Lateness", lateness, BM_Lateness<S>, 1);
  });
  benchmark::AddCustomContext("lane_sizes", z.label);
#if !CHIME_BENCH_HAVE_LIBUV
  benchmark::AddCustomContext("lane_libuv", "not built: pkg-config found no libuv at configure time");
#endif
}

const bool registered = (register_all(), true);

}  // namespace
}  // namespace chime_bench::lane
