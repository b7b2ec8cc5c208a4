// SPDX-License-Identifier: BSL-1.0
// The seed of a stress run: given with --seed=N (or CHIME_STRESS_SEED=N),
// otherwise drawn at random once per process. Every stress test prints it, so
// any failure can be replayed.
#pragma once

#include <cstdint>

namespace chime_stress {

// The seed of this process's run.
std::uint64_t seed();

// Prints "seed N (replay: --seed=N)" for the current test.
void print_seed();

}  // namespace chime_stress
