// SPDX-License-Identifier: BSL-1.0
// tests/wheel_observe.hpp: the checks of a wheel's observable state against
// the reference model (reference_wheel.hpp) that the differential tests
// (tests/wheel_differential_test.cpp) and the wheel fuzz target
// (fuzz/wheel_fuzz.cpp) both make after every operation, through the
// observe() of tests/wheel_op_driver.hpp: the one place that states them.
// Each returns the first property that does not hold, as a message, or
// std::nullopt; the driver reports it and adds the live values of its value
// type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "reference_wheel.hpp"

namespace chime_test {

#define CHIME_OBSERVE_CHECK(cond, what) \
  do {                                  \
    if (!(cond)) {                      \
      std::ostringstream os_;           \
      os_ << what;                      \
      return os_.str();                 \
    }                                   \
  } while (0)

// TimingWheel `w` against `model` (its alarms, keyed by time) with the
// wheel's interval arithmetic `m`, the model's time `model_now` and the level
// bits' total `num_bits`: size, empty, now; alarm_upper_bound() an interval
// start within the contract's bounds and nondecreasing (`prev_ub`, updated);
// min_alarm_time / next_alarm_fires_at / min_alarm_interval_num those of the
// model's earliest alarm, which is never in an interval before now's nor at
// or before now - precision.
template <class Wheel, class Model>
std::optional<std::string> observe_timing_wheel(const Wheel& w, const Model& model, const IntervalMath& m,
                                                std::int64_t model_now, int num_bits, std::int64_t& prev_ub) {
  const auto n = [](auto t) { return static_cast<std::int64_t>(t.time_since_epoch().count()); };
  const std::int64_t p = m.precision;
  CHIME_OBSERVE_CHECK(w.size() == model.size(), "size " << w.size() << " != model " << model.size());
  CHIME_OBSERVE_CHECK(w.empty() == model.empty(), "empty()");
  CHIME_OBSERVE_CHECK(n(w.now()) == model_now, "now " << n(w.now()) << " != model " << model_now);

  // alarm_upper_bound: an interval start, within the level-bits bounds, nondecreasing.
  const std::int64_t ub = n(w.alarm_upper_bound());
  const i128 now_k = m.num(model_now);
  const i128 km = m.k_max();
  const i128 lo_k = std::min<i128>({now_k + (i128{1} << num_bits), i128{kMaxRepresentableKey} + 1, km});
  const i128 hi_k = std::min<i128>(i128{kMaxRepresentableKey} + 1, km);
  CHIME_OBSERVE_CHECK((static_cast<i128>(ub) - m.start) % p == 0, "upper bound " << ub << " is not an interval start");
  CHIME_OBSERVE_CHECK(ub >= m.num_start(lo_k), "upper bound " << ub << " < " << to_string(m.num_start(lo_k)));
  CHIME_OBSERVE_CHECK(ub <= m.num_start(hi_k), "upper bound " << ub << " > " << to_string(m.num_start(hi_k)));
  CHIME_OBSERVE_CHECK(ub >= prev_ub, "upper bound decreased from " << prev_ub << " to " << ub);
  prev_ub = ub;

  const auto min = w.min_alarm_time();
  const auto next = w.next_alarm_fires_at();
  const auto min_k = w.min_alarm_interval_num();
  CHIME_OBSERVE_CHECK(min.has_value() == !model.empty() && next.has_value() == !model.empty() &&
                          min_k.has_value() == !model.empty(),
                      "min_alarm_time / next_alarm_fires_at / min_alarm_interval_num presence");
  if (!model.empty()) {
    const std::int64_t want_min = *model.min_key();
    CHIME_OBSERVE_CHECK(n(*min) == want_min, "min_alarm_time " << n(*min) << " != " << want_min);
    CHIME_OBSERVE_CHECK(n(*next) == m.interval_start(want_min) + p,
                        "next_alarm_fires_at " << n(*next) << " != " << to_string(m.interval_start(want_min) + p));
    CHIME_OBSERVE_CHECK(*min_k == m.num(want_min), "min_alarm_interval_num " << *min_k);
    // The lateness guarantees, on the earliest alarm (the model holds exactly the wheel's alarms).
    CHIME_OBSERVE_CHECK(m.num(want_min) >= now_k, "alarm at " << want_min << " is in an interval before now's");
    CHIME_OBSERVE_CHECK(static_cast<i128>(want_min) > static_cast<i128>(model_now) - p,
                        "alarm at " << want_min << " <= now - precision");
  }
  return std::nullopt;
}

// KeyWheel `w` against `model` with the model's min_allowed_key `model_min`,
// the level bits' total `num_bits` and the wheel's max_representable_key
// `max_rep`: size, empty, min_allowed_key; max_allowed_key at least
// 2^num_bits - 1 keys past the minimum (or max_rep), at most max_rep, and
// nondecreasing (`prev_max`, updated); min_key the model's, min_elt a
// contained element with that key.
template <class Wheel, class Model, class Key>
std::optional<std::string> observe_key_wheel(const Wheel& w, const Model& model, Key model_min, int num_bits,
                                             Key max_rep, Key& prev_max) {
  CHIME_OBSERVE_CHECK(w.size() == model.size(), "size " << w.size() << " != model " << model.size());
  CHIME_OBSERVE_CHECK(w.empty() == model.empty(), "empty()");
  CHIME_OBSERVE_CHECK(w.min_allowed_key() == model_min,
                      "min_allowed_key " << w.min_allowed_key() << " != " << model_min);
  const Key max = w.max_allowed_key();
  const Key lo = std::min<Key>(max_rep, model_min + ((Key{1} << num_bits) - 1));
  CHIME_OBSERVE_CHECK(max >= lo && max <= max_rep && max >= prev_max,
                      "max_allowed_key " << max << " outside [" << lo << ", 2^61-1] or decreased from " << prev_max);
  prev_max = max;
  const auto mk = w.min_key();
  const auto me = w.min_elt();
  CHIME_OBSERVE_CHECK(mk.has_value() == !model.empty() && me.has_value() == !model.empty(), "min presence");
  if (mk) {
    CHIME_OBSERVE_CHECK(*mk == *model.min_key(), "min_key " << *mk << " != " << *model.min_key());
    CHIME_OBSERVE_CHECK(w.contains(*me) && w.key(*me) == *mk, "min_elt is not a contained minimum element");
  }
  return std::nullopt;
}

#undef CHIME_OBSERVE_CHECK

}  // namespace chime_test
