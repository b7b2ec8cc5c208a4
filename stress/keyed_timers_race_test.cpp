// SPDX-License-Identifier: BSL-1.0
// Stress tests for chime::KeyedTimers (include/chime/keyed_timers.hpp): several
// threads set / move / remove (and now and then drain) overlapping keys with
// delays of 0-5 ms on a SteadyClock runtime with 1 ms precision, so keys
// fire while they are being replaced, moved and removed. Meant to run under
// ThreadSanitizer; each test is bounded to about a second of hammering.
//
// Every value carries a unique serial; the Tracker records each serial's one
// outcome: executed (by execute, with its own key), dropped (its destructor
// ran while it still held the serial: replaced by set, removed by remove, or
// cancelled by the destructor) or drained. Checked:
// - no serial has two outcomes (executes at most once, never after being
//   replaced, removed or drained), and execute/drain get the serial's own key;
// - each call drops exactly the values it should, on the caller's thread:
//   set returning false drops one value of that key, set returning true none,
//   remove returning true one, remove returning false and move none;
// - on keys owned by one thread, the return values follow that thread's own
//   history (a key it removed is not pending; a set that replaced dropped
//   exactly the serial it last set; a move that failed means that serial
//   executed or was drained);
// - at the end, once everything due has fired: every serial has an outcome,
//   size() == 0 and no key is pending; after destruction under load, every
//   serial has an outcome as soon as the destructor returns and no execute
//   runs after it.
//
// The seed is printed; replay with --seed=N (or CHIME_STRESS_SEED=N).
#include "stress_seed.hpp"
#include "stress_support.hpp"

#include <chime/keyed_timers.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;

enum Outcome : std::uint8_t { none = 0, executed = 1, dropped = 2, drained = 3 };

// The fate of every serial. Serial 0 means "no value".
class Tracker {
 public:
  explicit Tracker(std::size_t capacity) : outcomes_(capacity), keys_(capacity, -1) {}

  // A new serial for a value of `key`, or 0 when the capacity is used up.
  std::uint64_t create(int key) {
    const std::uint64_t s = next_.fetch_add(1, std::memory_order_relaxed);
    if (s >= outcomes_.size()) return 0;
    keys_[s] = key;  // read by whoever finishes it: ordered by set -> execute/remove
    return s;
  }

  void finish(std::uint64_t serial, Outcome outcome, int key) {
    const Outcome old = outcomes_[serial].exchange(outcome, std::memory_order_acq_rel);
    if (old != none) fail("serial " + std::to_string(serial) + " had outcome " + std::to_string(old) +
                          " and now " + std::to_string(outcome));
    if (key != keys_[serial]) {
      fail("serial " + std::to_string(serial) + " of key " + std::to_string(keys_[serial]) + " finished as key " +
           std::to_string(key));
    }
  }

  Outcome outcome(std::uint64_t serial) const { return outcomes_[serial].load(std::memory_order_acquire); }
  int key_of(std::uint64_t serial) const { return keys_[serial]; }
  std::uint64_t created() const {
    return std::min<std::uint64_t>(next_.load(std::memory_order_relaxed), outcomes_.size());
  }

  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failures_.size() < 20) failures_.push_back(what);
    ++failure_count_;
  }
  std::size_t failure_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_count_;
  }
  std::string failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const auto& f : failures_) all += f + "\n";
    return all;
  }

  // Serials whose outcome is still `none` among [1, created()).
  std::vector<std::uint64_t> unfinished() const {
    std::vector<std::uint64_t> out;
    for (std::uint64_t s = 1; s < created(); ++s) {
      if (outcome(s) == none) out.push_back(s);
    }
    return out;
  }

 private:
  std::atomic<std::uint64_t> next_{1};
  std::vector<std::atomic<Outcome>> outcomes_;
  std::vector<int> keys_;
  mutable std::mutex mu_;
  std::vector<std::string> failures_;
  std::size_t failure_count_ = 0;
};

// The serials dropped on this thread since it last cleared the list.
thread_local std::vector<std::uint64_t> tl_dropped;

// A move-only value holding a serial; destroying it while it holds one
// records the serial as dropped.
class Tracked {
 public:
  Tracked(Tracker* tracker, std::uint64_t serial) : tracker_(tracker), serial_(serial) {}
  Tracked(Tracked&& other) noexcept : tracker_(other.tracker_), serial_(std::exchange(other.serial_, 0)) {}
  Tracked& operator=(Tracked&& other) noexcept {
    if (this != &other) {
      release();
      tracker_ = other.tracker_;
      serial_ = std::exchange(other.serial_, 0);
    }
    return *this;
  }
  ~Tracked() { release(); }

  std::uint64_t take() { return std::exchange(serial_, 0); }

 private:
  void release() {
    if (serial_ != 0) {
      tracker_->finish(serial_, dropped, tracker_->key_of(serial_));
      tl_dropped.push_back(serial_);
      serial_ = 0;
    }
  }
  Tracker* tracker_;
  std::uint64_t serial_;
};

using Timers = chime::KeyedTimers<int, Tracked>;

using stress_support::steady_options;

// 0-5 ms; a quarter of them under 100 us, so keys fire while they are touched.
Duration random_delay(std::mt19937_64& rng) {
  const int max_us = rng() % 4 == 0 ? 100 : 5000;
  return std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(rng));
}

// Checks the drops of one call made on this thread, on key `key`.
void check_drops(Tracker& tracker, const char* call, int key, std::size_t expected) {
  if (tl_dropped.size() != expected) {
    tracker.fail(std::string(call) + " on key " + std::to_string(key) + " dropped " +
                 std::to_string(tl_dropped.size()) + " values, expected " + std::to_string(expected));
  }
  for (std::uint64_t s : tl_dropped) {
    if (tracker.key_of(s) != key) tracker.fail(std::string(call) + " on key " + std::to_string(key) + " dropped a value of key " + std::to_string(tracker.key_of(s)));
  }
}

// What one thread knows about a key only it touches.
struct OwnKey {
  std::uint64_t current = 0;  // the serial it last set, until removed or known gone
  bool known_gone = true;     // not pending for sure (never set, removed, or a move failed)
};

constexpr int kThreads = 4;
constexpr int kSharedKeys = 1024;
constexpr int kOwnKeysPerThread = 256;
constexpr std::size_t kMaxSerials = 4'000'000;

int own_key(int thread, int i) { return kSharedKeys + thread * kOwnKeysPerThread + i; }

// Mixed set/move/remove/contains on shared and owned keys, with occasional
// drains, while keys fire; then everything is checked once all has fired.
TEST(KeyedTimersRace, concurrent_set_move_remove_keep_every_value_accounted_for) {
  chime_stress::print_seed();
  const std::uint64_t seed = chime_stress::seed();
  Tracker tracker(kMaxSerials);
  chime::Runtime runtime(steady_options(3));
  Timers timers(runtime, [&](const int& key, Tracked&& value) {
    const std::uint64_t s = value.take();
    if (s == 0) {
      tracker.fail("execute got an empty value for key " + std::to_string(key));
      return;
    }
    tracker.finish(s, executed, key);
  });

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ops{0};
  // Per thread: serials that must end executed or drained (own keys).
  std::vector<std::vector<std::uint64_t>> must_fire(kThreads);
  std::vector<std::vector<OwnKey>> own(kThreads, std::vector<OwnKey>(kOwnKeysPerThread));

  auto worker = [&](int t) {
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t) * 7919);
    std::uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      ++n;
      const bool owned = rng() % 2 == 0;
      const int i = owned ? static_cast<int>(rng() % kOwnKeysPerThread) : static_cast<int>(rng() % kSharedKeys);
      const int key = owned ? own_key(t, i) : i;
      OwnKey* mine = owned ? &own[t][i] : nullptr;
      const unsigned op = static_cast<unsigned>(rng() % 100);
      tl_dropped.clear();
      if (t == 0 && n % 4000 == 0) {  // drain, rarely
        timers.drain([&](const int& k, Tracked&& value) {
          const std::uint64_t s = value.take();
          if (s != 0) tracker.finish(s, drained, k);
        });
        continue;
      }
      if (op < 45) {
        const std::uint64_t s = tracker.create(key);
        if (s == 0) break;  // out of serials
        const bool inserted = timers.set(key, Tracked(&tracker, s), random_delay(rng));
        check_drops(tracker, "set", key, inserted ? 0 : 1);
        if (mine != nullptr) {
          if (mine->known_gone && !inserted) tracker.fail("set on an own key known gone returned false");
          if (!inserted && (tl_dropped.size() != 1 || tl_dropped[0] != mine->current)) {
            tracker.fail("set that replaced own key " + std::to_string(key) + " did not drop serial " +
                         std::to_string(mine->current));
          }
          if (inserted && mine->current != 0) must_fire[t].push_back(mine->current);
          mine->current = s;
          mine->known_gone = false;
        }
      } else if (op < 80) {
        const bool moved = timers.reschedule_after(key, random_delay(rng));
        check_drops(tracker, "move", key, 0);
        if (mine != nullptr) {
          if (mine->known_gone && moved) tracker.fail("move on an own key known gone returned true");
          if (!moved && mine->current != 0) {
            must_fire[t].push_back(mine->current);
            mine->current = 0;
          }
          if (!moved) mine->known_gone = true;
        }
      } else if (op < 95) {
        const bool removed = timers.remove(key);
        check_drops(tracker, "remove", key, removed ? 1 : 0);
        if (mine != nullptr) {
          if (mine->known_gone && removed) tracker.fail("remove on an own key known gone returned true");
          if (removed && (tl_dropped.size() != 1 || tl_dropped[0] != mine->current)) {
            tracker.fail("remove of own key " + std::to_string(key) + " did not drop serial " +
                         std::to_string(mine->current));
          }
          if (!removed && mine->current != 0) must_fire[t].push_back(mine->current);
          mine->current = 0;
          mine->known_gone = true;
        }
      } else {
        const bool pending = timers.contains(key);
        if (mine != nullptr && mine->known_gone && pending) tracker.fail("an own key known gone is pending");
      }
    }
    ops.fetch_add(n, std::memory_order_relaxed);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  std::this_thread::sleep_for(1s);
  stop = true;
  for (auto& th : threads) th.join();

  // Let everything still pending (due within 5 ms) fire.
  for (int i = 0; i < 400 && timers.size() != 0; ++i) {
    std::this_thread::sleep_for(5ms);
    runtime.flush();
  }
  runtime.flush();

  for (int t = 0; t < kThreads; ++t) {
    for (const OwnKey& k : own[t]) {
      if (k.current != 0) must_fire[t].push_back(k.current);
    }
    for (std::uint64_t s : must_fire[t]) {
      const Outcome o = tracker.outcome(s);
      if (o != executed && o != drained) {
        tracker.fail("serial " + std::to_string(s) + " of own key " + std::to_string(tracker.key_of(s)) +
                     " should have executed or been drained; outcome " + std::to_string(o));
      }
    }
  }
  EXPECT_EQ(timers.size(), 0u);
  for (int k = 0; k < kSharedKeys; ++k) EXPECT_FALSE(timers.contains(k)) << "key " << k;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kOwnKeysPerThread; ++i) EXPECT_FALSE(timers.contains(own_key(t, i)));
  }
  const auto unfinished = tracker.unfinished();
  EXPECT_TRUE(unfinished.empty()) << unfinished.size() << " values neither executed, dropped nor drained; first "
                                  << unfinished.front();
  EXPECT_EQ(tracker.failure_count(), 0u) << tracker.failures();
  std::size_t outcome_counts[4] = {0, 0, 0, 0};
  for (std::uint64_t s = 1; s < tracker.created(); ++s) ++outcome_counts[tracker.outcome(s)];
  const chime::Stats stats = runtime.stats();
  std::cout << "KeyedTimersRace: " << ops.load() << " ops, " << tracker.created() - 1 << " values: "
            << outcome_counts[executed] << " executed, " << outcome_counts[dropped] << " dropped, "
            << outcome_counts[drained] << " drained; runtime scheduled " << stats.scheduled << ", rescheduled "
            << stats.rescheduled << ", cancelled " << stats.cancelled << "\n";
  EXPECT_GT(outcome_counts[executed], 0u);
  EXPECT_GT(outcome_counts[dropped], 0u);
}

// Destroying the timers while keys fire and while execute (which re-arms
// keys) runs: as soon as the destructor returns every value has its outcome
// and no execute is running; none starts afterwards.
TEST(KeyedTimersRace, destruction_under_load_waits_for_executes_and_drops_the_rest) {
  chime_stress::print_seed();
  const std::uint64_t seed = chime_stress::seed();
  chime::Runtime runtime(steady_options(3));
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    Tracker tracker(1'000'000);
    std::atomic<int> in_execute{0};
    std::atomic<bool> destroyed{false};
    std::atomic<int> after_destroy{0};
    // A raw pointer, so execute can still reach the object while it is being destroyed.
    Timers* timers = nullptr;
    timers = new Timers(runtime, [&](const int& key, Tracked&& value) {
      in_execute.fetch_add(1, std::memory_order_relaxed);
      if (destroyed.load(std::memory_order_relaxed)) after_destroy.fetch_add(1, std::memory_order_relaxed);
      const std::uint64_t s = value.take();
      tracker.finish(s, executed, key);
      if (s % 3 == 0) {  // re-arm another key from inside execute, sometimes while being destroyed
        const int next = (key + 1) % kSharedKeys;
        const std::uint64_t n = tracker.create(next);
        if (n != 0) timers->set(next, Tracked(&tracker, n), std::chrono::microseconds(s % 1000));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(s % 50));
      in_execute.fetch_sub(1, std::memory_order_release);
    });
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<std::uint64_t>(round * kThreads + t));
        while (!stop.load(std::memory_order_relaxed)) {
          const int key = static_cast<int>(rng() % kSharedKeys);
          const unsigned op = static_cast<unsigned>(rng() % 10);
          const Duration delay = std::chrono::microseconds(rng() % 2000);
          if (op < 5) {
            const std::uint64_t s = tracker.create(key);
            if (s == 0) break;
            timers->set(key, Tracked(&tracker, s), delay);
          } else if (op < 8) {
            timers->reschedule_after(key, delay);
          } else {
            timers->remove(key);
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + round % 5 * 5));
    stop = true;
    for (auto& th : threads) th.join();
    // Keys are firing right now (delays up to 2 ms); destroy under that load.
    delete timers;
    destroyed.store(true, std::memory_order_relaxed);
    // The destructor waited for every execute: all of them are done...
    EXPECT_EQ(in_execute.load(std::memory_order_acquire), 0) << "round " << round;
    // ...and every value has exactly one outcome already.
    const auto unfinished = tracker.unfinished();
    EXPECT_TRUE(unfinished.empty()) << "round " << round << ": " << unfinished.size()
                                    << " values with no outcome after the destructor returned";
    // Stale timers may still fire in the runtime; none may execute.
    std::this_thread::sleep_for(5ms);
    runtime.flush();
    EXPECT_EQ(after_destroy.load(), 0) << "round " << round << ": execute ran after the destructor returned";
    EXPECT_EQ(tracker.failure_count(), 0u) << "round " << round << ":\n" << tracker.failures();
  }
}

}  // namespace
