// SPDX-License-Identifier: BSL-1.0
// runtime/simulation.cpp: the deterministic simulation's passes (a test
// seam; simulation.hpp says what it covers and what it does not). The pass
// itself is the wheel thread's (wheel_thread.cpp, run_pass); this file is
// the loop that replaces WheelThread::main and the waits of flush, drain and
// shutdown on a simulated runtime.
#include "simulation.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "runtime_core.hpp"

namespace chime::detail {

thread_local RuntimeCore** tls_simulation_request = nullptr;

// One pass of this shard on the calling thread. Returns true iff it did
// something (see Simulation::run_one_pass). After the pass that stops the
// shard, does what the wheel thread does as it exits.
bool WheelThread::simulate_pass() {
  if (!wt().running) return false;
  const bool queued = seam.commands.size_approx() != 0;  // exact: nothing runs concurrently
  const std::uint64_t dispatched = wt().dispatched;
  bool busy = false;
  const PassEnd end = run_pass(busy);
  if (end == PassEnd::stopped) {
    wt().retired->flush();
    seam.exited.store(true, std::memory_order_release);
    return true;
  }
  // The overdue list is work only for a pass that may fire: on a ManualClock
  // between flushes it waits for the next flush.
  return queued || busy || end == PassEnd::more_commands || wt().dispatched != dispatched ||
         (may_fire() && !wt().overdue.empty());
}

// One pass of every shard still running, in shard order (a fixed order: a
// run replays exactly). True iff any did something.
bool RuntimeCore::simulate_passes() {
  bool any = false;
  for (auto& shard : shards_) any = shard->simulate_pass() || any;
  return any;
}

// flush() and drain() on a simulated runtime: passes (and the runs of this
// thread's lanes between them) until `done` is signalled. Three rounds in a
// row with nothing to do and no lane run means it never will be (a run
// waits on a lane no one runs here): std::logic_error, not a hang.
void RuntimeCore::simulate_until(Completion& done, const ThreadLanes& lanes) {
  int idle = 0;
  for (;;) {
    std::size_t ran = 0;
    for (std::size_t i = 0; i < lanes.size(); ++i) ran += lanes_.run_lane(*lanes[i], SIZE_MAX);
    if (done.is_done()) return;
    bool running = false;
    for (auto& shard : shards_) running = running || shard->wt().running;
    if (!running) return;
    if (simulate_passes() || ran != 0) {
      idle = 0;
    } else if (++idle == 3) {
      throw std::logic_error(
          "chime::detail::Simulation: a flush waits for runs that no pass and no lane of this thread makes");
    }
  }
}

// shutdown() on a simulated runtime: passes until every shard's stop
// request (queued by shutdown) is served, or at once after
// shutdown(cancel_pending).
void RuntimeCore::simulate_until_stopped() {
  for (auto& shard : shards_) {
    while (shard->wt().running) shard->simulate_pass();
  }
}

Simulation::Simulation(RuntimeOptions options) {
  RuntimeCore* core = nullptr;
  tls_simulation_request = &core;
  try {
    runtime_.emplace(std::move(options));
  } catch (...) {
    tls_simulation_request = nullptr;
    throw;
  }
  tls_simulation_request = nullptr;
  core_ = core;
}

bool Simulation::run_one_pass() {
  if (core_->runner().in_callback()) {
    throw std::logic_error("chime::detail::Simulation::run_one_pass called from inside a timer callback");
  }
  return core_->simulate_passes();
}

std::size_t Simulation::run_until_idle() {
  std::size_t n = 0;
  while (run_one_pass()) ++n;
  return n;
}

}  // namespace chime::detail
