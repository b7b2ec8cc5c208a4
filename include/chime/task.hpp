// SPDX-License-Identifier: BSL-1.0
// chime/task.hpp: the callable a timer runs, and what it is told when it runs.
//
// Contract:
// - `Task` is a move-only, type-erased callable, constructed from anything
//   invocable as `void()` or `void(const chime::Firing&)`. It is invoked with
//   the `Firing` of each run (a periodic timer's Task runs many times).
// - A callable with sizeof <= Task::inline_size (48), alignof <=
//   alignof(std::max_align_t) and a nothrow move constructor is stored inline,
//   without allocation; anything else is allocated once, at construction.
// - A default-constructed or moved-from Task is empty: `explicit operator
//   bool` is false and invoking it is a no-op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "chime/time.hpp"

namespace chime {

class TimerId;

namespace detail {
template <std::size_t Capacity>
class CompactTask;  // the runtime's timer record holds a Task's callable in fewer bytes (runtime/compact_task.hpp)
}  // namespace detail

// A timer's identity: {slot, generation, runtime}. Default-constructed is
// invalid and never names a timer; an id whose slot was reused is detected
// as stale (the generation); an id issued by another Runtime is never taken
// for one of this runtime's timers (the runtime tag: a process-wide counter,
// 32 bits, so no two live runtimes share one until 2^32 - 1 runtimes have
// been created).
//
// 12 bytes, trivially copyable: `std::atomic<TimerId>` works (load, store,
// compare_exchange), but is not lock-free. GCC and Clang compile its
// operations to calls into libatomic, which `chime::runtime` links for you
// (PUBLIC, through the CMake package and chime.pc: cmake/ChimeLibatomic.cmake);
// a program that uses this header without linking chime::runtime must add
// -latomic itself.
class TimerId {
 public:
  constexpr TimerId() noexcept = default;
  constexpr TimerId(std::uint32_t slot, std::uint32_t generation, std::uint32_t runtime = 0) noexcept
      : slot_(slot), generation_(generation), runtime_(runtime) {}
  constexpr explicit operator bool() const noexcept { return generation_ != 0; }
  friend constexpr bool operator==(TimerId, TimerId) noexcept = default;
  constexpr std::uint32_t slot() const noexcept { return slot_; }
  constexpr std::uint32_t generation() const noexcept { return generation_; }
  // The tag of the Runtime that issued it (0: none, never a runtime's tag).
  constexpr std::uint32_t runtime() const noexcept { return runtime_; }

 private:
  std::uint32_t slot_ = 0;
  std::uint32_t generation_ = 0;
  std::uint32_t runtime_ = 0;
};

// What a run is told about itself.
struct Firing {
  TimerId id;
  TimePoint due;            // the due time of this run
  TimePoint fired_at;       // the runtime clock's time of the wheel advance that dispatched it
  std::uint64_t missed = 0; // periodic, Missed::skip: runs coalesced into this one
};

class Task;

// What a Task is made from: a callable invocable as `void()` or as
// `void(const chime::Firing&)` (a result is discarded), such as
// `[] { ... }` or `[](const chime::Firing& f) { ... }`. A lambda or function
// object taking other arguments fails to compile with a static_assert that
// says so.
template <class F>
concept TaskCallable = !std::is_same_v<std::decay_t<F>, Task> &&
                       (std::is_invocable_v<std::decay_t<F>&> || std::is_invocable_v<std::decay_t<F>&, const Firing&>);

// A lambda or function object (one call operator) that is not TaskCallable:
// what the static_assert in Task's constructor explains.
template <class F>
concept WrongTaskCallable =
    !std::is_same_v<std::decay_t<F>, Task> && !TaskCallable<F> && std::is_class_v<std::decay_t<F>> && requires {
  &std::decay_t<F>::operator();
};

class Task {
 public:
  static constexpr std::size_t inline_size = 48;

  Task() noexcept = default;

  // A lambda or function object with one call operator taking other
  // arguments: a clear error instead of "could not convert".
  template <WrongTaskCallable F>
  Task(F&&) {  // NOLINT(google-explicit-constructor)
    static_assert(TaskCallable<F>,
                  "chime::Task is made from a callable invocable as void() or as void(const chime::Firing&); "
                  "this one takes other arguments");
  }

  template <TaskCallable F, class D = std::decay_t<F>>
  Task(F&& f) {  // NOLINT(google-explicit-constructor): a Task is made from any callable
    if constexpr (stored_inline<D>) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      ops_ = &inline_ops<D>;
    } else {
      ::new (static_cast<void*>(storage_)) D*(new D(std::forward<F>(f)));
      ops_ = &heap_ops<D>;
    }
  }

  Task(Task&& other) noexcept : ops_(other.ops_) {
    if (ops_ != nullptr) {
      ops_->move(other.storage_, storage_);
      other.ops_ = nullptr;
    }
  }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      if (other.ops_ != nullptr) {
        other.ops_->move(other.storage_, storage_);
        ops_ = other.ops_;
        other.ops_ = nullptr;
      }
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  // True iff a callable of type F is stored without allocation.
  template <class F>
  static constexpr bool stored_inline = sizeof(F) <= inline_size && alignof(F) <= alignof(std::max_align_t) &&
                                        std::is_nothrow_move_constructible_v<F>;

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
  template <std::size_t Capacity>
  friend class detail::CompactTask;

  // What `storage_` holds and how to use it. `stored_size` and
  // `stored_align` describe the object in `storage_` (the callable itself,
  // or the pointer to it), so it can be moved into any buffer that fits.
  struct Ops {
    void (*invoke)(void*, const Firing&);
    void (*move)(void* from, void* to) noexcept;
    void (*destroy)(void*) noexcept;
    std::size_t stored_size;
    std::size_t stored_align;
  };

  template <class D>
  static void call(D& f, const Firing& firing) {
    if constexpr (std::is_invocable_v<D&, const Firing&>) {
      std::invoke(f, firing);
    } else {
      std::invoke(f);
    }
  }

  template <class D>
  static constexpr Ops inline_ops{
      [](void* p, const Firing& firing) { call(*std::launder(static_cast<D*>(p)), firing); },
      [](void* from, void* to) noexcept {
        D* f = std::launder(static_cast<D*>(from));
        ::new (to) D(std::move(*f));
        f->~D();
      },
      [](void* p) noexcept { std::launder(static_cast<D*>(p))->~D(); },
      sizeof(D),
      alignof(D),
  };

  template <class D>
  static constexpr Ops heap_ops{
      [](void* p, const Firing& firing) { call(**std::launder(static_cast<D**>(p)), firing); },
      [](void* from, void* to) noexcept { ::new (to) D*(*std::launder(static_cast<D**>(from))); },
      [](void* p) noexcept { delete *std::launder(static_cast<D**>(p)); },
      sizeof(D*),
      alignof(D*),
  };

  alignas(std::max_align_t) unsigned char storage_[inline_size];
  const Ops* ops_ = nullptr;
};

}  // namespace chime
