// SPDX-License-Identifier: BSL-1.0
// runtime/runtime_config.cpp: a runtime's configuration (runtime_config.hpp):
// the options' checks, the clock's first reading and what follows from it.
#include "runtime_config.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "chime/level_bits.hpp"

namespace chime::detail {

namespace {
// The horizon: the last interval the wheel advances into, H = min(K_max,
// 2^61 - 1) - 1, where K_max is the last interval whose start is a
// representable TimePoint. At H the wheel still accepts alarms up to the
// start of H + 1 (at K_max it would accept none), so a timer is always
// filable; runs due at or after start(H) never happen, and producers are
// refused due times from start(H) on (due_limit_for). Throws if the clock
// leaves fewer than two intervals before the end of representable time.
std::int64_t horizon_key(std::int64_t start_ns, std::int64_t precision_ns) {
  const __int128 k_max = (static_cast<__int128>(INT64_MAX) - start_ns) / precision_ns;
  if (k_max < 2) {
    throw std::invalid_argument("chime::Runtime: the clock reads " + std::to_string(start_ns) +
                                " ns at construction; with precision " + std::to_string(precision_ns) +
                                " ns the wheel needs at least two intervals before TimePoint::max() (" +
                                std::to_string(INT64_MAX) + " ns)");
  }
  return static_cast<std::int64_t>(std::min<__int128>(k_max, (__int128{1} << LevelBits::max_num_bits) - 1) - 1);
}

}  // namespace

namespace {
// Each runtime's tag for its TimerIds: a process-wide counter, never 0 (the
// tag of no runtime), so an id from another runtime is never one of ours
// until 2^32 - 1 runtimes have been created.
std::uint32_t next_runtime_tag() noexcept {
  static std::atomic<std::uint32_t> counter{0};
  for (;;) {
    // relaxed: only uniqueness matters, which the RMW gives.
    const std::uint32_t t = counter.fetch_add(1, std::memory_order_relaxed) + 1;
    if (t != 0) return t;
  }
}

// RuntimeOptions::shards = 0: CHIME_SHARDS if set and not empty, else 1 (runtime.hpp).
unsigned default_shards() {
  const char* env = std::getenv("CHIME_SHARDS");
  if (env == nullptr || *env == '\0') return 1;  // unset or empty: the default
  const std::string text(env);
  // Decimal digits only (no sign, no spaces; leading zeros at any length):
  // 1 to max_shards. n stops growing past max_shards, so it cannot overflow.
  unsigned long n = 0;
  bool digits = true;
  for (const char c : text) {
    digits = digits && c >= '0' && c <= '9';
    if (digits) n = std::min<unsigned long>(n * 10 + static_cast<unsigned long>(c - '0'), 1000);
  }
  if (!digits || n < 1 || n > RuntimeOptions::max_shards) {
    throw std::invalid_argument("chime::Runtime: the environment variable CHIME_SHARDS = \"" + text +
                                "\" is not a number from 1 to " + std::to_string(RuntimeOptions::max_shards) +
                                " (it sets RuntimeOptions::shards when that is 0)");
  }
  return static_cast<unsigned>(n);
}

}  // namespace

RuntimeOptions validated(RuntimeOptions o) {
  if (o.precision <= Duration::zero()) {
    throw std::invalid_argument("chime::Runtime: precision must be positive, got " +
                                std::to_string(o.precision.count()) + " ns");
  }
  if (o.slack < Duration::zero()) {
    throw std::invalid_argument("chime::Runtime: slack must not be negative, got " + std::to_string(o.slack.count()) +
                                " ns");
  }
  if (o.workers > RuntimeOptions::max_workers) {
    throw std::invalid_argument("chime::Runtime: workers = " + std::to_string(o.workers) + " is more than " +
                                std::to_string(RuntimeOptions::max_workers) +
                                " (RuntimeOptions::max_workers); callbacks that block want a pool of their own");
  }
  if (o.max_queue_depth != 0 && o.max_queue_depth < RuntimeOptions::min_max_queue_depth) {
    throw std::invalid_argument(
        "chime::Runtime: max_queue_depth = " + std::to_string(o.max_queue_depth) + " is below " +
        std::to_string(RuntimeOptions::min_max_queue_depth) +
        " (RuntimeOptions::min_max_queue_depth): producers look at the queue every 64 posts, so the bound would be "
        "mostly that slack; 0 means the default, " +
        std::to_string(RuntimeOptions::default_max_queue_depth) + ", and SIZE_MAX no bound");
  }
  if (o.shards > RuntimeOptions::max_shards) {
    throw std::invalid_argument("chime::Runtime: shards = " + std::to_string(o.shards) + " is more than " +
                                std::to_string(RuntimeOptions::max_shards) + " (RuntimeOptions::max_shards)");
  }
  // A ManualClock's one order over every timer (G28) needs no shards: one
  // unless asked for (CHIME_SHARDS is for real clocks).
  if (o.shards == 0) o.shards = dynamic_cast<const ManualClock*>(o.clock) != nullptr ? 1 : default_shards();
  return o;
}

RuntimeConfig::RuntimeConfig(RuntimeOptions validated_options)
    : options(std::move(validated_options)),
      clock(options.clock != nullptr ? options.clock : &steady_clock),
      clock_kind(dynamic_cast<const SteadyClock*>(clock) != nullptr   ? ClockKind::steady
                 : dynamic_cast<const ManualClock*>(clock) != nullptr ? ClockKind::manual
                                                                      : ClockKind::other),
      precision(options.precision),
      fixed_slack_code(options.slack == Duration::zero()
                           ? SlackCode::runtime_default
                           : slack_code_for(options.slack.count(), options.precision.count())),
      start_ns(clock->now().time_since_epoch().count()),
      max_offset_intervals((std::int64_t{1} << options.level_bits.num_bits()) - 1),
      horizon_key(detail::horizon_key(start_ns, precision.count())),
      max_wheel_now_ns(static_cast<std::int64_t>(start_ns + static_cast<__int128>(horizon_key) * precision.count())),
      tag(next_runtime_tag()),
      // A manual clock never wakes the wheel on its own (clock.hpp): commands
      // wait for a flush or for a schedule that needs the wheel earlier.
      wake_on_post_count(clock_kind != ClockKind::manual),
      due_limit_ns(due_limit_for(start_ns)) {}

void RuntimeConfig::check_due_in_range(const char* what, TimePoint due) const {
  const std::int64_t due_ns = due.time_since_epoch().count();
  // Relaxed: a stale limit is smaller (the wheel only advances), so the check
  // is conservative; the wheel accepts anything below the limit it publishes.
  std::int64_t limit = due_limit_ns.load(std::memory_order_relaxed);
  if (due_ns >= limit) [[unlikely]] {
    // The published limit only moves when the wheel advances; an idle wheel
    // (no timer due, nobody flushing) leaves it behind the clock, and with a
    // short wheel a due of "now" would be refused. The range is the clock's:
    // the wheel thread files a due beyond its own current range at the last
    // time it accepts and files it again when that comes (file()).
    limit = std::max(limit, due_limit_for(clock->now().time_since_epoch().count()));
  }
  if (due_ns >= limit) [[unlikely]] {
    throw std::out_of_range(std::string("chime::Runtime::") + what + ": due time " + std::to_string(due_ns) +
                            " ns is beyond the wheel's range: it must be below " + std::to_string(limit) +
                            " ns (precision and level_bits set the range)");
  }
}

// The wheel always accepts 2^num_bits - 1 intervals past its now's interval
// (never fewer as it advances); producers get that much, up to the start of
// the horizon interval (horizon_key above): every due accepted is below it,
// so the wheel, which advances into the horizon interval and no further,
// fires it.
std::int64_t RuntimeConfig::due_limit_for(std::int64_t wheel_now_ns) const noexcept {
  const __int128 p = precision.count();
  const __int128 now_key = (static_cast<__int128>(wheel_now_ns) - start_ns) / p;
  const __int128 key = std::min<__int128>(now_key + max_offset_intervals, horizon_key);
  return static_cast<std::int64_t>(start_ns + key * p);
}

// Only ever grows: a CAS to the max. Relaxed: due_limit_ns's comment.
void RuntimeConfig::raise_due_limit(std::int64_t wheel_now_ns) const noexcept {
  const std::int64_t limit = due_limit_for(wheel_now_ns);
  std::int64_t published = due_limit_ns.load(std::memory_order_relaxed);
  while (published < limit && !due_limit_ns.compare_exchange_weak(published, limit, std::memory_order_relaxed)) {
  }
}

}  // namespace chime::detail
