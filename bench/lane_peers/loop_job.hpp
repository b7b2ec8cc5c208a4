// SPDX-License-Identifier: BSL-1.0
// LoopJob: work handed to an event loop's own thread in slices, shared by the
// loop peers of bench/lane_bench.cpp (chime_lane_loop.hpp, asio_loop.hpp,
// uv_loop.hpp).
//
// A slice is a call of `step()` on the loop thread; it returns true while
// there is more to do. Between two slices each loop goes back to its own
// loop (one poll/epoll_wait with a zero timeout and whatever is ready), as a
// server's loop does between batches of requests, so work that a slice
// queued on the loop (Asio's aborted completions) runs before the next one.
// finish() is called on the loop thread once, after the last slice and after
// what that slice queued: it releases the thread waiting in wait().
#pragma once

#include <functional>
#include <future>
#include <utility>

namespace chime_bench {

struct LoopJob {
  explicit LoopJob(std::function<bool()> s) : step(std::move(s)), finished(done.get_future()) {}
  std::function<bool()> step;
  std::promise<void> done;
  std::future<void> finished;
  void finish() { done.set_value(); }  // loop thread, once
  void wait() { finished.wait(); }     // the submitting thread
};

}  // namespace chime_bench
