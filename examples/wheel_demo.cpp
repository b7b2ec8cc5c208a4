// SPDX-License-Identifier: BSL-1.0
// wheel_demo: the timing wheel at work on a simulated clock.
//
// A TimingWheel<std::string> with 1 ms precision gets two dozen request deadlines within
// the first 120 ms and three far alarms (5 s, 1 h, 1 day). Three requests are removed
// before they are due, one is rescheduled. The clock then advances in 20 ms steps, and
// jumps straight to next_alarm_fires_at() for the far alarms. Every firing is printed with
// its due time and the clock. At the end the demo checks the wheel's guarantees against
// what it saw and exits non-zero if any is broken:
//   never early:     due < clock                     for every alarm fired at `clock`
//   at most 1 late:  due >= interval_start(previous clock), i.e. it was not due before
//   none lost:       fired = scheduled - removed, each exactly once, and the wheel is empty.
#include <chime/wheel.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Wheel = chime::TimingWheel<std::string>;

constexpr chime::TimePoint kStart{};

// "1234.567 ms" since the start of the simulated clock.
std::string fmt(chime::TimePoint t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - kStart).count();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld ms", static_cast<long long>(us / 1000),
                static_cast<long long>(us % 1000));
  return buf;
}

std::string fmt(std::optional<chime::TimePoint> t) { return t ? fmt(*t) : "(none)"; }

struct Firing {
  std::string name;
  chime::TimePoint due;
  chime::TimePoint clock;       // the time the clock was advanced to
  chime::TimePoint prev_clock;  // the clock before that advance
};

}  // namespace

int main() {
  Wheel wheel(chime::WheelConfig{.alarm_precision = 1ms}, kStart);
  std::map<std::string, chime::TimePoint> expected;  // name -> due, for every alarm that must fire
  std::map<std::string, Wheel::Alarm> handles;

  const auto schedule = [&](std::string name, chime::TimePoint due) {
    handles[name] = wheel.add(due, name);
    expected[name] = due;
  };
  for (int i = 0; i < 24; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "req-%02d", i);
    // Spread over [0, 120) ms with sub-millisecond jitter, not in order of the names.
    const auto due = kStart + std::chrono::milliseconds((i * 7) % 24 * 5) +
                     std::chrono::microseconds((i * 7919) % 5000);
    schedule(name, due);
  }
  schedule("session-expiry", kStart + 5s);
  schedule("cert-renewal", kStart + 1h);
  schedule("daily-report", kStart + 24h);
  std::printf("chime wheel demo: TimingWheel<std::string>, precision 1 ms, clock at %s\n",
              fmt(wheel.now()).c_str());
  std::printf("scheduled %zu alarms: 24 requests due in [0, 120) ms, and at 5 s, 1 h, 1 day\n",
              wheel.size());

  for (const char* name : {"req-03", "req-11", "req-16"}) {
    wheel.remove(handles.at(name));
    expected.erase(name);
  }
  std::printf("removed req-03, req-11, req-16 before they were due\n");
  const auto old_due = expected.at("req-07");
  expected["req-07"] = kStart + 130ms;
  wheel.reschedule(handles.at("req-07"), expected["req-07"]);
  std::printf("rescheduled req-07 from %s to %s\n", fmt(old_due).c_str(),
              fmt(expected["req-07"]).c_str());
  std::printf("next_alarm_fires_at() = %s  (earliest due: %s)\n",
              fmt(wheel.next_alarm_fires_at()).c_str(), fmt(wheel.min_alarm_time()).c_str());

  std::vector<Firing> fired;
  const auto advance_to = [&](chime::TimePoint to) {
    const auto prev = wheel.now();
    wheel.advance_clock(to, [&](Wheel::Alarm a) {
      fired.push_back({std::move(wheel.value(a)), wheel.at(a), to, prev});
      std::printf("  clock %15s  fired %-15s due %15s\n", fmt(to).c_str(),
                  fired.back().name.c_str(), fmt(fired.back().due).c_str());
    });
  };

  std::printf("advancing the clock in 20 ms steps to 140 ms:\n");
  for (auto t = kStart + 20ms; t <= kStart + 140ms; t += 20ms) advance_to(t);

  std::printf("%zu alarms left; jumping the clock to next_alarm_fires_at() each time:\n",
              wheel.size());
  while (const auto next = wheel.next_alarm_fires_at()) advance_to(*next);

  // Check what was seen against the guarantees.
  int errors = 0;
  std::map<std::string, int> times_fired;
  for (const Firing& f : fired) {
    ++times_fired[f.name];
    const auto it = expected.find(f.name);
    if (it == expected.end()) {
      std::printf("ERROR: %s fired but was removed\n", f.name.c_str());
      ++errors;
      continue;
    }
    if (f.due != it->second) {
      std::printf("ERROR: %s fired with due %s, expected %s\n", f.name.c_str(), fmt(f.due).c_str(),
                  fmt(it->second).c_str());
      ++errors;
    }
    if (!(f.due < f.clock)) {
      std::printf("ERROR: %s fired early: due %s, clock %s\n", f.name.c_str(), fmt(f.due).c_str(),
                  fmt(f.clock).c_str());
      ++errors;
    }
    if (f.due < wheel.interval_start(f.prev_clock)) {
      std::printf("ERROR: %s fired late: due %s, already due at clock %s\n", f.name.c_str(),
                  fmt(f.due).c_str(), fmt(f.prev_clock).c_str());
      ++errors;
    }
  }
  for (const auto& [name, due] : expected) {
    const int n = times_fired.count(name) ? times_fired[name] : 0;
    if (n != 1) {
      std::printf("ERROR: %s (due %s) fired %d times\n", name.c_str(), fmt(due).c_str(), n);
      ++errors;
    }
  }
  if (!wheel.empty()) {
    std::printf("ERROR: %zu alarms still in the wheel\n", wheel.size());
    ++errors;
  }
  if (errors != 0) {
    std::printf("FAILED: %d errors\n", errors);
    return 1;
  }
  std::printf(
      "ok: all %zu alarms fired exactly once, each at a clock > its due time and not\n"
      "    due before the previous clock; 3 removed alarms never fired; none lost\n",
      fired.size());
  return 0;
}
