// SPDX-License-Identifier: BSL-1.0
// Runtime::check_invariants (include/chime/runtime.hpp): the runtime's own
// structural check holds on a runtime in every shape the wheel thread
// keeps (filed, overdue, zombies, mid-reschedule, lanes, periodic), while
// producers race it, and it is refused where it cannot run. That it catches
// a broken structure was shown by seeding two bugs into the wheel thread by
// hand (commit message of the check): filing half of the due-now timers
// nowhere ("slot 11 ... is filed but neither in the wheel nor on the
// overdue list: its timer is lost"), which the first test here fails on;
// re-filing a rescheduled timer without removing its old alarm is refused
// by the wheel itself (IntrusiveTimingWheel::add of a node already filed
// throws). The tests
// keep the check from raising false alarms on every path that reaches it.
#include "runtime_test_support.hpp"

#include <chime/lane.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../runtime/simulation.hpp"

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimerId;

TEST(RuntimeInvariants, hold_with_filed_overdue_zombie_rescheduled_and_periodic_timers) {
  chime::ManualClock clock;
  chime::Runtime rt(chime_test::manual_options(clock, 1));
  std::atomic<int> runs{0};
  std::vector<TimerId> ids;
  for (int i = 0; i < 3000; ++i) {
    ids.push_back(rt.schedule_after(Duration(std::int64_t{1'000'000} * (1 + i % 700)), [&] { runs.fetch_add(1); }));
  }
  for (int i = 0; i < 10; ++i) ids.push_back(rt.schedule_every(3ms, [&] { runs.fetch_add(1); }));
  rt.check_invariants();
  // Zombies (cancelled while filed), moved later (re-filed lazily), moved
  // earlier (re-filed now), due now (the overdue list).
  for (std::size_t i = 0; i < ids.size(); i += 3) rt.cancel(ids[i]);
  for (std::size_t i = 1; i < ids.size(); i += 3) (void)rt.reschedule_after(ids[i], 900ms);
  for (std::size_t i = 2; i < ids.size(); i += 9) (void)rt.reschedule_after(ids[i], 0ns);
  rt.check_invariants();
  for (int step = 1; step <= 40; ++step) {
    chime_test::advance_to(clock, rt, clock.now() + 25ms);  // checks after each advance
  }
  EXPECT_GT(runs.load(), 0);
  rt.shutdown();
  EXPECT_NO_THROW(rt.check_invariants()) << "after shutdown there is nothing to check, and nothing to wait for";
}

TEST(RuntimeInvariants, hold_while_producers_race_the_check) {
  chime::Runtime rt(chime_test::steady_options(2));
  std::atomic<bool> stop{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(p) + 7);
      chime::Producer producer = rt.producer();
      std::vector<TimerId> mine;
      // At most 150,000 each: unpaced, a producer outruns a wheel thread
      // slowed by TSan and by the checks (each looks at every slot), and
      // the queue would reach its bound (CapacityError) and the slab grow.
      for (int n = 0; n < 150'000 && !stop.load(); ++n) {
        const TimerId id = producer.schedule_after(Duration(static_cast<std::int64_t>(rng() % 20'000'000)), [] {});
        mine.push_back(id);
        const TimerId other = mine[rng() % mine.size()];
        switch (rng() % 4) {
          case 0:
            producer.cancel(other);
            break;
          case 1:
            (void)producer.reschedule_after(other, Duration(static_cast<std::int64_t>(rng() % 30'000'000)));
            break;
          default:
            break;
        }
        if (mine.size() > 4096) mine.clear();
      }
    });
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_NO_THROW(rt.check_invariants());
    std::this_thread::sleep_for(2ms);
  }
  stop.store(true);
  for (auto& t : producers) t.join();
  rt.flush();
  EXPECT_NO_THROW(rt.check_invariants());
}

TEST(RuntimeInvariants, hold_in_a_simulation_with_a_lane) {
  chime::ManualClock clock;
  chime::RuntimeOptions options = chime_test::manual_options(clock, 0);
  chime::detail::Simulation sim(options);
  chime::Runtime& rt = sim.runtime();
  chime::Lane lane = rt.lane();
  int runs = 0;
  for (int i = 0; i < 200; ++i) lane.schedule_after(Duration(std::int64_t{1'000'000} * (i % 50)), [&] { ++runs; });
  sim.run_one_pass();  // applies the commands; on a ManualClock only a flush runs timers
  rt.check_invariants();
  clock.advance(60ms);
  rt.flush();  // on the lane's thread: runs the lane between passes
  lane.run_ready();
  rt.check_invariants();
  EXPECT_EQ(runs, 200);
}

TEST(RuntimeInvariants, refused_from_inside_a_callback) {
  chime::ManualClock clock;
  chime::Runtime rt(chime_test::manual_options(clock, 1));
  std::atomic<int> refused{0};
  rt.schedule_after(0ns, [&] {
    try {
      rt.check_invariants();
    } catch (const std::logic_error&) {
      refused.fetch_add(1);
    }
  });
  rt.flush();
  EXPECT_EQ(refused.load(), 1) << "a check waits for the wheel thread, which may be waiting for this callback";
}

}  // namespace
