// SPDX-License-Identifier: BSL-1.0
// chime/chime.hpp: everything public in chime, both layers.
//
// What it brings:
// - the wheel layer, chime/wheel.hpp (header-only, target chime::wheel):
//   LevelBits, KeyWheel<T>, TimingWheel<T>, Duration/TimePoint, the clocks;
// - the runtime layer (a compiled library, target chime::runtime, which the
//   program must link to call any of it): chime/runtime.hpp (Runtime,
//   Producer, TimerId, Firing, RuntimeOptions, Stats, the errors),
//   chime/task.hpp (Task), chime/timer.hpp (Timer), chime/lane.hpp (Lane,
//   its coroutine sleeps), chime/deadline.hpp (Deadline, with_timeout),
//   chime/keyed_timers.hpp (KeyedTimers<K, V>) and chime/metrics.hpp
//   (write_openmetrics).
// Not included: the optional loop adapters chime/asio.hpp (Boost.Asio) and
// chime/uv.hpp (libuv), which need those libraries.
// A program that uses only the wheel should include chime/wheel.hpp: it
// compiles faster and cannot reach the runtime by accident.
#pragma once

#include "chime/deadline.hpp"
#include "chime/keyed_timers.hpp"
#include "chime/lane.hpp"
#include "chime/metrics.hpp"
#include "chime/runtime.hpp"
#include "chime/task.hpp"
#include "chime/timer.hpp"
#include "chime/wheel.hpp"
