// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread.cpp: a shard's wheel thread and its pass
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
////
// The steps live beside this file, one concern each:
//   wheel_thread_apply.cpp       step 1: applying commands, filing timers;
//   wheel_thread_fire.cpp        steps 2-4: the advance, claiming, the
//                                hand-over, drains, sweeps, settling flushes
//                                (with the rules "Slack" and "No pass does
//                                unbounded work");
//   wheel_thread_manual.cpp      a ManualClock's steps ("A manual clock");
//   wheel_thread_sleep.cpp       step 5, the sleep (with "Race: enqueue vs
//                                the wheel going to sleep");
//   wheel_thread_lane_close.cpp  a lane's close, on this thread.
// wheel_thread_pass.hpp holds what they share: the per-pass budgets and
// the helpers that fill lists without allocating.
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
#include "wheel_thread_pass.hpp"
#include "worker_pool.hpp"

namespace chime::detail {

using namespace pass;

namespace {
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
  advance(now, exhausted, completed_snapshot);
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

// The pass's advance, the one place where the clock's kind chooses how the
// wheel moves: to `now` (the pass's clock read), firing what is due; on a
// manual clock only for a flush (wheel_thread_manual.cpp, "A manual
// clock"), once every command before it is applied (`exhausted`) and no run
// of this shard is in flight (`completed`: seam.completed before the pass),
// one step in (due, call order) order.
void WheelThread::advance(std::int64_t now, bool exhausted, std::uint64_t completed) {
  if (!config_.manual()) {
    advance_and_dispatch(now);
  } else if (may_fire() && exhausted && !manual_run_in_flight(completed)) {
    advance_manual(now);
  }
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
