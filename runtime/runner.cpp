// SPDX-License-Identifier: BSL-1.0
// runtime/runner.cpp: the workers' loop, and what happens around one run
// (runner.hpp).
//
// Who runs what: the wheel thread claims timers (W1: Handed) and hands their
// Dispatch records to the pool in one bulk enqueue per pass through a
// moodycamel BlockingConcurrentQueue (one producer: the wheel thread, with
// its token, so the hand-off is FIFO); a worker takes up to kWorkerBatch
// records per dequeue. With workers = 0, the wheel thread runs the batch
// itself (run_batch).
//
// Per run: start it (B1: Handed -> Running); if a cancel won meanwhile (C4:
// Cancelled), skip it and free the slot: cancel wins until the callback
// starts. A lane's record whose run a reschedule on the lane's thread took
// back (R4: the word's version moved on) is skipped and frees nothing.
// After the callback returns (or throws: caught, counted, passed to
// on_error), the worker finishes the timer (timer_state.hpp):
// - one-shot: Running -> Fired (F1), free the slot;
// - periodic: store the next due, Running -> Pending (F2) and post an ADD (or,
//   inline on the wheel thread, hand it back to the wheel thread, which
//   files it after the batch) so the wheel files it
//   again (so runs never overlap: the next run is filed only after this one
//   returned); if a cancel won meanwhile (C3), free it;
// - a periodic's final run (shutdown(fire_pending)): Running -> Fired (F3).
// Per batch, not per run: the clock is read once (for the lateness
// samples), `fired` and `seam.completed` are added once, freed slots go back to
// the free list in one bulk enqueue, and the wheel thread is woken (if a
// flush waits for runs) at most once.
//
// Race: cancel vs a run handed over but not started.
//   producer                                   worker
//   CAS Handed -> Cancelled (C4), true         CAS Handed -> Running (B1) fails
//                                              skip the run, free the slot
// Whichever CAS comes first decides; if B1 wins, the cancel sees Running
// (one-shot: false; periodic: C3, no further run).
//
// Race: cancel vs a periodic run in progress.
//   producer                                   worker
//   CAS Running -> RunningCancelled (C3), true callback returns
//                                              CAS Running -> Pending (F2) fails
//                                              RunningCancelled -> Cancelled (F4),
//                                              free the slot; no further run
// Whichever CAS comes first decides; if F2 wins, the cancel sees Pending and
// takes C1 instead (and the next run never starts).
#include <algorithm>
#include <chrono>
#include <thread>
#include <type_traits>

#include "runner.hpp"

namespace chime::detail {

namespace {
// The callback this thread is running, if any (run sets it): its runtime's
// Runner and its id.
thread_local const Runner* tls_running_callback_of = nullptr;
thread_local TimerId tls_running_id;
// Its first use registers no destructor (glibc registers one with calloc,
// and aborts the process if that fails: a worker's first run out of memory).
static_assert(std::is_trivially_destructible_v<TimerId>);

void set_running_callback(const Runner* runner, TimerId id) noexcept {
  tls_running_callback_of = runner;
  tls_running_id = id;
}
}  // namespace

bool report_to_running_callback(std::exception_ptr e) noexcept {
  if (tls_running_callback_of == nullptr) return false;
  // The runtime's counters and on_error are safe to use from its callback.
  tls_running_callback_of->report_callback_exception(tls_running_id, std::move(e));
  return true;
}

bool Runner::in_callback() const noexcept { return tls_running_callback_of == this; }
TimerId Runner::current_run() const noexcept { return in_callback() ? tls_running_id : TimerId{}; }

void Runner::throw_if_in_callback(const char* what) const {
  if (in_callback()) {
    throw std::logic_error(std::string("chime::Runtime::") + what +
                           " called from inside a timer callback: it would wait for itself");
  }
}

namespace {
// Records a worker takes per dequeue: enough to amortize the dequeue and the
// per-batch bookkeeping, few enough that one worker does not take a whole
// burst while another idles.
constexpr std::size_t kWorkerBatch = 8;
}  // namespace

void Runner::worker_main(WorkerPool& pool) {
  moodycamel::ConsumerToken token(pool.handoff);
  RetiredSlots retired(slab_);
  Dispatch batch[kWorkerBatch];
  for (;;) {
    const std::size_t n = pool.handoff.wait_dequeue_bulk(token, batch, kWorkerBatch);
    // Stop records come after every run (same producer token: FIFO), so
    // they end their batch. One is ours; any others we took belong to the
    // other workers: put them back.
    std::size_t runs = n;
    while (runs != 0 && (batch[runs - 1].flags & Dispatch::stop) != 0) --runs;
    run_batch(batch, runs, retired, Place::worker);
    if (runs != n) {
      for (std::size_t k = runs + 1; k < n; ++k) {
        retry_until_memory([&] { return pool.handoff.enqueue(batch[k]); });
      }
      return;
    }
  }
}

std::size_t Runner::run_batch(const Dispatch* d, std::size_t n, RetiredSlots& retired, Place where,
                              std::vector<std::uint32_t>* rearmed_slots) {
  if (n == 0) return 0;
  // Per batch: one read of the runtime clock (for the lateness samples)
  // unless it is the steady clock, whose reads the run times need anyway;
  // then one steady-clock read per run, at its end, which is also the next
  // run's start.
  std::int64_t steady = config_.steady_clock.now().time_since_epoch().count();
  const bool steady_runtime_clock = config_.clock_kind == RuntimeConfig::ClockKind::steady;
  const std::int64_t clock_now = steady_runtime_clock ? 0 : config_.clock->now().time_since_epoch().count();
  std::uint64_t ran = 0;
  for (std::size_t i = 0; i < n; ++i) {
    CHIME_ASSERT((d[i].flags & Dispatch::stop) == 0, "a stop record before the end of a batch");
    if (run(d[i], steady_runtime_clock ? steady : clock_now, steady, retired, where, rearmed_slots)) ++ran;
  }
  if (ran != 0) counts_.add(Counter::fired, ran);
  retired.flush();
  count_completed(d, n, where == Place::wheel_thread);
  return ran;
}

// A batch's runs, counted in their shards: runs of one shard come in a row
// (a worker's bulk dequeue takes them from one wheel thread's sub-queue; a
// lane and an inline batch have one shard), so this is one count per batch.
void Runner::count_completed(const Dispatch* d, std::size_t n, bool on_wheel_thread) {
  if (shards_.size() == 1) {
    if (on_wheel_thread) {
      shards_[0].completed.fetch_add(n, std::memory_order_release);  // the wheel thread reads it itself
    } else {
      count_completed(0, n);
    }
    return;
  }
  std::size_t i = 0;
  while (i < n) {
    const unsigned k = d[i].shard;
    std::size_t j = i + 1;
    while (j < n && d[j].shard == k) ++j;
    if (on_wheel_thread) {
      shards_[k].completed.fetch_add(j - i, std::memory_order_release);  // the wheel thread reads it itself
    } else {
      count_completed(k, j - i);
    }
    i = j;
  }
}

// (F-W) A worker or a lane counts runs it finished (or skipped), then looks
// whether the wheel thread waits for runs (it sets the flag, fences, then
// reads seam.completed): one of us sees the other. release: the runs' effects
// (and on_error calls, counters) happen-before a flush that acquires this
// count.
void Runner::count_completed(unsigned k, std::uint64_t n) {
  ShardSeam& s = shards_[k];
  s.completed.fetch_add(n, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s.waits_for_workers.load(std::memory_order_relaxed)) s.wake.wake();
}

// Runs one handed-over timer. Returns true iff its callback ran (false: a
// cancel won before it started). `steady_ns` is the steady clock's time at
// the start (the previous run's end); it is set to the time this run ended.
bool Runner::run(const Dispatch& d, std::int64_t clock_now_ns, std::int64_t& steady_ns, RetiredSlots& retired,
                 Place where, std::vector<std::uint32_t>* rearmed_slots) {
  TimerSlot& slot = slab_[d.slot];
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  for (;;) {
    if (!StateWord::holds_claim(w, d.generation, d.version)) {
      // A reschedule on the lane's thread took the run back (R4) while this
      // record waited in the lane's ready queue: the timer is the
      // rescheduler's now (re-filed, or freed by whoever cancelled it). Skip
      // the record and touch nothing of the slot.
      CHIME_ASSERT(where == Place::lane, "only a lane's ready run is taken back (R4)");
      return false;
    }
    if (StateWord::state(w) == SlotState::cancelled) {
      // C4 won: the run never starts. We hold the dispatch, so we free it;
      // the canceller already counted and ended the timer.
      slab_.reset_task(slot, d.slot);
      retired.add(d.slot);
      return false;
    }
    CHIME_ASSERT(StateWord::state(w) == SlotState::handed, "a dispatched timer is handed or cancelled");
    // (B1) acq_rel: acquire pairs with W1/S1 (the task, the fields); release
    // so a canceller that then reads Running sees the run as started.
    if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::running), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
      break;
    }
  }
  const TimerId id(d.slot, d.generation, config_.tag);
  const Firing firing{id, TimePoint(Duration(d.due_ns)), TimePoint(Duration(d.fired_at_ns)), d.missed};
  if (!(d.flags & Dispatch::drained)) {
    // In 128 bits: a due time far in the past could overflow the difference.
    const __int128 late = static_cast<__int128>(clock_now_ns) - d.due_ns;
    counts_.meters().lateness.record(late > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(late));
  }
  set_running_callback(this, id);
  try {
    slab_.run_task(slot, d.slot, firing);
  } catch (...) {
    report_callback_exception(id, std::current_exception());
  }
  set_running_callback(nullptr, TimerId{});
  const std::int64_t start = steady_ns;
  steady_ns = config_.steady_clock.now().time_since_epoch().count();
  const std::int64_t took = steady_ns - start;
  counts_.meters().run_time.record(took);
  if (took > config_.options.slow_run.count()) [[unlikely]] {
    counts_.add(Counter::slow_runs);
    if (config_.options.on_slow_run) {
      try {
        config_.options.on_slow_run(id, Duration(took));
      } catch (...) {
        // like on_error: never takes the worker down
      }
    }
  }
  end_run(slot, d, steady_ns, retired, where, rearmed_slots);
  return true;
}

void Runner::report_callback_exception(TimerId id, std::exception_ptr e) const noexcept {
  counts_.add(Counter::callback_errors);
  if (config_.options.on_error) {
    try {
      config_.options.on_error(id, std::move(e));
    } catch (...) {
      // on_error must not take the worker (or the lane) down; nothing else to tell.
    }
  }
}

namespace {
// The transition that ends a run read the waiter bit: wake the
// cancel_and_wait callers sleeping on the word (timer_state.hpp, WB).
void wake_waiters_if_any(TimerSlot& slot, std::uint64_t old_word) noexcept {
  if (StateWord::has_waiter(old_word)) [[unlikely]]
    futex_wake_all_low_half(slot.word);
}
}  // namespace

// (F1) A one-shot's only run is over.
[[gnu::always_inline]] inline void Runner::end_one_shot(TimerSlot& slot, std::uint64_t w, const Dispatch& d,
                                                        RetiredSlots& retired) {
  CHIME_ASSERT(StateWord::state(w) == SlotState::running, "only the worker leaves Running for a one-shot");
  // The task (and what it captured) is destroyed before the run is
  // published as over: a cancel_and_wait that returns may free what the
  // captures point to.
  slab_.reset_task(slot, d.slot);
  // The timer leaves the count (max_pending, stats().pending) before F1
  // publishes Fired: a thread that sees Fired and schedules at once must
  // find its place free (RuntimeCapacityRelease). Safe to do first: only
  // this worker ends a one-shot that is Running.
  counts_.end_timer();
  // (F1) acq_rel exchange: release so the run's effects (and the count
  // above) happen-before whoever reads Fired; an RMW, so it reads a waiter
  // bit set by WB. Only this worker leaves Running for a one-shot, so the
  // word it writes is w with the state changed (a waiter changes nothing
  // but its bit).
  const std::uint64_t old = slot.word.exchange(StateWord::with_state(w, SlotState::fired), std::memory_order_acq_rel);
  retired.add(d.slot);
  wake_waiters_if_any(slot, old);
}

// (F3, or F4 after C3) A periodic timer's last run, at
// shutdown(fire_pending): it is not re-armed.
void Runner::end_periodic_for_good(TimerSlot& slot, std::uint64_t w, const Dispatch& d, RetiredSlots& retired) {
  slab_.reset_task(slot, d.slot);  // before the run is published as over (as for F1)
  // (F3) Only from Running: if a cancel (C3) won, F4 ends it (and that
  // cancel ended the timer).
  bool f3 = false;
  while (StateWord::state(w) == SlotState::running) {
    if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::fired), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
      f3 = true;
      break;
    }
  }
  if (f3) {
    counts_.end_timer();
  } else {
    CHIME_ASSERT(StateWord::state(w) == SlotState::running_cancelled, "F3 lost to something other than C3");
    w = slot.word.exchange(StateWord::with_state(w, SlotState::cancelled), std::memory_order_acq_rel);  // (F4)
  }
  retired.add(d.slot);
  wake_waiters_if_any(slot, w);
}

// The due of a periodic timer's next run. We own `due` while Running. A
// next run past TimePoint::max() saturates there: beyond the horizon, it is
// parked and never runs. Missed::delay restarts the fixed rate from the end
// of this run (on the runtime clock).
std::int64_t Runner::next_due(const SlotExtra& extra, const Dispatch& d, std::int64_t steady_end_ns) const {
  if (d.flags & Dispatch::keep_due) return d.due_ns;
  std::int64_t base = d.due_ns;
  if (extra.missed_rule() == Missed::delay) {
    base = config_.clock_kind == RuntimeConfig::ClockKind::steady ? steady_end_ns
                                                                  : config_.clock->now().time_since_epoch().count();
  }
  return base > INT64_MAX - extra.period_ns ? INT64_MAX : base + extra.period_ns;
}

// (F2) A periodic timer's next run is armed, and its command (or, on the
// wheel thread, its slot) goes to its shard; (F4) unless a cancel (C3) won
// while it ran: then the run ends and the slot is freed.
void Runner::rearm(TimerSlot& slot, std::uint64_t w, const Dispatch& d, std::int64_t steady_end_ns,
                   RetiredSlots& retired, Place where, std::vector<std::uint32_t>* rearmed_slots) {
  SlotExtra& extra = slab_.extra(d.slot);  // a periodic timer has one (S1)
  const std::int64_t next = next_due(extra, d, steady_end_ns);
  slot.due_ns.store(next, std::memory_order_relaxed);
  // A ManualClock: the next run's call order (call_order.hpp), published by F2 as the due.
  if (config_.manual()) extra.order.store(config_.call_order.take(), std::memory_order_relaxed);
  bool rearmed = false;
  // On the wheel thread the re-arm is filed right here, so F2 also sets the
  // filed bit (A1 in the same CAS); elsewhere the wheel thread's A1 sets it
  // when the REARM arrives.
  const std::uint64_t filed = where == Place::wheel_thread ? StateWord::kFiledBit : 0;
  while (StateWord::state(w) == SlotState::running) {
    // (F2) acq_rel: release publishes the new due with the new version (and
    // the run's effects, for a waiter); the waiter bit is dropped.
    if (slot.word.compare_exchange_weak(w, StateWord::bumped(w, SlotState::pending) | filed, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
      rearmed = true;
      break;
    }
  }
  if (rearmed) {
    wake_waiters_if_any(slot, w);
    if (where == Place::wheel_thread) {
      // Inline, on the wheel thread (d.shard's: the batch's own): the wheel
      // thread files it once the batch is done, instead of a command that
      // would keep the queue from ever emptying under sustained periodic
      // load. F2 above already set the filed bit (the A1 a REARM would have
      // done). Room for the push was made (run_batch).
      CHIME_ASSERT(rearmed_slots != nullptr && rearmed_slots->size() < rearmed_slots->capacity(),
                   "the wheel thread makes room for a batch's re-arms");
      rearmed_slots->push_back(d.slot);
    } else {
      // To the shard that ran it, the timer's own (d.shard is its slot's shard).
      poster_.post_and_wake(shards_[d.shard], Command::timer(CommandKind::rearm, d.slot, d.generation), nullptr, next);
    }
    return;
  }
  // Cancelled while running (C3): (F4) end the run, free the slot.
  CHIME_ASSERT(StateWord::state(w) == SlotState::running_cancelled, "F2 lost to something other than C3");
  slab_.reset_task(slot, d.slot);  // before the run is published as over (as for F1)
  w = slot.word.exchange(StateWord::with_state(w, SlotState::cancelled), std::memory_order_acq_rel);
  retired.add(d.slot);
  wake_waiters_if_any(slot, w);
}

// After the callback returned: finish the timer (F1, F2, F3 or F4) and wake
// whoever waits for the run to end.
void Runner::end_run(TimerSlot& slot, const Dispatch& d, std::int64_t steady_end_ns, RetiredSlots& retired, Place where,
                     std::vector<std::uint32_t>* rearmed_slots) {
  const std::uint64_t w = slot.word.load(std::memory_order_acquire);
  if (!StateWord::periodic(w)) {
    end_one_shot(slot, w, d, retired);
  } else if (d.flags & Dispatch::final) {
    end_periodic_for_good(slot, w, d, retired);
  } else {
    rearm(slot, w, d, steady_end_ns, retired, where, rearmed_slots);
  }
}

}  // namespace chime::detail
