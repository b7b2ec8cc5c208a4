// runtime/wheel_thread.cpp: the wheel thread's loop. Only this thread touches
// `wheel_`, `overdue_`, the slots' wheel-only fields (alarm,
// filed_generation) and the pending flush/drain/stop requests.
//
// One pass:
//   1. snapshot completed_ (for flush), then apply queued commands (file,
//      un-file, re-file, requests) until the queue is empty or a batch limit;
//   2. read the clock and advance: the overdue list first, then what the
//      wheel fires, in nondecreasing interval order; for each timer decide
//      (consider): claim and dispatch it (W1), re-file it (its due moved
//      later), look again next pass (a reschedule is in flight), or free it
//      (cancelled);
//   3. if the queue was emptied: serve drain/stop requests, settle flushes,
//      and
//   4. sleep until the next alarm is due, or until a producer wakes us.
//      Otherwise start the next pass at once.
//
// Race: enqueue vs the wheel going to sleep.
//
//   producer                               wheel thread
//   push(command)                          seen = wake_.prepare()
//   fence(seq_cst)              (P1)       sleep_deadline_ns_ = D; fence(seq_cst)   (P2)
//   if due < sleep_deadline_ns_: wake      if queue non-empty: don't sleep
//                                          futex_wait(word == seen, until D)
//
// The fences forbid both sides missing each other; a wake between the check
// and the futex call changes the word, so the futex call returns at once.
#include <sys/prctl.h>

#include <chrono>
#include <thread>

#include "runtime_core.hpp"

namespace chime::detail {

namespace {
// While commands keep arriving, the wheel thread wakes at least this often to
// apply them, so the queue holds at most about this much traffic. With no
// commands it sleeps until the next alarm (or forever): no idle ticking.
constexpr std::int64_t kBusyPollNs = 1'000'000;
// At most this many commands per pass, so that under a flood of commands the
// wheel still advances and dispatches between batches (about every 1 ms at
// ~100 ns per command) instead of starving the timers.
constexpr std::size_t kMaxCommandsPerPass = 8192;
}  // namespace

void RuntimeCore::wheel_main() {
  struct ExitFlag {
    ~ExitFlag() { flag.store(true, std::memory_order_release); }
    std::atomic<bool>& flag;
  } exit_flag{wheel_exited_};
  // Timer slack: let futex timeouts expire on time (default slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  while (running_) {
    const std::uint64_t completed_snapshot = completed_.load(std::memory_order_acquire);
    bool exhausted = false;
    const bool busy = apply_commands(exhausted);
    std::int64_t now = clock_->now().time_since_epoch().count();
    const std::int64_t wheel_now = wheel_.now().time_since_epoch().count();
    if (now < wheel_now) now = wheel_now;  // a clock must not go backwards; never move the wheel back
    if (now > max_wheel_now_ns_) now = max_wheel_now_ns_;  // the horizon (runtime.cpp, horizon_key)
    advance_and_dispatch(now);
    if (!exhausted) continue;  // more commands queued: apply them before anything else waits or sleeps
    if (stop_ != nullptr) {
      if (stop_->mode == ShutdownMode::fire_pending) {
        std::size_t count = 0;
        drain_all(Dispatch::drained | Dispatch::final, count);
      }
      running_ = false;
      for (FlushRequest* f : flushes_) f->completion.signal();
      flushes_.clear();
      break;
    }
    settle_flushes(completed_snapshot);
    // Runs dispatched by passes that did not empty the queue count towards
    // the next settle: reset only after one.
    pass_min_due_ns_ = INT64_MAX;
    sleep(busy);
  }
}

// Applies up to kMaxCommandsPerPass commands. Returns true iff it applied
// timer commands (not just requests); sets `exhausted` iff it emptied the
// queue. Requests (drain, stop, and settling flushes) act only in a pass that
// emptied the queue: then every command posted before them, by any thread,
// has been applied.
bool RuntimeCore::apply_commands(bool& exhausted) {
  bool any = false;
  exhausted = false;
  std::size_t applied = 0;
  while (applied < kMaxCommandsPerPass) {
    const std::size_t n = commands_.pop_bulk(command_buffer_.data(), command_buffer_.size());
    if (n == 0) {
      exhausted = true;
      break;
    }
    applied += n;
    for (std::size_t i = 0; i < n; ++i) {
      const Command& c = command_buffer_[i];
      switch (c.kind) {
        case CommandKind::flush:
          flushes_.push_back(static_cast<FlushRequest*>(c.request));
          break;
        case CommandKind::drain:
          drains_.push_back(static_cast<DrainRequest*>(c.request));
          break;
        case CommandKind::stop:
          stop_ = static_cast<StopRequest*>(c.request);
          break;
        default:
          any = true;  // timer traffic: keep polling while it lasts
          apply(c);
      }
    }
  }
  if (exhausted) {
    for (DrainRequest* d : drains_) {
      drain_all(Dispatch::drained, d->count);
      d->completion.signal();
    }
    drains_.clear();
  }
  return any;
}

void RuntimeCore::apply(const Command& c) {
  TimerSlot& slot = slab_[c.slot];
  switch (c.kind) {
    case CommandKind::add: {  // a new timer, or a periodic re-arm (F2)
      const std::uint64_t w = slot.word.load(std::memory_order_acquire);
      if (StateWord::generation(w) != c.generation) return;
      switch (StateWord::state(w)) {
        case SlotState::cancelled:  // cancelled before we ever filed it: free it now
          retire(slot, c.slot);
          return;
        case SlotState::pending:
        case SlotState::writing:
        case SlotState::writing_cancelled:  // the rescheduler will send REMOVE: keep it findable
          slot.filed_generation = c.generation;
          file(c.slot, slot);
          return;
        default:
          return;
      }
    }
    case CommandKind::remove: {  // posted after C1 or R3: the state is Cancelled
      if (slot.filed_generation != c.generation) return;  // not filed (yet, or any more): ADD or consider frees it
      if (!wheel_.contains(slot.alarm)) return;           // on the overdue list: consider() frees it
      wheel_.remove(slot.alarm);
      slot.alarm = {};
      slot.filed_generation = 0;
      retire(slot, c.slot);
      return;
    }
    case CommandKind::reschedule: {  // due moved earlier (R2): re-file now
      if (slot.filed_generation != c.generation || !wheel_.contains(slot.alarm)) return;
      wheel_.remove(slot.alarm);
      file(c.slot, slot);
      return;
    }
    default:
      return;
  }
}

// Files slot `index` by its current due time: in the wheel if it is not
// behind the wheel's interval, else on the overdue list (fires next pass).
void RuntimeCore::file(std::uint32_t index, TimerSlot& slot) {
  const std::int64_t due = slot.due_ns.load(std::memory_order_relaxed);
  const TimePoint now = wheel_.now();
  const std::int64_t bound = wheel_.alarm_upper_bound().time_since_epoch().count();
  if (due >= bound) {
    // Beyond what the wheel can hold now (a periodic timer's next run far
    // out): park it at the last time the wheel accepts. When that alarm
    // fires, consider() sees the due is still ahead and files it again, as
    // for any due pushed later; it never runs early. bound - 1 >= now: the
    // wheel never advances past the horizon interval, where the bound is
    // still the next interval's start (runtime.cpp, horizon_key).
    slot.alarm = wheel_.add(TimePoint(Duration(bound - 1)), index);
  } else if (due >= now.time_since_epoch().count()) {
    slot.alarm = wheel_.add(TimePoint(Duration(due)), index);
  } else if (due >= wheel_.now_interval_num_start().time_since_epoch().count()) {
    slot.alarm = wheel_.add(now, index);  // same interval as `due`: fires exactly when `due` would
  } else {
    slot.alarm = {};
    overdue_.push_back(index);
  }
}

void RuntimeCore::advance_and_dispatch(std::int64_t now_ns) {
  // Overdue timers (due before the wheel's interval) go first. Copied, not
  // swapped: a swap would hand each buffer's capacity to the other every pass,
  // and the smaller one would allocate again in steady state.
  fired_buffer_.assign(overdue_.begin(), overdue_.end());
  overdue_.clear();
  awaiting_writer_ = false;
  if (now_ns > wheel_.now().time_since_epoch().count()) {
    wheel_.advance_clock(TimePoint(Duration(now_ns)),
                         [&](TimingWheel<std::uint32_t>::Alarm a) { fired_buffer_.push_back(wheel_.value(a)); });
    due_limit_ns_.store(due_limit_for(now_ns), std::memory_order_relaxed);  // only ever grows
  }
  const std::int64_t boundary = wheel_.now_interval_num_start().time_since_epoch().count();
  for (std::uint32_t index : fired_buffer_) {
    slab_[index].alarm = {};
    consider(index, boundary, now_ns);
  }
  fired_buffer_.clear();
}

// A filed timer whose alarm fired (or that was overdue): a timer may run iff
// its current due is before `boundary` (the start of the wheel's interval).
void RuntimeCore::consider(std::uint32_t index, std::int64_t boundary, std::int64_t fired_at) {
  TimerSlot& slot = slab_[index];
  // acquire: pairs with R2/F2's release, so `due` below is at least as new
  // as the version we read; the claim CAS from exactly this word fails if a
  // reschedule published a newer one since.
  std::uint64_t w = slot.word.load(std::memory_order_acquire);
  for (;;) {
    switch (StateWord::state(w)) {
      case SlotState::pending: {
        const std::int64_t due = slot.due_ns.load(std::memory_order_relaxed);
        if (due >= boundary) {  // pushed later by a reschedule: re-file lazily
          file(index, slot);
          return;
        }
        Dispatch d;
        d.slot = index;
        d.generation = StateWord::generation(w);
        d.due_ns = due;
        d.fired_at_ns = fired_at;
        // A flush waits for this run if any run it covers was due by its
        // target: the earliest one, before skip coalescing moves d.due_ns.
        pass_min_due_ns_ = std::min(pass_min_due_ns_, due);
        if (StateWord::periodic(w) && slot.on_missed == Missed::skip) {
          // Coalesce every run due before the boundary into the latest one.
          // In 128 bits: boundary - due spans up to 2^64 ns; the result,
          // at most boundary - 1, fits.
          const __int128 k = (static_cast<__int128>(boundary) - 1 - due) / slot.period_ns;
          d.due_ns = static_cast<std::int64_t>(due + k * slot.period_ns);
          d.missed = static_cast<std::uint64_t>(k);
        }
        // (W1) acq_rel: acquire so the task is visible to the run; release so
        // a later reader of Running sees our reads done.
        if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::running),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
          slot.filed_generation = 0;
          dispatch(d);
          return;
        }
        break;  // lost to a cancel or a reschedule: look again
      }
      case SlotState::writing:
      case SlotState::writing_cancelled:
        // A reschedule is in flight (it moves the due, or a cancel won and it
        // will send REMOVE): look again in the next pass, which comes at once
        // (sleep() yields first). Not "at the next interval": its new due
        // may be passed already, and the clock may not move on.
        slot.alarm = {};
        overdue_.push_back(index);
        awaiting_writer_ = true;
        return;
      case SlotState::cancelled:  // C1 won; its REMOVE finds it gone and does nothing
        slot.filed_generation = 0;
        retire(slot, index);
        return;
      default:  // not reachable: a filed timer is never Running, Fired or free
        slot.filed_generation = 0;
        return;
    }
  }
}

void RuntimeCore::dispatch(const Dispatch& d) {
  dispatched_.store(dispatched_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  pass_min_due_ns_ = std::min(pass_min_due_ns_, d.due_ns);
  if (workers_.empty()) {
    run(d);
  } else {
    // Out of memory, retry: the timer is Running, and only its run ends that.
    while (!handoff_.enqueue(*handoff_token_, d)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Claims and dispatches every filed timer now, before its due time
// (drain(), shutdown(fire_pending)). Counts the runs dispatched.
void RuntimeCore::drain_all(std::uint8_t flags, std::size_t& count) {
  std::vector<std::uint32_t>& all = drain_buffer_;
  all.assign(overdue_.begin(), overdue_.end());
  overdue_.clear();
  wheel_.for_each([&](TimingWheel<std::uint32_t>::Alarm a) { all.push_back(wheel_.value(a)); });
  wheel_.clear();
  const std::int64_t now = wheel_.now().time_since_epoch().count();
  for (std::uint32_t index : all) {
    TimerSlot& slot = slab_[index];
    slot.alarm = {};
    std::uint64_t w = slot.word.load(std::memory_order_acquire);
    for (;;) {
      const SlotState s = StateWord::state(w);
      if (s == SlotState::writing || s == SlotState::writing_cancelled) {
        // A reschedule is two stores from done: wait for it to settle.
        std::this_thread::yield();
        w = slot.word.load(std::memory_order_acquire);
        continue;
      }
      if (s == SlotState::cancelled) {
        slot.filed_generation = 0;
        retire(slot, index);
        break;
      }
      if (s != SlotState::pending) break;
      Dispatch d;
      d.slot = index;
      d.generation = StateWord::generation(w);
      d.due_ns = slot.due_ns.load(std::memory_order_relaxed);
      d.fired_at_ns = now;
      d.flags = static_cast<std::uint8_t>(flags | (StateWord::periodic(w) ? Dispatch::keep_due : 0));
      if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::running),
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {  // (W1)
        slot.filed_generation = 0;
        dispatch(d);
        ++count;
        break;
      }
    }
  }
}

void RuntimeCore::settle_flushes(std::uint64_t completed_snapshot) {
  if (flushes_.empty()) return;
  const std::uint64_t dispatched = dispatched_.load(std::memory_order_relaxed);
  std::size_t kept = 0;
  for (FlushRequest* f : flushes_) {
    // A flush is done when every run dispatched up to and including the pass
    // that first saw it has completed, and so has every run due at or before
    // its target that a later pass dispatched while it waited (periodic
    // catch-up runs), and nothing due by then is still overdue.
    // completed_snapshot was read before this pass applied commands, so a
    // re-arm posted by a run counted in it has been applied in this pass.
    if (!f->seen || pass_min_due_ns_ <= f->target_ns) {
      f->seen = true;
      f->mark = dispatched;
    }
    bool overdue_by_target = false;
    for (std::uint32_t index : overdue_) {
      if (slab_[index].due_ns.load(std::memory_order_relaxed) <= f->target_ns) overdue_by_target = true;
    }
    if (completed_snapshot >= f->mark && !overdue_by_target) {
      f->completion.signal();
    } else {
      flushes_[kept++] = f;
    }
  }
  flushes_.resize(kept);
}

void RuntimeCore::sleep(bool busy) {
  if (!overdue_.empty()) {  // due now: next pass
    // Only a reschedule's two stores to wait for: let its thread run first.
    if (awaiting_writer_) std::this_thread::yield();
    return;
  }
  const bool waiting_for_runs = !flushes_.empty();
  // (F-W) Workers bump completed_, fence, then read this flag to decide
  // whether to wake us; we set it, fence, then re-read completed_.
  wheel_waits_for_workers_.store(waiting_for_runs, std::memory_order_relaxed);
  std::int64_t deadline = INT64_MAX;  // in the runtime clock's domain
  // At the horizon nothing in the wheel ever fires (it never advances on).
  if (const auto next = wheel_.next_alarm_fires_at(); next && wheel_.now().time_since_epoch().count() < max_wheel_now_ns_) {
    deadline = next->time_since_epoch().count();
  }

  const std::uint32_t seen = wake_.prepare();
  sleep_deadline_ns_.store(deadline, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P2) and (F-W)
  bool skip = commands_.size_approx() != 0;
  if (waiting_for_runs) {
    std::uint64_t need = 0;
    for (FlushRequest* f : flushes_) need = std::max(need, f->mark);
    if (completed_.load(std::memory_order_acquire) >= need) skip = true;
  }
  if (!skip) {
    const TimePoint steady_now = steady_clock_.now();
    std::int64_t wake_at = INT64_MAX;  // on the steady clock
    if (deadline != INT64_MAX) {
      switch (clock_kind_) {
        case ClockKind::steady:
          wake_at = deadline;
          break;
        case ClockKind::manual:  // manual time moves only when told; flush() wakes us
          break;
        case ClockKind::other: {
          // In 128 bits, saturating: the two clocks' times may be at opposite ends of int64.
          const __int128 remaining = static_cast<__int128>(deadline) - clock_->now().time_since_epoch().count();
          const __int128 at = steady_now.time_since_epoch().count() + std::max<__int128>(remaining, 0);
          wake_at = at >= INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(at);
          break;
        }
      }
    }
    // A manual clock never wakes the wheel on its own (clock.hpp): commands
    // wait for a flush or for a schedule that needs the wheel earlier.
    if (busy && clock_kind_ != ClockKind::manual) {
      wake_at = std::min(wake_at, steady_now.time_since_epoch().count() + kBusyPollNs);
    }
    const TimePoint until{Duration(wake_at)};
    wake_.wait_until(seen, wake_at == INT64_MAX ? nullptr : &until);
    wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
  sleep_deadline_ns_.store(INT64_MIN, std::memory_order_relaxed);
}

}  // namespace chime::detail
