// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_sim_fuzz.cpp: libFuzzer target that drives chime::Runtime in
// the deterministic simulation (runtime/simulation.hpp, a test seam: no
// wheel thread, no workers; the operations run the wheel thread's passes)
// and checks it against the model of the threaded target.
//
// What it adds to fuzz/runtime_fuzz.cpp: the fuzzer chooses the order of
// producer operations, wheel-thread passes and clock moves, including a
// clock that moves with no flush and passes that run between any two calls
// (they apply commands and run nothing: on a ManualClock only a flush runs
// timers). With no thread the run is a function of the input (a failing
// input replays exactly), and an input costs microseconds instead of thread
// starts and futex round trips.
//
// What it does not cover: the races and memory orders of the real threads
// (runtime/simulation.hpp says which); the threaded target, the TSan stress
// tests and the SPIN model (docs/model-check.md) do.
//
// Input layout: as fuzz/runtime_fuzz.cpp's (the configuration bytes, then
// operations), except that workers are always 0 and the operation table is
// the one below. The harness (runtime_fuzz/) is the threaded target's.
#include "runtime_fuzz/harness.hpp"

#include "runtime_fuzz/cancel_ops.hpp"
#include "runtime_fuzz/decode.hpp"
#include "runtime_fuzz/flush_ops.hpp"
#include "runtime_fuzz/model.hpp"
#include "runtime_fuzz/observe_ops.hpp"
#include "runtime_fuzz/runs.hpp"
#include "runtime_fuzz/schedule_ops.hpp"
#include "runtime_fuzz/setup.hpp"
#include "runtime_fuzz/sim_ops.hpp"

namespace chime_fuzz::runtime_target {

void RuntimeFuzz::run() {
  if (!rt_) return;  // refused at construction (checked there)
  for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) step(in_.u8());
  if (!stopped_) op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending : chime::ShutdownMode::cancel_pending);
  after_shutdown_checks();
}

void RuntimeFuzz::step(std::uint8_t op) {
  process_runs();
  switch (op % 20) {
    case 0:
    case 1:
      return op_schedule_at();
    case 2:
      return op_schedule_after();
    case 3:
      return op_schedule_every();
    case 4:
    case 5:
      return op_cancel();
    case 6:
      return op_reschedule(false);
    case 7:
      return op_reschedule(true);
    case 8:
    case 9:
      return op_pass(false);
    case 10:
      return op_pass(true);
    case 11:
    case 12:
      return op_move_clock();
    case 13:
      return op_advance_and_flush();
    case 14:
      return op_flush("flush");
    case 15:
      return lane_mode_ ? op_run_ready() : op_pass(false);
    case 16:
      return op_drain();
    case 17:
      return op_state();
    case 18:
      return in_.flag() ? op_stats() : op_forged_id();
    default:
      // Rare: shutdown in the middle; the remaining operations check the behaviour after it.
      if (in_.u8() < 32)
        return op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending : chime::ShutdownMode::cancel_pending);
      return op_state();
  }
}

void Callback::operator()(const chime::Firing& f) const { h->on_run(tag, f); }

}  // namespace chime_fuzz::runtime_target

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  chime_fuzz::Trace::get().reset();
  chime_fuzz::Input in(data, size);
  try {
    chime_fuzz::runtime_target::RuntimeFuzz(in, /*simulated=*/true).run();
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: " << e.what());
  }
  return 0;
}
