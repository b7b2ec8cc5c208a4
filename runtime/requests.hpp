// SPDX-License-Identifier: BSL-1.0
// runtime/requests.hpp: what a blocking call asks of a wheel thread.
//
// What this is: the requests a call posts to a shard's command queue
// (Command::for_request, command_queue.hpp) and waits on: flush, drain,
// shutdown's stop, a lane's close, next_due and check_invariants, each with
// the Completion its caller waits on. The caller writes a request's inputs
// before it posts it (the queue's release / acquire carries them to the
// wheel thread); the wheel thread writes its outputs before
// Completion::signal, whose mutex orders them before the caller's read
// after its wait. Who posts each: runtime_core.cpp (flush, drain,
// shutdown, next_due, check), lanes.cpp (close); who serves it:
// the wheel thread (wheel_thread_apply.cpp takes them in; wheel_thread_fire.cpp
// and wheel_thread_manual.cpp settle them).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "chime/runtime.hpp"

namespace chime::detail {

struct LaneCore;

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

// A timer's place in a ManualClock flush: its due, then its call order
// (call_order.hpp). No two timers share one.
struct ReadyKey {
  std::int64_t due = INT64_MIN;
  std::uint64_t order = 0;
  friend bool operator<(const ReadyKey& a, const ReadyKey& b) noexcept {
    return a.due != b.due ? a.due < b.due : a.order < b.order;
  }
};

struct FlushRequest {
  std::int64_t target_ns = 0;  // the clock's time at the call
  std::uint64_t mark = 0;      // dispatch count it must see completed
  bool seen = false;           // wheel thread: mark initialised
  // A step of a ManualClock flush over several shards
  // (RuntimeCore::flush_in_call_order; wheel_thread_manual.cpp, "A manual clock"):
  // the shard advances to target_ns and claims only runs whose key is below
  // `below` (the other shards' earliest), and none once a call has set a
  // due since its first claim for this request (the count in call_order,
  // order_at_claim). Served when it can claim no more, with its earliest
  // ready key by target_ns in `earliest` (none: nothing left by then).
  // The flush writes target_ns, stepped and below before it posts the
  // request (the queue's release / acquire carries them to the wheel
  // thread); claimed and order_at_claim are the wheel thread's alone; the
  // wheel thread writes earliest before Completion::signal, whose mutex
  // orders it before the flush's read after the wait.
  bool stepped = false;
  ReadyKey below{};  // the default: claim nothing, only look
  bool claimed = false;
  std::uint64_t order_at_claim = 0;
  std::optional<ReadyKey> earliest;
  Completion completion;
  FlushRequest* next_free = nullptr;  // RequestPool's list, while no call uses it
  void reset() noexcept {
    target_ns = 0;
    mark = 0;
    seen = false;
    stepped = false;
    below = ReadyKey{};
    claimed = false;
    order_at_claim = 0;
    earliest.reset();
    completion.reset();
  }
};
struct DrainRequest {
  std::size_t count = 0;
  Completion completion;
  DrainRequest* next_free = nullptr;  // RequestPool's list, while no call uses it
  void reset() noexcept {
    count = 0;
    completion.reset();
  }
};
// The flush or drain requests no call uses now, kept for reuse (no
// allocation per call): a call takes one, and gives it back once it was
// served. One a call gave up on (out of memory, Completion) is the wheel
// thread's, which deletes it, and is not given back. The pool holds at most
// as many as calls were in progress at once; the runtime frees them. On the
// heap, not the caller's stack, since an abandoned request outlives its
// call; in the runtime, not in a thread_local, since a thread_local that
// owns memory has a destructor, and glibc registers that destructor with
// calloc at the thread's first call, aborting the process if that fails.
template <class Request>
class RequestPool {
 public:
  RequestPool() = default;
  ~RequestPool() {
    while (head_ != nullptr) delete std::exchange(head_, head_->next_free);
  }
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;
  // A request reset for a new call. Any thread. May allocate (std::bad_alloc
  // when none is free and there is no memory for one).
  std::unique_ptr<Request> take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (head_ != nullptr) {
        std::unique_ptr<Request> r(std::exchange(head_, head_->next_free));
        r->next_free = nullptr;
        r->reset();
        return r;
      }
    }
    return std::make_unique<Request>();
  }
  // A served request, for the next call. Any thread. Never allocates.
  void give_back(std::unique_ptr<Request> r) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    r->next_free = head_;
    head_ = r.release();
  }

 private:
  std::mutex mutex_;
  Request* head_ = nullptr;
};

struct CloseLaneRequest {
  LaneCore* lane = nullptr;
  Completion completion;
};
// Runtime::check_invariants: the wheel thread checks at its next pass
// (wheel_thread_invariants.cpp) and signals; `failure` is empty if all held.
struct CheckRequest {
  std::string failure;
  Completion completion;
};
// Runtime::next_due: the wheel thread answers in a pass that emptied its
// queue (every command posted before the request is applied) with the
// earliest due of the timers it holds, INT64_MAX for none.
struct NextDueRequest {
  std::int64_t due_ns = INT64_MAX;
  Completion completion;
};
struct StopRequest {
  ShutdownMode mode = ShutdownMode::cancel_pending;
  Completion completion;
};

}  // namespace chime::detail
