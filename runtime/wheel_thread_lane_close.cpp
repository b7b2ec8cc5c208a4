// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_lane_close.cpp: closing a lane on its shard's wheel thread
// (lanes.cpp, close_lane): the lane's filed timers and held runs are
// cancelled (L1-L3, timer_state.hpp).
#include "wheel_thread.hpp"

#include <algorithm>

#include "lane_core.hpp"
#include "timer_counts.hpp"
#include "wheel_thread_pass.hpp"

namespace chime::detail {

using namespace pass;

// (L1, L2) Wheel thread: a timer of a closed lane, filed or being filed
// (Pending, or a reschedule or cancel in flight) or just claimed by us
// (Handed, L2): Cancelled, counted, task destroyed, slot freed. If a
// producer's cancel won first, only the freeing is ours.
void WheelThread::cancel_for_closed_lane(TimerSlot& slot, std::uint32_t index) {
  // A reschedule or cancel in flight settles first, and again after a failed CAS.
  for (std::uint64_t w = settled_word(slot);; w = settled(slot, w)) {
    const SlotState s = StateWord::state(w);
    if (s == SlotState::cancelled) {
      if (slab_.has_task(slot, index)) {
        slab_.reset_task(slot, index);  // C4 while we held the claim: the holder frees it
        wt().retired->add(index);
      } else {
        reclaim(slot, index);  // a zombie (C1/K1 or C2/R3)
      }
      return;
    }
    CHIME_ASSERT(s == SlotState::pending || s == SlotState::handed, "a closed lane's timer the wheel holds");
    // acq_rel: acquire for the task (destroyed here); release so a reader of
    // Cancelled sees the timer settled.
    // The filed bit is cleared with it: the slot is freed here, not owed.
    if (slot.word.compare_exchange_weak(w, StateWord::unfiled(StateWord::with_state(w, SlotState::cancelled)),
                                        std::memory_order_acq_rel, std::memory_order_acquire)) {
      counts_.end_cancelled_timer();
      slab_.reset_task(slot, index);
      CHIME_ASSERT(!slot.alarm.filed(), "a closed lane's timer is out of the wheel when cancelled");
      wt().retired->add(index);
      return;
    }
  }
}

// Wheel thread, serving a close_lane command: cancels every timer of the
// closed lane that is filed (in the wheel or on the overdue list).
void WheelThread::close_lane_on_wheel(LaneCore* lane) {
  wt().sweep_buffer.clear();
  wt().wheel.for_each([&](std::uint32_t index) {
    if (slab_.lane_of(slab_[index], index) == lane && lane_closed(slab_, slab_[index], index)) {
      // Out of memory, one not listed is cancelled when its alarm comes up (L2).
      try {
        wt().sweep_buffer.push_back(index);
      } catch (const std::bad_alloc&) {
      }
    }
  });
  for (std::uint32_t index : wt().sweep_buffer) {
    wt().wheel.remove(index);
    cancel_for_closed_lane(slab_[index], index);
  }
  std::size_t kept = 0;
  for (std::uint32_t index : wt().overdue) {
    TimerSlot& slot = slab_[index];
    if (slab_.lane_of(slot, index) == lane && lane_closed(slab_, slot, index)) {
      cancel_for_closed_lane(slot, index);
    } else {
      wt().overdue[kept++] = index;
    }
  }
  wt().overdue.resize(kept);
  kept = 0;
  for (const WheelThreadState::ManualReady& r : wt().manual_ready) {
    TimerSlot& slot = slab_[r.index];
    if (slab_.lane_of(slot, r.index) == lane && lane_closed(slab_, slot, r.index)) {
      cancel_for_closed_lane(slot, r.index);
    } else {
      wt().manual_ready[kept++] = r;
    }
  }
  if (kept != wt().manual_ready.size()) {
    wt().manual_ready.resize(kept);
    wt().manual_ready_stale = true;  // the heap is made again at the next step
  }
  cancel_held_runs_of(lane);
  wt().retired->flush();
}

// Runs of a closing lane that this wheel thread claimed but holds (out of
// memory, never handed over: hand_over) are cancelled as its ready runs
// are (L3), so none reaches the lane's core once another Lane reuses it. A
// record whose claim no longer holds (R4 took the run back) is stale:
// dropped.
void WheelThread::cancel_held_runs_of(LaneCore* lane) {
  WheelThreadState& s = wt();
  const auto cancel_held = [&](const Dispatch& d) {
    TimerSlot& slot = slab_[d.slot];
    std::uint64_t w = slot.word.load(std::memory_order_acquire);
    if (!StateWord::holds_claim(w, d.generation, d.version)) return;
    while (StateWord::state(w) != SlotState::cancelled) {  // C4 (or shutdown's X2) won: we only free it
      CHIME_ASSERT(StateWord::state(w) == SlotState::handed, "a held run is handed or cancelled");
      // (L3) acq_rel, as C4.
      if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        counts_.end_cancelled_timer();
        break;
      }
    }
    slab_.reset_task(slot, d.slot);
    s.retired->add(d.slot);
  };
  if (!lane->batch.empty()) [[unlikely]] {
    for (const Dispatch& d : lane->batch) cancel_held(d);
    lane->batch.clear();
    s.touched_lanes.erase(std::remove(s.touched_lanes.begin(), s.touched_lanes.end(), lane), s.touched_lanes.end());
  }
  std::size_t kept = 0;
  for (const Dispatch& d : s.lane_spill) {
    const TimerSlot& slot = slab_[d.slot];
    if (!StateWord::holds_claim(slot.word.load(std::memory_order_acquire), d.generation, d.version)) continue;
    if (slab_.lane_of(slot, d.slot) == lane) {
      cancel_held(d);
    } else {
      s.lane_spill[kept++] = d;
    }
  }
  s.lane_spill.resize(kept);
}

}  // namespace chime::detail
