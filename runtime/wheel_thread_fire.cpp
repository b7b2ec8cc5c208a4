// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_fire.cpp: a pass's advance and hand-over: what is due
// leaves the wheel and the overdue list, is claimed (W1) and handed to the
// workers or lanes; drains, zombie sweeps and flushes are served after it
// (wheel_thread.cpp has the pass).
//
// Slack (design.md, "Slack"; slack.hpp): each timer has a slack s, its
// own, RuntimeOptions::slack, or by default proportional to its delay. The
// wheel keeps its grid of precision intervals, but files each timer at its
// fire time (fire_time): the first point of its slack's power-of-two grid at
// or after its due, or, for a slack at or above the precision (the interval
// rule), the last nanosecond of its due's interval. The wheel thread sleeps
// until the earliest fire time (exact_deadline; the end of the earliest
// interval when only interval-rule timers are in it, so that its advance
// fires the slot whole); a pass fires, besides what its advance crosses,
// the alarms of the current interval whose fire time has come
// (fire_past_due, in time order). A wheel alarm, or a timer filed with a
// due already passed, runs once its due is at or before the pass's clock
// read: never early. Producers wake a sleeping wheel thread for a due
// before its wake-up (sleep's bound): a timer's fire time is never before
// its due.
//
//
// No pass does unbounded work (design.md, "Slack"): what a pass applies is
// bounded (kMaxCommandsPerPass), what it fires is what is due, and what it
// moves between the wheel's levels is bounded by moving each level's next
// span down ahead (TimingWheel::cascade_ahead, kCascadeAheadPerPass a
// pass): while some of a span is left to move, the next pass comes at once
// instead of a sleep (ahead_pending), so the wheel enters a span with
// nothing left to cascade, every kCascadeAheadPerPass moves a pass. An
// advance never cascades: it goes only as far as bounded_advance_limit,
// short of the first slot above the lowest level that still holds alarms
// (fire_due_alarms). A wheel thread that wakes late (held off the CPU, or
// asleep through spans with nothing due) thus crosses the spans between in
// one advance but stops before the first one whose alarms were not moved
// down yet; the advance counts as cut short, and the passes that follow at
// once move those alarms down a budget at a time and go on, each pass's
// advance moving nothing between levels. An advance that has fired
// kRefilesPerAdvance touched alarms (to be re-filed at their later dues) is
// cut short too, and the next pass goes on at once. A flush settles only
// once an advance reached its reading in full (advanced_to_ns), so it waits
// for the catch-up. A pass's moves are then at most kCascadeAheadPerPass
// plus kRefilesPerAdvance. What a pass claims is at most kRunsPerPass fired
// alarms (an advance that fired that many is cut short too) plus the timers
// its commands made due now. Still not bounded: a zombie sweep (one pass over the wheel, when cancelled
// timers exceed a quarter of the filed ones). Each shard's longest pass and
// the most moves one pass made are in ShardStats (note_pass).
#include "wheel_thread.hpp"

#include <algorithm>

#include "requests.hpp"
#include "runner.hpp"
#include "wheel_thread_pass.hpp"
#include "worker_pool.hpp"

namespace chime::detail {

using namespace pass;
using Overdue = WheelThreadState::Overdue;

// Room for an advance (advance_and_dispatch) to consider every overdue
// timer and up to fired_limit fired alarms with no allocation: each may be
// re-filed (in its slot's own node: no allocation), put on the overdue
// list again, or claimed (a dispatch, for the workers or a lane). The limit
// is what the lists hold now, beyond the overdue timers; an advance that
// reaches it grows them (grow_fired_limit), so steady state allocates no
// more than the lists' own growth did. False if not even one alarm can be
// fired (out of memory: the advance waits).
bool WheelThread::room_for_advance() noexcept {
  WheelThreadState& s = wt();
  const std::size_t n_overdue = s.overdue.size();
  if (!(make_capacity(s.overdue_order, n_overdue) & make_capacity(s.overdue_scratch, n_overdue) &
        make_room(s.dispatch_batch, n_overdue + 1) & make_room(s.lane_spill, n_overdue + 1) &
        make_capacity(s.overdue, n_overdue + 1))) [[unlikely]] {
    s.pass_out_of_memory = true;
    if (s.overdue_order.capacity() < n_overdue || s.overdue_scratch.capacity() < n_overdue) {
      return false;
    }
  }
  std::size_t k = s.wheel_fired.capacity();
  for (const std::size_t room : {spare(s.dispatch_batch), spare(s.lane_spill), s.overdue.capacity()}) {
    k = std::min(k, room > n_overdue ? room - n_overdue : 0);
  }
  s.fired_limit = k;
  if (k == 0) s.pass_out_of_memory = true;
  return k != 0;
}

// The fired list reached fired_limit: room for twice as many, or false
// (out of memory: the advance is cut short).
bool WheelThread::grow_fired_limit() noexcept {
  WheelThreadState& s = wt();
  const std::size_t n_overdue = s.overdue_order.size();
  const std::size_t k = 2 * s.fired_limit;
  if (make_capacity(s.wheel_fired, k) && make_capacity(s.overdue, n_overdue + k) &&
      make_capacity(s.dispatch_batch, s.dispatch_batch.size() + n_overdue + k) &&
      make_capacity(s.lane_spill, s.lane_spill.size() + n_overdue + k)) {
    s.fired_limit = k;
    return true;
  }
  s.pass_out_of_memory = true;
  return false;
}

// The alarm `a` fired in this advance: onto the fired list (room was made),
// and the advance is cut short once the list is at fired_limit and cannot
// grow. Inside handle_fired: reads the wheel only.
void WheelThread::record_fired(std::uint32_t index) {
  WheelThreadState& s = wt();
  s.wheel_fired.emplace_back(s.wheel.at(index).time_since_epoch().count(), index);
  // An advance fires at most kRunsPerPass alarms: the rest stay in the
  // wheel, Pending, for the next pass, which comes at once.
  if (s.wheel_fired.size() >= kRunsPerPass) throw AdvanceCutShort{};
  if (s.wheel_fired.size() >= s.fired_limit && !grow_fired_limit()) throw AdvanceCutShort{};
  // relaxed: a stale due only misjudges the budget; consider() decides.
  if (slab_[index].due_ns.load(std::memory_order_relaxed) > s.advance_to_ns && ++s.touched_fired >= kRefilesPerAdvance)
      [[unlikely]] {
    throw AdvanceCutShort{};
  }
}

void WheelThread::advance_and_dispatch(std::int64_t now_ns) {
  // Overdue timers (due before the wheel's interval, or due now at their
  // application) go in nondecreasing due order, ties in the order they were
  // filed (posting order for one producer), as Go's runtime does. Copied,
  // not swapped: a swap would hand each buffer's capacity to the other
  // every pass, and the smaller one would allocate again.
  if (!room_for_advance()) [[unlikely]]
    return;  // out of memory: the overdue list and the wheel wait for the next pass
  wt().overdue_order.clear();
  bool sorted = true;
  for (std::uint32_t index : wt().overdue) {
    const std::int64_t due = slab_[index].due_ns.load(std::memory_order_relaxed);
    if (!wt().overdue_order.empty() && due < wt().overdue_order.back().due) sorted = false;
    wt().overdue_order.push_back({due, static_cast<std::uint32_t>(wt().overdue_order.size()), index});
  }
  if (!sorted) sort_overdue();
  wt().overdue.clear();
  wt().awaiting_writer = false;
  wt().wheel_fired.clear();
  fire_due_alarms(now_ns);
  // A wheel alarm runs iff its due is before the boundary, or at or before
  // the clock's time (a timer whose alarm fired is due by then, unless a
  // touch moved it later).
  const std::int64_t wheel_due_now = now_ns;
  // An advance cut short stopped at the start of its last fired alarm's
  // interval, or at its bounded_advance_limit; every alarm it fired is
  // before the interval of now_ns, which is the boundary it would have
  // reached.
  const std::int64_t boundary = (wt().advance_cut_short ? wt().wheel.interval_start(TimePoint(Duration(now_ns)))
                                                        : wt().wheel.now_interval_num_start())
                                    .time_since_epoch()
                                    .count();
  // Merge the two, each in nondecreasing interval order (the wheel's alarms
  // by the time they were filed at, overdue ones by due), so the runs go out
  // in nondecreasing interval order. An overdue timer is due now (its due
  // is at or before now_ns); a wheel alarm runs iff its due (which a touch
  // may have moved later) is before the boundary.
  std::size_t a = 0, b = 0;
  // Ask for the slot lines ahead of consider(), as apply_commands does
  // (both lists' next few: the merge takes from either).
  const std::size_t n_overdue = wt().overdue_order.size(), n_fired = wt().wheel_fired.size();
  for (std::size_t k = 0; k < kPrefetchAhead; ++k) {
    if (k < n_overdue) prefetch_slot_line(wt().overdue_order[k].index);
    if (k < n_fired) prefetch_slot_line(wt().wheel_fired[k].second);
  }
  while (a < wt().overdue_order.size() || b < wt().wheel_fired.size()) {
    if (a + kPrefetchAhead < n_overdue) prefetch_slot_line(wt().overdue_order[a + kPrefetchAhead].index);
    if (b + kPrefetchAhead < n_fired) prefetch_slot_line(wt().wheel_fired[b + kPrefetchAhead].second);
    if (b == wt().wheel_fired.size() ||
        (a < wt().overdue_order.size() && wt().overdue_order[a].due <= wt().wheel_fired[b].first)) {
      const std::uint32_t index = wt().overdue_order[a++].index;
      consider(index, boundary, now_ns, now_ns);
    } else {
      const std::uint32_t index = wt().wheel_fired[b++].second;
      consider(index, boundary, now_ns, wheel_due_now);
    }
  }
  wt().wheel_fired.clear();
}

// Sorts overdue_order (built in filing order) by due, ties in filing
// order. When the dues of this pass span less than 2^33 ns (8.6 s; timers
// due now at their application span a pass's lag), a stable LSD radix sort
// on due - min in three 11-bit digits: linear, where std::sort's n log n
// comparisons of (due, seq) were 6% of schedule-to-fire's CPU (perf).
// Otherwise std::sort on (due, seq), which never allocates. Never allocates
// beyond the scratch reserved at construction (kScratchCapacity) unless the
// list is longer.
void WheelThread::sort_overdue() {
  const std::size_t n = wt().overdue_order.size();
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const Overdue& o : wt().overdue_order) {
    lo = std::min(lo, o.due);
    hi = std::max(hi, o.due);
  }
  constexpr int kDigitBits = 11, kDigits = 3;
  constexpr std::uint64_t kRange = std::uint64_t{1} << (kDigitBits * kDigits);
  if (n < 512 || static_cast<std::uint64_t>(static_cast<__int128>(hi) - lo) >= kRange) {
    std::sort(wt().overdue_order.begin(), wt().overdue_order.end(),
              [](const Overdue& a, const Overdue& b) { return a.due != b.due ? a.due < b.due : a.seq < b.seq; });
    return;
  }
  wt().overdue_scratch.resize(n);
  Overdue* from = wt().overdue_order.data();
  Overdue* to = wt().overdue_scratch.data();
  for (int d = 0; d < kDigits; ++d) {
    const int shift = d * kDigitBits;
    std::uint32_t count[(1u << kDigitBits) + 1] = {};
    auto digit = [&](const Overdue& o) {
      return static_cast<std::uint32_t>((static_cast<std::uint64_t>(o.due - lo) >> shift) & ((1u << kDigitBits) - 1));
    };
    for (std::size_t i = 0; i < n; ++i) ++count[digit(from[i]) + 1];
    for (std::uint32_t b = 0; b < (1u << kDigitBits); ++b) count[b + 1] += count[b];
    for (std::size_t i = 0; i < n; ++i) to[count[digit(from[i])]++] = from[i];  // stable: ties keep their order
    std::swap(from, to);
  }
  // An odd number of passes leaves the result in the scratch buffer.
  if (from != wt().overdue_order.data()) std::copy(from, from + n, wt().overdue_order.data());
}

// Advances the wheel to now_ns and fires the current interval's past
// alarms onto wheel_fired (record_fired), unless cut short (out of room, or
// a pass's budget of touched alarms: then the wheel stopped at the start of
// the last fired alarm's interval; or a slot above the lowest level in the
// way whose alarms are not all moved down ahead yet: then it stopped before
// that slot), and the rest, and what follows, fire next pass. Each shard raises the due limit to its own wheel's, and
// one behind the others files a due beyond its range at the last time it
// accepts (file()).
void WheelThread::fire_due_alarms(std::int64_t now_ns) {
  WheelThreadState& s = wt();
  s.advance_to_ns = now_ns;
  s.touched_fired = 0;
  if (now_ns > s.wheel.now().time_since_epoch().count()) {
    // Never into a slot above the lowest level whose alarms are not all
    // moved down ahead yet (after a late wake-up, one advance can cross
    // several spans): stop before it, and the next pass comes at once, after
    // this pass's cascade_ahead has moved more of it ("No pass does
    // unbounded work" above).
    TimePoint to = s.wheel.bounded_advance_limit(TimePoint(Duration(now_ns)));
    // Never expected: a limit that made no progress two advances in a row
    // while the cascade_ahead between them moved nothing (it moves the slot
    // in the way whenever the limit stops just before it; KeyWheel's G9).
    // Then the advance goes all the way, cascading, rather than spin.
    const bool stuck = to <= s.wheel.now();
    if (stuck && s.advance_stuck && s.wheel.moved_by_last_cascade_ahead() == 0) to = TimePoint(Duration(now_ns));
    s.advance_stuck = stuck;
    if (to.time_since_epoch().count() < now_ns) s.advance_cut_short = true;
    try {
      s.wheel.advance_clock(to, [&](std::uint32_t index) { record_fired(index); });
    } catch (const AdvanceCutShort&) {
      s.advance_cut_short = true;
    }
    s.pass_moves += s.wheel.moved_by_last_advance();
    config_.raise_due_limit(s.wheel.now().time_since_epoch().count());
  }
  if (!s.advance_cut_short) fire_past_due();
  if (!s.advance_cut_short) s.advanced_to_ns = now_ns;
}

// Slack: after the advance, the alarms of the wheel's current interval with
// a time at or before its now go out with this pass, in time order (ties in
// the order the wheel gives). Only when the earliest alarm is in the current
// interval and due (ties by slot index): its time is cached by the wheel until it changes,
// and finding it scans only the current interval's slot.
void WheelThread::fire_past_due() {
  ShardWheel& wheel = wt().wheel;
  const auto min_interval = wheel.min_alarm_interval_num();
  if (!min_interval || *min_interval != wheel.interval_num(wheel.now())) return;
  // The interval rule's alarms sit at their interval's last nanosecond: they
  // run once the interval has ended, never with the clock at that
  // nanosecond (fire_time). A manual clock has no interval rule.
  const std::int64_t now = wheel.now().time_since_epoch().count();
  const std::int64_t last_ns =
      wheel.now_interval_num_start().time_since_epoch().count() + config_.precision.count() - 1;
  const TimePoint until(Duration(now == last_ns && !config_.manual() ? now - 1 : now));
  const auto min_time = wheel.min_alarm_time();
  if (!min_time || *min_time > until) return;
  const std::size_t first = wt().wheel_fired.size();
  try {
    wheel.fire_alarms_until(until, [&](std::uint32_t index) { record_fired(index); });
  } catch (const AdvanceCutShort&) {
    wt().advance_cut_short = true;  // the rest of the interval's past alarms fire next pass
  }
  // std::sort on (time, slot): never allocates (std::stable_sort may).
  std::sort(wt().wheel_fired.begin() + static_cast<std::ptrdiff_t>(first), wt().wheel_fired.end());
}

// A filed timer whose alarm fired (or that was overdue): a timer may run iff
// its current due is before `boundary` (the start of the wheel's interval),
// or at or before `due_now_ns` (overdue timers: the clock's time; INT64_MIN
// for the wheel's alarms, which keep the interval rule).
void WheelThread::consider(std::uint32_t index, std::int64_t boundary, std::int64_t fired_at, std::int64_t due_now_ns) {
  TimerSlot& slot = slab_[index];
  // acquire: pairs with R2/F2's release, so `due` below is at least as new
  // as the version we read; the claim CAS from exactly this word fails if a
  // reschedule published a newer one since.
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  CHIME_ASSERT(StateWord::filed(w), "a filed alarm names a timer not filed");
  for (;;) {
    switch (StateWord::state(w)) {
      case SlotState::pending: {
        const std::int64_t due = slot.due_ns.load(std::memory_order_relaxed);
        if (due >= boundary && due > due_now_ns) {  // pushed later by a reschedule: re-file lazily
          ++wt().pass_moves;
          file(index, slot, false);
          return;
        }
        Dispatch d;
        d.slot = index;
        d.shard = static_cast<std::uint8_t>(seam.index);
        d.generation = StateWord::generation(w);
        d.version = StateWord::version(w);  // W1 keeps it; a take-back (R4) bumps it
        d.due_ns = due;
        d.fired_at_ns = fired_at;
        // A flush waits for this run if any run it covers was due by its
        // target: the earliest one, before skip coalescing moves d.due_ns.
        wt().pass_min_due_ns = std::min(wt().pass_min_due_ns, due);
        const SlotExtra* extra = StateWord::periodic(w) ? &slab_.extra(index) : nullptr;  // S1 made it
        if (extra != nullptr && extra->missed_rule() != Missed::catch_up) {
          // skip, delay: coalesce every run that may run now (due before the
          // boundary, or at or before due_now_ns) into the latest one.
          // In 128 bits: boundary - 1 is below INT64_MIN while the wheel is
          // in its first interval with a clock that started at
          // TimePoint::min() (fuzz: regression-skip_boundary_min), and
          // last - due spans up to 2^64 ns; the result, at most last, fits.
          const __int128 last = std::max<__int128>(static_cast<__int128>(boundary) - 1, due_now_ns);
          const __int128 k = (last - due) / extra->period_ns;
          d.due_ns = static_cast<std::int64_t>(due + k * extra->period_ns);
          d.missed = static_cast<std::uint64_t>(k);
        }
        if (claim(slot, w, d)) return;
        break;  // lost to a cancel or a reschedule: look again
      }
      case SlotState::writing:
      case SlotState::cancelling:
        // A reschedule is in flight (it moves the due, or a cancel won and it
        // will finish the cancel): look again in the next pass, which comes
        // at once (sleep() yields first). Not "at the next interval": its
        // new due may be passed already, and the clock may not move on.
        wt().overdue.push_back(index);
        wt().awaiting_writer = true;
        return;
      case SlotState::cancelled:  // a zombie (C1, or C2 then R3): reclaim it now
        reclaim(slot, index);
        return;
      default:
        CHIME_ASSERT(false, "a filed timer is never handed, running, fired or free");
        return;
    }
  }
}

// (W1) Claims a filed timer for the run `d` from its word `w` (as last
// read; on failure, the word the CAS found): Pending and filed -> Handed,
// the filed bit cleared; then it is no longer ours to file, and the run
// goes to its worker or lane (dispatch). acq_rel: acquire so the task is
// visible to the run; release so a later reader of Handed sees our reads
// (due, period) done. consider() and drain_all() claim through it.
bool WheelThread::claim(TimerSlot& slot, std::uint64_t& w, const Dispatch& d) {
  if (!slot.word.compare_exchange_weak(w, StateWord::claimed(w), std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    return false;
  }
  dispatch(slot, d);
  return true;
}

void WheelThread::dispatch(TimerSlot& slot, const Dispatch& d) {
  wt().pass_min_due_ns = std::min(wt().pass_min_due_ns, d.due_ns);
  if (!slot.on_lane()) {  // the line the claim just wrote
    ++wt().claimed;
    wt().dispatch_batch.push_back(d);
    return;
  }
  const SlotExtra& extra = slab_.extra(d.slot);                 // timer_slab.hpp: written before S1
  LaneCore* lane = extra.lane.load(std::memory_order_relaxed);  // the same
  // acquire: pairs with close_lane's release bump; a timer of a destroyed
  // lane whose close has not reached us yet is cancelled here (L2).
  if (extra.lane_generation != lane->generation.load(std::memory_order_acquire)) [[unlikely]] {
    cancel_for_closed_lane(slot, d.slot);
    return;
  }
  ++wt().claimed;
  // Out of memory (a lane's batch, or the list of touched lanes, cannot
  // grow), the run waits on lane_spill, where room was made for it; while
  // runs wait there, every later one does too, so that each lane gets its
  // runs in the order they were claimed (unspill_lanes).
  if (!wt().lane_spill.empty()) [[unlikely]] {
    spill_for_lane(d);
    return;
  }
  if (lane->batch.empty() && !try_push_back(wt().touched_lanes, lane)) [[unlikely]] {
    spill_for_lane(d);
    return;
  }
  if (!try_push_back(lane->batch, d)) [[unlikely]]
    spill_for_lane(d);
}

void WheelThread::spill_for_lane(const Dispatch& d) {
  CHIME_ASSERT(wt().lane_spill.size() < wt().lane_spill.capacity(), "room is made for every dispatch of a pass");
  wt().lane_spill.push_back(d);
  wt().pass_out_of_memory = true;
}

// Hands this pass's claimed runs over in one batch: one bulk enqueue and one
// semaphore signal for the workers (or, with workers = 0, runs them here,
// in order, outside any wheel iteration). The dispatch count goes up by the
// runs handed over (flush marks compare against it, on this thread). Out of
// memory, what could not be handed over stays in its batch for the next
// pass (the timers are Handed: only their runs end that), and the pass is
// marked.
void WheelThread::hand_over() {
  WheelThreadState& s = wt();
  if (!s.lane_spill.empty()) [[unlikely]]
    unspill_lanes();
  // Lanes first: their runs wait for their threads, the workers' start now.
  // One bulk enqueue and at most one eventfd write per lane and pass.
  std::size_t kept = 0;
  for (LaneCore* lane : s.touched_lanes) {
    const std::size_t done =
        enqueue_in_blocks(lane->ready, *lane->wheel_token, lane->wheel_tail, lane->batch.data(), lane->batch.size());
    s.dispatched += done;
    if (done != 0) lane->signal();
    if (done == lane->batch.size()) [[likely]] {
      lane->batch.clear();
    } else {
      lane->batch.erase(lane->batch.begin(), lane->batch.begin() + static_cast<std::ptrdiff_t>(done));
      s.touched_lanes[kept++] = lane;
      s.pass_out_of_memory = true;
    }
  }
  s.touched_lanes.resize(kept);
  const std::size_t n = s.dispatch_batch.size();
  if (n == 0) return;
  if (pool_.threads.empty()) {
    // A periodic run re-armed here comes back on `rearmed` (Runner::end_run)
    // and is filed once the batch is done (file_rearmed): room for it first.
    if (!make_room(s.overdue, n) || !make_capacity(s.rearmed, n)) [[unlikely]] {
      s.pass_out_of_memory = true;
      return;
    }
    s.dispatched += n;
    s.rearmed.clear();
    runner_.run_batch(s.dispatch_batch.data(), n, *s.retired, Runner::Place::wheel_thread, &s.rearmed);
    file_rearmed();
  } else {
    const std::size_t done =
        enqueue_in_blocks(pool_.handoff, *s.handoff_token, s.handoff_tail, s.dispatch_batch.data(), n);
    s.dispatched += done;
    if (done != n) [[unlikely]] {
      s.dispatch_batch.erase(s.dispatch_batch.begin(), s.dispatch_batch.begin() + static_cast<std::ptrdiff_t>(done));
      s.pass_out_of_memory = true;
      return;
    }
  }
  s.dispatch_batch.clear();
}

// Moves the runs that waited on lane_spill to their lanes' batches, in
// order, as far as memory allows; from the first that does not fit on, they
// wait again (so no lane gets a run before one claimed earlier).
void WheelThread::unspill_lanes() {
  WheelThreadState& s = wt();
  std::size_t kept = 0;
  bool stuck = false;
  for (const Dispatch& d : s.lane_spill) {
    const TimerSlot& slot = slab_[d.slot];
    // A record a reschedule took back meanwhile (R4) is stale, as it would
    // be in the lane's ready queue, and the slot may already serve another timer.
    if (!StateWord::holds_claim(slot.word.load(std::memory_order_acquire), d.generation, d.version)) continue;
    if (!stuck) {
      LaneCore* lane = slab_.lane_of(slot, d.slot);  // a lane's run: never null
      const bool listed = !lane->batch.empty() || try_push_back(s.touched_lanes, lane);
      stuck = !listed || !try_push_back(lane->batch, d);
      if (!stuck) continue;
    }
    s.lane_spill[kept++] = d;
    s.pass_out_of_memory = true;
  }
  s.lane_spill.resize(kept);
}

// Claims every filed timer for a run now, before its due time (drain(),
// shutdown(fire_pending)), and hands them over. Counts the runs.
bool WheelThread::drain_all(std::uint8_t flags, std::size_t& count) {
  // Room first: every filed timer may become a dispatch.
  const std::size_t filed = wt().overdue.size() + wt().manual_ready.size() + wt().wheel.size();
  if (!make_capacity(wt().drain_buffer, filed) || !make_room(wt().dispatch_batch, filed) ||
      !make_room(wt().lane_spill, filed)) [[unlikely]] {
    wt().pass_out_of_memory = true;
    return false;
  }
  std::vector<std::uint32_t>& all = wt().drain_buffer;
  all.assign(wt().overdue.begin(), wt().overdue.end());
  wt().overdue.clear();
  for (const WheelThreadState::ManualReady& r : wt().manual_ready) all.push_back(r.index);
  wt().manual_ready.clear();
  wt().wheel.for_each([&](std::uint32_t index) { all.push_back(index); });
  wt().wheel.clear();
  const std::int64_t now = wt().wheel.now().time_since_epoch().count();
  for (std::uint32_t index : all) {
    TimerSlot& slot = slab_[index];
    // A reschedule or cancel in flight settles first, and again after a failed CAS.
    for (std::uint64_t w = settled_word(slot);; w = settled(slot, w)) {
      const SlotState s = StateWord::state(w);
      if (s == SlotState::cancelled) {
        reclaim(slot, index);
        break;
      }
      CHIME_ASSERT(s == SlotState::pending, "a filed timer is pending, being rescheduled or cancelled");
      Dispatch d;
      d.slot = index;
      d.shard = static_cast<std::uint8_t>(seam.index);
      d.generation = StateWord::generation(w);
      d.version = StateWord::version(w);
      d.due_ns = slot.due_ns.load(std::memory_order_relaxed);
      d.fired_at_ns = now;
      d.flags = static_cast<std::uint8_t>(flags | (StateWord::periodic(w) ? Dispatch::keep_due : 0));
      if (claim(slot, w, d)) {
        ++count;
        break;
      }
    }
  }
  hand_over();
  return true;
}

// Go's rule for deleted timers: cancelled timers stay filed (zombies) until
// their alarm comes up, unless they exceed a quarter of the filed timers;
// then one pass over the wheel reclaims them all. The estimate is every C1/C2
// cancel of a filed timer (the others are freed by their canceller) minus
// every zombie reclaimed, so a sweep brings it back to at most the cancels
// that raced it. Amortized O(1) per cancel: a sweep over n filed timers
// reclaims more than max(n/4, kMinZombiesForSweep) - (cancels in flight).
void WheelThread::sweep_zombies_if_many() {
  const std::uint64_t cancels = seam.lazy_cancels.sum();
  const std::uint64_t zombies = cancels > wt().reclaimed ? cancels - wt().reclaimed : 0;
  const std::uint64_t filed = wt().wheel.size() + wt().overdue.size() + wt().manual_ready.size();
  if (zombies < kMinZombiesForSweep || zombies * 4 < filed) return;
  wt().sweep_buffer.clear();
  wt().wheel.for_each([&](std::uint32_t index) {
    // acquire: pairs with C1's acq_rel / R3's release: the canceller's
    // writes to the slot happen-before we free it.
    // Out of memory, the sweep reclaims what it listed; the rest are
    // reclaimed when their alarms come up, or by a later sweep.
    if (StateWord::state(slab_[index].word.load(std::memory_order_acquire)) == SlotState::cancelled &&
        !try_push_back(wt().sweep_buffer, index)) {
      wt().pass_out_of_memory = true;
    }
  });
  for (std::uint32_t index : wt().sweep_buffer) {
    wt().wheel.remove(index);
    reclaim(slab_[index], index);
  }
  seam.zombie_sweeps.fetch_add(1, std::memory_order_relaxed);
}

bool WheelThread::settle_flushes(std::uint64_t completed_snapshot) {
  if (wt().flushes.empty()) return true;
  // Runs claimed but not yet handed over (out of memory) are still to come:
  // no flush is settled, and their dues stay in pass_min_due_ns.
  if (!wt().dispatch_batch.empty() || !wt().touched_lanes.empty() || !wt().lane_spill.empty()) [[unlikely]]
    return false;
  const std::uint64_t dispatched = wt().dispatched;
  std::size_t kept = 0;
  for (FlushRequest* f : wt().flushes) {
    if (f->stepped) {
      if (!settle_stepped_flush(*f, completed_snapshot)) {
        wt().flushes[kept++] = f;
      } else if (f->completion.signal()) {
        delete f;  // abandoned (Completion)
      }
      continue;
    }
    // A flush is done when every run dispatched up to and including the pass
    // that first saw it has completed, and so has every run due at or before
    // its target that a later pass dispatched while it waited (periodic
    // catch-up runs), and nothing due by then is still overdue.
    // completed_snapshot was read before this pass applied commands, so a
    // re-arm posted by a run counted in it has been applied in this pass.
    if (!f->seen || wt().pass_min_due_ns <= f->target_ns) {
      f->seen = true;
      f->mark = dispatched;
    }
    bool overdue_by_target = false;
    for (std::uint32_t index : wt().overdue) {
      if (slab_[index].due_ns.load(std::memory_order_relaxed) <= f->target_ns) overdue_by_target = true;
    }
    for (const WheelThreadState::ManualReady& r : wt().manual_ready) {
      if (slab_[r.index].due_ns.load(std::memory_order_relaxed) <= f->target_ns) overdue_by_target = true;
    }
    // And the wheel has advanced to its reading: an advance cut short or
    // skipped for want of memory left what is due by then in the wheel,
    // though it may have dispatched nothing (pass_min_due_ns).
    const bool reached = wt().advanced_to_ns >= std::min(f->target_ns, config_.max_wheel_now_ns);
    if (completed_snapshot >= f->mark && !overdue_by_target && reached) {
      if (f->completion.signal()) delete f;  // abandoned (Completion)
    } else {
      wt().flushes[kept++] = f;
    }
  }
  wt().flushes.resize(kept);
  return true;
}

// Every timer this shard holds (the wheel, the overdue list, the ready
// heap) by its current due: a touch moved it later without telling us.
// O(filed timers).
void WheelThread::answer_next_dues() {
  WheelThreadState& s = wt();
  if (s.next_dues.empty()) return;
  std::int64_t earliest = INT64_MAX;
  const auto look = [&](std::uint32_t index) {
    const TimerSlot& slot = slab_[index];
    // acquire: pairs with S1/R2/F2's release, as consider's load.
    const SlotState state = StateWord::state(slot.word.load(std::memory_order_acquire));
    if (state == SlotState::pending || state == SlotState::writing) {
      earliest = std::min(earliest, slot.due_ns.load(std::memory_order_relaxed));
    }
  };
  for (const std::uint32_t index : s.overdue) look(index);
  for (const WheelThreadState::ManualReady& r : s.manual_ready) look(r.index);
  s.wheel.for_each(look);
  for (NextDueRequest* request : s.next_dues) {
    request->due_ns = earliest;
    [[maybe_unused]] const bool abandoned = request->completion.signal();  // never: waited for
  }
  s.next_dues.clear();
}

}  // namespace chime::detail
