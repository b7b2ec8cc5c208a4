// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread.cpp: a shard's wheel thread and its loop
// (WheelThread, wheel_thread.hpp). Only this thread touches its own data
// (WheelThreadState, wheel_thread_state.hpp, through wt(): the wheel, the
// overdue list, the batch of claimed runs, its batch of retired slots, the
// pending flush/drain/stop requests) and the wheel-only fields of the slots
// it filed (the alarm: timer_slab.hpp).
//
// One pass:
//   1. snapshot seam.completed (for flush), then apply queued commands in bulk
//      (file, re-file, requests) until the queue is empty or a batch limit;
//   2. read the clock (once) and advance: the overdue list first, in due
//      order, then what the wheel fires, in nondecreasing interval order; for
//      each timer decide (consider): claim it for a run (W1), re-file it (its
//      due moved later), look again next pass (a reschedule is in flight), or
//      reclaim it (cancelled: a zombie);
//   3. hand the claimed runs to the workers in one batch (one enqueue, one
//      semaphore signal), and give the retired slots back in one batch;
//   4. if the queue was emptied: serve drain/stop requests, sweep zombies if
//      they exceed a quarter of the filed timers, settle flushes, and
//   5. sleep until the next alarm is due, or until a producer wakes us.
//      Otherwise start the next pass at once.
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
// plus kRefilesPerAdvance. Still not bounded: what is due (a pass fires all
// of it), and a zombie sweep (one pass over the wheel, when cancelled
// timers exceed a quarter of the filed ones). Each shard's longest pass and
// the most moves one pass made are in ShardStats (note_pass).
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
//
// Race: enqueue vs the wheel going to sleep.
//
//   producer                               wheel thread
//   push(command)                          seen = seam.wake.prepare()
//   fence(seq_cst)              (P1)       bound = B; fence(seq_cst)            (P2)
//   if due < bound and CAS(bound -> MIN):  if queue non-empty: don't sleep
//     wake                                 futex_wait(word == seen, until the wake-up W)
//
// The fences forbid both sides missing each other; a wake between the check
// and the futex call changes the word, so the futex call returns at once.
// B is the last interval boundary before W (W: the earliest alarm's
// next_alarm_fires_at, or at most kLingerNs from now while commands keep
// coming): a timer due before B needs the wheel earlier; one due at or after
// it is filed at W soon enough, so it does not wake it (command_poster.cpp).
//
// Out of memory: the wheel thread never dies of a failed allocation, and
// never waits for memory. Everything a step may add to a list or to the
// wheel is made room for before the step takes its work (make_room,
// commands_with_room, room_for_advance); an allocation that fails leaves the
// work where it was, which loses nothing: commands stay in the queue (an ADD
// stays Pending, a cancel still wins against it), the wheel's alarms stay in
// the wheel (an advance is cut short when the fired list cannot grow), and
// claimed runs stay in the pass's batches until a hand-over succeeds. Such a
// pass is marked (pass_out_of_memory); the thread then naps 1 ms and tries
// again. Flushes and drains waiting on a shard that has been out of memory
// for kOutOfMemoryTimeout are answered with a failure (flush() and drain()
// throw std::bad_alloc): their outcome is bounded. What still allocates
// without room made first only gives up optional work: a zombie sweep or a
// lane close stops early (those timers are reclaimed or cancelled when
// their alarms come up), and a retired slot that cannot be given back stays
// out of use (timer_slab.hpp, RetiredSlots).
#include "wheel_thread.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "requests.hpp"
#include "runner.hpp"
#include "timer_counts.hpp"
#include "tuning.hpp"
#include "worker_pool.hpp"

namespace chime::detail {

using Overdue = WheelThreadState::Overdue;

namespace {
// At most this many commands per pass, so that under a flood of commands the
// wheel still advances and dispatches between batches (a pass of 8192
// commands takes well under 1 ms) instead of starving the timers.
constexpr std::size_t kMaxCommandsPerPass = 8192;
// Zombies (cancelled timers still filed) are swept in one pass over the
// wheel when they exceed a quarter of the filed timers, and at least this
// many (tuning.hpp, CHIME_ZOMBIE_SWEEP_MIN).
constexpr std::uint64_t kMinZombiesForSweep = CHIME_ZOMBIE_SWEEP_MIN;
// While commands keep arriving, the wheel thread sleeps at most this long
// (sleep(), "lingering"), so producers need not wake it for every new timer
// due before its next alarm; timers due before the linger ends still wake
// it, so lingering adds no lateness.
constexpr std::int64_t kLingerNs = 1'000'000;
// Alarms a pass moves down the wheel ahead of time after its hand-off
// (TimingWheel::cascade_ahead; "No pass does unbounded work" above): the
// next span of every level is moved during the span before it, instead of
// all at once when the wheel enters it (at 600k timers/s a level-0 block
// was 19 ms in one pass, docs/benchmarks.md, "Where the lateness tail
// waits"). 1,024 moves take about 50-100 us.
constexpr std::size_t kCascadeAheadPerPass = 1024;
// Fired alarms an advance may re-file at a later due (touched timers) before
// it is cut short: the same budget as the level moves, so a batch touched
// later all at once is re-filed over several passes, which come at once
// (sleep: advance_cut_short), not in one.
constexpr std::size_t kRefilesPerAdvance = kCascadeAheadPerPass;
// How far ahead the wheel thread asks for the slot lines it will act on
// (apply_commands, advance_and_dispatch): a few misses in flight at once.
constexpr std::size_t kPrefetchAhead = 8;
// Room for `extra` more elements in `v` (growing geometrically), so that the
// pushes that follow never allocate. False out of memory, `v` unchanged.
template <class V>
bool make_room(V& v, std::size_t extra) noexcept {
  const std::size_t need = v.size() + extra;
  if (v.capacity() >= need) return true;
  try {
    v.reserve(std::max(need, 2 * v.capacity()));
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}
// Capacity for `n` elements whatever `v` holds now (a list about to be cleared and refilled).
template <class V>
bool make_capacity(V& v, std::size_t n) noexcept {
  return v.capacity() >= n || make_room(v, n - v.size());
}
template <class V>
std::size_t spare(const V& v) noexcept {
  return v.capacity() - v.size();
}
// Pushes `x`; false out of memory, `v` unchanged.
template <class V, class T>
bool try_push_back(V& v, const T& x) noexcept {
  try {
    v.push_back(x);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}
// Enqueues `n` runs through a producer token, in pieces that each end at a
// block boundary of the token's sub-queue (`tail`: the items enqueued
// through the token so far, which starts with it at 0). Returns how many
// went in: all, or a prefix (out of memory). Why in pieces: moodycamel's
// bulk enqueue through a token is all or nothing, but one that fails (out
// of memory) after taking two or more new blocks leaves the sub-queue
// corrupt (libconcurrentqueue-dev 1.0.3: a later dequeue reads a null block
// or trips Block::set_many_empty's assertion; reproduced with the queue
// alone), while one that needs at most one new block fails cleanly. The
// pieces cost one enqueue call per 32 runs.
template <class Queue>
std::size_t enqueue_in_blocks(Queue& queue, moodycamel::ProducerToken& token, std::uint64_t& tail, const Dispatch* runs,
                              std::size_t n) {
  constexpr std::size_t kBlock = moodycamel::ConcurrentQueueDefaultTraits::BLOCK_SIZE;
  std::size_t done = 0;
  while (done < n) {
    const std::size_t k = std::min<std::size_t>(kBlock - tail % kBlock, n - done);
    if (!queue.enqueue_bulk(token, runs + done, k)) [[unlikely]]
      break;
    done += k;
    tail += k;
  }
  return done;
}
// The ready heap's order (a ManualClock, "A manual clock" above): `a`
// runs after `b`; the heap's front runs first. Call orders are unique, so
// no two timers tie.
bool ready_later(const WheelThreadState::ManualReady& a, const WheelThreadState::ManualReady& b) noexcept {
  return a.due != b.due ? a.due > b.due : a.order > b.order;
}
// Thrown from an advance's handle_fired to cut the advance short: the fired
// list is at fired_limit and cannot grow (TimingWheel::advance_clock keeps
// every alarm not yet fired).
struct AdvanceCutShort {};
// The shard whose wheel thread this thread is (null on every other thread):
// close_lane must not wait for a pass of the thread it runs on.
thread_local const WheelThread* tls_wheel_thread_of = nullptr;
// ShardSeam::serial. Relaxed: only uniqueness matters. 32 bits: after
// 2^32 shards a serial repeats, and a thread's count for a long-gone shard
// could be taken for a new one's; that count is below kPostsPerLook, so the
// thread still looks within kPostsPerLook posts (it only skips the look at
// its first post).
std::uint32_t next_shard_serial() noexcept {
  static std::atomic<std::uint32_t> next{1};
  std::uint32_t s = next.fetch_add(1, std::memory_order_relaxed);
  if (s == 0) s = next.fetch_add(1, std::memory_order_relaxed);  // 0 marks an unused pacer entry
  return s;
}
}  // namespace

WheelThread::WheelThread(const Parts& parts, unsigned index)
    : seam(next_shard_serial(), index, *this),
      config_(parts.config),
      slab_(parts.slab),
      pool_(parts.pool),
      runner_(parts.runner),
      counts_(parts.counts),
      lifecycle_(parts.lifecycle),
      simulation_thread_(parts.simulation_thread),
      // The wheel files the slab's slots in place: nothing to reserve per
      // timer (RuntimeOptions::reserve pre-faults the slab).
      wt_(WheelConfig{config_.options.precision, config_.options.level_bits}, TimePoint(Duration(config_.start_ns)),
          slab_) {
  seam.commands.bound().set(config_.options.max_queue_depth == 0 ? RuntimeOptions::default_max_queue_depth
                                                                 : config_.options.max_queue_depth);
  wt_.handoff_token = std::make_unique<moodycamel::ProducerToken>(pool_.handoff);
  // A simulated runtime has no thread: its passes (on the caller's thread)
  // use this from the start.
  if (simulation_thread_) wt_.retired = std::make_unique<RetiredSlots>(slab_, RetiredSlots::OutOfMemory::never_wait);
}

void WheelThread::start() {
  thread_ = std::thread([this] {
    main();
    record_final_busy();
  });
  clockid_t cpu_clock;
  if (pthread_getcpuclockid(thread_.native_handle(), &cpu_clock) == 0) cpu_clock_ = cpu_clock;
}

void WheelThread::join() {
  if (thread_.joinable()) thread_.join();
}

// A simulated runtime (simulation.hpp) has no wheel thread: the thread that
// runs its passes, the one that made it, counts as its wheel thread.
bool WheelThread::on_wheel_thread() const noexcept {
  return tls_wheel_thread_of == this || (simulation_thread_ && *simulation_thread_ == std::this_thread::get_id());
}

bool ShardSeam::on_wheel_thread() const noexcept { return owner_.on_wheel_thread(); }

void ShardSeam::close_lane_here(LaneCore* lane) const {
  CHIME_ASSERT(on_wheel_thread(), "a lane is closed here only on its shard's wheel thread");
  owner_.close_lane_on_wheel(lane);
}

void WheelThread::prefetch_slot_line(std::uint32_t index) const noexcept { __builtin_prefetch(&slab_[index], 1, 3); }

void WheelThread::main() {
#ifndef NDEBUG
  owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);  // wt()'s check
#endif
  tls_wheel_thread_of = this;
  struct ExitFlag {
    ~ExitFlag() {
      tls_wheel_thread_of = nullptr;
#ifndef NDEBUG
      shard.owner_.store(std::thread::id{}, std::memory_order_relaxed);
#endif
      shard.seam.exited.store(true, std::memory_order_release);
    }
    WheelThread& shard;
  } exit_flag{*this};
  // Timer slack: let futex timeouts expire on time (default slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  retry_until_memory([&] {
    try {
      wt().retired = std::make_unique<RetiredSlots>(slab_, RetiredSlots::OutOfMemory::never_wait);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  });
  bool busy = false;
  for (;;) {
    const std::int64_t started_ns = config_.steady_clock.now().time_since_epoch().count();
    const PassEnd end = run_pass(busy);
    note_pass(started_ns);
    if (end == PassEnd::stopped) break;
    if (end == PassEnd::idle) sleep(busy);  // more_commands: apply them before anything else waits or sleeps
  }
  wt().retired->flush();
}

// The wheel thread, as it returns: its CPU time, for stats() once it is
// gone. relaxed then release: a stats() that acquires the flag reads the
// value stored before it.
void WheelThread::record_final_busy() noexcept {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return;
  busy_final_ns_.store(std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec, std::memory_order_relaxed);
  busy_final_.store(true, std::memory_order_release);
}

// The wheel thread's CPU time so far: its final figure once it has returned,
// else its thread CPU clock. A stats() that read the flag clear just before
// the thread returned reads the clock of a thread that may be gone
// (clock_gettime fails: then the final figure, or 0 if not yet visible).
// With no wheel thread (none started): 0.
Duration WheelThread::busy() const noexcept {
  if (busy_final_.load(std::memory_order_acquire)) return Duration(busy_final_ns_.load(std::memory_order_relaxed));
  if (!cpu_clock_) return Duration::zero();
  timespec ts{};
  if (clock_gettime(*cpu_clock_, &ts) != 0) return Duration(busy_final_ns_.load(std::memory_order_relaxed));
  return Duration(std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec);
}

// One pass (steps 1-4 above; step 5, the sleep, is the caller's). `busy`:
// the pass applied timer commands (sleep's linger policy). Returns
// more_commands when the queue was not emptied (start the next pass at
// once), stopped when the wheel thread must exit (shutdown), idle otherwise.
// main() calls it in its loop; the deterministic simulation
// (simulation.cpp, a test seam) calls it on the test's thread instead.
WheelThread::PassEnd WheelThread::run_pass(bool& busy) {
  const std::uint64_t completed_snapshot = seam.completed.load(std::memory_order_acquire);
  // The clock at application: read by file() the first time a command needs
  // it, again after each batch of commands is dequeued (apply_commands).
  wt().application_now_ns = INT64_MIN;
  wt().pass_out_of_memory = false;
  wt().advance_cut_short = false;
  wt().pass_moves = 0;
  bool exhausted = false;
  busy = apply_commands(exhausted);
  const std::int64_t now = pass_clock();
  // shutdown(cancel_pending): dispatch nothing more. Checked after the
  // clock read, so a pass that goes on read the clock before the call
  // began (runtime_core.hpp, cancel_requested_); what it files or leaves
  // on the overdue list stays Pending for shutdown's sweep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (cancel_requested()) [[unlikely]] {
    stop_passes();
    return PassEnd::stopped;
  }
  // A manual clock moves the wheel only for a flush ("A manual clock"
  // above), once every command before it is applied: runs in due order.
  if (!config_.manual()) {
    advance_and_dispatch(now);
  } else if (may_fire() && exhausted && !manual_run_in_flight(completed_snapshot)) {
    advance_manual(now);
  }
  hand_over();
  // After the hand-off: no run waits for it.
  wt().ahead_pending = wt().wheel.cascade_ahead(kCascadeAheadPerPass);
  wt().pass_moves += wt().wheel.moved_by_last_cascade_ahead();
  if (wt().deferred_adds.empty() && !wt().awaiting_writer) wt().writer_backoff.reset();  // no writer awaited
  if (!exhausted) {
    wt().retired->flush();
    note_out_of_memory();
    if (wt().pass_out_of_memory) [[unlikely]]
      return PassEnd::idle;  // sleep() naps, then the commands are tried again
    // An ADD waits for a reschedule's two stores (apply): let its thread run.
    if (!wt().deferred_adds.empty()) wt().writer_backoff.wait();
    return PassEnd::more_commands;
  }
  if (wt().stop != nullptr) {
    if (wt().stop->mode == ShutdownMode::fire_pending) {
      std::size_t count = 0;
      // Out of memory, shutdown waits for it (runtime.hpp, G22).
      while (!drain_all(Dispatch::drained | Dispatch::final, count)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    stop_passes();
    return PassEnd::stopped;
  }
  sweep_zombies_if_many();
  wt().retired->flush();
  const bool settled = settle_flushes(completed_snapshot);
  answer_next_dues();
  note_out_of_memory();
  // Runs dispatched by passes that did not empty the queue, or held for
  // want of memory, count towards the next settle: reset only after one.
  if (settled) wt().pass_min_due_ns = INT64_MAX;
  return PassEnd::idle;
}

// The pass's clock read: the runtime clock, never behind the wheel (a clock
// must not go backwards; the wheel never moves back) and never past the
// horizon (runtime_config.cpp, horizon_key).
std::int64_t WheelThread::pass_clock() {
  const std::int64_t wheel_now = wt().wheel.now().time_since_epoch().count();
  // A manual clock: the reading of the latest flush, not the clock's time now.
  std::int64_t now = config_.manual() ? wt().manual_release_ns : config_.clock->now().time_since_epoch().count();
  if (now < wheel_now) now = wheel_now;
  if (now > config_.max_wheel_now_ns) now = config_.max_wheel_now_ns;
  return now;
}

// No pass after this one: release the flushes that wait (shutdown answers them).
void WheelThread::stop_passes() {
  // Runs claimed and not yet handed over (out of memory) go first: only
  // their runs end them. Until memory allows.
  hand_over();
  while (!wt().dispatch_batch.empty() || !wt().touched_lanes.empty() || !wt().lane_spill.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    hand_over();
  }
  wt().running = false;
  for (FlushRequest* f : wt().flushes) {
    if (f->completion.signal()) delete f;  // abandoned (Completion)
  }
  wt().flushes.clear();
  for (DrainRequest* d : wt().drains) {
    if (d->completion.signal()) delete d;  // abandoned (Completion)
  }
  wt().drains.clear();
  for (NextDueRequest* n : wt().next_dues) {
    [[maybe_unused]] const bool abandoned = n->completion.signal();  // never: waited for; INT64_MAX, none
  }
  wt().next_dues.clear();
}

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
  if (s.wheel_fired.size() >= s.fired_limit && !grow_fired_limit()) throw AdvanceCutShort{};
  // relaxed: a stale due only misjudges the budget; consider() decides.
  if (slab_[index].due_ns.load(std::memory_order_relaxed) > s.advance_to_ns && ++s.touched_fired >= kRefilesPerAdvance)
      [[unlikely]] {
    throw AdvanceCutShort{};
  }
}

// After a pass (main's loop): the pass's length and what its advance
// re-filed, each kept as a running max for stats().
void WheelThread::note_pass(std::int64_t started_ns) {
  const std::int64_t took = config_.steady_clock.now().time_since_epoch().count() - started_ns;
  if (took > seam.longest_pass_ns.load(std::memory_order_relaxed))
    seam.longest_pass_ns.store(took, std::memory_order_relaxed);
  const std::uint64_t refiled = wt().pass_moves;
  if (refiled > seam.most_refiled_in_a_pass.load(std::memory_order_relaxed)) {
    seam.most_refiled_in_a_pass.store(refiled, std::memory_order_relaxed);
  }
}

// After a pass: since when passes have been out of memory, published for
// the flushes and drains that wait (out_of_memory_too_long). Stored only on
// a change.
void WheelThread::note_out_of_memory() {
  if (!wt().pass_out_of_memory) [[likely]] {
    // Only this thread writes it: its own relaxed load reads its last store.
    if (seam.out_of_memory_since_ns.load(std::memory_order_relaxed) != 0) {
      seam.out_of_memory_since_ns.store(0, std::memory_order_relaxed);
    }
    return;
  }
  if (seam.out_of_memory_since_ns.load(std::memory_order_relaxed) == 0) {
    seam.out_of_memory_since_ns.store(config_.steady_clock.now().time_since_epoch().count(), std::memory_order_relaxed);
  }
}

// A waiting flush or drain gives up: this shard's passes have been out of
// memory for kOutOfMemoryTimeout while it waited. Any thread.
bool ShardSeam::out_of_memory_too_long(std::int64_t waiting_since) const noexcept {
  const std::int64_t since = out_of_memory_since_ns.load(std::memory_order_relaxed);
  return since != 0 && SteadyClock{}.now().time_since_epoch().count() - std::max(since, waiting_since) >=
                           std::chrono::nanoseconds(kOutOfMemoryTimeout).count();
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

// Slack: when to wake for the earliest alarm, whose interval ends at
// `next_fires_at_ns`: its fire time (fire_time), or the interval's end when
// that is its last nanosecond. The time is looked up (cached by the wheel)
// only when that interval is the current or the next one; further out, wake
// at its start and look then.
std::int64_t WheelThread::exact_deadline(std::int64_t next_fires_at_ns) {
  ShardWheel& wheel = wt().wheel;
  const std::int64_t p = config_.precision.count();
  const std::int64_t min_start = next_fires_at_ns - p;
  if (min_start > wheel.now_interval_num_start().time_since_epoch().count() + p) return min_start;
  const auto min_time = wheel.min_alarm_time();
  if (!min_time) return next_fires_at_ns;
  const std::int64_t t = min_time->time_since_epoch().count();
  // The last nanosecond of the interval (interval-rule timers only): wake
  // when it ends, and let the advance fire the whole slot.
  return t >= next_fires_at_ns - 1 ? next_fires_at_ns : t;
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

void WheelThread::sleep(bool busy) {
  if (wt().pass_out_of_memory) [[unlikely]] {
    // Out of memory: try again in a while, whatever is queued or due.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  // A manual clock between flushes: what is due waits for the next flush.
  const bool firing = may_fire();
  if (firing && wt().advance_cut_short) return;  // the wheel is behind the clock: next pass at once
  if (wt().ahead_pending) return;                // more of a span to move down ahead: next pass at once (bounded)
  const bool ready = !wt().overdue.empty() || !wt().manual_ready.empty();
  // A manual clock's next step waits for the run in flight: whoever
  // completes it wakes us (F-W, below; a flush waits).
  const bool step_waits = config_.manual() && manual_run_in_flight(seam.completed.load(std::memory_order_acquire));
  if (firing && ready && !step_waits) {  // due now: next pass
    // Only a reschedule's two stores to wait for: let its thread run first
    // (yields, then short sleeps: backoff.hpp).
    if (wt().awaiting_writer) wt().writer_backoff.wait();
    return;
  }
  const bool waiting_for_runs = !wt().flushes.empty();
  // (F-W) Workers bump seam.completed, fence, then read this flag to decide
  // whether to wake us; we set it, fence, then re-read seam.completed.
  seam.waits_for_workers.store(waiting_for_runs, std::memory_order_relaxed);
  std::int64_t deadline = INT64_MAX;  // in the runtime clock's domain
  // At the horizon nothing in the wheel ever fires (it never advances on).
  if (const auto next = wt().wheel.next_alarm_fires_at();
      next && wt().wheel.now().time_since_epoch().count() < config_.max_wheel_now_ns) {
    deadline = next->time_since_epoch().count();
    deadline = exact_deadline(deadline);
  }
  // Lingering (commands keep coming): wake up at most kLingerNs from now even
  // if no alarm is due, so that a stream of commands (new timers due before
  // the next alarm, say) is applied in batches, not one producer wake-up per
  // command. Only while passes apply commands and the previous sleep was cut
  // short by a producer, or lingered: the first pass without commands
  // sleeps until the next alarm (or forever). Never with a ManualClock.
  wt().lingering =
      busy && config_.clock_kind != RuntimeConfig::ClockKind::manual && (wt().lingering || wt().last_sleep_short);
  std::int64_t wake_at_ns = deadline;  // in the runtime clock's domain: when we will wake up
  if (wt().lingering) {
    const std::int64_t now = config_.clock->now().time_since_epoch().count();
    if (now < deadline - kLingerNs) wake_at_ns = now + kLingerNs;
  }
  // A timer needs an earlier wake-up iff its interval ends before wake_at_ns,
  // that is iff its due is before the last interval boundary strictly before
  // wake_at_ns (for wake_at_ns = deadline, the start of the earliest alarm's
  // interval, since next_alarm_fires_at is that interval's end).
  std::int64_t bound = INT64_MAX;
  if (config_.manual()) {
    bound = INT64_MIN;  // no due needs the wheel: only a flush runs timers
  } else if (wake_at_ns != INT64_MAX) {
    // A timer's fire time is at or after its due: one due before the
    // wake-up may need it earlier (one that does not, an interval-rule timer
    // in the wake-up's own interval, costs a wake-up that files it).
    bound = wake_at_ns;
  }

  const std::uint32_t seen = seam.wake.prepare();
  seam.wake_if_due_before_ns.store(bound, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // (P2) and (F-W)
  bool skip = seam.commands.size_approx() != 0;
  if (waiting_for_runs) {
    // A stepped flush waits only for its shard's run in flight: the pass
    // after that run settles it or takes the next step.
    std::uint64_t need = 0;
    bool marked = false;
    bool stepped = false;
    for (FlushRequest* f : wt().flushes) {
      stepped |= f->stepped;
      if (f->stepped) continue;
      marked = true;
      need = std::max(need, f->mark);
    }
    if (marked && seam.completed.load(std::memory_order_acquire) >= need) skip = true;
    if (stepped && !manual_run_in_flight(seam.completed.load(std::memory_order_acquire))) skip = true;
    if (ready && config_.manual() && !manual_run_in_flight(seam.completed.load(std::memory_order_acquire))) skip = true;
  }
  if (!skip) {
    const TimePoint steady_before = config_.steady_clock.now();
    std::int64_t wake_at = INT64_MAX;  // on the steady clock
    if (wake_at_ns != INT64_MAX) {
      switch (config_.clock_kind) {
        case RuntimeConfig::ClockKind::steady:
          wake_at = wake_at_ns;
          break;
        case RuntimeConfig::ClockKind::manual:  // manual time moves only when told; flush() wakes us
          break;
        case RuntimeConfig::ClockKind::other: {
          // In 128 bits, saturating: the two clocks' times may be at opposite ends of int64.
          const __int128 remaining =
              static_cast<__int128>(wake_at_ns) - config_.clock->now().time_since_epoch().count();
          const __int128 at = steady_before.time_since_epoch().count() + std::max<__int128>(remaining, 0);
          wake_at = at >= INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(at);
          break;
        }
      }
    }
    const TimePoint until{Duration(wake_at)};
    seam.wake.wait_until(seen, wake_at == INT64_MAX ? nullptr : &until);
    seam.wakeups.fetch_add(1, std::memory_order_relaxed);
    wt().last_sleep_short = (config_.steady_clock.now() - steady_before).count() < kLingerNs;
  }
  seam.wake_if_due_before_ns.store(INT64_MIN, std::memory_order_relaxed);
}

// ---- Closing a lane (lanes.cpp, close_lane) ----

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

// ---- A simulated runtime's pass (simulation.hpp) ----

// One pass of this shard on the calling thread. Returns true iff it did
// something (see Simulation::run_one_pass). After the pass that stops the
// shard, does what the wheel thread does as it exits.
bool WheelThread::simulate_pass() {
  if (!wt().running) return false;
  const bool queued = seam.commands.size_approx() != 0;  // exact: nothing runs concurrently
  const std::uint64_t dispatched = wt().dispatched;
  bool busy = false;
  const PassEnd end = run_pass(busy);
  if (end == PassEnd::stopped) {
    wt().retired->flush();
    seam.exited.store(true, std::memory_order_release);
    return true;
  }
  // The overdue list is work only for a pass that may fire: on a ManualClock
  // between flushes it waits for the next flush.
  return queued || busy || end == PassEnd::more_commands || wt().dispatched != dispatched ||
         (may_fire() && (!wt().overdue.empty() || !wt().manual_ready.empty()));
}
}  // namespace chime::detail
