// SPDX-License-Identifier: BSL-1.0
// chime::Task (task.hpp): a move-only type-erased callable
// made from anything invocable as void() or void(const Firing&); callables of
// sizeof <= 48, alignof <= alignof(max_align_t) with a nothrow move are stored
// inline (allocation counts are pinned in runtime_allocation_test.cpp); a
// default or moved-from Task is empty and invoking it does nothing; the
// callable is destroyed exactly once. Also TimerId basics, and std::atomic<TimerId>
// (it links with chime::runtime alone).

#include "runtime_test_support.hpp"

#include <chime/runtime.hpp>
#include <chime/task.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

namespace {

using namespace chime_test;
using chime::Firing;
using chime::Task;
using chime::TimerId;

template <std::size_t N>
struct Bytes {
  unsigned char data[N] = {};
  void operator()() const {}
};

struct ThrowingMove {
  ThrowingMove() = default;
  ThrowingMove(const ThrowingMove&) = default;
  ThrowingMove(ThrowingMove&&) noexcept(false) {}
  void operator()() const {}
};

struct alignas(2 * alignof(std::max_align_t)) OverAligned {
  void operator()() const {}
};

// A 48-byte nothrow-movable callable is stored inline; 49 bytes, a throwing move or over-alignment are not.
TEST(RuntimeTask, inline_storage_threshold_is_48_bytes) {
  static_assert(Task::inline_size == 48);
  static_assert(sizeof(Bytes<48>) == 48 && sizeof(Bytes<49>) == 49);
  static_assert(Task::stored_inline<Bytes<1>>);
  static_assert(Task::stored_inline<Bytes<48>>);
  static_assert(!Task::stored_inline<Bytes<49>>);
  static_assert(!Task::stored_inline<ThrowingMove>);
  static_assert(!Task::stored_inline<OverAligned>);
  // A lambda capturing 48 bytes is inline; 49 bytes is not.
  auto l48 = [a = Bytes<40>{}, p = static_cast<void*>(nullptr)] { (void)a; (void)p; };
  auto l49 = [a = Bytes<49>{}] { (void)a; };
  static_assert(sizeof(l48) == 48);
  static_assert(Task::stored_inline<decltype(l48)>);
  static_assert(!Task::stored_inline<decltype(l49)>);
  SUCCEED();
}

// Task is move-only and constructible only from callables invocable as void() or void(const Firing&).
TEST(RuntimeTask, task_is_move_only_and_accepts_both_signatures) {
  static_assert(!std::is_copy_constructible_v<Task>);
  static_assert(!std::is_copy_assignable_v<Task>);
  static_assert(std::is_nothrow_move_constructible_v<Task>);
  static_assert(std::is_nothrow_move_assignable_v<Task>);
  static_assert(std::is_constructible_v<Task, void (*)()>);
  static_assert(std::is_constructible_v<Task, void (*)(const Firing&)>);
  static_assert(!std::is_constructible_v<Task, int>);
  static_assert(!std::is_constructible_v<Task, void (*)(int, int)>);
  SUCCEED();
}

// A void() callable runs; a void(const Firing&) callable receives the Firing it is invoked with.
TEST(RuntimeTask, invokes_void_and_firing_callables) {
  int plain = 0;
  Task a([&plain] { ++plain; });
  a(Firing{});
  a(Firing{});
  EXPECT_EQ(plain, 2);

  Firing seen{};
  Task b([&seen](const Firing& f) { seen = f; });
  const Firing given{TimerId{3, 9}, at(7ms), at(8ms), 5};
  b(given);
  EXPECT_EQ(seen.id, given.id);
  EXPECT_EQ(seen.due, given.due);
  EXPECT_EQ(seen.fired_at, given.fired_at);
  EXPECT_EQ(seen.missed, 5u);
}

// Move-only captures (std::unique_ptr) work, inline and on the heap, and survive moves of the Task.
TEST(RuntimeTask, move_only_captures_work) {
  int out = 0;
  Task small([p = std::make_unique<int>(7), &out] { out = *p; });
  Task moved = std::move(small);
  moved(Firing{});
  EXPECT_EQ(out, 7);

  Task big([p = std::make_unique<int>(9), pad = Bytes<64>{}, &out] {
    (void)pad;
    out = *p;
  });
  Task moved_big(std::move(big));
  moved_big(Firing{});
  EXPECT_EQ(out, 9);
}

// A default or moved-from Task is empty, and invoking it is a no-op.
TEST(RuntimeTask, default_and_moved_from_tasks_are_empty) {
  Task empty;
  EXPECT_FALSE(empty);
  empty(Firing{});  // no-op

  int calls = 0;
  Task full([&calls] { ++calls; });
  EXPECT_TRUE(full);
  Task other = std::move(full);
  EXPECT_FALSE(full);  // NOLINT(bugprone-use-after-move): moved-from is specified empty
  full(Firing{});      // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(calls, 0);
  other(Firing{});
  EXPECT_EQ(calls, 1);

  Task big([pad = Bytes<100>{}, &calls] {
    (void)pad;
    ++calls;
  });
  Task big_other;
  big_other = std::move(big);
  EXPECT_FALSE(big);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(big_other);
  big_other(Firing{});
  EXPECT_EQ(calls, 2);
}

// The callable is destroyed exactly once: by reset(), move-assignment over it, or the Task's destructor.
TEST(RuntimeTask, callable_destroyed_exactly_once) {
  auto token = std::make_shared<int>(0);
  {
    Task a([token] {});
    Task b([token, pad = Bytes<60>{}] { (void)pad; });
    EXPECT_EQ(token.use_count(), 3);
    Task c = std::move(a);
    Task d = std::move(b);
    EXPECT_EQ(token.use_count(), 3);
    c = Task([] {});  // destroys the first callable
    EXPECT_EQ(token.use_count(), 2);
    d.reset();
    EXPECT_FALSE(d);
    EXPECT_EQ(token.use_count(), 1);
    Task e([token] {});
    EXPECT_EQ(token.use_count(), 2);
  }
  EXPECT_EQ(token.use_count(), 1);
}

// Self move-assignment leaves the Task usable.
TEST(RuntimeTask, self_move_assignment_is_harmless) {
  int calls = 0;
  Task t([&calls] { ++calls; });
  Task& alias = t;
  t = std::move(alias);
  EXPECT_TRUE(t);
  t(Firing{});
  EXPECT_EQ(calls, 1);
}

// A runtime timer runs a Task with a move-only capture and then releases it.
TEST(RuntimeTask, runtime_runs_move_only_task) {
  chime::ManualClock clock{kStart};
  chime::Runtime rt{manual_options(clock, 1)};
  std::atomic<int> out{0};
  rt.schedule_at(at(1ms), [p = std::make_unique<int>(11), &out] { out.store(*p); });
  advance_to(clock, rt, at(2ms));
  EXPECT_EQ(out.load(), 11);
}

// TimerId: default is invalid, equality compares slot and generation.
TEST(RuntimeTask, timer_id_validity_and_equality) {
  static_assert(std::is_trivially_copyable_v<TimerId>);
  constexpr TimerId none{};
  static_assert(!none);
  static_assert(TimerId(1, 1));
  static_assert(TimerId(4, 2) == TimerId(4, 2));
  static_assert(!(TimerId(4, 2) == TimerId(4, 3)));
  static_assert(!(TimerId(4, 2) == TimerId(5, 2)));
  static_assert(TimerId(4, 2).slot() == 4 && TimerId(4, 2).generation() == 2);
  SUCCEED();
}

// std::atomic<TimerId> links with chime::runtime alone (it brings libatomic) and hands ids
// between threads: every id one thread publishes is taken exactly once by the other, through
// compare_exchange, and cancels its timer.
TEST(RuntimeTask, atomic_timer_id_hands_ids_between_threads) {
  chime::ManualClock clock(kStart);
  chime::Runtime rt(manual_options(clock, 1));
  constexpr int kIds = 2000;
  std::atomic<TimerId> published{};
  std::atomic<bool> done{false};
  int taken = 0;
  std::thread taker([&] {
    for (;;) {
      TimerId id = published.load();
      if (!id) {
        if (done.load()) break;
        std::this_thread::yield();
        continue;
      }
      if (published.compare_exchange_strong(id, TimerId{})) {
        EXPECT_TRUE(rt.cancel(id));
        ++taken;
      }
    }
  });
  for (int i = 0; i < kIds; ++i) {
    const TimerId id = rt.schedule_after(1h, [] {});
    TimerId empty{};
    while (!published.compare_exchange_weak(empty, id)) empty = TimerId{};
  }
  while (published.load()) std::this_thread::yield();
  done.store(true);
  taker.join();
  EXPECT_EQ(taken, kIds);
  rt.flush();
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_EQ(rt.stats().cancelled, static_cast<std::uint64_t>(kIds));
}

}  // namespace
