// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_core.hpp: the runtime's shared state and the three roles
// that act on it.
//
// What this is: everything behind chime::Runtime (a pimpl). Its members are
// grouped by who may touch them:
// - producer side (any thread): producer_ops.cpp: schedule, cancel,
//   reschedule, state. They act on a slot's state word (timer_state.hpp) and
//   post commands (command_queue.hpp).
// - the wheel threads, one per shard (wheel_thread.hpp, a WheelThread
//   each: its wheel, command queue, wake signal and pass loop;
//   wheel_thread.cpp): each owns its WheelThreadState (wheel_thread_state.hpp:
//   the wheel, the overdue list, the pass's scratch, the requests; reached
//   through WheelThread::wt(), which checks the caller in debug builds) and
//   the wheel-only fields of the slots it filed; drains its commands,
//   advances its wheel, claims due timers (W1) and hands them to the
//   workers.
// - workers: runner.hpp (a Runner, which lanes and a wheel thread with
//   workers = 0 use too): run a claimed timer's task, then finish it (F1,
//   F2, F3) and count it.
// - lifecycle (any thread but a callback): runtime_core.cpp: flush, drain,
//   shutdown, stats.
//
// Read in this order: timer_state.hpp, timer_slab.hpp, command_queue.hpp,
// wake_signal.hpp, wheel_thread_state.hpp, worker_pool.hpp, this file,
// wheel_thread.hpp, producer_ops.cpp, wheel_thread.cpp, runner.cpp,
// runtime_core.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chime/detail/assert.hpp"
#include "chime/runtime.hpp"
#include "chime/timing_wheel.hpp"
#include "command_poster.hpp"
#include "command_queue.hpp"
#include "dispatch.hpp"
#include "lane_core.hpp"
#include "lanes.hpp"
#include "runner.hpp"
#include "runtime_config.hpp"
#include "runtime_stats.hpp"
#include "shards.hpp"
#include "slack.hpp"
#include "timer_ends.hpp"
#include "timer_slab.hpp"
#include "wake_signal.hpp"
#include "wheel_thread.hpp"
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
                          ProducerQueueToken* token, LaneCore* lane = nullptr,
                          std::optional<Duration> slack = std::nullopt);
// This thread's eventfd that a flush's completion writes (lanes.cpp).
int lane_flush_notify_fd();

// A blocking caller's wait for the wheel thread (flush, drain, shutdown).
// A flush or drain may give up on a wheel thread that is out of memory
// (abandon): the request, on the heap, then belongs to the wheel thread,
// which deletes it when it would have signalled it. Whoever comes second,
// under the mutex, frees it.
struct Completion {
  // Notifies under the lock: the waiter owns this object and destroys it as
  // soon as it sees `done`, so the notify must finish before it can look.
  // True iff the waiter abandoned the request: the caller deletes it.
  [[nodiscard]] bool signal() {
    std::lock_guard<std::mutex> lock(mutex);
    if (abandoned) return true;
    done = true;
    cv.notify_all();
    if (notify_fd >= 0) {
      // A flusher on a lane's thread polls its lanes and this eventfd
      // (RuntimeCore::flush). Under the lock, as the notify.
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t r = ::write(notify_fd, &one, sizeof one);
    }
    return false;
  }
  // The waiter gives up: true iff it was not signalled yet (the request is
  // the wheel thread's to delete now); false if it was (the waiter's).
  bool abandon() {
    std::lock_guard<std::mutex> lock(mutex);
    if (done) return false;
    abandoned = true;
    return true;
  }
  bool is_done() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
  // The waiter gave up before the wheel thread took the request up: it is
  // dropped (deleted by the caller), not served.
  bool was_abandoned() {
    std::lock_guard<std::mutex> lock(mutex);
    return abandoned;
  }
  // Waits until signalled, or until the wheel thread has exited (a request
  // posted just as shutdown stopped it is never served; polling the flag
  // every 10 ms covers that race without another handshake).
  void wait(const std::atomic<bool>& wheel_exited) {  // ShardSeam::exited
    std::unique_lock<std::mutex> lock(mutex);
    while (!done && !wheel_exited.load(std::memory_order_acquire)) {
      cv.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  // As wait, but gives up, abandoning the request, once `give_up()` says so
  // (looked at every 10 ms). False iff it gave up.
  template <class GiveUp>
  bool wait_or_abandon(const std::atomic<bool>& wheel_exited, GiveUp give_up) {
    std::unique_lock<std::mutex> lock(mutex);
    while (!done && !wheel_exited.load(std::memory_order_acquire)) {
      cv.wait_for(lock, std::chrono::milliseconds(10));
      if (!done && give_up()) {
        abandoned = true;
        return false;
      }
    }
    return true;
  }
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the waiter gave up (abandon)
  // For reuse by its waiter, once served (nobody else refers to it).
  void reset() noexcept {
    done = false;
    abandoned = false;
    notify_fd = -1;
  }
  int notify_fd = -1;  // also written to when signalled, if set
};

// How long flush() and drain() wait on a wheel thread that is out of memory
// (wheel_thread.cpp, "Out of memory") before they give up with
// std::bad_alloc; also how long they retry posting their request.
inline constexpr std::chrono::seconds kOutOfMemoryTimeout{1};
// What flush() and drain() throw then (a std::bad_alloc that says why).
class WheelOutOfMemory : public std::bad_alloc {
 public:
  const char* what() const noexcept override {
    return "chime::Runtime: a wheel thread has been out of memory for 1 s; every accepted timer is kept and "
           "applied once memory is available (flush() or drain() may be called again)";
  }
};

struct FlushRequest {
  std::int64_t target_ns = 0;  // the clock's time at the call
  std::uint64_t mark = 0;      // dispatch count it must see completed
  bool seen = false;           // wheel thread: mark initialised
  Completion completion;
  void reset() noexcept {
    target_ns = 0;
    mark = 0;
    seen = false;
    completion.reset();
  }
};
struct DrainRequest {
  std::size_t count = 0;
  Completion completion;
  void reset() noexcept {
    count = 0;
    completion.reset();
  }
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
  // A caller's slack argument as a slot stores it (slack.hpp): throws
  // std::invalid_argument, naming `what`, for a negative one.
  std::uint8_t slack_code(std::optional<Duration> slack, const char* what) const {
    return slack_code_of(slack, config_.precision, what);
  }
  // The same for a call that knows its delay (schedule_after, arm_after,
  // sleep_for): without a slack, the runtime's default for that delay,
  // measured in the call (slack.hpp).
  std::uint8_t slack_code_after(std::optional<Duration> slack, Duration delay, const char* what) const {
    return slack ? slack_code_of(slack, config_.precision, what) : runtime_slack_code(delay.count());
  }
  // The slack a timer `delay` ahead gets without one of its own, as a
  // Duration (what slack_code_after files it by).
  Duration default_slack(Duration delay) const noexcept {
    if (config_.options.slack != Duration::zero()) return config_.options.slack;
    return std::min(config_.precision, Duration(std::max(delay.count() >> kDefaultSlackShift, kDefaultSlackMinNs)));
  }
  // `slack_code`: the timer's slack (slack.hpp; slack_code_of checks a
  // caller's argument).
  TimerId schedule(TimePoint due, std::int64_t period_ns, Missed on_missed, Task&& task, ProducerQueueToken* token,
                   LaneCore* lane = nullptr, std::uint32_t lane_generation = 0,
                   std::uint8_t slack_code = SlackCode::runtime_default);
  // schedule() in two steps, for a caller that must know the schedule will
  // be accepted before it gives up something (chime::Timer's re-arm
  // replaces its pending run only then). reserve_schedule throws what
  // schedule throws before it takes a slot, and takes it; then exactly one
  // of commit_schedule (throws only StoppedError, if shutdown began since)
  // or release_reservation. `extra_pending`: timers the caller is about to
  // end, by which max_pending may be exceeded until they have.
  struct ScheduleReservation {
    WheelThread* shard;
    ProducerQueueToken* token;
    std::uint32_t index;
  };
  ScheduleReservation reserve_schedule(TimePoint due, ProducerQueueToken* token, LaneCore* lane,
                                       std::size_t extra_pending);
  TimerId commit_schedule(const ScheduleReservation& r, TimePoint due, std::int64_t period_ns, Missed on_missed,
                          Task&& task, LaneCore* lane, std::uint32_t lane_generation, bool must_post,
                          std::uint8_t slack_code);
  void release_reservation(const ScheduleReservation& r) noexcept;

 private:
  // producer_ops.cpp: their bodies, inlined into schedule().
  ScheduleReservation reserve_schedule_inline(TimePoint due, ProducerQueueToken* token, LaneCore* lane,
                                              std::size_t extra_pending);
  TimerId commit_schedule_inline(const ScheduleReservation& r, TimePoint due, std::int64_t period_ns, Missed on_missed,
                                 Task&& task, LaneCore* lane, std::uint32_t lane_generation, bool must_post,
                                 std::uint8_t slack_code);

 public:
  bool cancel(TimerId id, ProducerQueueToken* token);
  CancelResult try_cancel(TimerId id);
  CancelResult cancel_and_wait(TimerId id);
  // The due time of a pending timer (handed over but not started counts),
  // or nullopt. Any thread. Lock-free (retries while a reschedule writes).
  std::optional<TimePoint> pending_due(TimerId id) const noexcept;
  // Whether this runtime still exists (runtime.hpp): handles that may
  // outlive it keep a reference and check it before they touch the runtime.
  const std::shared_ptr<RuntimeAlive>& alive() const noexcept { return alive_; }
  std::uint32_t tag() const noexcept { return config_.tag; }
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
  TimePoint now() const noexcept { return config_.clock->now(); }

  // Lanes (chime::Lane; lanes.hpp).
  Lanes& lanes() noexcept { return lanes_; }

  // runtime_core.cpp
  void stop_workers();
  void stop_started_threads(unsigned started);  // a failed construction
  void flush();
  std::size_t drain();
  std::size_t shutdown(ShutdownMode mode);
  Stats stats() const;
  // runtime_core.cpp: posts a check the wheel thread runs
  // (check_on_wheel) and throws std::logic_error with what it found.
  void check_invariants();
  void post_request_and_wait(WheelThread& shard, CommandKind kind, void* request, Completion& completion);
  // The shards (shards.hpp): which one a post goes to; a Producer's token.
  Shards& shards() noexcept { return shards_; }
  // A Producer goes away: its cached free slots go back to the free list.
  void return_token(ProducerQueueToken& token) noexcept { slab_.return_cached(token.slots); }
  const Clock& clock() const noexcept { return *config_.clock; }
  Duration precision() const noexcept { return config_.precision; }

  // ---- What the shards (wheel_thread.hpp) use of their runtime; who
  // touches what, and in what order, is argued at the fields below. ----
  const RuntimeConfig& config() const noexcept { return config_; }
  // The one slab every shard files from and claims in.
  TimerSlab& slab() noexcept { return slab_; }
  // The hand-off queue the wheel threads enqueue claimed runs to; no
  // threads: workers = 0, the wheel thread runs them (run_on_wheel_thread).
  WorkerPool& pool() noexcept { return pool_; }
  // A test seam's runtime (simulation.hpp): no wheel thread, no workers.
  bool simulated() const noexcept { return simulated_; }
  // The calling thread runs a simulated runtime's passes: it counts as its
  // shards' wheel thread.
  bool on_simulation_thread() const noexcept { return simulated_ && simulation_thread_ == std::this_thread::get_id(); }
  // shutdown(cancel_pending) was called. Relaxed: the wheel thread fences
  // where the order matters (cancel_requested_, below).
  bool cancel_requested() const noexcept { return cancel_requested_.load(std::memory_order_relaxed); }
  // After a shard's advance: raises due_limit_ns_ to the limit of a wheel
  // at `wheel_now_ns`; never lowers it (producer_ops.cpp).
  void raise_due_limit(std::int64_t wheel_now_ns) noexcept;
  // Runs claimed timers (runner.hpp): workers = 0, the wheel thread runs
  // its batch itself (Runner::Place::wheel_thread); a periodic's re-arm is
  // filed at once. Also says whether the calling thread runs a callback.
  Runner& runner() noexcept { return runner_; }
  const Runner& runner() const noexcept { return runner_; }
  // The slack of a timer that gave none (RuntimeOptions::slack when set,
  // else proportional to `delay_ns`: slack.hpp).
  std::uint8_t runtime_slack_code(std::int64_t delay_ns) const noexcept {
    return config_.fixed_slack_code != SlackCode::runtime_default
               ? config_.fixed_slack_code
               : default_slack_code(delay_ns, config_.precision.count());
  }
  // Ending a timer: its counts (timer_ends.hpp).
  const TimerEnds& ends() const noexcept { return ends_; }

 private:
  // The runtime clock's time read in a call that schedules or reschedules,
  // by which the wheel thread judges "due now" (design.md): every clock but
  // the steady one is read in the call, so on a ManualClock a timer's fate
  // depends only on the order of the user's calls, never on when the wheel
  // thread applies its command. On the steady clock the call does not read
  // it (nullopt): the wheel thread's read at application is later, so its
  // verdict is never earlier, and schedule_at keeps no clock read.
  std::optional<std::int64_t> due_now_reading() const noexcept {
    if (config_.clock_kind == ClockKind::steady) return std::nullopt;
    return config_.clock->now().time_since_epoch().count();
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
  bool take_back(TimerSlot& slot, std::uint32_t index, std::uint64_t pending);
  bool withdraw_posted(TimerSlot& slot, std::uint32_t index, std::uint64_t pending, ProducerQueueToken* token);
  void free_unfiled(std::uint32_t index, ProducerQueueToken* token) noexcept;
  void finish_cancel(TimerSlot& slot, std::uint64_t w, std::uint32_t index, ProducerQueueToken* token);  // K1, R3
  void throw_if_in_callback(const char* what) const;

  // A test seam (simulation.hpp). With simulated_, no thread is started:
  // flush, drain and shutdown run the passes they wait for on the calling
  // thread (Simulation::simulate_until), and the calling thread counts as
  // the wheel thread (on_wheel_thread).

  // Configuration (runtime_config.hpp): fixed by the constructor.
  RuntimeConfig config_;
  using ClockKind = RuntimeConfig::ClockKind;
  // A ManualClock: timers run only inside flush (wheel_thread.cpp, "A manual clock").
  bool manual() const noexcept { return config_.manual(); }
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
  // - shards_: the constructor fills it and starts their threads; it never
  //   changes after. Each WheelThread's seam (its command queue, wake
  //   signal and bound, completed and its flag, exited, its counts) is
  //   argued in shard_seam.hpp.
  // - a slot's shard (TimerSlot::shard): written by the scheduling producer
  //   before S1 and read, relaxed, by whoever posts for the timer (a
  //   reschedule, a re-arm) or counts its lazy cancel, as `lane` is
  //   (timer_slab.hpp).
  // - due_limit_ns_: the constructor sets it, each shard's wheel thread
  //   raises it (a CAS to the max) after each advance; schedule,
  //   reschedule and Timer's arm read it for the range check. Relaxed: it
  //   only grows, so a stale value is smaller and the check conservative.
  //   A shard whose wheel is behind the one that raised it files a due
  //   beyond its own range at the last time it accepts, and again when that
  //   comes (wheel_thread.cpp, file()), so no shard's range is exceeded.
  // - stopped_: shutdown stores it seq_cst, then fences before its sweep;
  //   a schedule fences (P1) after its ADD, then loads it: S1's Dekker pair
  //   (state-machine.md, "Shutdown vs producers still scheduling"); lanes
  //   pair it with runs_active (lanes.cpp); flush, drain, open_lane,
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
  // - live_: schedule adds (and subtracts on a refusal, a take-back or a
  //   withdrawal); whoever ends a timer subtracts (end_timer; a worker
  //   ending a one-shot does so before F1). Relaxed RMWs: max_pending needs
  //   an exact count; the order that matters (a timer seen Fired no longer
  //   counts) comes from F1's release (RuntimeCapacityRelease).
  // - counters_, lateness_, run_time_: each thread writes its own stripe
  //   (threads beyond the 15th share the last one with RMWs), stats()
  //   sums them (runtime_stats.hpp); relaxed:
  //   exact once the writers' work happens-before the read (a flush, a
  //   join), never torn.
  // - alive_: the destructor clears it (release) after shutdown; Producer,
  //   Timer, Lane and KeyedTimers load it (acquire) before they touch the
  //   runtime. A use after the destruction is ordered after it by the
  //   user's own synchronization; a use racing it is not detected.
  // - pool_.handoff: see worker_pool.hpp. lanes_ keeps its LaneCores under its mutex (lanes.hpp);
  //   each LaneCore's atomics are argued in lane_core.hpp.
  //
  // config_ and the test seam's fields above are written by the
  // constructor before any thread starts (std::thread's start orders it for
  // them) and never after.
  TimerSlab slab_;
  std::atomic<std::int64_t> due_limit_ns_;  // producers accept due < this; raised after each advance
  std::atomic<bool> stopped_{false};
  // shutdown(cancel_pending) was called: the wheel thread stops at once,
  // however many commands are queued (wheel_thread.cpp, run_pass).
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> shutdown_done_{false};
  std::mutex shutdown_mutex_;

  // Counters (runtime_stats.hpp).
  RuntimeCounters counters_;
  std::atomic<std::uint64_t> live_{0};  // exact, maintained only when max_pending > 0
  LatenessHistogram lateness_;
  LatenessHistogram run_time_;
  std::shared_ptr<RuntimeAlive> alive_ = std::make_shared<RuntimeAlive>();

  // The workers and their hand-off queue (worker_pool.hpp).
  WorkerPool pool_;
  // The shards (wheel_thread.hpp), in index order: made after the pool
  // (each holds a token on its hand-off queue), destroyed before it.
  Shards shards_;

  // The roles' narrow views of the fields above (references only): ending
  // a timer (timer_ends.hpp), posting to a shard (command_poster.hpp),
  // running claimed timers (runner.hpp).
  TimerEnds ends_{counters_, live_, config_.options.max_pending != 0};
  CommandPoster poster_{config_.wake_on_post_count};
  Runner runner_{config_, slab_, counters_, lateness_, run_time_, ends_, poster_, shards_};
  // Lanes (lanes.hpp): every LaneCore ever opened, under its own mutex.
  Lanes lanes_{config_, slab_, stopped_, shutdown_done_, shards_, runner_, ends_};
};

}  // namespace chime::detail
