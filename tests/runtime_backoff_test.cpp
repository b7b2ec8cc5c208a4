// SPDX-License-Identifier: BSL-1.0
// How a thread waits for another thread's few stores (runtime/backoff.hpp):
// a few yields, then sleeps that double up to a bound, so a waiter never
// keeps the owner of the stores from running (a priority inversion: a
// waiter under SCHED_FIFO that only yields starves a SCHED_OTHER owner on
// its core).

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../runtime/backoff.hpp"

namespace {

using chime::detail::Backoff;
using std::chrono::microseconds;

// The documented schedule: kYields yields, then sleeps of 1, 2, 4, ... us up
// to the bound; reset starts over.
TEST(RuntimeBackoff, yields_then_sleeps_doubling_up_to_its_bound) {
  Backoff b(microseconds{5});
  for (int i = 0; i < Backoff::kYields; ++i) {
    EXPECT_FALSE(b.sleeps_next()) << "wait " << i << " must yield";
    b.wait();
  }
  EXPECT_TRUE(b.sleeps_next());
  EXPECT_EQ(b.next_sleep(), microseconds{1});
  b.wait();
  EXPECT_EQ(b.next_sleep(), microseconds{2});
  b.wait();
  EXPECT_EQ(b.next_sleep(), microseconds{4});
  b.wait();
  EXPECT_EQ(b.next_sleep(), microseconds{5});  // the bound
  b.wait();
  EXPECT_EQ(b.next_sleep(), microseconds{5});
  b.reset();
  EXPECT_FALSE(b.sleeps_next());
  EXPECT_EQ(b.next_sleep(), microseconds{1});
}

// Pins the calling thread to one CPU; false if it cannot.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The waiter runs under SCHED_FIFO and the owner of the store under
// SCHED_OTHER, both pinned to one CPU: a waiter that only yields keeps the
// CPU (yield lets only threads of its own priority run) until the kernel's
// real-time throttling (up to 950 ms of every second by default) stops it.
// With Backoff the owner runs during the waiter's first sleeps: the store is
// seen within 200 ms, a bound the throttling alone does not meet. Skipped
// where SCHED_FIFO or pinning is not permitted.
TEST(RuntimeBackoff, a_waiter_under_sched_fifo_lets_an_owner_on_its_core_run) {
  std::atomic<bool> published{false};
  std::atomic<bool> waiter_ready{false};
  std::atomic<int> setup{0};  // 1: the waiter could not get SCHED_FIFO or pin itself
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    sched_param p{};
    p.sched_priority = 1;
    if (!pin_to(0) || pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) != 0) {
      setup.store(1);
      waiter_ready.store(true);
      return;
    }
    waiter_ready.store(true);
    const auto start = std::chrono::steady_clock::now();
    for (Backoff b; !published.load(std::memory_order_acquire);) b.wait();
    waited = std::chrono::steady_clock::now() - start;
  });
  // The owner: pinned to the waiter's CPU, so it only gets to run when the
  // waiter lets it.
  std::thread owner([&] {
    if (!pin_to(0)) {
      setup.store(1);
      return;
    }
    while (!waiter_ready.load()) std::this_thread::yield();
    published.store(true, std::memory_order_release);
  });
  owner.join();
  if (setup.load() == 1) published.store(true);  // let the waiter end if it got that far
  waiter.join();
  if (setup.load() == 1) GTEST_SKIP() << "SCHED_FIFO or CPU pinning is not permitted here";
  EXPECT_LT(waited, std::chrono::milliseconds(200))
      << "the waiter kept the owner of the store from running for "
      << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms";
}

}  // namespace
