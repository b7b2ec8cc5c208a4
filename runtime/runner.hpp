// SPDX-License-Identifier: BSL-1.0
// runtime/runner.hpp: runs the timers the wheel threads claimed, and
// finishes them.
//
// What this is: the code every place that runs a claimed timer shares (a
// worker, a lane's thread, a wheel thread with workers = 0): start the run
// (B1) or skip it (C4, R4), call the task, count it, then finish the timer
// (F1-F4; a periodic's re-arm) and count the batch in its shards'
// seam.completed. It holds references to the pieces of its runtime it
// needs (runtime_core.hpp owns them all): the configuration, the slab, the
// counters and histograms, the shards (for their seams and re-arms) and
// the poster of a re-arm's command. runner.cpp argues the races.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "chime/runtime.hpp"
#include "command_poster.hpp"
#include "dispatch.hpp"
#include "runtime_config.hpp"
#include "runtime_stats.hpp"
#include "shard_seam.hpp"
#include "shards.hpp"
#include "timer_counts.hpp"
#include "timer_slab.hpp"
#include "worker_pool.hpp"

namespace chime::detail {

// The callback this thread runs, if any (Runner sets it around each run):
// its exception is reported as that run's. False outside a run.
bool report_to_running_callback(std::exception_ptr e) noexcept;

class Runner {
 public:
  // Where a batch runs: a periodic re-arm is filed directly on the wheel
  // thread, posted as a command elsewhere; a worker or a lane wakes the
  // wheel thread when a flush waits for runs.
  enum class Place { worker, wheel_thread, lane };

  // `shards` is filled after this is made, before any run.
  Runner(const RuntimeConfig& config, TimerSlab& slab, const TimerCounts& counts, const Shards& shards) noexcept
      : config_(config), slab_(slab), counts_(counts), shards_(shards), poster_(config.wake_on_post_count) {}
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // A worker thread's loop: runs batches from the pool's hand-off queue
  // until it takes its stop record.
  void worker_main(WorkerPool& pool);
  // Returns how many callbacks ran (the rest were cancelled before they
  // started). On the wheel thread (Place::wheel_thread), `rearmed_slots` gets
  // the slots of the periodic runs re-armed (F2, which set their filed
  // bit), for the wheel thread to file once the batch is done; it needs
  // room for `n` more (pushes may not allocate).
  std::size_t run_batch(const Dispatch* d, std::size_t n, RetiredSlots& retired, Place where,
                        std::vector<std::uint32_t>* rearmed_slots = nullptr);
  // (F-W) Runs of shard `k` finished (or skipped) off its wheel thread.
  void count_completed(unsigned k, std::uint64_t n);
  // A callback's exception caught somewhere other than around the task call
  // (a chime::Detached coroutine's body): counted and passed to on_error as
  // the run's. On the thread of the run.
  void report_callback_exception(TimerId id, std::exception_ptr e) const noexcept;
  // True iff the calling thread is running a callback of this runtime.
  bool in_callback() const noexcept;
  // The id of the run the calling thread is in (of this runtime), or {}.
  TimerId current_run() const noexcept;
  // Throws std::logic_error if the calling thread runs a callback of this
  // runtime: `what` (a blocking call) would wait for itself.
  void throw_if_in_callback(const char* what) const;

 private:
  bool run(const Dispatch& d, std::int64_t clock_now_ns, std::int64_t& steady_ns, RetiredSlots& retired, Place where,
           std::vector<std::uint32_t>* rearmed_slots);
  void end_run(TimerSlot& slot, const Dispatch& d, std::int64_t steady_end_ns, RetiredSlots& retired, Place where,
               std::vector<std::uint32_t>* rearmed_slots);
  // end_run's three ends, from the word `w` it read: F1; F3 (or F4);
  // F2 (or F4), with the next run's due.
  void end_one_shot(TimerSlot& slot, std::uint64_t w, const Dispatch& d, RetiredSlots& retired);
  void end_periodic_for_good(TimerSlot& slot, std::uint64_t w, const Dispatch& d, RetiredSlots& retired);
  void rearm(TimerSlot& slot, std::uint64_t w, const Dispatch& d, std::int64_t steady_end_ns, RetiredSlots& retired,
             Place where, std::vector<std::uint32_t>* rearmed_slots);
  std::int64_t next_due(const SlotExtra& extra, const Dispatch& d, std::int64_t steady_end_ns) const;
  // Counts a batch's runs in their shards' seam.completed (runs of one shard come in a row).
  void count_completed(const Dispatch* d, std::size_t n, bool on_wheel_thread);

  const RuntimeConfig& config_;
  TimerSlab& slab_;
  const TimerCounts& counts_;  // and the meters (lateness, run times) through it
  const Shards& shards_;
  const CommandPoster poster_;  // a periodic's re-arm
};

}  // namespace chime::detail
