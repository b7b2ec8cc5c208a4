// SPDX-License-Identifier: BSL-1.0
// runtime/lane_core.hpp: a lane's shared state (chime::Lane, include/chime/lane.hpp).
//
// What this is: the ready queue through which the wheel thread hands a
// lane's due runs to the thread that runs the lane, and the eventfd that
// tells that thread runs are ready. Who may touch what:
// - the wheel thread: `batch` (this pass's runs), the producer side of
//   `ready` (through `wheel_token`), the producer side of the signal;
// - the lane's thread (whoever calls run_ready / wait_and_run, one thread at
//   a time): the consumer side of `ready`, the consumer side of the signal;
// - any thread: `generation` (read), `owner` (read by flush).
// A LaneCore lives as long as its runtime (Lanes::lanes_): slots and
// commands in flight may still name it after its Lane is gone. A destroyed
// Lane's LaneCore is reused by the next Runtime::lane() with its generation
// bumped, so a timer of the old lane is told apart (SlotExtra::lane_generation, timer_slab.hpp).
//
// The ready signal (an eventfd plus the flag `signalled`):
//   wheel thread (after a batch)               lane thread (run_ready)
//   enqueue_bulk(ready, runs)                  if signalled (acquire):
//   if !signalled.exchange(true) (acq_rel):      if read(efd) took a count:
//     write(efd, 1)                                signalled.exchange(false) (acq_rel)
//                                              dequeue and run
//                                              if it stopped at `max` with runs left:
//                                                signalled = true; write(efd, 1)
// Invariant: while a run is in `ready`, efd is readable or a write to it is
// on its way. The flag only goes false by the lane's exchange, after a read
// that consumed the one write the flag's last false->true change owed; so a
// batch enqueued after that exchange sees false and writes, and one enqueued
// before is visible to the dequeues that follow it (the exchange read the
// wheel's true: acquire/release on the flag carries the enqueue). A read
// that finds no count (the write is still on its way) leaves the flag set:
// the write lands, and the next run_ready consumes it. So ready_fd may be
// readable with nothing left to run (allowed: design, Lanes), but never
// unreadable while a run waits, and one batch costs at most one write.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include <concurrentqueue/concurrentqueue.h>

#include "command_queue.hpp"
#include "dispatch.hpp"
#include "timer_slab.hpp"

namespace chime::detail {

struct LaneCore {
  LaneCore() : efd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (efd < 0) throw std::system_error(errno, std::generic_category(), "chime::Runtime::lane: eventfd");
    wheel_token = std::make_unique<moodycamel::ProducerToken>(ready);
    consumer_token = std::make_unique<moodycamel::ConsumerToken>(ready);
  }
  // The runtime is being destroyed: one last write wakes whoever still polls
  // a duplicate of the fd (chime/asio.hpp's and chime/uv.hpp's drivers of a
  // Lane that outlived its Runtime), whose run_ready then throws
  // std::logic_error instead of the poll waiting forever.
  ~LaneCore() {
    write_one();
    ::close(efd);
  }
  LaneCore(const LaneCore&) = delete;
  LaneCore& operator=(const LaneCore&) = delete;

  // Wheel thread: make the lane's thread see the runs just enqueued.
  void signal() noexcept {
    if (!signalled.exchange(true, std::memory_order_acq_rel)) write_one();
  }
  // Lane thread: consume the signal before dequeuing (see above).
  void consume_signal() noexcept {
    if (!signalled.load(std::memory_order_acquire)) return;
    std::uint64_t count = 0;
    if (::read(efd, &count, sizeof count) == static_cast<ssize_t>(sizeof count)) {
      signalled.exchange(false, std::memory_order_acq_rel);
    }
  }
  // Lane thread: runs are left in the queue (run_ready stopped at its max).
  void resignal() noexcept {
    signalled.store(true, std::memory_order_release);
    write_one();
  }
  void write_one() noexcept {
    const std::uint64_t one = 1;
    // Fails only if the count would overflow (it cannot: each write is
    // consumed before the next is owed) or the fd is bad.
    [[maybe_unused]] const ssize_t r = ::write(efd, &one, sizeof one);
  }

  const int efd;
  std::atomic<bool> signalled{false};
  moodycamel::ConcurrentQueue<Dispatch> ready;
  std::unique_ptr<moodycamel::ProducerToken> wheel_token;  // the wheel thread's (or, once it exited, shutdown's)
  std::uint64_t wheel_tail = 0;  // runs enqueued through it (WheelThread::hand_over, enqueue_in_blocks)
  std::unique_ptr<moodycamel::ConsumerToken> consumer_token;  // the lane's thread's
  // Which Lane this is: bumped (release) when the Lane is destroyed, before
  // the wheel thread is asked to cancel its filed timers. A slot records the
  // generation it was scheduled with; a mismatch means its lane is gone.
  std::atomic<std::uint32_t> generation{1};
  // The thread that last called run_ready/wait_and_run (flush runs the
  // lanes of its own thread while it waits). relaxed: a hint compared with
  // the calling thread's own id, which only that thread can have stored.
  std::atomic<std::thread::id> owner{};
  // The thread inside run_ready / wait_and_run (a flush running the lane
  // counts), or none: a second thread entering throws std::logic_error
  // (lanes.cpp, LaneEntry). One CAS per call: acquire to enter, release to
  // leave, so whatever one thread did in the lane (its consumer token, the
  // batch) happens-before the next thread's use.
  std::atomic<std::thread::id> runner{};
  // 1 while the lane's thread is inside run_ready (the Dekker pair with
  // shutdown's stopped: lanes.cpp). Per lane: lanes' threads share no line.
  std::atomic<std::uint32_t> runs_active{0};
  // The lane's own command-queue token and slot cache (a Producer's), for
  // calls made on the lane's thread (LaneToken, lane_token.hpp): the loop thread
  // that arms and cancels request timeouts gets a Producer's fast path
  // without holding a Producer. token_busy hands it between threads:
  // exchange(acquire) to take it, store(release) to give it back, so its
  // plain fields (the slot cache) pass cleanly from one holder to the next.
  std::unique_ptr<ProducerQueueToken> token;
  std::atomic<bool> token_busy{false};
  // The shard its timers go to (design.md, "Shards"): set when the lane is
  // first opened, before any thread can see the lane, and kept when the
  // core is reused; only that shard's wheel thread hands it runs.
  unsigned shard = 0;
  // That wheel thread only: this pass's runs for the lane, handed over at its end.
  std::vector<Dispatch> batch;
  bool in_use = false;  // a Lane holds it (Lanes::mutex_)
};

// The slot's Lane was closed since it was scheduled (the wheel thread's L1,
// L2; close_lane's generation bump, lanes.cpp).
inline bool lane_closed(const TimerSlab& slab, const TimerSlot& slot, std::uint32_t index) noexcept {
  if (!slot.on_lane()) return false;
  // relaxed: `lane` is published by S1 (timer_slab.hpp, SlotExtra).
  const SlotExtra& extra = slab.extra(index);
  const LaneCore* lane = extra.lane.load(std::memory_order_relaxed);
  // acquire: pairs with close_lane's release bump.
  return extra.lane_generation != lane->generation.load(std::memory_order_acquire);
}

}  // namespace chime::detail
