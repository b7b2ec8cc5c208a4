// SPDX-License-Identifier: BSL-1.0
// runtime/timer_state.hpp: the timer state machine. THE one place that
// defines it; docs/state-machine.md mirrors this table and argues the races.
//
// What this is: the encoding of a timer slot's 64-bit atomic state word and
// the pure helpers that build and read it. Who may touch the word: anyone
// holding a TimerId (producers: cancel, reschedule, state), the wheel thread
// (claim for a run, re-file), the workers (finish a run). The transitions are
// made only by the functions named in the table (producer_ops.cpp,
// wheel_thread.cpp, runner.cpp, and runtime_core.cpp for X1); every
// precondition is checked with CHIME_ASSERT in debug and sanitizer builds.
//
// Word layout:   [ generation : 32 ][ version : 24 ][ periodic : 1 ][ waiter : 1 ][ filed : 1 ][ state : 5 ]
// - generation: which use of the slot this is. Bumped when a producer takes
//   the slot for a new timer; a TimerId carries it, so every operation on a
//   stale id fails its compare-and-swap. Generation 0 is never issued.
// - periodic: set by S1 for schedule_every timers and kept by every
//   transition, so cancel can tell a periodic timer from a one-shot without
//   reading a plain field of a slot that might be reused under it.
// - waiter: set (WB) only while a run is in progress (Running or
//   RunningCancelled) by a cancel_and_wait that is about to block on the
//   word's low 32 bits (a futex); the worker's transition that ends the run
//   (F1, F2, F3, F4) clears it and, if it was set, wakes the waiters. No
//   other transition starts from a word with the bit set.
// - filed: set (A1) by the wheel thread when it applies the timer's ADD or
//   REARM (it files the timer), cleared by its claim (W1). It decides who
//   frees the slot of a timer cancelled before it runs: set, the wheel
//   thread (a zombie, reclaimed lazily); clear, the canceller, at once, into
//   its own slot cache (the ADD still queued then finds the timer Cancelled
//   or the slot reused, and does nothing). Kept by every producer transition
//   (R1, R2, C1, C2, K1, R3) and by `with_state`. On a Cancelled word it
//   says the wheel thread still owes the free: the wheel thread clears it
//   when it frees the slot (reclaim: a plain store, as nothing else writes a
//   terminal word; L1/L2: in their CAS), and shutdown's sweep frees exactly
//   the Cancelled words that keep it. At a command's generation, set, it
//   tells the wheel thread the timer is its own, filed and not claimed (a
//   RESCHEDULE re-files only then).
// - version: bumped each time a reschedule publishes a new due time. The wheel
//   thread reads `due` between loading the word and its claim CAS; the CAS
//   fails if a reschedule completed in between (no ABA on Pending).
//
// States and transitions (g = generation, v = version):
//
//  from              to                 who                      atomic op (order)
//  ----------------  -----------------  -----------------------  -------------------------------
//  (free, g-1)       {g,0,Pending}      producer: schedule_*     store (release), then the
//                                       ADD, then a seq_cst fence (pairs with shutdown's)  (S1)
//  (free, g-1)       {g,0,Writing}      a Timer's re-arm: reserve_add, then its ADD (which
//                                       waits while Writing)  store (relaxed)              (S0)
//  {g,0,Writing}     {g,0,Pending}      the same re-arm: S1 as a CAS (release), or back to
//                                       Cancelled (withdraw_reserved_add)  store (release)
//  {g,v,Pending}     {g,v,Writing}      producer: reschedule     CAS (acquire)              (R1)
//  {g,v,Writing}     {g,v+1,Pending}    the same reschedule      CAS (release)              (R2)
//  {g,v,Writing}     {g,v,Cancelling}   producer: cancel         CAS (acq_rel)  -> true     (C2)
//  {g,v,Cancelling}  {g,v,Cancelled}    the reschedule (owner): destroys the task, then
//                                       store (release) -> false                            (R3)
//  {g,v,Pending}     {g,v,Cancelling}   producer: cancel         CAS (acq_rel)  -> true     (C1)
//                                       (or a schedule that saw shutdown after posting its
//                                       ADD, withdrawing its own timer: withdraw_posted)
//  {g,v,Cancelling}  {g,v,Cancelled}    the same cancel: destroys the task, then
//                                       store (release)                                     (K1)
//  {g,v,Pending}     {g,v,Pending,filed}  wheel: applies the ADD/REARM (files it)  CAS (acquire) (A1)
//  {g,v,Pending,filed} {g,v,Handed}     wheel: claim for a run   CAS (acq_rel)              (W1)
//  {g,v,Handed}      {g,v,Cancelled}    producer: cancel         CAS (acq_rel)  -> true     (C4)
//  {g,v,Handed}      {g,v,Running}      worker: the run starts   CAS (acq_rel)              (B1)
//  {g,v,Running}     {g,v,Fired}        worker: one-shot done    exchange (acq_rel)         (F1)
//  {g,v,Running}     {g,v+1,Pending}    worker: periodic re-arm  CAS (acq_rel)              (F2)
//  {g,v,Running}     {g,v,RunningCancelled}  producer: cancel (periodic only) CAS (acq_rel)
//                                       -> true, try_cancel -> running                      (C3)
//  {g,v,RunningCancelled} {g,v,Cancelled}  worker: the run returned  exchange (acq_rel)     (F4)
//  {g,v,Running}     {g,v,Fired}        worker: periodic's last run (shutdown) CAS (acq_rel) (F3)
//  {g,v,R}           {g,v,R|waiter}     cancel_and_wait, R = Running or RunningCancelled:
//                                       CAS (acquire), then futex-wait on the low half     (WB)
//  {g,v,Pending}     {g,v,Cancelled}    shutdown sweep / a schedule whose ADD failed (OOM) CAS (X1)
//  {g,v,Handed}      {g,v,Cancelled}    shutdown(cancel_pending) sweep: a lane's ready run CAS (acq_rel) (X2)
//  {g,v,Pending}     {g,v,Cancelled}    wheel: a destroyed lane's timer, filed or arriving CAS (acq_rel) (L1)
//  {g,v,Handed}      {g,v,Cancelled}    wheel: a destroyed lane's timer it just claimed   CAS (acq_rel) (L2)
//  {g,v,Handed}      {g,v,Cancelled}    the thread destroying a lane: its ready runs      CAS (acq_rel) (L3)
//  {g,v,Handed}      {g,v+1,Writing}    Lane::reschedule_* on the lane's thread, of a run of that lane in
//                                       its ready queue: takes the run back; then R2 (or R3)
//                                       and an ADD re-files it            CAS (acquire)  (R4)
//
// A lane's run (chime::Lane) is Handed while in the lane's ready queue; the
// lane's thread starts it (B1) and ends it (F1-F4) like a worker, so cancel
// wins until the callback starts (C4) whether or not the run is queued.
// X2, L1, L2, L3 each race a producer's cancel with one CAS: one wins.
// On the lane's thread a reschedule wins there too (R4): it takes the run
// back to Writing with a new version, so the Dispatch record left in the
// ready queue no longer holds the claim (holds_claim) and is skipped by
// whoever dequeues it; from Writing it is an ordinary reschedule (R2, or C2
// then R3), except that the timer is not filed (W1 cleared the bit), so R2
// is followed by an ADD, which the wheel thread files (A1) like a new
// timer's. R4 races B1, C4, X2 and L3 on the Handed word: one CAS wins.
//
// Cancel posts no command: a timer cancelled while filed in the wheel stays
// there as a "zombie" until its alarm comes due or the wheel thread sweeps
// zombies (when they exceed a quarter of the filed timers), as Go's runtime
// does with deleted timers. Cancelling a pending timer takes it through
// Cancelling: the canceller (C1, then K1) or the rescheduler that owned it
// (C2, then R3) destroys the task on its own thread, where the task's line is
// warm, so the captures are released when cancel returns and the wheel
// thread, which reclaims the slot later, never touches the task's line.
// A run the wheel claimed (W1) is Handed until the worker starts it (B1), so
// cancel wins until the callback starts (C4); the worker then skips the run.
// A cancel of a periodic timer whose run is in progress (C3) stops its later
// runs; the state stays a run-in-progress state (RunningCancelled, reported
// as `running`) until the run returns (F4), so try_cancel and
// cancel_and_wait can tell "never ran" from "running now".
//
// Waiting (cancel_and_wait): the waiter sets the waiter bit with a CAS (WB)
// from the exact run-in-progress word it read, then sleeps on the futex of
// the word's low 32 bits (state, flags and version: every transition out of
// a run-in-progress state changes them) while they still hold that value.
// The worker's transition ending the run is a read-modify-write, so it is
// ordered with WB on the word: either it reads the bit and wakes the
// waiters after its store, or WB fails (the word changed) and the waiter
// sees the run ended. The waiter then loads the word with acquire, pairing
// with the release half of F1/F2/F3/F4: the run's effects happen-before
// cancel_and_wait returns.
//
// Fired and Cancelled are terminal: the slot goes back to the free list but
// keeps its word, so state(id) reports fired/cancelled until a producer
// reuses the slot (S1 bumps g). Who frees the slot (exactly one party):
// - a one-shot or final run: the worker, after F1/F3;
// - a periodic cancelled while running (C3): the worker, after F4;
// - a run cancelled while handed (C4): the worker, when its B1 fails;
// - a timer cancelled while filed (C1, or C2 then R3, on a word with the
//   filed bit): the wheel thread, when its alarm comes due or at a zombie
//   sweep, whichever is first (the task was already destroyed, by K1 or R3);
//   once the wheel thread has stopped: the shutdown sweep;
// - a timer cancelled before the wheel filed it (the filed bit clear at C1
//   or C2): the canceller after K1, or the rescheduler after R3, into its
//   own slot cache. Its ADD, still queued, finds Cancelled (A1 is a CAS from
//   Pending: it cannot succeed any more) or a newer generation, and does
//   nothing: the wheel thread never touches that slot again. This keeps a
//   timer cancelled soon after it was scheduled (most timeouts) on its
//   producer's core, and its slot warm for the producer's next schedule.
//
// Who may write which field:
// - `due`: the producer before S1; the owner of Writing (R1 or R4..R2); the worker
//   in Running before F2. Nobody else, so whoever wins R1/W1/F2 sees a stable
//   value.
// - `task` and the side record (`period_ns`, `on_missed`, the lane): the
//   producer before S1; read-only until the slot is freed; the freeing
//   party resets the task (timer_slab.hpp has every field of the slot).
// - the filed bit on a Cancelled word: the wheel thread owes the slot's
//   free; `reclaim` (or shutdown's sweep) clears it as it frees the slot.
#pragma once

#include <cstdint>

namespace chime::detail {

enum class SlotState : std::uint8_t {
  free = 0,
  pending = 1,
  writing = 2,
  cancelling = 3,  // cancelled; the canceller (or rescheduler) is destroying the task (C1/C2 -> K1/R3)
  handed = 4,      // claimed by the wheel thread for a run, not started (W1)
  running = 5,     // the callback started (B1)
  fired = 6,
  cancelled = 7,
  running_cancelled = 8,  // a periodic timer cancelled while its run is in progress (C3); F4 ends it
};

struct StateWord {
  static constexpr std::uint64_t kStateMask = 0x1F;
  static constexpr std::uint64_t kFiledBit = 0x20;
  static constexpr std::uint64_t kWaiterBit = 0x40;
  static constexpr std::uint64_t kPeriodicBit = 0x80;
  static constexpr unsigned kVersionShift = 8;
  static constexpr std::uint64_t kVersionMask = 0xFFFFFFull << kVersionShift;
  static constexpr unsigned kGenerationShift = 32;

  static constexpr std::uint64_t make(std::uint32_t generation, std::uint32_t version, SlotState s,
                                      bool periodic = false) noexcept {
    return (std::uint64_t{generation} << kGenerationShift) |
           ((std::uint64_t{version} << kVersionShift) & kVersionMask) | (periodic ? kPeriodicBit : 0) |
           static_cast<std::uint64_t>(s);
  }
  static constexpr SlotState state(std::uint64_t w) noexcept { return static_cast<SlotState>(w & kStateMask); }
  static constexpr bool periodic(std::uint64_t w) noexcept { return (w & kPeriodicBit) != 0; }
  static constexpr bool has_waiter(std::uint64_t w) noexcept { return (w & kWaiterBit) != 0; }
  // The wheel thread has filed this generation and not claimed it (A1..W1).
  static constexpr bool filed(std::uint64_t w) noexcept { return (w & kFiledBit) != 0; }
  // A run is in progress (the callback started and has not returned).
  static constexpr bool run_in_progress(std::uint64_t w) noexcept {
    return state(w) == SlotState::running || state(w) == SlotState::running_cancelled;
  }
  static constexpr std::uint32_t generation(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> kGenerationShift);
  }
  static constexpr std::uint32_t version(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>((w & kVersionMask) >> kVersionShift);
  }
  // The same word in state s, without the waiter bit (every transition but
  // C3 leaves a state that nobody waits on, or starts from one); the filed
  // bit is kept.
  static constexpr std::uint64_t with_state(std::uint64_t w, SlotState s) noexcept {
    return (w & ~(kStateMask | kWaiterBit)) | static_cast<std::uint64_t>(s);
  }
  // True iff w is still the claim a Dispatch record was made for (W1 at
  // `generation` and `version`): false once a reschedule took the run back
  // (R4 bumps the version), whatever happened to the timer since. Across 2^24
  // version bumps of one timer while its stale record waits in a lane's
  // ready queue the answer would be wrong (lane.hpp, Not guaranteed).
  static constexpr bool holds_claim(std::uint64_t w, std::uint32_t generation, std::uint32_t version) noexcept {
    return StateWord::generation(w) == generation && StateWord::version(w) == version;
  }
  // W1: claimed for a run, so no longer filed.
  static constexpr std::uint64_t claimed(std::uint64_t w) noexcept {
    return with_state(w, SlotState::handed) & ~kFiledBit;
  }
  // A Cancelled word whose slot is being freed by the party that owed it
  // (reclaim, L1/L2, shutdown's sweep): the filed bit cleared.
  static constexpr std::uint64_t unfiled(std::uint64_t w) noexcept { return w & ~kFiledBit; }
  // The low 32 bits: what a cancel_and_wait futex-waits on (little-endian:
  // the half at the word's address).
  static constexpr std::uint32_t low_half(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w); }
  // Same generation, version + 1 (wrapping inside its 24 bits), state s;
  // the filed bit kept (R2 moves the due of a timer that may be filed).
  static constexpr std::uint64_t bumped(std::uint64_t w, SlotState s) noexcept {
    return make(generation(w), version(w) + 1, s, periodic(w)) | (w & kFiledBit);
  }
  // The generation the next timer in this slot gets: never 0.
  static constexpr std::uint32_t next_generation(std::uint64_t w) noexcept {
    const std::uint32_t g = generation(w) + 1;
    return g == 0 ? 1 : g;
  }
  // True iff generation g (not w's) was issued in this slot before w's: the
  // slot's generations run from next_generation(initial) (its first timer;
  // `initial` is a fresh slot's, timer_slab.hpp) up to w's, wrapping past
  // 2^32 - 1 (skipping 0), so g is older iff its distance from the first is
  // smaller than w's. A slot never used (free) issued none. Across 2^32
  // reuses of the slot the answer is that of the last lap (runtime.hpp, Not
  // guaranteed).
  static constexpr bool issued_before(std::uint32_t g, std::uint64_t w, std::uint32_t initial) noexcept {
    if (g == 0 || state(w) == SlotState::free) return false;
    const std::uint32_t first = next_generation(std::uint64_t{initial} << kGenerationShift);
    return static_cast<std::uint32_t>(g - first) < static_cast<std::uint32_t>(generation(w) - first);
  }
};

static_assert(StateWord::state(StateWord::make(7, 3, SlotState::running)) == SlotState::running);
static_assert(StateWord::state(StateWord::make(7, 3, SlotState::running_cancelled) | StateWord::kWaiterBit) ==
              SlotState::running_cancelled);
static_assert(!StateWord::has_waiter(
    StateWord::with_state(StateWord::make(7, 3, SlotState::running) | StateWord::kWaiterBit, SlotState::fired)));
static_assert(StateWord::generation(StateWord::make(7, 3, SlotState::running)) == 7);
static_assert(StateWord::version(StateWord::bumped(StateWord::make(7, 0xFFFFFF, SlotState::pending),
                                                   SlotState::pending)) == 0,
              "the version wraps inside its field and never carries into the generation");
static_assert(StateWord::generation(StateWord::bumped(StateWord::make(7, 0xFFFFFF, SlotState::pending),
                                                      SlotState::pending)) == 7);
static_assert(StateWord::periodic(StateWord::with_state(StateWord::make(7, 1, SlotState::pending, true),
                                                        SlotState::running)));
static_assert(StateWord::filed(StateWord::bumped(StateWord::make(7, 1, SlotState::writing) | StateWord::kFiledBit,
                                                 SlotState::pending)),
              "R2 keeps the filed bit");
static_assert(StateWord::filed(StateWord::with_state(StateWord::make(7, 1, SlotState::pending) | StateWord::kFiledBit,
                                                     SlotState::cancelling)),
              "C1 keeps the filed bit");
static_assert(!StateWord::filed(StateWord::claimed(StateWord::make(7, 1, SlotState::pending) | StateWord::kFiledBit)));
static_assert(StateWord::unfiled(StateWord::make(7, 1, SlotState::cancelled) | StateWord::kFiledBit) ==
              StateWord::make(7, 1, SlotState::cancelled));
static_assert(!StateWord::holds_claim(StateWord::bumped(StateWord::make(7, 1, SlotState::handed), SlotState::writing),
                                      7, 1),
              "R4 takes the claim away from the record in the ready queue");
static_assert(StateWord::state(StateWord::make(7, 1, SlotState::running_cancelled) | StateWord::kFiledBit) ==
              SlotState::running_cancelled);
static_assert(StateWord::issued_before(6, StateWord::make(7, 0, SlotState::pending), 0) &&
              !StateWord::issued_before(8, StateWord::make(7, 0, SlotState::fired), 0) &&
              !StateWord::issued_before(0, StateWord::make(7, 0, SlotState::fired), 0));
static_assert(StateWord::issued_before(0xFFFFFFFFu, StateWord::make(3, 0, SlotState::fired), 0xFFFFFFF0u) &&
                  !StateWord::issued_before(5, StateWord::make(3, 0, SlotState::fired), 0xFFFFFFF0u),
              "generations wrap past 2^32 - 1: older is judged from the slot's first generation");

}  // namespace chime::detail
