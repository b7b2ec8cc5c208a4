// SPDX-License-Identifier: BSL-1.0
// ChunkTable (runtime/chunk_table.hpp), the slab's and the free list's tables
// of chunk pointers: every entry starts null, an entry holds the chunk
// stored in it, and the table costs resident memory only on the pages
// whose entries were written.
#include "../runtime/chunk_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <fstream>
#include <string>

namespace {

using chime::detail::ChunkTable;

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long kib = -1;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> kib;
      break;
    }
  }
  return kib;
}

TEST(ChunkTable, every_entry_starts_null_and_holds_the_chunk_stored_in_it) {
  constexpr std::size_t n = 65536;  // the slab's table
  ChunkTable<int> table(n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(table.load(i, std::memory_order_acquire), nullptr) << "entry " << i;
  int chunks[3] = {};
  table.store(0, &chunks[0], std::memory_order_release);
  table.store(4096, &chunks[1], std::memory_order_release);
  table.store(n - 1, &chunks[2], std::memory_order_release);
  EXPECT_EQ(table.load(0, std::memory_order_acquire), &chunks[0]);
  EXPECT_EQ(table.load(4096, std::memory_order_acquire), &chunks[1]);
  EXPECT_EQ(table.load(n - 1, std::memory_order_acquire), &chunks[2]);
  EXPECT_EQ(table.load(1, std::memory_order_acquire), nullptr);
  EXPECT_EQ(table.load(n - 2, std::memory_order_acquire), nullptr);
}

TEST(ChunkTable, a_table_is_resident_only_where_entries_were_written) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(CHIME_TEST_SANITIZED)
  GTEST_SKIP() << "a sanitizer's shadow memory moves the resident size this test reads";
#else
  // 64 MiB of entries: were they constructed (std::atomic<T*>[]), all of it would be resident.
  constexpr std::size_t n = std::size_t{1} << 23;
  const long before = resident_kib();
  ASSERT_GT(before, 0) << "no VmRSS in /proc/self/status";
  ChunkTable<int> table(n);
  int chunk = 0;
  for (std::size_t i = 0; i < n; i += n / 8) table.store(i, &chunk, std::memory_order_release);
  std::size_t found = 0;
  for (std::size_t i = 0; i < n; ++i) found += table.load(i, std::memory_order_acquire) != nullptr;
  EXPECT_EQ(found, 8u);
  const long grown = resident_kib() - before;
  // 8 written pages (32 KiB) and whatever else the process touched meanwhile: far below 64 MiB.
  EXPECT_LT(grown, 4096) << "a 64 MiB table with 8 entries written made " << grown << " KiB resident";
#endif
}

}  // namespace
