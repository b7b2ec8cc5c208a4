// SPDX-License-Identifier: BSL-1.0
// wheel_bench: chime's timing wheel beside the timers it replaces, in one binary.
//
// Two families of benchmarks; every name is built from the parameters that
// actually configure the run, so a label cannot disagree with what ran.
//
// 1. BM_Protocol<IMPL>/N:n — the protocol of the set/heap/wheel comparison in
//    shared/seeds/cpp-set-heap-wheel-timers-zh.txt, for one implementation:
//      add     n alarms at base + i*97us (i = 0..n-1), payload i (8 bytes);
//      remove  the first half, by handle;
//      fire    the second half one at a time: for each remaining alarm, in
//              order, advance to the least time that fires it. Peers pop every
//              item with deadline <= t (t = the deadline); chime advances its
//              clock to interval_start(at) + precision, the least time that
//              fires `at`. With 1 us precision every step fires exactly one
//              alarm; with a coarser precision several alarms share a step
//              and steps whose time repeats are skipped. Every fired payload
//              is checked to be the next expected index, and after each step
//              the number fired must be exactly the expected count, else the
//              binary aborts;
//      next    re-add the second half into a fresh instance and interleave
//              next-alarm queries (chime: next_alarm_fires_at(); peers: their
//              minimum deadline) with the same fire steps; every answer is
//              checked against the step's time.
//    Counters (nanoseconds per operation, averaged over iterations):
//      add_ns, remove_ns, fire_ns (per fired alarm, including the step's
//      call), next_ns (one query, timed directly with the TSC, fences and the
//      measured cost of an empty timed region subtracted; steps interrupted
//      by the OS are left out, next_dropped_pct says how many), next_diff_ns (the
//      seed's method: [time of fire steps with queries] - [time of fire
//      steps alone], both on fresh instances, divided by the steps),
//      bytes_per_alarm (heap footprint of the structure with n alarms
//      pending, divided by n; see alloc_counter.hpp). The iteration time is
//      the sum of the timed phases (add + remove + fire + next).
//    bytes_per_alarm comes from one untimed pass per run (counting on);
//    the timed phases run with counting off. By default
//    malloc keeps the pages it has touched, so timed phases do not pay page
//    faults (configure_malloc; CHIME_BENCH_MALLOC=cold to pay them).
//    Under callgrind every timed phase is dumped separately
//    (scripts/bench-wheel callgrind prints instructions per operation).
//
// 2. BM_IntervalNum<DIVIDER>/precision:p/{throughput,latency} — the cost of
//    t -> (t - start) / precision, the division on chime's add path, with
//    plain int64 '/' by a runtime divisor, chime::detail::IntervalDivider,
//    the public TimingWheel::interval_num(t) (checks included), and '/' by a
//    compile-time constant (what the compiler emits when the precision is
//    known; a floor). Counter ns_per_op. Throughput sums independent
//    quotients; latency feeds each quotient into the next input.
//
// 3. BM_Insert<ChimeWheel_1us>/N:n/capacity:c/{first,reinsert} — what the
//    first adds into a wheel cost (fresh pages) against adds into nodes the
//    wheel already has. A chime::TimingWheel<std::uint64_t> with 1 us
//    precision, default level bits and WheelConfig::capacity = c; n alarms at
//    base + i*97us, payload i, as in the protocol's add phase:
//      first     construct the wheel (untimed: with c > 0 this is where the
//                pool is allocated and pre-faulted), then time the n adds;
//      reinsert  construct, add n, remove all (untimed), then time adding the
//                n alarms again: every add reuses a node (and page) freed by
//                the removals.
//    Every iteration starts with malloc_trim(0) (untimed), which hands the
//    free heap pages of earlier iterations back to the kernel, so a wheel
//    never inherits pages that are already faulted in: with the warm malloc
//    setting below, the first adds would otherwise reuse them and look like
//    re-inserts. Counters: add_ns (per add); faults_per_1k_adds (minor page
//    faults during the timed adds, from getrusage, per 1000 adds: about 10
//    when every 40-byte node lands on a fresh 4 KiB page, 0 when the pages
//    were faulted in before the timed loop); slowest_1k_adds_us (the slowest
//    run of 1024 consecutive adds in an iteration, timed with the TSC, median
//    over the iterations: the pause when the pool grows);
//    construct_ns_per_alarm (the untimed construction, per alarm: with
//    c = n, the price of pre-faulting); bytes_reserved_per_alarm (heap
//    footprint of the wheel right after construction, divided by n: what the
//    capacity costs before any add); bytes_per_alarm (footprint with the n
//    alarms pending, / n).
//
// 4. BM_AddThenMinTime<ChimeWheel_1ms>/N:n — what the runtime's wheel thread
//    does under load: a chime::TimingWheel<std::uint32_t> with 1 ms precision
//    holds n alarms at base + i*97us (untimed), then 100,000 adds at times
//    drawn uniformly from that span (after the earliest alarm, fixed seed)
//    each followed by min_alarm_time(), whose answer is checked. Counter
//    add_min_ns (one add plus one query). Under callgrind the timed loop is
//    dumped as <name>/N:n/add_min.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>

#include <chime/wheel.hpp>
#include <chime/detail/interval_divider.hpp>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define CHIME_BENCH_HAVE_TSC 1
#endif

// Under `valgrind --tool=callgrind`, each timed phase is bracketed by
// CALLGRIND_ZERO_STATS / CALLGRIND_DUMP_STATS_AT("<benchmark>/<phase>") so
// scripts/bench-wheel can report instructions per operation. Natively these
// are a few no-op instructions at phase boundaries, outside the timed loops.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define CHIME_BENCH_PHASE_BEGIN() CALLGRIND_ZERO_STATS
#define CHIME_BENCH_PHASE_END(label)                  \
  do {                                                \
    const std::string chime_bench_label_ = (label);   \
    CALLGRIND_DUMP_STATS_AT(chime_bench_label_.c_str()); \
  } while (0)
#else
#define CHIME_BENCH_PHASE_BEGIN() ((void)0)
#define CHIME_BENCH_PHASE_END(label) ((void)(label))
#endif

#include "alloc_counter.hpp"
#include "peers/heap_timer.hpp"
#include "peers/multimap_timer.hpp"
#include "peers/set_timer.hpp"

namespace chime_bench {
namespace {

using Ns = std::int64_t;  // nanoseconds since the steady_clock epoch

constexpr Ns kBase = Ns{3600} * 1'000'000'000;  // start of the wheel; arbitrary, fixed
constexpr Ns kSpacing = 97'000;                   // 97 us between consecutive alarms (the seed's)

constexpr Ns alarm_time(std::size_t i) { return kBase + static_cast<Ns>(i) * kSpacing; }

[[noreturn]] [[gnu::cold]] [[gnu::noinline]] void fail(const char* bench, const char* what, std::uint64_t a,
                                                         std::uint64_t b) {
  std::fprintf(stderr, "\n%s: CHECK FAILED: %s (%" PRIu64 " vs %" PRIu64 ")\n", bench, what, a, b);
  std::abort();
}

std::string format_duration(Ns ns) {
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

// ---------------------------------------------------------------------------
// Implementations under test, behind one interface:
//   static std::string name();
//   explicit Impl(Ns start);
//   Handle add(Ns at, std::uint64_t payload);
//   void remove(Handle);
//   void fire_until(Ns t, F on_fired);   // on_fired(std::uint64_t payload)
//   std::optional<Ns> next() const;      // time to pass to fire_until to fire the next alarm
//   static Ns fire_time(Ns at);          // least t such that fire_until(t) fires an alarm at `at`
//   std::size_t size() const;

// A peer from bench/peers: fire_until(t) pops every deadline <= t, so the
// least time that fires an alarm is its deadline.
template <class Peer>
class PeerAdapter {
 public:
  using Handle = typename Peer::Handle;
  static std::string name() { return Peer::kName; }
  explicit PeerAdapter(Ns /*start*/) {}
  Handle add(Ns at, std::uint64_t payload) { return peer_.add(at, payload); }
  void remove(Handle h) { peer_.remove(h); }
  template <class F>
  void fire_until(Ns t, F&& on_fired) {
    peer_.pop(t, on_fired);
  }
  std::optional<Ns> next() const { return peer_.min_time(); }
  static constexpr Ns fire_time(Ns at) { return at; }
  std::size_t size() const { return peer_.size(); }

 private:
  Peer peer_;
};

// chime::TimingWheel<std::uint64_t> with the given precision and default
// level bits, started at kBase. advance_clock(t) fires the alarms with
// at < interval_start(t), so the least time that fires `at` is
// interval_start(at) + precision.
template <Ns PrecisionNs>
class ChimeAdapter {
 public:
  using Wheel = chime::TimingWheel<std::uint64_t>;
  using Handle = Wheel::Alarm;
  static std::string name() { return "ChimeWheel_" + format_duration(PrecisionNs); }
  explicit ChimeAdapter(Ns start)
      : wheel_(chime::WheelConfig{chime::Duration{PrecisionNs}}, chime::TimePoint{chime::Duration{start}}) {
    if (wheel_.alarm_precision().count() != PrecisionNs) {
      fail("ChimeAdapter", "alarm_precision", wheel_.alarm_precision().count(), PrecisionNs);
    }
    if (!(wheel_.level_bits() == chime::LevelBits::default_bits())) {
      fail("ChimeAdapter", "default level bits", 0, 0);
    }
  }
  Handle add(Ns at, std::uint64_t payload) { return wheel_.add(to_time(at), payload); }
  void remove(Handle h) { wheel_.remove(h); }
  template <class F>
  void fire_until(Ns t, F&& on_fired) {
    wheel_.advance_clock(to_time(t), [&](Handle a) { on_fired(wheel_.value(a)); });
  }
  std::optional<Ns> next() const {
    const auto t = wheel_.next_alarm_fires_at();
    if (!t) return std::nullopt;
    return t->time_since_epoch().count();
  }
  static constexpr Ns fire_time(Ns at) {
    return kBase + ((at - kBase) / PrecisionNs + 1) * PrecisionNs;
  }
  std::size_t size() const { return wheel_.size(); }

 private:
  static chime::TimePoint to_time(Ns t) { return chime::TimePoint{chime::Duration{t}}; }
  Wheel wheel_;
};

using ChimeWheel1us = ChimeAdapter<1'000>;
using ChimeWheel1ms = ChimeAdapter<1'000'000>;
using StdSet = PeerAdapter<SetTimer>;
using StdMultimap = PeerAdapter<MultimapTimer>;
using IndexedHeap = PeerAdapter<HeapTimer>;

// ---------------------------------------------------------------------------
// Cheap timestamps for timing one next-alarm query.

#ifdef CHIME_BENCH_HAVE_TSC
// lfence before rdtsc: earlier instructions have completed; lfence after: the
// timed code does not start before the stamp. The asm barriers keep the
// compiler from moving memory accesses across the stamps.
inline std::uint64_t stamp() noexcept {
  asm volatile("" ::: "memory");
  _mm_lfence();
  const std::uint64_t t = __rdtsc();
  _mm_lfence();
  asm volatile("" ::: "memory");
  return t;
}
#else
inline std::uint64_t stamp() noexcept {
  asm volatile("" ::: "memory");
  const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  asm volatile("" ::: "memory");
  return t;
}
#endif

// Stamp ticks per nanosecond, measured once against steady_clock.
double stamp_ticks_per_ns() {
  static const double ticks_per_ns = [] {
    const auto c0 = std::chrono::steady_clock::now();
    const std::uint64_t s0 = stamp();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto c1 = std::chrono::steady_clock::now();
    const std::uint64_t s1 = stamp();
    const double ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count());
    return static_cast<double>(s1 - s0) / ns;
  }();
  return ticks_per_ns;
}

// ---------------------------------------------------------------------------
// The protocol.

struct Step {
  Ns to;                     // fire_until(to); also what next() must answer before it
  std::uint64_t fired_upto;  // after it, exactly the alarms [half, fired_upto) have fired
};

template <class Impl>
std::vector<Step> fire_steps(std::size_t half, std::size_t n) {
  std::vector<Step> steps;
  steps.reserve(n - half);
  std::size_t j = half;
  for (std::size_t i = half; i < n; ++i) {
    const Ns to = Impl::fire_time(alarm_time(i));
    if (!steps.empty() && steps.back().to == to) continue;
    while (j < n && Impl::fire_time(alarm_time(j)) <= to) ++j;
    steps.push_back({to, j});
  }
  return steps;
}

struct PhaseSeconds {
  double add = 0, remove = 0, fire = 0, fire_alone = 0, fire_with_next = 0, next = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class Impl>
class Protocol {
 public:
  using Handle = typename Impl::Handle;

  Protocol(std::string name, std::size_t n)
      : name_(std::move(name)), n_(n), half_(n / 2), steps_(fire_steps<Impl>(half_, n)), handles_(n) {}

  std::size_t fired() const { return n_ - half_; }
  std::size_t steps() const { return steps_.size(); }

  // Heap bytes of one instance holding all n alarms (untimed).
  std::size_t pending_bytes() {
    chime_alloc::CountScope counting{chime_alloc::Frees::balanced};
    std::size_t bytes = 0;
    {
      Impl timer(kBase);
      for (std::size_t i = 0; i < n_; ++i) handles_[i] = timer.add(alarm_time(i), i);
      bytes = counting.stats().live_bytes;
    }
    return bytes;
  }

  PhaseSeconds run() {
    PhaseSeconds s;
    {
      Impl timer(kBase);
      CHIME_BENCH_PHASE_BEGIN();
      s.add = timed_add(timer);
      CHIME_BENCH_PHASE_END(label("add"));
      check_size(timer, n_, "size after add");

      CHIME_BENCH_PHASE_BEGIN();
      s.remove = timed_remove(timer);
      CHIME_BENCH_PHASE_END(label("remove"));
      check_size(timer, n_ - half_, "size after remove");

      s.fire = fire_phase</*with_next=*/false>(timer, "fire");
    }
    {
      Impl timer(kBase);
      readd(timer);
      s.fire_alone = fire_phase<false>(timer, "fire_alone");
    }
    {
      Impl timer(kBase);
      readd(timer);
      s.fire_with_next = fire_phase<true>(timer, "fire_with_next");
    }
    {
      Impl timer(kBase);
      readd(timer);
      s.next = timed_next_phase(timer);
    }
    return s;
  }

  // Each timed loop is a function of its own, never inlined, so that its
  // code and the code around it in run() cannot change each other's layout:
  // edits to the harness moved chime's add by 3-4 ns before this.
  [[gnu::noinline]] double timed_add(Impl& timer) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n_; ++i) handles_[i] = timer.add(alarm_time(i), i);
    return seconds_since(t0);
  }

  [[gnu::noinline]] double timed_remove(Impl& timer) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < half_; ++i) timer.remove(handles_[i]);
    return seconds_since(t0);
  }

 private:
  std::string label(const char* phase) const { return name_ + "/N:" + std::to_string(n_) + "/" + phase; }

  void check_size(const Impl& timer, std::size_t expected, const char* what) const {
    if (timer.size() != expected) fail(name_.c_str(), what, timer.size(), expected);
  }

  void readd(Impl& timer) {
    for (std::size_t i = half_; i < n_; ++i) handles_[i] = timer.add(alarm_time(i), i);
    check_size(timer, n_ - half_, "size after re-add");
  }

  template <bool with_next>
  double fire_phase(Impl& timer, const char* phase) {
    CHIME_BENCH_PHASE_BEGIN();
    const double seconds = timed_fire<with_next>(timer);
    CHIME_BENCH_PHASE_END(label(phase));
    check_size(timer, 0, "size after fire");
    return seconds;
  }

  // Advances through every step; with_next, queries next() before each step.
  template <bool with_next>
  [[gnu::noinline]] double timed_fire(Impl& timer) {
    std::uint64_t expected = half_;
    auto on_fired = [&](std::uint64_t payload) {
      if (payload != expected) fail(name_.c_str(), "fired payload != next expected", payload, expected);
      ++expected;
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (const Step& step : steps_) {
      if constexpr (with_next) {
        const std::optional<Ns> next = timer.next();
        if (!next || *next != step.to) fail(name_.c_str(), "next != step time", next.value_or(-1), step.to);
      }
      timer.fire_until(step.to, on_fired);
      if (expected != step.fired_upto) fail(name_.c_str(), "fired count after step", expected, step.fired_upto);
    }
    return seconds_since(t0);
  }

  // Times each next() query with stamp(), minus an empty timed region
  // measured in the same loop; returns the mean seconds per query. A step
  // where either region took longer than kInterrupted was interrupted
  // (preemption, an interrupt, a page fault): it is left out of both sums and
  // counted in dropped_steps_.
  static constexpr double kInterruptedNs = 5'000;
  [[gnu::noinline]] double timed_next_phase(Impl& timer) {
    std::uint64_t expected = half_;
    auto on_fired = [&](std::uint64_t payload) {
      if (payload != expected) fail(name_.c_str(), "fired payload != next expected", payload, expected);
      ++expected;
    };
    std::uint64_t query_ticks = 0;
    std::uint64_t empty_ticks = 0;
    std::size_t dropped = 0;
    const auto interrupted = static_cast<std::uint64_t>(kInterruptedNs * stamp_ticks_per_ns());
    for (const Step& step : steps_) {
      const std::uint64_t e0 = stamp();
      const std::uint64_t e1 = stamp();
      const std::uint64_t q0 = stamp();
      std::optional<Ns> next = timer.next();
      benchmark::DoNotOptimize(next);
      const std::uint64_t q1 = stamp();
      if (e1 - e0 > interrupted || q1 - q0 > interrupted) {
        ++dropped;
      } else {
        empty_ticks += e1 - e0;
        query_ticks += q1 - q0;
      }
      if (!next || *next != step.to) fail(name_.c_str(), "next != step time", next.value_or(-1), step.to);
      timer.fire_until(step.to, on_fired);
      if (expected != step.fired_upto) fail(name_.c_str(), "fired count after step", expected, step.fired_upto);
    }
    check_size(timer, 0, "size after fire");
    dropped_steps_ += dropped;
    const std::size_t kept = steps_.size() - dropped;
    if (kept == 0) return 0;
    const double net_ticks = static_cast<double>(query_ticks) - static_cast<double>(empty_ticks);
    return net_ticks / static_cast<double>(kept) / stamp_ticks_per_ns() * 1e-9;
  }

 public:
  std::size_t dropped_steps() const { return dropped_steps_; }

 private:
  std::size_t dropped_steps_ = 0;

  std::string name_;
  std::size_t n_;
  std::size_t half_;
  std::vector<Step> steps_;
  std::vector<Handle> handles_;
};

template <class Impl>
void BM_Protocol(benchmark::State& state, std::string name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Protocol<Impl> protocol(name, n);
  const double bytes_per_alarm = static_cast<double>(protocol.pending_bytes()) / static_cast<double>(n);

  PhaseSeconds sum;
  for (auto _ : state) {
    const PhaseSeconds s = protocol.run();
    state.SetIterationTime(s.add + s.remove + s.fire + s.next * static_cast<double>(protocol.steps()));
    sum.add += s.add;
    sum.remove += s.remove;
    sum.fire += s.fire;
    sum.fire_alone += s.fire_alone;
    sum.fire_with_next += s.fire_with_next;
    sum.next += s.next;
  }

  using benchmark::Counter;
  const std::size_t removed = n / 2;  // the protocol removes the first half (rounded down)
  const double half = static_cast<double>(removed);
  const double steps = static_cast<double>(protocol.steps());
  state.counters["add_ns"] = Counter(sum.add * 1e9 / static_cast<double>(n), Counter::kAvgIterations);
  state.counters["remove_ns"] = Counter(sum.remove * 1e9 / half, Counter::kAvgIterations);
  state.counters["fire_ns"] = Counter(sum.fire * 1e9 / static_cast<double>(protocol.fired()), Counter::kAvgIterations);
  state.counters["next_ns"] = Counter(sum.next * 1e9, Counter::kAvgIterations);
  state.counters["next_dropped_pct"] =
      Counter(100.0 * static_cast<double>(protocol.dropped_steps()) / steps, Counter::kAvgIterations);
  state.counters["next_diff_ns"] =
      Counter((sum.fire_with_next - sum.fire_alone) * 1e9 / steps, Counter::kAvgIterations);
  state.counters["bytes_per_alarm"] = Counter(bytes_per_alarm);
}

template <class Impl>
void register_protocol() {
  const std::string name = "BM_Protocol<" + Impl::name() + ">";
  auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Protocol<Impl>, name);
  b->ArgName("N")->Arg(10'000)->Arg(1'000'000)->Arg(10'000'000);
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  // With --benchmark_repetitions, report the fastest repetition beside the
  // median: on a shared machine it is the least disturbed one.
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

// ---------------------------------------------------------------------------
// First inserts against re-inserts.

enum class InsertCase { first, reinsert };

constexpr std::size_t kInsertBatch = 1024;  // adds per TSC-timed run (slowest_1k_adds_us)

// Minor page faults of the process so far.
std::int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

class Insert {
 public:
  using Wheel = chime::TimingWheel<std::uint64_t>;
  static constexpr Ns kPrecisionNs = 1'000;

  Insert(std::string label, std::size_t n, std::size_t capacity)
      : label_(std::move(label)),
        config_{chime::Duration{kPrecisionNs}, chime::LevelBits::default_bits(), capacity},
        handles_(n),
        stamps_(n / kInsertBatch + 2) {}

  // Heap bytes of one wheel right after construction and with all n alarms
  // pending (untimed).
  std::pair<std::size_t, std::size_t> footprint() {
    chime_alloc::CountScope counting{chime_alloc::Frees::balanced};
    std::pair<std::size_t, std::size_t> bytes;
    {
      Wheel wheel(config_, start());
      bytes.first = counting.stats().live_bytes;
      add_all(wheel);
      bytes.second = counting.stats().live_bytes;
    }
    return bytes;
  }

  struct Result {
    double seconds = 0;
    double construct_seconds = 0;
    std::int64_t faults = 0;
    double slowest_batch_seconds = 0;
  };

  template <InsertCase kCase>
  Result run() {
    malloc_trim(0);
    Result r;
    std::optional<Wheel> wheel;
    const auto c0 = std::chrono::steady_clock::now();
    wheel.emplace(config_, start());
    r.construct_seconds = seconds_since(c0);
    if constexpr (kCase == InsertCase::reinsert) {
      add_all(*wheel);
      for (const Wheel::Alarm& a : handles_) wheel->remove(a);
      if (!wheel->empty()) fail(label_.c_str(), "size after remove", wheel->size(), 0);
    }
    const std::int64_t faults0 = minor_faults();
    CHIME_BENCH_PHASE_BEGIN();
    r.seconds = timed_add(*wheel);
    CHIME_BENCH_PHASE_END(label_ + "/add");
    r.faults = minor_faults() - faults0;
    if (wheel->size() != handles_.size()) fail(label_.c_str(), "size after add", wheel->size(), handles_.size());
    std::uint64_t slowest = 0;
    const std::size_t batches = (handles_.size() + kInsertBatch - 1) / kInsertBatch;
    for (std::size_t b = 0; b < batches; ++b) slowest = std::max(slowest, stamps_[b + 1] - stamps_[b]);
    r.slowest_batch_seconds = static_cast<double>(slowest) / stamp_ticks_per_ns() * 1e-9;
    return r;
  }

 private:
  static chime::TimePoint start() { return chime::TimePoint{chime::Duration{kBase}}; }
  static chime::TimePoint at(std::size_t i) { return chime::TimePoint{chime::Duration{alarm_time(i)}}; }

  void add_all(Wheel& wheel) {
    for (std::size_t i = 0; i < handles_.size(); ++i) handles_[i] = wheel.add(at(i), i);
  }

  // The n adds, with a TSC stamp after every kInsertBatch of them (one stamp
  // per 1024 adds: about 0.03 ns per add).
  [[gnu::noinline]] double timed_add(Wheel& wheel) {
    const std::size_t n = handles_.size();
    const auto t0 = std::chrono::steady_clock::now();
    stamps_[0] = stamp();
    std::size_t b = 1;
    for (std::size_t i = 0; i < n; i += kInsertBatch) {
      const std::size_t end = std::min(n, i + kInsertBatch);
      for (std::size_t j = i; j < end; ++j) handles_[j] = wheel.add(at(j), j);
      stamps_[b++] = stamp();
    }
    return seconds_since(t0);
  }

  std::string label_;
  chime::WheelConfig config_;
  std::vector<Wheel::Alarm> handles_;
  std::vector<std::uint64_t> stamps_;
};

template <InsertCase kCase>
void BM_Insert(benchmark::State& state, std::string label, std::size_t n, std::size_t capacity) {
  Insert insert(label, n, capacity);
  const auto [reserved_bytes, pending_bytes] = insert.footprint();
  double seconds = 0, construct_seconds = 0;
  std::int64_t faults = 0;
  std::vector<double> slowest;  // per iteration
  for (auto _ : state) {
    const Insert::Result r = insert.run<kCase>();
    state.SetIterationTime(r.seconds);
    seconds += r.seconds;
    construct_seconds += r.construct_seconds;
    faults += r.faults;
    slowest.push_back(r.slowest_batch_seconds);
  }
  // The median over iterations: a single preemption of the benchmark (the
  // host's, which --rt cannot prevent in a VM) should not set the figure.
  std::sort(slowest.begin(), slowest.end());
  const double slowest_median = slowest.empty() ? 0 : slowest[slowest.size() / 2];
  using benchmark::Counter;
  const double adds = static_cast<double>(n);
  state.counters["add_ns"] = Counter(seconds * 1e9 / adds, Counter::kAvgIterations);
  state.counters["faults_per_1k_adds"] = Counter(static_cast<double>(faults) * 1000 / adds, Counter::kAvgIterations);
  state.counters["slowest_1k_adds_us"] = Counter(slowest_median * 1e6);
  state.counters["construct_ns_per_alarm"] = Counter(construct_seconds * 1e9 / adds, Counter::kAvgIterations);
  state.counters["bytes_reserved_per_alarm"] = Counter(static_cast<double>(reserved_bytes) / adds);
  state.counters["bytes_per_alarm"] = Counter(static_cast<double>(pending_bytes) / adds);
}

void register_insert() {
  constexpr std::size_t n = 1'000'000;
  struct Variant {
    std::size_t capacity;
    InsertCase which;
  };
  for (const Variant v : {Variant{0, InsertCase::first}, Variant{n, InsertCase::first}, Variant{0, InsertCase::reinsert}}) {
    const std::string name = "BM_Insert<" + ChimeWheel1us::name() + ">/N:" + std::to_string(n) +
                             "/capacity:" + std::to_string(v.capacity) +
                             (v.which == InsertCase::first ? "/first" : "/reinsert");
    auto fn = v.which == InsertCase::first ? BM_Insert<InsertCase::first> : BM_Insert<InsertCase::reinsert>;
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn, name, n, v.capacity);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  }
}

// ---------------------------------------------------------------------------
// Adds interleaved with min_alarm_time(), as the runtime's wheel thread does
// (it asks for the earliest alarm before every sleep).

constexpr std::size_t kAddMinOps = 100'000;  // timed add + min_alarm_time pairs per iteration

class AddThenMinTime {
 public:
  using Wheel = chime::TimingWheel<std::uint32_t>;  // the runtime's wheel
  static constexpr Ns kPrecisionNs = 1'000'000;

  explicit AddThenMinTime(std::string label, std::size_t n) : label_(std::move(label)), n_(n), handles_(kAddMinOps) {
    // Uniform over the span of the pending alarms, after the earliest: fixed seed.
    std::mt19937_64 rng(20261128);
    std::uniform_int_distribution<Ns> offset(kSpacing, static_cast<Ns>(n) * kSpacing);
    times_.resize(kAddMinOps);
    for (Ns& t : times_) t = kBase + offset(rng);
  }

  // Fills a wheel with n alarms at base + i*97us (untimed), then times
  // kAddMinOps adds each followed by min_alarm_time(); removes them again
  // (untimed). Returns the timed seconds.
  double run() {
    Wheel wheel(chime::WheelConfig{chime::Duration{kPrecisionNs}}, chime::TimePoint{chime::Duration{kBase}});
    for (std::size_t i = 0; i < n_; ++i) wheel.add(to_time(alarm_time(i)), static_cast<std::uint32_t>(i));
    wheel.reserve(n_ + kAddMinOps);
    if (wheel.min_alarm_time() != to_time(alarm_time(0))) fail(label_.c_str(), "min before", 0, 0);
    CHIME_BENCH_PHASE_BEGIN();
    const double seconds = timed(wheel);
    CHIME_BENCH_PHASE_END(label_ + "/N:" + std::to_string(n_) + "/add_min");
    for (const Wheel::Alarm& a : handles_) wheel.remove(a);
    if (wheel.size() != n_) fail(label_.c_str(), "size after remove", wheel.size(), n_);
    return seconds;
  }

 private:
  static chime::TimePoint to_time(Ns t) { return chime::TimePoint{chime::Duration{t}}; }

  [[gnu::noinline]] double timed(Wheel& wheel) {
    const chime::TimePoint first = to_time(alarm_time(0));
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < kAddMinOps; ++k) {
      handles_[k] = wheel.add(to_time(times_[k]), static_cast<std::uint32_t>(k));
      const std::optional<chime::TimePoint> min = wheel.min_alarm_time();
      if (min != first) [[unlikely]]
        fail(label_.c_str(), "min_alarm_time", k, 0);
    }
    return seconds_since(t0);
  }

  std::string label_;
  std::size_t n_;
  std::vector<Wheel::Alarm> handles_;
  std::vector<Ns> times_;
};

void BM_AddThenMinTime(benchmark::State& state, std::string label) {
  AddThenMinTime bench(std::move(label), static_cast<std::size_t>(state.range(0)));
  double seconds = 0;
  for (auto _ : state) {
    const double s = bench.run();
    state.SetIterationTime(s);
    seconds += s;
  }
  state.counters["add_min_ns"] =
      benchmark::Counter(seconds * 1e9 / static_cast<double>(kAddMinOps), benchmark::Counter::kAvgIterations);
}

void register_add_then_min_time() {
  const std::string name = "BM_AddThenMinTime<ChimeWheel_1ms>";
  auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_AddThenMinTime, name);
  b->ArgName("N")->Arg(10'000)->Arg(1'000'000);
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

// ---------------------------------------------------------------------------
// Interval division: t -> (t - start) / precision.

constexpr Ns kDivStart = kBase;

struct PlainDivision {
  static constexpr const char* kName = "plain_int64_division";
  explicit PlainDivision(Ns precision) : precision_(precision) {}
  Ns operator()(Ns t) const noexcept { return (t - kDivStart) / precision_; }
  Ns precision_;
};

struct ChimeIntervalDivider {
  static constexpr const char* kName = "chime::detail::IntervalDivider";
  explicit ChimeIntervalDivider(Ns precision) : divider_(static_cast<std::uint64_t>(precision)) {}
  Ns operator()(Ns t) const noexcept {
    return static_cast<Ns>(divider_.divide(static_cast<std::uint64_t>(t - kDivStart)));
  }
  chime::detail::IntervalDivider divider_;
};

struct ChimeIntervalNum {
  static constexpr const char* kName = "chime::TimingWheel::interval_num";
  explicit ChimeIntervalNum(Ns precision)
      : wheel_(chime::WheelConfig{chime::Duration{precision}}, chime::TimePoint{chime::Duration{kDivStart}}) {}
  Ns operator()(Ns t) const { return wheel_.interval_num(chime::TimePoint{chime::Duration{t}}); }
  chime::TimingWheel<std::uint64_t> wheel_;
};

template <Ns P>
struct ConstantDivision {
  static constexpr const char* kName = "compile_time_constant_division";
  explicit ConstantDivision(Ns precision) {
    if (precision != P) fail(kName, "precision", precision, P);
  }
  Ns operator()(Ns t) const noexcept { return (t - kDivStart) / P; }
};

// 4096 times spread uniformly over the hour after start (fixed seed).
const std::vector<Ns>& division_inputs() {
  static const std::vector<Ns> inputs = [] {
    std::mt19937_64 rng(20240601);
    std::uniform_int_distribution<Ns> offset(0, Ns{3600} * 1'000'000'000);
    std::vector<Ns> v(4096);
    for (Ns& t : v) t = kDivStart + offset(rng);
    return v;
  }();
  return inputs;
}

template <class Divider, bool kLatency>
void BM_IntervalNum(benchmark::State& state, Ns precision) {
  // Launder the precision so the compiler cannot specialise the runtime divisors.
  benchmark::DoNotOptimize(precision);
  const Divider divide(precision);
  const std::vector<Ns>& inputs = division_inputs();
  for (Ns t : inputs) {
    const Ns want = (t - kDivStart) / precision;
    if (divide(t) != want) fail(Divider::kName, "quotient", static_cast<std::uint64_t>(divide(t)), want);
  }
  for (auto _ : state) {
    if constexpr (kLatency) {
      Ns q = 0;
      for (Ns t : inputs) q = divide(t + (q & 1));
      benchmark::DoNotOptimize(q);
    } else {
      Ns sum = 0;
      for (Ns t : inputs) sum += divide(t);
      benchmark::DoNotOptimize(sum);
    }
  }
  state.counters["ns_per_op"] = benchmark::Counter(
      static_cast<double>(inputs.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class Divider>
void register_division(Ns precision) {
  for (bool latency : {false, true}) {
    const std::string name = std::string("BM_IntervalNum<") + Divider::kName + ">/precision:" +
                             format_duration(precision) + (latency ? "/latency" : "/throughput");
    auto fn = latency ? BM_IntervalNum<Divider, true> : BM_IntervalNum<Divider, false>;
    benchmark::RegisterBenchmark(name.c_str(), fn, precision);
  }
}

template <Ns P>
void register_division_at() {
  register_division<PlainDivision>(P);
  register_division<ChimeIntervalDivider>(P);
  register_division<ChimeIntervalNum>(P);
  register_division<ConstantDivision<P>>(P);
}

void register_all() {
  register_protocol<ChimeWheel1us>();
  register_protocol<ChimeWheel1ms>();
  register_protocol<IndexedHeap>();
  register_protocol<StdSet>();
  register_protocol<StdMultimap>();

  register_insert();
  register_add_then_min_time();

  register_division_at<1'000>();
  register_division_at<1'000'000>();
  register_division_at<1'024>();
  register_division_at<3>();

  benchmark::AddCustomContext(
      "protocol",
      "add N alarms at base+i*97us (8-byte payload); remove first half by handle; fire the rest one step at a "
      "time (peers: pop deadline<=t; chime: advance_clock to interval_start(at)+precision); re-add and query "
      "the next alarm before each step. Counters are ns per op; fire_ns is per fired alarm.");
  benchmark::AddCustomContext("next_ns",
                              "each query timed with lfence;rdtsc;lfence, empty-region cost subtracted; steps with a "
                              "region over 5 us (interrupted) left out and counted in next_dropped_pct");
  benchmark::AddCustomContext("next_diff_ns", "(fire steps with queries - fire steps alone) / steps, the seed's method");
  benchmark::AddCustomContext("bytes_per_alarm",
                              "live heap bytes (malloc_usable_size + 8-byte chunk header per block) with N "
                              "alarms pending, / N; includes the peers' item slabs and chime's whole wheel");
  char ticks[64];
  std::snprintf(ticks, sizeof ticks, "%.4f", stamp_ticks_per_ns());
  benchmark::AddCustomContext("stamp_ticks_per_ns", ticks);
}

}  // namespace

// By default glibc's malloc is told to keep every page it has touched
// (no mmap'd blocks, no trimming), so the pages that the untimed memory pass
// faulted in are reused by the timed phases: the phases measure the data
// structures, not the kernel zeroing fresh pages. CHIME_BENCH_MALLOC=cold
// keeps glibc's defaults, where large blocks are mmap'd and returned on free,
// so every instance pays its page faults (as in the seed's single run).
void configure_malloc() {
  const char* mode = std::getenv("CHIME_BENCH_MALLOC");
  const bool cold = mode != nullptr && std::string(mode) == "cold";
  if (!cold) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
  }
  benchmark::AddCustomContext(
      "malloc", cold ? "cold (glibc defaults: fresh pages are faulted in by the timed phases)"
                     : "warm (M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1: timed phases reuse pages the untimed "
                       "memory pass faulted in; CHIME_BENCH_MALLOC=cold for glibc defaults)");
}

}  // namespace chime_bench

int main(int argc, char** argv) {
  chime_bench::configure_malloc();
  chime_bench::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
