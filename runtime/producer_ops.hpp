// SPDX-License-Identifier: BSL-1.0
// runtime/producer_ops.hpp: the calls any thread makes on a timer:
// schedule, cancel, reschedule, state.
//
// What this is: the producer side of the runtime. Each call decides its
// outcome with one transition of the slot's state word (timer_state.hpp:
// S1, C1-C3, R1-R3) and never waits for the wheel thread; it posts the
// command the timer's shard applies (command_poster.hpp). It holds
// references to the pieces of its runtime it needs (runtime_core.hpp owns
// them all and argues who touches what, and in what order).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "chime/runtime.hpp"
#include "command_poster.hpp"
#include "lane_core.hpp"
#include "lifecycle_flags.hpp"
#include "runner.hpp"
#include "runtime_config.hpp"
#include "runtime_stats.hpp"
#include "shard_seam.hpp"
#include "shards.hpp"
#include "slack.hpp"
#include "timer_counts.hpp"
#include "timer_slab.hpp"

namespace chime::detail {

// What a schedule asks for: when, how often, with which slack, and where it
// runs. The handles build it (runtime.cpp, lane.cpp, lane_sleep.cpp,
// timer.cpp); ProducerOps::schedule and commit_schedule read it.
struct ScheduleRequest {
  TimePoint due;
  std::int64_t period_ns = 0;  // 0: a one-shot timer
  Missed on_missed = Missed::skip;
  // The timer's slack (slack.hpp; RuntimeConfig::slack_code checks a
  // caller's argument).
  std::uint8_t slack_code = SlackCode::runtime_default;
  // The lane whose thread runs it; null: the workers (or the wheel thread).
  LaneCore* lane = nullptr;
  // The generation of `lane` the caller expects (a Timer's, recorded when it
  // was made; a lane sleep's); 0: the lane's current one (a Lane's own
  // calls: it is alive).
  std::uint32_t lane_generation = 0;
};

class ProducerOps {
 public:
  ProducerOps(const RuntimeConfig& config, TimerSlab& slab, const LifecycleFlags& lifecycle, const TimerCounts& counts,
              Shards& shards, const Runner& runner) noexcept;
  ProducerOps(const ProducerOps&) = delete;
  ProducerOps& operator=(const ProducerOps&) = delete;

  // `token` may be null (the calling thread's implicit sub-queue).
  TimerId schedule(const ScheduleRequest& q, Task&& task, ProducerQueueToken* token);
  // schedule() in steps, for a caller that must know the schedule will be
  // accepted before it gives up something (chime::Timer's re-arm replaces
  // its pending run only then). reserve_schedule throws what schedule
  // throws before it takes a slot, and takes it; reserve_add (optional)
  // takes the rest the timer needs: its side record and its ADD's place in
  // the queue, or throws std::bad_alloc, having taken neither; then exactly
  // one of commit_schedule (throws only StoppedError, if shutdown began
  // since, or, without reserve_add, std::bad_alloc) or release_reservation.
  // `extra_pending`: timers the caller is about to end, by which
  // max_pending may be exceeded until they have.
  struct ScheduleReservation {
    ShardSeam* shard;
    ProducerQueueToken* token;
    std::uint32_t index;
    // reserve_add: the ADD is queued, for this generation; the slot's word
    // is Writing at it until commit_schedule publishes the timer.
    bool add_posted = false;
    std::uint32_t generation = 0;
  };
  ScheduleReservation reserve_schedule(TimePoint due, ProducerQueueToken* token, LaneCore* lane,
                                       std::size_t extra_pending);
  void reserve_add(ScheduleReservation& r, bool periodic, bool needs_extra);
  TimerId commit_schedule(const ScheduleReservation& r, const ScheduleRequest& q, Task&& task);
  void release_reservation(const ScheduleReservation& r) noexcept;

 private:
  // producer_ops.cpp: their bodies, inlined into schedule().
  ScheduleReservation reserve_schedule_inline(TimePoint due, ProducerQueueToken* token, LaneCore* lane,
                                              std::size_t extra_pending);
  TimerId commit_schedule_inline(const ScheduleReservation& r, const ScheduleRequest& q, Task&& task);
  void fill_side_record(const ScheduleReservation& r, const ScheduleRequest& q, Task& task, bool task_in_slot);

 public:
  bool cancel(TimerId id, ProducerQueueToken* token);
  CancelResult try_cancel(TimerId id);
  CancelResult cancel_and_wait(TimerId id);
  // The due time of a pending timer (handed over but not started counts),
  // or nullopt. Any thread. Lock-free (retries while a reschedule writes).
  std::optional<TimePoint> pending_due(TimerId id) const noexcept;
  // What schedule() would throw before it takes a slot: StoppedError after
  // shutdown, std::out_of_range for a due beyond the wheel's range. For an
  // arm that is carried out later (chime::Timer, during a run).
  void check_schedulable(const char* what, TimePoint due) const {
    if (lifecycle_.stopped.load(std::memory_order_acquire))
      throw StoppedError(std::string("chime::") + what + " after shutdown");
    config_.check_due_in_range(what, due);
  }
  // `lane`: called through that Lane, whose ready runs a call on the lane's
  // thread may take back (R4).
  bool reschedule(TimerId id, TimePoint due, ProducerQueueToken* token, LaneCore* lane = nullptr);
  TimerState state(TimerId id) const noexcept;
  // A Producer goes away: its cached free slots go back to the free list.
  void return_token(ProducerQueueToken& token) noexcept { slab_.return_cached(token.slots); }

 private:
  // The runtime clock's time read in a call that schedules or reschedules,
  // by which the wheel thread judges "due now" (design.md): every clock but
  // the steady one is read in the call, so on a ManualClock a timer's fate
  // depends only on the order of the user's calls, never on when the wheel
  // thread applies its command. On the steady clock the call does not read
  // it (nullopt): the wheel thread's read at application is later, so its
  // verdict is never earlier, and schedule_at keeps no clock read.
  std::optional<std::int64_t> due_now_reading() const noexcept {
    if (config_.clock_kind == RuntimeConfig::ClockKind::steady) return std::nullopt;
    return config_.clock->now().time_since_epoch().count();
  }

  // What a cancel decided (one CAS, or none): cancel, try_cancel and
  // cancel_and_wait read it their way.
  enum class CancelOutcome {
    won,                 // C1, C2 or C4: no run starts
    stopped_later_runs,  // C3: a periodic run is in progress; no later run starts
    running,             // a run is in progress; this call changed nothing
    done,                // fired, finished or cancelled before
    unknown,             // stale, foreign or default id
  };
  CancelOutcome decide_cancel(TimerId id, TimerSlot** slot, ProducerQueueToken* token);
  static CancelResult result_of(CancelOutcome o) noexcept;
  void wait_for_run_end(TimerSlot& slot, TimerId id);
  TimerSlot* slot_of(TimerId id) const noexcept;
  bool take_back(TimerSlot& slot, std::uint32_t index, std::uint64_t pending);
  bool withdraw_posted(TimerSlot& slot, std::uint32_t index, std::uint64_t pending, ProducerQueueToken* token);
  void free_unfiled(std::uint32_t index, ProducerQueueToken* token) noexcept;
  void withdraw_reserved_add(const ScheduleReservation& r) noexcept;
  void finish_cancel(TimerSlot& slot, std::uint64_t w, std::uint32_t index, ProducerQueueToken* token);  // K1, R3

  const RuntimeConfig& config_;
  TimerSlab& slab_;
  const LifecycleFlags& lifecycle_;  // stopped (lifecycle_flags.hpp)
  const TimerCounts& counts_;
  Shards& shards_;
  const Runner& runner_;  // whether the caller runs a callback (cancel_and_wait)
  const CommandPoster poster_;
};

}  // namespace chime::detail
