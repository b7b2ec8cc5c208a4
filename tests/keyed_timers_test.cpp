// SPDX-License-Identifier: BSL-1.0
// Unit tests for chime::KeyedTimers (include/chime/keyed_timers.hpp).
//
// Deterministic: a ManualClock that moves only when the test says so, and
// Runtime::flush(), which runs every timer due at or before the clock's reading
// and returns once those runs have returned. A key set with delay d at time t
// fires at the first flush whose reading is at or past t + d, never before, and
// never between flushes. The few tests that race an operation
// against a fire already handed to a worker block that worker on purpose; their
// outcome does not depend on thread timing.
#include <chime/keyed_timers.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;

constexpr TimePoint kStart = TimePoint{} + std::chrono::seconds(1000);

chime::RuntimeOptions manual_options(chime::ManualClock& clock, unsigned workers) {
  chime::RuntimeOptions options;
  options.precision = 1ms;
  options.workers = workers;
  options.clock = &clock;
  return options;
}

// Every execute call, in the order they happened; thread-safe.
template <class K, class V>
class Log {
 public:
  void add(const K& key, V&& value) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.emplace_back(key, std::move(value));
  }
  std::vector<std::pair<K, V>> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::size_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  typename chime::KeyedTimers<K, V>::Execute execute() {
    return [this](const K& key, V&& value) { add(key, std::move(value)); };
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<K, V>> calls_;
};

class KeyedTimers : public ::testing::Test {
 protected:
  // Moves the clock to kStart + d and waits for the runtime to catch up.
  // Commands posted before are applied at the old time first (see
  // runtime_test_support.hpp, advance_to).
  void advance_to(Duration d) {
    runtime_.flush();
    clock_.set(kStart + d);
    runtime_.flush();
  }

  chime::ManualClock clock_{kStart};
  chime::Runtime runtime_{manual_options(clock_, 2)};
  Log<int, std::string> log_;
};

using Calls = std::vector<std::pair<int, std::string>>;

// set returns true iff the key was not pending (new, or after it fired or was removed).
TEST_F(KeyedTimers, set_returns_true_iff_key_was_not_pending) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  EXPECT_TRUE(timers.set(1, "a", 10ms));
  EXPECT_FALSE(timers.set(1, "b", 10ms));
  EXPECT_TRUE(timers.set(2, "c", 10ms));
  EXPECT_TRUE(timers.remove(2));
  EXPECT_TRUE(timers.set(2, "d", 10ms));
  advance_to(11ms);
  EXPECT_EQ(log_.count(), 2u);
  EXPECT_TRUE(timers.set(1, "e", 10ms));
}

// Replacing a pending key's value: only the new value executes, once, at the new due time.
TEST_F(KeyedTimers, set_on_pending_key_executes_only_the_new_value_once_at_the_new_time) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  ASSERT_TRUE(timers.set(1, "old", 10ms));
  ASSERT_FALSE(timers.set(1, "new", 20ms));
  advance_to(15ms);
  EXPECT_EQ(log_.count(), 0u) << "the old due time must be forgotten";
  EXPECT_TRUE(timers.contains(1));
  advance_to(21ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "new"}}));
  advance_to(100ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "new"}}));
}

// The replaced value is destroyed by set, on the caller's thread, and never executes.
TEST_F(KeyedTimers, set_destroys_the_replaced_value) {
  Log<int, std::shared_ptr<int>> log;
  chime::KeyedTimers<int, std::shared_ptr<int>> timers(runtime_, log.execute());
  auto old_value = std::make_shared<int>(1);
  std::weak_ptr<int> old_watch = old_value;
  timers.set(7, std::move(old_value), 10ms);
  timers.set(7, std::make_shared<int>(2), 10ms);
  EXPECT_TRUE(old_watch.expired());
  advance_to(11ms);
  ASSERT_EQ(log.count(), 1u);
  EXPECT_EQ(*log.calls()[0].second, 2);
}

// execute receives the key and the value by rvalue; a move-only Value works.
TEST_F(KeyedTimers, execute_receives_key_and_move_only_value) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::unique_ptr<int>>> got;
  chime::KeyedTimers<std::string, std::unique_ptr<int>> timers(
      runtime_, [&](const std::string& key, std::unique_ptr<int>&& value) {
        std::lock_guard<std::mutex> lock(mu);
        got.emplace_back(key, std::move(value));
      });
  EXPECT_TRUE(timers.set("conn-7", std::make_unique<int>(42), 5ms));
  EXPECT_TRUE(timers.set("a-much-longer-key-than-the-small-string-buffer", std::make_unique<int>(43), 5ms));
  advance_to(6ms);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(got.size(), 2u);
  std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  EXPECT_EQ(got[0].first, "a-much-longer-key-than-the-small-string-buffer");
  EXPECT_EQ(*got[0].second, 43);
  EXPECT_EQ(got[1].first, "conn-7");
  EXPECT_EQ(*got[1].second, 42);
}

// A key never executes before its delay has passed by the runtime's clock,
// and executes at the first flush whose reading reaches it.
TEST_F(KeyedTimers, executes_at_the_first_flush_reaching_its_delay_never_before) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  timers.set(1, "x", 10ms);
  advance_to(9ms);
  EXPECT_EQ(log_.count(), 0u);
  EXPECT_TRUE(timers.contains(1));
  advance_to(10ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "x"}}));
  EXPECT_FALSE(timers.contains(1));
}

// A key moved later does not fire at its old time, and fires once at its new time.
TEST_F(KeyedTimers, move_later_does_not_fire_at_old_time_and_fires_at_new_time) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  timers.set(1, "x", 10ms);
  advance_to(5ms);
  EXPECT_TRUE(timers.reschedule_after(1, 20ms));  // due at 25 ms
  advance_to(11ms);
  EXPECT_EQ(log_.count(), 0u);
  EXPECT_TRUE(timers.contains(1));
  advance_to(24ms);
  EXPECT_EQ(log_.count(), 0u);
  advance_to(25ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "x"}}));
  advance_to(100ms);
  EXPECT_EQ(log_.count(), 1u);
}

// Repeated touches (the idle-timeout pattern) keep pushing the key out.
TEST_F(KeyedTimers, repeated_moves_later_keep_the_key_pending) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  timers.set(1, "idle", 10ms);
  for (int t = 5; t <= 100; t += 5) {
    advance_to(std::chrono::milliseconds(t));
    ASSERT_TRUE(timers.reschedule_after(1, 10ms)) << "at " << t << " ms";
  }
  EXPECT_EQ(log_.count(), 0u);
  advance_to(111ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "idle"}}));
}

// A key moved earlier fires at its new, earlier time.
TEST_F(KeyedTimers, move_earlier_fires_earlier) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  timers.set(1, "x", 100ms);
  advance_to(2ms);
  EXPECT_TRUE(timers.reschedule_after(1, 5ms));  // due at 7 ms
  advance_to(6ms);
  EXPECT_EQ(log_.count(), 0u);
  advance_to(7ms);
  EXPECT_EQ(log_.calls(), (Calls{{1, "x"}}));
  advance_to(200ms);
  EXPECT_EQ(log_.count(), 1u);
}

// move returns true iff the key was pending: false for unknown, fired and removed keys.
TEST_F(KeyedTimers, move_returns_true_iff_key_was_pending) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  EXPECT_FALSE(timers.reschedule_after(1, 10ms));
  timers.set(1, "x", 10ms);
  timers.set(2, "y", 50ms);
  EXPECT_TRUE(timers.reschedule_after(1, 10ms));
  advance_to(11ms);
  EXPECT_EQ(log_.count(), 1u);
  EXPECT_FALSE(timers.reschedule_after(1, 10ms));
  EXPECT_FALSE(timers.contains(1)) << "a failed move must not make the key pending";
  EXPECT_TRUE(timers.remove(2));
  EXPECT_FALSE(timers.reschedule_after(2, 10ms));
  advance_to(100ms);
  EXPECT_EQ(log_.count(), 1u);
}

// remove prevents execute, destroys the value, and returns true iff the key was pending.
TEST_F(KeyedTimers, remove_prevents_execute_and_returns_true_iff_pending) {
  Log<int, std::shared_ptr<int>> log;
  chime::KeyedTimers<int, std::shared_ptr<int>> timers(runtime_, log.execute());
  auto value = std::make_shared<int>(5);
  std::weak_ptr<int> watch = value;
  timers.set(1, std::move(value), 10ms);
  EXPECT_TRUE(timers.remove(1));
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(timers.remove(1));
  EXPECT_FALSE(timers.contains(1));
  EXPECT_FALSE(timers.remove(99));
  advance_to(50ms);
  EXPECT_EQ(log.count(), 0u);
  timers.set(2, std::make_shared<int>(6), 10ms);
  advance_to(61ms);
  EXPECT_FALSE(timers.remove(2)) << "a fired key is not pending";
}

// contains and size track exactly the pending keys.
TEST_F(KeyedTimers, contains_and_size_track_pending_keys) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  EXPECT_EQ(timers.size(), 0u);
  timers.set(1, "a", 10ms);
  timers.set(2, "b", 20ms);
  timers.set(3, "c", 30ms);
  timers.set(3, "c2", 30ms);
  EXPECT_EQ(timers.size(), 3u);
  advance_to(11ms);
  EXPECT_FALSE(timers.contains(1));
  EXPECT_TRUE(timers.contains(2));
  EXPECT_TRUE(timers.contains(3));
  EXPECT_EQ(timers.size(), 2u);
  timers.remove(2);
  EXPECT_FALSE(timers.contains(2));
  EXPECT_EQ(timers.size(), 1u);
  timers.reschedule_after(3, 1ms);
  advance_to(20ms);
  EXPECT_EQ(timers.size(), 0u);
  EXPECT_FALSE(timers.contains(3));
}

// Keys spread over all shards: each executes exactly once with its own value.
TEST_F(KeyedTimers, many_keys_each_execute_exactly_once_with_their_value) {
  Log<int, int> log;
  chime::KeyedTimers<int, int> timers(runtime_, log.execute());
  constexpr int kKeys = 5000;
  for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(timers.set(k, k * 3, std::chrono::milliseconds(1 + k % 50)));
  EXPECT_EQ(timers.size(), static_cast<std::size_t>(kKeys));
  advance_to(25ms);
  const std::size_t early = log.count();
  EXPECT_GT(early, 0u);
  EXPECT_LT(early, static_cast<std::size_t>(kKeys));
  advance_to(60ms);
  auto calls = log.calls();
  ASSERT_EQ(calls.size(), static_cast<std::size_t>(kKeys));
  std::sort(calls.begin(), calls.end());
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(calls[k].first, k);
    EXPECT_EQ(calls[k].second, k * 3);
  }
  EXPECT_EQ(timers.size(), 0u);
}

// drain hands every pending key to fn on the caller's thread, empties the
// timers, and none of the drained keys executes later.
TEST_F(KeyedTimers, drain_calls_fn_for_every_pending_key_on_caller_thread_and_empties) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  constexpr int kKeys = 200;
  for (int k = 0; k < kKeys; ++k) timers.set(k, "v" + std::to_string(k), 10ms);
  timers.set(1000, "fired", 1ms);
  advance_to(2ms);
  ASSERT_EQ(log_.count(), 1u);

  std::map<int, std::string> drained;
  bool all_on_caller = true;
  const auto caller = std::this_thread::get_id();
  const std::size_t n = timers.drain([&](const int& key, std::string&& value) {
    all_on_caller = all_on_caller && std::this_thread::get_id() == caller;
    EXPECT_TRUE(drained.emplace(key, std::move(value)).second) << "key " << key << " drained twice";
  });
  EXPECT_EQ(n, static_cast<std::size_t>(kKeys));
  EXPECT_TRUE(all_on_caller);
  ASSERT_EQ(drained.size(), static_cast<std::size_t>(kKeys));
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(drained[k], "v" + std::to_string(k));
  EXPECT_EQ(timers.size(), 0u);
  EXPECT_FALSE(timers.contains(0));
  advance_to(100ms);
  EXPECT_EQ(log_.count(), 1u) << "a drained key executed";
  EXPECT_EQ(timers.drain([](const int&, std::string&&) { ADD_FAILURE() << "nothing to drain"; }), 0u);
  EXPECT_TRUE(timers.set(0, "again", 1ms)) << "a drained key is not pending";
}

// fn may call back into the timers (no lock is held while it runs).
TEST_F(KeyedTimers, drain_fn_may_rearm_keys) {
  chime::KeyedTimers<int, std::string> timers(runtime_, log_.execute());
  timers.set(1, "a", 50ms);
  timers.set(2, "b", 50ms);
  timers.drain([&](const int& key, std::string&& value) { timers.set(key + 10, value + "'", 1ms); });
  advance_to(2ms);
  auto calls = log_.calls();
  std::sort(calls.begin(), calls.end());
  EXPECT_EQ(calls, (Calls{{11, "a'"}, {12, "b'"}}));
}

// Destroying the timers cancels their pending keys: execute is never called
// afterwards and the values are destroyed.
TEST_F(KeyedTimers, destruction_cancels_pending_keys) {
  Log<int, std::shared_ptr<int>> log;
  std::vector<std::weak_ptr<int>> watches;
  {
    chime::KeyedTimers<int, std::shared_ptr<int>> timers(runtime_, log.execute());
    for (int k = 0; k < 100; ++k) {
      auto value = std::make_shared<int>(k);
      watches.push_back(value);
      timers.set(k, std::move(value), std::chrono::milliseconds(10 + k));
    }
    advance_to(5ms);
  }
  for (const auto& w : watches) EXPECT_TRUE(w.expired());
  advance_to(500ms);
  EXPECT_EQ(log.count(), 0u);
  EXPECT_EQ(runtime_.stats().pending, 0u) << "the destructor should cancel its timers";
}

// execute may call back into the timers: a key can re-arm itself.
TEST_F(KeyedTimers, execute_may_rearm_its_own_key) {
  std::vector<std::pair<int, Duration>> runs;
  std::mutex mu;
  chime::KeyedTimers<int, int>* self = nullptr;
  chime::KeyedTimers<int, int> timers(runtime_, [&](const int& key, int&& n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      runs.emplace_back(n, clock_.now() - kStart);
    }
    if (n < 3) {
      EXPECT_TRUE(self->set(key, n + 1, 10ms));
    }
  });
  self = &timers;
  timers.set(1, 1, 1ms);
  for (int t = 1; t <= 40; ++t) advance_to(std::chrono::milliseconds(t));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0], (std::pair<int, Duration>{1, 1ms}));
  EXPECT_EQ(runs[1], (std::pair<int, Duration>{2, 11ms}));
  EXPECT_EQ(runs[2], (std::pair<int, Duration>{3, 21ms}));
}

// An exception from execute goes to the runtime's on_error; the key counts as fired.
TEST(KeyedTimersStandalone, execute_exception_goes_to_on_error_and_key_is_gone) {
  chime::ManualClock clock{kStart};
  std::atomic<int> errors{0};
  auto options = manual_options(clock, 1);
  options.on_error = [&](chime::TimerId, std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::runtime_error& err) {
      if (std::string(err.what()) == "boom") ++errors;
    }
  };
  chime::Runtime runtime(options);
  chime::KeyedTimers<int, int> timers(runtime, [](const int&, int&&) { throw std::runtime_error("boom"); });
  timers.set(1, 1, 1ms);
  timers.set(2, 2, 1ms);
  clock.set(kStart + 2ms);
  runtime.flush();
  EXPECT_EQ(errors.load(), 2);
  EXPECT_FALSE(timers.contains(1));
  EXPECT_EQ(timers.size(), 0u);
  EXPECT_TRUE(timers.set(1, 3, 1ms));
}

// After Runtime::shutdown, set throws StoppedError and leaves the key not pending.
TEST(KeyedTimersStandalone, set_after_shutdown_throws_and_leaves_key_not_pending) {
  chime::ManualClock clock{kStart};
  chime::Runtime runtime(manual_options(clock, 1));
  Log<int, int> log;
  chime::KeyedTimers<int, int> timers(runtime, log.execute());
  timers.set(1, 1, 10ms);
  runtime.shutdown();
  EXPECT_THROW(timers.set(2, 2, 10ms), chime::StoppedError);
  EXPECT_FALSE(timers.contains(2));
  EXPECT_THROW(timers.set(1, 3, 10ms), chime::StoppedError);
  EXPECT_FALSE(timers.contains(1));
  EXPECT_EQ(timers.size(), 0u);
  EXPECT_EQ(log.count(), 0u);
}

TEST(KeyedTimersStandalone, empty_execute_is_rejected) {
  chime::ManualClock clock{kStart};
  chime::Runtime runtime(manual_options(clock, 1));
  EXPECT_THROW((chime::KeyedTimers<int, int>(runtime, nullptr)), std::invalid_argument);
}

// --- Races made deterministic: an operation on key B while B's fire has
// already been handed to the (single) worker, which is blocked running key A.

class KeyedTimersDispatched : public ::testing::Test {
 protected:
  KeyedTimersDispatched()
      : timers_(std::in_place, runtime_, [this](const int& key, std::string&& value) {
          if (key == kBlocker) {
            blocker_started_.set_value();
            release_blocker_.get_future().wait();
            blocker_finished_ = true;
          }
          log_.add(key, std::move(value));
        }) {}

  // A (due 1 ms) and B (due 2 ms) fire in the same advance to 5 ms; with one
  // worker A runs first and blocks, so B's run is claimed but not started.
  // Returns the thread running that flush.
  std::thread start_blocked_flush() {
    timers_->set(kBlocker, "A", 1ms);
    timers_->set(kB, "B-old", 2ms);
    clock_.set(kStart + 5ms);
    std::thread flusher([this] { runtime_.flush(); });
    blocker_started_.get_future().wait();
    std::this_thread::sleep_for(20ms);  // let the wheel thread finish the advance (claim B)
    return flusher;
  }
  void release_blocker() { release_blocker_.set_value(); }

  static constexpr int kBlocker = 1;
  static constexpr int kB = 2;
  chime::ManualClock clock_{kStart};
  chime::Runtime runtime_{manual_options(clock_, 1)};
  Log<int, std::string> log_;
  std::promise<void> blocker_started_;
  std::promise<void> release_blocker_;
  std::atomic<bool> blocker_finished_{false};
  std::optional<chime::KeyedTimers<int, std::string>> timers_;
};

// move of a key whose fire is already dispatched still postpones it: the old run does nothing.
TEST_F(KeyedTimersDispatched, move_later_while_fire_dispatched_postpones_it) {
  std::thread flusher = start_blocked_flush();
  EXPECT_TRUE(timers_->reschedule_after(kB, 10ms));  // due at 15 ms
  release_blocker();
  flusher.join();
  EXPECT_EQ(log_.calls(), (Calls{{kBlocker, "A"}}));
  EXPECT_TRUE(timers_->contains(kB));
  clock_.set(kStart + 14ms);
  runtime_.flush();
  EXPECT_EQ(log_.count(), 1u);
  clock_.set(kStart + 15ms);
  runtime_.flush();
  EXPECT_EQ(log_.calls(), (Calls{{kBlocker, "A"}, {kB, "B-old"}}));
  clock_.set(kStart + 100ms);
  runtime_.flush();
  EXPECT_EQ(log_.count(), 2u);
}

// remove of a key whose fire is already dispatched wins: it never executes.
TEST_F(KeyedTimersDispatched, remove_while_fire_dispatched_prevents_execute) {
  std::thread flusher = start_blocked_flush();
  EXPECT_TRUE(timers_->remove(kB));
  release_blocker();
  flusher.join();
  clock_.set(kStart + 100ms);
  runtime_.flush();
  EXPECT_EQ(log_.calls(), (Calls{{kBlocker, "A"}}));
  EXPECT_FALSE(timers_->contains(kB));
}

// set of a key whose fire is already dispatched replaces it: only the new value executes, at its time.
TEST_F(KeyedTimersDispatched, set_while_fire_dispatched_executes_only_the_new_value) {
  std::thread flusher = start_blocked_flush();
  EXPECT_FALSE(timers_->set(kB, "B-new", 10ms));  // due at 15 ms
  release_blocker();
  flusher.join();
  EXPECT_EQ(log_.calls(), (Calls{{kBlocker, "A"}}));
  clock_.set(kStart + 16ms);
  runtime_.flush();
  EXPECT_EQ(log_.calls(), (Calls{{kBlocker, "A"}, {kB, "B-new"}}));
}

// The destructor waits for an execute in progress, and nothing executes after it returns.
TEST_F(KeyedTimersDispatched, destructor_waits_for_execute_in_progress) {
  std::thread flusher = start_blocked_flush();
  std::atomic<bool> destroyed{false};
  bool finished_when_destroyed = false;
  std::thread destroyer([&] {
    timers_.reset();
    finished_when_destroyed = blocker_finished_.load();
    destroyed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(destroyed.load()) << "the destructor returned while execute was running";
  release_blocker();
  destroyer.join();
  flusher.join();
  EXPECT_TRUE(finished_when_destroyed);
  const std::size_t calls_at_destroy = log_.count();
  clock_.set(kStart + 100ms);
  runtime_.flush();
  EXPECT_EQ(log_.count(), calls_at_destroy) << "execute ran after the destructor returned";
}

// Runs a KeyedTimers whose execute destroys it.
void destroy_from_inside_execute() {
  chime::ManualClock clock{kStart};
  chime::Runtime runtime(manual_options(clock, 1));
  chime::KeyedTimers<int, int>* timers = nullptr;
  timers = new chime::KeyedTimers<int, int>(runtime, [&timers](const int&, int&&) { delete timers; });
  timers->set(1, 1, 1ms);
  clock.set(kStart + 2ms);
  runtime.flush();
}

// Destroying the timers from inside their own execute would wait for itself: it terminates instead.
TEST(KeyedTimersStandalone, destroy_from_inside_own_execute_terminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(destroy_from_inside_execute(), "destroyed from inside its own execute");
}

}  // namespace
