// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_core.cpp: RuntimeCore (runtime_core.hpp): construction,
// and the lifecycle calls any thread but a callback makes: flush, drain,
// shutdown, check_invariants, stats.
//
// Race: shutdown vs producers still scheduling (docs/state-machine.md, "Shutdown vs producers still
// scheduling").
//   producer (schedule)                           shutdown
//   slot.word = Pending (S1, release)             stopped_ = true (seq_cst)
//   post the ADD; fence (seq_cst) (P1)            fence (seq_cst)
//   if stopped_: withdraw_posted: C1, then K1     ... join threads ...
//     won: not accepted, throw StoppedError       sweep: every Pending -> Cancelled (X1), counted
//     lost: the sweep (or a claim) decided it; return its id
// Either the producer sees stopped_, or the sweep sees its Pending word, and
// exactly one CAS wins: every accepted timer is fired, cancelled, or counted
// by shutdown as not fired. The commands still queued need nothing.
//
// Race: shutdown vs cancel: a timer cancelled after the wheel thread's last
// pass stays filed (a zombie nobody reclaims); the sweep frees it (Cancelled
// and still filed) itself. One cancelled before it was filed was freed by its
// canceller (docs/state-machine.md, "Shutdown vs cancel").
//
// Race: shutdown vs a running callback: shutdown joins the workers after the
// wheel thread has stopped dispatching; a run in progress finishes; a
// periodic timer it re-arms is counted by the sweep.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "runtime_core.hpp"
#include "simulation.hpp"

namespace chime::detail {

RuntimeCore::RuntimeCore(RuntimeOptions options) : config_(validated(std::move(options))) {
  slab_.reserve(config_.options.reserve);
  if (tls_simulation_request != nullptr) [[unlikely]] {  // a test seam: no thread (simulation.hpp)
    if (config_.options.workers != 0) {
      throw std::invalid_argument("chime::detail::Simulation: workers must be 0 (callbacks run in the passes), got " +
                                  std::to_string(config_.options.workers));
    }
    *tls_simulation_request = this;
    tls_simulation_request = nullptr;
    simulated_ = true;
    simulation_thread_ = std::this_thread::get_id();
  }
  wheel_threads_.reserve(config_.options.shards);
  shards_.reserve(config_.options.shards);
  for (unsigned k = 0; k < config_.options.shards; ++k) {
    wheel_threads_.push_back(std::make_unique<WheelThread>(
        WheelThread::Parts{config_, slab_, pool_, runner_, counts_, lifecycle_,
                           simulated_ ? std::optional<std::thread::id>(simulation_thread_) : std::nullopt},
        k));
    shards_.add(wheel_threads_.back()->seam);
  }
  if (simulated_) return;
  pool_.threads.reserve(config_.options.workers);
  unsigned started = 0;  // wheel threads
  try {
    for (unsigned i = 0; i < config_.options.workers; ++i)
      pool_.threads.emplace_back([this] { runner_.worker_main(pool_); });
    for (auto& shard : wheel_threads_) {
      shard->start();
      ++started;
    }
  } catch (const std::system_error& e) {
    // A thread could not start (out of threads, or of address space for its
    // stack): stop the wheel threads and join the workers that started,
    // then report it. Destroying a joinable std::thread would call
    // std::terminate.
    stop_started_threads(started);
    throw std::system_error(e.code(), "chime::Runtime: could not start thread " +
                                          std::to_string(pool_.threads.size() + started + 1) + " of " +
                                          std::to_string(config_.options.workers + config_.options.shards) +
                                          " (workers = " + std::to_string(config_.options.workers) + ", plus " +
                                          std::to_string(config_.options.shards) + " wheel threads)");
  } catch (...) {
    stop_started_threads(started);  // out of memory for a thread's state
    throw;
  }
}

// A failed construction: stops the first `started` wheel threads (a stop
// request each; nothing was scheduled), then the workers.
void RuntimeCore::stop_started_threads(unsigned started) {
  for (unsigned k = 0; k < started; ++k) {
    StopRequest request;
    CommandPoster::post_request(wheel_threads_[k]->seam, CommandKind::stop, &request);
    wheel_threads_[k]->join();
  }
  stop_workers();
}

// Queues one stop record per worker behind every run, then joins them.
// After every wheel thread stopped dispatching (shutdown), or before any
// started (a failed construction). With one shard, the records go through
// its wheel thread's producer token, behind its runs (FIFO). With several,
// the hand-off queue's sub-queues have no order between them, so a worker
// could take its stop record before another shard's runs: the runs are
// first all taken (the queue is empty: nothing enqueues any more), then the
// records are queued.
void RuntimeCore::stop_workers() {
  if (wheel_threads_.size() > 1) {
    while (pool_.handoff.size_approx() != 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (std::size_t i = 0; i < pool_.threads.size(); ++i) {
    Dispatch stop;
    stop.flags = Dispatch::stop;
    retry_until_memory([&] { return pool_.handoff.enqueue(*wheel_threads_[0]->wt().handoff_token, stop); });
    ++wheel_threads_[0]->wt().handoff_tail;  // the wheel thread has exited: its token's count is ours now
  }
  for (auto& t : pool_.threads) t.join();
}

RuntimeCore::~RuntimeCore() {
  shutdown(ShutdownMode::cancel_pending);
  // release: a handle that then sees it cleared (acquire) sees the shutdown
  // done. From now on every Producer, Timer, Lane or KeyedTimers of this
  // runtime throws std::logic_error on use, and its destructor touches
  // nothing of the runtime (runtime.hpp, Preconditions).
  alive_->alive.store(false, std::memory_order_release);
}

// Every shard in turn, each with the same target: every timer due at or
// before the call's clock reading has run, whatever its shard. A
// ManualClock with several shards: one order over all of them
// (flush_in_call_order).
void RuntimeCore::flush() {
  runner_.throw_if_in_callback("flush");
  if (lifecycle_.stopped.load(std::memory_order_acquire)) return;  // after shutdown there is nothing left to wait for
  // On a lane's thread the flush waits for runs only this thread runs: it
  // runs them while it waits (lanes.cpp).
  const ThreadLanes lanes = lanes_.lanes_of_this_thread();
  const std::int64_t target_ns = config_.clock->now().time_since_epoch().count();
  if (manual() && wheel_threads_.size() > 1) {
    flush_in_call_order(lanes, target_ns);
    return;
  }
  for (auto& shard : wheel_threads_) {
    std::unique_ptr<FlushRequest> request = flush_requests_.take();
    request->target_ns = target_ns;
    post_flush_and_wait(shard->seam, lanes, request);
  }
}

// A ManualClock with several shards (G28): the runs of every shard in one
// (due, call order) order, one at a time. Each shard is asked for its
// earliest run by the target (a look: a stepped request that claims
// nothing); the shard with the earliest runs, one step after another, those
// below every other shard's earliest, until a callback (or any call) sets a
// due. Then every shard is looked at again: what was set may be anywhere.
// Otherwise only the stepped shard's earliest has changed (the others'
// only later, by a cancel or a touch: a key too early only makes a step
// stop sooner). Done when no shard has a run left by the target. Between
// two steps no run of any shard is in flight: a step is served only once
// its runs have completed. One such flush at a time (stepped_flush_mutex_).
void RuntimeCore::flush_in_call_order(const ThreadLanes& lanes, std::int64_t target_ns) {
  // A lane's thread runs its lanes while it waits for the flush before it,
  // which may be waiting for one of their runs.
  std::unique_lock<std::mutex> lock(stepped_flush_mutex_, std::try_to_lock);
  while (!lock.owns_lock()) {
    if (lanes.empty()) {
      lock.lock();
      break;
    }
    lanes_.run_idle_lanes(lanes);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.try_lock();
  }
  std::vector<std::optional<ReadyKey>> earliest(wheel_threads_.size());
  const auto step = [&](std::size_t k, ReadyKey below) {
    std::unique_ptr<FlushRequest> request = flush_requests_.take();
    request->target_ns = target_ns;
    request->stepped = true;
    request->below = below;
    return post_flush_and_wait(shards_[k], lanes, request);
  };
  const auto look_at_all_but = [&](std::size_t skip) {
    for (std::size_t k = 0; k < wheel_threads_.size(); ++k) {
      if (k != skip) earliest[k] = step(k, ReadyKey{});
    }
  };
  std::uint64_t looked_at = config_.call_order.taken();
  look_at_all_but(SIZE_MAX);
  for (;;) {
    std::size_t first = SIZE_MAX;
    for (std::size_t k = 0; k < wheel_threads_.size(); ++k) {
      if (earliest[k] && (first == SIZE_MAX || *earliest[k] < *earliest[first])) first = k;
    }
    if (first == SIZE_MAX) return;
    ReadyKey below{INT64_MAX, UINT64_MAX};
    for (std::size_t k = 0; k < wheel_threads_.size(); ++k) {
      if (k != first && earliest[k] && *earliest[k] < below) below = *earliest[k];
    }
    earliest[first] = step(first, below);
    if (const std::uint64_t taken = config_.call_order.taken(); taken != looked_at) {
      looked_at = taken;
      look_at_all_but(first);
    }
  }
}

// Posts a flush request and waits until its shard has served it, running
// this thread's lanes meanwhile; gives it back to the pool, and returns what
// a stepped request found (FlushRequest::earliest). Throws WheelOutOfMemory
// if the shard has been out of memory too long: the request is then the
// wheel thread's.
std::optional<ReadyKey> RuntimeCore::post_flush_and_wait(ShardSeam& shard, const ThreadLanes& lanes,
                                                         std::unique_ptr<FlushRequest>& request) {
  // On the heap: a flush that gives up on a wheel thread out of memory
  // leaves it to that thread (Completion). Reused (RequestPool).
  const std::int64_t waiting_since = config_.steady_clock.now().time_since_epoch().count();
  if (!lanes.empty() && !simulated_) request->completion.notify_fd = lane_flush_notify_fd();
  CommandPoster::post_request_or_throw(shard, CommandKind::flush, request.get());
  bool served = true;
  if (simulated_) [[unlikely]] {
    // Passes that give up (simulate_until throws) may leave the request
    // in a shard's held commands: it is leaked, never freed under them.
    try {
      Simulation::simulate_until(request->completion, lanes, wheel_threads_, lanes_);
    } catch (...) {
      [[maybe_unused]] FlushRequest* const leaked = request.release();
      throw;
    }
  } else if (lanes.empty()) {
    served =
        request->completion.wait_or_abandon(shard.exited, [&] { return shard.out_of_memory_too_long(waiting_since); });
  } else {
    served = lanes_.run_flush_on_lanes(*request, lanes, shard, waiting_since);
  }
  if (!served) [[unlikely]] {
    [[maybe_unused]] FlushRequest* const abandoned = request.release();  // the wheel thread deletes it
    throw WheelOutOfMemory();
  }
  const std::optional<ReadyKey> earliest = request->earliest;
  flush_requests_.give_back(std::move(request));
  return earliest;
}

std::size_t RuntimeCore::drain() {
  runner_.throw_if_in_callback("drain");
  if (lifecycle_.stopped.load(std::memory_order_acquire)) return 0;
  // A manual clock: what is due by the clock's reading runs first, on time
  // (design.md, "Clocks"); the drain then fires the rest early.
  if (manual()) flush();
  std::size_t count = 0;
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    ShardSeam& shard = shards_[k];
    std::unique_ptr<DrainRequest> request = drain_requests_.take();  // as flush's
    const std::int64_t waiting_since = config_.steady_clock.now().time_since_epoch().count();
    CommandPoster::post_request_or_throw(shard, CommandKind::drain, request.get());
    if (simulated_) [[unlikely]] {
      try {  // as flush's
        Simulation::simulate_until(request->completion, ThreadLanes{}, wheel_threads_, lanes_);
      } catch (...) {
        [[maybe_unused]] DrainRequest* const leaked = request.release();
        throw;
      }
    } else if (!request->completion.wait_or_abandon(
                   shard.exited, [&] { return shard.out_of_memory_too_long(waiting_since); })) [[unlikely]] {
      [[maybe_unused]] DrainRequest* const abandoned = request.release();  // the wheel thread deletes it
      throw WheelOutOfMemory();
    }
    count += request->count;
    drain_requests_.give_back(std::move(request));
  }
  return count;
}

// Posts a request the shard's wheel thread serves in a pass and waits until
// it has (or until that thread has exited). Not on a lane's thread's
// behalf: the wait runs no lane.
void RuntimeCore::post_request_and_wait(ShardSeam& shard, CommandKind kind, void* request, Completion& completion) {
  CommandPoster::post_request(shard, kind, request);
  if (simulated_) [[unlikely]] {
    Simulation::simulate_until(completion, ThreadLanes{}, wheel_threads_, lanes_);
  } else {
    completion.wait(shard.exited);
  }
}

std::size_t RuntimeCore::shutdown(ShutdownMode mode) {
  runner_.throw_if_in_callback("shutdown");
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (lifecycle_.shutdown_done.load(std::memory_order_relaxed)) return 0;
  // A manual clock: fire_pending begins with a flush, as drain() does.
  if (mode == ShutdownMode::fire_pending && manual()) flush();
  // No timer due after this call runs, however long the queue: the wheel
  // threads stop at their next look (WheelThread::run_pass) instead of waiting for the
  // stop command behind the backlog; the sweep below cancels the rest.
  if (mode == ShutdownMode::cancel_pending) lifecycle_.cancel_requested.store(true, std::memory_order_seq_cst);
  lifecycle_.stopped.store(true, std::memory_order_seq_cst);  // the other half of S1's Dekker pair
  stop_wheel_threads(mode);
  // The wheel threads have stopped dispatching; queue one stop per worker
  // behind every run, then join them.
  stop_workers();
  wait_for_lane_batches();
  const std::size_t not_fired = sweep_pending(mode);
  // release: a lane thread waiting for it (lanes.cpp) then sees the sweep done.
  lifecycle_.shutdown_done.store(true, std::memory_order_release);
  return not_fired;
}

// shutdown: every wheel thread stops (with fire_pending, after draining
// its shard) and is joined.
void RuntimeCore::stop_wheel_threads(ShutdownMode mode) {
  // One stop request per shard, all posted before any is waited for: the
  // shards stop together (with fire_pending, each drains its own wheel).
  std::vector<StopRequest> requests(wheel_threads_.size());
  for (std::size_t k = 0; k < wheel_threads_.size(); ++k) {
    requests[k].mode = mode;
    CommandPoster::post_request(wheel_threads_[k]->seam, CommandKind::stop, &requests[k]);
  }
  if (simulated_) [[unlikely]] {
    Simulation::simulate_until_stopped(wheel_threads_);
  } else {
    for (auto& shard : wheel_threads_) shard->join();
  }
}

// shutdown, once the workers are joined: no lane batch is in progress.
void RuntimeCore::wait_for_lane_batches() {
  // A lane's batch in progress finishes first (lanes.cpp, the Dekker pair on
  // each lane's runs_active): its re-arms are then leftovers below, and no
  // lane starts a run while the sweep looks at Handed words.
  // Not under the lanes' mutex: a callback in progress may open or close a lane.
  const std::vector<LaneCore*> lanes = lanes_.all_lanes();
  for (LaneCore* lane : lanes) {
    while (lane->runs_active.load(std::memory_order_seq_cst) != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// shutdown, once nothing runs: every timer still pending is cancelled
// (X1, X2); returns how many.
std::size_t RuntimeCore::sweep_pending(ShutdownMode mode) {
  // Commands still queued need nothing: a timer whose ADD was never
  // applied is either still Pending (swept below) or was cancelled before
  // it was filed, and then its canceller freed its slot (timer_state.hpp,
  // "Who frees the slot").
  // Sweep: every timer still pending is cancelled and counted (X1). The
  // wheel thread has exited (joined), so what it owed (the free of a
  // zombie: a Cancelled word with the filed bit) is ours now.
  std::size_t not_fired = 0;
  const std::uint32_t extent = slab_.extent();
  for (std::uint32_t i = 0; i < extent; ++i) {
    TimerSlot& slot = slab_[i];
    // A reschedule or cancel racing shutdown settles first, and again after a failed CAS.
    for (std::uint64_t w = settled_word(slot);; w = settled(slot, w)) {
      const SlotState s = StateWord::state(w);
      if (s == SlotState::cancelled && StateWord::filed(w)) {
        // Cancelled while filed, not reclaimed by the wheel thread (a cancel
        // racing shutdown, or a zombie still in the wheel): free it here, so
        // its task does not outlive shutdown. Unfiled, as reclaim leaves it:
        // relaxed, as reclaim's store (nothing else writes a Cancelled word,
        // and the free list's release orders the slot's reuse after it).
        slot.word.store(StateWord::unfiled(w), std::memory_order_relaxed);
        slab_.reset_task(slot, i);
        slab_.release(i);
        break;
      }
      if (s == SlotState::handed) {
        // Only a lane's ready runs are still Handed (the workers are joined,
        // and no lane starts a run until shutdown is done). (X2) acq_rel, as
        // C4: cancel_pending cancels them; the lane frees them when it
        // dequeues them (or is destroyed). fire_pending leaves them to run.
        if (mode == ShutdownMode::fire_pending) break;
        if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
          ++not_fired;
          counts_.end_cancelled_timer();
          break;
        }
        continue;
      }
      if (s != SlotState::pending) break;
      if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        ++not_fired;
        counts_.end_cancelled_timer();
        slab_.reset_task(slot, i);  // release what the callback captured now, not at destruction
        break;
      }
    }
  }
  return not_fired;
}

Stats RuntimeCore::stats() const {
  Stats s;
  s.scheduled = meters_.counters.sum(Counter::scheduled);
  s.fired = meters_.counters.sum(Counter::fired);
  s.cancelled = meters_.counters.sum(Counter::cancelled);
  s.rescheduled = meters_.counters.sum(Counter::rescheduled);
  const std::uint64_t ended = meters_.counters.sum(Counter::ended);
  s.pending = s.scheduled > ended ? s.scheduled - ended : 0;
  s.callback_errors = meters_.counters.sum(Counter::callback_errors);
  s.shards.reserve(wheel_threads_.size());
  for (const auto& shard : wheel_threads_) {
    ShardStats k{shard->seam.commands.size_approx(),
                 shard->seam.wakeups.load(std::memory_order_relaxed),
                 shard->busy(),
                 shard->seam.commands.bound().refused(),
                 Duration(shard->seam.longest_pass_ns.load(std::memory_order_relaxed)),
                 shard->seam.most_refiled_in_a_pass.load(std::memory_order_relaxed)};
    s.queue_depth += k.queue_depth;
    s.wakeups += k.wakeups;
    s.refused_overload += k.refused_overload;
    s.zombie_sweeps += shard->seam.zombie_sweeps.load(std::memory_order_relaxed);
    s.shards.push_back(k);
  }
  s.slow_runs = meters_.counters.sum(Counter::slow_runs);
  s.lateness = meters_.lateness.summary();
  s.run_time = meters_.run_time.summary();
  return s;
}

std::optional<TimePoint> RuntimeCore::next_due() {
  runner_.throw_if_in_callback("next_due");
  if (lifecycle_.stopped.load(std::memory_order_acquire)) return std::nullopt;
  std::int64_t earliest = INT64_MAX;
  for (auto& shard : wheel_threads_) {
    NextDueRequest request;
    post_request_and_wait(shard->seam, CommandKind::next_due, &request, request.completion);
    // One posted as shutdown stopped the wheel thread is never answered: nothing is pending then.
    if (!request.completion.is_done()) return std::nullopt;
    earliest = std::min(earliest, request.due_ns);
  }
  if (earliest == INT64_MAX) return std::nullopt;
  return TimePoint(Duration(earliest));
}

void RuntimeCore::check_invariants() {
  runner_.throw_if_in_callback("check_invariants");
  if (lifecycle_.stopped.load(std::memory_order_acquire)) return;  // the wheel thread is gone, or going
  for (auto& shard : wheel_threads_) {
    CheckRequest request;
    post_request_and_wait(shard->seam, CommandKind::check, &request, request.completion);
    // A check posted as shutdown stopped the wheel thread is never run; one
    // that ran signalled under the completion's mutex, so `failure` is read
    // after it was written.
    if (!request.completion.is_done()) return;
    if (!request.failure.empty()) {
      throw std::logic_error("chime::Runtime invariant (shard " + std::to_string(shard->index()) +
                             "): " + request.failure);
    }
  }
}

}  // namespace chime::detail
