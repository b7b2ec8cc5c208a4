// SPDX-License-Identifier: BSL-1.0
// Stress 3: command ordering of chime::Runtime, per producer and across
// producers, on the real (steady) clock (runtime.hpp, ordering
// guarantees; docs/state-machine.md "Cancel before the ADD is
// filed"). Checked for every timer, not a sample:
// - per producer: a cancel posted right after the schedule, from the same
//   Producer, wins (returns true) and the timer never fires; a reschedule
//   posted right after it returns true and the timer fires once, with
//   Firing::due equal to the new due and never before it; a reschedule then a
//   cancel both win and nothing fires. A due time 50 ms out leaves room: a
//   losing call is reported as a violation only if the clock read just after
//   it is still at or before the due time (so the timer cannot have fired);
// - across producers: thread A schedules and publishes each id through a
//   lock-free channel to thread B, which cancels it at once with its own
//   Producer (B's REMOVE may reach the wheel before A's ADD): every cancel wins,
//   nothing fires, no slot leaks or is freed twice (after a flush pending == 0
//   and scheduled == fired + cancelled), and a later burst of schedules reuses
//   the freed slots while the old ids read cancelled or unknown, never pending.
// Bounded by an iteration count and a wall-time budget each; the seed is
// printed (replay with --seed=N).

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
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define CHIME_STRESS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHIME_STRESS_UNDER_TSAN 1
#endif
#endif

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::Firing;
using chime::Runtime;
using chime::TimePoint;
using chime::TimerId;
using chime::TimerState;

using stress_support::ns;
using stress_support::pack;
using stress_support::steady_options;
using stress_support::unpack;
using stress_support::wait_until_idle;

// Wall-time budget of one phase: loops stop at their iteration count or here, whichever is first.
class Budget {
 public:
  explicit Budget(std::chrono::milliseconds ms) : end_(std::chrono::steady_clock::now() + ms) {}
  bool over() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

enum class Op : int { cancel, reschedule_later, reschedule_earlier, reschedule_then_cancel };
constexpr int kOps = 4;

// What one timer saw; one entry per timer. id 0: never scheduled (the budget ran out first); due: the due
// time of the last successful schedule/reschedule.
struct TimerLog : stress_support::TimerLog {
  std::atomic<int> op{0};                  // Op
  std::atomic<std::int64_t> old_due{0};    // due time given to schedule
  std::atomic<int> resched_won{0};         // reschedule() returned true
  std::atomic<int> resched_lost{0};        // ... false while the clock was still at or before the old due
  std::atomic<int> resched_excused{0};     // ... false after the old due had passed (it may have fired)
  std::atomic<int> cancel_lost{0};         // cancel() false while the clock was still at or before the due
  std::atomic<int> cancel_excused{0};      // cancel() false after the due had passed
};

chime::Task record_into(Runtime& rt, TimerLog& log) {
  return [&rt, &log](const Firing& f) { log.record_run(rt.clock().now(), f); };
}

// 4 threads, each with its own Producer, schedule timers due 50-60 ms ahead and at once cancel, reschedule
// (later or earlier) or reschedule-then-cancel them from the same Producer: each such call wins, a cancelled
// timer never fires, a rescheduled one fires exactly once at its new due (Firing::due) and never before it.
TEST(RuntimeOrdering, per_producer_cancel_or_reschedule_right_after_schedule_wins) {
  chime_stress::print_seed();
  constexpr std::size_t kThreads = 4, kPerThread = 3'000, kTimers = kThreads * kPerThread;
  std::vector<TimerLog> logs(kTimers);
  Runtime rt(steady_options(2));
  const Budget budget(2500ms);
  std::atomic<bool> budget_hit{false};

  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(chime_stress::seed() * 53 + t);
      chime::Producer producer = rt.producer();
      for (std::size_t k = 0; k < kPerThread; ++k) {
        if (budget.over()) {
          budget_hit.store(true);
          break;
        }
        TimerLog& log = logs[t * kPerThread + k];
        const Op op = static_cast<Op>(rng() % kOps);
        const TimePoint now = rt.clock().now();
        const TimePoint due = now + 50ms + Duration(static_cast<std::int64_t>(rng() % 10'000'001));
        log.op.store(static_cast<int>(op), std::memory_order_relaxed);
        log.old_due.store(ns(due), std::memory_order_relaxed);
        log.due.store(ns(due), std::memory_order_relaxed);
        const TimerId id = producer.schedule_at(due, record_into(rt, log));
        log.id.store(pack(id), std::memory_order_release);
        if (op != Op::cancel) {
          // Later: 20-40 ms past the old due. Earlier: 20-30 ms from now, before the old due.
          const TimePoint new_due =
              op == Op::reschedule_earlier ? now + 20ms + Duration(static_cast<std::int64_t>(rng() % 10'000'001))
                                           : due + 20ms + Duration(static_cast<std::int64_t>(rng() % 20'000'001));
          if (producer.reschedule_at(id, new_due)) {
            log.due.store(ns(new_due), std::memory_order_relaxed);
            log.resched_won.fetch_add(1, std::memory_order_relaxed);
          } else if (ns(rt.clock().now()) <= ns(due)) {
            log.resched_lost.fetch_add(1, std::memory_order_relaxed);
          } else {
            log.resched_excused.fetch_add(1, std::memory_order_relaxed);
          }
        }
        if (op == Op::cancel || op == Op::reschedule_then_cancel) {
          if (producer.cancel(id)) {
            log.cancels_won.fetch_add(1, std::memory_order_relaxed);
          } else if (ns(rt.clock().now()) <= log.due.load(std::memory_order_relaxed)) {
            log.cancel_lost.fetch_add(1, std::memory_order_relaxed);
          } else {
            log.cancel_excused.fetch_add(1, std::memory_order_relaxed);
          }
        }
        if (k % 64 == 63) std::this_thread::sleep_for(200us);
      }
    });
  }
  for (auto& th : threads) th.join();
  wait_until_idle(rt);

  std::size_t issued = 0, cancels = 0, cancels_won = 0, cancels_lost = 0, excused = 0, fired_after_cancel = 0;
  std::size_t reschedules = 0, reschedules_won = 0, reschedules_lost = 0, resched_fired = 0, not_fired = 0;
  stress_support::Outcomes o;  // of the issued timers
  for (const TimerLog& log : logs) {
    const std::uint64_t id = log.id.load();
    if (id == 0) continue;  // the budget ran out before this timer
    ++issued;
    o.add(log);
    const Op op = static_cast<Op>(log.op.load());
    const int fires = log.runs.load();
    excused += static_cast<std::size_t>(log.cancel_excused.load() + log.resched_excused.load());
    if (op != Op::cancel) {
      ++reschedules;
      reschedules_won += static_cast<std::size_t>(log.resched_won.load());
      reschedules_lost += static_cast<std::size_t>(log.resched_lost.load());
    }
    if (op == Op::cancel || op == Op::reschedule_then_cancel) {
      ++cancels;
      cancels_won += static_cast<std::size_t>(log.cancels_won.load());
      cancels_lost += static_cast<std::size_t>(log.cancel_lost.load());
      if (log.cancels_won.load() > 0 && fires > 0) ++fired_after_cancel;
      if (log.cancels_won.load() == 0 && fires == 0) ++not_fired;
    } else {
      if (fires == 1) ++resched_fired;
      if (fires == 0) ++not_fired;
    }
  }
  const std::size_t fired_twice = o.ran_twice, wrong_due = o.wrong_due, early = o.fired_early, wrong_id = o.wrong_id,
                    total_fires = o.runs;
  const chime::Stats s = rt.stats();
  std::printf("[ stress   ] checked %zu timers from %zu producers%s: %zu cancels right after schedule (%zu won, %zu lost "
              "before the due), %zu reschedules right after schedule (%zu won, %zu lost before the due), %zu losses "
              "excused (clock already past the due), %zu rescheduled timers fired once; %zu fired after a winning "
              "cancel, %zu neither fired nor cancelled, %zu fired twice, %zu fired with a Firing::due other than the "
              "last successful due, %zu early, %zu wrong id; stats: scheduled %llu fired %llu cancelled %llu "
              "rescheduled %llu pending %llu\n",
              issued, kThreads, budget_hit.load() ? " (wall-time budget reached)" : "", cancels, cancels_won,
              cancels_lost, reschedules, reschedules_won, reschedules_lost, excused, resched_fired, fired_after_cancel,
              not_fired, fired_twice, wrong_due, early, wrong_id, static_cast<unsigned long long>(s.scheduled),
              static_cast<unsigned long long>(s.fired), static_cast<unsigned long long>(s.cancelled),
              static_cast<unsigned long long>(s.rescheduled), static_cast<unsigned long long>(s.pending));
  EXPECT_GT(issued, 0u);
  EXPECT_EQ(cancels_lost, 0u) << "a cancel posted right after its schedule returned false before the due time";
  EXPECT_EQ(reschedules_lost, 0u) << "a reschedule posted right after its schedule returned false before the due time";
  EXPECT_EQ(fired_after_cancel, 0u) << "timers fired although a cancel returned true";
  EXPECT_EQ(not_fired, 0u) << "timers neither fired nor cancelled";
  EXPECT_EQ(fired_twice, 0u);
  EXPECT_EQ(wrong_due, 0u) << "a rescheduled timer fired with a due other than its new one (at its old due?)";
  EXPECT_EQ(early, 0u) << "a timer's callback saw the runtime clock before its (new) due time";
  EXPECT_EQ(wrong_id, 0u);
  EXPECT_EQ(s.scheduled, issued);
  EXPECT_EQ(s.fired, total_fires);
  EXPECT_EQ(s.cancelled, cancels_won);
  EXPECT_EQ(s.rescheduled, reschedules_won);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.scheduled, s.fired + s.cancelled);
}

// A single-writer, single-reader channel of (id, due) entries: the writer fills entry k, then publishes
// count = k + 1 with release; the reader acquires count. Lock-free; no entry is ever overwritten.
struct Channel {
  explicit Channel(std::size_t n) : ids(n), dues(n) {}
  std::vector<std::atomic<std::uint64_t>> ids;
  std::vector<std::atomic<std::int64_t>> dues;
  std::atomic<std::size_t> count{0};
  std::atomic<bool> closed{false};
};

// 2 pairs of threads: A schedules timers due 50-60 ms ahead with its
// Producer and publishes each id through a lock-free channel; B cancels each at once with its own Producer,
// so B's REMOVE can reach the wheel before A's ADD. Every cancel wins and nothing fires; after a flush
// pending == 0 and scheduled == fired + cancelled; a later burst of schedules reuses the freed slots, and
// every old id reads cancelled or unknown (never pending), and unknown once its slot was reused.
TEST(RuntimeOrdering, cross_producer_cancel_overtaking_its_schedule_wins_and_frees_the_slot) {
  chime_stress::print_seed();
  {
    constexpr std::size_t kPairs = 2, kPerPair = 6'000, kTimers = kPairs * kPerPair;
    std::vector<TimerLog> logs(kTimers);
    Runtime rt(steady_options(2));
    const Budget budget(1500ms);
    std::atomic<bool> budget_hit{false};
    std::vector<std::unique_ptr<Channel>> channels;
    for (std::size_t p = 0; p < kPairs; ++p) channels.push_back(std::make_unique<Channel>(kPerPair));

    std::vector<std::thread> threads;
    for (std::size_t p = 0; p < kPairs; ++p) {
      threads.emplace_back([&, p] {  // A: schedules and publishes
        std::mt19937_64 rng(chime_stress::seed() * 59 + p);
        chime::Producer producer = rt.producer();
        Channel& ch = *channels[p];
        for (std::size_t k = 0; k < kPerPair; ++k) {
          if (budget.over()) {
            budget_hit.store(true);
            break;
          }
          TimerLog& log = logs[p * kPerPair + k];
          const TimePoint due = rt.clock().now() + 50ms + Duration(static_cast<std::int64_t>(rng() % 10'000'001));
          log.op.store(static_cast<int>(Op::cancel), std::memory_order_relaxed);
          log.due.store(ns(due), std::memory_order_relaxed);
          const TimerId id = producer.schedule_at(due, record_into(rt, log));
          log.id.store(pack(id), std::memory_order_relaxed);
          ch.ids[k].store(pack(id), std::memory_order_relaxed);
          ch.dues[k].store(ns(due), std::memory_order_relaxed);
          ch.count.store(k + 1, std::memory_order_release);
          if (k % 128 == 127) std::this_thread::sleep_for(100us);
        }
        ch.closed.store(true, std::memory_order_release);
      });
      threads.emplace_back([&, p] {  // B: cancels each id as soon as it is published
        chime::Producer producer = rt.producer();
        Channel& ch = *channels[p];
        std::size_t next = 0;
        for (;;) {
          const bool closed = ch.closed.load(std::memory_order_acquire);
          const std::size_t available = ch.count.load(std::memory_order_acquire);
          if (next == available) {
            if (closed) break;
            std::this_thread::yield();
            continue;
          }
          for (; next < available; ++next) {
            TimerLog& log = logs[p * kPerPair + next];
            const std::int64_t due = ch.dues[next].load(std::memory_order_relaxed);
            if (producer.cancel(unpack(ch.ids[next].load(std::memory_order_relaxed)))) {
              log.cancels_won.fetch_add(1, std::memory_order_relaxed);
            } else if (ns(rt.clock().now()) <= due) {
              log.cancel_lost.fetch_add(1, std::memory_order_relaxed);
            } else {
              log.cancel_excused.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    // A cancel posts no command: a timer cancelled after the wheel filed it stays filed (a zombie) until
    // its due time comes up (or a sweep, once zombies exceed a quarter of the filed timers). Wait until
    // every due has passed by two precisions: then every cancelled timer's slot must be free.
    std::int64_t max_due = 0;
    for (const TimerLog& log : logs) max_due = std::max(max_due, log.due.load(std::memory_order_relaxed));
    std::this_thread::sleep_until(TimePoint(Duration(max_due)) + 2 * rt.precision());
    wait_until_idle(rt);

    std::size_t issued = 0, lost = 0, excused = 0;
    stress_support::Outcomes o;  // of the issued timers
    std::size_t pending_after = 0, state_bad_before = 0;
    std::set<std::uint32_t> old_slots;
    std::vector<TimerId> old_ids;
    std::map<std::uint32_t, std::uint32_t> last_generation;  // per slot; this runtime's generations start at 1
    for (const TimerLog& log : logs) {
      const std::uint64_t id = log.id.load();
      if (id != 0) last_generation[unpack(id).slot()] = std::max(last_generation[unpack(id).slot()], unpack(id).generation());
    }
    for (const TimerLog& log : logs) {
      const std::uint64_t id = log.id.load();
      if (id == 0) continue;
      ++issued;
      old_ids.push_back(unpack(id));
      old_slots.insert(unpack(id).slot());
      o.add(log);
      lost += static_cast<std::size_t>(log.cancel_lost.load());
      excused += static_cast<std::size_t>(log.cancel_excused.load());
      const TimerState st = rt.state(unpack(id));
      if (st == TimerState::pending) ++pending_after;
      // The last timer of its slot: cancelled (won) or fired (excused). An earlier one: unknown (slot reused).
      const TimerState expected = unpack(id).generation() != last_generation[unpack(id).slot()] ? TimerState::unknown
                                  : log.cancels_won.load() > 0                                  ? TimerState::cancelled
                                                                                                : TimerState::fired;
      if (st != expected) ++state_bad_before;
    }
    const std::size_t won = o.cancels_won, fired_after_cancel = o.both, neither = o.neither, fires = o.runs;
    const chime::Stats s = rt.stats();

    // The burst: as many timers as there are freed slots (at most 4096), due 100-110 ms ahead. Each must
    // take a freed slot, no slot may be handed out again while its burst timer is still pending (the
    // clock has not reached its due: it cannot have fired), and each fires exactly once.
    const std::size_t burst = std::min<std::size_t>(old_slots.size(), 4096);
    std::vector<TimerLog> burst_logs(burst);
    std::size_t reused = 0, shared_while_pending = 0;
    std::set<std::uint32_t> burst_slots;
    {
      std::mt19937_64 rng(chime_stress::seed() * 59 + 1000);
      chime::Producer producer = rt.producer();
      std::map<std::uint32_t, std::int64_t> burst_due;  // per slot, the due of the burst timer in it
      for (std::size_t k = 0; k < burst; ++k) {
        const TimePoint now = rt.clock().now();
        const TimePoint due = now + 100ms + Duration(static_cast<std::int64_t>(rng() % 10'000'001));
        burst_logs[k].due.store(ns(due), std::memory_order_relaxed);
        const TimerId id = producer.schedule_at(due, record_into(rt, burst_logs[k]));
        burst_logs[k].id.store(pack(id), std::memory_order_relaxed);
        if (old_slots.count(id.slot()) != 0) ++reused;
        if (const auto it = burst_due.find(id.slot()); it != burst_due.end() && ns(now) <= it->second) {
          ++shared_while_pending;
        }
        burst_due[id.slot()] = ns(due);
        burst_slots.insert(id.slot());
      }
    }
    // Old ids while the burst is in flight and after: never pending; unknown once the slot was reused.
    std::size_t old_pending = 0, old_not_unknown_after_reuse = 0, old_cancel_true = 0, old_resched_true = 0;
    for (const TimerId id : old_ids) {
      const TimerState st = rt.state(id);
      if (st == TimerState::pending || st == TimerState::running) ++old_pending;
      if (burst_slots.count(id.slot()) != 0 && st != TimerState::unknown) ++old_not_unknown_after_reuse;
      if (rt.cancel(id)) ++old_cancel_true;
      if (rt.reschedule_after(id, 1s)) ++old_resched_true;
    }
    wait_until_idle(rt);
    std::size_t burst_fired_once = 0;
    for (const TimerLog& log : burst_logs) {
      if (log.runs.load() == 1 && log.fired_id.load() == log.id.load()) ++burst_fired_once;
    }
    for (const TimerId id : old_ids) {
      const TimerState st = rt.state(id);
      if (st == TimerState::pending || st == TimerState::running) ++old_pending;
    }
    const chime::Stats s2 = rt.stats();

    std::printf(
        "[ stress   ] checked %zu timers cancelled from another producer right after publication%s: "
        "%zu cancels won, %zu lost before the due, %zu excused (clock past the due), %zu fired after a winning "
        "cancel, %zu neither, %zu fires, %zu ids whose state after the flush was not cancelled/fired (last of their "
        "slot) or unknown (slot reused), %zu "
        "pending; stats: scheduled %llu fired %llu cancelled %llu pending %llu; burst of %zu schedules: %zu "
        "took a freed slot (%zu distinct freed slots), %zu took a slot whose timer was still pending, %zu fired "
        "exactly once; old ids: %zu pending/running, "
        "%zu not unknown after their slot was reused, %zu cancels and %zu reschedules that returned true; "
        "final stats: scheduled %llu fired %llu cancelled %llu pending %llu\n",
        issued, budget_hit.load() ? " (wall-time budget reached)" : "", won, lost, excused, fired_after_cancel, neither,
        fires, state_bad_before, pending_after, static_cast<unsigned long long>(s.scheduled),
        static_cast<unsigned long long>(s.fired), static_cast<unsigned long long>(s.cancelled),
        static_cast<unsigned long long>(s.pending), burst, reused, old_slots.size(), shared_while_pending,
        burst_fired_once, old_pending, old_not_unknown_after_reuse, old_cancel_true, old_resched_true,
        static_cast<unsigned long long>(s2.scheduled), static_cast<unsigned long long>(s2.fired),
        static_cast<unsigned long long>(s2.cancelled), static_cast<unsigned long long>(s2.pending));
    EXPECT_GT(issued, 0u);
    EXPECT_EQ(lost, 0u) << "a cross-producer cancel returned false before the due time";
    EXPECT_EQ(fired_after_cancel, 0u);
    EXPECT_EQ(neither, 0u);
    EXPECT_EQ(won + excused, issued);
    EXPECT_EQ(fires, excused) << "only timers whose cancel lost after their due may fire";
    EXPECT_EQ(state_bad_before, 0u);
    EXPECT_EQ(pending_after, 0u);
    EXPECT_EQ(s.pending, 0u) << "a cancelled slot was never freed";
    EXPECT_EQ(s.scheduled, issued);
    EXPECT_EQ(s.scheduled, s.fired + s.cancelled);
    EXPECT_EQ(s.cancelled, won);
    EXPECT_EQ(reused, burst) << "the burst allocated fresh slots although freed ones were there";
    EXPECT_EQ(shared_while_pending, 0u) << "a slot was handed out while its timer was pending "
                                           "(freed twice?)";
    EXPECT_EQ(burst_fired_once, burst);
    EXPECT_EQ(old_pending, 0u) << "an old id reads pending: its slot was handed out twice?";
    EXPECT_EQ(old_not_unknown_after_reuse, 0u);
    EXPECT_EQ(old_cancel_true, 0u);
    EXPECT_EQ(old_resched_true, 0u);
    EXPECT_EQ(s2.pending, 0u);
    EXPECT_EQ(s2.scheduled, issued + burst);
    EXPECT_EQ(s2.scheduled, s2.fired + s2.cancelled);
  }
}

}  // namespace
