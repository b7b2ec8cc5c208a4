// SPDX-License-Identifier: BSL-1.0
// The counters and the replacement allocation functions of alloc_counter.hpp
// (what is measured, and the two builds of this file: chime_alloc_counter
// counts in operator new/delete, chime_alloc_counter_malloc, built with
// CHIME_ALLOC_COUNTER_WRAP_MALLOC=1, in the wrapped malloc family).
#include "alloc_counter.hpp"

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

#ifndef CHIME_ALLOC_COUNTER_WRAP_MALLOC
#define CHIME_ALLOC_COUNTER_WRAP_MALLOC 0
#endif

namespace chime_alloc {
namespace {

// glibc keeps one size word in front of every chunk; malloc_usable_size does
// not include it.
constexpr std::size_t kChunkHeader = sizeof(std::size_t);

// Both switches in one word, so that an allocation reads one.
constexpr unsigned kCounting = 1;     // a CountScope is alive
constexpr unsigned kOutOfMemory = 2;  // an OutOfMemoryScope is alive
constexpr unsigned kOthersOnly = 4;   // ... made with Threads::others
std::atomic<unsigned> g_switches{0};
// The thread that made an OutOfMemoryScope with Threads::others.
thread_local bool t_spared = false;

std::atomic<std::size_t> g_allocations{0};
std::atomic<std::size_t> g_live_bytes{0};
std::atomic<std::size_t> g_live_blocks{0};
std::atomic<std::size_t> g_big_allocations{0};

// (A) Relaxed: see alloc_counter.hpp, "Memory ordering"; pairs with the scopes' (B).
unsigned switches() noexcept { return g_switches.load(std::memory_order_relaxed); }

// Every counter is relaxed: read after the counted threads were joined or synchronized with.
void note_alloc(void* p, std::size_t n, unsigned s) noexcept {
  if (n >= kBigAllocation) g_big_allocations.fetch_add(1, std::memory_order_relaxed);
  if ((s & kCounting) != 0) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    g_live_bytes.fetch_add(malloc_usable_size(p) + kChunkHeader, std::memory_order_relaxed);
    g_live_blocks.fetch_add(1, std::memory_order_relaxed);
  }
}

// The footprint a block counted while it lived; 0 for null or when not counting.
std::size_t footprint_if_counting(void* p) noexcept {
  return p != nullptr && (switches() & kCounting) != 0 ? malloc_usable_size(p) + kChunkHeader : 0;
}

void note_free(std::size_t footprint) noexcept {
  if (footprint != 0) {
    g_live_bytes.fetch_sub(footprint, std::memory_order_relaxed);
    g_live_blocks.fetch_sub(1, std::memory_order_relaxed);
  }
}

// Runs allocate() (null on failure) unless out of memory, and counts the block.
template <class Allocate>
void* counted(std::size_t n, Allocate allocate) noexcept {
  const unsigned s = switches();
  if ((s & kOutOfMemory) != 0 && ((s & kOthersOnly) == 0 || !t_spared)) return nullptr;
  void* p = allocate();
  if (p != nullptr) note_alloc(p, n, s);
  return p;
}

std::size_t round_up(std::size_t n, std::size_t a) noexcept { return n == 0 ? a : (n + a - 1) / a * a; }

}  // namespace

CountScope::CountScope(Frees frees) noexcept : frees_(frees) {
  g_allocations.store(0, std::memory_order_relaxed);
  g_live_bytes.store(0, std::memory_order_relaxed);
  g_live_blocks.store(0, std::memory_order_relaxed);
  // (B) Pairs with (A); the resets above are ordered before every increment counted under this switch.
  if ((g_switches.fetch_or(kCounting) & kCounting) != 0) {
    std::fprintf(stderr, "alloc_counter: a CountScope started while another was alive\n");
    std::abort();
  }
}

CountScope::~CountScope() {
  g_switches.fetch_and(~kCounting);  // (B)
  const AllocStats s = stats();
  if (frees_ == Frees::balanced && s.live_blocks != 0) {
    std::fprintf(stderr,
                 "alloc_counter: %zu blocks (%zu bytes) allocated while counting were not freed while counting\n",
                 s.live_blocks, s.live_bytes);
    std::abort();
  }
}

std::size_t CountScope::count() const noexcept { return g_allocations.load(std::memory_order_relaxed); }

AllocStats CountScope::stats() const noexcept {
  return AllocStats{g_allocations.load(std::memory_order_relaxed), g_live_bytes.load(std::memory_order_relaxed),
                    g_live_blocks.load(std::memory_order_relaxed)};
}

OutOfMemoryScope::OutOfMemoryScope(Threads threads) noexcept {
  t_spared = threads == Threads::others;
  g_switches.fetch_or(kOutOfMemory | (threads == Threads::others ? kOthersOnly : 0));  // (B)
}
OutOfMemoryScope::~OutOfMemoryScope() {
  g_switches.fetch_and(~(kOutOfMemory | kOthersOnly));  // (B)
  t_spared = false;
}

std::size_t big_allocations() noexcept { return g_big_allocations.load(std::memory_order_relaxed); }

}  // namespace chime_alloc

namespace {

using chime_alloc::counted;
using chime_alloc::footprint_if_counting;
using chime_alloc::note_free;
using chime_alloc::round_up;

#if CHIME_ALLOC_COUNTER_WRAP_MALLOC
// operator new calls malloc, which the linker sends to __wrap_malloc below:
// counted there, once.
void* new_block(std::size_t n) noexcept { return std::malloc(n == 0 ? 1 : n); }
void* new_aligned_block(std::size_t n, std::size_t a) noexcept { return std::aligned_alloc(a, round_up(n, a)); }
void delete_block(void* p) noexcept { std::free(p); }
#else
void* new_block(std::size_t n) noexcept {
  return counted(n, [n] { return std::malloc(n == 0 ? 1 : n); });
}
void* new_aligned_block(std::size_t n, std::size_t a) noexcept {
  return counted(n, [n, a] { return std::aligned_alloc(a, round_up(n, a)); });
}
void delete_block(void* p) noexcept {
  note_free(footprint_if_counting(p));
  std::free(p);
}
#endif

// Out of line so that GCC does not pair the malloc inside operator new with this free and warn.
[[gnu::noinline]] void release(void* p) noexcept { delete_block(p); }

void* aligned(std::size_t n, std::align_val_t al) noexcept {
  return new_aligned_block(n, static_cast<std::size_t>(al));
}

}  // namespace

#if CHIME_ALLOC_COUNTER_WRAP_MALLOC
extern "C" {
void* __real_malloc(std::size_t n);
void* __real_calloc(std::size_t n, std::size_t size);
void* __real_realloc(void* p, std::size_t n);
void* __real_aligned_alloc(std::size_t alignment, std::size_t n);
int __real_posix_memalign(void** p, std::size_t alignment, std::size_t n);
void __real_free(void* p);

void* __wrap_malloc(std::size_t n) {
  return counted(n, [n] { return __real_malloc(n); });
}
void* __wrap_calloc(std::size_t n, std::size_t size) {
  return counted(n * size, [n, size] { return __real_calloc(n, size); });
}
void* __wrap_realloc(void* p, std::size_t n) {
  const std::size_t old = footprint_if_counting(p);
  bool called = false;
  void* q = counted(n, [&] {
    called = true;
    return __real_realloc(p, n);
  });
  if (called && (q != nullptr || n == 0)) note_free(old);  // moved, resized, or freed by realloc(p, 0)
  return q;
}
void* __wrap_aligned_alloc(std::size_t alignment, std::size_t n) {
  return counted(n, [alignment, n] { return __real_aligned_alloc(alignment, n); });
}
int __wrap_posix_memalign(void** p, std::size_t alignment, std::size_t n) {
  int rc = ENOMEM;
  counted(n, [&] {
    rc = __real_posix_memalign(p, alignment, n);
    return rc == 0 ? *p : nullptr;
  });
  return rc;
}
void __wrap_free(void* p) {
  note_free(footprint_if_counting(p));
  __real_free(p);
}
}
#endif

void* operator new(std::size_t n) {
  if (void* p = new_block(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = new_block(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return new_block(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return new_block(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  if (void* p = aligned(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  if (void* p = aligned(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept { return aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept { return aligned(n, al); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
