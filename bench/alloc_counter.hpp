// alloc_counter: a counting replacement of the global operator new/delete,
// installed in the chime_bench binary only (alloc_counter.cpp).
//
// What it measures: the heap footprint of the live allocations made while
// counting is on, as glibc sees it: for each live block, malloc_usable_size()
// plus one 8-byte chunk header. That is what a process actually pays for a
// block (a 40-byte std::set node costs 48 bytes), so a structure made of many
// small nodes is not flattered against one made of a few big arrays.
//
// How it is used: counting is switched on only for an untimed "memory pass"
// (construct, add N, read live_bytes(), destroy), never while a timed phase
// runs, so the timed phases pay one predictable branch per allocation and
// nothing else. Every block allocated while counting is on must also be freed
// while it is on (the memory pass builds and destroys its structure inside
// one CountingScope); otherwise the counters drift.
//
// Not thread-safe: the counters are plain integers. Google Benchmark runs
// these benchmarks on the main thread only.
#pragma once

#include <cstddef>

namespace chime_bench {

struct AllocStats {
  std::size_t live_bytes = 0;   // sum of malloc_usable_size + header, live blocks
  std::size_t live_blocks = 0;  // number of live blocks
};

// Snapshot of the counters (meaningful while a CountingScope is active).
AllocStats alloc_stats() noexcept;

// Turns counting on for its lifetime and resets the counters to zero.
class CountingScope {
 public:
  CountingScope() noexcept;
  ~CountingScope();
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
};

}  // namespace chime_bench
