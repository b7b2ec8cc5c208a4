// SPDX-License-Identifier: BSL-1.0
// runtime/compact_task.hpp: a Task's callable held in the timer's own
// record, in fewer bytes than a Task.
//
// What this is: CompactTask<N> holds what a chime::Task holds (its Ops and
// the object in its storage) in an N-byte buffer aligned to 8. `adopt`
// moves a Task's callable in when the object the Task stores fits: a
// callable of at most N bytes stored inline, or the pointer of one the
// Task allocated (always 8 bytes). A callable that does not fit (more
// than N bytes of captures, stored inline in the Task, or aligned to more
// than 8) stays in the Task, and the caller keeps it elsewhere
// (timer_slab.hpp: the slot's side record).
//
// Who may touch it: as the Task it came from (timer_state.hpp: the
// scheduling producer writes it before S1; the worker or lane that runs the
// timer reads it; the party that frees the slot resets it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "chime/task.hpp"

namespace chime::detail {

template <std::size_t Capacity>
class CompactTask {
 public:
  static constexpr std::size_t capacity = Capacity;

  CompactTask() noexcept = default;
  CompactTask(const CompactTask&) = delete;
  CompactTask& operator=(const CompactTask&) = delete;
  ~CompactTask() { reset(); }

  // True iff a Task's stored object of this size and alignment fits.
  static constexpr bool fits(std::size_t size, std::size_t align) noexcept {
    return size <= Capacity && align <= kAlign;
  }

  // True iff t's callable would be taken by adopt.
  static bool fits(const Task& t) noexcept {
    return t.ops_ == nullptr || fits(t.ops_->stored_size, t.ops_->stored_align);
  }

  // Takes t's callable if it fits (t is left empty) and returns true; else
  // leaves t as it was and returns false. This must be empty. An empty t is
  // taken (this stays empty).
  bool adopt(Task& t) noexcept {
    if (t.ops_ == nullptr) return true;
    if (!fits(t.ops_->stored_size, t.ops_->stored_align)) return false;
    t.ops_->move(t.storage_, storage_);
    ops_ = t.ops_;
    t.ops_ = nullptr;
    return true;
  }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  void operator()(const Firing& firing) {
    if (ops_ != nullptr) ops_->invoke(storage_, firing);
  }

  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

 private:
  static constexpr std::size_t kAlign = 8;
  const Task::Ops* ops_ = nullptr;
  alignas(kAlign) unsigned char storage_[Capacity];
};

}  // namespace chime::detail
