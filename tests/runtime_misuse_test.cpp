// SPDX-License-Identifier: BSL-1.0
// The mistakes users make, made safe or caught (design.md,
// "chime::Timer", "Lanes", "chime::Runtime"): a Timer destroyed or assigned
// over from its own callback, a Timer whose Lane is gone, a lane run from
// two threads at once, a Runtime that cannot start its threads, handles
// outliving their Runtime. ManualClock throughout; the memory errors these
// tests pin show under the asan preset.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chime/keyed_timers.hpp>
#include <chime/lane.hpp>
#include <chime/timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime_test_support.hpp"

namespace {

using namespace chime_test;
using chime::Runtime;
using chime::Timer;
using chime::TimerId;

// A connection that owns its idle Timer, as a server keeps them: the idle
// handler erases the connection, and with it the Timer whose callback runs.
struct Connection {
  Timer idle;
};

// The server's table, and what the handlers did after the erase.
struct Connections {
  std::mutex mu;
  std::map<int, std::unique_ptr<Connection>> open;
  std::vector<std::string> closed;  // written by the handlers after they erased their connection

  // The idle handler of connection `i`: erases it (destroying the running
  // Timer), then uses its own captures. `name` is long enough to live on the
  // heap, inside the closure: a freed closure is a heap-use-after-free.
  chime::Task idle_handler(int i) {
    std::string name = "connection-" + std::to_string(i) + std::string(64, '.');
    return [this, i, name] {
      std::unique_ptr<Connection> erased;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = open.find(i);
        erased = std::move(it->second);
        open.erase(it);
      }
      erased.reset();  // ~Timer from its own callback
      std::lock_guard<std::mutex> lock(mu);
      closed.push_back(name);  // the closure is still alive
    };
  }
};

class RuntimeMisuse : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeMisuse, testing::Values(0u, 1u, 2u), workers_name);

// A Timer destroyed from its own callback (on the workers): the callback's closure stays alive until it
// returns, and nothing of the destroyed Timer is touched after it (ASan: no heap-use-after-free).
TEST_P(RuntimeMisuse, a_timer_destroyed_from_its_own_callback_keeps_its_closure_until_it_returns) {
  Connections server;
  for (int i = 0; i < 8; ++i) {
    auto c = std::make_unique<Connection>();
    c->idle = Timer(rt, server.idle_handler(i));
    c->idle.arm_after(std::chrono::milliseconds(1 + i % 3));
    std::lock_guard<std::mutex> lock(server.mu);
    server.open.emplace(i, std::move(c));
  }
  advance_to(clock, rt, at(10ms));
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_TRUE(server.open.empty());
  ASSERT_EQ(server.closed.size(), 8u);
  for (const std::string& name : server.closed) EXPECT_EQ(name.substr(0, 11), "connection-");
  EXPECT_EQ(rt.stats().fired, 8u);
  EXPECT_EQ(rt.stats().pending, 0u);
}

// A Timer assigned over from its own callback (the old task replaced by a new one): the running closure
// stays alive until it returns, and the new Timer works.
TEST_P(RuntimeMisuse, a_timer_assigned_over_from_its_own_callback_keeps_its_closure_until_it_returns) {
  Timer t;
  std::vector<std::string> seen;
  std::string name = "the first task" + std::string(64, '.');
  t = Timer(rt, [&, name] {
    t = Timer(rt, [&] { seen.emplace_back("the second task"); });  // from its own callback
    seen.push_back(name);                                          // the closure is still alive
    t.arm_after(1ms);
  });
  t.arm_after(1ms);
  advance_to(clock, rt, at(2ms));
  advance_to(clock, rt, at(4ms));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], name);
  EXPECT_EQ(seen[1], "the second task");
}

// The same on a lane: a lane's Timer destroyed or assigned over from its own callback keeps its closure
// until the callback returns.
TEST_P(RuntimeMisuse, a_lane_timer_destroyed_or_assigned_over_from_its_own_callback_is_safe) {
  chime::Lane lane = rt.lane();
  Connections server;
  for (int i = 0; i < 4; ++i) {
    auto c = std::make_unique<Connection>();
    c->idle = Timer(lane, server.idle_handler(i));
    c->idle.arm_after(1ms);
    server.open.emplace(i, std::move(c));
  }
  Timer t;
  std::vector<std::string> seen;
  std::string name = "the first lane task" + std::string(64, '.');
  t = Timer(lane, [&, name] {
    t = Timer(lane, [&] { seen.emplace_back("the second lane task"); });
    seen.push_back(name);
    t.arm_after(1ms);
  });
  t.arm_after(1ms);
  advance_to(clock, rt, at(2ms));  // on the lane's thread: the flush runs the lane
  advance_to(clock, rt, at(4ms));
  EXPECT_TRUE(server.open.empty());
  EXPECT_EQ(server.closed.size(), 4u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], name);
  EXPECT_EQ(seen[1], "the second lane task");
}

// A Timer destroyed from its own periodic callback: no further run, and the run in progress finishes.
TEST_P(RuntimeMisuse, a_periodic_timer_destroyed_from_its_own_callback_runs_no_more) {
  auto t = std::make_unique<Timer>();
  int runs = 0;
  std::string name = "periodic" + std::string(64, '.');
  std::string seen;
  *t = Timer(rt, [&, name] {
    ++runs;
    t.reset();
    seen = name;
  });
  t->arm_every(1ms);
  advance_to(clock, rt, at(2ms));
  advance_to(clock, rt, at(10ms));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(seen, name);
  EXPECT_EQ(rt.stats().pending, 0u);
}

class RuntimeMisuseLane : public ManualRuntimeTest {};
INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeMisuseLane, testing::Values(0u, 2u), workers_name);

// A Timer whose Lane was destroyed refuses to arm (std::logic_error), also after a new Lane reuses the old
// lane's core, and that new Lane never gets a run of it.
TEST_P(RuntimeMisuseLane, a_timer_whose_lane_was_destroyed_refuses_to_arm_and_never_runs_on_another_lane) {
  auto lane = std::make_unique<chime::Lane>(rt.lane());
  int runs = 0;
  Timer t(*lane, [&] { ++runs; });
  t.arm_after(1ms);
  lane.reset();  // cancels the pending run
  EXPECT_FALSE(t.armed());
  EXPECT_THROW(t.arm_after(1ms), std::logic_error);
  chime::Lane other = rt.lane();  // reuses the closed lane's core
  try {
    t.arm_after(1ms);
    ADD_FAILURE() << "arming a Timer whose Lane is gone did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("Lane was destroyed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.arm_at(at(1ms)), std::logic_error);
  EXPECT_THROW(t.arm_every(1ms), std::logic_error);
  EXPECT_FALSE(t.armed());
  advance_to(clock, rt, at(5ms));  // on the lane's thread: runs `other`
  EXPECT_EQ(other.run_ready(), 0u);
  EXPECT_EQ(runs, 0) << "a run of the old lane's Timer was delivered to another lane";
  EXPECT_EQ(rt.stats().pending, 0u);
  EXPECT_EQ(t.disarm_and_wait(), chime::CancelResult::done);
}

// A lane is run by one thread at a time: run_ready or wait_and_run entered while another thread is inside
// run_ready or wait_and_run of the same lane throws std::logic_error instead of running callbacks
// concurrently; once that thread has left, the lane runs on the new thread.
TEST_P(RuntimeMisuseLane, a_second_thread_entering_a_running_lane_throws_logic_error) {
  chime::Lane lane = rt.lane();
  Gate gate;
  std::atomic<bool> entered{false};
  std::thread lane_thread([&] {
    entered.store(true);
    lane.wait_and_run(at(100ms));  // returns once it ran the blocker
  });
  while (!entered.load()) std::this_thread::yield();
  lane.schedule_at(at(1ms), gate.blocker());
  clock.set(at(2ms));
  std::thread flusher([&] { rt.flush(); });  // not the lane's thread: waits for it
  gate.wait_started();                       // the lane's thread is inside wait_and_run, in the callback
  try {
    lane.run_ready();
    ADD_FAILURE() << "run_ready from a second thread did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("another thread"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lane.wait_and_run(at(0ms)), std::logic_error);
  gate.release();
  flusher.join();
  lane_thread.join();
  int ran = 0;
  EXPECT_EQ(lane.run_ready(), 0u) << "the lane runs on this thread once the other left";
  lane.schedule_at(at(1ms), [&] { ++ran; });
  rt.flush();  // on the lane's thread now: runs it here
  EXPECT_EQ(ran, 1);
}

// Options are validated at construction: more workers than RuntimeOptions::max_workers (4096) throws
// std::invalid_argument naming the value, before any thread starts.
TEST(RuntimeMisuse, too_many_workers_throws_invalid_argument_naming_the_value) {
  chime::ManualClock clock{kStart};
  for (unsigned workers : {35000u, 1u << 30}) {
    try {
      chime::Runtime rt{manual_options(clock, workers)};
      ADD_FAILURE() << "workers = " << workers << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(workers)), std::string::npos) << e.what();
    }
  }
}

// Restores the default thread attributes when it goes out of scope.
struct HugeDefaultThreadStacks {
  pthread_attr_t saved;
  HugeDefaultThreadStacks() {
    pthread_getattr_default_np(&saved);
    pthread_attr_t huge;
    pthread_attr_init(&huge);
    // Far more than the machine's memory and swap: every new thread's stack mmap fails.
    pthread_attr_setstacksize(&huge, std::size_t{1} << 46);
    pthread_setattr_default_np(&huge);
    pthread_attr_destroy(&huge);
  }
  ~HugeDefaultThreadStacks() {
    pthread_setattr_default_np(&saved);
    pthread_attr_destroy(&saved);
  }
};

// A thread that cannot start makes the constructor throw std::system_error (never std::terminate), with
// workers and without: every thread's stack is refused.
TEST(RuntimeMisuse, a_thread_that_cannot_start_throws_system_error_not_terminate) {
  chime::ManualClock clock{kStart};
  for (unsigned workers : {0u, 2u}) {
    HugeDefaultThreadStacks huge;
    try {
      chime::Runtime rt{manual_options(clock, workers)};
      ADD_FAILURE() << "the runtime started with threads whose stacks cannot be mapped";
    } catch (const std::system_error& e) {
      EXPECT_NE(std::string(e.what()).find("could not start thread 1 of"), std::string::npos) << e.what();
    }
  }
  chime::Runtime rt{manual_options(clock, 2)};  // the default attributes are back: it starts
  rt.schedule_after(0ns, [] {});
  rt.flush();
  EXPECT_EQ(rt.stats().fired, 1u);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(CHIME_TEST_SANITIZED)
// Runs in a child process with its address space limited, so that some workers start and a later one
// cannot: the constructor stops and joins those that started and throws std::system_error. Exits 0 then.
void start_workers_under_an_address_space_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_AS, &limit);
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  // Room for the runtime and a few 8 MiB thread stacks, not for 2,000 of them.
  limit.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (256u << 20);
  setrlimit(RLIMIT_AS, &limit);
  try {
    chime::Runtime rt{steady_options(2000)};
  } catch (const std::system_error& e) {
    const std::string what = e.what();
    std::_Exit(what.find("could not start thread") != std::string::npos &&
                       what.find("could not start thread 1 of") == std::string::npos
                   ? 0
                   : 2);
  }
  std::_Exit(1);
}

// Some threads started, then one could not: they are stopped and joined, and the constructor throws
// std::system_error (before, the joinable std::threads destroyed during unwinding called std::terminate).
TEST(RuntimeMisuse, a_thread_failing_after_others_started_joins_them_and_throws_system_error) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(start_workers_under_an_address_space_limit(), testing::ExitedWithCode(0), "");
}
#endif

// Expects `call` to throw std::logic_error saying the Runtime was destroyed.
template <class F>
void expect_runtime_gone(F&& call, const char* what) {
  try {
    call();
    ADD_FAILURE() << what << " after the Runtime was destroyed did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("after its Runtime was destroyed"), std::string::npos)
        << what << ": " << e.what();
  }
}

// A Timer, Lane, Producer or KeyedTimers outliving its Runtime: in every build, each use that needs the
// runtime throws std::logic_error saying so (one load per call), queries answer "nothing armed", and the
// destructors touch nothing of the runtime (before: a use-after-free, a silent segfault in release).
TEST(RuntimeMisuse, handles_outliving_their_runtime_throw_logic_error_and_destroy_cleanly) {
  chime::ManualClock clock{kStart};
  auto rt = std::make_unique<chime::Runtime>(manual_options(clock, 1));
  int runs = 0;
  Timer timer(*rt, [&] { ++runs; });
  timer.arm_after(5ms);
  chime::Lane lane = rt->lane();
  Timer lane_timer(lane, [&] { ++runs; });
  lane_timer.arm_after(5ms);
  const chime::TimerId lane_id = lane.schedule_after(5ms, [&] { ++runs; });
  chime::Producer producer = rt->producer();
  const chime::TimerId producer_id = producer.schedule_after(5ms, [&] { ++runs; });
  chime::KeyedTimers<int, int> keyed(*rt, [&](const int&, int&&) { ++runs; });
  keyed.set(1, 10, 5ms);
  rt.reset();  // cancels everything pending
  expect_runtime_gone([&] { timer.arm_after(1ms); }, "Timer::arm_after");
  expect_runtime_gone([&] { timer.arm_every(1ms); }, "Timer::arm_every");
  expect_runtime_gone([&] { lane_timer.arm_at(at(1ms)); }, "lane Timer::arm_at");
  EXPECT_FALSE(timer.armed());
  EXPECT_FALSE(timer.disarm());
  EXPECT_EQ(timer.due(), std::nullopt);
  EXPECT_EQ(timer.disarm_and_wait(), chime::CancelResult::done);
  expect_runtime_gone([&] { lane.schedule_after(1ms, [] {}); }, "Lane::schedule_after");
  expect_runtime_gone([&] { lane.cancel(lane_id); }, "Lane::cancel");
  expect_runtime_gone([&] { lane.run_ready(); }, "Lane::run_ready");
  expect_runtime_gone([&] { (void)lane.ready_fd(); }, "Lane::ready_fd");
  expect_runtime_gone([&] { Timer another(lane, [] {}); }, "Timer(lane, task)");
  expect_runtime_gone([&] { producer.schedule_after(1ms, [] {}); }, "Producer::schedule_after");
  expect_runtime_gone([&] { producer.cancel(producer_id); }, "Producer::cancel");
  expect_runtime_gone([&] { keyed.set(2, 20, 1ms); }, "KeyedTimers::set");
  expect_runtime_gone([&] { keyed.reschedule_after(1, 1ms); }, "KeyedTimers::reschedule_after");
  EXPECT_TRUE(keyed.remove(1)) << "the key's value is still there to remove";
  EXPECT_EQ(runs, 0);
  // The destructors of keyed, producer, lane_timer, lane and timer run now, after the runtime's.
}

#if !defined(NDEBUG) && !defined(__SANITIZE_THREAD__)
// The callback of the deadlock tests: counts its start, waits (at most 5 s) until the other callback has
// started too, then waits for the other's run to return. `other` is read when the callback runs.
auto waits_for_the_other(Runtime& rt, std::atomic<int>& started, const TimerId& other) {
  return [&rt, &started, &other] {
    started.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (started.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    rt.cancel_and_wait(other);
  };
}

// Two timers whose callbacks each cancel_and_wait the other's run, both running at once on two workers. They
// are dispatched in two passes (a worker takes several runs of one hand-off batch, and would then run them one
// after the other): A first, which waits for B to start, then B on the other worker. Every wait is bounded, so
// a missed detection fails the death test instead of hanging it.
void two_callbacks_wait_for_each_other() {
  // Not a ManualClock, whose runs never overlap (G28): there B would wait
  // for A to return, and the two could not wait for each other.
  chime_test::SettableClock clock{kStart};
  Runtime rt{chime_test::settable_options(clock, 2)};
  // Written before the flushes that dispatch the runs: the flush commands
  // carry the happens-before to the callbacks that read them.
  TimerId a_id;
  TimerId b_id;
  std::atomic<int> started{0};
  a_id = rt.schedule_at(at(1ms), waits_for_the_other(rt, started, b_id));
  b_id = rt.schedule_at(at(3ms), waits_for_the_other(rt, started, a_id));
  rt.flush();
  clock.set(at(2ms));
  std::thread([&] { rt.flush(); }).detach();  // dispatches A; returns only when A does
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (started.load() < 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  clock.set(at(4ms));
  std::thread([&] { rt.flush(); }).detach();  // dispatches B to the other worker
  std::this_thread::sleep_for(10s);           // the check aborts the process long before this
  std::_Exit(0);                              // not detected: exit without dying by the signal
}

// Debug builds catch the simplest deadlock: two callbacks each cancel_and_wait the other's running timer.
TEST(RuntimeMisuse, two_callbacks_waiting_for_each_other_abort_with_a_message) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(two_callbacks_wait_for_each_other(), "cancel_and_wait deadlock");
}

// The same with no workers and two shards: each timer runs on its own shard's wheel thread (the two
// Producers bind to shards 0 and 1). On the steady clock each wheel thread wakes for its own timer, so the
// two callbacks run at once (a flush serves the shards one after the other, and would not start the second
// while the first waits).
void two_callbacks_on_two_wheel_threads_wait_for_each_other() {
  chime::RuntimeOptions o = steady_options(0);
  o.shards = 2;
  Runtime rt{o};
  chime::Producer on_shard_0 = rt.producer();
  chime::Producer on_shard_1 = rt.producer();
  // Written before the callbacks run (each is due 50 ms after both are scheduled).
  TimerId a_id;
  TimerId b_id;
  std::atomic<int> started{0};
  const chime::TimePoint due = rt.clock().now() + 50ms;
  a_id = on_shard_0.schedule_at(due, waits_for_the_other(rt, started, b_id));
  b_id = on_shard_1.schedule_at(due, waits_for_the_other(rt, started, a_id));
  std::this_thread::sleep_for(10s);  // the check aborts the process long before this
  std::_Exit(0);                     // not detected: exit without dying by the signal
}

TEST(RuntimeMisuse, two_callbacks_on_two_shards_wheel_threads_waiting_for_each_other_abort_with_a_message) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(two_callbacks_on_two_wheel_threads_wait_for_each_other(), "cancel_and_wait deadlock");
}
#endif

}  // namespace
