// runtime/runtime_core.hpp: the runtime's shared state and the three roles
// that act on it.
//
// What this is: everything behind chime::Runtime (a pimpl). Its members are
// grouped by who may touch them:
// - producer side (any thread): producer_ops.cpp: schedule, cancel,
//   reschedule, state. They act on a slot's state word (timer_state.hpp) and
//   post commands (command_queue.hpp).
// - the wheel thread: wheel_thread.cpp: owns its WheelThreadState
//   (wheel_thread_state.hpp: the wheel, the overdue list, the pass's scratch,
//   the requests; reached through wt(), which checks the caller in debug
//   builds) and the slots' wheel-only fields; drains commands, advances the wheel, claims due
//   timers (W1) and hands them to the workers.
// - workers: worker_pool.cpp: run a claimed timer's task, then finish it (F1,
//   F2, F3) and count it.
// - lifecycle (any thread but a callback): runtime.cpp: flush, drain,
//   shutdown, stats.
//
// Read in this order: timer_state.hpp, timer_slab.hpp, command_queue.hpp,
// wake_signal.hpp, wheel_thread_state.hpp, worker_pool.hpp, this file,
// producer_ops.cpp, wheel_thread.cpp, worker_pool.cpp, runtime.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chime/detail/assert.hpp"
#include "chime/runtime.hpp"
#include "chime/timing_wheel.hpp"
#include "command_queue.hpp"
#include "dispatch.hpp"
#include "lane_core.hpp"
#include "runtime_stats.hpp"
#include "timer_slab.hpp"
#include "wake_signal.hpp"
#include "wheel_thread_state.hpp"
#include "worker_pool.hpp"

namespace chime::detail {

// now + delay, saturating at the ends of time (the range check then rejects
// it). runtime.cpp.
TimePoint saturating_after(TimePoint now, Duration delay);

class RuntimeCore;
// Test seam (simulation.hpp): non-null while detail::Simulation constructs
// its Runtime on this thread; that RuntimeCore stores itself here and
// starts no thread. simulation.cpp.
extern thread_local RuntimeCore** tls_simulation_request;
// schedule_every's checks and first due, then schedule. runtime.cpp.
TimerId schedule_periodic(RuntimeCore& core, Duration period, Task&& task, const PeriodicOptions& options,
                          ProducerQueueToken* token, LaneCore* lane = nullptr);
// The callback this thread runs, if any (worker_pool.cpp sets it around
// each run): its exception is reported as that run's. False outside a run.
bool report_to_running_callback(std::exception_ptr e) noexcept;  // producer_ops.cpp
// This thread's eventfd that a flush's completion writes (lane.cpp).
int lane_flush_notify_fd();

// A blocking caller's wait for the wheel thread (flush, drain, shutdown).
struct Completion {
  // Notifies under the lock: the waiter owns this object and destroys it as
  // soon as it sees `done`, so the notify must finish before it can look.
  void signal() {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
    cv.notify_all();
    if (notify_fd >= 0) {
      // A flusher on a lane's thread polls its lanes and this eventfd
      // (RuntimeCore::flush). Under the lock, as the notify.
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t r = ::write(notify_fd, &one, sizeof one);
    }
  }
  bool is_done() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
  // Waits until signalled, or until the wheel thread has exited (a request
  // posted just as shutdown stopped it is never served; polling the flag
  // every 10 ms covers that race without another handshake).
  void wait(const std::atomic<bool>& wheel_exited) {
    std::unique_lock<std::mutex> lock(mutex);
    while (!done && !wheel_exited.load(std::memory_order_acquire)) {
      cv.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  int notify_fd = -1;  // also written to when signalled, if set
};

struct FlushRequest {
  std::int64_t target_ns = 0;  // the clock's time at the call
  std::uint64_t mark = 0;      // dispatch count it must see completed
  bool seen = false;           // wheel thread: mark initialised
  Completion completion;
};
struct DrainRequest {
  std::size_t count = 0;
  Completion completion;
};
// The lanes a thread runs (flush runs them while it waits): inline up to
// kInline, so a flush allocates nothing in the usual case.
struct ThreadLanes {
  static constexpr std::size_t kInline = 8;
  void add(LaneCore* l) {
    if (n_ < kInline) {
      inline_[n_] = l;
    } else {
      more_.push_back(l);
    }
    ++n_;
  }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  LaneCore* operator[](std::size_t i) const noexcept { return i < kInline ? inline_[i] : more_[i - kInline]; }

 private:
  LaneCore* inline_[kInline] = {};
  std::vector<LaneCore*> more_;
  std::size_t n_ = 0;
};

struct CloseLaneRequest {
  LaneCore* lane = nullptr;
  Completion completion;
};
// Runtime::check_invariants: the wheel thread checks at its next pass
// (runtime_invariants.cpp) and signals; `failure` is empty if all held.
struct CheckRequest {
  std::string failure;
  Completion completion;
};
struct StopRequest {
  ShutdownMode mode = ShutdownMode::cancel_pending;
  Completion completion;
};

class RuntimeCore {
 public:
  explicit RuntimeCore(RuntimeOptions options);
  ~RuntimeCore();
  RuntimeCore(const RuntimeCore&) = delete;
  RuntimeCore& operator=(const RuntimeCore&) = delete;

  // producer_ops.cpp. `token` may be null (the calling thread's implicit
  // sub-queue). `lane_generation`: the generation of `lane` the caller
  // expects (a Timer's, recorded when it was made); 0: the lane's current
  // one (a Lane's own calls: it is alive).
  TimerId schedule(TimePoint due, std::int64_t period_ns, Missed on_missed, Task&& task, ProducerQueueToken* token,
                   LaneCore* lane = nullptr, std::uint32_t lane_generation = 0);
  bool cancel(TimerId id, ProducerQueueToken* token);
  CancelResult try_cancel(TimerId id);
  CancelResult cancel_and_wait(TimerId id);
  // The due time of a pending timer (handed over but not started counts),
  // or nullopt. Any thread. Lock-free (retries while a reschedule writes).
  std::optional<TimePoint> pending_due(TimerId id) const noexcept;
  // Whether this runtime still exists (runtime.hpp): handles that may
  // outlive it keep a reference and check it before they touch the runtime.
  const std::shared_ptr<RuntimeAlive>& alive() const noexcept { return alive_; }
  // True iff the calling thread is running a callback of this runtime.
  bool in_callback() const noexcept;
  // The id of the run the calling thread is in (of this runtime), or {}.
  TimerId current_run() const noexcept;
  std::uint32_t tag() const noexcept { return tag_; }
  // What schedule() would throw before it takes a slot: StoppedError after
  // shutdown, std::out_of_range for a due beyond the wheel's range. For an
  // arm that is carried out later (chime::Timer, during a run).
  void check_schedulable(const char* what, TimePoint due) const {
    if (stopped_.load(std::memory_order_acquire)) throw StoppedError(std::string("chime::") + what + " after shutdown");
    check_due_in_range(what, due);
  }
  // `lane`: called through that Lane, whose ready runs a call on the lane's
  // thread may take back (R4).
  bool reschedule(TimerId id, TimePoint due, ProducerQueueToken* token, LaneCore* lane = nullptr);
  TimerState state(TimerId id) const noexcept;
  TimePoint now() const noexcept { return clock_->now(); }

  // lane.cpp: lanes (chime::Lane). open_lane: a fresh or reused LaneCore
  // (any thread); close_lane: cancels its pending and ready runs and gives
  // it back (not concurrently with its run_ready); run_lane / wait_and_run:
  // on the lane's thread.
  LaneCore* open_lane();
  void close_lane(LaneCore* lane);
  std::size_t run_lane(LaneCore& lane, std::size_t max);
  std::size_t wait_and_run(LaneCore& lane, TimePoint deadline);
  // A callback's exception caught somewhere other than around the task call
  // (a chime::Detached coroutine's body): counted and passed to on_error as
  // the run's. On the thread of the run.
  void report_callback_exception(TimerId id, std::exception_ptr e) noexcept;

  // runtime.cpp
  void stop_workers();
  void flush();
  std::size_t drain();
  std::size_t shutdown(ShutdownMode mode);
  Stats stats() const;
  // runtime_invariants.cpp: posts a check the wheel thread runs
  // (check_on_wheel) and throws std::logic_error with what it found.
  void check_invariants();
  void post_request_and_wait(CommandKind kind, void* request, Completion& completion);  // drain, check
  Duration wheel_busy() const noexcept;                                                 // ShardStats::busy
  std::unique_ptr<ProducerQueueToken> make_token() { return commands_.make_token(); }
  // A Producer goes away: its cached free slots go back to the free list.
  void return_token(ProducerQueueToken& token) noexcept { slab_.return_cached(token.slots); }
  const Clock& clock() const noexcept { return *clock_; }
  Duration precision() const noexcept { return precision_; }

 private:
  enum class ClockKind { steady, manual, other };

  // The wheel thread's own data. Precondition (CHIME_ASSERT): called on the
  // wheel thread, or while it is not running (construction, after the join).
  WheelThreadState& wt() noexcept {
#ifndef NDEBUG
    const std::thread::id owner = wheel_owner_.load(std::memory_order_relaxed);
    CHIME_ASSERT(owner == std::thread::id{} || owner == std::this_thread::get_id(),
                 "the wheel thread's state touched from another thread while the wheel thread runs");
#endif
    return wt_;
  }

  // The runtime clock's time read in a call that schedules or reschedules,
  // by which the wheel thread judges "due now" (design.md): every clock but
  // the steady one is read in the call, so on a ManualClock a timer's fate
  // depends only on the order of the user's calls, never on when the wheel
  // thread applies its command. On the steady clock the call does not read
  // it (nullopt): the wheel thread's read at application is later, so its
  // verdict is never earlier, and schedule_at keeps no clock read.
  std::optional<std::int64_t> due_now_reading() const noexcept {
    if (clock_kind_ == ClockKind::steady) return std::nullopt;
    return clock_->now().time_since_epoch().count();
  }

  // producer_ops.cpp
  // What a cancel decided (one CAS, or none): cancel, try_cancel and
  // cancel_and_wait read it their way.
  enum class CancelOutcome {
    won,                 // C1, C2 or C4: no run starts
    stopped_later_runs,  // C3: a periodic run is in progress; no later run starts
    running,             // a run is in progress; this call changed nothing
    done,                // fired, finished or cancelled before
    unknown,             // stale, foreign or default id
  };
  CancelOutcome decide_cancel(TimerId id, TimerSlot** slot, ProducerQueueToken* token);
  static CancelResult result_of(CancelOutcome o) noexcept;
  void wait_for_run_end(TimerSlot& slot, TimerId id);
  TimerSlot* slot_of(TimerId id) const noexcept;
  void check_due_in_range(const char* what, TimePoint due) const;  // throws std::out_of_range naming the values
  std::int64_t due_limit_for(std::int64_t wheel_now_ns) const noexcept;
  void post_and_wake(const Command& c, ProducerQueueToken* token, std::int64_t due_ns);
  void refuse_if_over_bound();  // throws CapacityError while the queue is at its bound
  void wake_after_post(ProducerQueueToken* token, std::int64_t due_ns);
  void wake_after_fence(ProducerQueueToken* token, std::int64_t due_ns);
  bool take_wake();
  void end_timer();
  void end_cancelled_timer();  // Counter::cancelled, then end_timer
  bool take_back(TimerSlot& slot, std::uint32_t index, std::uint64_t pending);
  bool withdraw_posted(TimerSlot& slot, std::uint32_t index, std::uint64_t pending, ProducerQueueToken* token);
  void free_unfiled(std::uint32_t index, ProducerQueueToken* token) noexcept;
  void finish_cancel(TimerSlot& slot, std::uint64_t w, std::uint32_t index, ProducerQueueToken* token);  // K1, R3
  void throw_if_in_callback(const char* what) const;

  // wheel_thread.cpp
  // How a pass ended (run_pass): the queue was not emptied (pass again at
  // once), the wheel thread must exit (shutdown), or it may sleep.
  enum class PassEnd { more_commands, stopped, idle };
  void wheel_main();
  PassEnd run_pass(bool& busy);
  std::int64_t pass_clock();
  void stop_passes();
  bool on_wheel_thread() const noexcept;  // this thread is this runtime's wheel thread
  bool apply_commands(bool& exhausted);
  void apply(const Command& c);
  void file(std::uint32_t index, TimerSlot& slot, bool at_application,
            std::optional<std::int64_t> called_at_ns = std::nullopt);
  bool due_now_at_application(std::int64_t due, std::optional<std::int64_t> called_at_ns);
  void reclaim(TimerSlot& slot, std::uint32_t index);
  void advance_and_dispatch(std::int64_t now_ns);
  void fire_past_due();
  std::int64_t exact_deadline(std::int64_t next_fires_at_ns);
  void sort_overdue();
  void consider(std::uint32_t index, std::int64_t boundary_ns, std::int64_t fired_at_ns, std::int64_t due_now_ns);
  bool claim(TimerSlot& slot, std::uint64_t& w, const Dispatch& d);  // W1, then dispatch
  void dispatch(const Dispatch& d);
  void hand_over();
  void drain_all(std::uint8_t flags, std::size_t& count);
  void sweep_zombies_if_many();
  // A hint: the slot's first line (state word, due, wheel fields) will be
  // read and written soon. Timer commands only: a request names no slot.
  void prefetch_slot_line(std::uint32_t index) const noexcept { __builtin_prefetch(&slab_[index], 1, 3); }
  void prefetch_slot(const Command& c) const noexcept {
    if (c.kind == CommandKind::add || c.kind == CommandKind::rearm || c.kind == CommandKind::reschedule) {
      prefetch_slot_line(c.slot);
    }
  }
  std::string check_on_wheel();  // runtime_invariants.cpp: the first broken invariant, or empty
  void settle_flushes(std::uint64_t completed_snapshot);
  void sleep(bool busy);
  void record_final_busy() noexcept;  // runtime.cpp: the thread's CPU time as it returns

  // worker_pool.cpp. Where a batch runs: a periodic re-arm is filed
  // directly on the wheel thread, posted as a command elsewhere; a worker or
  // a lane wakes the wheel thread when a flush waits for runs.
  enum class RunPlace { worker, wheel_thread, lane };
  void worker_main();
  // Returns how many callbacks ran (the rest were cancelled before they started).
  std::size_t run_batch(const Dispatch* d, std::size_t n, RetiredSlots& retired, RunPlace where);
  bool run(const Dispatch& d, std::int64_t clock_now_ns, std::int64_t& steady_ns, RetiredSlots& retired,
           RunPlace where);
  void end_run(TimerSlot& slot, const Dispatch& d, std::int64_t steady_end_ns, RetiredSlots& retired, RunPlace where);
  void count_completed(std::uint64_t n);

  // simulation.cpp (a test seam: simulation.hpp). With simulated_, no
  // thread is started: flush, drain and shutdown run the passes they wait
  // for on the calling thread (simulate_until), and the calling thread
  // counts as the wheel thread (on_wheel_thread).
  friend class Simulation;
  bool simulate_pass();
  void simulate_until(Completion& done, const ThreadLanes& lanes);
  void simulate_until_stopped();

  // lane.cpp
  bool lane_closed(const TimerSlot& slot) const noexcept;
  void cancel_for_closed_lane(TimerSlot& slot, std::uint32_t index);
  void close_lane_on_wheel(LaneCore* lane);
  void run_flush_on_lanes(FlushRequest& request, const ThreadLanes& lanes);
  ThreadLanes lanes_of_this_thread();

  // Configuration.
  RuntimeOptions options_;
  SteadyClock steady_clock_;
  const Clock* clock_;
  ClockKind clock_kind_;
  Duration precision_;
  // RuntimeOptions::slack, at most the precision (the default: zero given).
  // Below the precision the wheel thread fires timers of the current
  // interval once their exact due has passed, and sleeps until the earliest
  // due plus this (wheel_thread.cpp, "Slack"); at the precision it keeps the
  // interval rule.
  std::int64_t slack_ns_;
  bool exact() const noexcept { return slack_ns_ < precision_.count(); }
  std::int64_t start_ns_;
  std::int64_t max_offset_intervals_;  // 2^num_bits - 1: the range the wheel always accepts
  std::int64_t horizon_key_;           // the last interval the wheel advances into (runtime.cpp, horizon_key)
  std::int64_t max_wheel_now_ns_;      // its start: the wheel's time never passes it
  std::uint32_t tag_;                  // this runtime's identity in its TimerIds (runtime.cpp, next_runtime_tag)
  bool wake_on_post_count_ = true;     // wake a sleeping wheel every kPostsPerWake posts (not with a ManualClock)
  // Test seam (simulation.hpp): no wheel thread, no workers; the passes run
  // on simulation_thread_, the thread that made the runtime, when it asks.
  bool simulated_ = false;
  std::thread::id simulation_thread_;

  // The seam: what more than one role touches. For each: who writes, who
  // reads, the order, and why it is enough (the full argument is where
  // named; the slots' state words are timer_state.hpp's).
  // - slab_'s slots: producers (task, due, state word), the wheel thread
  //   (state word: A1, W1, L1/L2; its own fields; a closed lane's tasks),
  //   workers and lanes (B1, F1-F4; a periodic's next due), shutdown's
  //   sweep (X1/X2). A slot's fields are handed on by the state word's
  //   transitions (timer_state.hpp); a slot's reuse by the free list's
  //   release / acquire (timer_slab.hpp); the sweep's access to the wheel
  //   thread's fields by the join.
  // - commands_: producers push timer commands; workers and lanes push
  //   periodic re-arms; flush, drain, shutdown and close_lane push
  //   requests; the wheel thread pops (stats() reads size_approx). The
  //   queue's release / acquire orders a command's fields before its
  //   application. Its QueueBound (command_queue.hpp; max_queue_depth):
  //   producers look at size_approx every 64 posts and set its over_bound
  //   flag, every schedule reads the flag; all relaxed, argued there.
  // - wake_if_due_before_ns_: the wheel thread stores its bound before it
  //   sleeps and INT64_MIN after; whoever posts (producers, workers and
  //   lanes re-arming) may CAS it to "awake". Relaxed, with the (P1)/(P2)
  //   seq_cst fences: the CAS only elects one waker, the fences order a
  //   post against the sleeper's look at the queue (producer_ops.cpp,
  //   wake_after_post).
  // - due_limit_ns_: the constructor sets it, the wheel thread raises it
  //   after each advance; schedule, reschedule and Timer's arm read it for
  //   the range check. Relaxed: it only grows, so a stale value is smaller
  //   and the check conservative (near the limit it may refuse a due the
  //   wheel would already take; never the reverse) (check_due_in_range).
  // - stopped_: shutdown stores it seq_cst, then fences before its sweep;
  //   a schedule fences (P1) after its ADD, then loads it: S1's Dekker pair
  //   (state-machine.md, "Shutdown vs producers still scheduling"); lanes
  //   pair it with runs_active (lane.cpp); flush, drain, open_lane,
  //   close_lane and check_schedulable read it (acquire) as an early out.
  // - cancel_requested_: shutdown(cancel_pending) stores it (seq_cst)
  //   before stopped_; the wheel thread loads it between command batches
  //   and, after a seq_cst fence, after each pass's clock read: set by
  //   then, the pass dispatches nothing. Not set by then, the shutdown call
  //   began after that clock read, so every timer the pass dispatches was
  //   due at or before the call (design.md, shutdown).
  // - shutdown_done_: shutdown stores it (release) after its sweep and
  //   reads it under its mutex; a lane waiting for the sweep acquires it,
  //   so the sweep's writes come first.
  // - wheel_exited_: the wheel thread stores it (release) as it returns; a
  //   blocked flush / drain / close acquires it and stops waiting for a
  //   request that will never be served (Completion::wait); close_lane's
  //   acquire also makes every ready-queue enqueue of the wheel thread
  //   visible before it drains the lane.
  // - completed_: workers and lanes add once per batch (release), and so
  //   do the wheel thread's inline runs and close_lane's drain; the wheel
  //   thread acquires it (so a run's effects and re-arm posts come before
  //   the pass that counts it); a flusher learns of it through
  //   Completion's mutex. The (F-W) fences pair it with
  //   wheel_waits_for_workers_.
  // - wheel_waits_for_workers_: the wheel thread stores it before sleeping,
  //   workers and lanes read it (count_completed); relaxed, with the (F-W)
  //   seq_cst fences (the wheel's is (P2)): the worker wakes the wheel, or
  //   the wheel sees the count.
  // - live_: schedule adds (and subtracts on a refusal, a take-back or a
  //   withdrawal); whoever ends a timer subtracts (end_timer; a worker
  //   ending a one-shot does so before F1). Relaxed RMWs: max_pending needs
  //   an exact count; the order that matters (a timer seen Fired no longer
  //   counts) comes from F1's release (RuntimeCapacityRelease).
  // - counters_, lateness_, run_time_: each thread writes its own stripe
  //   (threads beyond the 15th share the last one with RMWs), stats() and
  //   the wheel thread's zombie estimate sum (runtime_stats.hpp); relaxed:
  //   exact once the writers' work happens-before the read (a flush, a
  //   join), never torn.
  // - wakeups_, zombie_sweeps_: the wheel thread only writes, stats()
  //   reads; relaxed: one writer, no order needed with other data.
  // - alive_: the destructor clears it (release) after shutdown; Producer,
  //   Timer, Lane and KeyedTimers load it (acquire) before they touch the
  //   runtime. A use after the destruction is ordered after it by the
  //   user's own synchronization; a use racing it is not detected.
  // - wake_ (the wheel thread's futex word): every poster, flush, drain,
  //   close_lane, shutdown and count_completed wake it; the wheel thread
  //   prepares and waits (wake_signal.hpp has its protocol).
  // - pool_.handoff: see worker_pool.hpp. lanes_ is under lanes_mutex_;
  //   each LaneCore's atomics are argued in lane_core.hpp.
  //
  // Configuration above is written by the constructor before any thread
  // starts (std::thread's start orders it for them) and never after.
  TimerSlab slab_;
  CommandQueue commands_;
  WakeSignal wake_;
  // While the wheel thread sleeps: the start of the interval of its earliest
  // alarm (its wake-up time minus one precision). A due time before it needs
  // the wheel earlier. INT64_MIN while awake (or once a producer has taken
  // the wake: only one producer wakes it per sleep); INT64_MAX: no alarm.
  std::atomic<std::int64_t> wake_if_due_before_ns_{INT64_MIN};
  std::atomic<std::int64_t> due_limit_ns_;  // producers accept due < this; raised after each advance
  std::atomic<bool> stopped_{false};
  // shutdown(cancel_pending) was called: the wheel thread stops at once,
  // however many commands are queued (wheel_thread.cpp, wheel_main).
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> shutdown_done_{false};
  std::atomic<bool> wheel_exited_{false};  // set by the wheel thread as it returns
  std::mutex shutdown_mutex_;

  // Counters (runtime_stats.hpp). Counter::lazy_cancels counts C1 and C2
  // cancels of filed timers: zombies the wheel thread reclaims lazily;
  // compared with WheelThreadState::reclaimed to decide a zombie sweep.
  RuntimeCounters counters_;
  std::atomic<std::uint64_t> live_{0};  // exact, maintained only when max_pending > 0
  std::atomic<std::uint64_t> wakeups_{0};
  std::atomic<std::uint64_t> zombie_sweeps_{0};  // written by the wheel thread only
  std::atomic<std::uint64_t> completed_{0};      // runs finished (worker or inline)
  std::atomic<bool> wheel_waits_for_workers_{false};
  LatenessHistogram lateness_;
  LatenessHistogram run_time_;
  std::shared_ptr<RuntimeAlive> alive_ = std::make_shared<RuntimeAlive>();

  // Lanes (lane.cpp). lanes_ owns every LaneCore ever opened, for the
  // runtime's life (slots and commands may name one after its Lane is gone);
  // a closed one is reused.
  std::mutex lanes_mutex_;
  std::vector<std::unique_ptr<LaneCore>> lanes_;

  // The wheel thread's own data (wheel_thread_state.hpp): reached only
  // through wt(), which checks the caller in debug and sanitizer builds.
  WheelThreadState wt_;
#ifndef NDEBUG
  // The wheel thread while it runs (set first thing in wheel_main, reset as
  // it returns); the default id before it starts and after it exits. Only
  // wt()'s check reads it, relaxed: a thread entitled to wt() (the wheel
  // thread, or any thread before the start or after the join) is ordered
  // with the stores by the thread's start and join.
  std::atomic<std::thread::id> wheel_owner_{};
#endif
  // The workers and their hand-off queue (worker_pool.hpp).
  WorkerPool pool_;
  std::thread wheel_thread_;
  // The wheel thread's CPU time, for ShardStats::busy (runtime.cpp,
  // wheel_busy): with the thread, per shard. wheel_cpu_clock_ is set by the
  // constructor once the thread started (before any stats() call can run);
  // the thread itself stores its final CPU time as it returns, then
  // wheel_busy_final_ (release), which stats() acquires before it trusts
  // the value and stops reading a clock whose thread is gone.
  std::optional<clockid_t> wheel_cpu_clock_;
  std::atomic<std::int64_t> wheel_busy_final_ns_{0};
  std::atomic<bool> wheel_busy_final_{false};
};

}  // namespace chime::detail
