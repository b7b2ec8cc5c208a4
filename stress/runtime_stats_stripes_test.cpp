// SPDX-License-Identifier: BSL-1.0
// Exact statistics across threads (runtime/runtime_stats.hpp, ThreadStripe):
// a thread that owns a counter stripe adds with a plain load and store (it is
// the stripe's only writer); threads beyond the owned stripes share the last
// one with fetch_add; a thread gives its stripe back when it exits and the
// next thread takes it over. If two live threads ever wrote one owned stripe,
// or a stripe's next owner did not see its last owner's counts, counts would
// be lost. Checked: after waves of short-lived threads (stripes handed from
// thread to thread) and one wave with more threads alive than there are
// stripes (the shared stripe under contention), stats().scheduled, cancelled,
// fired and pending are exact. Bounded: 7 waves of at most 24 threads, a few
// thousand timers each; under ThreadSanitizer in CI.
#include "stress_seed.hpp"
#include "stress_support.hpp"

#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

TEST(RuntimeStatsStripes, counts_stay_exact_when_threads_outnumber_stripes_and_stripes_pass_between_threads) {
  chime_stress::print_seed();
  chime::Runtime rt(stress_support::steady_options(2));
  std::atomic<std::uint64_t> fired{0};
  std::uint64_t scheduled = 0, cancelled = 0, due_soon = 0;
  // Waves of 24 threads alive at once (more than the 15 owned stripes, so
  // several share the last one) and of 6, each wave taking over stripes the
  // wave before gave back.
  for (const unsigned threads : {24u, 6u, 24u, 6u, 24u, 6u, 24u}) {
    constexpr unsigned kPerThread = 2'000;
    std::atomic<unsigned> ready{0};
    std::vector<std::thread> wave;
    for (unsigned t = 0; t < threads; ++t) {
      wave.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();  // all alive together
        chime::Producer producer = rt.producer();
        for (unsigned k = 0; k < kPerThread; ++k) {
          if ((k + t) % 4 == 0) {
            producer.schedule_after(0ms, [&fired] { fired.fetch_add(1, std::memory_order_relaxed); });
          } else {
            const chime::TimerId id = producer.schedule_after(10s, [] {});
            EXPECT_TRUE(producer.cancel(id));
          }
        }
      });
    }
    for (auto& th : wave) th.join();
    for (unsigned t = 0; t < threads; ++t) {
      for (unsigned k = 0; k < kPerThread; ++k) ((k + t) % 4 == 0 ? due_soon : cancelled) += 1;
    }
    scheduled += std::uint64_t{threads} * kPerThread;
  }
  rt.flush();
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.scheduled, scheduled);
  EXPECT_EQ(s.cancelled, cancelled);
  EXPECT_EQ(s.fired, due_soon);
  EXPECT_EQ(fired.load(), due_soon);
  EXPECT_EQ(s.pending, 0u) << "scheduled " << s.scheduled << ", fired " << s.fired << ", cancelled " << s.cancelled;
}

}  // namespace
