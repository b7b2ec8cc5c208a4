// chime/chime.hpp: everything public in chime.
//
// Layer 1, the wheel (header-only, single-threaded): LevelBits, KeyWheel<T>,
// TimingWheel<T>. See each header's opening contract.
#pragma once

#include "chime/key_wheel.hpp"
#include "chime/keyed_timers.hpp"
#include "chime/level_bits.hpp"
#include "chime/time.hpp"
#include "chime/timing_wheel.hpp"
