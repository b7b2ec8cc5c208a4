// SPDX-License-Identifier: BSL-1.0
// AsioTimerService: Boost.Asio steady timers driven from many threads, the way
// the Asio documentation says is safe, as a peer of chime::Runtime in
// bench/runtime_bench.cpp.
//
// Shape: one io_context run by N threads (they run the callbacks: Asio's
// "worker pool"). A timer is a heap-allocated Entry (owned by shared_ptr, the
// usual Asio idiom for an object that outlives the call that started its
// async operation) holding a steady_timer whose I/O executor is a strand.
//
// Why strands: the Asio reference says of basic_waitable_timer "Distinct
// objects: Safe. Shared objects: Unsafe.", while io_context and strand
// post() may be called from any thread. A timer is shared between the thread
// that arms or cancels it and the io_context thread that completes its wait,
// so every operation on it (expires_at, async_wait, cancel) runs as a handler
// posted to the timer's strand, and the wait's completion handler runs on the
// same strand (the handler has no associated executor, so Asio uses the
// timer's I/O executor, the strand). Each Producer owns one strand; its
// timers use it (a strand per "session", the pattern of the Asio examples;
// cheaper than a strand per timer, which would allocate a strand
// implementation per timer). The timer type is steady_timer rebound to the
// concrete strand executor (steady_timer::rebind_executor<Strand>::other), so
// no polymorphic any_io_executor is involved.
//
// Contract:
// - schedule_at creates the Entry on the calling thread and posts "set expiry,
//   async_wait" to the strand; it returns the Entry's shared_ptr as the id.
// - cancel and reschedule_at post to the timer's strand and return true at
//   once: Asio gives no synchronous answer to "did the cancel win?". The posted
//   handler applies only if the timer is still pending (armed, not fired, not
//   cancelled), judged on the strand.
// - Never early (Asio fires a wait once steady_clock reaches the expiry);
//   exactly one of {fire, cancel applied} per timer; operations from one
//   thread on one timer apply in the order posted (strand FIFO).
// - A superseded wait (cancelled, or re-armed by reschedule_at) completes with
//   operation_aborted, or, if it had already expired and was queued, with
//   success; each armed wait carries a generation number and its handler runs
//   the callback only if that generation is still the current one.
// - sync() returns once every handler posted to the strands before the call
//   (and the completions those handlers queued) has run: two rounds of a
//   marker posted to every strand in use.
//
// Allocations: one Entry (make_shared: one block) per timer, plus whatever
// Asio's handler allocator does not recycle (it caches freed handler memory
// per thread); the benchmark counts them.
//
// Memory ordering: everything a thread did before schedule_at happens-before
// the callback runs (post() synchronizes with the handler's execution; the
// strand serializes the handlers of one timer).
#pragma once

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace chime_bench {

class AsioTimerService {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Callback = std::function<void()>;
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  using Timer = boost::asio::steady_timer::rebind_executor<Strand>::other;

  struct Entry {
    Entry(const Strand& strand, Callback callback) : timer(strand), cb(std::move(callback)) {}
    Timer timer;
    Callback cb;
    // Strand only:
    std::uint64_t wait_generation = 0;  // generation of the current async_wait
    bool pending = false;               // armed, not yet fired or cancelled
  };
  using Id = std::shared_ptr<Entry>;

  // One producer's handle: its strand. Use it from one thread at a time.
  class Producer {
   public:
    // Any thread. May allocate (the Entry; Asio's post).
    Id schedule_at(TimePoint due, Callback cb) {
      auto e = std::make_shared<Entry>(strand_, std::move(cb));
      boost::asio::post(strand_, [e, due] {
        e->timer.expires_at(due);
        arm(e);
      });
      return e;
    }
    Id schedule_after(Clock::duration delay, Callback cb) {
      return schedule_at(Clock::now() + delay, std::move(cb));
    }
    // True: the cancel was posted (Asio cannot answer synchronously).
    bool cancel(const Id& e) { return AsioTimerService::cancel(e); }
    bool reschedule_at(const Id& e, TimePoint due) {
      return AsioTimerService::reschedule_at(e, due);
    }
    bool reschedule_after(const Id& e, Clock::duration delay) {
      return reschedule_at(e, Clock::now() + delay);
    }

   private:
    friend class AsioTimerService;
    explicit Producer(Strand strand) : strand_(std::move(strand)) {}
    Strand strand_;
  };

  explicit AsioTimerService(unsigned threads, unsigned max_producers)
      : io_(static_cast<int>(threads)), guard_(boost::asio::make_work_guard(io_)) {
    strands_.reserve(max_producers);
    for (unsigned i = 0; i < max_producers; ++i) strands_.push_back(boost::asio::make_strand(io_));
    threads_.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  ~AsioTimerService() {
    guard_.reset();
    io_.stop();
    for (std::thread& t : threads_) t.join();
    // Pending waits still own their Entries; ~io_context destroys them.
  }

  AsioTimerService(const AsioTimerService&) = delete;
  AsioTimerService& operator=(const AsioTimerService&) = delete;

  // The handle of producer `index` (< max_producers): timers it schedules use
  // strand `index`. Any thread. Never allocates.
  Producer producer(unsigned index) { return Producer(strands_.at(index)); }

  // Any thread. May allocate.
  static bool cancel(const Id& e) {
    boost::asio::post(e->timer.get_executor(), [e] {
      if (!e->pending) return;
      e->pending = false;
      ++e->wait_generation;  // a completion already queued with success is now stale
      e->timer.cancel();
    });
    return true;
  }

  // Any thread. May allocate.
  static bool reschedule_at(const Id& e, TimePoint due) {
    boost::asio::post(e->timer.get_executor(), [e, due] {
      if (!e->pending) return;
      e->timer.expires_at(due);  // aborts the current wait
      arm(e);
    });
    return true;
  }

  // See the contract. Any thread but the io_context's. May block.
  void sync() {
    for (int round = 0; round < 2; ++round) {
      std::mutex mu;
      std::condition_variable cv;
      std::size_t left = strands_.size();
      for (Strand& s : strands_) {
        boost::asio::post(s, [&] {
          std::lock_guard<std::mutex> lock(mu);
          if (--left == 0) cv.notify_one();
        });
      }
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return left == 0; });
    }
  }

  unsigned threads() const noexcept { return static_cast<unsigned>(threads_.size()); }

 private:
  // Strand only.
  static void arm(const Id& e) {
    const std::uint64_t generation = ++e->wait_generation;
    e->pending = true;
    e->timer.async_wait([e, generation](const boost::system::error_code& ec) {
      if (ec || e->wait_generation != generation || !e->pending) return;
      e->pending = false;
      e->cb();
    });
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::vector<Strand> strands_;
  std::vector<std::thread> threads_;
};

}  // namespace chime_bench
