// runtime/worker_pool.cpp: the workers, and what happens around one run.
//
// Who runs what: the wheel thread claims a timer (W1) and hands a Dispatch to
// the pool through a moodycamel BlockingConcurrentQueue (one producer: the
// wheel thread, with its token, so the hand-off is FIFO); any free worker
// takes it. With workers = 0, the wheel thread calls run() itself.
//
// After the callback returns (or throws: caught, counted, passed to
// on_error), the worker finishes the timer (timer_state.hpp):
// - one-shot: Running -> Fired (F1), free the slot;
// - periodic: store the next due, Running -> Pending (F2) and post an ADD (or,
//   inline on the wheel thread, file it directly) so
//   the wheel files it again (so runs never overlap: the next run is filed
//   only after this one returned); if a cancel won meanwhile (C3), free it;
// - a periodic's final run (shutdown(fire_pending)): Running -> Fired (F3).
// Then it counts the run (completed_), and wakes the wheel thread if a flush
// waits for runs.
//
// Race: cancel vs a periodic run in progress.
//   producer                                   worker
//   CAS Running -> Cancelled (C3), true        callback returns
//                                              CAS Running -> Pending (F2) fails
//                                              free the slot; no further run
// Whichever CAS comes first decides; if F2 wins, the cancel sees Pending and
// takes C1 instead (and the next run never starts).
#include <algorithm>

#include "runtime_core.hpp"

namespace chime::detail {

void set_running_callback(const RuntimeCore* core) noexcept;  // producer_ops.cpp

void RuntimeCore::worker_main() {
  moodycamel::ConsumerToken token(handoff_);
  for (;;) {
    Dispatch d;
    handoff_.wait_dequeue(token, d);
    if (d.flags & Dispatch::stop) return;
    run(d);
  }
}

void RuntimeCore::run(const Dispatch& d) {
  TimerSlot& slot = slab_[d.slot];
  const TimerId id(d.slot, d.generation);
  const Firing firing{id, TimePoint(Duration(d.due_ns)), TimePoint(Duration(d.fired_at_ns)), d.missed};
  if (!(d.flags & Dispatch::drained)) {
    // In 128 bits: a due time far in the past could overflow the difference.
    const __int128 late = static_cast<__int128>(clock_->now().time_since_epoch().count()) - d.due_ns;
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
  fired_.add();

  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  if (!StateWord::periodic(w)) {
    // (F1) release: the run's effects happen-before whoever reads Fired.
    // Only this worker may leave Running for a one-shot: a plain store.
    slot.word.store(StateWord::with_state(w, SlotState::fired), std::memory_order_release);
    end_timer();
    retire(slot, d.slot);
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
    retire(slot, d.slot);
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
        post_and_wake(Command{CommandKind::add, d.slot, d.generation, nullptr}, nullptr,
                      slot.due_ns.load(std::memory_order_relaxed));
      }
    } else {
      retire(slot, d.slot);  // cancelled while running (C3)
    }
  }

  // (F-W) Count the run, then look whether the wheel thread waits for runs
  // (it sets the flag, fences, then reads completed_): one of us sees the other.
  completed_.fetch_add(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!workers_.empty() && wheel_waits_for_workers_.load(std::memory_order_relaxed)) wake_.wake();
}

}  // namespace chime::detail
