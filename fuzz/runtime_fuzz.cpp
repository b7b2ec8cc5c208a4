// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz.cpp: libFuzzer target that drives chime::Runtime with a
// ManualClock from the fuzzer's bytes, and checks every outcome against a
// model. Most inputs use workers = 0 (callbacks run on the wheel thread, in
// the batches the wheel thread hands over); some use 1 or 2 workers, so that
// cancel_and_wait waits for a run on another thread. It is linked against
// runtime sources built with CHIME_ZOMBIE_SWEEP_MIN=2 (fuzz/CMakeLists.txt):
// cancels of filed timers leave zombies that the wheel reclaims lazily, and
// two of them already trigger a sweep, so the lazy-cancel paths (ADD no-op,
// reclaim at the alarm, sweep, slot reuse after a sweep) are all reached by
// small inputs.
//
// Input layout (every read past the end is 0, so any byte string is valid):
//   byte 0   precision, from {1, 3, 1000, 1000000} ns (bits 0-1); workers (bits 2-4: 0, or 1-2 when bits 2-3 are set);
//            with no workers, bit 4 set means two shards (RuntimeOptions::shards), else one;
//            lane mode when there are no workers and bits 5-7 are all set: every timer is scheduled
//            through a chime::Lane that the fuzzing thread made, so only its flushes (and, after
//            shutdown(fire_pending), a run_ready) run callbacks, on the fuzzing thread
//   byte 1   level bits, from kBitSets (tiny ones make the due-time range a few intervals)
//   byte 2   start of the clock: a selector byte and its operand (see pick_start)
//   next     max_pending (0 = unbounded, else 1..8), 0x80 unused, and
//            RuntimeOptions::slow_run (0x40: 0 ns, every run is slow; else the default 10 ms)
//   then     operations, at most kMaxOps: an op byte and its operand bytes (see step()).
//
// The model: the ManualClock rule (design.md, "Clocks"). Callbacks run only
// inside flush() (and drain() and shutdown(fire_pending), which begin with
// one; the harness flushes before them itself), never between calls. The
// clock moves only in the "advance + flush" operation. A flush at clock c
// runs every pending timer whose due is at or before its reading
// W = c (clamped to the wheel's last interval, and frozen by shutdown),
// exactly once, with Firing::fired_at = W; every other timer stays pending
// and has not run: cancel and reschedule must return true, try_cancel
// `cancelled`, state() pending. Periodic timers at a flush with reading W:
// Missed::skip and delay coalesce the runs due at or before W into one
// (due = the latest, missed = the others); catch_up runs each in order at
// that flush. The next run after a skip / catch_up run is due + period;
// after a delay run, the clock's time when the run returned + period (the
// ManualClock cannot move during a run).
// Inside each callback the harness checks state(self) == running and that
// fired_at is the flush's reading, at or after the due, except in drain()
// and shutdown(fire_pending), which run timers early by contract. Callbacks
// may cancel themselves (cancel, try_cancel, cancel_and_wait: `running`,
// without waiting, and state(self) stays `running` until the run returns),
// throw, call flush/drain/shutdown (std::logic_error), or sleep (so that the
// harness's cancel_and_wait finds a run in progress and must return only
// after it ended). The harness checks try_cancel / cancel_and_wait against
// the model (cancelled / running / done / unknown), the due-time range
// (std::out_of_range exactly at the limit the wheel guarantees), max_pending
// (CapacityError when the model says the runtime must be full, success when
// it cannot be), drain()'s count, stats() after each flush (run_time's
// percentiles ordered, slow_runs and on_slow_run), on_error for throwing
// callbacks, stale and forged TimerIds (forged with this runtime's tag to
// alias, with another tag, tag 0, or an id from a second Runtime, which must
// be unknown everywhere), and at the end shutdown()'s count of pending
// timers and the behaviour after shutdown.
//
// No input is skipped for a known bug: the fixed findings' inputs replay
// as fuzz/corpus/runtime/regression-* (docs/fuzzing.md, "Findings"). Each input is
// bounded: kMaxOps operations, kMaxRuns callback runs.
//
// Layout: this file holds the operation table (step) and the
// entry point; runtime_fuzz/harness.hpp declares the harness,
// runtime_fuzz/setup.hpp decodes the configuration; each family of
// operations is one file of runtime_fuzz/ (model, decode, schedule_ops,
// cancel_ops, flush_ops, observe_ops, runs). fuzz/runtime_sim_fuzz.cpp
// drives the same harness on the deterministic simulation.
#include "runtime_fuzz/harness.hpp"

#include "runtime_fuzz/cancel_ops.hpp"
#include "runtime_fuzz/decode.hpp"
#include "runtime_fuzz/flush_ops.hpp"
#include "runtime_fuzz/model.hpp"
#include "runtime_fuzz/observe_ops.hpp"
#include "runtime_fuzz/runs.hpp"
#include "runtime_fuzz/schedule_ops.hpp"
#include "runtime_fuzz/setup.hpp"

namespace chime_fuzz::runtime_target {

void RuntimeFuzz::run() {
  if (!rt_) return;  // refused at construction (checked there)
  for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) step(in_.u8());
  if (!stopped_) op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending : chime::ShutdownMode::cancel_pending);
  after_shutdown_checks();
}

void RuntimeFuzz::step(std::uint8_t op) {
  process_runs();
  switch (op % 16) {
    case 0:
    case 1: return op_schedule_at();
    case 2: return op_schedule_after();
    case 3: return op_schedule_every();
    case 4: return op_cancel();
    case 5: return op_reschedule(false);
    case 6: return op_reschedule(true);
    case 7:
    case 8:
    case 9: return op_advance_and_flush();
    case 10: return op_flush("flush");
    case 11: return op_drain();
    case 12: return op_state();
    case 13: return op_stats();
    case 14: return op_forged_id();
    default:
      // Rare: shutdown in the middle; the remaining operations check the behaviour after it.
      if (in_.u8() < 32) return op_shutdown(in_.flag() ? chime::ShutdownMode::fire_pending
                                                       : chime::ShutdownMode::cancel_pending);
      return op_state();
  }
}

void Callback::operator()(const chime::Firing& f) const { h->on_run(tag, f); }

}  // namespace chime_fuzz::runtime_target

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  chime_fuzz::Trace::get().reset();
  chime_fuzz::Input in(data, size);
  try {
    chime_fuzz::runtime_target::RuntimeFuzz(in).run();
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: " << e.what());
  }
  return 0;
}
