// SPDX-License-Identifier: BSL-1.0
// runtime/lane_sleep.cpp: chime::LaneSleep (include/chime/lane.hpp): the
// awaitable of Lane::sleep_until and sleep_for, a timer on the lane whose
// task resumes the coroutine.
#include <atomic>
#include <coroutine>
#include <optional>
#include <stdexcept>
#include <thread>

#include "backoff.hpp"
#include "chime/lane.hpp"
#include "lane_token.hpp"
#include "runtime_core.hpp"

namespace chime {

// The task of a sleep's timer: resumes the coroutine. For a Detached
// coroutine it also owns the frame until it runs: destroyed without having
// run (the sleep was cancelled by its lane's close or by shutdown; the frame
// itself cannot cancel it, nobody holds it), it destroys the frame, whose
// ~LaneSleep then finds the timer already settled. Except when the schedule
// itself failed: then the task is destroyed inside await_suspend, on the
// suspending thread, before `scheduled_`, and the exception goes to the
// coroutine, which keeps its frame. 16 bytes, nothrow move: stored inline.
//
// owns_frame is read in this object only, never in the frame, once the frame
// may be gone: ~LaneSleep disowns the task (through LaneSleep::resumer_)
// before it cancels the sleep, and the task clears resumer_ before it
// destroys the frame itself. Atomic: the frame's destruction on the lane's
// thread may disown a task that shutdown's sweep destroys elsewhere.
struct LaneSleepResumer {
  LaneSleep* sleep;
  std::atomic<bool> owns_frame;
  LaneSleepResumer(LaneSleep* s, bool owns) noexcept : sleep(s), owns_frame(owns) {
    if (owns) sleep->resumer_ = this;
  }
  LaneSleepResumer(LaneSleepResumer&& o) noexcept
      : sleep(o.sleep), owns_frame(o.owns_frame.exchange(false, std::memory_order_relaxed)) {
    if (owns_frame.load(std::memory_order_relaxed)) sleep->resumer_ = this;
  }
  LaneSleepResumer& operator=(LaneSleepResumer&&) = delete;
  ~LaneSleepResumer() {
    // acquire: pairs with disown()'s release (the frame is going away).
    if (!owns_frame.load(std::memory_order_acquire) || sleep->frame_dying_.load(std::memory_order_acquire)) return;
    // acquire: pairs with suspend()'s release; scheduler_ was written before
    // the schedule published the task (S1), which we acquired to get here.
    if (!sleep->scheduled_.load(std::memory_order_acquire) && sleep->scheduler_ == std::this_thread::get_id()) return;
    sleep->wait_scheduled();
    sleep->resumer_ = nullptr;  // the frame's ~LaneSleep must not reach this object
    sleep->handle_.destroy();
  }
  void disown() noexcept { owns_frame.store(false, std::memory_order_release); }
  void operator()() {
    owns_frame.store(false, std::memory_order_relaxed);
    sleep->wait_scheduled();
    sleep->resumer_ = nullptr;
    sleep->handle_.resume();
  }
};

LaneSleep::LaneSleep(const Lane& lane, TimePoint due, std::optional<Duration> slack) noexcept
    : core_(lane.core_), lane_(lane.lane_), alive_(lane.alive_), due_(due), slack_(slack) {
  // relaxed: the Lane is alive, so its generation is stable (as Timer's).
  if (lane_ != nullptr && runtime_alive()) lane_generation_ = lane_->generation.load(std::memory_order_relaxed);
}

LaneSleep::~LaneSleep() {
  // Destroyed while suspended (the frame was destroyed): the sleep must not
  // resume a freed frame. On the lane's thread the run has not started, so
  // this cancel wins (C1, or C4 if it was already ready). The frame is
  // already being destroyed (a Detached frame someone destroyed through a
  // handle of their own): the task the cancel destroys must not destroy it
  // again. release: pairs with the resumer's acquire, on whichever thread
  // destroys the task. The sleep's Lane may have been moved or destroyed
  // meanwhile: only the cores, which live as long as the Runtime, are used.
  if (id_ && runtime_alive()) {
    frame_dying_.store(true, std::memory_order_release);
    // A Detached sleep's task owns the frame: disown it first. A cancel that
    // finds the run already handed to the lane (C4) leaves the task in the
    // slot until the lane dequeues it, after this frame is freed; the task's
    // destructor must then not look at the frame (it read frame_dying_ in
    // freed memory: ASan, tests/runtime_lane_coroutine_test.cpp). wait_scheduled:
    // resumer_ was written by the scheduling thread before scheduled_.
    wait_scheduled();
    if (resumer_ != nullptr) resumer_->disown();
    // Its Lane destroyed (the generation moved on; acquire: pairs with
    // close_lane's release bump), the close has cancelled the sleep (L1,
    // L2, L3) and this cancel finds it settled; the core may serve another
    // Lane by now, whose token is not ours to take.
    if (lane_->generation.load(std::memory_order_acquire) == lane_generation_) {
      const detail::LaneToken token(*lane_);
      core_->producer_ops().cancel(id_, token.get());
    } else {
      core_->producer_ops().cancel(id_, nullptr);
    }
  }
}

void LaneSleep::suspend(std::coroutine_handle<> h, bool owns_frame) {
  if (lane_ == nullptr) {
    throw std::logic_error(
        "chime::Lane::sleep_until (or sleep_for) awaited on an empty Lane (default-constructed or moved-from)");
  }
  if (!runtime_alive()) detail::throw_runtime_gone("Lane");
  // acquire: pairs with close_lane's release bump.
  if (lane_->generation.load(std::memory_order_acquire) != lane_generation_) {
    throw std::logic_error(
        "chime::Lane::sleep_until (or sleep_for) awaited after its Lane was destroyed (a sleep is awaited while its "
        "Lane lives)");
  }
  const std::uint8_t slack_code = core_->config().slack_code(slack_, "sleep_until (or sleep_for)");
  handle_ = h;
  scheduler_ = std::this_thread::get_id();
  const detail::LaneToken token(*lane_);
  // With the generation the sleep was made with: a Lane destroyed meanwhile
  // has the wheel thread cancel it (L1), never hand it to the core's next Lane.
  id_ = core_->producer_ops().schedule(
      {.due = due_, .slack_code = slack_code, .lane = lane_, .lane_generation = lane_generation_},
      Task(LaneSleepResumer(this, owns_frame)), token.get());
  scheduled_.store(true, std::memory_order_release);
}

// Suspended on another thread than the lane's, the sleep may come due (or be
// cancelled) before id_ is written: resuming (or destroying) the frame first
// would free this awaiter under that write. acquire: pairs with the release
// in suspend(). On the lane's thread it never waits (the run cannot start
// while this thread is still in await_suspend).
void LaneSleep::wait_scheduled() const noexcept {
  for (detail::Backoff backoff; !scheduled_.load(std::memory_order_acquire);) backoff.wait();
}

}  // namespace chime
