// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_stats.hpp: the counters behind Runtime::stats().
//
// What this is: striped counters (a thread owns a stripe, one cache line
// holding all its counters) so that producers and workers never contend on a
// counter nor pay a locked instruction for one, and a log-linear lateness
// histogram per recording thread. Who may touch it:
// any thread adds; stats() sums.
//
// Guarantees: counts are exact once the adding threads are quiescent (for
// example after flush()); a concurrent stats() is a consistent-enough
// snapshot (each counter individually monotonic). Histogram percentiles are
// reported as the upper edge of their bucket (at most 1/8 = 12.5% above the
// true value); max, count and sum are exact, and so are the cumulative
// buckets of DurationStats (their bounds, 2^k - 1 ns, are edges of this
// histogram). A concurrent summary's buckets and count come from one read of
// the counts (the +Inf bucket equals count); its sum is read separately.
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
#include <optional>
#include <type_traits>

#include <pthread.h>

#include "chime/runtime.hpp"
#include "tuning.hpp"

namespace chime::detail {

// The stripes: tuning.hpp, CHIME_STATS_STRIPES.
inline constexpr std::size_t kStripes = CHIME_STATS_STRIPES;
inline constexpr std::size_t kSharedStripe = kStripes - 1;

// The stripes no live thread owns: bit k set means stripe k (k <
// kSharedStripe) is free. Process-wide: a thread owns the same stripe index
// in every runtime's counters.
inline std::atomic<std::uint32_t> free_stripes{(1u << kSharedStripe) - 1};

// The stripe the calling thread writes. The first kSharedStripe threads
// alive at once each own one, as its single writer, so an add there is a
// plain load and store (no locked instruction: on x86 a `lock add` on a
// cache line this thread alone writes still costs ~20 cycles, three of them
// per cancel); any further thread shares the last stripe and adds with
// fetch_add. A thread takes its stripe at its first add and gives it back
// when it exits.
//
// Out of memory: the thread_local is trivially destructible, so its first
// use registers no destructor (glibc registers one with calloc and aborts
// the process when that fails: a thread's first cancel out of memory would
// abort). The stripe is given back by a pthread key's destructor instead:
// the key is made once per process (pthread_key_create allocates nothing),
// and pthread_setspecific, which may allocate for a key past the first 32,
// reports a failure instead of aborting: the thread then shares the last
// stripe and owns none, so no stripe is ever kept by a thread that exited.
// glibc runs the key's destructors after the thread_locals' destructors; one
// that counts later (another key's destructor) finds the shared stripe.
//
// Memory ordering: the stripe passes from its last owner to its next one
// through free_stripes: the release fetch_or at exit pairs with the acquire
// CAS that takes it, so the last owner's stores happen-before the next
// owner's loads, and the single-writer add never loses a count.
struct ThreadStripe {
  static constexpr std::size_t kUnclaimed = kStripes;  // before the thread's first add
  std::size_t index = kUnclaimed;
  bool exclusive() const noexcept { return index != kSharedStripe; }
};
static_assert(std::is_trivially_destructible_v<ThreadStripe>, "its first use registers no destructor");

// Gives a thread's stripe back at its exit: the pthread key's destructor;
// `value` is the stripe index + 1.
inline void give_back_stripe(void* value) noexcept;

inline ThreadStripe& this_thread_stripe_storage() noexcept {
  thread_local ThreadStripe stripe;  // constant-initialized: no guard, no destructor
  return stripe;
}

inline void give_back_stripe(void* value) noexcept {
  const auto owned = reinterpret_cast<std::uintptr_t>(value) - 1;
  this_thread_stripe_storage().index = kSharedStripe;  // a later add shares the last stripe
  free_stripes.fetch_or(1u << owned, std::memory_order_release);
}

// The key whose destructor gives a thread's stripe back; nullopt if the
// process is out of keys (then every thread shares the last stripe).
inline const std::optional<pthread_key_t>& stripe_key() noexcept {
  static const std::optional<pthread_key_t> key = []() noexcept -> std::optional<pthread_key_t> {
    pthread_key_t k;
    if (pthread_key_create(&k, give_back_stripe) != 0) return std::nullopt;
    return k;
  }();
  return key;
}

// A thread's first add: takes a free stripe, if any, and registers its
// give-back; the shared stripe if either fails. Never allocates but through
// pthread_setspecific, whose failure it handles.
[[gnu::noinline]] inline void claim_stripe(ThreadStripe& t) noexcept {
  t.index = kSharedStripe;
  const std::optional<pthread_key_t>& key = stripe_key();
  if (!key) return;
  std::uint32_t f = free_stripes.load(std::memory_order_relaxed);
  while (f != 0) {
    const std::uint32_t bit = f & (~f + 1);
    if (free_stripes.compare_exchange_weak(f, f & ~bit, std::memory_order_acquire, std::memory_order_relaxed)) {
      const auto owned = static_cast<std::size_t>(std::countr_zero(bit));
      if (pthread_setspecific(*key, reinterpret_cast<void*>(static_cast<std::uintptr_t>(owned) + 1)) != 0) {
        free_stripes.fetch_or(bit, std::memory_order_release);  // as at exit
        return;
      }
      t.index = owned;
      return;
    }
  }
}

inline const ThreadStripe& this_thread_stripe() noexcept {
  ThreadStripe& t = this_thread_stripe_storage();
  if (t.index == ThreadStripe::kUnclaimed) [[unlikely]]
    claim_stripe(t);
  return t;
}

// Adds n to a counter of the calling thread's stripe (see ThreadStripe).
// Relaxed: stats() promises no ordering (above).
inline void stripe_add(std::atomic<std::uint64_t>& v, std::uint64_t n, const ThreadStripe& t) noexcept {
  if (t.exclusive()) {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  } else {
    v.fetch_add(n, std::memory_order_relaxed);
  }
}

// What the runtime counts.
enum class Counter : unsigned {
  scheduled,
  fired,
  cancelled,
  rescheduled,
  ended,  // timers whose outcome is decided (stats().pending = scheduled - ended)
  callback_errors,
  slow_runs,
};
inline constexpr std::size_t kCounters = 7;

// Every counter of one runtime, striped: a thread's counters share one
// cache line (a cancel adds three, on the same line), and no two threads'
// stripes share a line.
class RuntimeCounters {
 public:
  void add(Counter c, std::uint64_t n = 1) noexcept {
    const ThreadStripe& t = this_thread_stripe();
    stripe_add(stripes_[t.index].value[static_cast<unsigned>(c)], n, t);
  }
  std::uint64_t sum(Counter c) const noexcept {
    std::uint64_t s = 0;
    for (const auto& st : stripes_) s += st.value[static_cast<unsigned>(c)].load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct alignas(64) Stripe {
    std::array<std::atomic<std::uint64_t>, kCounters> value{};
  };
  static_assert(sizeof(Stripe) == 64, "one thread's counters are one cache line");
  std::array<Stripe, kStripes> stripes_{};
};

// One counter, striped as RuntimeCounters' are (a stripe per thread, a
// cache line per stripe): for a count kept per shard (WheelThread::
// seam.lazy_cancels), which RuntimeCounters' one line per thread cannot hold
// for any number of shards.
class StripedCount {
 public:
  void add(std::uint64_t n = 1) noexcept {
    const ThreadStripe& t = this_thread_stripe();
    stripe_add(stripes_[t.index].value, n, t);
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

  [[gnu::always_inline]] void record(std::int64_t ns) noexcept {
    if (ns < 0) ns = 0;
    const ThreadStripe& t = this_thread_stripe();
    Stripe& s = stripes_[t.index];
    stripe_add(s.counts[bucket(static_cast<std::uint64_t>(ns))], 1, t);
    stripe_add(s.sum, static_cast<std::uint64_t>(ns), t);
    std::int64_t m = s.max.load(std::memory_order_relaxed);
    if (t.exclusive()) {
      if (ns > m) s.max.store(ns, std::memory_order_relaxed);
      return;
    }
    while (ns > m && !s.max.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
    }
  }

  DurationStats summary() const {
    std::array<std::uint64_t, kBuckets> counts{};
    std::int64_t max = 0;
    std::uint64_t total = 0;
    std::uint64_t sum = 0;
    // Only the buckets up to that of a stripe's max are read: those above
    // it are zero, since every recorded value raises its stripe's max. A
    // summary that reads the max before a racing record raises it leaves
    // that record out, as its relaxed reads of a racing record may anyway.
    int top = 0;
    for (const auto& s : stripes_) {
      const std::int64_t stripe_max = s.max.load(std::memory_order_relaxed);
      const int stripe_top = bucket(static_cast<std::uint64_t>(stripe_max));
      for (int b = 0; b <= stripe_top; ++b) counts[b] += s.counts[b].load(std::memory_order_relaxed);
      max = std::max(max, stripe_max);
      top = std::max(top, stripe_top);
      sum += s.sum.load(std::memory_order_relaxed);
    }
    for (int b = 0; b <= top; ++b) total += counts[b];
    DurationStats out;
    if (total == 0) return out;
    out.count = total;
    out.sum = Duration(static_cast<std::int64_t>(std::min<std::uint64_t>(sum, INT64_MAX)));
    // Values <= 2^k - 1 are exactly those in the buckets below bucket(2^k) = (k - 2) * kSub.
    std::uint64_t below = 0;
    int next = 0;
    for (std::size_t i = 0; i < DurationStats::bucket_count; ++i) {
      const int end = bucket(static_cast<std::uint64_t>(DurationStats::bucket_le(i).count()) + 1);
      for (; next < end && next <= top; ++next) below += counts[next];
      out.buckets[i].count = below;
    }
    // The three percentiles in one walk over the buckets: their ranks are in
    // ascending order, so each is found where the walk for the one before
    // it stopped.
    constexpr std::array<double, 3> kQuantiles{0.50, 0.99, 0.999};
    const std::array<Duration*, 3> into{&out.p50, &out.p99, &out.p999};
    std::array<std::uint64_t, 3> rank{};
    for (std::size_t q = 0; q < rank.size(); ++q) {
      rank[q] = static_cast<std::uint64_t>(kQuantiles[q] * static_cast<double>(total - 1)) + 1;
    }
    std::size_t k = 0;
    std::uint64_t seen = 0;
    for (int b = 0; b < kBuckets && k < rank.size(); ++b) {
      seen += counts[b];
      for (; k < rank.size() && seen >= rank[k]; ++k) *into[k] = Duration(std::min<std::int64_t>(upper_edge(b), max));
    }
    for (; k < rank.size(); ++k) *into[k] = Duration(max);
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
    std::atomic<std::uint64_t> sum{0};  // on max's cache line
  };
  std::array<Stripe, kStripes> stripes_{};
};

// What every role counts into and stats() sums: the counters, the
// callbacks' lateness and their run times. Each thread writes its own
// stripe, relaxed (argued at RuntimeCounters and LatenessHistogram).
struct RuntimeMeters {
  RuntimeCounters counters;
  LatenessHistogram lateness;
  LatenessHistogram run_time;
};

}  // namespace chime::detail
