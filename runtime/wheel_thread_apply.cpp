// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_apply.cpp: a pass's first step: applying the queued
// commands (timers to file or re-file, requests to serve) and filing
// timers in the wheel or on the overdue list (wheel_thread.cpp has the
// pass).
#include "wheel_thread.hpp"

#include <algorithm>

#include "lane_core.hpp"
#include "requests.hpp"
#include "wheel_thread_pass.hpp"

namespace chime::detail {

using namespace pass;

void WheelThread::prefetch_slot_line(std::uint32_t index) const noexcept { __builtin_prefetch(&slab_[index], 1, 3); }

// Applies up to kMaxCommandsPerPass commands; returns true iff it applied
// timer commands (not just requests); sets `exhausted` iff it emptied the
// queue. Requests (drain, stop, and settling flushes) act only in a pass
// that emptied the queue: then every command posted before them, by any
// thread, has been applied.
bool WheelThread::apply_commands(bool& exhausted) {
  WheelThreadState& s = wt();
  bool any = false;
  exhausted = false;
  std::size_t applied = 0;
  // ADDs that met a reschedule in flight last pass (apply): before any
  // command posted after them, so a producer's commands stay in order.
  if (!s.deferred_adds.empty()) {
    const std::size_t m = s.deferred_adds.size();
    s.retry_adds.swap(s.deferred_adds);
    if (commands_with_room(s.retry_adds.data(), m) < m) [[unlikely]] {
      s.retry_adds.swap(s.deferred_adds);  // out of memory: they wait, and so do the commands after them
      return false;
    }
    for (const Command& c : s.retry_adds) apply(c);
    s.retry_adds.clear();
    any = true;
  }
  // Then commands popped but not applied last pass (out of memory).
  if (s.held_commands_begin != s.held_commands_end) [[unlikely]] {
    if (!apply_batch(s.held_commands_begin, s.held_commands_end, any)) return any;
  }
  while (applied < kMaxCommandsPerPass) {
    // A backlog is not applied once shutdown(cancel_pending) was called: its
    // ADDs stay Pending, and the sweep cancels them (run_pass stops).
    if (cancel_requested()) [[unlikely]]
      break;
    const std::size_t n = seam.commands.pop_bulk(s.command_buffer.data(), s.command_buffer.size());
    if (n == 0) {
      exhausted = true;
      break;
    }
    applied += n;
    if (!apply_batch(0, n, any)) [[unlikely]]
      break;  // out of memory: the rest waits in command_buffer
  }
  // RESCHEDULEs that came before their timer's ADD (apply): again, now that
  // this pass's commands are applied (usually their ADD was among them).
  if (!wt().reschedules_before_add.empty()) {
    const std::size_t m = wt().reschedules_before_add.size();
    wt().retry_reschedules.swap(wt().reschedules_before_add);
    if (commands_with_room(wt().retry_reschedules.data(), m) == m) [[likely]] {
      for (const Command& c : wt().retry_reschedules) apply(c);
      wt().retry_reschedules.clear();
    } else {
      wt().retry_reschedules.swap(wt().reschedules_before_add);  // out of memory: again next pass
    }
  }
  // An ADD or RESCHEDULE to apply again is a command not applied yet:
  // requests wait for it (a flush must see that timer filed, or due now).
  if (!wt().deferred_adds.empty() || !wt().reschedules_before_add.empty()) exhausted = false;
  if (exhausted) {
    // Out of memory, a drain waits for a pass with room (its caller may give up).
    std::size_t kept = 0;
    for (DrainRequest* d : wt().drains) {
      if (d->completion.was_abandoned()) [[unlikely]] {
        delete d;  // its caller gave up (out of memory) while it waited for room: not served
      } else if (!drain_all(Dispatch::drained, d->count)) [[unlikely]] {
        wt().drains[kept++] = d;
      } else if (d->completion.signal()) {
        delete d;  // abandoned meanwhile (Completion)
      }
    }
    wt().drains.resize(kept);
  }
  return any;
}

// Applies command_buffer[begin, end), a batch just popped (or held from the
// last pass): as many as there is room for (commands_with_room); the rest
// are held for the next pass (false).
bool WheelThread::apply_batch(std::size_t begin, std::size_t end, bool& any) {
  WheelThreadState& s = wt();
  const Command* batch = s.command_buffer.data() + begin;
  const std::size_t n = commands_with_room(batch, end - begin);
  if (n == end - begin) [[likely]] {
    s.held_commands_begin = s.held_commands_end = 0;
  } else {
    s.held_commands_begin = begin + n;
    s.held_commands_end = end;
  }
  // Every command of this batch was posted before it was dequeued, so a
  // clock read from now on is at or after its posting: a timer due by then
  // (schedule_after(0ns, f)) is due now. A read cached from an earlier
  // batch can precede a command's posting; it would file such a timer in
  // the wheel's current interval, where it waits for the interval to end
  // and a flush() that follows does not wait for it.
  s.application_now_ns = INT64_MIN;
  // The slot lines this batch acts on were last written by the threads
  // that posted (S1, R2): each first touch here is a cache miss. Asking
  // for them kPrefetchAhead commands ahead overlaps those misses.
  for (std::size_t i = 0; i < std::min(n, kPrefetchAhead); ++i) prefetch_slot(batch[i]);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) prefetch_slot(batch[i + kPrefetchAhead]);
    const Command& c = batch[i];
    switch (c.kind) {
      case CommandKind::flush: {
        auto* request = static_cast<FlushRequest*>(c.request);
        if (request->completion.was_abandoned()) [[unlikely]] {
          delete request;  // its caller gave up (out of memory): Completion
        } else {
          s.flushes.push_back(request);
          s.manual_release_ns = std::max(s.manual_release_ns, request->target_ns);
        }
        break;
      }
      case CommandKind::drain: {
        auto* request = static_cast<DrainRequest*>(c.request);
        if (request->completion.was_abandoned()) [[unlikely]] {
          delete request;  // its caller gave up (out of memory): not served
        } else {
          s.drains.push_back(request);
        }
        break;
      }
      case CommandKind::stop:
        s.stop = static_cast<StopRequest*>(c.request);
        break;
      case CommandKind::next_due:
        s.next_dues.push_back(static_cast<NextDueRequest*>(c.request));
        break;
      case CommandKind::check: {
        auto* request = static_cast<CheckRequest*>(c.request);
        try {
          request->failure = check_on_wheel();
        } catch (const std::bad_alloc&) {
          request->failure = "out of memory";  // short: no allocation
        }
        [[maybe_unused]] const bool abandoned = request->completion.signal();  // never: waited for
        break;
      }
      case CommandKind::close_lane: {
        // Every ADD the closing thread posted before is applied (FIFO);
        // one from another thread that comes later finds the lane closed.
        auto* request = static_cast<CloseLaneRequest*>(c.request);
        close_lane_on_wheel(request->lane);
        [[maybe_unused]] const bool abandoned = request->completion.signal();  // never: waited for
        break;
      }
      default:
        any = true;
        apply(c);
    }
  }
  return s.held_commands_begin == s.held_commands_end;
}

// How many of the commands `c[0, n)` may be applied with no allocation:
// room is made first for what applying them may add (a timer command: an
// overdue entry, a deferred ADD or RESCHEDULE; filing it in the wheel
// allocates nothing, its node is in its slot; a flush or drain: its entry). All of them, or out of memory the longest
// prefix there is room for (the pass is marked).
std::size_t WheelThread::commands_with_room(const Command* c, std::size_t n) noexcept {
  WheelThreadState& s = wt();
  const auto timer_room = [&] {
    return std::min({spare(s.overdue), spare(s.deferred_adds), spare(s.reschedules_before_add)});
  };
  const auto request_room = [&] { return std::min({spare(s.flushes), spare(s.drains), spare(s.next_dues)}); };
  // The common case: room for n commands of any kind already.
  if (timer_room() >= n && request_room() >= n) [[likely]]
    return n;
  const auto is_timer = [](CommandKind k) {
    return k == CommandKind::add || k == CommandKind::rearm || k == CommandKind::reschedule;
  };
  const auto is_request = [](CommandKind k) {
    return k == CommandKind::flush || k == CommandKind::drain || k == CommandKind::next_due;
  };
  std::size_t timers = 0, requests = 0;
  for (std::size_t i = 0; i < n; ++i) {
    timers += is_timer(c[i].kind) ? 1 : 0;
    requests += is_request(c[i].kind) ? 1 : 0;
  }
  if (make_room(s.overdue, timers) & make_room(s.deferred_adds, timers) & make_room(s.reschedules_before_add, timers) &
      make_room(s.flushes, requests) & make_room(s.drains, requests) & make_room(s.next_dues, requests)) [[likely]] {
    return n;
  }
  s.pass_out_of_memory = true;
  const std::size_t timers_fit = timer_room(), requests_fit = request_room();
  std::size_t t = 0, r = 0, k = 0;
  for (; k < n; ++k) {
    if (is_timer(c[k].kind) && t++ == timers_fit) break;
    if (is_request(c[k].kind) && r++ == requests_fit) break;
  }
  return k;
}

void WheelThread::apply(const Command& c) {
  TimerSlot& slot = slab_[c.slot];
  switch (c.kind) {
    case CommandKind::add:      // a new timer
    case CommandKind::rearm: {  // a periodic's next run (F2)
      // acquire: pairs with S1/F2 (and the queue's release/acquire carries
      // them too), so `due` and the task are visible.
      std::uint64_t w = slot.word.load(std::memory_order_acquire);
      for (;;) {
        if (StateWord::generation(w) != c.generation) return;  // cancelled, freed by its canceller, and reused
        CHIME_ASSERT(!StateWord::filed(w), "an ADD for a timer already filed");
        switch (StateWord::state(w)) {
          case SlotState::pending:
            // (A1) We file it, and from now on we free it if it is cancelled.
            // acquire (as the load): `due` and the task. A cancel's C1 (or a
            // reschedule's R1) races it on the word: one CAS wins.
            if (!slot.word.compare_exchange_weak(w, w | StateWord::kFiledBit, std::memory_order_acquire,
                                                 std::memory_order_acquire)) {
              continue;
            }
            // Only now is the alarm ours to read: before A1 the slot may be
            // freed (a cancel) and filed by another shard.
            CHIME_ASSERT(!slot.alarm.filed(), "an ADD for a timer whose slot is still in a wheel");
            if (slot.on_lane() && lane_closed(slab_, slot, c.slot)) [[unlikely]] {
              cancel_for_closed_lane(slot, c.slot);  // its Lane was destroyed: (L1)
              return;
            }
            // A schedule's due at or before the clock is due now; a periodic's
            // next run keeps the interval rule (its fixed rate is the user's
            // command, applied when it was scheduled).
            file(c.slot, slot, c.kind == CommandKind::add, c.called_at());
            return;
          case SlotState::writing:
            // A reschedule is two stores from done (R2, or R3 after a cancel):
            // apply this ADD again next pass, which comes at once (run_pass
            // yields or briefly sleeps first, backoff.hpp; the pass does not
            // count as having emptied the queue), rather than wait here for a
            // thread that may be preempted.
            wt().deferred_adds.push_back(c);
            return;
          case SlotState::cancelling:
          case SlotState::cancelled:
            // Cancelled before we filed it: its canceller (or rescheduler,
            // after R3) frees the slot, and may already have; nothing to do.
            return;
          default:
            CHIME_ASSERT(false, "an ADD found its timer handed, running or fired");
            return;
        }
      }
    }
    case CommandKind::reschedule: {  // due moved earlier, or due now by the call's clock (R2): re-file now
      // acquire: as the ADD's load. Filed (A1) at this generation, the
      // timer is ours: the shard is fixed per generation, and only we free
      // a filed timer, so its alarm is ours to read.
      const std::uint64_t w = slot.word.load(std::memory_order_acquire);
      if (StateWord::generation(w) != c.generation || !StateWord::filed(w)) {
        // Its ADD (or REARM) is not applied yet, or the timer was claimed since. Posted on another queue (the schedule
        // through a Producer, the reschedule through the Runtime, or two
        // threads), it may come after this command; dropped, the ADD would
        // be judged by its own older clock reading, and a timer due now by
        // the reschedule's would wait for its interval (a ManualClock run
        // would depend on the queues' order). Apply it again once this
        // batch is applied (apply_commands), and until its ADD is: the ADD
        // is already queued, so no thread is waited for. Claimed (handed,
        // running, or ended), it has nothing to re-file.
        const SlotState s = StateWord::state(w);
        if (StateWord::generation(w) == c.generation && !StateWord::filed(w) &&
            (s == SlotState::pending || s == SlotState::writing)) {
          wt().reschedules_before_add.push_back(c);
        }
        return;
      }
      if (!wt().wheel.contains(c.slot)) {
        // On the overdue list: goes out with this pass. On the ready heap
        // (a ManualClock), its key is read again.
        if (config_.manual()) wt().manual_ready_stale = true;
        return;
      }
      wt().wheel.remove(c.slot);
      file(c.slot, slot, true, c.called_at());
      return;
    }
    default:
      CHIME_ASSERT(false, "unknown command");
      return;
  }
}

// The wheel-side half of the inline re-arms of a batch this thread ran
// (hand_over with workers = 0; Runner::end_run put them on `rearmed`):
// each run's F2 already set the filed bit, so this is what A1 (apply) does
// after its CAS. Not at application: a re-arm already behind the wheel's
// interval runs next pass. A callback later in the batch may have
// cancelled one meanwhile: filed anyway, it is a zombie, reclaimed when it
// comes up, as one cancelled just after filing.
void WheelThread::file_rearmed() {
  for (const std::uint32_t index : wt().rearmed) file(index, slab_[index], false);
  wt().rearmed.clear();
}

// Files slot `index` by its current due time: in the wheel if it is not
// behind the wheel's interval, else on the overdue list (goes out with this
// pass's advance). `at_application`: its command (an ADD, a reschedule to an
// earlier due, an inline periodic re-arm) is being applied; a due at or
// before the clock's time then is due now, and goes on the overdue list too,
// however recent (design: "due now at application").
void WheelThread::file(std::uint32_t index, TimerSlot& slot, bool at_application,
                       std::optional<std::int64_t> called_at_ns) {
  const std::int64_t due = slot.due_ns.load(std::memory_order_relaxed);
  if (at_application && !config_.manual() && due_now_at_application(due, called_at_ns)) {
    wt().overdue.push_back(index);
    return;
  }
  const std::int64_t now = wt().wheel.now().time_since_epoch().count();
  const std::int64_t bound = wt().wheel.alarm_upper_bound().time_since_epoch().count();
  if (due >= bound) {
    // Beyond what the wheel can hold now (a periodic timer's next run far
    // out): park it at the last time the wheel accepts. When that alarm
    // fires, consider() sees the due is still ahead and files it again, as
    // for any due pushed later; it never runs early. bound - 1 >= now: the
    // wheel never advances past the horizon interval, where the bound is
    // still the next interval's start (runtime_config.cpp, horizon_key).
    wt().wheel.add(index, TimePoint(Duration(bound - 1)));
  } else if (due > now) {
    // At its fire time (slack), within the wheel's range: the earlier of
    // the two, never before the due (due < bound).
    const __int128 at = fire_time(index, slot, due, at_application);
    wt().wheel.add(index, TimePoint(Duration(at < bound ? static_cast<std::int64_t>(at) : bound - 1)));
  } else {
    wt().overdue.push_back(index);  // its due has passed: it goes out with the next advance
  }
}

// Slack (above; slack.hpp): the time to file a timer due at `due` (after
// the wheel's now) at. A manual clock: the due itself. The default slack's
// delay is measured from the clock at application (read once per batch),
// else from the wheel's time (a re-file, after the pass's advance); a
// periodic timer's is its period.
__int128 WheelThread::fire_time(std::uint32_t index, const TimerSlot& slot, std::int64_t due, bool at_application) {
  if (config_.manual()) return due;
  std::uint8_t code = slot.slack_code;
  if (code == SlackCode::runtime_default) {
    // A periodic timer has a side record (S1; read after our acquire of its word).
    std::int64_t delay =
        StateWord::periodic(slot.word.load(std::memory_order_relaxed)) ? slab_.extra(index).period_ns : 0;
    if (delay == 0) {
      std::int64_t now = wt().wheel.now().time_since_epoch().count();
      if (at_application) {
        if (wt().application_now_ns == INT64_MIN) {
          wt().application_now_ns = config_.clock->now().time_since_epoch().count();
        }
        now = std::max(now, wt().application_now_ns);
      }
      delay = static_cast<std::int64_t>(std::min<__int128>(static_cast<__int128>(due) - now, INT64_MAX));
    }
    code = config_.runtime_slack_code(delay);
  }
  if (code == SlackCode::interval_rule) {
    // The last nanosecond of its interval: it runs when the interval ends.
    return static_cast<__int128>(wt().wheel.interval_start(TimePoint(Duration(due))).time_since_epoch().count()) +
           config_.precision.count() - 1;
  }
  return grid_fire_time(due, code);
}

// True iff `due` is due now (design.md, the runtime's due-now rule). A
// command that carries the clock's time read in its call (every clock but
// the steady one: due_now_reading) is judged by that reading alone, so the
// verdict does not depend on when we apply it: on a ManualClock the same
// calls give the same runs. On the steady clock (no reading), by the clock at
// application: a due at or before the wheel's time needs no clock read (the
// clock is never behind it); otherwise the clock is read at most once per
// batch of dequeued commands, after the batch was dequeued. Both readings
// are at or after the call's, so neither runs a timer early.
bool WheelThread::due_now_at_application(std::int64_t due, std::optional<std::int64_t> called_at_ns) {
  if (called_at_ns) return due <= *called_at_ns;
  if (due <= wt().wheel.now().time_since_epoch().count()) return true;
  if (wt().application_now_ns == INT64_MIN) wt().application_now_ns = config_.clock->now().time_since_epoch().count();
  return due <= wt().application_now_ns;
}

// A cancelled timer (C1 then K1, or C2 then R3) that the wheel thread owns
// (it was filed: the filed bit): free it. Its task was destroyed by the canceller (or rescheduler) before
// it published Cancelled, so the task's line is not touched here. Counts it
// against Counter::lazy_cancels for the zombie estimate.
void WheelThread::reclaim(TimerSlot& slot, std::uint32_t index) {
  CHIME_ASSERT(StateWord::state(slot.word.load(std::memory_order_relaxed)) == SlotState::cancelled,
               "only a cancelled timer is reclaimed");
  CHIME_ASSERT(!slab_.has_task(slot, index),
               "a lazily cancelled timer's task is destroyed before Cancelled is published");
  CHIME_ASSERT(StateWord::filed(slot.word.load(std::memory_order_relaxed)),
               "only a filed timer is ours to free; one cancelled before filing is freed by its canceller");
  CHIME_ASSERT(!slot.alarm.filed(), "a slot is freed only once its alarm is out of the wheel");
  // The filed bit comes off as the slot is freed: set on a Cancelled word,
  // it says the wheel thread still owes the free (the shutdown sweep reads
  // it). A plain store: nothing else writes a Cancelled word until the slot
  // is reused, which the free list's release/acquire orders after this.
  const std::uint64_t w = slot.word.load(std::memory_order_relaxed);
  slot.word.store(StateWord::unfiled(w), std::memory_order_relaxed);
  wt().retired->add(index);
  ++wt().reclaimed;
}

}  // namespace chime::detail
