// SPDX-License-Identifier: BSL-1.0
// Prints chime::write_openmetrics of a live runtime (steady clock, callbacks on the
// wheel thread, max_queue_depth at its minimum) that has refused 3 schedules while a
// callback held its wheel thread (the fillers it accepted then are cancelled), has
// scheduled, fired, cancelled and rescheduled timers, run a throwing and a slow
// callback, and holds pending ones, with the labels service="print" and
// note="a \"quoted\" \\ value\nwith a newline". Read by tests/check_openmetrics.py
// (ctest metrics_parse_with_prometheus_client).
#include <chime/metrics.hpp>
#include <chime/runtime.hpp>

#include <atomic>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

int main() {
  using namespace std::chrono_literals;
  chime::RuntimeOptions options;
  options.workers = 0;
  options.slow_run = 1ms;
  options.on_error = [](chime::TimerId, std::exception_ptr) {};
  options.max_queue_depth = chime::RuntimeOptions::min_max_queue_depth;
  chime::Runtime rt(options);
  // Overload: a callback holds the wheel thread while this thread fills its
  // queue until 3 schedules are refused; the fillers are cancelled.
  std::atomic<bool> started{false}, released{false};
  rt.schedule_after(0ns, [&] {
    started = true;
    started.notify_all();
    while (!released) released.wait(false);
  });
  while (!started) started.wait(false);
  std::vector<chime::TimerId> fillers;
  for (int refused = 0; refused < 3;) {
    try {
      fillers.push_back(rt.schedule_after(1h, [] {}));
    } catch (const chime::CapacityError&) {
      ++refused;
    }
  }
  for (const chime::TimerId id : fillers) rt.cancel(id);
  released = true;
  released.notify_all();
  rt.flush();
  for (int i = 0; i < 200; ++i) rt.schedule_after(std::chrono::microseconds(50 * i), [] {});
  rt.schedule_after(0ns, [] { throw std::runtime_error("counted in callback_errors"); });
  rt.schedule_after(0ns, [] { std::this_thread::sleep_for(2ms); });
  for (int i = 0; i < 10; ++i) rt.cancel(rt.schedule_after(1h, [] {}));
  for (int i = 0; i < 5; ++i) rt.reschedule_after(rt.schedule_after(1h, [] {}), 2h);  // stay pending
  std::this_thread::sleep_for(30ms);
  rt.flush();
  chime::write_openmetrics(std::cout, rt.stats(), "chime",
                           {{"service", "print"}, {"note", "a \"quoted\" \\ value\nwith a newline"}});
  return 0;
}
