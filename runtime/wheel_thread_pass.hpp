// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_pass.hpp: what the files of a shard's pass share:
// its per-pass budgets and the helpers that fill its lists without
// allocating (wheel_thread.cpp has the pass; wheel_thread_apply.cpp,
// wheel_thread_fire.cpp, wheel_thread_manual.cpp, wheel_thread_sleep.cpp
// and wheel_thread_lane_close.cpp its steps). Private to those files.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

#include <concurrentqueue/concurrentqueue.h>

#include "dispatch.hpp"
#include "tuning.hpp"

namespace chime::detail::pass {

// At most this many commands per pass, so that under a flood of commands the
// wheel still advances and dispatches between batches (a pass of 8192
// commands takes well under 1 ms) instead of starving the timers.
inline constexpr std::size_t kMaxCommandsPerPass = 8192;
// At most this many alarms fired by one advance (tuning.hpp,
// CHIME_RUNS_PER_PASS; record_fired): a burst due at once leaves the wheel a
// batch a pass, and the commands posted meanwhile are applied between the
// batches, as Erlang yields every 100 timeouts. A pass claims at most this
// many wheel alarms plus the timers its own commands made due now (at most
// kMaxCommandsPerPass).
inline constexpr std::size_t kRunsPerPass = CHIME_RUNS_PER_PASS;
// Zombies (cancelled timers still filed) are swept in one pass over the
// wheel when they exceed a quarter of the filed timers, and at least this
// many (tuning.hpp, CHIME_ZOMBIE_SWEEP_MIN).
inline constexpr std::uint64_t kMinZombiesForSweep = CHIME_ZOMBIE_SWEEP_MIN;
// While commands keep arriving, the wheel thread sleeps at most this long
// (sleep(), "lingering"), so producers need not wake it for every new timer
// due before its next alarm; timers due before the linger ends still wake
// it, so lingering adds no lateness.
inline constexpr std::int64_t kLingerNs = 1'000'000;
// Alarms a pass moves down the wheel ahead of time after its hand-off
// (TimingWheel::cascade_ahead; "No pass does unbounded work" above): the
// next span of every level is moved during the span before it, instead of
// all at once when the wheel enters it (at 600k timers/s a level-0 block
// was 19 ms in one pass, docs/benchmarks.md, "Where the lateness tail
// waits"). 1,024 moves take about 50-100 us.
inline constexpr std::size_t kCascadeAheadPerPass = 1024;
// Fired alarms an advance may re-file at a later due (touched timers) before
// it is cut short: the same budget as the level moves, so a batch touched
// later all at once is re-filed over several passes, which come at once
// (sleep: advance_cut_short), not in one.
inline constexpr std::size_t kRefilesPerAdvance = kCascadeAheadPerPass;
// How far ahead the wheel thread asks for the slot lines it will act on
// (apply_commands, advance_and_dispatch): a few misses in flight at once.
inline constexpr std::size_t kPrefetchAhead = 8;
// Room for `extra` more elements in `v` (growing geometrically), so that the
// pushes that follow never allocate. False out of memory, `v` unchanged.
template <class V>
inline bool make_room(V& v, std::size_t extra) noexcept {
  const std::size_t need = v.size() + extra;
  if (v.capacity() >= need) return true;
  try {
    v.reserve(std::max(need, 2 * v.capacity()));
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}
// Capacity for `n` elements whatever `v` holds now (a list about to be cleared and refilled).
template <class V>
inline bool make_capacity(V& v, std::size_t n) noexcept {
  return v.capacity() >= n || make_room(v, n - v.size());
}
template <class V>
inline std::size_t spare(const V& v) noexcept {
  return v.capacity() - v.size();
}
// Pushes `x`; false out of memory, `v` unchanged.
template <class V, class T>
inline bool try_push_back(V& v, const T& x) noexcept {
  try {
    v.push_back(x);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}
// Enqueues `n` runs through a producer token, in pieces that each end at a
// block boundary of the token's sub-queue (`tail`: the items enqueued
// through the token so far, which starts with it at 0). Returns how many
// went in: all, or a prefix (out of memory). Why in pieces: moodycamel's
// bulk enqueue through a token is all or nothing, but one that fails (out
// of memory) after taking two or more new blocks leaves the sub-queue
// corrupt (libconcurrentqueue-dev 1.0.3: a later dequeue reads a null block
// or trips Block::set_many_empty's assertion; reproduced with the queue
// alone), while one that needs at most one new block fails cleanly. The
// pieces cost one enqueue call per 32 runs.
template <class Queue>
inline std::size_t enqueue_in_blocks(Queue& queue, moodycamel::ProducerToken& token, std::uint64_t& tail,
                                     const Dispatch* runs, std::size_t n) {
  constexpr std::size_t kBlock = moodycamel::ConcurrentQueueDefaultTraits::BLOCK_SIZE;
  std::size_t done = 0;
  while (done < n) {
    const std::size_t k = std::min<std::size_t>(kBlock - tail % kBlock, n - done);
    if (!queue.enqueue_bulk(token, runs + done, k)) [[unlikely]]
      break;
    done += k;
    tail += k;
  }
  return done;
}
// Thrown from an advance's handle_fired to cut the advance short: the fired
// list is at fired_limit and cannot grow (TimingWheel::advance_clock keeps
// every alarm not yet fired).
struct AdvanceCutShort {};

}  // namespace chime::detail::pass
