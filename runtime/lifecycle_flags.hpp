// SPDX-License-Identifier: BSL-1.0
// runtime/lifecycle_flags.hpp: how far a runtime's shutdown has gone.
//
// What this is: the three flags shutdown (runtime_core.cpp) sets, in this
// order, and the roles read: producers (stopped), lanes (stopped,
// shutdown_done) and the wheel threads (cancel_requested). RuntimeCore
// holds one; the roles hold it by const reference. Each flag says who
// stores it, who loads it, and why its order is enough.
#pragma once

#include <atomic>

namespace chime::detail {

struct LifecycleFlags {
  // shutdown(cancel_pending) was called: the wheel thread stops at once,
  // however many commands are queued (wheel_thread.cpp, run_pass).
  // Shutdown stores it (seq_cst) before `stopped`; the wheel thread loads
  // it (relaxed) between command batches and, after a seq_cst fence, after
  // each pass's clock read: set by then, the pass dispatches nothing. Not
  // set by then, the shutdown call began after that clock read, so every
  // timer the pass dispatches was due at or before the call (design.md,
  // shutdown).
  std::atomic<bool> cancel_requested{false};
  // Shutdown began. Shutdown stores it seq_cst, then fences before its
  // sweep; a schedule fences (P1) after its ADD, then loads it: S1's Dekker
  // pair (state-machine.md, "Shutdown vs producers still scheduling");
  // lanes pair it with runs_active (lanes.cpp); flush, drain, open_lane,
  // close_lane and check_schedulable read it (acquire) as an early out.
  std::atomic<bool> stopped{false};
  // Shutdown's sweep is done. Shutdown stores it (release) after the sweep
  // and reads it under its mutex; a lane waiting for the sweep acquires it,
  // so the sweep's writes come first.
  std::atomic<bool> shutdown_done{false};
};

}  // namespace chime::detail
