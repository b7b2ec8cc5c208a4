// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_core.hpp: the runtime's shared state and the roles that
// act on it.
//
// What this is: everything behind chime::Runtime (a pimpl): the state the
// roles share, and one object per role, each holding references to the
// pieces it needs:
// - producer side (any thread): ProducerOps (producer_ops.hpp): schedule,
//   cancel, reschedule, state. They act on a slot's state word (timer_state.hpp) and
//   post commands (command_queue.hpp).
// - the wheel threads, one per shard (wheel_thread.hpp, a WheelThread
//   each: its wheel, command queue, wake signal and pass loop;
//   wheel_thread.cpp): each owns its WheelThreadState (wheel_thread_state.hpp:
//   the wheel, the overdue list, the pass's scratch, the requests; reached
//   through WheelThread::wt(), which checks the caller in debug builds) and
//   the wheel-only fields of the slots it filed; drains its commands,
//   advances its wheel, claims due timers (W1) and hands them to the
//   workers.
// - workers: Runner (runner.hpp, which lanes and a wheel thread with
//   workers = 0 use too): run a claimed timer's task, then finish it (F1,
//   F2, F3) and count it.
// - lanes' threads: Lanes (lanes.hpp): a lane's ready runs, its close.
// - lifecycle (any thread but a callback): runtime_core.cpp: flush, drain,
//   shutdown, stats.
//
// Each role holds references only to what it uses (six at most), and
// reaches a shard through its seam (shard_seam.hpp, shards.hpp); only
// runtime_core.cpp and the public handles include this header.
//
// Read in this order: timer_state.hpp, timer_slab.hpp, command_queue.hpp,
// wake_signal.hpp, wheel_thread_state.hpp, worker_pool.hpp, this file,
// wheel_thread.hpp, producer_ops.hpp, producer_ops.cpp, wheel_thread.cpp, runner.cpp,
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
#include <utility>
#include <vector>

#include "chime/detail/assert.hpp"
#include "chime/runtime.hpp"
#include "chime/timing_wheel.hpp"
#include "command_poster.hpp"
#include "command_queue.hpp"
#include "dispatch.hpp"
#include "lane_core.hpp"
#include "lanes.hpp"
#include "lifecycle_flags.hpp"
#include "producer_ops.hpp"
#include "requests.hpp"
#include "runner.hpp"
#include "runtime_config.hpp"
#include "runtime_stats.hpp"
#include "shards.hpp"
#include "slack.hpp"
#include "timer_counts.hpp"
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
// This thread's eventfd that a flush's completion writes (lanes.cpp).
int lane_flush_notify_fd();

class RuntimeCore {
 public:
  explicit RuntimeCore(RuntimeOptions options);
  ~RuntimeCore();
  RuntimeCore(const RuntimeCore&) = delete;
  RuntimeCore& operator=(const RuntimeCore&) = delete;

  // Whether this runtime still exists (runtime.hpp): handles that may
  // outlive it keep a reference and check it before they touch the runtime.
  const std::shared_ptr<RuntimeAlive>& alive() const noexcept { return alive_; }
  std::uint32_t tag() const noexcept { return config_.tag; }
  TimePoint now() const noexcept { return config_.clock->now(); }

  // Lanes (chime::Lane; lanes.hpp).
  Lanes& lanes() noexcept { return lanes_; }
  // schedule, cancel, reschedule, state (producer_ops.hpp).
  ProducerOps& producer_ops() noexcept { return producer_ops_; }

  // runtime_core.cpp
  void stop_workers();
  void stop_started_threads(unsigned started);  // a failed construction
  void flush();
  std::size_t drain();
  std::size_t shutdown(ShutdownMode mode);
  // shutdown's steps, in order (after stop_wheel_threads, stop_workers).
  void stop_wheel_threads(ShutdownMode mode);
  void wait_for_lane_batches();
  std::size_t sweep_pending(ShutdownMode mode);
  Stats stats() const;
  // runtime_core.cpp: posts a check the wheel thread runs
  // (check_on_wheel) and throws std::logic_error with what it found.
  void check_invariants();
  // runtime_core.cpp: the earliest pending due over every shard (NextDueRequest).
  std::optional<TimePoint> next_due();
  void post_request_and_wait(ShardSeam& shard, CommandKind kind, void* request, Completion& completion);
  void flush_in_call_order(const ThreadLanes& lanes, std::int64_t target_ns);
  std::optional<ReadyKey> post_flush_and_wait(ShardSeam& shard, const ThreadLanes& lanes,
                                              std::unique_ptr<FlushRequest>& request);
  // The shards (shards.hpp): which one a post goes to; a Producer's token.
  Shards& shards() noexcept { return shards_; }
  // The shards themselves (lifecycle and the simulation).
  const WheelThreads& wheel_threads() const noexcept { return wheel_threads_; }
  const Clock& clock() const noexcept { return *config_.clock; }
  Duration precision() const noexcept { return config_.precision; }

  // ---- What the shards (wheel_thread.hpp) use of their runtime; who
  // touches what, and in what order, is argued at the fields below. ----
  const RuntimeConfig& config() const noexcept { return config_; }
  // The one slab every shard files from and claims in.
  TimerSlab& slab() noexcept { return slab_; }
  // The hand-off queue the wheel threads enqueue claimed runs to; no
  // threads: workers = 0, the wheel thread runs them (Runner::Place::wheel_thread).
  WorkerPool& pool() noexcept { return pool_; }
  // A test seam's runtime (simulation.hpp): no wheel thread, no workers.
  bool simulated() const noexcept { return simulated_; }
  // The calling thread runs a simulated runtime's passes: it counts as its
  // shards' wheel thread.
  bool on_simulation_thread() const noexcept { return simulated_ && simulation_thread_ == std::this_thread::get_id(); }
  // Runs claimed timers (runner.hpp): workers = 0, the wheel thread runs
  // its batch itself (Runner::Place::wheel_thread); a periodic's re-arm is
  // filed at once. Also says whether the calling thread runs a callback.
  Runner& runner() noexcept { return runner_; }
  const Runner& runner() const noexcept { return runner_; }
  // Ending a timer: its counts (timer_counts.hpp).
  const TimerCounts& counts() const noexcept { return counts_; }

 private:
  // A test seam (simulation.hpp). With simulated_, no thread is started:
  // flush, drain and shutdown run the passes they wait for on the calling
  // thread (Simulation::simulate_until), and the calling thread counts as
  // the wheel thread (on_wheel_thread).

  // Configuration (runtime_config.hpp): fixed by the constructor.
  RuntimeConfig config_;
  using ClockKind = RuntimeConfig::ClockKind;
  // A ManualClock: timers run only inside flush (wheel_thread_manual.cpp, "A manual clock").
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
  // - config_.due_limit_ns: argued at the field (runtime_config.hpp).
  // - lifecycle_: argued at its flags (lifecycle_flags.hpp).
  // - live_: schedule adds (and subtracts on a refusal, a take-back or a
  //   withdrawal); whoever ends a timer subtracts (end_timer; a worker
  //   ending a one-shot does so before F1). Relaxed RMWs: max_pending needs
  //   an exact count; the order that matters (a timer seen Fired no longer
  //   counts) comes from F1's release (RuntimeCapacityRelease).
  // - meters_ (counters, lateness, run times): each thread writes its own stripe
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
  LifecycleFlags lifecycle_;
  std::mutex shutdown_mutex_;
  std::mutex stepped_flush_mutex_;  // one flush_in_call_order at a time
  // flush's and drain's requests (RequestPool).
  RequestPool<FlushRequest> flush_requests_;
  RequestPool<DrainRequest> drain_requests_;

  // Counters and histograms (runtime_stats.hpp).
  RuntimeMeters meters_;
  std::atomic<std::uint64_t> live_{0};  // exact, maintained only when max_pending > 0
  std::shared_ptr<RuntimeAlive> alive_ = std::make_shared<RuntimeAlive>();

  // The workers and their hand-off queue (worker_pool.hpp).
  WorkerPool pool_;
  // The shards (wheel_thread.hpp), in index order: made after the pool
  // (each holds a token on its hand-off queue), destroyed before it; and
  // their seams, which the other roles take (shards.hpp).
  WheelThreads wheel_threads_;
  Shards shards_;

  // The roles, each made with the references it needs of the fields
  // above: the counts a timer's life changes (timer_counts.hpp), running
  // claimed timers (runner.hpp), lanes (lanes.hpp: every LaneCore ever
  // opened, under its own mutex), the calls any thread makes on a timer
  // (producer_ops.hpp).
  TimerCounts counts_{meters_, live_, config_.options.max_pending};
  Runner runner_{config_, slab_, counts_, shards_};
  Lanes lanes_{config_, slab_, lifecycle_, shards_, runner_, counts_};
  ProducerOps producer_ops_{config_, slab_, lifecycle_, counts_, shards_, runner_};
};

}  // namespace chime::detail
