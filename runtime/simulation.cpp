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

bool Simulation::simulate_passes(const WheelThreads& shards) {
  bool any = false;
  for (const auto& shard : shards) any = shard->simulate_pass() || any;
  return any;
}

// flush() and drain() on a simulated runtime: passes (and the runs of this
// thread's lanes between them) until `done` is signalled. Three rounds in a
// row with nothing to do and no lane run means it never will be (a run
// waits on a lane no one runs here): std::logic_error, not a hang.
void Simulation::simulate_until(Completion& done, const ThreadLanes& lanes, const WheelThreads& shards,
                                Lanes& all_lanes) {
  int idle = 0;
  for (;;) {
    std::size_t ran = 0;
    for (std::size_t i = 0; i < lanes.size(); ++i) ran += all_lanes.run_lane(*lanes[i], SIZE_MAX);
    if (done.is_done()) return;
    bool running = false;
    for (const auto& shard : shards) running = running || shard->wt().running;
    if (!running) return;
    if (simulate_passes(shards) || ran != 0) {
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
void Simulation::simulate_until_stopped(const WheelThreads& shards) {
  for (const auto& shard : shards) {
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
  return simulate_passes(core_->wheel_threads());
}

std::size_t Simulation::run_until_idle() {
  std::size_t n = 0;
  while (run_one_pass()) ++n;
  return n;
}

}  // namespace chime::detail
