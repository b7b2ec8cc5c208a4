// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread.hpp: one shard: a wheel thread, its wheel and its
// command queue (design.md, "Shards").
//
// What this is: the unit RuntimeOptions::shards multiplies. A WheelThread
// owns a timing wheel, the command queue producers post to, the overdue
// list, the wake-up signal and the pass loop (wheel_thread.cpp); every shard
// works over its runtime's one slab and hands runs to its one worker pool.
// A timer belongs to one shard for its whole life (TimerSlot::shard, set by
// the schedule): only that shard's thread files, claims and reclaims it.
// Cancel, try_cancel, cancel_and_wait, a reschedule to a later due and state
// need no shard at all: they act on the slot's state word.
//
// Who touches what:
// - `seam` (ShardSeam, shard_seam.hpp) is read or written by other
//   threads; each of its fields says who, and in what order;
// - everything else is the shard's wheel thread's alone: WheelThreadState
//   (reached through wt(), which checks the caller in debug builds), and the
//   wheel-only part of the slots this shard filed (TimerSlot::alarm).
//   Before the thread starts and after it is joined (shutdown), any thread
//   may touch them.
//
// Read after runtime_core.hpp; wheel_thread.cpp has the pass. A shard is
// made with the parts of its runtime it uses (Parts), not the runtime.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chime/detail/assert.hpp"
#include "command_queue.hpp"
#include "dispatch.hpp"
#include "lifecycle_flags.hpp"
#include "runtime_config.hpp"
#include "runtime_stats.hpp"
#include "shard_seam.hpp"
#include "timer_slab.hpp"
#include "wake_signal.hpp"
#include "wheel_thread_state.hpp"

namespace chime::detail {

class Runner;
class TimerCounts;
struct WorkerPool;
struct LaneCore;
struct Completion;
struct ThreadLanes;

class WheelThread {
 public:
  // What a shard uses of its runtime (RuntimeCore's, which outlive it).
  struct Parts {
    const RuntimeConfig& config;
    TimerSlab& slab;  // the one slab every shard files from and claims in
    // The hand-off queue claimed runs go to; no threads: workers = 0, this
    // thread runs them (runner, Runner::Place::wheel_thread).
    WorkerPool& pool;
    Runner& runner;
    const TimerCounts& counts;  // a cancelled timer's counts
    // How far shutdown has gone: cancel_requested (lifecycle_flags.hpp).
    const LifecycleFlags& lifecycle;
    // A simulated runtime (simulation.hpp): the thread that runs the
    // passes, which counts as the wheel thread. Empty: a real thread.
    std::optional<std::thread::id> simulation_thread;
  };
  // Makes the shard; starts no thread (start()).
  WheelThread(const Parts& parts, unsigned index);
  WheelThread(const WheelThread&) = delete;
  WheelThread& operator=(const WheelThread&) = delete;

  unsigned index() const noexcept { return seam.index; }
  // Starts the thread (the constructor of RuntimeCore, after the workers).
  void start();
  // Joins it (shutdown, after it posted the stop request). No-op if it never started.
  void join();
  // This thread is this shard's wheel thread (or, simulated, the thread that
  // runs the passes).
  bool on_wheel_thread() const noexcept;
  // The wheel thread's CPU time so far (ShardStats::busy); 0 if none started.
  Duration busy() const noexcept;

  // ---- The shard's seam (shard_seam.hpp): what other threads touch. ----
  ShardSeam seam;

  // ---- The wheel thread's own. ----
  // Precondition (CHIME_ASSERT): called on the wheel thread, or while it is
  // not running (construction, after the join).
  WheelThreadState& wt() noexcept {
#ifndef NDEBUG
    const std::thread::id owner = owner_.load(std::memory_order_relaxed);
    CHIME_ASSERT(owner == std::thread::id{} || owner == std::this_thread::get_id(),
                 "the wheel thread's data touched from another thread while it runs");
#endif
    return wt_;
  }

  // How a pass ended (run_pass): the queue was not emptied (pass again at
  // once), the wheel thread must exit (shutdown), or it may sleep.
  enum class PassEnd { more_commands, stopped, idle };
  PassEnd run_pass(bool& busy);
  // The deterministic simulation's pass (simulation.cpp): true iff it did something.
  bool simulate_pass();
  // close_lane (lanes.cpp) on this shard's wheel thread: cancels the lane's filed timers.
  void close_lane_on_wheel(LaneCore* lane);
  void cancel_held_runs_of(LaneCore* lane);
  // (L1, L2) a timer of a closed lane that this shard holds.
  void cancel_for_closed_lane(TimerSlot& slot, std::uint32_t index);
  // wheel_thread_invariants.cpp: the first broken invariant of this shard, or empty.
  std::string check_on_wheel();

 private:
  void main();
  std::int64_t pass_clock();
  void advance(std::int64_t now, bool exhausted, std::uint64_t completed);
  void stop_passes();
  bool apply_commands(bool& exhausted);
  void apply(const Command& c);
  void file(std::uint32_t index, TimerSlot& slot, bool at_application,
            std::optional<std::int64_t> called_at_ns = std::nullopt);
  bool due_now_at_application(std::int64_t due, std::optional<std::int64_t> called_at_ns);
  __int128 fire_time(std::uint32_t index, const TimerSlot& slot, std::int64_t due, bool at_application);
  void reclaim(TimerSlot& slot, std::uint32_t index);
  void advance_and_dispatch(std::int64_t now_ns);
  void fire_past_due();
  void fire_due_alarms(std::int64_t now_ns);
  void advance_manual(std::int64_t now_ns);
  void refresh_manual_ready();
  // A ManualClock: a run of this shard is claimed and not yet completed
  // (`completed`: seam.completed as this pass read it). The next run waits for it.
  bool manual_run_in_flight(std::uint64_t completed) noexcept;
  // Whether this pass may advance the wheel and run timers: always, except
  // on a ManualClock, where only while a flush waits (wheel_thread_manual.cpp, "A
  // manual clock").
  bool may_fire() noexcept;
  std::int64_t exact_deadline(std::int64_t next_fires_at_ns);
  void sort_overdue();
  void consider(std::uint32_t index, std::int64_t boundary_ns, std::int64_t fired_at_ns, std::int64_t due_now_ns);
  bool claim(TimerSlot& slot, std::uint64_t& w, const Dispatch& d);  // W1, then dispatch
  void dispatch(TimerSlot& slot, const Dispatch& d);                 // slot: d.slot's, just claimed
  void hand_over();
  void file_rearmed();
  void spill_for_lane(const Dispatch& d);
  void unspill_lanes();
  // False, having done nothing, when there is no room for it (out of memory).
  bool drain_all(std::uint8_t flags, std::size_t& count);
  void sweep_zombies_if_many();
  // Out of memory (wheel_thread.cpp): room made before work is taken.
  bool apply_batch(std::size_t begin, std::size_t end, bool& any);
  std::size_t commands_with_room(const Command* c, std::size_t n) noexcept;
  bool room_for_advance() noexcept;
  bool grow_fired_limit() noexcept;
  void record_fired(std::uint32_t index);
  void note_pass(std::int64_t started_ns);
  void note_out_of_memory();
  // A hint: the slot's first line (state word, due, wheel fields) will be
  // read and written soon. Timer commands only: a request names no slot.
  void prefetch_slot_line(std::uint32_t index) const noexcept;
  void prefetch_slot(const Command& c) const noexcept {
    if (c.kind == CommandKind::add || c.kind == CommandKind::rearm || c.kind == CommandKind::reschedule) {
      prefetch_slot_line(c.slot);
    }
  }
  // False, settling none, while runs are held for want of memory.
  bool settle_flushes(std::uint64_t completed_snapshot);
  bool settle_stepped_flush(FlushRequest& f, std::uint64_t completed_snapshot);
  // Runtime::next_due: the earliest due this shard holds, to each request.
  void answer_next_dues();
  // wheel_thread_sleep.cpp: step 5 and its parts.
  void sleep(bool busy);
  bool next_pass_at_once();
  struct WakePlan {
    std::int64_t wake_at_ns;  // the runtime clock's; INT64_MAX: none
    std::int64_t bound_ns;    // ShardSeam::wake_if_due_before_ns while asleep
  };
  WakePlan plan_wake(bool busy);
  bool wait_is_moot();
  std::int64_t steady_wake_at(std::int64_t wake_at_ns, TimePoint steady_now) const;
  // Timers due now wait on the overdue list or (a ManualClock) the ready heap.
  bool ready_now() noexcept { return !wt().overdue.empty() || !wt().manual_ready.empty(); }
  void record_final_busy() noexcept;  // the thread's CPU time as it returns

  // shutdown(cancel_pending) was called. Relaxed: the wheel thread fences
  // where the order matters (run_pass; lifecycle_flags.hpp).
  bool cancel_requested() const noexcept { return lifecycle_.cancel_requested.load(std::memory_order_relaxed); }

  const RuntimeConfig& config_;
  TimerSlab& slab_;
  WorkerPool& pool_;
  Runner& runner_;
  const TimerCounts& counts_;
  const LifecycleFlags& lifecycle_;
  const std::optional<std::thread::id> simulation_thread_;
  WheelThreadState wt_;
#ifndef NDEBUG
  // The wheel thread while it runs (set first thing in main, reset as it
  // returns); the default id before it starts and after it exits. Only
  // wt()'s check reads it, relaxed: a thread entitled to wt() is ordered
  // with the stores by the thread's start and join.
  std::atomic<std::thread::id> owner_{};
#endif
  std::thread thread_;
  // The thread's CPU time, for ShardStats::busy: cpu_clock_ is set by
  // start() once the thread started (before any stats() call can run); the
  // thread stores its final CPU time as it returns, then busy_final_
  // (release), which busy() acquires before it trusts the value and stops
  // reading a clock whose thread is gone.
  std::optional<clockid_t> cpu_clock_;
  std::atomic<std::int64_t> busy_final_ns_{0};
  std::atomic<bool> busy_final_{false};
};

// A runtime's shards, in index order (RuntimeCore's; the other roles see
// their seams: shards.hpp).
using WheelThreads = std::vector<std::unique_ptr<WheelThread>>;

}  // namespace chime::detail
