// SPDX-License-Identifier: BSL-1.0
// Uses an installed chime::runtime: a timer scheduled on a lane runs on this
// thread once the runtime has been flushed, and only then; and a TimerId kept in
// a std::atomic, handed to another thread, links with chime::runtime alone (the
// package brings libatomic).
#include <chime/chime.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

int main() {
  using namespace std::chrono_literals;
  chime::ManualClock clock;
  chime::RuntimeOptions options;
  options.clock = &clock;
  options.workers = 1;
  chime::Runtime rt(options);
  chime::Lane lane = rt.lane();
  lane.run_ready();  // this thread is the lane's thread
  int runs = 0;
  lane.schedule_after(0ns, [&] { ++runs; });
  if (runs != 0) {
    std::fprintf(stderr, "a lane run ran before anyone ran the lane\n");
    return 1;
  }
  rt.flush();  // on the lane's thread: runs the lane's ready runs
  if (runs != 1) {
    std::fprintf(stderr, "the lane run did not run at flush (runs %d)\n", runs);
    return 1;
  }

  std::atomic<chime::TimerId> shared{};
  const chime::TimerId id = rt.schedule_after(1h, [] {});
  shared.store(id);
  bool cancelled = false;
  std::thread other([&] {
    chime::TimerId seen = shared.load();
    if (shared.compare_exchange_strong(seen, chime::TimerId{})) cancelled = rt.cancel(seen);
  });
  other.join();
  if (!cancelled || shared.load()) {
    std::fprintf(stderr, "the id kept in std::atomic<TimerId> did not cancel its timer\n");
    return 1;
  }
  std::printf("chime install consumer (runtime): ok\n");
  return 0;
}
