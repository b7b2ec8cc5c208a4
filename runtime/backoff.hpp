// SPDX-License-Identifier: BSL-1.0
// runtime/backoff.hpp: how a thread waits for another thread's few stores.
//
// Some states are a few stores from done, owned by one thread: a slot in
// Writing or Cancelling (a reschedule or cancel between R1 and R2, C1 and
// K1: docs/state-machine.md), a lane's shutdown in progress, a LaneSleep
// not yet published. A thread that must see the outcome waits for it.
// Yielding alone is not enough: yield() only lets threads of the caller's
// priority run, so under SCHED_FIFO (the benches run under `chrt`) or with
// both threads on one core, the waiter can keep the owner from ever running
// again (a priority inversion: the owner was preempted between its stores).
// So a waiter yields a few times (the common case: the owner is running on
// another core and is done within a few hundred nanoseconds), then sleeps,
// doubling the sleep up to a bound. A sleep lets every thread run, whatever
// its priority.
//
// Also here: retry_until_memory, how a thread waits for memory (out of
// memory, what must not be lost is retried every millisecond).
#pragma once

#include <chrono>
#include <thread>

namespace chime::detail {

class Backoff {
 public:
  // Yields before the first sleep.
  static constexpr int kYields = 16;
  static constexpr std::chrono::microseconds kFirstSleep{1};

  // max_sleep: the longest single sleep (the wheel thread uses a short one:
  // timers that come due while it waits are late by that much at most).
  explicit constexpr Backoff(std::chrono::microseconds max_sleep = std::chrono::microseconds{1000}) noexcept
      : max_sleep_(max_sleep) {}

  // One wait step: yield for the first kYields calls since the last reset,
  // then sleep kFirstSleep, doubling on each call up to max_sleep. Never
  // allocates; never throws.
  void wait() noexcept {
    if (yields_ < kYields) {
      ++yields_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    if (sleep_ < max_sleep_) sleep_ = sleep_ * 2 < max_sleep_ ? sleep_ * 2 : max_sleep_;
  }

  // The awaited stores came: the next wait starts with yields again.
  void reset() noexcept {
    yields_ = 0;
    sleep_ = kFirstSleep;
  }

  // Whether the next wait() sleeps (for tests and counters).
  bool sleeps_next() const noexcept { return yields_ >= kYields; }
  std::chrono::microseconds next_sleep() const noexcept { return sleep_; }

 private:
  std::chrono::microseconds max_sleep_;
  std::chrono::microseconds sleep_ = kFirstSleep;
  int yields_ = 0;
};

// Out of memory, something that must not be lost (a command, a worker's
// stop record, a batch of freed slots) waits for memory instead: calls
// `try_once` until it returns true, sleeping 1 ms between tries (no
// backoff: this waits for memory, not for another thread's stores). Blocks
// the caller only while out of memory; throws only what `try_once` throws.
template <class TryOnce>
void retry_until_memory(TryOnce&& try_once) noexcept(noexcept(try_once())) {
  while (!try_once()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace chime::detail
