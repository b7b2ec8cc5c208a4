// SPDX-License-Identifier: BSL-1.0
// runtime/shard_seam.hpp: what other threads touch of one shard.
//
// What this is: the part of a WheelThread (wheel_thread.hpp) that is read or
// written by threads other than the shard's wheel thread: producers,
// workers and lanes, flush / drain / shutdown / close_lane /
// check_invariants, stats(). Each WheelThread holds one as its public
// member `seam`; everything else of the shard is its wheel thread's alone.
// Each field says who writes it, who reads it, and in what order. The other
// roles (producers, runners, lanes, the poster) reach a shard only through
// its seam (shards.hpp), and include this header, not wheel_thread.hpp.
#pragma once

#include <atomic>
#include <cstdint>

#include "command_queue.hpp"
#include "runtime_stats.hpp"
#include "wake_signal.hpp"

namespace chime::detail {

class WheelThread;
struct LaneCore;

struct ShardSeam {
  ShardSeam(std::uint32_t shard_serial, unsigned shard_index, WheelThread& owner)
      : serial(shard_serial), index(shard_index), owner_(owner) {}
  ShardSeam(const ShardSeam&) = delete;
  ShardSeam& operator=(const ShardSeam&) = delete;

  // The calling thread is this shard's wheel thread (or, simulated, the
  // thread that runs the passes). wheel_thread.cpp.
  bool on_wheel_thread() const noexcept;
  // On this shard's wheel thread (on_wheel_thread()): closes `lane` here, as
  // a close_lane request would (WheelThread::close_lane_on_wheel); a
  // callback on the wheel thread cannot wait for a request it would serve.
  // wheel_thread.cpp.
  void close_lane_here(LaneCore* lane) const;
  // True once this shard's passes have been out of memory for
  // kOutOfMemoryTimeout of a wait that began at `waiting_since` (steady ns):
  // a flag left from before the wait counts only from its start.
  // wheel_thread.cpp.
  bool out_of_memory_too_long(std::int64_t waiting_since) const noexcept;

  // Producers (and workers and lanes re-arming, and flush / drain /
  // shutdown / close_lane / check_invariants) push; only this shard's wheel
  // thread pops. Release / acquire through the queue (command_queue.hpp).
  CommandQueue commands;
  // Every poster wakes it; the wheel thread prepares and waits (wake_signal.hpp).
  WakeSignal wake;
  // While the wheel thread sleeps: the start of the interval of its earliest
  // alarm (its wake-up time minus one precision). A due time before it needs
  // the wheel earlier. INT64_MIN while awake (or once a producer has taken
  // the wake: only one producer wakes it per sleep); INT64_MAX: no alarm.
  // Relaxed, with the (P1)/(P2) seq_cst fences (command_poster.cpp,
  // wake_after_post).
  std::atomic<std::int64_t> wake_if_due_before_ns{INT64_MIN};
  // A number no other shard of any Runtime in the process had (from 1, as
  // the shards are made): the key under which each posting thread counts
  // its posts to this shard (command_poster.cpp, PostPacer).
  const std::uint32_t serial;
  // Its place in the runtime's shards (TimerSlot::shard, Dispatch::shard,
  // a Lane's and a Producer's shard). Fixed.
  const unsigned index;
  // Posts to this queue counted towards the next count-wake, kPostsPerLook
  // at a time, at each look (command_poster.cpp, wake_after_fence). Relaxed:
  // it only paces wake-ups; the command's visibility to the wheel thread is
  // the (P1)/(P2) fence pair's, not this count's.
  std::atomic<std::uint32_t> posts_toward_wake{0};
  // Runs of this shard finished (or skipped): workers and lanes add once per
  // batch and shard (release), so do the wheel thread's inline runs and
  // close_lane's drain; the wheel thread acquires it (flush marks). The
  // (F-W) fences pair it with waits_for_workers.
  std::atomic<std::uint64_t> completed{0};
  // The wheel thread stores it before it sleeps; workers and lanes read it
  // (Runner::count_completed). Relaxed, with the (F-W) fences.
  std::atomic<bool> waits_for_workers{false};
  // The wheel thread stores it (release) as it returns; a blocked flush /
  // drain / close acquires it and stops waiting (Completion::wait).
  std::atomic<bool> exited{false};
  // Since when (steady clock, ns) this shard's passes have been out of
  // memory (wheel_thread.cpp, "Out of memory"); 0: they are not. Written by
  // the wheel thread, read by a waiting flush or drain (out_of_memory_too_long).
  // Relaxed: a hint to give up waiting; the request's own state is under
  // its Completion's mutex.
  std::atomic<std::int64_t> out_of_memory_since_ns{0};
  // Written by the wheel thread only, read by stats(); relaxed.
  std::atomic<std::uint64_t> wakeups{0};
  std::atomic<std::uint64_t> zombie_sweeps{0};
  // The longest pass so far (steady clock, from its start to its end; a
  // sleep is not a pass), and the most alarms one pass's advance re-filed
  // between levels (TimingWheel::moved_by_last_advance): what "no pass does
  // unbounded work" is measured by (ShardStats). Written by the wheel thread
  // only (each a running max), read by stats(); relaxed: figures, not
  // synchronization.
  std::atomic<std::int64_t> longest_pass_ns{0};
  std::atomic<std::uint64_t> most_refiled_in_a_pass{0};
  // C1/C2 cancels of this shard's filed timers (producer_ops.cpp): the
  // zombies its wheel thread reclaims lazily, against WheelThreadState::
  // reclaimed (sweep_zombies_if_many). Striped per thread, relaxed.
  StripedCount lazy_cancels;

 private:
  WheelThread& owner_;  // the shard this is the seam of: on_wheel_thread, close_lane_here
};

}  // namespace chime::detail
