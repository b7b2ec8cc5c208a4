// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_manual.cpp: a ManualClock's steps: one timer at a time,
// in (due, call order) order (wheel_thread.cpp has the pass).
//
// A manual clock (ManualClock; design.md, "Clocks"): no timer runs between
// calls. Passes apply commands whenever they come, but advance the wheel and
// run timers only while a flush waits (may_fire), and only to the reading
// of the latest flush (manual_release_ns), which is each run's fired_at.
// There is no slack and no interval rule, and a due already passed at
// application waits for the next flush like any other. The timers due by
// that reading run one at a time, in (due, call order) order
// (advance_manual; call_order.hpp): a step, taken only by a pass that
// emptied the queue while no run of this shard is in flight
// (manual_run_in_flight), moves every alarm due by the reading onto the
// ready heap (manual_ready) and claims its earliest timer; the next step
// waits until that run has completed, so what its callback scheduled,
// cancelled or rescheduled is applied before the next timer is chosen. A
// timer a callback schedules due by the reading runs in the same flush, in
// its order. With several shards the flush steps them itself, with stepped
// requests that let a shard claim only what comes before every other
// shard's next (FlushRequest::stepped; settle_stepped_flush;
// RuntimeCore::flush_in_call_order): one order over every shard. drain()
// and shutdown(fire_pending) begin with a flush. So which
// timers run, in which order, with which due, missed and fired_at, depends
// only on the calls; and producers never wake the wheel for a due (sleep's
// bound).
#include "wheel_thread.hpp"

#include <algorithm>

#include "requests.hpp"
#include "wheel_thread_pass.hpp"

namespace chime::detail {

using namespace pass;

namespace {
// The ready heap's order (a ManualClock, "A manual clock" above): `a`
// runs after `b`; the heap's front runs first. Call orders are unique, so
// no two timers tie.
bool ready_later(const WheelThreadState::ManualReady& a, const WheelThreadState::ManualReady& b) noexcept {
  return a.due != b.due ? a.due > b.due : a.order > b.order;
}
}  // namespace

bool WheelThread::may_fire() noexcept { return !config_.manual() || !wt().flushes.empty(); }

// A manual clock ("A manual clock" above): one step. Every alarm due by
// now_ns leaves the wheel and, with the overdue list, joins the ready heap;
// then the heap's earliest timer is claimed (zombies and timers moved later
// on the way are reclaimed or re-filed). Out of memory, what left the wheel
// waits on the overdue list for the next step.
void WheelThread::advance_manual(std::int64_t now_ns) {
  WheelThreadState& s = wt();
  if (!room_for_advance()) [[unlikely]]
    return;
  s.wheel_fired.clear();
  fire_due_alarms(now_ns);
  // room_for_advance made room on the overdue list for every fired alarm.
  for (const auto& fired : s.wheel_fired) s.overdue.push_back(fired.second);
  s.wheel_fired.clear();
  if (!make_room(s.manual_ready, s.overdue.size())) [[unlikely]] {
    s.pass_out_of_memory = true;
    return;
  }
  const auto later = ready_later;
  if (s.manual_ready_stale) refresh_manual_ready();
  for (const std::uint32_t index : s.overdue) {
    s.manual_ready.push_back({slab_[index].due_ns.load(std::memory_order_relaxed),
                              slab_.extra(index).order.load(std::memory_order_relaxed), index});
    std::push_heap(s.manual_ready.begin(), s.manual_ready.end(), later);
  }
  s.overdue.clear();
  s.awaiting_writer = false;
  // An advance cut short has not fired every alarm due by now_ns: one still
  // in the wheel may come before the heap's earliest. Nothing is claimed
  // until it has (the next pass comes at once).
  if (s.advance_cut_short) return;
  // A stepped flush (several shards) allows runs below its `below` only,
  // and none once a call has set a due since its first claim: the flush
  // then looks at every shard again (RuntimeCore::flush_in_call_order).
  ReadyKey below{INT64_MAX, UINT64_MAX};
  const std::uint64_t taken = config_.call_order.taken();
  for (const FlushRequest* f : s.flushes) {
    if (!f->stepped) continue;
    if (f->claimed && f->order_at_claim != taken) return;
    below = std::min(below, f->below);
  }
  const std::int64_t boundary = s.wheel.now_interval_num_start().time_since_epoch().count();
  const std::uint64_t claimed = s.claimed;
  // The lane of the step's first run, if it is a lane's: the runs of that
  // lane next in order go with it, as one batch its thread runs in order.
  const LaneCore* batch_lane = nullptr;
  while (!s.manual_ready.empty() && !s.awaiting_writer) {
    if (!(ReadyKey{s.manual_ready.front().due, s.manual_ready.front().order} < below)) break;
    if (s.claimed != claimed) {
      const std::uint32_t top = s.manual_ready.front().index;
      if (batch_lane == nullptr || !slab_[top].on_lane() || slab_.lane_of(slab_[top], top) != batch_lane) {
        break;
      }
    }
    std::pop_heap(s.manual_ready.begin(), s.manual_ready.end(), later);
    WheelThreadState::ManualReady next = s.manual_ready.back();
    s.manual_ready.pop_back();
    const TimerSlot& slot = slab_[next.index];
    // acquire: pairs with R2's release, so the due and order read next are
    // at least that reschedule's. A due moved since the key was read (a
    // touch, which posts no command) takes its place again with its new key.
    const std::uint64_t w = slot.word.load(std::memory_order_acquire);
    const std::int64_t due = slot.due_ns.load(std::memory_order_relaxed);
    if (StateWord::state(w) == SlotState::pending && due != next.due) {
      s.manual_ready.push_back({due, slab_.extra(next.index).order.load(std::memory_order_relaxed), next.index});
      std::push_heap(s.manual_ready.begin(), s.manual_ready.end(), later);
      continue;
    }
    const std::uint64_t before = s.claimed;
    consider(next.index, boundary, now_ns, now_ns);
    if (s.claimed != before && before == claimed) {
      for (FlushRequest* f : s.flushes) {
        if (!f->stepped) continue;
        f->claimed = true;
        f->order_at_claim = taken;
      }
      if (!slot.on_lane()) break;  // a worker's run (or the wheel thread's): alone
      batch_lane = slab_.lane_of(slot, next.index);
    }
  }
}

// A stepped flush (FlushRequest::stepped) is served once its shard can
// claim nothing more for it: no run in flight, the wheel at its target,
// and the ready heap empty, its earliest at or past `below`, or a due set
// since its first claim. It answers with the earliest ready key by its
// target. A key read before a touch moved its timer later only makes the
// flush step this shard once more (the step re-files it).
bool WheelThread::settle_stepped_flush(FlushRequest& f, std::uint64_t completed_snapshot) {
  const WheelThreadState& s = wt();
  if (manual_run_in_flight(completed_snapshot) || s.advance_cut_short || s.awaiting_writer || !s.overdue.empty()) {
    return false;
  }
  if (s.advanced_to_ns < std::min(f.target_ns, config_.max_wheel_now_ns)) return false;
  std::optional<ReadyKey> earliest;
  if (!s.manual_ready.empty() && s.manual_ready.front().due <= f.target_ns) {
    earliest = ReadyKey{s.manual_ready.front().due, s.manual_ready.front().order};
  }
  const bool may_claim =
      earliest && *earliest < f.below && (!f.claimed || f.order_at_claim == config_.call_order.taken());
  if (may_claim) return false;
  f.earliest = earliest;
  return true;
}

// The ready heap's keys read again, after a reschedule moved a due earlier
// while its timer waited there (apply's RESCHEDULE).
void WheelThread::refresh_manual_ready() {
  WheelThreadState& s = wt();
  for (WheelThreadState::ManualReady& r : s.manual_ready) {
    r.due = slab_[r.index].due_ns.load(std::memory_order_relaxed);
    r.order = slab_.extra(r.index).order.load(std::memory_order_relaxed);
  }
  std::make_heap(s.manual_ready.begin(), s.manual_ready.end(), ready_later);
  s.manual_ready_stale = false;
}

// A run this shard claimed is held (not handed over: out of memory), or
// handed over and not yet completed.
bool WheelThread::manual_run_in_flight(std::uint64_t completed) noexcept {
  const WheelThreadState& s = wt();
  return completed < s.dispatched || !s.dispatch_batch.empty() || !s.touched_lanes.empty() || !s.lane_spill.empty();
}

}  // namespace chime::detail
