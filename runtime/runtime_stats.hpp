// runtime/runtime_stats.hpp: the counters behind Runtime::stats().
//
// What this is: striped counters (one cache line per stripe, a thread picks a
// stripe once) so that producers and workers never contend on a counter, and
// a log-linear lateness histogram per recording thread. Who may touch it:
// any thread adds; stats() sums.
//
// Guarantees: counts are exact once the adding threads are quiescent (for
// example after flush()); a concurrent stats() is a consistent-enough
// snapshot (each counter individually monotonic). Histogram percentiles are
// reported as the upper edge of their bucket (at most 1/8 = 12.5% above the
// true value); max is exact.
//
// Memory ordering: all relaxed. stats() promises no ordering with other
// operations; flush() provides the happens-before that makes counts exact.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

#include "chime/runtime.hpp"

namespace chime::detail {

inline constexpr std::size_t kStripes = 16;

inline std::size_t this_thread_stripe() noexcept {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return stripe;
}

class StripedCounter {
 public:
  void add(std::uint64_t n = 1) noexcept {
    stripes_[this_thread_stripe()].value.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t sum() const noexcept {
    std::uint64_t s = 0;
    for (const auto& st : stripes_) s += st.value.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct alignas(64) Stripe {
    std::atomic<std::uint64_t> value{0};
  };
  std::array<Stripe, kStripes> stripes_{};
};

// Buckets: values < 8 ns are exact; above, 8 sub-buckets per power of two.
class LatenessHistogram {  // also used for run times
 public:
  static constexpr int kSub = 8;
  static constexpr int kBuckets = 64 * kSub;

  void record(std::int64_t ns) noexcept {
    if (ns < 0) ns = 0;
    Stripe& s = stripes_[this_thread_stripe()];
    s.counts[bucket(static_cast<std::uint64_t>(ns))].fetch_add(1, std::memory_order_relaxed);
    std::int64_t m = s.max.load(std::memory_order_relaxed);
    while (ns > m && !s.max.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
    }
  }

  DurationStats summary() const {
    std::array<std::uint64_t, kBuckets> counts{};
    std::int64_t max = 0;
    std::uint64_t total = 0;
    for (const auto& s : stripes_) {
      for (int b = 0; b < kBuckets; ++b) counts[b] += s.counts[b].load(std::memory_order_relaxed);
      max = std::max(max, s.max.load(std::memory_order_relaxed));
    }
    for (auto c : counts) total += c;
    DurationStats out;
    if (total == 0) return out;
    auto percentile = [&](double q) {
      const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total - 1)) + 1;
      std::uint64_t seen = 0;
      for (int b = 0; b < kBuckets; ++b) {
        seen += counts[b];
        if (seen >= rank) return Duration(std::min<std::int64_t>(upper_edge(b), max));
      }
      return Duration(max);
    };
    out.p50 = percentile(0.50);
    out.p99 = percentile(0.99);
    out.p999 = percentile(0.999);
    out.max = Duration(max);
    return out;
  }

 private:
  static int bucket(std::uint64_t v) noexcept {
    if (v < kSub) return static_cast<int>(v);
    const int msb = 63 - std::countl_zero(v);  // >= 3
    const int sub = static_cast<int>((v >> (msb - 3)) & (kSub - 1));
    return (msb - 2) * kSub + sub;
  }
  // Largest value in bucket b.
  static std::int64_t upper_edge(int b) noexcept {
    if (b < kSub) return b;
    const int msb = b / kSub + 2;
    const std::uint64_t sub = static_cast<std::uint64_t>(b % kSub);
    const std::uint64_t lo = (std::uint64_t{1} << msb) | (sub << (msb - 3));
    const std::uint64_t hi = lo + (std::uint64_t{1} << (msb - 3)) - 1;
    return hi > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(hi);
  }

  struct Stripe {
    std::array<std::atomic<std::uint64_t>, kBuckets> counts{};
    alignas(64) std::atomic<std::int64_t> max{0};
  };
  std::array<Stripe, kStripes> stripes_{};
};

}  // namespace chime::detail
