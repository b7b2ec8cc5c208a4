// SPDX-License-Identifier: BSL-1.0
// runtime_bench: chime::Runtime beside the timer services a user would
// otherwise pick, in one binary and one run.
//
// Services (each named by the parameters it is built with; see name()):
//   chime,queue=moodycamel,...      chime::Runtime (its command queue is moodycamel's)
//                                   (precision=1ms everywhere; also precision=100us
//                                   in BM_RuntimeLightLoad, a separate instance).
//                                   No ",slack=" in the name: the default slack
//                                   (RuntimeOptions::slack unset: proportional to
//                                   each timer's delay, runtime/slack.hpp);
//                                   ",slack=interval_rule": slack = precision (a
//                                   timer runs when its precision interval ends);
//                                   ",slack=50us": a fixed 50 us for every timer.
//                                   The lateness, idle and light-load scenarios
//                                   run all three (design.md, "Slack").
//   mutex_heap,workers=2            runtime_peers/mutex_heap_service.hpp: one mutex,
//                                   indexed binary heap, condvar timer thread, a
//                                   mutex+condvar worker pool
//   asio_steady_timer,...           runtime_peers/asio_timer_service.hpp: steady_timer
//                                   per timer, one strand per producer, io_context
//                                   run by 2 threads
// Every service runs callbacks on 2 threads (chime: workers = 2, mutex_heap: 2
// pool workers, Asio: 2 io_context threads) and, before its first benchmark,
// gets `pending` background timers due 1 h .. 1 h 10 min out (fixed
// pseudo-random spread) that stay pending for the whole run (one instance per
// service, built on first use, kept until exit). A background timer that
// fires aborts the binary.
//
// Scenarios (P = producers, threads started by the benchmark; each benchmark
// is one Google Benchmark with manual time = wall time measured here):
//   BM_RuntimeScheduleCancel  P threads each schedule a timer due now+10s and
//       cancel it, over and over for `round` of wall time; the iteration ends
//       when the service has applied everything (chime: flush(); Asio: sync()
//       on its strands). A round this long amortizes the fixed costs of an
//       iteration (starting threads, one flush) to well under 1%. items =
//       pairs; caller_items_per_second = pairs / time until the producer
//       threads were done (what callers see; chime and Asio apply commands
//       asynchronously, so it can be higher than items_per_second).
//       cpu_ns_per_op = CPU time per pair (see CPU counters below).
//   BM_RuntimeScheduleToFire  P threads schedule `timers` timers due
//       now + 0..2ms (timers due within 2 ms); the iteration ends when the
//       last callback has run. items = timers fired; cpu_ns_per_fired and
//       ctx_switches_per_fired = CPU time and context switches per fired
//       timer (see CPU counters below).
//   BM_RuntimeLateness  P threads, paced on a 1 ms tick for `run`, schedule
//       `fire_rate` timers/s in total (due now+1ms..2ms) and, per fired timer,
//       `churn` schedule+cancel pairs (10 s out). Each callback records
//       steady_clock::now() - due; counters p50_us, p99_us, p999_us, max_us
//       (nearest rank over every fired timer of the run).
//   BM_RuntimeTouch  `touch_set` pending timers (split among producers, each
//       owns its share); P threads push them later (reschedule_after(600s)),
//       cycling through their share in a fixed random order, for `round`;
//       ends when applied. items = touches;
//       caller_items_per_second as above; cpu_ns_per_op = CPU time per touch.
//   BM_RuntimeAllocs  `pairs` schedule+cancel pairs split among the P
//       threads, after one warm-up round of the same: every
//       malloc/calloc/realloc/aligned_alloc/posix_memalign in the process
//       while the round runs (all threads; operator new included; counted by
//       chime_alloc::CountScope, see alloc_counter.hpp), divided by the pairs:
//       counter allocs_per_timer.
//   BM_RuntimeIdleWakeups  nothing but the background timers for `idle`;
//       counter wakeups = growth of the service's wake-up count (chime:
//       stats().wakeups; mutex_heap: returns from its condvar waits). Asio has
//       no such counter and is not listed.
//   BM_RuntimeIdleWakeupsFresh  the same on a fresh instance of the service
//       (no background timers, destroyed after): with nothing pending
//       (pending:0), and with one timer pending, due `far` out (pending:1).
//   BM_RuntimeLightLoad  "100 us precision, light load": 1 producer
//       schedules `light_timers` timers evenly paced over `light_run` (timer
//       k at start + k * run / timers: 2 per ms), each due now + 1ms..2ms
//       (fixed pseudo-random), no churn; the run ends when the last one has
//       fired. Counters as BM_RuntimeLateness (p50_us, p99_us, max_us), plus
//       cpu_ms and ctx_switches (over the run, all threads; see CPU counters
//       below), producer_cpu_ms (the producer thread's own CPU time,
//       getrusage(RUSAGE_THREAD): its schedule calls and its pacing), and
//       wakeups (growth of the service's wake-up count; not for Asio). Run
//       for chime (moodycamel queue) at precision 1 ms and at 100 us
//       (separate instances, each with its own background timers), and once
//       for each peer (they have no precision). Registered last, so the
//       100 us instance is built after every other measurement.
//
// CPU counters: getrusage(RUSAGE_SELF) before the producers' gate opens and
// after the iteration's end (last callback ran, or everything applied):
// user + system time and voluntary + involuntary context switches of every
// thread of the process, joined ones included. That takes in the other
// services built earlier in the process, which sit idle (their timers are
// due in an hour), and the benchmark's own threads (producers, the waiting
// main thread), which do the same work for every service.
//
// CHIME_BENCH_RUNTIME=smoke shrinks every size (the names say which) so the
// ctest bench_runtime_smoke runs each benchmark once in seconds.
// CHIME_BENCH_PRODUCERS (a comma-separated list of counts, each 1..256;
// default 1,2,4) sets the producer counts of every multi-producer scenario.
// CHIME_BENCH_SHARDS (a comma-separated list from 1, 2, 4, 8; default 1,2)
// sets the shard counts chime (moodycamel queue) runs every scenario at; the
// names are those of the default (",shards=K" when K != 1). scripts/bench-scale
// sets both.
#include <benchmark/benchmark.h>

#include <chime/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/time.h>

#include "alloc_counter.hpp"
#include "bench_support.hpp"
#include "runtime_peers/asio_timer_service.hpp"
#include "runtime_peers/mutex_heap_service.hpp"

namespace chime_bench {
namespace {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// Parameters. Every benchmark name is built from these.

constexpr unsigned kWorkers = 2;                               // callback threads of every service
constexpr std::chrono::nanoseconds kPrecision = 1ms;           // chime
constexpr std::chrono::nanoseconds kBackgroundDue = 1h;        // background timers: 1 h ..
constexpr std::chrono::nanoseconds kBackgroundSpread = 10min;  // .. 1 h 10 min out
constexpr std::chrono::nanoseconds kCancelDelay = 10s;         // schedule+cancel timers
constexpr std::chrono::nanoseconds kFireSpread = 2ms;          // schedule-to-fire: due now + [0, 2ms]
constexpr std::chrono::nanoseconds kLatenessDelay = 1ms;       // lateness: due now + [1ms, 2ms)
constexpr std::chrono::nanoseconds kTouchDelay = 600s;         // touch: due pushed to now + 600 s
constexpr std::chrono::nanoseconds kIdleFarDue = 1h;           // idle, fresh instance: the one far timer

// chime's second precision, light load only (a separate instance of each service).
constexpr std::chrono::nanoseconds kFinePrecision = 100us;

struct Sizes {
  const char* label;
  std::size_t pending;                  // background timers
  std::chrono::milliseconds round;      // schedule+cancel and touch: wall time per iteration
  std::size_t pairs;                    // allocations: schedule+cancel pairs per iteration, all producers
  std::size_t fire_timers;              // schedule-to-fire timers per iteration
  std::chrono::milliseconds run;        // lateness run
  std::size_t fire_rate;                // lateness: timers fired per second, all producers
  std::size_t churn;                    // lateness: schedule+cancel pairs per fired timer
  std::size_t touch_set;                // touch: pending timers touched
  std::chrono::milliseconds idle;       // idle wake-ups: observation time
  std::size_t light_timers;             // light load: timers fired per run
  std::chrono::milliseconds light_run;  // light load: spread over this long
};

const Sizes& sizes() {
  static const Sizes s = [] {
    const char* env = std::getenv("CHIME_BENCH_RUNTIME");
    if (env != nullptr && std::string(env) == "smoke") {
      return Sizes{"smoke", 1'000, 5ms, 4'000, 4'000, 100ms, 20'000, 4, 4'000, 200ms, 200, 100ms};
    }
    return Sizes{"full", 1'000'000, 200ms, 100'000, 200'000, 2'000ms, 20'000, 4, 100'000, 5'000ms, 4'000, 2'000ms};
  }();
  return s;
}

// A comma-separated list of counts from the environment variable `var`, each
// in [1, max] (and, with `only` not empty, one of `only`), in the order given;
// `fallback` when unset or empty. A bad list stops the binary (exit 2).
std::vector<unsigned> counts_from_env(const char* var, std::vector<unsigned> fallback, unsigned max,
                                      const std::vector<unsigned>& only = {}) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') return fallback;
  std::vector<unsigned> out;
  const std::string text = env;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const unsigned long v = item.empty() ? 0 : std::strtoul(item.c_str(), &end, 10);
    const bool listed = only.empty() || std::find(only.begin(), only.end(), v) != only.end();
    if (item.empty() || *end != '\0' || v < 1 || v > max || !listed) {
      std::fprintf(stderr, "runtime_bench: %s = \"%s\": \"%s\" is not an allowed count\n", var, env, item.c_str());
      std::exit(2);
    }
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(static_cast<unsigned>(v));
    at = comma + 1;
  }
  return out;
}

// The producer counts of the multi-producer scenarios (CHIME_BENCH_PRODUCERS).
const std::vector<unsigned>& producer_counts() {
  static const std::vector<unsigned> v = counts_from_env("CHIME_BENCH_PRODUCERS", {1, 2, 4}, 256);
  return v;
}
// Asio: one strand per producer index, and one more for the background timers.
unsigned max_producers() { return *std::max_element(producer_counts().begin(), producer_counts().end()); }
unsigned background_producer() { return max_producers(); }

// The shard counts chime (moodycamel queue) runs at (CHIME_BENCH_SHARDS).
const std::vector<unsigned>& shard_counts() {
  static const std::vector<unsigned> v = counts_from_env("CHIME_BENCH_SHARDS", {1, 2}, 8, {1, 2, 4, 8});
  return v;
}

// ---------------------------------------------------------------------------
// Callbacks: all <= 16 trivially copyable bytes, so std::function (libstdc++)
// and chime::Task both store them without allocating.

std::atomic<std::uint64_t> g_background_fired{0};

struct BackgroundCallback {
  void operator()() const { g_background_fired.fetch_add(1, std::memory_order_relaxed); }
};

// Counts runs; for timers that must never fire.
struct CountCallback {
  std::atomic<std::uint64_t>* count;
  void operator()() const { count->fetch_add(1, std::memory_order_relaxed); }
};

// ---------------------------------------------------------------------------
// The services behind one interface:
//   static std::string name();          built from the parameters it runs with
//   S();                                 starts it
//   Producer producer(unsigned index);  a handle for one producer thread
//     Id schedule_at(TimePoint, F), schedule_after(duration, F)
//     bool cancel(Id), reschedule_after(Id, duration)
//   void sync();                         returns once what was posted before has been applied
//   std::optional<std::uint64_t> wakeups(), pending()
//   std::optional<std::int64_t> timer_thread_cpu_ns()  CPU time of the thread(s) that
//                                        apply schedules and fire (chime: every wheel thread)
//   static constexpr bool kAnswers;      cancel/reschedule report whether they won

// PrecisionNs: the runtime's precision in nanoseconds (a count, as
// std::chrono::duration cannot be a template argument); SlackNs its
// RuntimeOptions::slack (0: unset, the default slack, proportional to each
// timer's delay; PrecisionNs: the interval rule; 50'000: 50 us); Shards its
// RuntimeOptions::shards (each producer thread's Producer binds to the next
// shard, round-robin).
template <std::int64_t PrecisionNs, std::int64_t SlackNs = 0, unsigned Shards = 1>
class ChimeService {
 public:
  using Id = chime::TimerId;
  static constexpr bool kAnswers = true;
  static constexpr std::chrono::nanoseconds kPrecision{PrecisionNs};

  static chime::RuntimeOptions options() {
    chime::RuntimeOptions o;
    o.precision = kPrecision;
    o.workers = kWorkers;
    o.slack = std::chrono::nanoseconds(SlackNs);
    o.shards = Shards;
    // No queue bound: the scenarios time until everything posted is
    // applied (flush), which an unbounded queue measures honestly, where
    // the bound would refuse schedules (CapacityError) when unpaced
    // producers under chrt -f starve the wheel thread for a while. The
    // bound's own cost is measured in docs/benchmarks.md, "Overload".
    o.max_queue_depth = SIZE_MAX;
    return o;
  }
  static std::string name() {
    const chime::RuntimeOptions o = options();
    return std::string("chime,queue=moodycamel,precision=") + fmt(o.precision) + slack_label() +
           (Shards != 1 ? ",shards=" + std::to_string(Shards) : std::string()) +
           ",workers=" + std::to_string(o.workers);
  }

  // "" for the default slack, else ",slack=..." (a slack at or above the
  // precision is the interval rule, and named so).
  static std::string slack_label() {
    if constexpr (SlackNs == 0) {
      return {};
    } else if constexpr (SlackNs >= PrecisionNs) {
      return ",slack=interval_rule";
    } else {
      return ",slack=" + fmt(std::chrono::nanoseconds(SlackNs));
    }
  }

  ChimeService() : rt_(options()) {
    if (rt_.precision() != kPrecision) fail(name(), "precision", rt_.precision().count(), kPrecision.count());
  }

  class Producer {
   public:
    explicit Producer(chime::Producer p) : p_(std::move(p)) {}
    template <class F>
    Id schedule_at(TimePoint due, F f) {
      return p_.schedule_at(due, chime::Task(f));
    }
    template <class F>
    Id schedule_after(std::chrono::nanoseconds delay, F f) {
      return p_.schedule_after(delay, chime::Task(f));
    }
    bool cancel(Id id) { return p_.cancel(id); }
    bool reschedule_after(Id id, std::chrono::nanoseconds delay) { return p_.reschedule_after(id, delay); }

   private:
    chime::Producer p_;
  };

  Producer producer(unsigned /*index*/) { return Producer(rt_.producer()); }
  void sync() { rt_.flush(); }
  std::optional<std::uint64_t> wakeups() const { return rt_.stats().wakeups; }
  std::optional<std::uint64_t> pending() const { return rt_.stats().pending; }
  std::optional<std::int64_t> timer_thread_cpu_ns() const {
    std::int64_t ns = 0;
    for (const chime::ShardStats& sh : rt_.stats().shards) ns += sh.busy.count();
    return ns;
  }

 private:
  chime::Runtime rt_;
};

class MutexHeap {
 public:
  using Id = MutexHeapService::Id;
  static constexpr bool kAnswers = true;
  static std::string name() { return "mutex_heap,workers=" + std::to_string(kWorkers); }

  MutexHeap() : svc_(kWorkers) {
    if (svc_.workers() != kWorkers) fail(name(), "workers", svc_.workers(), kWorkers);
  }

  class Producer {
   public:
    explicit Producer(MutexHeapService* svc) : svc_(svc) {}
    template <class F>
    Id schedule_at(TimePoint due, F f) {
      return svc_->schedule_at(due, MutexHeapService::Callback(f));
    }
    template <class F>
    Id schedule_after(std::chrono::nanoseconds delay, F f) {
      return svc_->schedule_after(delay, MutexHeapService::Callback(f));
    }
    bool cancel(Id id) { return svc_->cancel(id); }
    bool reschedule_after(Id id, std::chrono::nanoseconds delay) { return svc_->reschedule_after(id, delay); }

   private:
    MutexHeapService* svc_;
  };

  Producer producer(unsigned /*index*/) { return Producer(&svc_); }
  void sync() {}  // every call is applied under the mutex before it returns
  std::optional<std::uint64_t> wakeups() const { return svc_.wakeups(); }
  std::optional<std::uint64_t> pending() const { return svc_.pending(); }
  std::optional<std::int64_t> timer_thread_cpu_ns() {
    const std::int64_t ns = svc_.timer_thread_cpu_ns();
    return ns < 0 ? std::nullopt : std::optional<std::int64_t>(ns);
  }

 private:
  MutexHeapService svc_;
};

class Asio {
 public:
  using Id = AsioTimerService::Id;
  static constexpr bool kAnswers = false;
  static std::string name() { return "asio_steady_timer,threads=" + std::to_string(kWorkers) + ",strand=per_producer"; }

  Asio() : svc_(kWorkers, max_producers() + 1) {}

  class Producer {
   public:
    explicit Producer(AsioTimerService::Producer p) : p_(std::move(p)) {}
    template <class F>
    Id schedule_at(TimePoint due, F f) {
      return p_.schedule_at(due, AsioTimerService::Callback(f));
    }
    template <class F>
    Id schedule_after(std::chrono::nanoseconds delay, F f) {
      return p_.schedule_after(delay, AsioTimerService::Callback(f));
    }
    bool cancel(const Id& id) { return p_.cancel(id); }
    bool reschedule_after(const Id& id, std::chrono::nanoseconds delay) { return p_.reschedule_after(id, delay); }

   private:
    AsioTimerService::Producer p_;
  };

  Producer producer(unsigned index) { return Producer(svc_.producer(index)); }
  void sync() { svc_.sync(); }
  std::optional<std::uint64_t> wakeups() const { return std::nullopt; }
  std::optional<std::uint64_t> pending() const { return std::nullopt; }
  std::optional<std::int64_t> timer_thread_cpu_ns() const { return std::nullopt; }  // the io_context threads do both

 private:
  AsioTimerService svc_;
};

using ChimeMoodycamel = ChimeService<kPrecision.count()>;
using ChimeMoodycamelFine = ChimeService<kFinePrecision.count()>;
// 1 ms grid, a fixed 50 us slack for every timer (design.md, "Slack"):
// fires within 50 us of the due.
using ChimeMoodycamelSlack = ChimeService<kPrecision.count(), std::int64_t{50'000}>;
// 1 ms grid, slack = precision: the interval rule (a timer runs when its
// precision interval ends).
using ChimeMoodycamelInterval = ChimeService<kPrecision.count(), kPrecision.count()>;
// Two shards (design.md, "Shards"): two wheel threads over one slab and pool.
using ChimeMoodycamelShards2 = ChimeService<kPrecision.count(), 0, 2>;
// Four and eight shards: registered only when CHIME_BENCH_SHARDS lists them.
using ChimeMoodycamelShards4 = ChimeService<kPrecision.count(), 0, 4>;
using ChimeMoodycamelShards8 = ChimeService<kPrecision.count(), 0, 8>;

// One instance per service, with the background timers, built on first use
// (outside any timed region) and destroyed at exit.
template <class S>
S& service() {
  static const std::unique_ptr<S> instance = [] {
    auto s = std::make_unique<S>();
    auto p = s->producer(background_producer());
    const TimePoint base = Clock::now() + kBackgroundDue;
    const auto spread = static_cast<std::uint64_t>(kBackgroundSpread.count());
    for (std::size_t i = 0; i < sizes().pending; ++i) {
      p.schedule_at(base + std::chrono::nanoseconds(mix(i) % spread), BackgroundCallback{});
    }
    s->sync();
    if (auto n = s->pending(); n && *n != sizes().pending) fail(S::name(), "background pending", *n, sizes().pending);
    return s;
  }();
  return *instance;
}

template <class S>
std::vector<typename S::Producer> producers(S& s, unsigned n) {
  std::vector<typename S::Producer> v;
  v.reserve(n);
  for (unsigned i = 0; i < n; ++i) v.push_back(s.producer(i));
  return v;
}

// Starts P threads that wait at a gate, calls before_open(), records the time,
// opens the gate, joins them, and returns the recorded time. body(p) runs on
// thread p.
template <class Body, class BeforeOpen>
TimePoint run_producers(unsigned P, Body&& body, BeforeOpen&& before_open) {
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  threads.reserve(P);
  for (unsigned p = 0; p < P; ++p) {
    threads.emplace_back([&go, &body, p] {
      go.wait(false, std::memory_order_acquire);  // pairs with the release store below
      body(p);
    });
  }
  before_open();
  const TimePoint t0 = Clock::now();
  go.store(true, std::memory_order_release);
  go.notify_all();
  for (std::thread& t : threads) t.join();
  return t0;
}

template <class Body>
TimePoint run_producers(unsigned P, Body&& body) {
  return run_producers(P, std::forward<Body>(body), [] {});
}

double seconds_since(TimePoint t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_background(const std::string& bench) {
  const std::uint64_t n = g_background_fired.load(std::memory_order_relaxed);
  if (n != 0) fail(bench, "background timers fired", n, 0);
}

// CPU time and context switches of the whole process (getrusage(RUSAGE_SELF):
// every thread, joined ones included), for the CPU counters.
struct Usage {
  std::int64_t cpu_ns = 0;    // user + system
  std::int64_t switches = 0;  // voluntary + involuntary context switches

  static std::int64_t cpu_of(const rusage& ru) {
    auto ns = [](const timeval& tv) {
      return static_cast<std::int64_t>(tv.tv_sec) * 1'000'000'000 + static_cast<std::int64_t>(tv.tv_usec) * 1'000;
    };
    return ns(ru.ru_utime) + ns(ru.ru_stime);
  }
  static Usage now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return Usage{cpu_of(ru), static_cast<std::int64_t>(ru.ru_nvcsw) + static_cast<std::int64_t>(ru.ru_nivcsw)};
  }
  Usage operator-(const Usage& o) const { return {cpu_ns - o.cpu_ns, switches - o.switches}; }
  Usage& operator+=(const Usage& o) {
    cpu_ns += o.cpu_ns;
    switches += o.switches;
    return *this;
  }
};

// ---------------------------------------------------------------------------
// (a) schedule + cancel

// Runs one schedule+cancel round: each producer does `per` pairs, or, with
// per == 0, pairs until `deadline`. Returns the pairs done; *allocations gets
// the allocations of every thread from before the gate opens until the service
// had applied everything, *callers the seconds until the producers were done,
// *seconds the seconds until the service had applied everything, *used the
// process's CPU time and context switches over that same window (each may be
// null).
constexpr std::size_t kClockCheckEvery = 64;  // operations between deadline checks

template <class S>
std::uint64_t schedule_cancel_round(S& s, std::vector<typename S::Producer>& hs, unsigned P, std::size_t per,
                                    TimePoint deadline, std::atomic<std::uint64_t>& fired, const std::string& bench,
                                    std::uint64_t* allocations, double* callers, double* seconds,
                                    Usage* used = nullptr) {
  std::vector<std::uint64_t> done(P, 0);
  Usage u0;
  std::optional<chime_alloc::CountScope> counting;
  const TimePoint t0 = run_producers(
      P,
      [&](unsigned p) {
        auto& h = hs[p];
        std::uint64_t k = 0;
        for (;;) {
          for (std::size_t b = 0; b < kClockCheckEvery; ++b, ++k) {
            auto id = h.schedule_after(kCancelDelay, CountCallback{&fired});
            if (!h.cancel(id) && S::kAnswers) fail(bench, "cancel of a timer 10 s out lost", k, p);
          }
          if (per != 0 ? k >= per : Clock::now() >= deadline) break;
        }
        done[p] = k;
      },
      [&] {
        if (allocations != nullptr) counting.emplace();
        if (used != nullptr) u0 = Usage::now();
      });
  if (callers != nullptr) *callers = seconds_since(t0);
  s.sync();
  if (counting) {
    *allocations = counting->count();
    counting.reset();
  }
  if (seconds != nullptr) *seconds = seconds_since(t0);
  if (used != nullptr) *used = Usage::now() - u0;
  std::uint64_t total = 0;
  for (std::uint64_t d : done) total += d;
  return total;
}

template <class S>
void BM_ScheduleCancel(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  std::atomic<std::uint64_t> fired{0};
  double caller_secs = 0;
  std::uint64_t items = 0;
  Usage used;
  for (auto _ : state) {
    double callers = 0, secs = 0;
    Usage u;
    items +=
        schedule_cancel_round(s, hs, P, 0, Clock::now() + sizes().round, fired, bench, nullptr, &callers, &secs, &u);
    caller_secs += callers;
    used += u;
    state.SetIterationTime(secs);
  }
  if (fired.load() != 0) fail(bench, "cancelled timers fired", fired.load(), 0);
  check_background(bench);
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.counters["caller_items_per_second"] = static_cast<double>(items) / caller_secs;
  state.counters["cpu_ns_per_op"] =
      static_cast<double>(used.cpu_ns) / static_cast<double>(std::max<std::uint64_t>(items, 1));
}

// (e) allocations per timer over schedule + cancel, steady state
template <class S>
void BM_Allocs(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  const std::size_t per = sizes().pairs / P;
  std::atomic<std::uint64_t> fired{0};
  // Warm-up: reach steady state (slabs, queues and free lists at their working size).
  schedule_cancel_round(s, hs, P, per, TimePoint{}, fired, bench, nullptr, nullptr, nullptr);
  std::uint64_t allocations = 0;
  std::uint64_t items = 0;
  for (auto _ : state) {
    std::uint64_t round_allocations = 0;
    double secs = 0;
    items += schedule_cancel_round(s, hs, P, per, TimePoint{}, fired, bench, &round_allocations, nullptr, &secs);
    allocations += round_allocations;
    state.SetIterationTime(secs);
  }
  if (fired.load() != 0) fail(bench, "cancelled timers fired", fired.load(), 0);
  check_background(bench);
  const double timers = static_cast<double>(items);
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.counters["allocs_per_timer"] = benchmark::Counter(static_cast<double>(allocations) / timers);
}

// (b) schedule-to-fire throughput
template <class S>
void BM_ScheduleToFire(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  const std::size_t per = sizes().fire_timers / P;
  const std::uint64_t target = per * P;
  const auto spread_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(kFireSpread).count());
  std::atomic<std::uint64_t> fired{0};
  Usage used;
  std::int64_t timer_thread_ns = 0;
  for (auto _ : state) {
    fired.store(0, std::memory_order_relaxed);
    const std::optional<std::int64_t> tt0 = s.timer_thread_cpu_ns();
    Usage u0;
    const TimePoint t0 = run_producers(
        P,
        [&](unsigned p) {
          auto& h = hs[p];
          for (std::size_t k = 0; k < per; ++k) {
            const auto offset = std::chrono::microseconds(mix(p * per + k) % (spread_us + 1));  // 0..2000 us
            h.schedule_after(offset, FireCallback{&fired, target});
          }
        },
        [&] { u0 = Usage::now(); });
    wait_for_count(fired, target);
    used += Usage::now() - u0;
    state.SetIterationTime(seconds_since(t0));
    s.sync();
    if (tt0) timer_thread_ns += s.timer_thread_cpu_ns().value() - *tt0;
    if (fired.load() != target) fail(bench, "timers fired", fired.load(), target);
  }
  check_background(bench);
  const auto total = static_cast<double>(state.iterations() * target);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * target));
  state.counters["cpu_ns_per_fired"] = static_cast<double>(used.cpu_ns) / total;
  // The one thread every timer passes through: its CPU per timer is the
  // ceiling of a shard (docs/benchmarks.md, "Wheel-thread CPU per fired timer").
  if (s.timer_thread_cpu_ns())
    state.counters["timer_thread_ns_per_fired"] = static_cast<double>(timer_thread_ns) / total;
  state.counters["ctx_switches_per_fired"] = static_cast<double>(used.switches) / total;
}

template <class S>
void BM_Lateness(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  const Sizes& z = sizes();
  const std::size_t ticks = static_cast<std::size_t>(z.run / 1ms);
  const std::size_t batch = z.fire_rate / 1000 / P;  // per producer per 1 ms tick
  const std::size_t per = ticks * batch;
  const auto delay_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(kLatenessDelay).count());
  LatenessRecord record(per * P);
  record.target = per * P;
  std::atomic<std::uint64_t> churn_fired{0};
  std::vector<std::int64_t> sorted;
  for (auto _ : state) {
    record.fired.store(0, std::memory_order_relaxed);
    const TimePoint t0 = run_producers(P, [&](unsigned p) {
      auto& h = hs[p];
      std::size_t index = p * per;
      const TimePoint start = Clock::now();
      for (std::size_t t = 0; t < ticks; ++t) {
        std::this_thread::sleep_until(start + std::chrono::milliseconds(static_cast<std::int64_t>(t)));
        for (std::size_t b = 0; b < batch; ++b, ++index) {
          const TimePoint due = Clock::now() + kLatenessDelay + std::chrono::microseconds(mix(index) % delay_us);
          record.due_ns[index] = ns_of(due);
          h.schedule_at(due, LatenessCallback{&record, index});
          for (std::size_t c = 0; c < z.churn; ++c) {
            auto id = h.schedule_after(kCancelDelay, CountCallback{&churn_fired});
            if (!h.cancel(id) && S::kAnswers) fail(bench, "cancel of a timer 10 s out lost", c, p);
          }
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
  if (churn_fired.load() != 0) fail(bench, "cancelled timers fired", churn_fired.load(), 0);
  check_background(bench);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * record.target));
  state.counters["p50_us"] = percentile_us(sorted, 0.50);
  state.counters["p99_us"] = percentile_us(sorted, 0.99);
  state.counters["p999_us"] = percentile_us(sorted, 0.999);
  state.counters["max_us"] = sorted.empty() ? 0 : static_cast<double>(sorted.back()) / 1e3;
}

// (d) touch: push pending timers later
template <class S>
void BM_Touch(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  const std::size_t set_per = sizes().touch_set / P;
  std::atomic<std::uint64_t> fired{0};
  std::vector<std::vector<typename S::Id>> ids(P);
  for (unsigned p = 0; p < P; ++p) {
    ids[p].reserve(set_per);
    for (std::size_t k = 0; k < set_per; ++k)
      ids[p].push_back(hs[p].schedule_after(kTouchDelay, CountCallback{&fired}));
    // Touches arrive in random order (connections become active at random),
    // so no service gets a sequential walk through memory it happens to have
    // allocated in order. Fixed seed: every service walks its set alike.
    std::shuffle(ids[p].begin(), ids[p].end(), std::mt19937_64(20240601 + p));
  }
  s.sync();
  std::vector<std::size_t> cursor(P, 0);
  std::vector<std::uint64_t> done(P, 0);
  double caller_secs = 0;
  std::uint64_t items = 0;
  Usage used;
  for (auto _ : state) {
    const TimePoint deadline = Clock::now() + sizes().round;
    Usage u0;
    const TimePoint t0 = run_producers(
        P,
        [&](unsigned p) {
          auto& h = hs[p];
          auto& mine = ids[p];
          std::size_t j = cursor[p];
          std::uint64_t k = 0;
          do {
            for (std::size_t b = 0; b < kClockCheckEvery; ++b, ++k) {
              if (!h.reschedule_after(mine[j], kTouchDelay) && S::kAnswers)
                fail(bench, "touch of a pending timer lost", k, p);
              if (++j == mine.size()) j = 0;
            }
          } while (Clock::now() < deadline);
          cursor[p] = j;
          done[p] = k;
        },
        [&] { u0 = Usage::now(); });
    for (std::uint64_t d : done) items += d;
    caller_secs += seconds_since(t0);
    s.sync();
    used += Usage::now() - u0;
    state.SetIterationTime(seconds_since(t0));
  }
  for (unsigned p = 0; p < P; ++p) {
    for (auto& id : ids[p]) {
      if (!hs[p].cancel(id) && S::kAnswers) fail(bench, "cancel of a touched timer lost", 0, p);
    }
  }
  s.sync();
  if (fired.load() != 0) fail(bench, "touched timers fired", fired.load(), 0);
  check_background(bench);
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.counters["caller_items_per_second"] = static_cast<double>(items) / caller_secs;
  state.counters["cpu_ns_per_op"] =
      static_cast<double>(used.cpu_ns) / static_cast<double>(std::max<std::uint64_t>(items, 1));
}

// The wake-ups of service `s` while the caller sleeps sizes().idle per
// iteration, after a sync and the wake-up it caused.
template <class S>
std::uint64_t idle_wakeups(benchmark::State& state, S& s) {
  s.sync();
  std::this_thread::sleep_for(20ms);  // let the wake-up that sync() caused finish
  std::uint64_t woke = 0;
  for (auto _ : state) {
    const std::uint64_t before = s.wakeups().value();
    const TimePoint t0 = Clock::now();
    std::this_thread::sleep_for(sizes().idle);
    woke += s.wakeups().value() - before;
    state.SetIterationTime(seconds_since(t0));
  }
  return woke;
}

// (f) wake-ups while idle
template <class S>
void BM_IdleWakeups(benchmark::State& state, std::string bench) {
  S& s = service<S>();
  const std::uint64_t woke = idle_wakeups(state, s);
  check_background(bench);
  state.counters["wakeups"] = static_cast<double>(woke);
  state.counters["pending"] = static_cast<double>(s.pending().value_or(0));
}

// (f') wake-ups while idle on a fresh instance (no background timers): with
// `far_timers` timers pending, due kIdleFarDue out.
template <class S>
void BM_IdleWakeupsFresh(benchmark::State& state, std::string bench, std::size_t far_timers) {
  S s;
  {
    auto p = s.producer(0);
    for (std::size_t i = 0; i < far_timers; ++i) p.schedule_after(kIdleFarDue, BackgroundCallback{});
  }
  const std::uint64_t woke = idle_wakeups(state, s);
  check_background(bench);
  if (auto n = s.pending(); n && *n != far_timers) fail(bench, "pending", *n, far_timers);
  state.counters["wakeups"] = static_cast<double>(woke);
  state.counters["pending"] = static_cast<double>(s.pending().value_or(0));
}

// (g) light load: lateness and CPU time at a few timers per millisecond
template <class S>
void BM_LightLoad(benchmark::State& state, std::string bench, unsigned P) {
  S& s = service<S>();
  auto hs = producers(s, P);
  const Sizes& z = sizes();
  const std::size_t per = z.light_timers / P;
  const auto delay_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(kLatenessDelay).count());
  LatenessRecord record(per * P);
  record.target = per * P;
  s.sync();
  std::this_thread::sleep_for(20ms);  // let the wake-up that sync() caused finish
  std::vector<std::int64_t> sorted;
  Usage used;
  std::int64_t producer_cpu_ns = 0;
  std::uint64_t woke = 0;
  for (auto _ : state) {
    record.fired.store(0, std::memory_order_relaxed);
    Usage u0;
    std::optional<std::uint64_t> w0;
    std::vector<std::int64_t> producer_ns(P, 0);
    const TimePoint t0 = run_producers(
        P,
        [&](unsigned p) {
          auto& h = hs[p];
          rusage r0{}, r1{};
          getrusage(RUSAGE_THREAD, &r0);
          const TimePoint start = Clock::now();
          const std::chrono::nanoseconds run = z.light_run;
          for (std::size_t k = 0; k < per; ++k) {
            // Evenly paced: timer k at start + k * run / timers.
            std::this_thread::sleep_until(start + run * static_cast<std::int64_t>(k) / static_cast<std::int64_t>(per));
            const std::size_t index = p * per + k;
            const TimePoint due = Clock::now() + kLatenessDelay + std::chrono::microseconds(mix(index) % delay_us);
            record.due_ns[index] = ns_of(due);
            h.schedule_at(due, LatenessCallback{&record, index});
          }
          getrusage(RUSAGE_THREAD, &r1);
          producer_ns[p] = Usage::cpu_of(r1) - Usage::cpu_of(r0);
        },
        [&] {
          w0 = s.wakeups();
          u0 = Usage::now();
        });
    wait_for_count(record.fired, record.target);
    used += Usage::now() - u0;
    if (w0) woke += s.wakeups().value() - *w0;
    state.SetIterationTime(seconds_since(t0));
    for (std::int64_t ns : producer_ns) producer_cpu_ns += ns;
    s.sync();
    sorted = record.late_ns;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0) fail(bench, "a callback ran before its due time (ns early)", -sorted.front(), 0);
  }
  check_background(bench);
  const auto runs = static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * record.target));
  state.counters["p50_us"] = percentile_us(sorted, 0.50);
  state.counters["p99_us"] = percentile_us(sorted, 0.99);
  state.counters["max_us"] = sorted.empty() ? 0 : static_cast<double>(sorted.back()) / 1e3;
  state.counters["cpu_ms"] = static_cast<double>(used.cpu_ns) / 1e6 / runs;
  state.counters["producer_cpu_ms"] = static_cast<double>(producer_cpu_ns) / 1e6 / runs;
  state.counters["ctx_switches"] = static_cast<double>(used.switches) / runs;
  if (s.wakeups()) state.counters["wakeups"] = static_cast<double>(woke) / runs;
}

// ---------------------------------------------------------------------------
// Registration: scenario, then producers, then service, so peers sit side by
// side in the output.

template <class S, class Fn>
void add(const std::string& scenario, const std::string& params, Fn fn, unsigned P, int iterations) {
  const std::string name = "BM_Runtime" + scenario + "<" + S::name() + ">/" + params;
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn, name, P);
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  if (iterations > 0) b->Iterations(iterations);
}

// with_slack: chime at the interval rule and at a fixed 50 us slack too,
// beside its default slack (the lateness scenarios). Every scenario runs chime (moodycamel queue) at each
// shard count of shard_counts() (by default one and two shards).
template <class Fn4>
void for_services(Fn4&& fn, bool with_slack = false) {
  for (unsigned k : shard_counts()) {
    if (k == 1) fn(static_cast<ChimeMoodycamel*>(nullptr));
    if (k == 2) fn(static_cast<ChimeMoodycamelShards2*>(nullptr));
    if (k == 4) fn(static_cast<ChimeMoodycamelShards4*>(nullptr));
    if (k == 8) fn(static_cast<ChimeMoodycamelShards8*>(nullptr));
  }
  if (with_slack) {
    fn(static_cast<ChimeMoodycamelInterval*>(nullptr));
    fn(static_cast<ChimeMoodycamelSlack*>(nullptr));
  }
  fn(static_cast<MutexHeap*>(nullptr));
  fn(static_cast<Asio*>(nullptr));
}

void register_all() {
  const Sizes& z = sizes();
  const std::string pending = "pending:" + std::to_string(z.pending);
  for (unsigned P : producer_counts()) {
    const std::string prod = "/producers:" + std::to_string(P);
    for_services([&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      add<S>("ScheduleCancel", pending + "/delay:" + fmt(kCancelDelay) + "/round:" + fmt(z.round) + prod,
             BM_ScheduleCancel<S>, P, 0);
    });
  }
  for (unsigned P : producer_counts()) {
    const std::string prod = "/producers:" + std::to_string(P);
    for_services([&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      add<S>("ScheduleToFire",
             pending + "/due:0.." + fmt(kFireSpread) + "/timers:" + std::to_string(z.fire_timers) + prod,
             BM_ScheduleToFire<S>, P, 0);
    });
  }
  for (unsigned P : producer_counts()) {
    const std::string prod = "/producers:" + std::to_string(P);
    for_services(
        [&](auto* tag) {
          using S = std::remove_pointer_t<decltype(tag)>;
          add<S>("Lateness",
                 pending + "/due:" + fmt(kLatenessDelay) + ".." + fmt(2 * kLatenessDelay) + "/fire_rate:" +
                     std::to_string(z.fire_rate) + "/churn:" + std::to_string(z.churn) + "/run:" + fmt(z.run) + prod,
                 BM_Lateness<S>, P, 1);
        },
        true);
  }
  for (unsigned P : producer_counts()) {
    const std::string prod = "/producers:" + std::to_string(P);
    for_services([&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      add<S>("Touch",
             pending + "/touch_set:" + std::to_string(z.touch_set) + "/order:random/to:" + fmt(kTouchDelay) +
                 "/round:" + fmt(z.round) + prod,
             BM_Touch<S>, P, 0);
    });
  }
  for (unsigned P : producer_counts()) {
    const std::string prod = "/producers:" + std::to_string(P);
    for_services([&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      add<S>("Allocs", pending + "/delay:" + fmt(kCancelDelay) + "/pairs:" + std::to_string(z.pairs) + prod,
             BM_Allocs<S>, P, 2);
    });
  }
  auto idle = [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    const std::string name = "BM_RuntimeIdleWakeups<" + S::name() + ">/" + pending + "/idle:" + fmt(z.idle);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_IdleWakeups<S>, name);
    b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
  };
  idle(static_cast<ChimeMoodycamel*>(nullptr));
  idle(static_cast<ChimeMoodycamelInterval*>(nullptr));
  idle(static_cast<ChimeMoodycamelSlack*>(nullptr));
  idle(static_cast<MutexHeap*>(nullptr));
  // A fresh instance: nothing pending, then one far timer.
  auto idle_fresh = [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    for (std::size_t far_timers : {std::size_t{0}, std::size_t{1}}) {
      const std::string name = "BM_RuntimeIdleWakeupsFresh<" + S::name() + ">/pending:" + std::to_string(far_timers) +
                               (far_timers != 0 ? "/far:" + fmt(kIdleFarDue) : std::string()) + "/idle:" + fmt(z.idle);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_IdleWakeupsFresh<S>, name, far_timers);
      b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
    }
  };
  idle_fresh(static_cast<ChimeMoodycamel*>(nullptr));
  idle_fresh(static_cast<ChimeMoodycamelInterval*>(nullptr));
  idle_fresh(static_cast<ChimeMoodycamelSlack*>(nullptr));
  idle_fresh(static_cast<MutexHeap*>(nullptr));

  // Last, so the 100 us instance (and its background timers) is built after
  // every other measurement. chime at both precisions, then the peers.
  auto light = [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    add<S>("LightLoad",
           pending + "/timers:" + std::to_string(z.light_timers) + "/run:" + fmt(z.light_run) +
               "/due:" + fmt(kLatenessDelay) + ".." + fmt(2 * kLatenessDelay) + "/producers:1",
           BM_LightLoad<S>, 1, 1);
  };
  light(static_cast<ChimeMoodycamel*>(nullptr));
  light(static_cast<ChimeMoodycamelInterval*>(nullptr));
  light(static_cast<ChimeMoodycamelSlack*>(nullptr));
  light(static_cast<ChimeMoodycamelFine*>(nullptr));
  light(static_cast<MutexHeap*>(nullptr));
  light(static_cast<Asio*>(nullptr));

  benchmark::AddCustomContext("runtime_sizes", z.label);
  benchmark::AddCustomContext("runtime_services",
                              "every service runs callbacks on 2 threads and holds `pending` "
                              "background timers due 1h..1h10min out; "
                              "mutex_heap = std::mutex + indexed binary heap + condvar timer "
                              "thread + mutex/condvar pool of 2; "
                              "asio = steady_timer per timer (make_shared), every operation posted "
                              "to the producer's strand, io_context "
                              "run by 2 threads");
  benchmark::AddCustomContext("runtime_timing",
                              "manual time = wall time from opening the producers' start gate "
                              "until the service has applied everything "
                              "(chime flush(), Asio two marker rounds on every strand) or the last "
                              "callback ran; items = pairs, timers "
                              "or touches");
}

const bool registered = (register_all(), true);

}  // namespace
}  // namespace chime_bench
