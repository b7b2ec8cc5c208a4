// SPDX-License-Identifier: BSL-1.0
// MutexHeapService: the timer service most teams write by hand, as a peer of
// chime::Runtime in bench/runtime_bench.cpp.
//
// Shape: one std::mutex guards everything: a slab of timer slots (a
// std::vector, reused through a free list), and an indexed binary min-heap of
// slot numbers ordered by due time, where each slot knows its heap index so
// cancel and reschedule are O(log n). One timer thread sleeps on a
// std::condition_variable until the earliest due time (wait_until on the
// steady clock) and is notified when an insert or reschedule makes a new
// earliest due time. When it wakes it pops every timer with due <= now, frees
// their slots, and hands their callbacks to a WorkerPool (N threads on a
// mutex + condvar queue, see worker_pool.hpp).
//
// Contract:
// - Id is {slot, generation}; a default Id or one whose slot was reused is
//   stale: cancel/reschedule return false for it.
// - Never early: a callback runs only after steady_clock::now() >= its due
//   time, as read by the timer thread.
// - cancel returns true iff the timer was still in the heap; then its
//   callback never runs. reschedule_at returns true iff the timer was still in
//   the heap and now has the new due time (earlier or later).
// - Exactly one of {fire, successful cancel} happens to every timer.
// - A due time in the past fires at the timer thread's next wake-up.
// - No allocation per timer in steady state: slots and heap array grow to the
//   high-water mark and are reused; a callable of <= 16 trivially copyable
//   bytes is stored inside std::function (libstdc++) without allocation.
// - The destructor stops the timer thread, drops pending timers without
//   running them, lets the pool finish the callbacks already handed to it, and
//   joins every thread.
//
// Not guaranteed: lateness (how long after due a callback starts) depends on
// the OS waking the timer thread and a worker; callbacks of one batch run on
// several workers in any order.
//
// Memory ordering: everything a thread did before schedule_at happens-before
// the callback runs (the service mutex is released by the producer and
// acquired by the timer thread, then the pool's mutex hands the job over).
#pragma once

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "worker_pool.hpp"

namespace chime_bench {

class MutexHeapService {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Callback = std::function<void()>;

  struct Id {
    std::uint32_t slot = 0;
    std::uint32_t generation = 0;  // 0: never issued
  };

  explicit MutexHeapService(unsigned workers) : pool_(workers), timer_thread_([this] { run(); }) {}

  ~MutexHeapService() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    timer_thread_.join();
    // pool_ is destroyed after this body: it runs what it was handed and joins.
  }

  MutexHeapService(const MutexHeapService&) = delete;
  MutexHeapService& operator=(const MutexHeapService&) = delete;

  // Any thread. May block. May allocate (slab and heap growth only).
  Id schedule_at(TimePoint due, Callback cb) {
    bool earliest;
    Id id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::uint32_t s = acquire_slot();
      Slot& slot = slots_[s];
      slot.due = due;
      slot.cb = std::move(cb);
      slot.heap_index = static_cast<std::uint32_t>(heap_.size());
      heap_.push_back(s);
      sift_up(slot.heap_index);
      earliest = heap_[0] == s;
      id = Id{s, slot.generation};
    }
    if (earliest) cv_.notify_one();
    return id;
  }

  Id schedule_after(Clock::duration delay, Callback cb) {
    return schedule_at(Clock::now() + delay, std::move(cb));
  }

  // Returns true iff the timer was pending; its callback will not run. Any
  // thread. May block. Never allocates.
  bool cancel(Id id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_locked(id)) return false;
    remove_at(slots_[id.slot].heap_index);
    slots_[id.slot].cb = nullptr;
    release_slot(id.slot);
    return true;
  }

  // Returns true iff the timer was pending and now has due time `due`. Any
  // thread. May block. Never allocates.
  bool reschedule_at(Id id, TimePoint due) {
    bool earliest = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pending_locked(id)) return false;
      Slot& slot = slots_[id.slot];
      const bool later = due > slot.due;
      slot.due = due;
      if (later) {
        sift_down(slot.heap_index);
      } else {
        sift_up(slot.heap_index);
        earliest = heap_[0] == id.slot;
      }
    }
    // A later due time never needs the timer thread: at worst it wakes at the
    // old time, finds nothing due and sleeps again.
    if (earliest) cv_.notify_one();
    return true;
  }

  bool reschedule_after(Id id, Clock::duration delay) {
    return reschedule_at(id, Clock::now() + delay);
  }

  // Pending timers. Any thread. May block.
  std::size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heap_.size();
  }

  // Times the timer thread returned from a wait (timeouts, notifications and
  // spurious wake-ups). Any thread. May block.
  // The timer thread's CPU time so far (CLOCK_THREAD_CPUTIME_ID of that
  // thread), in nanoseconds; -1 if the clock cannot be read.
  std::int64_t timer_thread_cpu_ns() {
    clockid_t clock{};
    timespec ts{};
    if (pthread_getcpuclockid(timer_thread_.native_handle(), &clock) != 0 || clock_gettime(clock, &ts) != 0) return -1;
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  std::uint64_t wakeups() const {
    std::lock_guard<std::mutex> lock(mu_);
    return wakeups_;
  }

  unsigned workers() const noexcept { return pool_.workers(); }

 private:
  static constexpr std::uint32_t kNotInHeap = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t kNoSlot = std::numeric_limits<std::uint32_t>::max();

  struct Slot {
    TimePoint due{};
    Callback cb;
    std::uint32_t generation = 1;
    std::uint32_t heap_index = kNotInHeap;
    std::uint32_t next_free = kNoSlot;
  };

  bool pending_locked(Id id) const {
    return id.slot < slots_.size() && slots_[id.slot].generation == id.generation &&
           slots_[id.slot].heap_index != kNotInHeap;
  }

  std::uint32_t acquire_slot() {
    if (free_head_ != kNoSlot) {
      const std::uint32_t s = free_head_;
      free_head_ = slots_[s].next_free;
      return s;
    }
    if (slots_.size() >= kNoSlot)
      throw std::length_error("MutexHeapService: more than 2^32-1 timers");
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }

  void release_slot(std::uint32_t s) {
    Slot& slot = slots_[s];
    slot.heap_index = kNotInHeap;
    if (++slot.generation == 0) slot.generation = 1;  // 0 is the never-issued id
    slot.next_free = free_head_;
    free_head_ = s;
  }

  bool less(std::uint32_t a, std::uint32_t b) const {
    return slots_[heap_[a]].due < slots_[heap_[b]].due;
  }

  void place(std::uint32_t i, std::uint32_t s) {
    heap_[i] = s;
    slots_[s].heap_index = i;
  }

  void sift_up(std::uint32_t i) {
    const std::uint32_t s = heap_[i];
    const TimePoint due = slots_[s].due;
    while (i > 0) {
      const std::uint32_t parent = (i - 1) / 2;
      if (!(due < slots_[heap_[parent]].due)) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, s);
  }

  void sift_down(std::uint32_t i) {
    const std::uint32_t s = heap_[i];
    const TimePoint due = slots_[s].due;
    const auto n = static_cast<std::uint32_t>(heap_.size());
    for (;;) {
      std::uint32_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && less(child + 1, child)) ++child;
      if (!(slots_[heap_[child]].due < due)) break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, s);
  }

  // Removes heap_[i]: the last element fills the hole and moves up or down.
  void remove_at(std::uint32_t i) {
    const std::uint32_t last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    place(i, last);
    if (i > 0 && slots_[last].due < slots_[heap_[(i - 1) / 2]].due) {
      sift_up(i);
    } else {
      sift_down(i);
    }
  }

  void run() {
    std::vector<Callback> batch;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (heap_.empty()) {
        cv_.wait(lock);
        ++wakeups_;
        continue;
      }
      const TimePoint now = Clock::now();
      const TimePoint earliest = slots_[heap_[0]].due;
      if (earliest > now) {
        cv_.wait_until(lock, earliest);
        ++wakeups_;
        continue;
      }
      while (!heap_.empty() && slots_[heap_[0]].due <= now) {
        const std::uint32_t s = heap_[0];
        remove_at(0);
        batch.push_back(std::move(slots_[s].cb));
        slots_[s].cb = nullptr;
        release_slot(s);
      }
      lock.unlock();
      pool_.submit(batch);
      lock.lock();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> heap_;
  std::uint32_t free_head_ = kNoSlot;
  std::uint64_t wakeups_ = 0;
  bool stop_ = false;
  WorkerPool pool_;
  std::thread timer_thread_;  // last: started once everything above exists
};

}  // namespace chime_bench
