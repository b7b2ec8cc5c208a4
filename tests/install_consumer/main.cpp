// SPDX-License-Identifier: BSL-1.0
// Uses an installed chime: one alarm, the clock advanced past it, the alarm must fire.
#include <chime/wheel.hpp>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  const chime::TimePoint start{};
  chime::TimingWheel<int> wheel(chime::WheelConfig{.alarm_precision = 1ms}, start);

  const auto alarm = wheel.add(start + 5ms, 42);
  int fired_value = 0;
  int fired_count = 0;
  const auto on_fire = [&](chime::TimingWheel<int>::Alarm a) {
    fired_value = wheel.value(a);
    ++fired_count;
  };

  wheel.advance_clock(start + 5ms, on_fire);  // 5 ms is not < interval_start(5 ms): not yet
  if (fired_count != 0) {
    std::fprintf(stderr, "alarm fired early\n");
    return 1;
  }
  wheel.advance_clock(start + 6ms, on_fire);
  if (fired_count != 1 || fired_value != 42 || wheel.contains(alarm) || !wheel.empty()) {
    std::fprintf(stderr, "alarm did not fire as expected (count %d, value %d)\n", fired_count,
                 fired_value);
    return 1;
  }
  std::printf("chime install consumer: ok\n");
  return 0;
}
