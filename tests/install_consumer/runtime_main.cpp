// Uses an installed chime::runtime: a timer scheduled on a lane runs on this
// thread once the runtime has been flushed, and only then.
#include <chime/chime.hpp>

#include <chrono>
#include <cstdio>

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
  std::printf("chime install consumer (runtime): ok\n");
  return 0;
}
