// SPDX-License-Identifier: BSL-1.0
// runtime/lane_token.hpp: the producer token a Lane's calls post through
// (lane.cpp, lane_sleep.cpp).
//
// What this is: an RAII borrow of a lane's own queue token (LaneCore::token),
// taken only on the lane's thread and only while no other call holds it.
// The token_busy exchange is acquire and its reset release, so the queue
// token's producer state passes from one borrower to the next.
#pragma once

#include <atomic>
#include <thread>

#include "command_queue.hpp"
#include "lane_core.hpp"

namespace chime::detail {

// The lane's token for this call, if this thread is the lane's thread and
// nobody else holds it (a thread that ran the lane before may still be
// posting through it); otherwise none (the calling thread's implicit
// sub-queue). So commands from the lane's thread keep their order, except
// across a hand-over of the lane to another thread, when a call may take
// the other path.
class LaneToken {
 public:
  explicit LaneToken(LaneCore& lane) noexcept : lane_(lane) {
    if (lane.owner.load(std::memory_order_relaxed) == std::this_thread::get_id() &&
        !lane.token_busy.exchange(true, std::memory_order_acquire)) {
      token_ = lane.token.get();
    }
  }
  ~LaneToken() {
    if (token_ != nullptr) lane_.token_busy.store(false, std::memory_order_release);
  }
  LaneToken(const LaneToken&) = delete;
  LaneToken& operator=(const LaneToken&) = delete;
  ProducerQueueToken* get() const noexcept { return token_; }

 private:
  LaneCore& lane_;
  ProducerQueueToken* token_ = nullptr;
};

}  // namespace chime::detail
