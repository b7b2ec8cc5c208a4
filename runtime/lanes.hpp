// SPDX-License-Identifier: BSL-1.0
// runtime/lanes.hpp: a runtime's lanes (chime::Lane): the registry of its
// LaneCores and what a lane's thread, a Lane's destruction and a flush on a
// lane's thread do with them.
//
// What this is: every LaneCore ever opened, owned for the runtime's life
// (slots and commands may name one after its Lane is gone; a closed one is
// reused), under its mutex; and the lane-side operations (lanes.cpp, which
// argues the races): open_lane (any thread); close_lane, which cancels a
// lane's pending and ready runs and gives it back (not concurrently with
// its run_ready); run_lane / wait_and_run on the lane's thread; a flush's
// wait that runs the calling thread's lanes. It holds references to the
// pieces of its runtime it needs (runtime_core.hpp owns them all).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "chime/clock.hpp"
#include "lane_core.hpp"
#include "lifecycle_flags.hpp"
#include "runner.hpp"
#include "runtime_config.hpp"
#include "shard_seam.hpp"
#include "shards.hpp"
#include "timer_counts.hpp"
#include "timer_slab.hpp"

namespace chime::detail {

struct FlushRequest;  // requests.hpp

// The lanes a thread runs (flush runs them while it waits): inline up to
// kInline, so a flush allocates nothing in the usual case.
struct ThreadLanes {
  static constexpr std::size_t kInline = 8;
  void add(LaneCore* l) {
    if (n_ < kInline) {
      inline_[n_] = l;
    } else {
      more_.push_back(l);
    }
    ++n_;
  }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  LaneCore* operator[](std::size_t i) const noexcept { return i < kInline ? inline_[i] : more_[i - kInline]; }

 private:
  LaneCore* inline_[kInline] = {};
  std::vector<LaneCore*> more_;
  std::size_t n_ = 0;
};

class Lanes {
 public:
  Lanes(const RuntimeConfig& config, TimerSlab& slab, const LifecycleFlags& lifecycle, Shards& shards, Runner& runner,
        const TimerCounts& counts) noexcept
      : config_(config), slab_(slab), lifecycle_(lifecycle), shards_(shards), runner_(runner), counts_(counts) {}
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // A fresh or reused LaneCore. Any thread.
  LaneCore* open_lane();
  // Cancels the lane's pending and ready runs and gives it back.
  void close_lane(LaneCore* lane);
  // On the lane's thread.
  std::size_t run_lane(LaneCore& lane, std::size_t max);
  std::size_t wait_and_run(LaneCore& lane, TimePoint deadline);
  // The lanes the calling thread runs (a flush runs them while it waits).
  ThreadLanes lanes_of_this_thread();
  // Runs the ready runs of these lanes (this thread's) that no other thread
  // has begun to run.
  void run_idle_lanes(const ThreadLanes& lanes);
  // A flush on a lane's thread waits for `shard` to serve `request` and runs
  // `lanes` meanwhile. False iff it gave up on a wheel thread out of memory
  // (abandoned the request).
  bool run_flush_on_lanes(FlushRequest& request, const ThreadLanes& lanes, const ShardSeam& shard,
                          std::int64_t waiting_since);
  // Every lane ever opened (shutdown waits for their batches in progress).
  std::vector<LaneCore*> all_lanes();

 private:
  const RuntimeConfig& config_;
  TimerSlab& slab_;
  const LifecycleFlags& lifecycle_;  // stopped, shutdown_done (lifecycle_flags.hpp)
  Shards& shards_;
  Runner& runner_;
  const TimerCounts& counts_;
  // Every LaneCore ever opened; in_use and owner are written under it.
  std::mutex mutex_;
  std::vector<std::unique_ptr<LaneCore>> lanes_;
};

}  // namespace chime::detail
