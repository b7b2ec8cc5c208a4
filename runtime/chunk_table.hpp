// SPDX-License-Identifier: BSL-1.0
// runtime/chunk_table.hpp: a fixed-length table of chunk pointers that costs
// no resident memory until its entries are written.
//
// The slab, its side records and the free list each index up to 65,536 chunks (512 KiB of
// pointers), of which a runtime uses a few. The table is an anonymous
// private mapping: the kernel fills it with zeros and gives a page memory
// only when an entry on it is first written (a read maps the shared zero
// page). Each entry is accessed through std::atomic_ref: a pointer is an
// implicit-lifetime type, so the zeroed bytes are null pointers without
// constructing anything (std::atomic<T*>[] would be constructed, and so
// written, entry by entry: 1 MiB resident in every runtime).
//
// The owner keeps the protocol: an entry goes from null to a chunk once,
// under the owner's mutex, by a release store; readers load it with acquire,
// so the chunk's contents are visible before its pointer (the (A) and (C)
// pairs in timer_slab.hpp and free_slot_stack.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <new>

#include <sys/mman.h>

namespace chime::detail {

template <class T>
class ChunkTable {
  static_assert(std::atomic_ref<T*>::is_always_lock_free);

 public:
  // n null entries. Throws std::bad_alloc if the mapping fails.
  explicit ChunkTable(std::size_t n) : bytes_(n * sizeof(T*)), entry_(map(bytes_)) {}
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;
  ~ChunkTable() { munmap(entry_, bytes_); }

  T* load(std::size_t i, std::memory_order order) const noexcept { return std::atomic_ref<T*>(entry_[i]).load(order); }
  void store(std::size_t i, T* chunk, std::memory_order order) noexcept {
    std::atomic_ref<T*>(entry_[i]).store(chunk, order);
  }

 private:
  // A page-aligned mapping, so every entry has atomic_ref's alignment.
  static T** map(std::size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T**>(p);
  }

  std::size_t bytes_;
  T** entry_;
};

}  // namespace chime::detail
