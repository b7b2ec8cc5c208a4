// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_config.hpp: what a runtime fixes at construction.
//
// What this is: the validated RuntimeOptions and what follows from them and
// from the clock's first reading (the clock and its kind, the precision,
// the wheel's start, the range the wheels accept, the default slack, the
// runtime's tag). RuntimeCore (runtime_core.hpp) holds one by value and
// fills it in its constructor (runtime_core.cpp), before any thread starts
// (std::thread's start orders it for them); nothing writes it after, so
// every thread reads it without synchronization, except `call_order`, an
// atomic counter that argues its own order (call_order.hpp). Each WheelThread
// (wheel_thread.hpp) refers to its runtime's by const reference.
#pragma once

#include <cstdint>

#include "call_order.hpp"
#include "chime/clock.hpp"
#include "chime/runtime.hpp"
#include "slack.hpp"

namespace chime::detail {

// The options as a runtime takes them: std::invalid_argument for a bad one
// (naming it), shards = 0 replaced by CHIME_SHARDS or 1 (runtime.hpp).
// runtime_config.cpp.
RuntimeOptions validated(RuntimeOptions o);

struct RuntimeConfig {
  enum class ClockKind { steady, manual, other };

  // `validated_options`: as validated() returns them. runtime_config.cpp.
  explicit RuntimeConfig(RuntimeOptions validated_options);
  // `clock` may point at `steady_clock`: never copied or moved.
  RuntimeConfig(const RuntimeConfig&) = delete;
  RuntimeConfig& operator=(const RuntimeConfig&) = delete;

  // A ManualClock: timers run only inside flush (wheel_thread.cpp, "A manual clock").
  bool manual() const noexcept { return clock_kind == ClockKind::manual; }

  RuntimeOptions options;
  SteadyClock steady_clock;
  const Clock* clock;
  ClockKind clock_kind;
  Duration precision;
  // RuntimeOptions::slack as a code (slack.hpp), or runtime_default when
  // not set: the slack of every timer that gives none.
  std::uint8_t fixed_slack_code;
  std::int64_t start_ns;
  std::int64_t max_offset_intervals;  // 2^num_bits - 1: the range the wheel always accepts
  std::int64_t horizon_key;           // the last interval the wheel advances into (runtime_config.cpp, horizon_key)
  std::int64_t max_wheel_now_ns;      // its start: the wheel's time never passes it
  std::uint32_t tag;                  // this runtime's identity in its TimerIds (runtime_config.cpp, next_runtime_tag)
  bool wake_on_post_count;            // wake a sleeping wheel every kPostsPerWake posts (not with a ManualClock)
  // A ManualClock: the number each call that sets a due takes (call_order.hpp).
  mutable CallOrder call_order;
};

}  // namespace chime::detail
