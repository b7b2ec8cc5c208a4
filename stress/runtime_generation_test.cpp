// SPDX-License-Identifier: BSL-1.0
// Stress 7: slot reuse across generations (runtime.hpp: a TimerId is
// {slot, generation}, a stale id is detected, never dereferenced into a newer
// timer; docs/state-machine.md "The word"). Threads schedule timers and
// cancel them, or let them fire, in loops, so the slab's few slots are reused
// many times, and keep every id they issued. Checked for every timer:
// - stale ids never act on the newer timer in their slot: after each
//   schedule, the thread attacks the new timer's slot with its own older ids
//   of that slot, and with finished ids of any thread: cancel() and
//   reschedule_*() return false, state() reads unknown (or, for a finished id
//   whose slot was not reused yet, its own outcome), and the newer timer then
//   still cancels (cancel returns true) or fires exactly once, with its own
//   id and due time;
// - no issued TimerId has generation 0 (operator bool is true);
// - per slot, the generations issued are exactly the next ones after the
//   slab's initial generation, each once, skipping 0; at the end every id but
//   the last of its slot is stale (cancel/reschedule false, state unknown) and
//   the last reads its own outcome; stats() agree with the per-timer counts.
//
// The same source builds into two executables. chime_stress_tests links
// chime::runtime (generations start at 1). chime_genwrap_tests links
// chime_runtime_genwrap, built with CHIME_INITIAL_GENERATION=0xFFFFFFF0u, and
// defines CHIME_STRESS_INITIAL_GENERATION to the same value: there every slot's
// generation wraps past 2^32 (to 1, skipping 0) after 15 uses, and the test
// also requires that wraps happened, that ids from before a wrap were used as
// stale ids after it, and that they were rejected.
//
// Bounded by an iteration count and a wall-time budget; the seed is printed
// (replay with --seed=N).

#include "stress_seed.hpp"
#include "stress_support.hpp"
#include "timer_log.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#ifndef CHIME_STRESS_INITIAL_GENERATION
#define CHIME_STRESS_INITIAL_GENERATION 0u  // the runtime's default (timer_slab.hpp)
#endif

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::Firing;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

constexpr std::uint32_t kInitialGeneration = CHIME_STRESS_INITIAL_GENERATION;
constexpr bool kWrapBuild = kInitialGeneration != 0;
// The first generation a fresh slot issues, and the number of uses before its generation wraps to 1.
constexpr std::uint32_t kFirstGeneration = kInitialGeneration + 1 == 0 ? 1 : kInitialGeneration + 1;
constexpr std::uint64_t kUsesBeforeWrap = (std::uint64_t{1} << 32) - kFirstGeneration;

// How many uses of a slot after the first one issued generation g (0 for kFirstGeneration), or
// UINT64_MAX for g == 0, which is never issued.
std::uint64_t use_index(std::uint32_t g) {
  if (g == 0) return UINT64_MAX;
  return g >= kFirstGeneration ? g - kFirstGeneration : kUsesBeforeWrap + (g - 1);
}

using stress_support::ns;
using stress_support::pack;
using stress_support::unpack;

enum class Kind : int { cancel, fire };

// id 0: not scheduled (budget ran out); due: of the last successful schedule/reschedule.
struct TimerLog : stress_support::TimerLog {
  std::atomic<int> kind{0};
};

// Finished timers of every thread, as log index + 1: a ring overwritten in turn. Lock-free.
class Graveyard {
 public:
  static constexpr std::size_t kSize = 4096;
  void add(std::size_t index) {
    entries_[next_.fetch_add(1, std::memory_order_relaxed) % kSize].store(index + 1, std::memory_order_release);
  }
  // A random finished timer's log index, or false if none yet.
  bool pick(std::mt19937_64& rng, std::size_t& index) const {
    const std::size_t e = entries_[rng() % kSize].load(std::memory_order_acquire);
    if (e == 0) return false;
    index = e - 1;
    return true;
  }

 private:
  std::vector<std::atomic<std::size_t>> entries_ = std::vector<std::atomic<std::size_t>>(kSize);
  std::atomic<std::size_t> next_{0};
};

struct Counts {
  std::atomic<std::uint64_t> zero_generation{0};
  std::atomic<std::uint64_t> stale_attacks{0}, stale_cancel_true{0}, stale_resched_true{0}, stale_state_not_unknown{0};
  std::atomic<std::uint64_t> pre_wrap_attacks{0};  // stale generation numerically above the newer one's: across a wrap
  std::atomic<std::uint64_t> graveyard_attacks{0}, graveyard_cancel_true{0}, graveyard_resched_true{0};
  std::atomic<std::uint64_t> graveyard_state_bad{0};
  std::atomic<std::uint64_t> newer_cancel_lost{0};  // the newer timer's own cancel returned false
  std::atomic<std::uint64_t> own_reschedules_won{0};
};

// 3 threads, each with a Producer, run up to 6,000 iterations each: schedule a timer (half due 10 s ahead
// and cancelled in the same iteration, half due within 1 ms and left to fire; at most 8 in flight per thread,
// so a few dozen slots are reused over and over), attack its slot with the thread's older ids of that slot
// and with finished ids of any thread, then cancel it or (sometimes) reschedule it. Stale ids never act;
// every timer is cancelled or fires exactly once, with its own id and due; generations follow each other.
TEST(RuntimeGeneration, stale_ids_never_act_on_newer_timers_in_reused_slots) {
  chime_stress::print_seed();
  constexpr std::size_t kThreads = 3, kIterations = 6'000, kTimers = kThreads * kIterations, kMaxInFlight = 8;
  std::vector<TimerLog> logs(kTimers);
  Graveyard graveyard;
  Counts counts;
  chime::RuntimeOptions options;
  options.precision = 1ms;
  options.workers = 2;
  Runtime rt(options);
  const auto budget_end = std::chrono::steady_clock::now() + 3s;
  std::atomic<bool> budget_hit{false};
  std::vector<std::atomic<std::uint64_t>> fired_by_thread(kThreads);

  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(chime_stress::seed() * 61 + t);
      chime::Producer producer = rt.producer();
      std::unordered_map<std::uint32_t, std::vector<TimerId>> history;  // this thread's ids, per slot, in issue order
      std::uint64_t fire_issued = 0;
      for (std::size_t k = 0; k < kIterations; ++k) {
        if (std::chrono::steady_clock::now() >= budget_end) {
          budget_hit.store(true);
          break;
        }
        while (fire_issued - fired_by_thread[t].load(std::memory_order_acquire) >= kMaxInFlight &&
               std::chrono::steady_clock::now() < budget_end) {
          std::this_thread::sleep_for(50us);
        }
        const std::size_t index = t * kIterations + k;
        TimerLog& log = logs[index];
        const Kind kind = rng() % 2 == 0 ? Kind::cancel : Kind::fire;
        const TimePoint now = rt.clock().now();
        const TimePoint due = kind == Kind::cancel ? now + 10s : now + Duration(static_cast<std::int64_t>(rng() % 1'000'001));
        log.kind.store(static_cast<int>(kind), std::memory_order_relaxed);
        log.due.store(ns(due), std::memory_order_relaxed);
        if (kind == Kind::fire) ++fire_issued;
        const TimerId id =
            producer.schedule_at(due, [&rt, &log, &graveyard, &fired_by_thread, index, t](const Firing& f) {
              log.record_run(rt.clock().now(), f);
              graveyard.add(index);
              fired_by_thread[t].fetch_add(1, std::memory_order_release);
            });
        log.id.store(pack(id), std::memory_order_release);
        if (!id || id.generation() == 0) counts.zero_generation.fetch_add(1);

        // Own older ids of this slot: the newest, the oldest and a random one (all stale: this slot was
        // reused since each, for the timer just scheduled).
        auto& older = history[id.slot()];
        if (!older.empty()) {
          const TimerId picks[3] = {older.back(), older.front(), older[rng() % older.size()]};
          for (const TimerId stale : picks) {
            counts.stale_attacks.fetch_add(1, std::memory_order_relaxed);
            if (stale.generation() > id.generation()) counts.pre_wrap_attacks.fetch_add(1, std::memory_order_relaxed);
            if (producer.cancel(stale)) counts.stale_cancel_true.fetch_add(1);
            const TimePoint to = rng() % 2 == 0 ? now + 5s : now;  // later (the lock-free touch) or earlier
            if (producer.reschedule_at(stale, to)) counts.stale_resched_true.fetch_add(1);
            if (rt.state(stale) != TimerState::unknown) counts.stale_state_not_unknown.fetch_add(1);
          }
        }
        older.push_back(id);

        // A finished timer of any thread: it cannot be cancelled or rescheduled, whether or not its slot was
        // reused; its state is its own outcome or unknown.
        std::size_t dead;
        if (graveyard.pick(rng, dead)) {
          const TimerLog& d = logs[dead];
          const Kind dead_kind = static_cast<Kind>(d.kind.load(std::memory_order_relaxed));
          // A fired timer's callback may run before its scheduler stored the id: take the one it was told.
          const TimerId dead_id = unpack(dead_kind == Kind::fire ? d.fired_id.load(std::memory_order_relaxed)
                                                                 : d.id.load(std::memory_order_relaxed));
          counts.graveyard_attacks.fetch_add(1, std::memory_order_relaxed);
          if (producer.cancel(dead_id)) counts.graveyard_cancel_true.fetch_add(1);
          if (producer.reschedule_at(dead_id, now + 5s)) counts.graveyard_resched_true.fetch_add(1);
          const TimerState st = rt.state(dead_id);
          const bool ok = st == TimerState::unknown ||
                          (dead_kind == Kind::cancel ? st == TimerState::cancelled
                                                     : st == TimerState::running || st == TimerState::fired);
          if (!ok) counts.graveyard_state_bad.fetch_add(1);
        }

        // The newer timer still behaves: a cancel-kind one is cancelled now (due 10 s away: it must win); a
        // fire-kind one is sometimes rescheduled within 1 ms (true unless it already started) and fires.
        if (kind == Kind::cancel) {
          if (producer.cancel(id)) {
            log.cancels_won.fetch_add(1, std::memory_order_relaxed);
            graveyard.add(index);
          } else {
            counts.newer_cancel_lost.fetch_add(1);
          }
        } else if (rng() % 4 == 0) {
          const TimePoint to = rt.clock().now() + Duration(static_cast<std::int64_t>(rng() % 1'000'001));
          if (producer.reschedule_at(id, to)) {
            log.due.store(ns(to), std::memory_order_relaxed);
            counts.own_reschedules_won.fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < give_up) {
    rt.flush();
    if (rt.stats().pending == 0) break;
    std::this_thread::sleep_for(5ms);
  }
  rt.flush();

  // Per timer.
  stress_support::Outcomes o;  // of the issued timers
  std::size_t bad_outcome = 0;
  std::map<std::uint32_t, std::vector<std::size_t>> by_slot;  // log indices per slot
  for (std::size_t i = 0; i < kTimers; ++i) {
    const TimerLog& log = logs[i];
    const std::uint64_t id = log.id.load();
    if (id == 0) continue;
    o.add(log);
    by_slot[unpack(id).slot()].push_back(i);
    const int fires = log.runs.load();
    const bool won = log.cancels_won.load() > 0;
    if (static_cast<Kind>(log.kind.load()) == Kind::cancel ? !(won && fires == 0) : !(fires >= 1 && !won)) {
      ++bad_outcome;
    }
  }
  const std::size_t issued = o.timers, cancelled = o.cancelled, fired = o.ran, fired_twice = o.ran_twice,
                    wrong_id = o.wrong_id, wrong_due = o.wrong_due, early = o.fired_early;

  // Per slot: generations are the next ones after the initial generation, each once; every id but the last
  // is stale; the last reads its own outcome.
  std::size_t slots_not_contiguous = 0, wrapped_slots = 0, max_uses = 0, final_stale_checked = 0,
              final_stale_bad = 0, final_last_bad = 0, pre_wrap_ids_checked = 0;
  for (auto& [slot, indices] : by_slot) {
    std::sort(indices.begin(), indices.end(), [&](std::size_t a, std::size_t b) {
      return use_index(unpack(logs[a].id.load()).generation()) < use_index(unpack(logs[b].id.load()).generation());
    });
    for (std::size_t u = 0; u < indices.size(); ++u) {
      if (use_index(unpack(logs[indices[u]].id.load()).generation()) != u) {
        ++slots_not_contiguous;
        break;
      }
    }
    max_uses = std::max(max_uses, indices.size());
    const bool wrapped = indices.size() > kUsesBeforeWrap;
    if (wrapped) ++wrapped_slots;
    for (std::size_t u = 0; u < indices.size(); ++u) {
      const TimerLog& log = logs[indices[u]];
      const TimerId id = unpack(log.id.load());
      const TimerState st = rt.state(id);
      if (u + 1 < indices.size()) {
        ++final_stale_checked;
        if (wrapped && u < kUsesBeforeWrap) ++pre_wrap_ids_checked;
        if (st != TimerState::unknown || rt.cancel(id) || rt.reschedule_after(id, 1s)) ++final_stale_bad;
      } else {
        const TimerState expected =
            static_cast<Kind>(log.kind.load()) == Kind::cancel ? TimerState::cancelled : TimerState::fired;
        if (st != expected || rt.cancel(id)) ++final_last_bad;
      }
    }
  }
  const chime::Stats s = rt.stats();

  std::printf("[ stress   ] %s build (initial generation %#x): checked %zu timers from %zu threads%s in %zu slots "
              "(up to %zu uses of one slot, %zu slots wrapped past 2^32): %zu cancelled, %zu fired, %zu with a wrong "
              "outcome, %zu fired twice, %zu wrong Firing::id, %zu wrong Firing::due, %zu early, %llu own "
              "reschedules won, %llu ids with generation 0, %llu newer-timer cancels lost; %llu stale-id attacks "
              "(%llu across a wrap): %llu cancels, %llu reschedules returned true, %llu states not unknown; %llu "
              "finished-id attacks: %llu cancels, %llu reschedules returned true, %llu states wrong; final sweep: "
              "%zu slots with non-consecutive generations, %zu stale ids checked (%zu from before their slot "
              "wrapped), %zu acted or were not unknown, %zu last ids not in their own outcome; stats: scheduled %llu "
              "fired %llu cancelled %llu pending %llu\n",
              kWrapBuild ? "genwrap" : "default", kInitialGeneration, issued, kThreads,
              budget_hit.load() ? " (wall-time budget reached)" : "", by_slot.size(), max_uses, wrapped_slots,
              cancelled, fired, bad_outcome, fired_twice, wrong_id, wrong_due, early,
              static_cast<unsigned long long>(counts.own_reschedules_won.load()),
              static_cast<unsigned long long>(counts.zero_generation.load()),
              static_cast<unsigned long long>(counts.newer_cancel_lost.load()),
              static_cast<unsigned long long>(counts.stale_attacks.load()),
              static_cast<unsigned long long>(counts.pre_wrap_attacks.load()),
              static_cast<unsigned long long>(counts.stale_cancel_true.load()),
              static_cast<unsigned long long>(counts.stale_resched_true.load()),
              static_cast<unsigned long long>(counts.stale_state_not_unknown.load()),
              static_cast<unsigned long long>(counts.graveyard_attacks.load()),
              static_cast<unsigned long long>(counts.graveyard_cancel_true.load()),
              static_cast<unsigned long long>(counts.graveyard_resched_true.load()),
              static_cast<unsigned long long>(counts.graveyard_state_bad.load()), slots_not_contiguous,
              final_stale_checked, pre_wrap_ids_checked, final_stale_bad, final_last_bad,
              static_cast<unsigned long long>(s.scheduled), static_cast<unsigned long long>(s.fired),
              static_cast<unsigned long long>(s.cancelled), static_cast<unsigned long long>(s.pending));

  EXPECT_GT(issued, 0u);
  EXPECT_EQ(counts.zero_generation.load(), 0u) << "a schedule returned an id with generation 0 (operator bool false)";
  EXPECT_EQ(counts.stale_cancel_true.load(), 0u) << "cancel(stale id) returned true: it hit a newer timer";
  EXPECT_EQ(counts.stale_resched_true.load(), 0u) << "reschedule(stale id) returned true: it moved a newer timer";
  EXPECT_EQ(counts.stale_state_not_unknown.load(), 0u) << "state(stale id) was not unknown";
  EXPECT_EQ(counts.graveyard_cancel_true.load(), 0u) << "cancel() of a finished timer's id returned true";
  EXPECT_EQ(counts.graveyard_resched_true.load(), 0u) << "reschedule() of a finished timer's id returned true";
  EXPECT_EQ(counts.graveyard_state_bad.load(), 0u) << "state() of a finished id was neither its outcome nor unknown";
  EXPECT_EQ(counts.newer_cancel_lost.load(), 0u) << "a timer due 10 s ahead could not be cancelled after stale attacks";
  EXPECT_EQ(bad_outcome, 0u) << "timers not cancelled-and-never-fired or fired-and-never-cancelled as intended";
  EXPECT_EQ(fired_twice, 0u);
  EXPECT_EQ(wrong_id, 0u);
  EXPECT_EQ(wrong_due, 0u) << "a timer fired with a due time other than its own (moved by a stale reschedule?)";
  EXPECT_EQ(early, 0u);
  EXPECT_GT(counts.stale_attacks.load(), 0u);
  EXPECT_EQ(slots_not_contiguous, 0u) << "a slot issued a generation twice, skipped one, or issued 0";
  EXPECT_EQ(final_stale_bad, 0u);
  EXPECT_EQ(final_last_bad, 0u);
  EXPECT_EQ(s.scheduled, issued);
  EXPECT_EQ(s.fired, fired);
  EXPECT_EQ(s.cancelled, cancelled);
  EXPECT_EQ(s.pending, 0u);
  if (kWrapBuild) {
    EXPECT_GT(wrapped_slots, 0u) << "no slot was reused often enough to wrap its generation";
    EXPECT_GT(counts.pre_wrap_attacks.load(), 0u) << "no id from before a wrap was tried after it";
    EXPECT_GT(pre_wrap_ids_checked, 0u);
  } else {
    EXPECT_GT(max_uses, 16u) << "slots were not reused across many generations";
  }
}

}  // namespace
