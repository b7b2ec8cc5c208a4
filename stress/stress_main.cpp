// SPDX-License-Identifier: BSL-1.0
// main() of chime_stress_tests: GoogleTest plus a --seed=N option (see stress_seed.hpp).
#include "stress_seed.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace chime_stress {
namespace {
std::uint64_t g_seed = 0;
}  // namespace

std::uint64_t seed() { return g_seed; }

void print_seed() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[ stress   ] %s.%s: seed %llu (replay: --seed=%llu --gtest_filter=%s.%s)\n",
              info != nullptr ? info->test_suite_name() : "?", info != nullptr ? info->name() : "?",
              static_cast<unsigned long long>(g_seed), static_cast<unsigned long long>(g_seed),
              info != nullptr ? info->test_suite_name() : "*", info != nullptr ? info->name() : "*");
  std::fflush(stdout);
}

}  // namespace chime_stress

int main(int argc, char** argv) {
  bool have_seed = false;
  if (const char* env = std::getenv("CHIME_STRESS_SEED"); env != nullptr && *env != '\0') {
    chime_stress::g_seed = std::strtoull(env, nullptr, 10);
    have_seed = true;
  }
  // Take --seed=N out of argv before GoogleTest sees it.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--seed=", 7) == 0) {
      chime_stress::g_seed = std::strtoull(argv[i] + 7, nullptr, 10);
      have_seed = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (!have_seed) chime_stress::g_seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
