// SPDX-License-Identifier: BSL-1.0
// runtime/wheel_thread_invariants.cpp: WheelThread::check_on_wheel, the wheel
// thread's half of Runtime::check_invariants, the runtime's own structural
// check (for tests and fuzzing).
//
// The caller (RuntimeCore::check_invariants, runtime_core.cpp) posts a
// CHECK request to each shard in turn; its wheel thread
// runs check_on_wheel between two commands of a batch (wheel_thread.cpp,
// apply_commands), where its own structures are whole: no alarm is between
// the wheel and a list.
// What it checks holds however other threads race it, because the facts it
// compares change only on the wheel thread:
// - the filed bit is set only by the wheel thread (A1) and cleared only by
//   it (W1); a filed slot is freed only by it (reclaim), so a producer
//   cannot reuse a slot that the wheel or the overdue list holds;
// - producers move a filed timer only among Pending, Writing, Cancelling
//   and Cancelled (R1, R2, C1, C2, K1, R3), all of which keep the bit.
// - a slot's shard is written only while no wheel thread holds it (by its
//   scheduler, before S1), so a shard's own timers read as its own.
// Not checked: counts published after a transition (a shard's seam.lazy_cancels
// is added after K1's store, so the wheel thread may reclaim a zombie
// before it is counted), which agree only once every call has returned.
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "requests.hpp"
#include "wheel_thread.hpp"

namespace chime::detail {

namespace {
const char* state_name(SlotState s) {
  // In SlotState's order (timer_state.hpp).
  static constexpr const char* kNames[] = {"Free",    "Pending", "Writing",   "Cancelling",      "Handed",
                                           "Running", "Fired",   "Cancelled", "RunningCancelled"};
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}
}  // namespace

std::string WheelThread::check_on_wheel() {
  try {
    wt().wheel.check_invariants();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  const std::uint32_t extent = slab_.extent();
  // Where the wheel thread holds each slot: 0 nowhere, 1 the wheel, 2 the overdue list (or the ready heap).
  std::vector<std::uint8_t> held(extent, 0);
  std::string failure;
  auto check_held = [&](std::uint32_t index, std::uint8_t where, bool alarm_matches) {
    const char* place = where == 1 ? "the wheel" : "the overdue list";
    auto holds = [&] { return std::string(place) + " holds slot " + std::to_string(index); };  // on failure only
    if (index >= extent) {
      failure = holds() + ", beyond the slab's extent " + std::to_string(extent);
      return;
    }
    if (held[index] != 0) {
      failure = "slot " + std::to_string(index) + " is held twice (by " + place + " and by " +
                (held[index] == 1 ? "the wheel" : "the overdue list") + ")";
      return;
    }
    held[index] = where;
    const TimerSlot& slot = slab_[index];
    // acquire: as the wheel thread's other loads of a word it acts on.
    const std::uint64_t w = slot.word.load(std::memory_order_acquire);
    const SlotState s = StateWord::state(w);
    const unsigned shard = slot.shard.load(std::memory_order_relaxed);
    if (shard != seam.index) {
      failure = holds() + " of shard " + std::to_string(shard);
    } else if (!StateWord::filed(w)) {
      failure = holds() + " whose filed bit is clear (" + state_name(s) + ")";
    } else if (s != SlotState::pending && s != SlotState::writing && s != SlotState::cancelling &&
               s != SlotState::cancelled) {
      failure = holds() + " in state " + state_name(s);
    } else if (!alarm_matches) {
      failure = holds() + " but the slot's alarm is " + (where == 1 ? "not filed" : "filed");
    }
  };
  wt().wheel.for_each([&](std::uint32_t index) {
    if (!failure.empty()) return;
    check_held(index, 1, index < extent && slab_[index].alarm.filed());
  });
  for (const std::uint32_t index : wt().overdue) {
    if (!failure.empty()) break;
    check_held(index, 2, index < extent && !slab_[index].alarm.filed());
  }
  // The ready heap of a ManualClock holds timers as the overdue list does.
  for (const WheelThreadState::ManualReady& r : wt().manual_ready) {
    if (!failure.empty()) break;
    check_held(r.index, 2, r.index < extent && !slab_[r.index].alarm.filed());
  }
  if (!failure.empty()) return failure;
  // None lost: a slot the wheel thread filed and that is not cancelled
  // (Pending or Writing, with the filed bit) is held by the wheel or the
  // overdue list. A slot beyond `extent` read here was made after the
  // load: not filed by this pass. Other shards' slots are theirs to hold.
  for (std::uint32_t index = 0; index < extent; ++index) {
    const std::uint64_t w = slab_[index].word.load(std::memory_order_acquire);
    const SlotState s = StateWord::state(w);
    if (StateWord::filed(w) && (s == SlotState::pending || s == SlotState::writing) && held[index] == 0 &&
        slab_[index].shard.load(std::memory_order_relaxed) == seam.index) {
      return "slot " + std::to_string(index) + " (generation " + std::to_string(StateWord::generation(w)) + ", " +
             state_name(s) + ") is filed but neither in the wheel nor on the overdue list: its timer is lost";
    }
  }
  return {};
}

}  // namespace chime::detail

namespace chime {}  // namespace chime
