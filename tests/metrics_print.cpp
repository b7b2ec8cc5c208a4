// Prints chime::write_openmetrics of a live runtime (steady clock, 2 workers) that
// has scheduled, fired, cancelled and rescheduled timers, run a throwing and a slow
// callback, and holds pending ones, with the labels service="print" and
// note="a \"quoted\" \\ value\nwith a newline". Read by tests/check_openmetrics.py
// (ctest metrics_parse_with_prometheus_client).
#include <chime/metrics.hpp>
#include <chime/runtime.hpp>

#include <chrono>
#include <iostream>
#include <stdexcept>
#include <thread>

int main() {
  using namespace std::chrono_literals;
  chime::RuntimeOptions options;
  options.workers = 2;
  options.slow_run = 1ms;
  options.on_error = [](chime::TimerId, std::exception_ptr) {};
  chime::Runtime rt(options);
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
