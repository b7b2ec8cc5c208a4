// SPDX-License-Identifier: BSL-1.0
// runtime/lanes.cpp: lanes (include/chime/lane.hpp; lanes.hpp): runs
// handed to a ready queue and run by the thread that asks for them.
//
// How a lane's run travels: the wheel thread claims it (W1: Handed) like any
// run and, because its slot names a lane, appends it to that lane's batch;
// at the end of the pass each lane's batch goes to its ready queue in one
// bulk enqueue, with one eventfd write if the lane was not signalled
// (lane_core.hpp). The lane's thread dequeues and runs it with the workers'
// code (runner.cpp, Runner::Place::lane): B1 starts it, so a cancel wins
// until then (C4), exactly as for a worker; a periodic re-arm is posted as a
// command.
//
// Closing a lane (its Lane destroyed): the lane's generation is bumped
// (release), then the wheel thread is asked (a close_lane command, waited
// for) to cancel every timer of the lane it has filed (L1); a callback
// running on the wheel thread itself does that part inline. A timer of the
// lane whose ADD or re-arm arrives later, or that the wheel claims before
// it sees the close, is cancelled there (L1 at application, L2 at the claim:
// lane_closed compares the slot's lane generation, acquire, with the bump).
// Then the closing thread empties the ready queue, cancelling what is still
// Handed (L3). Each of L1, L2, L3 is one CAS to Cancelled, racing a
// producer's cancel: exactly one wins and counts the timer.
//
// Race: a lane's runs vs shutdown (the Dekker pair on the lane's runs_active
// and LifecycleFlags::stopped, both seq_cst):
//   lane thread (run_lane)                    shutdown
//   runs_active += 1                          stopped = true
//   if stopped: -= 1, wait for shutdown_done, ... join the wheel thread and workers ...
//     then run the rest as final runs         wait until every lane's runs_active == 0
//   else run (a periodic re-arm is a command) leftovers, sweep (X1; Handed lane runs: X2)
//   runs_active -= 1                          shutdown_done = true (release)
// (A lane opened after shutdown looked at the lanes was added under the
// lanes' mutex after that look, so its first increment, and its load of
// stopped, come after shutdown's store: it sees it set.)
// Either the lane sees stopped, and starts no run (B1) until shutdown is
// done, or shutdown waits for its batch, whose re-arm commands then are
// leftovers the sweep settles. So no run starts while the sweep looks at a
// Handed word, and no re-arm is posted after the sweep.
#include "lanes.hpp"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "requests.hpp"

namespace chime::detail {

namespace {
// Runs a lane's thread takes from its ready queue per dequeue.
constexpr std::size_t kLaneBatch = 32;

// An eventfd per thread that flushes on its lane's thread: the wheel thread
// writes it when the flush is done, so the flusher polls it with its lanes.
// -1 until the thread's first such flush. A plain int, so that its first use
// registers no destructor (glibc registers one with calloc and aborts the
// process when that fails, out of memory): a pthread key's destructor closes
// it when the thread exits instead (flush_notify_key). Only this thread
// reads it; the wheel thread is handed the number (Completion::notify_fd)
// and writes no more to it once the flush was served or abandoned.
thread_local int tls_flush_notify_fd = -1;

void close_flush_notify_fd(void* value) noexcept {
  ::close(static_cast<int>(reinterpret_cast<std::intptr_t>(value)) - 1);  // value: fd + 1
  tls_flush_notify_fd = -1;
}

// Made once per process: pthread_key_create allocates nothing. Throws
// std::system_error if the process is out of keys (the next flush tries again).
pthread_key_t flush_notify_key() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    if (const int e = pthread_key_create(&k, close_flush_notify_fd); e != 0) {
      throw std::system_error(e, std::generic_category(), "chime::Runtime::flush: pthread_key_create");
    }
    return k;
  }();
  return key;
}

void drain_eventfd(int fd) noexcept {
  std::uint64_t count;
  [[maybe_unused]] const ssize_t r = ::read(fd, &count, sizeof count);
}
}  // namespace

LaneCore* Lanes::open_lane() {
  if (lifecycle_.stopped.load(std::memory_order_acquire)) throw StoppedError("chime::Runtime::lane after shutdown");
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& l : lanes_) {
    if (!l->in_use) {
      l->in_use = true;
      l->owner.store(std::this_thread::get_id(), std::memory_order_relaxed);  // as below
      return l.get();
    }
  }
  lanes_.push_back(std::make_unique<LaneCore>());
  // On the next shard, round-robin; with workers = 0, on shard 0. Then
  // callbacks run on the wheel threads, and one that destroys a Lane waits
  // for the lane's shard to serve the close (close_lane): a lane of shard 1
  // closed from shard 0's callback while shard 1's callback closes a lane
  // of shard 0 would wait for each other. With every lane on shard 0, only
  // the other shards wait for shard 0, and shard 0 closes its lanes in place.
  lanes_.back()->token = config_.options.workers == 0 ? shards_.make_token_on(0) : shards_.make_token();
  lanes_.back()->shard = lanes_.back()->token->shard;
  lanes_.back()->in_use = true;
  // The creating thread is the lane's thread until another runs it: a flush
  // there runs the lane instead of waiting for a thread that never came.
  lanes_.back()->owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
  return lanes_.back().get();
}

void Lanes::close_lane(LaneCore* lane) {
#ifndef NDEBUG
  if (const TimerId self = runner_.current_run()) {
    CHIME_ASSERT(slab_.lane_of(slab_[self.slot()], self.slot()) != lane,
                 "a chime::Lane destroyed (or move-assigned) from its own callback");
  }
#endif
  // release: pairs with lane_closed's acquire (the wheel thread's).
  lane->generation.fetch_add(1, std::memory_order_release);
  ShardSeam& own = shards_[lane->shard];
  // acquire: pairs with the exit's release. Once the shard's wheel thread
  // has exited (shutdown), its wheel and overdue list are stale: shutdown's
  // sweep settled and freed every timer they held, so nothing is closed
  // there (a simulated runtime's thread still counts as the wheel thread).
  const bool exited = own.exited.load(std::memory_order_acquire);
  if (own.on_wheel_thread() && !exited) {
    // A callback on the wheel thread (workers = 0) closes a lane: the wheel
    // thread cannot serve a command it waits for, so it closes the lane
    // itself. Its callbacks run from hand_over, after the pass's advance,
    // while nothing iterates the wheel or the overdue list; the lane's batch
    // of this pass is already in its ready queue (drained below), and
    // dispatch() cancels any later claim of the lane (L2). This holds during
    // shutdown(fire_pending)'s final runs too, which the wheel thread runs
    // before it exits: it must not wait for its own exit either.
    own.close_lane_here(lane);
  } else if (!lifecycle_.stopped.load(std::memory_order_acquire)) {
    CloseLaneRequest request;
    request.lane = lane;
    CommandPoster::post_request(own, CommandKind::close_lane, &request);
    request.completion.wait(own.exited);  // served, or the wheel thread exited (shutdown)
  }
  // Shutdown in progress: the wheel thread may still hand us runs of the old
  // generation (it may not have seen the bump); once it exited it hands none.
  while (!own.on_wheel_thread() && lifecycle_.stopped.load(std::memory_order_acquire) &&
         !own.exited.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // No run of this lane is handed to it any more: cancel what is ready (L3).
  // On the wheel thread (a callback with workers = 0) it never waits for
  // memory (wheel_thread.cpp, "Out of memory").
  RetiredSlots retired(slab_, own.on_wheel_thread() ? RetiredSlots::OutOfMemory::never_wait
                                                    : RetiredSlots::OutOfMemory::wait_for_memory);
  Dispatch batch[kLaneBatch];
  std::uint64_t drained = 0;
  for (std::size_t n; (n = lane->ready.try_dequeue_bulk(*lane->consumer_token, batch, kLaneBatch)) != 0;) {
    for (std::size_t i = 0; i < n; ++i) {
      TimerSlot& slot = slab_[batch[i].slot];
      std::uint64_t w = slot.word.load(std::memory_order_acquire);
      // A run taken back by a reschedule on the lane's thread (R4): the
      // record is stale and the timer not ours (the wheel thread's close
      // above, or its L1 at the timer's ADD, settles it).
      if (!StateWord::holds_claim(w, batch[i].generation, batch[i].version)) continue;
      for (;;) {
        if (StateWord::state(w) == SlotState::cancelled) break;  // C4 (or shutdown's X2) won: we only free it
        CHIME_ASSERT(StateWord::state(w) == SlotState::handed, "a ready run is handed or cancelled");
        // (L3) acq_rel, as C4.
        if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
          counts_.end_cancelled_timer();
          break;
        }
      }
      slab_.reset_task(slot, batch[i].slot);
      retired.add(batch[i].slot);
    }
    drained += n;
  }
  retired.flush();
  if (drained != 0) runner_.count_completed(lane->shard, drained);  // a flush may wait for them
  // Every write the wheel owed the eventfd has landed (it signals in the
  // pass that handed the runs, before it served our request or exited).
  drain_eventfd(lane->efd);
  lane->signalled.store(false, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  lane->owner.store(std::thread::id(), std::memory_order_relaxed);
  lane->in_use = false;
}

namespace {
// One thread at a time inside a lane's run_ready / wait_and_run (design.md,
// Lanes): entering takes lane.runner with one CAS; the same thread nested
// (wait_and_run's loop, a flush on the lane's thread) passes; another
// thread gets std::logic_error instead of running callbacks concurrently
// (with `what` null, as a flush uses it: no throw, busy() instead).
class LaneEntry {
 public:
  LaneEntry(LaneCore& lane, const char* what) {
    std::thread::id expected{};
    const std::thread::id me = std::this_thread::get_id();
    if (lane.runner.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed)) {
      lane_ = &lane;
    } else if (expected != me) {
      busy_ = true;
      if (what == nullptr) return;
      throw std::logic_error(std::string("chime::Lane::") + what +
                             " called while another thread is inside run_ready or wait_and_run of the same lane: "
                             "a lane is run by one thread at a time");
    }
  }
  ~LaneEntry() {
    if (lane_ != nullptr) lane_->runner.store(std::thread::id{}, std::memory_order_release);
  }
  LaneEntry(const LaneEntry&) = delete;
  LaneEntry& operator=(const LaneEntry&) = delete;
  // Another thread is inside (only with `what` null).
  bool busy() const noexcept { return busy_; }

 private:
  LaneCore* lane_ = nullptr;  // null: nested (the outer entry leaves), or busy
  bool busy_ = false;
};
}  // namespace

std::size_t Lanes::run_lane(LaneCore& lane, std::size_t max) {
  if (runner_.in_callback()) {
    throw std::logic_error(
        "chime::Lane::run_ready (or wait_and_run) called from inside a timer callback: runs do not nest");
  }
  const LaneEntry entry(lane, "run_ready");
  const std::thread::id me = std::this_thread::get_id();
  if (lane.owner.load(std::memory_order_relaxed) != me) lane.owner.store(me, std::memory_order_relaxed);
  lane.consume_signal();
  lane.runs_active.fetch_add(1, std::memory_order_seq_cst);
  bool after_stop = false;
  if (lifecycle_.stopped.load(std::memory_order_seq_cst)) [[unlikely]] {
    lane.runs_active.fetch_sub(1, std::memory_order_release);
    for (detail::Backoff backoff; !lifecycle_.shutdown_done.load(std::memory_order_acquire);) backoff.wait();
    after_stop = true;
  }
  RetiredSlots retired(slab_);
  Dispatch batch[kLaneBatch];
  std::size_t ran = 0;
  while (ran < max) {
    const std::size_t n =
        lane.ready.try_dequeue_bulk(*lane.consumer_token, batch, std::min<std::size_t>(kLaneBatch, max - ran));
    if (n == 0) break;
    if (after_stop) {
      // After shutdown: the last runs (fire_pending); a periodic timer is
      // not re-armed, as for the runs shutdown itself fires.
      for (std::size_t i = 0; i < n; ++i) batch[i].flags |= Dispatch::final;
    }
    ran += runner_.run_batch(batch, n, retired, Runner::Place::lane);
  }
  if (!after_stop) lane.runs_active.fetch_sub(1, std::memory_order_release);
  if (ran == max && lane.ready.size_approx() != 0) lane.resignal();  // runs left: stay readable
  return ran;
}

std::size_t Lanes::wait_and_run(LaneCore& lane, TimePoint deadline) {
  if (runner_.in_callback()) {
    throw std::logic_error(
        "chime::Lane::wait_and_run (or run_ready) called from inside a timer callback: runs do not nest");
  }
  const LaneEntry entry(lane, "wait_and_run");
  const std::int64_t deadline_ns = deadline.time_since_epoch().count();
  for (;;) {
    const std::size_t ran = run_lane(lane, SIZE_MAX);
    if (ran != 0) return ran;
    const std::int64_t now = config_.clock->now().time_since_epoch().count();
    if (now >= deadline_ns) return 0;
    // Sleep on the eventfd. On the steady clock, until the deadline; on any
    // other, at most 1 ms at a time (its time is re-read: a ManualClock
    // moves only when told).
    std::int64_t wait_ns =
        config_.clock_kind == RuntimeConfig::ClockKind::steady ? deadline_ns - now : std::int64_t{1'000'000};
    if (config_.clock_kind == RuntimeConfig::ClockKind::other) wait_ns = std::min(wait_ns, deadline_ns - now);
    const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
    pollfd p{lane.efd, POLLIN, 0};
    ::ppoll(&p, 1, &ts, nullptr);
  }
}

ThreadLanes Lanes::lanes_of_this_thread() {
  ThreadLanes mine;
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& l : lanes_) {
    if (l->in_use && l->owner.load(std::memory_order_relaxed) == me) mine.add(l.get());
  }
  return mine;
}

void Lanes::run_idle_lanes(const ThreadLanes& lanes) {
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    // A lane another thread has just begun to run is that thread's to run.
    const LaneEntry entry(*lanes[i], nullptr);
    if (!entry.busy()) run_lane(*lanes[i], SIZE_MAX);
  }
}

// flush() on a lane's thread: the flush waits for runs only this thread can
// run, so it runs them while it waits, sleeping on its lanes' eventfds and
// the flush's own.
bool Lanes::run_flush_on_lanes(FlushRequest& request, const ThreadLanes& lanes, const ShardSeam& shard,
                               std::int64_t waiting_since) {
  // Polls the flush's eventfd and up to kInline lanes' (more are run, and
  // looked at every 1 ms instead).
  pollfd fds[ThreadLanes::kInline + 1];
  std::size_t nfds = 0;
  fds[nfds++] = pollfd{request.completion.notify_fd, POLLIN, 0};
  for (std::size_t i = 0; i < lanes.size() && nfds < ThreadLanes::kInline + 1; ++i) {
    fds[nfds++] = pollfd{lanes[i]->efd, POLLIN, 0};
  }
  const long wait_ns = lanes.size() > ThreadLanes::kInline ? 1'000'000 : 10'000'000;
  for (;;) {
    run_idle_lanes(lanes);
    if (request.completion.is_done() || shard.exited.load(std::memory_order_acquire)) break;
    // Out of memory too long: give up (Completion::abandon); the wheel
    // thread then writes no more to the eventfd for it.
    // The fd is read first: once abandoned, the request is the wheel thread's.
    const int notify_fd = request.completion.notify_fd;
    if (shard.out_of_memory_too_long(waiting_since) && request.completion.abandon()) {
      drain_eventfd(notify_fd);
      return false;
    }
    const timespec ts{0, wait_ns};  // also re-checks seam.exited (Completion::wait's race)
    ::ppoll(fds, nfds, &ts, nullptr);
  }
  drain_eventfd(request.completion.notify_fd);
  return true;
}

int lane_flush_notify_fd() {
  if (tls_flush_notify_fd >= 0) [[likely]]
    return tls_flush_notify_fd;
  const pthread_key_t key = flush_notify_key();
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "chime::Runtime::flush: eventfd");
  // May allocate (a key past the first 32): out of memory it fails, and the
  // flush throws std::bad_alloc with nothing kept.
  if (pthread_setspecific(key, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd) + 1)) != 0) {
    ::close(fd);
    throw std::bad_alloc();
  }
  tls_flush_notify_fd = fd;
  return fd;
}

std::vector<LaneCore*> Lanes::all_lanes() {
  std::vector<LaneCore*> lanes;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& lane : lanes_) lanes.push_back(lane.get());
  return lanes;
}

}  // namespace chime::detail
