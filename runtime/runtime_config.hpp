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
// atomic counter that argues its own order (call_order.hpp), and
// `due_limit_ns`, the range producers accept, which the wheel threads raise
// (argued at the field). Each role refers to its runtime's by const
// reference. The rules that read only these fields live here too: a
// timer's slack (slack.hpp) and the range check.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>

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

  // A ManualClock: timers run only inside flush (wheel_thread_manual.cpp, "A manual clock").
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
  // Producers accept a due below this (check_due_in_range). The constructor
  // sets it; each shard's wheel thread raises it after each advance
  // (raise_due_limit, a CAS to the max); schedule, reschedule and Timer's
  // arm read it. Relaxed: it only grows, so a stale value is smaller and
  // the check conservative. A shard whose wheel is behind the one that
  // raised it files a due beyond its own range at the last time it
  // accepts, and again when that comes (wheel_thread_apply.cpp, file()), so no
  // shard's range is exceeded.
  mutable std::atomic<std::int64_t> due_limit_ns;

  // ---- Slack (slack.hpp; design.md, "Slack"). ----
  // A caller's slack argument as a slot stores it: throws
  // std::invalid_argument, naming `what`, for a negative one.
  std::uint8_t slack_code(std::optional<Duration> slack, const char* what) const {
    return slack_code_of(slack, precision, what);
  }
  // The same for a call that knows its delay (schedule_after, arm_after,
  // sleep_for): without a slack, the runtime's default for that delay,
  // measured in the call.
  std::uint8_t slack_code_after(std::optional<Duration> slack, Duration delay, const char* what) const {
    return slack ? slack_code_of(slack, precision, what) : runtime_slack_code(delay.count());
  }
  // The slack of a timer that gave none (RuntimeOptions::slack when set,
  // else proportional to `delay_ns`).
  std::uint8_t runtime_slack_code(std::int64_t delay_ns) const noexcept {
    return fixed_slack_code != SlackCode::runtime_default ? fixed_slack_code
                                                          : default_slack_code(delay_ns, precision.count());
  }
  // The slack a timer `delay` ahead gets without one of its own, as a
  // Duration (what slack_code_after files it by).
  Duration default_slack(Duration delay) const noexcept {
    if (options.slack != Duration::zero()) return options.slack;
    return std::min(precision, Duration(std::max(delay.count() >> kDefaultSlackShift, kDefaultSlackMinNs)));
  }

  // ---- The range (runtime_config.cpp). ----
  // Throws std::out_of_range naming the values for a due at or beyond the
  // range producers accept. `what`: the call, for the message.
  void check_due_in_range(const char* what, TimePoint due) const;
  // The limit of a wheel whose time is `wheel_now_ns`.
  std::int64_t due_limit_for(std::int64_t wheel_now_ns) const noexcept;
  // After a shard's advance: raises due_limit_ns to the limit of a wheel at
  // `wheel_now_ns`; never lowers it.
  void raise_due_limit(std::int64_t wheel_now_ns) const noexcept;
};

}  // namespace chime::detail
