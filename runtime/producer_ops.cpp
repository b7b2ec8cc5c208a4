// SPDX-License-Identifier: BSL-1.0
// runtime/producer_ops.cpp: schedule, cancel, reschedule and state: the calls
// any thread makes. Each decides its outcome with one transition of the
// slot's state word (timer_state.hpp: S1, C1-C3, R1-R3) and never waits for
// the wheel thread.
#include <algorithm>
#include <array>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "producer_ops.hpp"

namespace chime::detail {

ProducerOps::ProducerOps(const RuntimeConfig& config, TimerSlab& slab, const LifecycleFlags& lifecycle,
                         const TimerCounts& counts, Shards& shards, const Runner& runner) noexcept
    : config_(config),
      slab_(slab),
      lifecycle_(lifecycle),
      counts_(counts),
      shards_(shards),
      runner_(runner),
      poster_(config.wake_on_post_count) {}

// The slot an id names, or nullptr for the default id, an id from another
// runtime, or a slot never handed out. The generation is the caller's to
// check (it may change under it).
TimerSlot* ProducerOps::slot_of(TimerId id) const noexcept {
  if (!id || id.runtime() != config_.tag) return nullptr;
  return slab_.find(id.slot());
}

// (K1, R3) The end of a cancel that won against Pending (C1) or Writing
// (C2, finished by the rescheduler), or of a withdrawal: the caller owns the
// task (nobody runs or frees a Cancelling timer) and `w` is the word it won
// against, or the Cancelling word. Destroys the task here, where its line is
// warm, then publishes Cancelled. release: the destruction, and every write
// of the caller's to the slot, happens-before the acquire load of Cancelled
// by whoever frees the slot (the wheel thread, if filed), so it frees a slot
// nobody writes any more. Not filed (yet, or since its claim, after R4): the
// slot is the caller's to free, now (timer_state.hpp, "Who frees the slot");
// its ADD will find it Cancelled or reused. A filed one is a zombie the
// wheel thread (or the shutdown sweep) reclaims.
void ProducerOps::finish_cancel(TimerSlot& slot, std::uint64_t w, std::uint32_t index, ProducerQueueToken* token) {
  slab_.reset_task(slot, index);
  slot.word.store(StateWord::with_state(w, SlotState::cancelled), std::memory_order_release);
  if (!StateWord::filed(w)) free_unfiled(index, token);
}

// (X1) A schedule whose ADD could not be posted (out of memory) takes its
// timer back: Pending -> Cancelled, then the task, the capacity and the slot
// are given back (nothing else names the slot: no ADD is queued). False if another thread
// decided the timer first (shutdown's sweep, or a cancel by a guessed id):
// then it counts as accepted and is settled by whoever decided it.
bool ProducerOps::take_back(TimerSlot& slot, std::uint32_t index, std::uint64_t pending) {
  std::uint64_t expected = pending;
  if (!slot.word.compare_exchange_strong(expected, StateWord::with_state(pending, SlotState::cancelled),
                                         std::memory_order_acq_rel)) {
    return false;
  }
  slab_.reset_task(slot, index);
  counts_.unadmit();
  slab_.release(index);
  return true;
}

// The same for a schedule that saw shutdown only after posting its ADD: the
// wheel thread may already have filed it (A1). So this is a C1 + K1 cancel
// by the scheduler itself: Pending -> Cancelling (acq_rel), destroy the
// task, Cancelled (release: whoever frees the slot sees the task gone), then
// free the slot if it is not filed (a filed one is a zombie the wheel thread
// or the shutdown sweep frees); the timer is not counted as accepted. False
// if another thread decided the timer first (shutdown's sweep, the wheel
// thread's claim, a cancel by a guessed id): accepted and settled by them.
bool ProducerOps::withdraw_posted(TimerSlot& slot, std::uint32_t index, std::uint64_t pending,
                                  ProducerQueueToken* token) {
  std::uint64_t w = pending;
  // The wheel thread may have filed it meanwhile (A1 sets the filed bit):
  // then it is a zombie the wheel thread (or the shutdown sweep) frees.
  while (!slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelling), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
    if ((w & ~StateWord::kFiledBit) != pending) return false;
  }
  finish_cancel(slot, w, index, token);
  // relaxed: ours (the scheduler's own store, before S1).
  if (StateWord::filed(w)) shards_[slot.shard.load(std::memory_order_relaxed)].lazy_cancels.add();
  counts_.unadmit();
  return true;
}

// Frees the slot of a timer cancelled before the wheel thread filed it
// (timer_state.hpp, "Who frees the slot"): into the caller's slot cache, so
// its next schedule reuses it while its lines are warm on this core; without
// a cache, to the shared free list.
void ProducerOps::free_unfiled(std::uint32_t index, ProducerQueueToken* token) noexcept {
  if (token != nullptr) {
    SlotCache& cache = token->slots;
    if (cache.count == SlotCache::kSize) slab_.return_cached(cache);  // a full cache goes back as one batch
    if (cache.count < SlotCache::kSize) {
      cache.index[cache.count++] = index;
      return;
    }
  }
  try {
    slab_.release(index);
  } catch (const std::bad_alloc&) {
    // No container for it (out of memory): the slot stays out of use, never
    // double-used, as a cache that could not be returned (return_cached).
  }
}

// Everything that can refuse a schedule, in the documented order, and the
// slot it will use: after this nothing but shutdown (StoppedError) or out of
// memory for its ADD can stop commit_schedule. `extra_pending`: timers the
// caller is about to end (a chime::Timer's re-arm replaces its pending run),
// which max_pending lets it exceed by until they have.
// The bodies are inlined into schedule() (the hot path: as one function it
// is about 70 instructions fewer per schedule+cancel pair, callgrind);
// reserve_schedule and commit_schedule are the out-of-line copies that
// chime::Timer calls.
[[gnu::always_inline]] inline ProducerOps::ScheduleReservation ProducerOps::reserve_schedule_inline(
    TimePoint due, ProducerQueueToken* token, LaneCore* lane, std::size_t extra_pending) {
  if (lifecycle_.stopped.load(std::memory_order_acquire)) throw StoppedError("chime::Runtime: schedule after shutdown");
  config_.check_due_in_range("schedule", due);
  // Overload (command_queue.hpp, QueueBound): one relaxed load of a flag
  // that is written only when the depth crosses the bound.
  ShardSeam& shard = shards_.shard_for(token, lane);
  if (shard.commands.bound().over_bound()) [[unlikely]]
    poster_.refuse_if_over_bound(shard);
  if (!counts_.admit(extra_pending)) [[unlikely]] {
    throw CapacityError("chime::Runtime: max_pending = " + std::to_string(config_.options.max_pending) +
                        " timers are already pending");
  }
  ScheduleReservation r{&shard, token, 0};
  try {
    // With a Producer, from its cache, refilled 32 at a time from the LIFO
    // free list; without one, a batch is popped and the rest pushed back.
    r.index = token != nullptr ? slab_.allocate(token->slots) : slab_.allocate();
  } catch (...) {
    counts_.unadmit();
    throw;
  }
  return r;
}

// A reservation not committed: its slot (never published) and its count go back.
void ProducerOps::release_reservation(const ScheduleReservation& r) noexcept {
  if (r.add_posted) {
    withdraw_reserved_add(r);
    return;
  }
  free_unfiled(r.index, r.token);
  counts_.unadmit();
}

// What a reserved timer needs beyond its slot, taken before its caller
// gives anything up (a Timer's re-arm cancels the run it replaces only
// after this, so an arm out of memory leaves the Timer as it was, G47): its
// side record, if it needs one, and its ADD's place in the queue. The queue
// cannot promise room for a later push, so the ADD is pushed now, before the
// timer is published: the slot's word goes to the new generation in state
// Writing first, and the wheel thread applies an ADD that meets a Writing
// word again at its next pass (wheel_thread_apply.cpp, apply). It files the timer
// only after commit_schedule's S1 (Writing -> Pending, release) published
// it, or finds it Cancelled (withdraw_reserved_add) and does nothing, the
// slot being ours to free; a slot reused since has another generation,
// which the ADD ignores. No id of the new generation exists before
// commit_schedule returns it. Throws std::bad_alloc if either cannot be
// had, with the slot still reserved and nothing queued.
void ProducerOps::reserve_add(ScheduleReservation& r, bool periodic, bool needs_extra) {
  if (needs_extra || config_.manual())
    slab_.ensure_extra(r.index);  // a ManualClock: every timer has one (its call order)
  TimerSlot& slot = slab_[r.index];
  // relaxed: the slot is ours (reserved), as in commit_schedule.
  const std::uint64_t old = slot.word.load(std::memory_order_relaxed);
  const std::uint32_t g = StateWord::next_generation(old);
  // (S0) relaxed: it publishes nothing; the push's release carries it to
  // the wheel thread, which only looks at its state.
  slot.word.store(StateWord::make(g, 0, SlotState::writing, periodic), std::memory_order_relaxed);
  r.generation = g;
  r.add_posted = true;
  const Command add = Command::timer(CommandKind::add, r.index, g, due_now_reading());
  if (!r.shard->commands.try_push(add, shards_.token_for(*r.shard, r.token))) [[unlikely]] {
    // Nothing queued names the new generation: the word is as it was, and
    // the slot stays reserved.
    r.add_posted = false;
    slot.word.store(old, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
}

// release_reservation after reserve_add: (K1) Writing -> Cancelled, then the
// slot and the count go back; the queued ADD finds the word Cancelled, or
// the slot reused at a later generation, and does nothing. Release: the
// slot's next user writes after the wheel thread's acquire load of this
// word (the free list orders the reuse, as after any cancel). Only a cancel
// by a guessed id can have changed the word (C2, to Cancelling): the cancel
// is then finished here, as a rescheduler finishes it (R3).
void ProducerOps::withdraw_reserved_add(const ScheduleReservation& r) noexcept {
  TimerSlot& slot = slab_[r.index];
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  CHIME_ASSERT(StateWord::generation(w) == r.generation, "a reserved ADD's slot at another generation");
  slot.word.store(StateWord::with_state(w, SlotState::cancelled), std::memory_order_release);
  free_unfiled(r.index, r.token);
  counts_.unadmit();
}

// commit_schedule's side record: its chunk's side array is created here,
// before anything is published (out of memory: the reservation is
// released and std::bad_alloc thrown), and filled with what the slot has
// no room for. `task`: the callable, unless it went into the slot.
[[gnu::noinline]] void ProducerOps::fill_side_record(const ScheduleReservation& r, const ScheduleRequest& q, Task& task,
                                                     bool task_in_slot) {
  TimerSlot& slot = slab_[r.index];
  try {
    slab_.ensure_extra(r.index);  // after reserve_add: made already
  } catch (const std::bad_alloc&) {
    slot.task.reset();
    release_reservation(r);
    throw;
  }
  SlotExtra& extra = slab_.extra(r.index);
  if (!task_in_slot) extra.task = std::move(task);
  extra.period_ns = q.period_ns;
  extra.on_missed = static_cast<std::uint8_t>(q.on_missed);
  // relaxed: published by S1's release, as the slot's fields. A Timer
  // passes the generation it was made with: if its Lane is gone, the
  // wheel thread cancels the timer (L1) instead of handing it to the lane
  // core's next user; else the Lane calling us is alive (its generation
  // is stable while it is).
  extra.lane.store(q.lane, std::memory_order_relaxed);
  std::uint32_t lane_generation = q.lane_generation;
  if (q.lane != nullptr && lane_generation == 0) lane_generation = q.lane->generation.load(std::memory_order_relaxed);
  extra.lane_generation = q.lane != nullptr ? lane_generation : 0;
  if (config_.manual()) extra.order.store(config_.call_order.take(), std::memory_order_relaxed);  // published by S1
}

// Publishes the reserved timer and posts its ADD (unless reserve_add has:
// then out of memory cannot stop it). Out of memory, the timer is taken
// back and std::bad_alloc thrown. StoppedError if shutdown began meanwhile
// (the timer is withdrawn), unless shutdown already took it.
[[gnu::always_inline]] inline TimerId ProducerOps::commit_schedule_inline(const ScheduleReservation& r,
                                                                          const ScheduleRequest& q, Task&& task) {
  const std::int64_t period_ns = q.period_ns;
  LaneCore* const lane = q.lane;
  ShardSeam& shard = *r.shard;
  ProducerQueueToken* const token = r.token;
  ProducerQueueToken* const queue_token = shards_.token_for(shard, token);
  const std::uint32_t index = r.index;
  TimerSlot& slot = slab_[index];
  // We own the slot: it came from the free list (acquire) or is fresh.
  const std::uint64_t old = slot.word.load(std::memory_order_relaxed);
  const std::uint32_t g = r.add_posted ? r.generation : StateWord::next_generation(old);
  const std::int64_t due_ns = q.due.time_since_epoch().count();
  // The callable goes into the slot when it fits. A periodic or lane timer,
  // or a callable too large for the slot, needs the slot's side record
  // (fill_side_record). A ManualClock: every timer has one, for its call order.
  const bool task_in_slot = slot.task.adopt(task);
  if (period_ns != 0 || lane != nullptr || !task_in_slot || config_.manual()) [[unlikely]] {
    fill_side_record(r, q, task, task_in_slot);
  }
  slot.due_ns.store(due_ns, std::memory_order_relaxed);
  slot.slack_code = q.slack_code;
  slot.shard.store(static_cast<std::uint8_t>(shard.index), std::memory_order_relaxed);  // published by S1
  slot.layout.store(static_cast<std::uint8_t>((task_in_slot ? 0 : TimerSlot::kTaskOutOfLine) |
                                              (lane != nullptr ? TimerSlot::kOnLane : 0)),
                    std::memory_order_relaxed);
  const std::uint64_t pending = StateWord::make(g, 0, SlotState::pending, period_ns != 0);
  // (S1) release: publishes the fields above with the word (to the wheel
  // thread, whose acquire load of the word pairs with it, and to any thread
  // that acts on the id). After reserve_add, from its Writing word (its ADD
  // is queued): a CAS, which only a cancel by a guessed id (C2) can beat;
  // that cancel is then finished here (R3) and the timer counts as accepted.
  if (r.add_posted) {
    std::uint64_t writing = StateWord::make(g, 0, SlotState::writing, period_ns != 0);
    if (!slot.word.compare_exchange_strong(writing, pending, std::memory_order_release, std::memory_order_acquire))
        [[unlikely]] {
      finish_cancel(slot, writing, index, token);
      counts_.add(Counter::scheduled);
      return TimerId(index, g, config_.tag);
    }
  } else {
    slot.word.store(pending, std::memory_order_release);
  }
  if (!r.add_posted && !shard.commands.try_push(Command::timer(CommandKind::add, index, g, due_now_reading()),
                                                queue_token)) [[unlikely]] {
    // Out of memory: the wheel thread will never hear of this timer. Take it
    // back (nothing names the slot but us) and report the failure.
    if (take_back(slot, index, pending)) throw std::bad_alloc();
    // Someone else decided it first (shutdown's sweep, or a cancel by a
    // guessed id): it counts as accepted and is settled; the slot is freed
    // by the shutdown sweep or, at worst, kept until destruction.
    counts_.add(Counter::scheduled);
    return TimerId(index, g, config_.tag);
  }
  // (P1) One seq_cst fence for two Dekker pairs: S1 and the ADD, then
  // stopped (shutdown stores stopped, then fences, then sweeps: either we
  // see stopped below or its sweep and its look at the queue see our word
  // and our ADD), and the ADD, then the sleeper's bound (wake_after_fence).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (lifecycle_.stopped.load(std::memory_order_relaxed)) [[unlikely]] {
    if (withdraw_posted(slot, index, pending, token)) throw StoppedError("chime::Runtime: schedule after shutdown");
    counts_.add(Counter::scheduled);  // shutdown's sweep or the wheel took it first: accepted, settled by them
    return TimerId(index, g, config_.tag);
  }
  poster_.wake_after_fence(shard, due_ns);
  counts_.add(Counter::scheduled);
  return TimerId(index, g, config_.tag);
}

TimerId ProducerOps::schedule(const ScheduleRequest& q, Task&& task, ProducerQueueToken* token) {
  const ScheduleReservation r = reserve_schedule_inline(q.due, token, q.lane, 0);
  return commit_schedule_inline(r, q, std::move(task));
}

ProducerOps::ScheduleReservation ProducerOps::reserve_schedule(TimePoint due, ProducerQueueToken* token, LaneCore* lane,
                                                               std::size_t extra_pending) {
  return reserve_schedule_inline(due, token, lane, extra_pending);
}

TimerId ProducerOps::commit_schedule(const ScheduleReservation& r, const ScheduleRequest& q, Task&& task) {
  return commit_schedule_inline(r, q, std::move(task));
}

// One CAS decides it (C1, C2, C3 or C4) and nothing else happens on the
// caller's side: no command, no wake-up. A timer cancelled while filed stays
// in the wheel until the wheel thread reclaims it (its alarm comes due, or a
// zombie sweep); one cancelled while handed to a worker is freed by that
// worker when its start (B1) fails. *slot_out is the timer's slot when the
// outcome is running or stopped_later_runs (for cancel_and_wait).
ProducerOps::CancelOutcome ProducerOps::decide_cancel(TimerId id, TimerSlot** slot_out, ProducerQueueToken* token) {
  TimerSlot* slot = slot_of(id);
  if (slot == nullptr) return CancelOutcome::unknown;
  *slot_out = slot;
  // acquire: pairs with the release half of S1/R2/F2, so the transition we
  // CAS from is the one we read.
  std::uint64_t w = slot->word.load(std::memory_order_acquire);
  for (;;) {
    if (StateWord::generation(w) != id.generation()) {
      // An older generation of the slot is a timer of ours that ended
      // before the slot was reused: done. A newer one was never issued.
      return StateWord::issued_before(id.generation(), w, CHIME_INITIAL_GENERATION) ? CancelOutcome::done
                                                                                    : CancelOutcome::unknown;
    }
    std::uint64_t next;
    switch (StateWord::state(w)) {
      case SlotState::pending:
        next = StateWord::with_state(w, SlotState::cancelling);  // (C1): we destroy the task (K1)
        break;
      case SlotState::writing:
        next = StateWord::with_state(w, SlotState::cancelling);  // (C2): the rescheduler finishes it (R3)
        break;
      case SlotState::handed:
        next = StateWord::with_state(w, SlotState::cancelled);  // (C4): handed over, not started: skipped
        break;
      case SlotState::running:
        if (!StateWord::periodic(w)) return CancelOutcome::running;  // a one-shot's only run started
        // (C3): no further run; the run in progress ends with F4. Keeps a
        // waiter's bit: the worker's F4 must wake it.
        next = (w & StateWord::kWaiterBit) | StateWord::with_state(w, SlotState::running_cancelled);
        break;
      case SlotState::running_cancelled:
        return CancelOutcome::running;  // cancelled before; its last run is in progress
      case SlotState::free:
        return CancelOutcome::unknown;  // cannot be: a free slot's word keeps its last terminal state
      default:
        return CancelOutcome::done;  // fired, cancelling, cancelled
    }
    // The timer's shard, for a lazy cancel's count: read before the CAS,
    // since after it the wheel thread may free and reuse the slot. Relaxed,
    // after the acquire load of a word of this generation: the value is
    // this generation's, or the CAS fails (timer_slab.hpp, `shard`).
    const unsigned shard_index = slot->shard.load(std::memory_order_relaxed);
    if (slot->word.compare_exchange_weak(w, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      counts_.end_cancelled_timer();
      const SlotState from = StateWord::state(w);
      if (from == SlotState::pending) finish_cancel(*slot, w, id.slot(), token);  // (K1): we own the task now
      // A filed one is a zombie the wheel thread reclaims; counted for the
      // sweep's estimate. (C2 on an unfiled timer: the rescheduler frees it.)
      if ((from == SlotState::pending || from == SlotState::writing) && StateWord::filed(w)) {
        shards_[shard_index].lazy_cancels.add();
      }
      return from == SlotState::running ? CancelOutcome::stopped_later_runs : CancelOutcome::won;
    }
  }
}

bool ProducerOps::cancel(TimerId id, ProducerQueueToken* token) {
  TimerSlot* slot = nullptr;
  const CancelOutcome o = decide_cancel(id, &slot, token);
  return o == CancelOutcome::won || o == CancelOutcome::stopped_later_runs;
}

CancelResult ProducerOps::result_of(CancelOutcome o) noexcept {
  switch (o) {
    case CancelOutcome::won:
      return CancelResult::cancelled;
    case CancelOutcome::stopped_later_runs:
    case CancelOutcome::running:
      return CancelResult::running;
    case CancelOutcome::done:
      return CancelResult::done;
    case CancelOutcome::unknown:
      break;
  }
  return CancelResult::unknown;
}

CancelResult ProducerOps::try_cancel(TimerId id) {
  TimerSlot* slot = nullptr;
  return result_of(decide_cancel(id, &slot, nullptr));
}

#ifndef NDEBUG
namespace {
std::uint64_t pack_id(TimerId id) noexcept { return (std::uint64_t{id.slot()} << 32) | id.generation(); }
}  // namespace
#endif

CancelResult ProducerOps::cancel_and_wait(TimerId id) {
  TimerSlot* slot = nullptr;
  const CancelOutcome o = decide_cancel(id, &slot, nullptr);
  const CancelResult r = result_of(o);
  if (r != CancelResult::running) return r;
  const TimerId self = runner_.current_run();
  if (self == id) return r;  // from its own callback: waiting would wait for itself
#ifndef NDEBUG
  // The simplest deadlock: callbacks of X and Y each cancel_and_wait the
  // other. Each publishes what it waits for, then looks at the other
  // (seq_cst both: at least one of the two sees the other's store).
  TimerSlot* self_slot = self ? slot_of(self) : nullptr;
  if (self_slot != nullptr) {
    self_slot->waits_for.store(pack_id(id), std::memory_order_seq_cst);
    CHIME_ASSERT(slot->waits_for.load(std::memory_order_seq_cst) != pack_id(self) ||
                     !StateWord::run_in_progress(slot->word.load(std::memory_order_acquire)),
                 "cancel_and_wait deadlock: two timer callbacks wait for each other's run to return");
  }
#endif
  wait_for_run_end(*slot, id);
#ifndef NDEBUG
  if (self_slot != nullptr) self_slot->waits_for.store(0, std::memory_order_relaxed);
#endif
  return r;
}

// Blocks until the run of timer `id` that is in progress has returned (WB in
// timer_state.hpp): set the waiter bit on the exact run-in-progress word,
// then futex-wait on the word's low half. The final acquire load pairs with
// the release half of the worker's F1/F2/F3/F4, so the run's effects
// happen-before we return.
void ProducerOps::wait_for_run_end(TimerSlot& slot, TimerId id) {
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  for (;;) {
    if (StateWord::generation(w) != id.generation() || !StateWord::run_in_progress(w)) return;
    if (!StateWord::has_waiter(w)) {
      // The CAS only has to be ordered with the worker's RMW on the same
      // word, which any RMW is; acquire (both ways) so a failed CAS reads
      // the word as the loads do.
      if (!slot.word.compare_exchange_weak(w, w | StateWord::kWaiterBit, std::memory_order_acquire,
                                           std::memory_order_acquire)) {
        continue;
      }
      w |= StateWord::kWaiterBit;
    }
    futex_wait_low_half(slot.word, StateWord::low_half(w));
    w = slot.word.load(std::memory_order_acquire);
  }
}

namespace {
// The slot's word once timer `generation` is not in Writing: a reschedule of
// it (R1) is two stores from done (R2, or R3 after a cancel won), so the
// caller waits for them (backoff.hpp: the rescheduler may be preempted by
// this very thread), reloading the word. A word of another generation, or in
// any other state, is returned as it is. acquire: as the caller's own load,
// pairs with the release of R2/R3 (and of S1, F2). `backoff` is the
// caller's, so that its waits keep growing across the caller's retries.
std::uint64_t past_writing(const TimerSlot& slot, std::uint64_t w, std::uint32_t generation,
                           Backoff& backoff) noexcept {
  while (StateWord::generation(w) == generation && StateWord::state(w) == SlotState::writing) {
    backoff.wait();
    w = slot.word.load(std::memory_order_acquire);
  }
  return w;
}
}  // namespace

// A seqlock read: the version in the word is bumped by every transition
// that publishes a new due (R2, F2), so an unchanged word around the read of
// `due` means the due belongs to that word.
std::optional<TimePoint> ProducerOps::pending_due(TimerId id) const noexcept {
  const TimerSlot* slot = slot_of(id);
  if (slot == nullptr) return std::nullopt;
  std::uint64_t w = slot->word.load(std::memory_order_acquire);
  Backoff backoff;
  for (;;) {
    w = past_writing(*slot, w, id.generation(), backoff);
    if (StateWord::generation(w) != id.generation()) return std::nullopt;
    const SlotState s = StateWord::state(w);
    if (s != SlotState::pending && s != SlotState::handed) return std::nullopt;
    const std::int64_t due = slot->due_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t again = slot->word.load(std::memory_order_relaxed);
    if (again == w) return TimePoint(Duration(due));
    w = slot->word.load(std::memory_order_acquire);
  }
}

namespace {
// Holds a lane's runs_active while a reschedule on the lane's thread takes a
// run back from its ready queue (R4) and re-files it: the same Dekker pair
// with shutdown's stopped_ as a batch of runs (lanes.cpp, run_lane). Entered
// (seq_cst increment, then seq_cst load of stopped_) only if shutdown has
// not begun; then shutdown, which stores stopped_ (seq_cst) before it waits
// for every lane's runs_active to be 0 (seq_cst), waits for us, and its
// sweep sees the timer Pending (X1), not a Handed word whose take-back
// comes after the sweep looked (a timer nobody would settle). The release
// decrement orders our word and our ADD before the sweep.
class LaneRunsHold {
 public:
  LaneRunsHold() = default;
  LaneRunsHold(const LaneRunsHold&) = delete;
  LaneRunsHold& operator=(const LaneRunsHold&) = delete;
  ~LaneRunsHold() {
    if (lane_ != nullptr) lane_->runs_active.fetch_sub(1, std::memory_order_release);
  }
  // False (and nothing held) if shutdown has begun.
  bool enter(LaneCore& lane, const std::atomic<bool>& stopped) noexcept {
    lane.runs_active.fetch_add(1, std::memory_order_seq_cst);
    if (stopped.load(std::memory_order_seq_cst)) {
      lane.runs_active.fetch_sub(1, std::memory_order_release);
      return false;
    }
    lane_ = &lane;
    return true;
  }

 private:
  LaneCore* lane_ = nullptr;
};

// (R4) design.md, Lanes: on the lane's thread a reschedule of a run already
// in the lane's ready queue wins, as a cancel does (C4). Only there: the run
// cannot be starting (the lane's thread starts it, and it is here), so the
// outcome follows the caller's own order of calls; on any other thread, as
// for a worker's run, the reschedule returns false and the run goes ahead.
// And only for a run of `lane`: another lane's or a worker's run is not in
// this lane's queue.
bool is_own_ready_run(const TimerSlab& slab, const TimerSlot& slot, std::uint32_t index,
                      const LaneCore& lane) noexcept {
  // relaxed: owner is compared with this thread's own id, which only this
  // thread stores (lane_core.hpp).
  if (lane.owner.load(std::memory_order_relaxed) != std::this_thread::get_id()) return false;
  // timer_slab.hpp (SlotExtra::lane): if the slot was reused since the
  // caller loaded its word, the take-back's CAS from that word fails.
  return slab.lane_of(slot, index) == &lane;
}

// Takes the Handed word `w` to Writing with a new version (R4), so the record
// in the ready queue no longer holds the claim and is skipped by whoever
// dequeues it (runner.cpp, run; lanes.cpp, close_lane). True iff it did;
// `w` is then our Writing word, and we own the slot's fields as after R1.
bool take_back_ready_run(TimerSlot& slot, std::uint64_t& w) noexcept {
  const std::uint32_t generation = StateWord::generation(w);
  while (StateWord::generation(w) == generation && StateWord::state(w) == SlotState::handed) {
    // (R4) acquire, as R1: we now own `due` (the wheel thread's read of it
    // for the claim happens-before, through W1's release) and, if a cancel
    // then wins against our Writing (C2), the task we destroy (R3). Nothing
    // of ours to publish yet (R2 does). It races B1, C4, X2 and L3 on this
    // word: one CAS wins; a failure reloads the word (acquire, as the load).
    const std::uint64_t writing = StateWord::bumped(w, SlotState::writing);
    if (slot.word.compare_exchange_weak(w, writing, std::memory_order_acquire, std::memory_order_acquire)) {
      w = writing;
      return true;
    }
  }
  return false;  // started, or cancelled: the reschedule lost
}
}  // namespace

bool ProducerOps::reschedule(TimerId id, TimePoint due, ProducerQueueToken* token, LaneCore* lane) {
  config_.check_due_in_range("reschedule", due);
  TimerSlot* slot = slot_of(id);
  if (slot == nullptr) return false;
  const std::int64_t due_ns = due.time_since_epoch().count();
  LaneRunsHold hold;
  bool taken_back = false;  // R4: the run was in `lane`'s ready queue; the timer is not filed
  std::uint64_t w = slot->word.load(std::memory_order_acquire);
  Backoff backoff;
  for (;;) {
    w = past_writing(*slot, w, id.generation(), backoff);  // another thread is rescheduling this timer
    if (StateWord::generation(w) != id.generation()) return false;
    const SlotState s = StateWord::state(w);
    if (s == SlotState::handed && lane != nullptr) {
      // hold.enter fails once shutdown began: the run is then shutdown's
      // (X2) or goes ahead as a final run.
      if (!is_own_ready_run(slab_, *slot, id.slot(), *lane) || !hold.enter(*lane, lifecycle_.stopped) ||
          !take_back_ready_run(*slot, w)) {
        return false;
      }
      taken_back = true;
      break;
    }
    if (s != SlotState::pending) return false;
    const std::uint64_t writing = StateWord::with_state(w, SlotState::writing);
    // (R1) acquire: we now own `due`; release is not needed (nothing written yet).
    if (slot->word.compare_exchange_weak(w, writing, std::memory_order_acquire, std::memory_order_acquire)) {
      w = writing;
      break;
    }
  }
  // w is our Writing word (R1's, or R4's with its new version).
  const std::int64_t old_due = slot->due_ns.load(std::memory_order_relaxed);
  // The timer's own shard, for the command below. Relaxed: we own the
  // slot's fields from R1 (or R4) until R2. Read before R2: after it the
  // timer may run and its slot be reused by another shard's timer, whose
  // shard a later read would return (that shard would drop the command,
  // model/shards.pml; read here, it goes to the timer's own).
  const unsigned own_shard = slot->shard.load(std::memory_order_relaxed);
  slot->due_ns.store(due_ns, std::memory_order_relaxed);
  // A ManualClock: the new due's call order (call_order.hpp), ours from R1 as the due.
  if (config_.manual()) slab_.extra(id.slot()).order.store(config_.call_order.take(), std::memory_order_relaxed);
  std::uint64_t expected = w;
  // (R2) release: publishes the new due with the new version; the wheel
  // thread's acquire load of the word, then its load of due, then its claim
  // CAS (W1) from that exact word, sees either the old version (and the CAS
  // fails) or this due.
  if (slot->word.compare_exchange_strong(expected, StateWord::bumped(w, SlotState::pending), std::memory_order_release,
                                         std::memory_order_acquire)) {
    counts_.add(Counter::rescheduled);
    // Taken back from a lane's ready queue (R4): not filed since its claim
    // (W1), so the wheel thread files it again as a new timer's ADD (A1),
    // due now by this call's clock reading. Otherwise: later, the wheel
    // finds it at its old (earlier) time and re-files it lazily, no command
    // needed. Earlier: the wheel must re-file it now; so must a later due
    // that is already due now by this call's clock read (read only where it
    // is not the steady clock: due_now_reading).
    ShardSeam& own = shards_[own_shard];
    ProducerQueueToken* const queue_token = shards_.token_for(own, token);
    if (taken_back) {
      poster_.post_and_wake(own, Command::timer(CommandKind::add, id.slot(), id.generation(), due_now_reading()),
                            queue_token, due_ns);
    } else if (due_ns < old_due) {
      poster_.post_and_wake(own, Command::timer(CommandKind::reschedule, id.slot(), id.generation(), due_now_reading()),
                            queue_token, due_ns);
    } else if (const std::optional<std::int64_t> called_at = due_now_reading()) {  // not the steady clock
      if (due_ns <= *called_at) {
        poster_.post_and_wake(own, Command::timer(CommandKind::reschedule, id.slot(), id.generation(), called_at),
                              queue_token, due_ns);
      }
    }
    return true;
  }
  // (R3) The only way R2 fails: a cancel won meanwhile (C2). (The wheel
  // thread never changes a Writing word: an ADD that meets one waits for the
  // next pass.) We still own the slot's fields; finish the cancel: destroy
  // the task, then publish Cancelled. If the timer is filed, the wheel
  // thread reclaims the slot lazily, as after C1 (release: our writes to the
  // slot happen-before its acquire load of Cancelled, so it frees a slot
  // nobody writes any more); if not, we free it.
  CHIME_ASSERT(StateWord::state(expected) == SlotState::cancelling, "R2 failed other than to a cancel (C2)");
  finish_cancel(*slot, expected, id.slot(), token);  // unfiled: the cancel left the freeing to us
  return false;
}

TimerState ProducerOps::state(TimerId id) const noexcept {
  const TimerSlot* slot = slot_of(id);
  if (slot == nullptr) return TimerState::unknown;
  const std::uint64_t w = slot->word.load(std::memory_order_acquire);
  if (StateWord::generation(w) != id.generation()) return TimerState::unknown;
  switch (StateWord::state(w)) {
    case SlotState::pending:
    case SlotState::writing:
    case SlotState::handed:  // handed over, not started: a cancel still wins
      return TimerState::pending;
    case SlotState::running:
    case SlotState::running_cancelled:  // cancelled, but its last run is in progress
      return TimerState::running;
    case SlotState::fired:
      return TimerState::fired;
    case SlotState::cancelling:
    case SlotState::cancelled:
      return TimerState::cancelled;
    default:
      return TimerState::unknown;
  }
}

}  // namespace chime::detail
