// SPDX-License-Identifier: BSL-1.0
// bench/bench_support.hpp: what runtime_bench.cpp and lane_bench.cpp both
// use: the check that aborts a run whose figures would be wrong, duration
// labels for benchmark names, a fixed pseudo-random spread, the callbacks
// that count fired timers and record lateness, and the percentile of a
// sorted sample. One definition each (inline), in namespace chime_bench.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace chime_bench {

// A benchmark whose result would be wrong (a cancelled timer ran, a count is
// off) stops the whole binary, naming the check and the two values.
[[noreturn]] [[gnu::cold]] inline void fail(const std::string& bench, const char* what, std::uint64_t a,
                                            std::uint64_t b) {
  std::fprintf(stderr, "\n%s: CHECK FAILED: %s (%" PRIu64 " vs %" PRIu64 ")\n", bench.c_str(), what, a, b);
  std::abort();
}

// A duration as a benchmark name shows it: 1h, 10min, 10s, 2ms, 100us, 3ns.
inline std::string fmt(std::chrono::nanoseconds d) {
  const std::int64_t ns = d.count();
  if (ns != 0 && ns % 3'600'000'000'000 == 0) return std::to_string(ns / 3'600'000'000'000) + "h";
  if (ns != 0 && ns % 60'000'000'000 == 0 && ns < 3'600'000'000'000) {
    return std::to_string(ns / 60'000'000'000) + "min";
  }
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

inline std::int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// A pseudo-random, fixed spread (splitmix64 of the index).
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Counts runs; the one that reaches `target` wakes the waiting benchmark.
// acq_rel: every callback's effects happen-before the waiter's final load
// (a release sequence of read-modify-writes). 16 bytes: stored inline by
// chime::Task, std::function and Asio's handlers.
struct FireCallback {
  std::atomic<std::uint64_t>* fired;
  std::uint64_t target;
  void operator()() const {
    if (fired->fetch_add(1, std::memory_order_acq_rel) + 1 == target) fired->notify_all();
  }
};

inline void wait_for_count(std::atomic<std::uint64_t>& fired, std::uint64_t target) {
  for (std::uint64_t v = fired.load(std::memory_order_acquire); v < target; v = fired.load(std::memory_order_acquire)) {
    fired.wait(v, std::memory_order_acquire);
  }
}

// Lateness record: due times written by producers, lateness by callbacks.
struct LatenessRecord {
  explicit LatenessRecord(std::size_t n) : due_ns(n), late_ns(n) {}
  std::vector<std::int64_t> due_ns;
  std::vector<std::int64_t> late_ns;
  std::atomic<std::uint64_t> fired{0};
  std::uint64_t target = 0;
};

struct LatenessCallback {
  LatenessRecord* record;
  std::size_t index;
  void operator()() const {
    const std::int64_t now = ns_of(std::chrono::steady_clock::now());  // first thing the callback does
    record->late_ns[index] = now - record->due_ns[index];
    if (record->fired.fetch_add(1, std::memory_order_acq_rel) + 1 == record->target) record->fired.notify_all();
  }
};

// The q-quantile of a sorted sample of nanoseconds, in microseconds (nearest rank).
inline double percentile_us(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  std::size_t rank = static_cast<std::size_t>(q * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e3;
}

}  // namespace chime_bench
