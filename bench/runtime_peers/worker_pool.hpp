// SPDX-License-Identifier: BSL-1.0
// WorkerPool: the callback pool of the hand-written peer (MutexHeapService):
// N threads taking std::function<void()> jobs from one std::deque guarded by
// one std::mutex, woken by one std::condition_variable. This is the textbook
// pool most teams write; it is not chime's hand-off (chime's wheel thread hands
// fired timers to its workers through a lock-free queue), and the benchmark
// docs say so.
//
// Contract:
// - submit(batch) moves every job of `batch` into the queue, in order, and
//   clears `batch`; jobs start in FIFO order (with several workers they may
//   finish in any order). Any thread. May block (the queue's mutex). May
//   allocate (deque blocks).
// - A job that throws is caught on its worker and counted (errors()).
// - The destructor stops the workers once the jobs already queued have run
//   and joins them. Not from a job.
//
// Memory ordering: everything a thread did before submit() happens-before the
// job runs (the queue's mutex: unlock in submit, lock in the worker).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace chime_bench {

class WorkerPool {
 public:
  using Job = std::function<void()>;

  explicit WorkerPool(unsigned workers) {
    threads_.reserve(workers);
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { run(); });
  }

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Any thread. May block. May allocate.
  void submit(std::vector<Job>& batch) {
    if (batch.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Job& job : batch) jobs_.push_back(std::move(job));
    }
    if (batch.size() == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
    batch.clear();
  }

  unsigned workers() const noexcept { return static_cast<unsigned>(threads_.size()); }
  // Jobs that threw. Any thread. Lock-free.
  std::uint64_t errors() const noexcept { return errors_.load(std::memory_order_relaxed); }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and nothing left to run
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      try {
        job();
      } catch (...) {
        errors_.fetch_add(1, std::memory_order_relaxed);  // a count only; no ordering needed
      }
      job = nullptr;  // destroy the callable outside the lock too
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::atomic<std::uint64_t> errors_{0};
  std::vector<std::thread> threads_;  // last: started after the members above exist
};

}  // namespace chime_bench
