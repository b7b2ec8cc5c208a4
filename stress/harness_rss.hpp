// SPDX-License-Identifier: BSL-1.0
// stress/harness_rss.hpp: how much memory chime-stress holds, as the kernel sees it.
//
// What this is: readers of the process's resident set size. Linux only
// (/proc); each returns 0 when the value cannot be read. Any thread; they
// read files, so they are for a sampling loop, never a hot path.
//
// - current_rss_bytes(): resident now (/proc/self/statm, field 2, in pages).
// - peak_rss_bytes(): the high-water mark (/proc/self/status VmHWM; falls
//   back to getrusage's ru_maxrss, which Linux reports in KiB).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace chime_stress {

inline std::uint64_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

inline std::uint64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%llu", &kib) == 1) {
        found = true;
        break;
      }
    }
    std::fclose(f);
    if (found) return static_cast<std::uint64_t>(kib) * 1024;
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace chime_stress
