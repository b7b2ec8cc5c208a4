// runtime/worker_pool.cpp: the workers, and what happens around one run.
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
// starts. After the callback returns (or throws: caught, counted, passed to
// on_error), the worker finishes the timer (timer_state.hpp):
// - one-shot: Running -> Fired (F1), free the slot;
// - periodic: store the next due, Running -> Pending (F2) and post an ADD (or,
//   inline on the wheel thread, file it directly) so the wheel files it
//   again (so runs never overlap: the next run is filed only after this one
//   returned); if a cancel won meanwhile (C3), free it;
// - a periodic's final run (shutdown(fire_pending)): Running -> Fired (F3).
// Per batch, not per run: the clock is read once (for the lateness
// samples), `fired` and `completed_` are added once, freed slots go back to
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
//   CAS Running -> Cancelled (C3), true        callback returns
//                                              CAS Running -> Pending (F2) fails
//                                              free the slot; no further run
// Whichever CAS comes first decides; if F2 wins, the cancel sees Pending and
// takes C1 instead (and the next run never starts).
#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime_core.hpp"

namespace chime::detail {

void set_running_callback(const RuntimeCore* core) noexcept;  // producer_ops.cpp

namespace {
// Records a worker takes per dequeue: enough to amortize the dequeue and the
// per-batch bookkeeping, few enough that one worker does not take a whole
// burst while another idles.
constexpr std::size_t kWorkerBatch = 8;
}  // namespace

void RuntimeCore::worker_main() {
  moodycamel::ConsumerToken token(handoff_);
  RetiredSlots retired(slab_);
  Dispatch batch[kWorkerBatch];
  for (;;) {
    const std::size_t n = handoff_.wait_dequeue_bulk(token, batch, kWorkerBatch);
    // Stop records come after every run (same producer token: FIFO), so
    // they end their batch. One is ours; any others we took belong to the
    // other workers: put them back.
    std::size_t runs = n;
    while (runs != 0 && (batch[runs - 1].flags & Dispatch::stop) != 0) --runs;
    run_batch(batch, runs, retired);
    if (runs != n) {
      for (std::size_t k = runs + 1; k < n; ++k) {
        while (!handoff_.enqueue(batch[k])) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return;
    }
  }
}

void RuntimeCore::run_batch(const Dispatch* d, std::size_t n, RetiredSlots& retired) {
  if (n == 0) return;
  const std::int64_t now = clock_->now().time_since_epoch().count();  // once per batch
  std::uint64_t ran = 0;
  for (std::size_t i = 0; i < n; ++i) {
    CHIME_ASSERT((d[i].flags & Dispatch::stop) == 0, "a stop record before the end of a batch");
    if (run(d[i], now, retired)) ++ran;
  }
  if (ran != 0) fired_.add(ran);
  retired.flush();
  // (F-W) Count the batch, then look whether the wheel thread waits for runs
  // (it sets the flag, fences, then reads completed_): one of us sees the
  // other. release: the runs' effects (and on_error calls, counters)
  // happen-before a flush that acquires this count.
  completed_.fetch_add(n, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!workers_.empty() && wheel_waits_for_workers_.load(std::memory_order_relaxed)) wake_.wake();
}

// Runs one handed-over timer. Returns true iff its callback ran (false: a
// cancel won before it started).
bool RuntimeCore::run(const Dispatch& d, std::int64_t now_ns, RetiredSlots& retired) {
  TimerSlot& slot = slab_[d.slot];
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  for (;;) {
    CHIME_ASSERT(StateWord::generation(w) == d.generation, "a handed-over slot was reused before its run");
    if (StateWord::state(w) == SlotState::cancelled) {
      // C4 won: the run never starts. We hold the dispatch, so we free it;
      // the canceller already counted and ended the timer.
      slot.task.reset();
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
  const TimerId id(d.slot, d.generation);
  const Firing firing{id, TimePoint(Duration(d.due_ns)), TimePoint(Duration(d.fired_at_ns)), d.missed};
  if (!(d.flags & Dispatch::drained)) {
    // In 128 bits: a due time far in the past could overflow the difference.
    const __int128 late = static_cast<__int128>(now_ns) - d.due_ns;
    lateness_.record(late > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(late));
  }
  set_running_callback(this);
  try {
    slot.task(firing);
  } catch (...) {
    callback_errors_.add();
    if (options_.on_error) {
      try {
        options_.on_error(id, std::current_exception());
      } catch (...) {
        // on_error must not take the worker down; nothing else to tell.
      }
    }
  }
  set_running_callback(nullptr);

  w = slot.word.load(std::memory_order_acquire);
  if (!StateWord::periodic(w)) {
    CHIME_ASSERT(StateWord::state(w) == SlotState::running, "only the worker leaves Running for a one-shot");
    // (F1) release: the run's effects happen-before whoever reads Fired.
    // Only this worker may leave Running for a one-shot: a plain store.
    slot.word.store(StateWord::with_state(w, SlotState::fired), std::memory_order_release);
    end_timer();
    slot.task.reset();
    retired.add(d.slot);
  } else if (d.flags & Dispatch::final) {
    // (F3) Only from Running: if a cancel (C3) won, the state stays Cancelled
    // (and that cancel ended the timer).
    bool f3 = false;
    while (StateWord::state(w) == SlotState::running) {
      if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::fired), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        f3 = true;
        break;
      }
    }
    if (f3) end_timer();
    slot.task.reset();
    retired.add(d.slot);
  } else {
    // We own `due` while Running. A next run past TimePoint::max() saturates
    // there: beyond the horizon, it is parked and never runs.
    const std::int64_t next = (d.flags & Dispatch::keep_due)               ? d.due_ns
                              : d.due_ns > INT64_MAX - slot.period_ns ? INT64_MAX
                                                                        : d.due_ns + slot.period_ns;
    slot.due_ns.store(next, std::memory_order_relaxed);
    bool rearmed = false;
    while (StateWord::state(w) == SlotState::running) {
      // (F2) acq_rel: release publishes the new due with the new version.
      if (slot.word.compare_exchange_weak(w, StateWord::bumped(w, SlotState::pending), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        rearmed = true;
        break;
      }
    }
    if (rearmed) {
      if (workers_.empty()) {
        // Inline, on the wheel thread, outside any wheel iteration: file it
        // now (a re-arm that is already due lands on the overdue list and
        // runs next pass), instead of a command that would keep the queue
        // from ever emptying under sustained periodic load.
        slot.filed_generation = d.generation;
        file(d.slot, slot);
      } else {
        post_and_wake(Command{CommandKind::add, d.slot, d.generation, nullptr}, nullptr, next);
      }
    } else {
      CHIME_ASSERT(StateWord::state(w) == SlotState::cancelled, "F2 lost to something other than C3");
      slot.task.reset();
      retired.add(d.slot);  // cancelled while running (C3)
    }
  }
  return true;
}

}  // namespace chime::detail
