// SPDX-License-Identifier: BSL-1.0
// chime/wheel.hpp: the wheel layer, header-only (CMake target chime::wheel).
//
// What it brings: the single-threaded hierarchical timing wheel and what it is
// built from, nothing that needs the runtime library:
// - chime/time.hpp: Duration and TimePoint, integer nanoseconds.
// - chime/level_bits.hpp: LevelBits, the wheel's geometry (bits per level).
// - chime/key_wheel.hpp: KeyWheel<T>, the radix priority queue on integer keys.
// - chime/timing_wheel.hpp: TimingWheel<T> and WheelConfig, alarms at times.
// - chime/intrusive_timing_wheel.hpp: IntrusiveTimingWheel<NodeAt> and
//   IntrusiveAlarm, the same wheel over nodes the caller owns.
// - chime/clock.hpp: Clock, SteadyClock and ManualClock (header-only; a
//   ManualClock is a convenient way to drive a wheel in tests).
// Each header opens with its contract. Nothing here starts a thread or is
// thread-safe: one thread owns a wheel. For the threaded runtime include
// chime/runtime.hpp (and link chime::runtime); for everything, chime/chime.hpp.
#pragma once

#include "chime/clock.hpp"
#include "chime/intrusive_timing_wheel.hpp"
#include "chime/key_wheel.hpp"
#include "chime/level_bits.hpp"
#include "chime/time.hpp"
#include "chime/timing_wheel.hpp"
