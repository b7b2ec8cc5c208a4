// Replacement global operator new/delete for chime_bench; see alloc_counter.hpp.
#include "alloc_counter.hpp"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <new>

namespace chime_bench {
namespace {

// glibc keeps one size word in front of every chunk; malloc_usable_size does
// not include it.
constexpr std::size_t kChunkHeader = sizeof(std::size_t);

bool g_counting = false;
AllocStats g_stats;

inline void note_alloc(void* p) noexcept {
  if (g_counting && p != nullptr) {
    g_stats.live_bytes += malloc_usable_size(p) + kChunkHeader;
    ++g_stats.live_blocks;
  }
}

inline void note_free(void* p) noexcept {
  if (g_counting && p != nullptr) {
    g_stats.live_bytes -= malloc_usable_size(p) + kChunkHeader;
    --g_stats.live_blocks;
  }
}

void* alloc_or_null(std::size_t n) noexcept {
  void* p = std::malloc(n == 0 ? 1 : n);
  note_alloc(p);
  return p;
}

void* aligned_alloc_or_null(std::size_t n, std::align_val_t al) noexcept {
  const auto a = static_cast<std::size_t>(al);
  const std::size_t rounded = (n == 0 ? a : (n + a - 1) / a * a);
  void* p = std::aligned_alloc(a, rounded);
  note_alloc(p);
  return p;
}

void release(void* p) noexcept {
  note_free(p);
  std::free(p);
}

}  // namespace

AllocStats alloc_stats() noexcept { return g_stats; }

CountingScope::CountingScope() noexcept {
  g_stats = AllocStats{};
  g_counting = true;
}

CountingScope::~CountingScope() {
  if (g_stats.live_blocks != 0) {
    std::fprintf(stderr, "alloc_counter: %zu blocks (%zu bytes) allocated while counting were not freed while counting\n",
                 g_stats.live_blocks, g_stats.live_bytes);
    std::abort();
  }
  g_counting = false;
}

}  // namespace chime_bench

using chime_bench::aligned_alloc_or_null;
using chime_bench::alloc_or_null;
using chime_bench::release;

void* operator new(std::size_t n) {
  if (void* p = alloc_or_null(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = alloc_or_null(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return alloc_or_null(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return alloc_or_null(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  if (void* p = aligned_alloc_or_null(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  if (void* p = aligned_alloc_or_null(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return aligned_alloc_or_null(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return aligned_alloc_or_null(n, al);
}

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
