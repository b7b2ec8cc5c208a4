// chime/chime.hpp: everything public in chime, both layers.
//
// What it brings:
// - the wheel layer, chime/wheel.hpp (header-only, target chime::wheel):
//   LevelBits, KeyWheel<T>, TimingWheel<T>, Duration/TimePoint, the clocks;
// - the runtime layer (a compiled library, target chime::runtime, which the
//   program must link to call any of it): chime/runtime.hpp (Runtime,
//   Producer, TimerId, Firing, RuntimeOptions, the errors), chime/task.hpp
//   (Task), chime/keyed_timers.hpp (KeyedTimers<K, V>), and the timer
//   header beside them once it exists.
// A program that uses only the wheel should include chime/wheel.hpp: it
// compiles faster and cannot reach the runtime by accident.
#pragma once

#include "chime/keyed_timers.hpp"
#include "chime/lane.hpp"
#include "chime/metrics.hpp"
#include "chime/runtime.hpp"
#include "chime/task.hpp"
#include "chime/timer.hpp"
#include "chime/wheel.hpp"
