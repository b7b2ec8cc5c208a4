// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_state.hpp: everything only the wheel thread touches.
//
// What this is: a wheel thread's own data (each shard, a WheelThread in
// wheel_thread.hpp, holds one, and reaches it only through
// WheelThread::wt(), which in debug and sanitizer builds checks that the
// caller is that wheel thread, or that it is not running: before it starts
// and after shutdown joined it).
// Nothing here is atomic and nothing here needs to be: no other thread reads
// or writes it while the wheel thread runs. What other threads see of the
// wheel thread's work crosses at the seams WheelThread and RuntimeCore
// declare (the slots' state words, the command and hand-off queues, the
// published counters), each with its memory order argued there.
//
// Contents: the timing wheel of filed timers (over the slots' own nodes), the
// overdue list (timers due before the wheel's current interval), the pass's
// scratch lists (commands, due-now ordering, claimed runs, retired slots),
// the pending flush / drain / stop requests, and the pass-to-pass flags of
// the sleep policy. wheel_thread.cpp and its step files use them
// (wheel_thread_*.cpp); wheel_thread_invariants.cpp (check_on_wheel, on it
// too) and runtime_core.cpp (shutdown, after the join) also do.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <concurrentqueue/concurrentqueue.h>

#include "backoff.hpp"
#include "chime/intrusive_timing_wheel.hpp"
#include "command_queue.hpp"
#include "dispatch.hpp"
#include "timer_slab.hpp"
#include "tuning.hpp"

namespace chime::detail {

struct FlushRequest;
struct DrainRequest;
struct StopRequest;
struct NextDueRequest;
struct LaneCore;

// The wheel's node of slot i: its TimerSlot::alarm. A shard's wheel
// files its timers' slots in place (IntrusiveTimingWheel): nothing is
// allocated per timer, and the wheel's lists run through the slots'
// lines.
struct SlotAlarm {
  const TimerSlab* slab;
  IntrusiveAlarm& operator()(std::uint32_t i) const noexcept { return (*slab)[i].alarm; }
};
using ShardWheel = IntrusiveTimingWheel<SlotAlarm>;

struct WheelThreadState {
  // Scratch lists reserve this much up front and keep their capacity
  // between passes (tuning.hpp, CHIME_WHEEL_SCRATCH_CAPACITY).
  static constexpr std::size_t kScratchCapacity = CHIME_WHEEL_SCRATCH_CAPACITY;

  WheelThreadState(const WheelConfig& config, TimePoint start, const TimerSlab& slab)
      : wheel(config, start, SlotAlarm{&slab}) {
    command_buffer.resize(256);
    // Room for a whole batch of commands (WheelThread::commands_with_room),
    // so that a batch of any mix never grows these in steady state.
    deferred_adds.reserve(command_buffer.size());
    retry_adds.reserve(command_buffer.size());
    reschedules_before_add.reserve(command_buffer.size());
    retry_reschedules.reserve(command_buffer.size());
    dispatch_batch.reserve(kScratchCapacity);
    rearmed.reserve(kScratchCapacity);
    overdue_order.reserve(kScratchCapacity);
    overdue_scratch.reserve(kScratchCapacity);
    wheel_fired.reserve(kScratchCapacity);
    sweep_buffer.reserve(kScratchCapacity);
    overdue.reserve(kScratchCapacity);
    manual_ready.reserve(kScratchCapacity);
    drain_buffer.reserve(kScratchCapacity);
    flushes.reserve(command_buffer.size());
    drains.reserve(command_buffer.size());
    next_dues.reserve(command_buffer.size());
    touched_lanes.reserve(64);
    lane_spill.reserve(kScratchCapacity);  // as dispatch_batch: room for a pass's runs (hand_over)
  }

  ShardWheel wheel;
  std::vector<std::uint32_t> overdue;  // filed timers due before the wheel's current interval
  struct Overdue {
    std::int64_t due;
    std::uint32_t seq;  // position on overdue: ties go in filing order
    std::uint32_t index;
  };
  std::vector<Overdue> overdue_order;                               // overdue timers by due time
  std::vector<Overdue> overdue_scratch;                             // sort_overdue's second buffer
  std::vector<std::pair<std::int64_t, std::uint32_t>> wheel_fired;  // this advance's alarms, by interval
  // The clock reading the last advance reached in full (not cut short, not
  // skipped for want of memory): a flush settles only once it is at or past
  // the flush's reading (settle_flushes).
  std::int64_t advanced_to_ns = INT64_MIN;
  // This pass's moves: alarms its advance moved between levels, the ones
  // cascade_ahead moved down, and fired alarms re-filed at a later due (a
  // touch); the most of them in a pass is ShardStats::most_refiled_in_a_pass.
  std::uint64_t pass_moves = 0;
  // Of this advance's fired alarms, those due later than it (touched: they
  // will be re-filed); at kRefilesPerAdvance the advance is cut short.
  std::size_t touched_fired = 0;
  std::int64_t advance_to_ns = INT64_MIN;
  std::int64_t application_now_ns = INT64_MIN;  // the clock at this batch's application; MIN: not read yet
  // A ManualClock (wheel_thread_manual.cpp, "A manual clock"): the latest clock
  // reading a flush (or drain, or shutdown(fire_pending), which begin with
  // one) has asked this wheel to reach; the wheel never advances past it.
  std::int64_t manual_release_ns = INT64_MIN;
  // A ManualClock (wheel_thread_manual.cpp, "A manual clock"): the filed timers
  // due by manual_release_ns, one of which runs at a time, as a min-heap on
  // (due, order) (SlotExtra::order: call_order.hpp). The keys are read as
  // a timer joins; a timer whose due a reschedule moved earlier while here
  // marks them stale (apply), and the next step reads them again. One moved
  // later is re-filed when it comes up (consider). Every timer here is
  // filed, as those on the overdue list.
  struct ManualReady {
    std::int64_t due;
    std::uint64_t order;
    std::uint32_t index;
  };
  std::vector<ManualReady> manual_ready;
  bool manual_ready_stale = false;
  std::uint64_t claimed = 0;             // runs claimed so far (dispatch): the manual step claims one
  std::vector<Dispatch> dispatch_batch;  // claimed this pass for the workers, handed over at its end (hand_over)
  // workers = 0: the periodic runs of the batch this thread just ran that
  // were re-armed, to be filed (hand_over, file_rearmed).
  std::vector<std::uint32_t> rearmed;
  std::vector<LaneCore*> touched_lanes;  // lanes with runs in their batch this pass
  // Runs for lanes whose batch (or touched_lanes) could not grow (out of
  // memory): room for them is made with dispatch_batch's, and hand_over
  // moves them to their lanes' batches when it can.
  std::vector<Dispatch> lane_spill;
  // Out of memory (wheel_thread.cpp, "Out of memory"): this pass could not
  // make room for all its work (since when passes have been:
  // ShardSeam::out_of_memory_since_ns); the most alarms this advance may
  // fire before it is cut short; whether it was (also when it stopped at
  // its bounded_advance_limit, short of a slot not yet moved down ahead).
  bool pass_out_of_memory = false;
  // command_buffer[held_commands_begin, held_commands_end): popped, not yet
  // applied for want of room (apply_batch); applied first next pass.
  std::size_t held_commands_begin = 0;
  std::size_t held_commands_end = 0;
  std::size_t fired_limit = 0;
  bool advance_cut_short = false;
  bool advance_stuck = false;  // the last advance's bounded limit made no progress (fire_due_alarms)
  // cascade_ahead left part of a span on its higher level: the next pass
  // comes at once, instead of a sleep (wheel_thread_fire.cpp, "No pass does
  // unbounded work").
  bool ahead_pending = false;
  std::vector<std::uint32_t> sweep_buffer;
  std::unique_ptr<RetiredSlots> retired;  // created on the wheel thread (its token)
  std::uint64_t reclaimed = 0;            // lazily cancelled timers the wheel thread (or shutdown) freed
  std::uint64_t dispatched = 0;           // runs handed over so far (flush marks wait for their completion)
  std::vector<std::uint32_t> drain_buffer;
  std::vector<Command> command_buffer;
  std::vector<Command> deferred_adds;  // ADDs/REARMs that met Writing: applied again next pass (apply)
  // RESCHEDULEs applied before their timer's ADD (posted on another queue):
  // applied again at the end of each batch until the ADD is (apply).
  std::vector<Command> reschedules_before_add;
  std::vector<Command> retry_reschedules;  // the same, being applied again
  std::vector<Command> retry_adds;         // the same, being applied again
  std::vector<FlushRequest*> flushes;
  std::vector<DrainRequest*> drains;
  StopRequest* stop = nullptr;
  std::vector<NextDueRequest*> next_dues;    // answered by a pass that empties the queue (answer_next_dues)
  std::int64_t pass_min_due_ns = INT64_MAX;  // earliest due dispatched since the last settle_flushes
  bool awaiting_writer = false;              // this pass put a mid-reschedule timer on overdue
  // Passes in a row that waited for a reschedule's two stores (deferred_adds,
  // awaiting_writer): yields, then sleeps of at most 50 us (backoff.hpp).
  Backoff writer_backoff{std::chrono::microseconds{50}};
  bool lingering = false;         // sleep(): commands keep coming; wake within kLingerNs
  bool last_sleep_short = false;  // the last sleep was cut short (a producer woke us early)
  bool running = true;
  // The wheel thread's token on the hand-off queue (the worker pool's), so
  // its bulk enqueues stay FIFO. Made by RuntimeCore's constructor.
  std::unique_ptr<moodycamel::ProducerToken> handoff_token;
  std::uint64_t handoff_tail = 0;  // runs enqueued through it (hand_over's enqueue_in_blocks; stop_workers)
};

}  // namespace chime::detail
