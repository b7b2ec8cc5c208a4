// SPDX-License-Identifier: BSL-1.0
// runtime/lane.cpp: chime::Lane (include/chime/lane.hpp): the public
// handle, forwarding to the runtime's lanes (lanes.cpp) and producer calls
// (producer_ops.cpp). Its coroutine sleep, LaneSleep: lane_sleep.cpp.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "chime/lane.hpp"
#include "lane_token.hpp"
#include "runtime_core.hpp"

namespace chime {
namespace detail {

void report_coroutine_exception(std::exception_ptr e) noexcept {
  if (!report_to_running_callback(std::move(e))) std::terminate();
}

}  // namespace detail

// ---- chime::Lane ----

void Lane::check(const char* what) const {
  if (lane_ == nullptr) {
    throw std::logic_error(std::string("chime::Lane::") + what +
                           " on an empty Lane (default-constructed or moved-from)");
  }
  if (!runtime_alive()) detail::throw_runtime_gone("Lane");
}

Lane::Lane(Lane&& other) noexcept : core_(other.core_), lane_(other.lane_), alive_(std::move(other.alive_)) {
  other.core_ = nullptr;
  other.lane_ = nullptr;
}

Lane& Lane::operator=(Lane&& other) noexcept {
  if (this != &other) {
    // A Lane whose runtime is gone has nothing left to close (its LaneCore
    // went with the runtime).
    if (lane_ != nullptr && runtime_alive()) core_->lanes().close_lane(lane_);
    core_ = other.core_;
    lane_ = other.lane_;
    alive_ = std::move(other.alive_);
    other.core_ = nullptr;
    other.lane_ = nullptr;
  }
  return *this;
}

Lane::~Lane() {
  if (lane_ != nullptr && runtime_alive()) core_->lanes().close_lane(lane_);
}

int Lane::ready_fd() const {
  check("ready_fd");
  return lane_->efd;
}
std::size_t Lane::run_ready(std::size_t max) {
  check("run_ready");
  return core_->lanes().run_lane(*lane_, max);
}
std::size_t Lane::wait_and_run(TimePoint deadline) {
  check("wait_and_run");
  return core_->lanes().wait_and_run(*lane_, deadline);
}
LaneSleep Lane::sleep_for(Duration delay, ScheduleOptions options) {
  check("sleep_for");
  // Without a slack of its own, the default for this delay, measured here.
  return LaneSleep(*this, detail::saturating_after(core_->now(), delay),
                   options.slack ? options.slack : core_->config().default_slack(delay));
}
const Clock& Lane::clock() const {
  check("clock");
  return core_->clock();
}

// ---- chime::LaneRef ----

LaneRef::LaneRef(const Lane& lane) {
  lane.check("LaneRef");
  core_ = lane.core_;
  lane_ = lane.lane_;
  alive_ = lane.alive_;
  // relaxed: the Lane is alive, so its generation is stable (as Timer's).
  lane_generation_ = lane_->generation.load(std::memory_order_relaxed);
}

// acquire: pairs with close_lane's release bump of the generation, as
// Timer's check_lane.
void LaneRef::check(const char* what) const {
  if (lane_ == nullptr) throw std::logic_error(std::string("chime::LaneRef::") + what + " on an empty LaneRef");
  if (alive_ == nullptr || !(*alive_)()) detail::throw_runtime_gone("LaneRef");
  if (lane_->generation.load(std::memory_order_acquire) != lane_generation_) {
    throw std::logic_error(std::string("chime::LaneRef::") + what + " on a lane that was destroyed");
  }
}

TimerId LaneRef::schedule_at(TimePoint due, Task task, ScheduleOptions options) const {
  check("schedule_at");
  const std::uint8_t slack_code = core_->config().slack_code(options.slack, "schedule_at");
  const detail::LaneToken token(*lane_);
  // With the generation this reference was made with: a timer of a lane
  // destroyed meanwhile is cancelled by the wheel thread (L1).
  return core_->producer_ops().schedule(
      {.due = due, .slack_code = slack_code, .lane = lane_, .lane_generation = lane_generation_}, std::move(task),
      token.get());
}
bool LaneRef::cancel(TimerId id) const {
  check("cancel");
  const detail::LaneToken token(*lane_);
  return core_->producer_ops().cancel(id, token.get());
}
int LaneRef::ready_fd() const {
  check("ready_fd");
  return lane_->efd;
}
std::size_t LaneRef::run_ready(std::size_t max) const {
  check("run_ready");
  return core_->lanes().run_lane(*lane_, max);
}
const Clock& LaneRef::clock() const {
  check("clock");
  return core_->clock();
}

}  // namespace chime
