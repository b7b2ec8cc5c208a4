// SPDX-License-Identifier: BSL-1.0
// runtime/slack.hpp: a timer's slack, as its slot stores it and the wheel
// thread files it (design.md, "Slack"; wheel_thread_fire.cpp, "Slack").
//
// A timer's slack s is how late past its due d it may run. The wheel thread
// files it at its fire time: the first multiple of its grid g at or after d,
// where g = 2^floor(log2 s) <= s, so it runs in [d, d + g) below
// saturation, never early, and timers whose dues fall in one cell of the
// same grid share a wake-up. A slack at or above the precision is the
// interval rule: the fire time is the last nanosecond of d's precision
// interval.
//
// The slot keeps one byte (SlackCode): the grid's exponent, the interval
// rule, or "the runtime's default". The default is RuntimeOptions::slack
// when set, else proportional to the delay D (the due minus the clock when
// the wheel thread files the timer, at or after the scheduling call, so never
// more than the call's D; a periodic timer's period):
//   default_slack(D) = clamp(D / 16, 50 us, precision)
// so a timer due within 800 us gets a 32.8 us grid (2^15 ns), one due in
// 1-2 ms a 32.8-65.5 us grid, and one due 16 precisions or more ahead the
// interval rule (docs/benchmarks.md, "Slack", has the measurements).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "chime/time.hpp"

namespace chime::detail {

struct SlackCode {
  // 0..62: the grid is 2^code ns (0: exactly at the due).
  static constexpr std::uint8_t max_grid = 62;
  static constexpr std::uint8_t interval_rule = 0xFE;    // a slack at or above the precision
  static constexpr std::uint8_t runtime_default = 0xFF;  // none given: RuntimeOptions::slack, or proportional
};

// The proportional default's bounds: D / 16, at least 50 us (a shorter grid
// would cost a wake-up per timer and buy nothing the OS's wake-up latency
// does not take back), at most the precision (the interval rule).
inline constexpr std::int64_t kDefaultSlackMinNs = 50'000;
inline constexpr int kDefaultSlackShift = 4;  // D / 16: Linux's 12.5 % per level, rounded to a power of two

// The code of a slack of `slack_ns` (>= 0) under precision `precision_ns`.
constexpr std::uint8_t slack_code_for(std::int64_t slack_ns, std::int64_t precision_ns) noexcept {
  if (slack_ns >= precision_ns) return SlackCode::interval_rule;
  if (slack_ns <= 0) return 0;
  return static_cast<std::uint8_t>(std::bit_width(static_cast<std::uint64_t>(slack_ns)) - 1);
}

// The proportional default for a delay of `delay_ns` (design.md, "Slack").
constexpr std::uint8_t default_slack_code(std::int64_t delay_ns, std::int64_t precision_ns) noexcept {
  const std::int64_t s =
      delay_ns > (kDefaultSlackMinNs << kDefaultSlackShift) ? delay_ns >> kDefaultSlackShift : kDefaultSlackMinNs;
  return slack_code_for(s, precision_ns);
}

// A per-timer slack argument: nullopt is the runtime's default; negative
// throws std::invalid_argument naming the call and the value.
inline std::uint8_t slack_code_of(std::optional<Duration> slack, Duration precision, const char* what) {
  if (!slack) return SlackCode::runtime_default;
  if (*slack < Duration::zero()) {
    throw std::invalid_argument(std::string("chime: ") + what + ": slack must not be negative, got " +
                                std::to_string(slack->count()) + " ns");
  }
  return slack_code_for(slack->count(), precision.count());
}

// The fire time of a timer due at `due_ns` with a grid code (not
// interval_rule, not runtime_default): the first multiple of 2^code at or
// after it, in 128 bits (the caller clamps it to the wheel's range).
constexpr __int128 grid_fire_time(std::int64_t due_ns, std::uint8_t code) noexcept {
  const std::int64_t mask = (std::int64_t{1} << code) - 1;
  const std::int64_t r = due_ns & mask;  // two's complement: the offset above the grid point below, also for due < 0
  return r == 0 ? __int128{due_ns} : static_cast<__int128>(due_ns) + (mask + 1 - r);
}

}  // namespace chime::detail
