// SPDX-License-Identifier: BSL-1.0
// runtime/tuning.hpp: the runtime's compile-time tuning knobs, in one place.
//
// What this is: every CHIME_* macro a build may set to change a size or a
// threshold of the runtime, each with its default, why it is that, and which
// build overrides it. chime's own library (and every user's build) keeps the
// defaults. Two builds set them:
// - the fuzz targets' copy of the runtime sources (fuzz/CMakeLists.txt,
//   chime_fuzz_runtime_definitions): a fuzz input builds a runtime, so it
//   must cost kilobytes, not megabytes, and small inputs must reach the
//   paths that large counts trigger;
// - the generation-wrap stress build (stress/CMakeLists.txt,
//   chime_runtime_genwrap): CHIME_INITIAL_GENERATION.
// The constants the code reads are defined beside their users from these
// (kMinZombiesForSweep, kScratchCapacity, kInitialCapacity, kStripes, ...).
#pragma once

// The generation a fresh slot starts from (timer_slab.hpp). Production
// builds start at 0 (first timer: 1). Test seam: the generation-wrap stress
// build sets it to 0xFFFFFFF0u, so that generations wrap (skipping 0) within
// a short run.
#ifndef CHIME_INITIAL_GENERATION
#define CHIME_INITIAL_GENERATION 0u
#endif

// The slab's geometry (timer_slab.hpp, free_slot_stack.hpp): slots, and the
// free list's batch containers, come in chunks of 2^CHIME_SLAB_CHUNK_SHIFT,
// up to 2^CHIME_SLAB_CAPACITY_SHIFT slots. The fuzz build sets them to
// chunks of 64 and 2^16 slots: a fuzz input builds a runtime, and the
// default geometry's chunk-pointer arrays and first chunks (2 MB, every page
// written) were most of an input's time.
#ifndef CHIME_SLAB_CHUNK_SHIFT
#define CHIME_SLAB_CHUNK_SHIFT 12
#endif
#ifndef CHIME_SLAB_CAPACITY_SHIFT
#define CHIME_SLAB_CAPACITY_SHIFT 28
#endif
static_assert(CHIME_SLAB_CHUNK_SHIFT >= 5 && CHIME_SLAB_CHUNK_SHIFT < CHIME_SLAB_CAPACITY_SHIFT &&
                  CHIME_SLAB_CAPACITY_SHIFT <= 28,
              "the slab's geometry: a chunk holds a batch (32), and at most 2^28 slots");

// The commands moodycamel's command queue (command_queue.hpp) has blocks
// for from the start (24 bytes each, 32 to a block), written at
// construction. A burst beyond it allocates more blocks once; emptied blocks
// are reused, so steady state allocates nothing either way. It was 64 Ki
// commands: 1.5 MiB written by every Runtime's constructor, half of a fresh
// runtime's resident memory (and of the runtime fuzz target's page faults
// per input), for bursts a few producers never reach between two passes (a
// producer wakes the wheel after 1,024 posts). The fuzz build starts with 64.
#ifndef CHIME_COMMAND_QUEUE_INITIAL_CAPACITY
#define CHIME_COMMAND_QUEUE_INITIAL_CAPACITY (4 * 1024)
#endif

// What a wheel thread's scratch lists reserve up front
// (wheel_thread_state.hpp) and keep between passes: a burst of overdue or
// fired timers within this size never allocates, however the passes happen
// to fall. The fuzz build sets it to 64: it builds a runtime per input.
#ifndef CHIME_WHEEL_SCRATCH_CAPACITY
#define CHIME_WHEEL_SCRATCH_CAPACITY 4096
#endif

// The most alarms one advance of a shard fires (wheel_thread_pass.hpp,
// kRunsPerPass): the rest of what is due waits in the wheel, Pending, for
// the next pass, which comes at once. The fuzz build sets it to 64, so that an input's burst
// spans passes.
#ifndef CHIME_RUNS_PER_PASS
#define CHIME_RUNS_PER_PASS 4096
#endif

// Zombies (cancelled timers still filed) are swept in one pass over the
// wheel (wheel_thread_fire.cpp) when they exceed a quarter of the filed timers,
// and at least this many (a sweep of a small wheel would cost more than the
// slots it frees). The fuzz build sets it to 2, so that inputs of a few
// dozen timers reach the sweep.
#ifndef CHIME_ZOMBIE_SWEEP_MIN
#define CHIME_ZOMBIE_SWEEP_MIN 1024
#endif

// The stripes of the statistics counters and histograms
// (runtime_stats.hpp): one per thread for the first CHIME_STATS_STRIPES - 1
// threads, the last shared. The fuzz build has 2 (one owned, one shared): it
// builds a runtime, and so its zeroed histograms, per input.
#ifndef CHIME_STATS_STRIPES
#define CHIME_STATS_STRIPES 16
#endif
static_assert(CHIME_STATS_STRIPES >= 2 && CHIME_STATS_STRIPES <= 32,
              "a stripe per bit of free_stripes, and a shared one");
