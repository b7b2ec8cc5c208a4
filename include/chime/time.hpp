// SPDX-License-Identifier: BSL-1.0
// chime/time.hpp: the time types every chime layer speaks.
//
// Contract:
// - `Duration` is `std::chrono::nanoseconds`; `TimePoint` is a
//   `std::chrono::steady_clock::time_point` with nanosecond ticks.
// - All of chime's timing arithmetic is on these integers. There is no floating
//   point anywhere in the timing path, so interval arithmetic is exact.
#pragma once

#include <chrono>
#include <ratio>

namespace chime {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

static_assert(std::is_same_v<TimePoint, std::chrono::steady_clock::time_point>,
              "chime assumes steady_clock counts nanoseconds (true for libstdc++ and libc++)");

}  // namespace chime
