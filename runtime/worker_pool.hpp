// SPDX-License-Identifier: BSL-1.0
// runtime/worker_pool.hpp: what the workers share with the wheel thread.
//
// What this is: the hand-off queue and the worker threads (runtime_core.hpp
// holds one; runner.cpp runs the workers). The queue is the seam
// between the wheel thread and the workers: the wheel thread is its only
// producer (bulk enqueues with its token, WheelThreadState::handoff_token),
// workers its consumers. A Dispatch record carries everything a run needs
// but the task, and the slot's state word decides (B1, C4) whether the run
// starts; the queue's release on enqueue / acquire on dequeue orders the
// wheel thread's claim (W1) and its writes to the record before the
// worker's reads (moodycamel's contract).
#pragma once

#include <thread>
#include <vector>

#include <concurrentqueue/blockingconcurrentqueue.h>

#include "dispatch.hpp"

namespace chime::detail {

// The hand-off queue's traits: workers spin only briefly before sleeping on
// the semaphore (moodycamel's default is 10,000 spins, which on a 2-core
// machine takes the core from the threads that produce the work).
struct HandoffTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static const int MAX_SEMA_SPINS = 64;
};

struct WorkerPool {
  moodycamel::BlockingConcurrentQueue<Dispatch, HandoffTraits> handoff;
  std::vector<std::thread> threads;  // started by RuntimeCore's constructor, joined by shutdown
};

}  // namespace chime::detail
