// SPDX-License-Identifier: BSL-1.0
// alloc_counter: the one allocation counter of tests/ and bench/. It counts the
// heap allocations of the whole binary it is linked into, on every thread, while
// a CountScope is alive, and can make every allocation fail (OutOfMemoryScope).
//
// How it counts. alloc_counter.cpp replaces the global operator new/delete
// (every form) of the binary, so every operator new in the process resolves to
// it, the standard library's included; outside a scope they are plain
// malloc/free. alloc_counter.cmake builds that one file twice:
//   chime_alloc_counter         counts in operator new/delete. chime_runtime_tests
//                               (runtime_allocation_test.cpp: no heap allocation
//                               per timer in steady state; out of memory).
//   chime_alloc_counter_malloc  counts one level lower, in malloc, calloc,
//                               realloc, aligned_alloc, posix_memalign and free,
//                               which the linker wraps (--wrap, in the target's
//                               link options): code that calls malloc itself
//                               (moodycamel's queue allocates its blocks with
//                               std::malloc) is counted too, and operator new,
//                               which calls malloc, once. Only the calls made by
//                               the binary's own objects are wrapped, not those a
//                               shared library makes inside itself. chime_bench
//                               (wheel_bench.cpp, runtime_bench.cpp).
// Each binary links one of the two, and no other file of it replaces an
// allocation function.
//
// What it measures, while a CountScope is alive (all threads):
//   count()              allocation calls: runtime_bench.cpp's allocs_per_timer,
//                        and zero in the tests' steady state.
//   stats().live_bytes   the heap footprint of the blocks allocated and not yet
//                        freed, as glibc sees it: for each block,
//                        malloc_usable_size() plus one 8-byte chunk header. That
//                        is what a process actually pays for a block (a 40-byte
//                        std::set node costs 48 bytes), so a structure made of
//                        many small nodes is not flattered against one made of a
//                        few big arrays (wheel_bench.cpp's bytes_per_alarm).
//   stats().live_blocks  the number of those blocks.
// A block freed while counting is subtracted whether or not it was allocated
// while counting, so live_bytes means something only when the measured
// structure is built and destroyed inside one scope (wheel_bench.cpp's
// untimed "memory pass": construct, add N, read live_bytes, destroy);
// Frees::balanced makes the scope's end abort the binary if blocks allocated
// while counting were not freed while counting (the counters drifted).
// And always, scope or not:
//   big_allocations()    allocations of at least kBigAllocation bytes: a
//                        growing slab.
//   OutOfMemoryScope     every allocation through the replaced functions fails
//                        (operator new throws std::bad_alloc, malloc returns
//                        null) while one is alive; with Threads::others, on
//                        every thread but the one that made it.
//
// Not guaranteed: allocations a shared library makes with its own malloc calls
// (not its operator new calls) are not seen by either build; scopes do not
// nest (a second one while one is alive aborts).
//
// Cost outside a scope: one relaxed load and one compare per allocation (a
// free: one relaxed load), so benchmarks' timed phases run with counting off
// and pay nothing else.
//
// Memory ordering: the switches are read relaxed (alloc_counter.cpp, (A));
// an allocation is counted when its thread has synchronized with the scope's
// constructor (a thread start, a queue push it pops, a benchmark's gate), and
// counts are read after the counted threads were joined or synchronized with
// (flush(), sync()), which orders the relaxed increments before the read.
#pragma once

#include <cstddef>

namespace chime_alloc {

// Allocations of at least this size (a chunk of 4096 timer slots is ~450 KiB;
// queue blocks and tasks are far smaller) are big_allocations().
inline constexpr std::size_t kBigAllocation = 256 * 1024;

// What a CountScope's end checks about the blocks freed inside it.
enum class Frees {
  any,       // nothing: frees of older blocks are expected (a runtime running)
  balanced,  // every block allocated while counting was freed while counting; abort otherwise
};

struct AllocStats {
  std::size_t allocations = 0;  // allocation calls
  std::size_t live_bytes = 0;   // sum of malloc_usable_size + header over the live blocks
  std::size_t live_blocks = 0;  // number of live blocks
};

// Counts the allocations made on any thread during its lifetime; resets the
// counters to zero when it starts. One at a time.
class CountScope {
 public:
  // Any thread. Never allocates. Aborts if another CountScope is alive.
  explicit CountScope(Frees frees = Frees::any) noexcept;
  // Same thread as the constructor. Never allocates. With Frees::balanced, aborts if live_blocks != 0.
  ~CountScope();
  CountScope(const CountScope&) = delete;
  CountScope& operator=(const CountScope&) = delete;

  // Allocation calls so far. Any thread. Never allocates.
  std::size_t count() const noexcept;
  // The counters so far. Any thread. Never allocates.
  AllocStats stats() const noexcept;

 private:
  Frees frees_;
};

// While alive, every allocation through the replaced functions fails.
class OutOfMemoryScope {
 public:
  // Whose allocations fail: every thread's, or every thread's but the one
  // that made the scope (a test that keeps scheduling while the runtime's
  // own threads run out of memory).
  enum class Threads { all, others };
  // Any thread. Never allocates.
  explicit OutOfMemoryScope(Threads threads = Threads::all) noexcept;
  // Same thread as the constructor. Never allocates.
  ~OutOfMemoryScope();
  OutOfMemoryScope(const OutOfMemoryScope&) = delete;
  OutOfMemoryScope& operator=(const OutOfMemoryScope&) = delete;
};

// Allocations of at least kBigAllocation bytes since the binary started, scope or not. Any thread. Never allocates.
std::size_t big_allocations() noexcept;

}  // namespace chime_alloc
