// SPDX-License-Identifier: BSL-1.0
// Randomized differential tests: chime's TimingWheel<T> and KeyWheel<T> against
// the plain reference model of tests/reference_wheel.hpp (an ordered multiset),
// with fixed seeds. The operations and their checks are those of
// tests/wheel_op_driver.hpp (shared with the wheel fuzz target): every
// operation is applied to both; every call's fired set is compared exactly
// (which alarms, fired in nondecreasing interval/key order), never-early and
// the one-interval lateness bound are checked, and so are all the queries, the
// upper bound, stale handles and value lifetimes. This file picks the
// operations and their operands, weighted, from a seeded Random.
//
// Configurations: precisions {1, 3, 1000, 1'000'000} ns x level bits {1}, {1,1},
// {2,1,3}, {3,1}, {4,4,4}, {6,6,6,6}, default; tiny level bits hit the upper
// bound constantly. At least 1,000,000 TimingWheel operations per run
// (CHIME_DIFF_SCALE_PERCENT scales it). On failure the
// message names the seed, the configuration and the operation index.

#include "reference_wheel.hpp"
#include "wheel_op_driver.hpp"

#include <chime/wheel.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace chime_test;
using chime::LevelBits;

// Percentage of the nominal operation counts to run: 100 (>= 1M TimingWheel ops; a few seconds in a
// release build, about twice that under ASan+UBSan). The environment variable CHIME_DIFF_SCALE_PERCENT
// (or the macro of the same name) overrides it.
std::uint64_t scale_percent() {
  if (const char* s = std::getenv("CHIME_DIFF_SCALE_PERCENT")) {
    const long v = std::strtol(s, nullptr, 10);
    if (v > 0) return static_cast<std::uint64_t>(v);
  }
#if defined(CHIME_DIFF_SCALE_PERCENT)
  return CHIME_DIFF_SCALE_PERCENT;
#else
  return 100;
#endif
}

constexpr std::uint64_t kTimingOpsPerConfig = 40'000;  // x 28 configurations = 1,120,000
constexpr std::uint64_t kKeyOpsPerConfig = 30'000;     // x 8 configurations = 240,000

std::uint64_t g_total_ops = 0;

class OpsReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_total_ops != 0) {
      std::cout << "[ DIFF     ] differential operations in this run: " << g_total_ops << " (scale "
                << scale_percent() << "%)" << std::endl;
    }
  }
};
[[maybe_unused]] ::testing::Environment* const g_ops_report = ::testing::AddGlobalTestEnvironment(new OpsReport);

const std::vector<std::vector<int>>& bit_sets() {
  static const std::vector<std::vector<int>> sets = {{1},       {1, 1},       {2, 1, 3}, {3, 1},
                                                     {4, 4, 4}, {6, 6, 6, 6}, {11, 10, 10, 10, 10, 10}};
  return sets;
}

// Thrown by the driver's checks to stop a run at the first divergence.
struct Divergence {
  std::string message;
};

struct DiffReport {
  [[noreturn]] static void fail(const char* /*file*/, int /*line*/, const char* cond, const std::string& what) {
    throw Divergence{std::string("check failed: ") + cond + " | " + what};
  }
  static constexpr bool kTraces = false;
  static void trace(const std::string& /*line*/) {}
};

// Handles of removed alarms or elements kept for the stale-handle calls.
constexpr std::size_t kMaxStale = 256;

struct TimingStats : TimingDriverStats {
  std::uint64_t ops = 0;
  std::uint64_t epochs = 0;
};

// ---------------------------------------------------------------------------
// TimingWheel<Token> against ReferenceQueue<time, Alarm>

class TimingWheelDifferential {
 public:
  using Driver = TimingWheelDriver<Random, DiffReport>;

  TimingWheelDifferential(std::int64_t precision, std::vector<int> bits, std::uint64_t seed, std::uint64_t ops)
      : precision_(precision),
        bits_v_(std::move(bits)),
        bits_(LevelBits::create(std::span<const int>(bits_v_))),
        seed_(seed),
        ops_(ops),
        rng_(seed) {
    num_bits_ = bits_.num_bits();
    small_ = num_bits_ <= 12;
    target_size_ = num_bits_ <= 4 ? 24 : (num_bits_ <= 12 ? 160 : 1024);
  }

  // Runs the whole sequence; returns an empty string on success, else the failure with its context.
  std::string run() {
    try {
      for (op_ = 0; op_ < ops_; ++op_) {
        const bool enter_final_part = !in_final_part_ && op_ * 100 >= ops_ * 85;
        if (!d_ || ops_in_epoch_ >= epoch_len_ || exhausted() || enter_final_part) new_epoch();
        ++ops_in_epoch_;
        step();
        // Every 1024 operations, reserve room for 2,500 alarms more than the wheel holds (no random
        // draw, so the operation sequences are unchanged).
        if (op_ % 1024 == 512) d_->reserve(2500);
        d_->observe();
        if (small_ || op_ % 64 == 0) d_->check_invariants();
      }
      end_epoch();
    } catch (const Divergence& d) {
      return context() + d.message;
    } catch (const std::exception& e) {
      return context() + "unexpected exception: " + e.what();
    }
    stats_.ops = ops_;
    return {};
  }

  const TimingStats& stats() const { return stats_; }
  std::string name() const {
    return "precision=" + std::to_string(precision_) + "ns bits=" + bits_string(bits_v_) +
           " seed=" + std::to_string(seed_);
  }

 private:
  std::string context() const {
    std::ostringstream os;
    os << name() << " epoch=" << stats_.epochs;
    if (d_) os << " start=" << d_->math().start;
    os << " op=" << op_ << " (op " << ops_in_epoch_ << " of epoch) kind=" << kind_;
    if (d_) os << " now=" << d_->now() << " model_size=" << d_->model().size();
    os << ": ";
    return os.str();
  }

  const IntervalMath& m() const { return d_->math(); }
  std::int64_t model_now() const { return d_->now(); }

  // --- epochs -------------------------------------------------------------

  bool exhausted() const {
    // No room left below the upper bound (the end of representable time was reached).
    return static_cast<i128>(d_->upper_bound()) - model_now() <= precision_;
  }

  void new_epoch() {
    end_epoch();
    ++stats_.epochs;
    // The last part of the run starts at the very beginning of representable time.
    const bool final_part = op_ * 100 >= ops_ * 85;
    std::int64_t start = 0;
    switch (final_part ? 4 : stats_.epochs % 4) {
      case 0: start = 0; break;
      case 1: start = -static_cast<std::int64_t>(rng_.below(std::uint64_t{1} << 62)); break;
      case 2: start = static_cast<std::int64_t>(rng_.below(std::uint64_t{1} << 50)); break;
      case 3:  // close to the end of representable time: alarm_upper_bound saturates
        start = clamp64(static_cast<i128>(kI64Max) -
                        static_cast<i128>(precision_) * (256 + static_cast<i128>(rng_.below(1u << 22))));
        break;
      case 4: start = kI64Min + static_cast<std::int64_t>(rng_.below(1000)); break;
    }
    in_final_part_ = final_part;
    const std::size_t capacities[] = {0, 1, 64};
    const std::size_t capacity = capacities[rng_.below(3)];
    d_.emplace(rng_, precision_, bits_, capacity, start, kMaxStale);
    ops_in_epoch_ = 0;
    epoch_len_ = 4000 + rng_.below(8000);
  }

  void end_epoch() {
    if (!d_) return;
    d_->finish(rng_.chance(50));
    stats_.add(d_->stats());
    d_.reset();
  }

  // --- one random operation ----------------------------------------------

  void step() {
    const std::size_t size = d_->model().size();
    const std::uint64_t w_add = size < target_size_ / 2 ? 600 : (size < target_size_ ? 330 : 110);
    const std::uint64_t weights[] = {w_add, 90, 110, 280, 30, 40, 40, 40, 1, 60};
    std::uint64_t total = 0;
    for (std::uint64_t w : weights) total += w;
    std::uint64_t r = rng_.below(total);
    int op = 0;
    while (r >= weights[op]) r -= weights[op++];
    switch (op) {
      case 0: op_add(); break;
      case 1: op_remove(); break;
      case 2: op_reschedule(); break;
      case 3: op_advance(); break;
      case 4:
        kind_ = "fire_past_alarms";
        d_->fire_past();
        break;
      case 5: op_stale(); break;
      case 6: op_live(); break;
      case 7: op_query(); break;
      case 8:
        kind_ = "clear";
        d_->clear();
        break;
      case 9:
        op_cascade_ahead();
        break;
    }
  }

  // cascade_ahead moves alarms between levels and changes nothing a caller
  // sees: observe() and op_query compare everything after it.
  void op_cascade_ahead() {
    kind_ = "cascade_ahead";
    d_->cascade_ahead(rng_.chance(20) ? SIZE_MAX : rng_.below(6));
    if (rng_.chance(30)) op_query();
  }

  void op_query() {
    kind_ = "queries";
    d_->query(rng_.chance(5));
  }

  // A time for add/reschedule: near, far, exactly now, at and around the upper bound, before now,
  // or in the interval of an existing alarm.
  std::int64_t pick_time() {
    const std::int64_t now = model_now();
    const std::int64_t ub = d_->upper_bound();
    const i128 room = static_cast<i128>(ub) - now;
    const i128 p = precision_;
    const std::uint64_t r = rng_.below(100);
    if (r < 8) {
      kind_ = "at now";
      return now;
    }
    if (r < 20) {
      kind_ = "near";
      return clamp64(now + rng_.uniform(4 * p - 1));
    }
    if (r < 45) {
      kind_ = "log-uniform up to twice the room";
      return clamp64(now + rng_.log_uniform(2 * room + 4 * p));
    }
    if (r < 57) {
      kind_ = "uniform up to twice the room";
      return clamp64(now + rng_.uniform(2 * room));
    }
    if (r < 64) {
      kind_ = "just below the upper bound";
      return clamp64(ub - 1 - rng_.uniform(std::min<i128>(room - 1, p - 1)));
    }
    if (r < 72) {
      kind_ = "exactly the upper bound";
      return ub;
    }
    if (r < 80) {
      kind_ = "past the upper bound";
      return clamp64(static_cast<i128>(ub) + 1 + rng_.log_uniform(room));
    }
    if (r < 85) {
      kind_ = "before now";
      return clamp64(static_cast<i128>(now) - 1 - rng_.uniform(2 * p));
    }
    const auto id = d_->pick_id();
    if (!id) {
      kind_ = "at now (empty)";
      return now;
    }
    const std::int64_t other = d_->model().find(*id)->key;
    if (r < 93) {
      kind_ = "time of an existing alarm";
      return other;
    }
    kind_ = "interval of an existing alarm";
    return clamp64(m().interval_start(other) + rng_.uniform(p - 1));
  }

  void op_add() {
    const std::int64_t at = pick_time();
    if (!rng_.chance(10)) return d_->add(at);
    // add_at_interval_num(k) == add(interval_num_start(k)).
    std::int64_t k;
    if (at >= m().start) {
      k = static_cast<std::int64_t>(std::min<i128>(m().num(at), kI64Max));
    } else {
      k = rng_.chance(50) ? -1 - static_cast<std::int64_t>(rng_.below(5))
                          : kI64Max - static_cast<std::int64_t>(rng_.below(3));
    }
    d_->add_at_interval_num(k);
  }

  void op_remove() {
    const auto id = d_->pick_id();
    if (!id) return op_stale();
    kind_ = "remove";
    d_->remove(*id);
  }

  void op_reschedule() {
    const auto id = d_->pick_id();
    if (!id) return op_add();
    const std::int64_t key = d_->model().find(*id)->key;
    const std::int64_t now = model_now();
    std::int64_t at;
    const std::uint64_t r = rng_.below(100);
    if (r < 30) {
      kind_ = "reschedule earlier";
      at = clamp64(std::max<i128>(now, key) - rng_.uniform(static_cast<i128>(key) - now));
    } else if (r < 60) {
      kind_ = "reschedule later";
      at = clamp64(key + rng_.log_uniform(static_cast<i128>(d_->upper_bound()) - key));
    } else {
      at = pick_time();
      kind_ = std::string("reschedule to ") + kind_;
    }
    if (rng_.chance(10) && at >= m().start) {
      d_->reschedule_at_interval_num(*id, static_cast<std::int64_t>(std::min<i128>(m().num(at), kI64Max)));
    } else {
      d_->reschedule(*id, at);
    }
  }

  void op_advance() {
    const std::int64_t now = model_now();
    const std::int64_t ub = d_->upper_bound();
    const i128 room = static_cast<i128>(ub) - now;
    const i128 p = precision_;
    const auto& model = d_->model();
    // Jumps that may use up the epoch's time range only happen in its second half.
    const bool late = ops_in_epoch_ * 2 >= epoch_len_;
    const i128 local_horizon = p << std::min(num_bits_, 24);
    i128 to = now;
    const std::uint64_t r = rng_.below(1000);
    if (r < 50) {
      kind_ = "advance to now";
      to = now;
    } else if (r < 100) {
      kind_ = "advance backwards";
      to = static_cast<i128>(now) - 1 - rng_.uniform(2 * p);
    } else if (r < 200) {
      kind_ = "advance 1ns";
      to = static_cast<i128>(now) + 1;
    } else if (r < 320) {
      kind_ = "advance < precision";
      to = now + rng_.uniform(p - 1);
    } else if (r < 420) {
      kind_ = "advance one precision";
      to = now + p;
    } else if (r < 550) {
      kind_ = "advance a few precisions";
      to = now + rng_.uniform(4 * p);
    } else if (r < 650 && !model.empty()) {
      const i128 next = m().interval_start(*model.min_key()) + p;
      if (rng_.chance(50)) {
        kind_ = "advance to next_alarm_fires_at";
        to = next;
      } else {
        kind_ = "advance to next_alarm_fires_at - 1";
        to = next - 1;
      }
    } else if (r < 730 && !model.empty()) {
      // A far alarm's time can use up the epoch's time range: early in the epoch, take the earliest alarm's.
      const std::int64_t other = model.find(*d_->pick_id())->key;
      if (late || static_cast<i128>(other) - now <= local_horizon) {
        kind_ = "advance to an alarm's time";
        to = static_cast<i128>(other) + static_cast<i128>(rng_.below(2));
      } else {
        kind_ = "advance to the earliest alarm's time";
        to = static_cast<i128>(*model.min_key()) + static_cast<i128>(rng_.below(2));
      }
    } else if (r < 960) {
      // Mostly within a local horizon (so alarms pile up and move down level by level), sometimes the whole room.
      if (rng_.chance(90)) {
        kind_ = "advance log-uniform within the local horizon";
        to = now + rng_.log_uniform(std::min<i128>(room, local_horizon));
      } else {
        kind_ = "advance log-uniform within the room";
        to = now + rng_.log_uniform(room);
      }
    } else if (r < 975) {
      // Close to the upper bound: may use up the epoch's time range, so only in its second half.
      if (late) {
        kind_ = "advance close to the upper bound";
        to = static_cast<i128>(ub) - 1 - rng_.uniform(std::min<i128>(room - 1, 4 * p));
      } else {
        kind_ = "advance one precision (early in epoch)";
        to = now + p;
      }
    } else if (r < 990 && late) {
      kind_ = "advance way past everything";
      const i128 base = std::max<i128>(now, model.empty() ? now : *model.max_key());
      to = base + p + rng_.log_uniform(p << 40);
    } else if (r < 990) {
      kind_ = "advance past the earliest alarm";
      to = std::max<i128>(now, model.empty() ? now : *model.min_key()) + p + rng_.log_uniform(local_horizon);
    } else if (m().num(kI64Max) > kMaxRepresentableKey) {
      kind_ = "advance too far";
      to = rng_.chance(50) ? m().num_start(kMaxRepresentableKey + 1) + rng_.uniform(p - 1) : i128{kI64Max};
    } else if (late) {
      kind_ = "advance to TimePoint::max()";
      to = kI64Max;
    } else {
      kind_ = "advance one precision (early in epoch)";
      to = now + p;
    }
    d_->advance(to);
  }

  void op_stale() {
    kind_ = "stale handle";
    const Driver::Alarm s = d_->pick_stale();
    d_->stale(s, static_cast<unsigned>(rng_.below(7)));
  }

  void op_live() {
    const auto id = d_->pick_id();
    if (!id) return op_stale();
    kind_ = "live handle";
    d_->live(*id);
  }

  std::int64_t precision_;
  std::vector<int> bits_v_;
  LevelBits bits_;
  int num_bits_ = 0;
  bool small_ = false;
  std::uint64_t target_size_ = 0;
  std::uint64_t seed_;
  std::uint64_t ops_;
  Random rng_;
  std::optional<Driver> d_;
  std::uint64_t op_ = 0;
  std::uint64_t ops_in_epoch_ = 0;
  std::uint64_t epoch_len_ = 0;
  bool in_final_part_ = false;
  std::string kind_ = "-";
  TimingStats stats_;
};

class WheelDifferential : public ::testing::TestWithParam<std::int64_t> {};

// For every configuration, every operation of TimingWheel agrees exactly with the reference model.
TEST_P(WheelDifferential, timing_wheel_matches_reference_model) {
  const std::int64_t precision = GetParam();
  const std::uint64_t ops = kTimingOpsPerConfig * scale_percent() / 100;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < bit_sets().size(); ++i) {
    const std::uint64_t seed = 0xC0FFEEull * 1000003ull + static_cast<std::uint64_t>(precision) * 131ull + i;
    TimingWheelDifferential diff(precision, bit_sets()[i], seed, ops);
    SCOPED_TRACE(diff.name());
    const std::string failure = diff.run();
    EXPECT_TRUE(failure.empty()) << failure;
    if (!failure.empty()) continue;  // go on with the other configurations
    const TimingStats& s = diff.stats();
    total += s.ops;
    std::cout << "[ DIFF     ] " << diff.name() << ": " << s.ops << " ops, " << s.epochs << " epochs, "
              << s.add_attempts << " adds (" << s.add_rejected_over_bound << " at/over the bound, "
              << s.add_rejected_before_now << " before now), " << s.advances << " advances (" << s.advances_rejected
              << " too far), " << s.fired << " fired + " << s.fired_past << " past, max size " << s.max_size << ", "
              << s.invariant_checks << " invariant checks" << std::endl;
    // Every configuration hits the upper bound; tiny level bits hit it constantly.
    const int num_bits = LevelBits::create(std::span<const int>(bit_sets()[i])).num_bits();
    const std::uint64_t min_percent = num_bits <= 2 ? 20 : (num_bits <= 4 ? 15 : 10);
    EXPECT_GE(s.add_rejected_over_bound * 100, s.add_attempts * min_percent)
        << "too few adds at or over the upper bound (wanted " << min_percent << "%)";
    EXPECT_GT(s.add_rejected_before_now, 0u);
    EXPECT_GT(s.fired, s.ops / 50) << "too few alarms fired to be a meaningful run";
  }
  g_total_ops += total;
  std::cout << "[ DIFF     ] precision " << precision << "ns: " << total << " TimingWheel operations" << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Precisions, WheelDifferential,
                         ::testing::Values(std::int64_t{1}, std::int64_t{3}, std::int64_t{1000},
                                           std::int64_t{1'000'000}),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) {
                           return "precision_" + std::to_string(info.param) + "ns";
                         });

// ---------------------------------------------------------------------------
// KeyWheel<Token> against ReferenceQueue<key, Elt>

struct KeyStats : KeyDriverStats {
  std::uint64_t ops = 0;
  std::uint64_t epochs = 0;
};

class KeyWheelDifferential {
 public:
  using Driver = KeyWheelDriver<Random, DiffReport>;
  using Key = Driver::Key;
  static constexpr Key kMaxRep = Driver::kMaxRep;

  KeyWheelDifferential(std::vector<int> bits, std::uint64_t seed, std::uint64_t ops)
      : bits_v_(std::move(bits)), bits_(LevelBits::create(std::span<const int>(bits_v_))), seed_(seed), ops_(ops),
        rng_(seed) {
    num_bits_ = bits_.num_bits();
    small_ = num_bits_ <= 12;
    target_size_ = num_bits_ <= 4 ? 24 : (num_bits_ <= 12 ? 160 : 1024);
  }

  std::string name() const { return "bits=" + bits_string(bits_v_) + " seed=" + std::to_string(seed_); }
  const KeyStats& stats() const { return stats_; }
  // After every operation, also cascade_ahead with a budget in [0, max_budget].
  void cascade_ahead_after_every_step(std::uint64_t max_budget) { ahead_budget_ = max_budget + 1; }

  std::string run() {
    try {
      for (op_ = 0; op_ < ops_; ++op_) {
        if (!d_ || ops_in_epoch_ >= epoch_len_ || d_->min() == kMaxRep) new_epoch();
        ++ops_in_epoch_;
        step();
        if (ahead_budget_ != 0) {
          kind_ = "cascade_ahead after the step";
          d_->cascade_ahead(rng_.below(ahead_budget_));
        }
        // Every 1024 operations, reserve room for 2,500 elements more than the wheel holds (no random
        // draw, so the operation sequences are unchanged).
        if (op_ % 1024 == 512) d_->reserve(2500);
        d_->observe();
        if (small_ || op_ % 64 == 0) d_->check_invariants();
      }
      end_epoch();
    } catch (const Divergence& d) {
      return context() + d.message;
    } catch (const std::exception& e) {
      return context() + "unexpected exception: " + e.what();
    }
    stats_.ops = ops_;
    return {};
  }

 private:
  std::string context() const {
    std::ostringstream os;
    os << name() << " epoch=" << stats_.epochs << " op=" << op_ << " (op " << ops_in_epoch_
       << " of epoch) kind=" << kind_;
    if (d_) os << " min_allowed=" << d_->min() << " model_size=" << d_->model().size();
    os << ": ";
    return os.str();
  }

  void new_epoch() {
    end_epoch();
    ++stats_.epochs;
    d_.emplace(rng_, bits_, static_cast<std::size_t>(rng_.below(3) * 32), kMaxStale);
    ops_in_epoch_ = 0;
    epoch_len_ = 3000 + rng_.below(6000);
    // Some epochs start high, to exercise keys near 2^61-1.
    if (stats_.epochs % 3 == 2) {
      const Key k = kMaxRep - rng_.below(std::uint64_t{1} << (10 + rng_.below(40)));
      d_->increase(k);
    }
  }

  void end_epoch() {
    if (!d_) return;
    d_->finish(rng_.chance(50));
    stats_.add(d_->stats());
    d_.reset();
  }

  Key pick_key() {
    const Key min = d_->min();
    const Key max = d_->max_allowed();
    const i128 span = static_cast<i128>(max) - min;
    const std::uint64_t r = rng_.below(100);
    if (r < 10) {
      kind_ = "min allowed key";
      return min;
    }
    if (r < 22) {
      kind_ = "near";
      return min + rng_.below(4);
    }
    if (r < 50) {
      kind_ = "log-uniform up to twice the span";
      return static_cast<Key>(std::min<i128>(min + rng_.log_uniform(2 * span + 4), ~Key{0}));
    }
    if (r < 58) {
      kind_ = "max allowed key";
      return max;
    }
    if (r < 66) {
      kind_ = "just past max allowed key";
      return max + 1 + rng_.below(4);
    }
    if (r < 70) {
      kind_ = "past max representable key";
      return kMaxRep + 1 + rng_.below(1000);
    }
    if (r < 78 && min > 0) {
      kind_ = "below min allowed key";
      return min - 1 - rng_.below(std::min<Key>(min, 8));
    }
    const auto id = d_->pick_id();
    if (!id) {
      kind_ = "min allowed key (empty)";
      return min;
    }
    kind_ = "key of an existing element";
    return d_->model().find(*id)->key;
  }

  void step() {
    const std::uint64_t w_add = d_->model().size() < target_size_ ? 350 : 120;
    const std::uint64_t weights[] = {w_add, 100, 120, 250, 40, 40, 40, 1, 60};
    std::uint64_t total = 0;
    for (std::uint64_t w : weights) total += w;
    std::uint64_t r = rng_.below(total);
    int op = 0;
    while (r >= weights[op]) r -= weights[op++];
    switch (op) {
      case 0:
        d_->add(pick_key());
        break;
      case 1: op_remove(); break;
      case 2: op_change_key(); break;
      case 3: op_increase(); break;
      case 4: op_stale(); break;
      case 5: op_live(); break;
      case 6: op_for_each(); break;
      case 7:
        kind_ = "clear";
        d_->clear();
        break;
      case 8:
        // cascade_ahead moves elements between levels and changes nothing a caller
        // sees: observe() compares the minimum after it, and for_each the rest.
        kind_ = "cascade_ahead";
        d_->cascade_ahead(rng_.chance(20) ? SIZE_MAX : rng_.below(6));
        break;
    }
  }

  void op_remove() {
    const auto id = d_->pick_id();
    if (!id) return op_stale();
    kind_ = "remove";
    d_->remove(*id);
  }

  void op_change_key() {
    const auto id = d_->pick_id();
    if (!id) return d_->add(pick_key());
    const Key key = pick_key();
    kind_ = "change_key to " + kind_;
    d_->change_key(*id, key);
  }

  void op_increase() {
    const Key min = d_->min();
    const Key max = d_->max_allowed();
    const bool late = ops_in_epoch_ * 2 >= epoch_len_;  // jumps that may end the epoch only in its second half
    const std::uint64_t r = rng_.below(1000);
    i128 key;
    if (r < 60) {
      kind_ = "increase to <= min";
      key = min - std::min<Key>(min, rng_.below(3));
    } else if (r < 260) {
      kind_ = "increase by 1";
      key = i128{min} + 1;
    } else if (r < 460) {
      kind_ = "increase by a few";
      key = i128{min} + 1 + rng_.below(8);
    } else if (r < 620 && !d_->model().empty()) {
      kind_ = "increase to an element's key (+1)";
      key = i128{d_->model().find(*d_->pick_id())->key} + rng_.below(2);
    } else if (r < 900) {
      kind_ = "increase log-uniform within the span";
      key = i128{min} + 1 + rng_.log_uniform(static_cast<i128>(max) - min);
    } else if (r < 940 && max < kMaxRep) {
      kind_ = "increase past max allowed key";
      key = i128{max} + 1 + rng_.log_uniform(static_cast<i128>(max) - min + 1);
    } else if (r < 960 && late) {
      kind_ = "increase close to max representable key";
      key = i128{kMaxRep} - rng_.below(64);
    } else if (r < 980) {
      kind_ = "increase above max representable key";
      return d_->increase(kMaxRep + 1 + rng_.below(1000));
    } else {
      kind_ = "increase by one level-0 span";
      key = i128{min} + (i128{1} << bits_v_[0]);
    }
    if (key > kMaxRep) key = late ? i128{kMaxRep} : i128{min} + 1;
    if (key > kMaxRep) key = kMaxRep;
    d_->increase(static_cast<Key>(key));
  }

  void op_stale() {
    kind_ = "stale handle";
    const Driver::Elt s = d_->pick_stale();
    d_->stale(s, static_cast<unsigned>(rng_.below(5)));
  }

  void op_live() {
    const auto id = d_->pick_id();
    if (!id) return op_stale();
    kind_ = "live handle";
    d_->live(*id);
  }

  void op_for_each() {
    kind_ = "for_each";
    if (!rng_.chance(10)) return;
    d_->for_each();
  }

  std::vector<int> bits_v_;
  LevelBits bits_;
  int num_bits_ = 0;
  bool small_ = false;
  std::uint64_t target_size_ = 0;
  std::uint64_t seed_;
  std::uint64_t ops_;
  Random rng_;
  std::optional<Driver> d_;
  std::uint64_t op_ = 0;
  std::uint64_t ops_in_epoch_ = 0;
  std::uint64_t epoch_len_ = 0;
  std::string kind_ = "-";
  KeyStats stats_;
  std::uint64_t ahead_budget_ = 0;  // 0: no cascade_ahead after each step
};

// For every level-bits configuration (and 61 one-bit levels), every KeyWheel operation agrees exactly with
// the reference model.
TEST(WheelDifferential, key_wheel_matches_reference_model) {
  const std::uint64_t ops = kKeyOpsPerConfig * scale_percent() / 100;
  std::uint64_t total = 0;
  std::vector<std::vector<int>> sets = bit_sets();
  sets.push_back(std::vector<int>(61, 1));
  for (std::size_t i = 0; i < sets.size(); ++i) {
    KeyWheelDifferential diff(sets[i], 0x5EEDull * 7919ull + i, ops);
    SCOPED_TRACE(diff.name());
    const std::string failure = diff.run();
    EXPECT_TRUE(failure.empty()) << failure;
    if (!failure.empty()) continue;  // go on with the other configurations
    const KeyStats& s = diff.stats();
    total += s.ops;
    std::cout << "[ DIFF     ] KeyWheel " << diff.name() << ": " << s.ops << " ops, " << s.epochs << " epochs, "
              << s.add_attempts << " adds (" << s.add_rejected << " rejected), " << s.increases << " increases, "
              << s.removed_by_increase << " removed by them" << std::endl;
    EXPECT_GT(s.add_rejected, 0u);
    EXPECT_GT(s.removed_by_increase, s.ops / 50);
  }
  g_total_ops += total;
  std::cout << "[ DIFF     ] KeyWheel: " << total << " operations" << std::endl;
}

// With cascade_ahead called after every operation, so that spans are moved down ahead at every level
// (level 0 from level 1, and each level from the one above at its span boundaries), every KeyWheel
// operation still agrees exactly with the reference model.
TEST(WheelDifferential, matches_reference_model_with_cascade_ahead_after_every_step) {
  const std::uint64_t ops = kKeyOpsPerConfig * scale_percent() / 100;
  const std::vector<std::vector<int>> sets = {{2, 2, 2, 2}, {3, 2, 2}, {4, 2, 3, 3}, {1, 1, 1, 1, 1}, {2, 1, 3}};
  for (std::size_t i = 0; i < sets.size(); ++i) {
    KeyWheelDifferential diff(sets[i], 0xA11EADull * 7919ull + i, ops);
    diff.cascade_ahead_after_every_step(i % 2 == 0 ? 4 : 64);
    SCOPED_TRACE(diff.name());
    const std::string failure = diff.run();
    EXPECT_TRUE(failure.empty()) << failure;
    if (!failure.empty()) continue;
    EXPECT_GT(diff.stats().removed_by_increase, diff.stats().ops / 50);
    g_total_ops += diff.stats().ops;
  }
}

}  // namespace
