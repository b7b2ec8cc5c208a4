// SPDX-License-Identifier: BSL-1.0
// Out of memory on the runtime's own threads (runtime.hpp, G22;
// wheel_thread.cpp, "Out of memory"): a wheel thread never dies of a failed
// allocation and never loses what it must file. Every accepted timer runs
// exactly once when memory comes back, a cancel still takes effect, and a
// flush() or drain() that cannot make progress throws std::bad_alloc after
// about a second instead of waiting for ever. The allocation failures are
// injected with chime_alloc::OutOfMemoryScope(Threads::others): every
// allocation fails on every thread but the test's own, which keeps
// scheduling and cancelling.
//
// A thread's first call of a kind out of memory (a_threads_first_...) is
// checked in a child process: glibc registers a thread_local's destructor
// (__cxa_thread_atexit_impl) with calloc and aborts the process when that
// fails. glibc's own calloc call is not one the allocation counter can make
// fail, so this binary's __cxa_thread_atexit_impl (below) stands in front of
// glibc's and does what glibc does when its calloc fails as ours do.

#include "alloc_counter.hpp"
#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace {
using ThreadAtexit = int (*)(void (*)(void*), void*, void*);
ThreadAtexit glibc_thread_atexit() {
  static const auto real = reinterpret_cast<ThreadAtexit>(dlsym(RTLD_NEXT, "__cxa_thread_atexit_impl"));
  return real;
}
const ThreadAtexit resolved_before_main = glibc_thread_atexit();  // dlsym is not called out of memory
}  // namespace

// Registers a thread_local's destructor (the C++ runtime calls it on a
// thread_local's first use): glibc's, after a calloc-sized allocation that
// fails where the test makes allocation fail, as glibc's calloc would.
extern "C" int __cxa_thread_atexit_impl(void (*dtor)(void*), void* obj, void* dso_symbol) {
  void* const probe = std::malloc(sizeof(void*) * 4);  // glibc's struct dtor_list
  if (probe == nullptr) {
    static constexpr char kMessage[] = "Fatal glibc error: failed to register TLS destructor: out of memory\n";
    [[maybe_unused]] const ssize_t r = ::write(2, kMessage, sizeof kMessage - 1);
    std::abort();
  }
  std::free(probe);
  return glibc_thread_atexit()(dtor, obj, dso_symbol);
}

namespace {

using namespace chime_test;
using chime::Runtime;
using chime::TimerId;
using OutOfMemory = chime_alloc::OutOfMemoryScope;

// More timers than the wheel thread's first allocations hold (its scratch
// lists hold 4,096), so putting them on its lists and firing them must
// allocate.
constexpr int kTimers = 20'000;
constexpr auto kGiveUpBound = std::chrono::seconds(30);  // "bounded": far above the documented 1 s

// Every timer i counts its runs in runs[i]; every 7th is cancelled.
struct Timers {
  std::vector<std::atomic<int>> runs = std::vector<std::atomic<int>>(kTimers);
  std::vector<TimerId> ids;
  static bool cancelled(int i) { return i % 7 == 0; }
  void expect_each_ran_once_unless_cancelled() const {
    int wrong = 0;
    for (int i = 0; i < kTimers; ++i) {
      if (runs[i].load() != (cancelled(i) ? 0 : 1) && ++wrong <= 5) {
        ADD_FAILURE() << "timer " << i << " ran " << runs[i].load() << " times";
      }
    }
    EXPECT_EQ(wrong, 0);
  }
};

// Runs `f`, expecting it to throw std::bad_alloc or return, within the bound.
template <class F>
bool throws_bad_alloc_in_bounded_time(F f) {
  const auto start = std::chrono::steady_clock::now();
  bool threw = false;
  try {
    f();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kGiveUpBound) << "a flush or drain out of memory hung";
  return threw;
}

// After memory is back: a pass that began out of memory may still be
// running (on a loaded machine, or under a sanitizer, for more than the
// 1 s a flush waits on a wheel thread out of memory), so a flush may still
// give up with std::bad_alloc; its message says to call it again. The
// guarantee checked after it is that every timer then runs once, so the
// flush is retried until it returns, within the bound.
void flush_once_memory_is_back(Runtime& rt) {
  const auto give_up = std::chrono::steady_clock::now() + kGiveUpBound;
  for (;;) {
    try {
      rt.flush();
      return;
    } catch (const std::bad_alloc&) {
      if (std::chrono::steady_clock::now() >= give_up) throw;
    }
  }
}

// The wheel threads cannot grow their lists while timers are scheduled:
// half the timers are due at the clock's reading, so they go on the
// overdue list, which must grow past its first entries (filing the others
// in the wheel needs no memory: the wheel's node is in the slot). The ADDs
// wait in the queue, flush() gives up with std::bad_alloc (in about a
// second), cancels still take effect, and once memory is back every
// accepted timer is filed and runs exactly once.
TEST(RuntimeOutOfMemory, a_wheel_thread_out_of_memory_keeps_every_accepted_timer) {
  chime::ManualClock clock{kStart};
  Timers t;  // outlives the runtime: its callbacks use it
  Runtime rt{manual_options(clock, 1)};
  rt.flush();  // the wheel threads are in their loops
  {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
    for (int i = 0; i < kTimers; ++i) {
      const auto due = i % 2 == 0 ? at(0ms) : at(std::chrono::milliseconds(1 + i % 50));
      t.ids.push_back(rt.schedule_at(due, [&t, i] { t.runs[i].fetch_add(1); }));
    }
    for (int i = 0; i < kTimers; i += 7) EXPECT_TRUE(rt.cancel(t.ids[i])) << "a cancel out of memory lost";
    EXPECT_TRUE(throws_bad_alloc_in_bounded_time([&] { rt.flush(); }))
        << "flush returned while the wheel threads could not file the timers";
    EXPECT_TRUE(throws_bad_alloc_in_bounded_time([&] { rt.drain(); }));
    EXPECT_EQ(rt.stats().pending, static_cast<std::uint64_t>(kTimers - (kTimers + 6) / 7));
  }
  flush_once_memory_is_back(rt);
  rt.check_invariants();
  advance_to(clock, rt, at(100ms));
  rt.flush();
  t.expect_each_ran_once_unless_cancelled();
  EXPECT_EQ(rt.stats().pending, 0u);
  rt.check_invariants();
}

// The timers are filed, then memory runs out as they come due, while the
// one worker is held (so the hand-off queue must grow): the wheel thread
// fires what its lists hold, keeps what the queue cannot take (an advance is
// cut short, a batch waits), flush() throws std::bad_alloc in bounded time,
// and when memory is back every timer runs exactly once. With workers = 0
// the runs are made on the wheel thread, as room allows.
TEST(RuntimeOutOfMemory, firing_out_of_memory_loses_no_run_and_runs_none_twice) {
  for (unsigned workers : {0u, 1u}) {
    SCOPED_TRACE(workers);
    // Not a ManualClock, whose runs go out one at a time (G28): the held
    // worker would hold back every other run, and nothing would meet the
    // lack of memory.
    SettableClock clock{kStart};
    Timers t;
    Gate gate;
    Runtime rt{settable_options(clock, workers)};
    if (workers == 1) rt.schedule_at(at(1ms), gate.blocker());
    for (int i = 0; i < kTimers; ++i) {
      t.ids.push_back(rt.schedule_at(at(std::chrono::milliseconds(2 + i % 3)), [&t, i] { t.runs[i].fetch_add(1); }));
    }
    for (int i = 0; i < kTimers; i += 7) ASSERT_TRUE(rt.cancel(t.ids[i]));
    rt.flush();
    {
      const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
      clock.set(at(10ms));
      const bool threw = throws_bad_alloc_in_bounded_time([&] { rt.flush(); });
      if (workers == 1) {
        EXPECT_TRUE(threw) << "flush returned while the worker was held";
      }
    }
    gate.release();
    flush_once_memory_is_back(rt);
    t.expect_each_ran_once_unless_cancelled();
    EXPECT_EQ(rt.stats().pending, 0u);
    rt.check_invariants();
  }
}

// A flush returns only once every timer due by its reading has run, or
// throws: an advance cut short for want of memory, whose fired part was only
// zombies (so it dispatched nothing), leaves the due timers in the wheel,
// and the flush does not settle on it.
TEST(RuntimeOutOfMemory, a_flush_returns_only_once_every_timer_due_by_its_reading_ran) {
  SettableClock clock{kStart};
  Runtime rt{settable_options(clock, 1)};
  std::atomic<int> ran{0};
  constexpr int kZombies = 8192, kLive = 40000;
  std::vector<TimerId> zombies;
  for (int i = 0; i < kZombies; ++i) zombies.push_back(rt.schedule_at(at(5ms), [] {}));
  for (int i = 0; i < kLive; ++i) rt.schedule_at(at(6ms), [&ran] { ran.fetch_add(1); });
  rt.flush();  // filed
  for (const TimerId id : zombies) ASSERT_TRUE(rt.cancel(id));
  {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
    clock.set(at(10ms));
    const bool threw = throws_bad_alloc_in_bounded_time([&] { rt.flush(); });
    if (!threw) {
      EXPECT_EQ(ran.load(), kLive) << "flush returned with timers due by its reading not yet run";
    }
  }
  flush_once_memory_is_back(rt);
  EXPECT_EQ(ran.load(), kLive);
  EXPECT_EQ(rt.stats().pending, 0u);
  rt.check_invariants();
}

// A lane's runs come due (steady clock) while memory is out and the lane
// is not run, so its ready queue must grow: the runs it cannot take wait on
// the wheel thread, and every one runs once, on the lane, when memory is back.
TEST(RuntimeOutOfMemory, lane_runs_out_of_memory_wait_and_run_once) {
  Timers t;
  Runtime rt{steady_options(1)};
  chime::Lane lane = rt.lane();
  const chime::TimePoint due = rt.clock().now() + 50ms;
  for (int i = 0; i < kTimers; ++i) {
    t.ids.push_back(lane.schedule_at(due, [&t, i] { t.runs[i].fetch_add(1); }));
  }
  for (int i = 0; i < kTimers; i += 7) ASSERT_TRUE(lane.cancel(t.ids[i]));
  rt.flush();  // filed
  {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
    while (rt.clock().now() < due + 200ms) std::this_thread::sleep_for(10ms);
  }
  const int expected = kTimers - (kTimers + 6) / 7;
  int ran = 0;
  for (const auto give_up = std::chrono::steady_clock::now() + kGiveUpBound;
       ran < expected && std::chrono::steady_clock::now() < give_up;) {
    lane.run_ready();
    ran = 0;
    for (const auto& r : t.runs) ran += r.load();
  }
  flush_once_memory_is_back(rt);
  t.expect_each_ran_once_unless_cancelled();
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A schedule whose timer needs the slot's side record (a callable of more
// than 16 bytes of captures) in a chunk that has none yet, out of memory on
// the scheduling thread: it throws std::bad_alloc, keeps nothing (the
// captures are released, the pending count is unchanged) and, once memory
// is back, the same schedule is accepted and runs once.
TEST(RuntimeOutOfMemory, a_schedule_without_room_for_its_side_record_throws_and_keeps_nothing) {
  // Not a ManualClock, where every timer has a side record (its call order, G28).
  SettableClock clock{kStart};
  chime::RuntimeOptions options = settable_options(clock, 1);
  options.reserve = 64;  // the slot chunk exists; its side array does not
  Runtime rt{options};
  std::atomic<int> small_runs{0}, large_runs{0};
  rt.schedule_at(at(1ms), [&small_runs] { small_runs.fetch_add(1); });  // warms the queue: no side record
  rt.flush();
  auto token = std::make_shared<int>(0);
  const auto large = [&large_runs, token, pad = std::array<char, 24>{}] {
    (void)pad;
    large_runs.fetch_add(1);
  };
  static_assert(sizeof(large) > 16 && chime::Task::stored_inline<decltype(large)>);
  {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::all);
    EXPECT_THROW(rt.schedule_at(at(2ms), large), std::bad_alloc);
  }
  EXPECT_EQ(token.use_count(), 2) << "only `large` itself holds the token: the failed schedule kept no copy";
  EXPECT_EQ(rt.stats().pending, 1u) << "the failed schedule is not counted";
  rt.schedule_at(at(2ms), large);
  advance_to(clock, rt, at(3ms));
  EXPECT_EQ(small_runs.load(), 1);
  EXPECT_EQ(large_runs.load(), 1);
  EXPECT_EQ(rt.stats().pending, 0u);
  rt.check_invariants();
}

// Runs `f` as the first call of a thread just started, out of memory on
// every thread.
template <class F>
void first_call_on_a_new_thread_out_of_memory(F f) {
  std::thread([&f] {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::all);
    f();
  }).join();
}

// The child process of a_threads_first_call_out_of_memory_...: exits 0 iff
// every call did what it must; an abort is the death test's failure.
[[noreturn]] void first_calls_out_of_memory() {
  chime::ManualClock clock{kStart};
  Runtime rt{manual_options(clock, 1)};
  std::atomic<int> runs{0};
  const auto count = [&runs] { runs.fetch_add(1); };
  const TimerId cancelled = rt.schedule_at(at(10ms), count);
  const TimerId try_cancelled = rt.schedule_at(at(10ms), count);
  const TimerId earlier = rt.schedule_at(at(50ms), count);
  rt.flush();  // filed; the runtime's threads have counted and flushed before
  int failed = 0;
  first_call_on_a_new_thread_out_of_memory([&] {
    if (!rt.cancel(cancelled)) failed |= 1;
  });
  first_call_on_a_new_thread_out_of_memory([&] {
    if (rt.try_cancel(try_cancelled) != chime::CancelResult::cancelled) failed |= 2;
  });
  first_call_on_a_new_thread_out_of_memory([&] {
    try {
      rt.flush();
    } catch (const std::bad_alloc&) {
    }
  });
  std::thread([&] {
    const chime::Lane lane = rt.lane();  // this thread's: its flush runs the lane while it waits
    const OutOfMemory out_of_memory(OutOfMemory::Threads::all);
    try {
      rt.flush();
    } catch (const std::bad_alloc&) {
    }
  }).join();
  // An earlier due's command must arrive: out of memory it waits for room,
  // so memory comes back (the scope ends) while it waits.
  {
    std::atomic<bool> go{false};
    std::thread t([&] {
      while (!go.load()) std::this_thread::yield();
      if (!rt.reschedule_at(earlier, at(20ms))) failed |= 4;
    });
    {
      const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
      go.store(true);
      std::this_thread::sleep_for(50ms);
    }
    t.join();
  }
  advance_to(clock, rt, at(20ms));
  if (runs.load() != 1) failed |= 8;  // only `earlier` ran, at its new due: the cancels took effect
  if (failed != 0) std::fprintf(stderr, "failed checks: %d\n", failed);
  std::_Exit(failed == 0 ? 0 : 1);
}

// A thread's first cancel, try_cancel, earlier reschedule or flush out of
// memory neither aborts the process nor loses its effect: a cancel takes
// effect, a reschedule's new due holds, a flush (on a lane's thread too)
// returns or throws std::bad_alloc (no chime thread_local registers a
// destructor).
TEST(RuntimeOutOfMemory, a_threads_first_call_out_of_memory_takes_effect_or_throws_bad_alloc) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(first_calls_out_of_memory(), testing::ExitedWithCode(0), "");
}

// Runs `arm` on a thread of its own while allocation fails on every thread
// but this one, for at most 2 s (an arm that waits for memory then returns
// once it is back); true iff it threw std::bad_alloc.
template <class F>
bool throws_bad_alloc_out_of_memory(F arm) {
  std::atomic<int> outcome{0};  // 1: returned; 2: threw std::bad_alloc
  {
    const OutOfMemory out_of_memory(OutOfMemory::Threads::others);
    std::thread t([&] {
      try {
        arm();
        outcome.store(1);
      } catch (const std::bad_alloc&) {
        outcome.store(2);
      }
    });
    for (const auto give_up = std::chrono::steady_clock::now() + 2s;
         outcome.load() == 0 && std::chrono::steady_clock::now() < give_up;) {
      std::this_thread::sleep_for(1ms);
    }
    t.detach();  // joined below, through `outcome`, once memory is back
  }
  while (outcome.load() == 0) std::this_thread::sleep_for(1ms);
  return outcome.load() == 2;
}

// G47 (timer errors): a re-arm that cannot get memory for what the new
// timer needs (its side record, room for its ADD in the queue) throws
// std::bad_alloc and leaves the Timer as it was: its pending run is kept and
// runs at its due.
TEST(RuntimeOutOfMemory, a_re_arm_out_of_memory_throws_bad_alloc_and_keeps_the_pending_run) {
  chime::ManualClock clock{kStart};
  chime::RuntimeOptions options = manual_options(clock, 1);
  options.reserve = 64;  // the slot chunk exists; its side array does not
  Runtime rt{options};
  std::atomic<int> runs{0};
  chime::Timer timer(rt, [&runs] { runs.fetch_add(1); });
  timer.arm_at(at(10ms));
  rt.flush();
  // A periodic timer needs the slot's side record, which its chunk lacks.
  EXPECT_TRUE(throws_bad_alloc_out_of_memory([&] { timer.arm_every(5ms); }));
  EXPECT_TRUE(timer.armed());
  EXPECT_EQ(rt.stats().pending, 1u);
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(runs.load(), 1) << "the one-shot the failed arm would have replaced did not run";
  EXPECT_FALSE(timer.armed());
  // The side array is there now; a new thread's ADD needs a queue block.
  timer.arm_every(10ms, chime::PeriodicOptions{at(20ms)});
  rt.flush();
  EXPECT_TRUE(throws_bad_alloc_out_of_memory([&] { timer.arm_every(5ms); }));
  EXPECT_TRUE(timer.armed());
  EXPECT_EQ(rt.stats().pending, 1u);
  advance_to(clock, rt, at(20ms));
  EXPECT_EQ(runs.load(), 2) << "the periodic timer the failed arm would have replaced did not run";
  rt.check_invariants();
}

}  // namespace
