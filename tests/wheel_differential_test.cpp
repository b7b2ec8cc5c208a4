// SPDX-License-Identifier: BSL-1.0
// Randomized differential tests: chime's TimingWheel<T> and KeyWheel<T> against
// the plain reference model of tests/reference_wheel.hpp (an ordered multiset),
// with fixed seeds. Every operation is applied to both; every call's fired set
// is compared exactly (which alarms, fired in nondecreasing interval/key order),
// never-early and the one-interval lateness bound are checked, and so are all
// the queries, the upper bound, stale handles and value lifetimes.
//
// Configurations: precisions {1, 3, 1000, 1'000'000} ns x level bits {1}, {1,1},
// {2,1,3}, {3,1}, {4,4,4}, {6,6,6,6}, default; tiny level bits hit the upper
// bound constantly. At least 1,000,000 TimingWheel operations per run
// (CHIME_DIFF_SCALE_PERCENT scales it). On failure the
// message names the seed, the configuration and the operation index.

#include "reference_wheel.hpp"
#include "wheel_observe.hpp"

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
using chime::Duration;
using chime::LevelBits;
using chime::TimePoint;

TimePoint T(std::int64_t ns) { return TimePoint{Duration{ns}}; }
std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

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

std::string bits_string(const std::vector<int>& bits) {
  std::string s = "{";
  for (std::size_t i = 0; i < bits.size(); ++i) s += (i ? "," : "") + std::to_string(bits[i]);
  return s + "}";
}

// A value that counts its live instances, so the tests can see values being destroyed.
struct Token {
  static inline long live = 0;
  std::uint64_t id;
  explicit Token(std::uint64_t i) : id(i) { ++live; }
  Token(const Token& o) : id(o.id) { ++live; }
  Token(Token&& o) noexcept : id(o.id) { ++live; }
  Token& operator=(const Token&) = default;
  Token& operator=(Token&&) noexcept = default;
  ~Token() { --live; }
};

// Thrown by the checks below to stop a run at the first divergence.
struct Divergence {
  std::string message;
};

#define DIFF_CHECK(cond, what)                                                   \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::ostringstream diff_check_os_;                                         \
      diff_check_os_ << "check failed: " #cond " | " << what; /* NOLINT */       \
      throw Divergence{diff_check_os_.str()};                                    \
    }                                                                            \
  } while (0)

struct TimingStats {
  std::uint64_t ops = 0;
  std::uint64_t epochs = 0;
  std::uint64_t add_attempts = 0;
  std::uint64_t add_rejected_over_bound = 0;
  std::uint64_t add_rejected_before_now = 0;
  std::uint64_t reschedules = 0;
  std::uint64_t advances = 0;
  std::uint64_t advances_rejected = 0;
  std::uint64_t fired = 0;
  std::uint64_t fired_past = 0;
  std::uint64_t max_size = 0;
  std::uint64_t invariant_checks = 0;
};

// ---------------------------------------------------------------------------
// TimingWheel<Token> against ReferenceQueue<time, Alarm>

class TimingWheelDifferential {
 public:
  using Wheel = chime::TimingWheel<Token>;
  using Alarm = Wheel::Alarm;
  using Model = ReferenceQueue<std::int64_t, Alarm>;

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

  // Every 1024 operations, reserve room for 2,500 alarms more than the wheel
  // holds (no random draw, so the operation sequences are unchanged): reserve
  // writes the nodes growth left unused and must keep every handle, value and
  // order; the comparisons that follow check it.
  void reserve_now_and_then() {
    if (op_ % 1024 != 512) return;
    const std::size_t want = wheel_->size() + 2500;
    wheel_->reserve(want);
    DIFF_CHECK(wheel_->capacity() >= want, "reserve(" << want << ") left capacity " << wheel_->capacity());
  }
  std::string run() {
    try {
      for (op_ = 0; op_ < ops_; ++op_) {
        const bool enter_final_part = !in_final_part_ && op_ * 100 >= ops_ * 85;
        if (!wheel_ || ops_in_epoch_ >= epoch_len_ || exhausted() || enter_final_part) new_epoch();
        ++ops_in_epoch_;
        step();
        reserve_now_and_then();
        observe();
        const bool check_now = small_ || op_ % 64 == 0;
        if (check_now) check_invariants();
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
    os << name() << " epoch=" << stats_.epochs << " start=" << m_.start << " op=" << op_
       << " (op " << ops_in_epoch_ << " of epoch) kind=" << kind_ << " now=" << model_now_
       << " model_size=" << model_.size() << ": ";
    return os.str();
  }

  // --- epochs -------------------------------------------------------------

  bool exhausted() const {
    // No room left below the upper bound (the end of representable time was reached).
    return static_cast<i128>(N(wheel_->alarm_upper_bound())) - model_now_ <= precision_;
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
    m_ = IntervalMath{start, precision_};
    const std::size_t capacities[] = {0, 1, 64};
    wheel_.emplace(chime::WheelConfig{Duration{precision_}, bits_, capacities[rng_.below(3)]}, T(start));
    model_now_ = start;
    prev_ub_ = kI64Min;
    ops_in_epoch_ = 0;
    epoch_len_ = 4000 + rng_.below(8000);
    stale_.clear();
    stale_.push_back(Alarm{});
    DIFF_CHECK(Token::live == 0, "live values " << Token::live << " before a new epoch");
    DIFF_CHECK(N(wheel_->now()) == start && N(wheel_->start()) == start, "start");
  }

  void end_epoch() {
    if (!wheel_) return;
    check_invariants();
    compare_for_each();
    if (rng_.chance(50)) {
      wheel_->clear();
      DIFF_CHECK(wheel_->empty() && wheel_->size() == 0, "clear left " << wheel_->size() << " alarms");
      DIFF_CHECK(Token::live == 0, "clear left " << Token::live << " values alive");
      for (std::uint64_t id : model_.ids()) {
        DIFF_CHECK(!wheel_->contains(model_.find(id)->handle), "cleared alarm " << id << " still contained");
      }
      model_.clear();
      check_invariants();
    } else {
      model_.clear();
    }
    wheel_.reset();
    DIFF_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

  // --- one random operation ----------------------------------------------

  void step() {
    const std::uint64_t w_add = model_.size() < target_size_ / 2 ? 600 : (model_.size() < target_size_ ? 330 : 110);
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
      case 4: op_fire_past(); break;
      case 5: op_stale(); break;
      case 6: op_live(); break;
      case 7: op_query(); break;
      case 8: op_clear(); break;
      case 9:
        op_cascade_ahead();
        break;
    }
  }

  // cascade_ahead moves alarms between levels and changes nothing a caller
  // sees: observe() and op_query compare everything after it.
  void op_cascade_ahead() {
    kind_ = "cascade_ahead";
    const std::size_t budget = rng_.chance(20) ? SIZE_MAX : rng_.below(6);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    DIFF_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left alarms behind");
    DIFF_CHECK(wheel_->size() == size, "cascade_ahead changed size");
    if (rng_.chance(30)) op_query();
  }

  std::int64_t upper_bound() const { return N(wheel_->alarm_upper_bound()); }

  // A time for add/reschedule: near, far, exactly now, at and around the upper bound, before now,
  // or in the interval of an existing alarm.
  std::int64_t pick_time() {
    const std::int64_t now = model_now_;
    const std::int64_t ub = upper_bound();
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
    if (model_.empty()) {
      kind_ = "at now (empty)";
      return now;
    }
    const std::int64_t other = model_.find(model_.random_id(rng_))->key;
    if (r < 93) {
      kind_ = "time of an existing alarm";
      return other;
    }
    kind_ = "interval of an existing alarm";
    return clamp64(m_.interval_start(other) + rng_.uniform(p - 1));
  }

  bool accepts(i128 at) const { return at >= model_now_ && at < upper_bound(); }

  void op_add() {
    ++stats_.add_attempts;
    const std::uint64_t id = next_id_++;
    std::int64_t at = pick_time();
    const std::int64_t ub = upper_bound();
    std::optional<std::int64_t> k;  // set when add_at_interval_num is used
    if (rng_.chance(10)) {
      // add_at_interval_num(k) == add(interval_num_start(k)).
      if (at >= m_.start) {
        k = static_cast<std::int64_t>(std::min<i128>(m_.num(at), kI64Max));
      } else {
        k = rng_.chance(50) ? -1 - static_cast<std::int64_t>(rng_.below(5)) : kI64Max - static_cast<std::int64_t>(rng_.below(3));
      }
    }
    bool expect_ok;
    if (k) {
      const i128 s = *k < 0 ? i128{-1} : m_.num_start(*k);
      expect_ok = *k >= 0 && s <= kI64Max && accepts(s);
      if (expect_ok) at = static_cast<std::int64_t>(s);
    } else {
      expect_ok = accepts(at);
    }
    const std::size_t size_before = wheel_->size();
    try {
      const Alarm a = k ? wheel_->add_at_interval_num(*k, Token(id)) : wheel_->add(T(at), Token(id));
      DIFF_CHECK(expect_ok, "add accepted at=" << at << " k=" << (k ? std::to_string(*k) : "-") << " now=" << model_now_
                                               << " upper_bound=" << ub);
      model_.insert(id, at, a);
      DIFF_CHECK(wheel_->contains(a), "new alarm not contained");
      DIFF_CHECK(N(wheel_->at(a)) == at, "at() " << N(wheel_->at(a)) << " != " << at);
    } catch (const std::out_of_range&) {
      DIFF_CHECK(!expect_ok, "add rejected at=" << at << " k=" << (k ? std::to_string(*k) : "-")
                                                << " now=" << model_now_ << " upper_bound=" << ub);
      if (at >= ub) ++stats_.add_rejected_over_bound;
      if (at < model_now_) ++stats_.add_rejected_before_now;
      DIFF_CHECK(wheel_->size() == size_before, "rejected add changed size");
    }
  }

  void op_remove() {
    if (model_.empty()) return op_stale();
    kind_ = "remove";
    const std::uint64_t id = model_.random_id(rng_);
    const Alarm h = model_.find(id)->handle;
    wheel_->remove(h);
    model_.erase(id);
    DIFF_CHECK(!wheel_->contains(h), "removed alarm still contained");
    push_stale(h);
  }

  void op_reschedule() {
    if (model_.empty()) return op_add();
    ++stats_.reschedules;
    const std::uint64_t id = model_.random_id(rng_);
    const Model::Entry e = *model_.find(id);
    const std::int64_t ub = upper_bound();
    std::int64_t at;
    const std::uint64_t r = rng_.below(100);
    if (r < 30) {
      kind_ = "reschedule earlier";
      at = clamp64(std::max<i128>(model_now_, e.key) - rng_.uniform(static_cast<i128>(e.key) - model_now_));
    } else if (r < 60) {
      kind_ = "reschedule later";
      at = clamp64(e.key + rng_.log_uniform(static_cast<i128>(ub) - e.key));
    } else {
      at = pick_time();
      kind_ = std::string("reschedule to ") + kind_;
    }
    std::optional<std::int64_t> k;
    if (rng_.chance(10) && at >= m_.start) k = static_cast<std::int64_t>(std::min<i128>(m_.num(at), kI64Max));
    bool expect_ok;
    if (k) {
      const i128 s = m_.num_start(*k);
      expect_ok = s <= kI64Max && accepts(s);
      if (expect_ok) at = static_cast<std::int64_t>(s);
    } else {
      expect_ok = accepts(at);
    }
    try {
      if (k) {
        wheel_->reschedule_at_interval_num(e.handle, *k);
      } else {
        wheel_->reschedule(e.handle, T(at));
      }
      DIFF_CHECK(expect_ok, "reschedule accepted at=" << at << " now=" << model_now_ << " upper_bound=" << ub);
      model_.change(id, at);
    } catch (const std::out_of_range&) {
      DIFF_CHECK(!expect_ok, "reschedule rejected at=" << at << " now=" << model_now_ << " upper_bound=" << ub);
    }
    DIFF_CHECK(wheel_->contains(e.handle), "rescheduled alarm not contained");
    DIFF_CHECK(N(wheel_->at(e.handle)) == model_.find(id)->key,
               "at() " << N(wheel_->at(e.handle)) << " != model " << model_.find(id)->key);
  }

  struct FiredRec {
    Alarm alarm;
    std::int64_t at;
    std::uint64_t id;
    bool contained;
  };

  // Compares one call's fired alarms with the model's, exactly.
  void compare_fired(const std::vector<FiredRec>& fired, std::vector<std::pair<std::uint64_t, Model::Entry>>& expected,
                     const char* what) {
    std::vector<std::uint64_t> got_ids;
    for (const FiredRec& f : fired) got_ids.push_back(f.id);
    std::vector<std::uint64_t> want_ids;
    for (const auto& [id, e] : expected) want_ids.push_back(id);
    std::vector<std::uint64_t> got_sorted = got_ids;
    std::sort(got_sorted.begin(), got_sorted.end());
    std::sort(want_ids.begin(), want_ids.end());
    if (got_sorted != want_ids) {
      std::vector<std::uint64_t> missing, extra;
      std::set_difference(want_ids.begin(), want_ids.end(), got_sorted.begin(), got_sorted.end(),
                          std::back_inserter(missing));
      std::set_difference(got_sorted.begin(), got_sorted.end(), want_ids.begin(), want_ids.end(),
                          std::back_inserter(extra));
      std::ostringstream os;
      os << what << ": fired " << got_ids.size() << " alarms, model expected " << want_ids.size() << "; missing:";
      for (std::size_t i = 0; i < missing.size() && i < 8; ++i) {
        for (const auto& [id, e] : expected) {
          if (id == missing[i]) os << " id " << id << " at " << e.key;
        }
      }
      os << "; extra:";
      for (std::size_t i = 0; i < extra.size() && i < 8; ++i) {
        for (const FiredRec& f : fired) {
          if (f.id == extra[i]) os << " id " << f.id << " at " << f.at;
        }
      }
      throw Divergence{os.str()};
    }
    std::unordered_map<std::uint64_t, std::int64_t> want_at;
    for (const auto& [id, e] : expected) want_at.emplace(id, e.key);
    for (std::size_t i = 0; i < fired.size(); ++i) {
      const FiredRec& f = fired[i];
      DIFF_CHECK(!f.contained, what << ": contains() true inside the handler for id " << f.id);
      DIFF_CHECK(f.at == want_at.at(f.id), what << ": at() " << f.at << " != model " << want_at.at(f.id));
      if (i > 0) {
        DIFF_CHECK(m_.num(fired[i - 1].at) <= m_.num(f.at),
                   what << ": interval order broken at position " << i << ": " << fired[i - 1].at << " then "
                        << f.at);
      }
      push_stale(f.alarm);
    }
  }

  void op_advance() {
    ++stats_.advances;
    const std::int64_t now = model_now_;
    const std::int64_t ub = upper_bound();
    const i128 room = static_cast<i128>(ub) - now;
    const i128 p = precision_;
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
    } else if (r < 650 && !model_.empty()) {
      const i128 next = m_.interval_start(*model_.min_key()) + p;
      if (rng_.chance(50)) {
        kind_ = "advance to next_alarm_fires_at";
        to = next;
      } else {
        kind_ = "advance to next_alarm_fires_at - 1";
        to = next - 1;
      }
    } else if (r < 730 && !model_.empty()) {
      // A far alarm's time can use up the epoch's time range: early in the epoch, take the earliest alarm's.
      const std::int64_t other = model_.find(model_.random_id(rng_))->key;
      if (late || static_cast<i128>(other) - now <= local_horizon) {
        kind_ = "advance to an alarm's time";
        to = static_cast<i128>(other) + static_cast<i128>(rng_.below(2));
      } else {
        kind_ = "advance to the earliest alarm's time";
        to = static_cast<i128>(*model_.min_key()) + static_cast<i128>(rng_.below(2));
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
      const i128 base = std::max<i128>(now, model_.empty() ? now : *model_.max_key());
      to = base + p + rng_.log_uniform(p << 40);
    } else if (r < 990) {
      kind_ = "advance past the earliest alarm";
      to = std::max<i128>(now, model_.empty() ? now : *model_.min_key()) + p + rng_.log_uniform(local_horizon);
    } else if (m_.num(kI64Max) > kMaxRepresentableKey) {
      kind_ = "advance too far";
      to = rng_.chance(50) ? m_.num_start(kMaxRepresentableKey + 1) + rng_.uniform(p - 1) : i128{kI64Max};
    } else if (late) {
      kind_ = "advance to TimePoint::max()";
      to = kI64Max;
    } else {
      kind_ = "advance one precision (early in epoch)";
      to = now + p;
    }
    const std::int64_t to64 = clamp64(to);

    std::vector<FiredRec> fired;
    auto handler = [&](Alarm a) { fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)}); };

    if (to64 <= now) {
      wheel_->advance_clock(T(to64), handler);
      DIFF_CHECK(fired.empty(), "advance_clock to " << to64 << " <= now fired " << fired.size() << " alarms");
      DIFF_CHECK(N(wheel_->now()) == now, "advance_clock to <= now moved now to " << N(wheel_->now()));
      return;
    }
    if (m_.num(to64) > kMaxRepresentableKey) {
      bool threw = false;
      try {
        wheel_->advance_clock(T(to64), handler);
      } catch (const std::out_of_range&) {
        threw = true;
      }
      DIFF_CHECK(threw, "advance_clock to " << to64 << " (interval " << to_string(m_.num(to64))
                                            << " > 2^61-1) did not throw out_of_range");
      DIFF_CHECK(fired.empty(), "rejected advance_clock fired " << fired.size() << " alarms");
      DIFF_CHECK(N(wheel_->now()) == now, "rejected advance_clock moved now");
      ++stats_.advances_rejected;
      return;
    }
    const std::int64_t bound = static_cast<std::int64_t>(m_.interval_start(to64));
    auto expected = model_.take_below(bound);
    wheel_->advance_clock(T(to64), handler);
    model_now_ = to64;
    for (const FiredRec& f : fired) { DIFF_CHECK(f.at < to64, "fired early: at " << f.at << " >= now " << to64); }
    compare_fired(fired, expected, "advance_clock");
    stats_.fired += fired.size();
  }

  void op_fire_past() {
    kind_ = "fire_past_alarms";
    std::vector<FiredRec> fired;
    auto expected = model_.take_at_most(model_now_);
    wheel_->fire_past_alarms(
        [&](Alarm a) { fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)}); });
    for (const FiredRec& f : fired) { DIFF_CHECK(f.at <= model_now_, "fire_past_alarms fired at " << f.at << " > now"); }
    compare_fired(fired, expected, "fire_past_alarms");
    stats_.fired_past += fired.size();
  }

  void push_stale(Alarm a) {
    if (stale_.size() < 256) {
      stale_.push_back(a);
    } else {
      stale_[rng_.below(stale_.size())] = a;
    }
  }

  void op_stale() {
    kind_ = "stale handle";
    const Alarm s = stale_[rng_.below(stale_.size())];
    DIFF_CHECK(!wheel_->contains(s), "stale alarm is contained");
    const auto expect_invalid = [&](auto&& f, const char* what) {
      bool ok = false;
      try {
        f();
      } catch (const std::invalid_argument&) {
        ok = true;
      }
      DIFF_CHECK(ok, what << " on a stale alarm did not throw invalid_argument");
    };
    switch (rng_.below(6)) {
      case 0: expect_invalid([&] { (void)wheel_->at(s); }, "at"); break;
      case 1: expect_invalid([&] { (void)wheel_->value(s); }, "value"); break;
      case 2: expect_invalid([&] { (void)wheel_->interval_num(s); }, "interval_num"); break;
      case 3: expect_invalid([&] { wheel_->remove(s); }, "remove"); break;
      case 4: expect_invalid([&] { wheel_->reschedule(s, T(model_now_)); }, "reschedule"); break;
      case 5:
        expect_invalid([&] { wheel_->reschedule_at_interval_num(s, static_cast<std::int64_t>(m_.num(model_now_))); },
                       "reschedule_at_interval_num");
        break;
    }
  }

  void op_live() {
    if (model_.empty()) return op_stale();
    kind_ = "live handle";
    const std::uint64_t id = model_.random_id(rng_);
    const Model::Entry& e = *model_.find(id);
    DIFF_CHECK(wheel_->contains(e.handle), "live alarm " << id << " not contained");
    DIFF_CHECK(N(wheel_->at(e.handle)) == e.key, "at() " << N(wheel_->at(e.handle)) << " != " << e.key);
    DIFF_CHECK(wheel_->value(e.handle).id == id, "value() id " << wheel_->value(e.handle).id << " != " << id);
    DIFF_CHECK(wheel_->interval_num(e.handle) == m_.num(e.key), "interval_num(alarm)");
  }

  void op_query() {
    kind_ = "queries";
    const auto max = wheel_->max_alarm_time();
    DIFF_CHECK(max.has_value() == !model_.empty(), "max_alarm_time presence");
    if (max) { DIFF_CHECK(N(*max) == *model_.max_key(), "max_alarm_time " << N(*max) << " != " << *model_.max_key()); }
    DIFF_CHECK(N(wheel_->now_interval_num_start()) == m_.interval_start(model_now_), "now_interval_num_start");
    DIFF_CHECK(wheel_->interval_num(T(model_now_)) == m_.num(model_now_), "interval_num(now)");
    if (rng_.chance(5)) compare_for_each();
  }

  void op_clear() {
    kind_ = "clear";
    wheel_->clear();
    for (std::uint64_t id : model_.ids()) {
      const Alarm h = model_.find(id)->handle;
      DIFF_CHECK(!wheel_->contains(h), "cleared alarm still contained");
      push_stale(h);
    }
    model_.clear();
  }

  void compare_for_each() {
    std::vector<std::uint64_t> seen;
    wheel_->for_each([&](Alarm a) { seen.push_back(wheel_->value(a).id); });
    std::vector<std::uint64_t> want = model_.ids();
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    DIFF_CHECK(seen == want, "for_each visited " << seen.size() << " alarms, model has " << want.size());
  }

  void check_invariants() {
    ++stats_.invariant_checks;
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      throw Divergence{std::string("check_invariants: ") + e.what()};
    }
  }

  // Cheap checks after every operation.
  void observe() {
    stats_.max_size = std::max<std::uint64_t>(stats_.max_size, model_.size());
    // The checks shared with the wheel fuzz target (wheel_observe.hpp).
    if (const auto failed = observe_timing_wheel(*wheel_, model_, m_, model_now_, num_bits_, prev_ub_)) {
      throw Divergence{*failed};
    }
    DIFF_CHECK(Token::live == static_cast<long>(model_.size()),
               "live values " << Token::live << " != alarms " << model_.size());
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
  std::optional<Wheel> wheel_;
  Model model_;
  IntervalMath m_;
  std::int64_t model_now_ = 0;
  std::int64_t prev_ub_ = kI64Min;
  std::uint64_t op_ = 0;
  std::uint64_t ops_in_epoch_ = 0;
  std::uint64_t epoch_len_ = 0;
  std::uint64_t next_id_ = 1;
  bool in_final_part_ = false;
  std::vector<Alarm> stale_;
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

struct KeyStats {
  std::uint64_t ops = 0;
  std::uint64_t epochs = 0;
  std::uint64_t add_attempts = 0;
  std::uint64_t add_rejected = 0;
  std::uint64_t increases = 0;
  std::uint64_t removed_by_increase = 0;
};

class KeyWheelDifferential {
 public:
  using Wheel = chime::KeyWheel<Token>;
  using Elt = Wheel::Elt;
  using Key = Wheel::Key;
  using Model = ReferenceQueue<Key, Elt>;
  static constexpr Key kMaxRep = Wheel::max_representable_key;

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

  // Every 1024 operations, reserve room for 2,500 alarms more than the wheel
  // holds (no random draw, so the operation sequences are unchanged): reserve
  // writes the nodes growth left unused and must keep every handle, value and
  // order; the comparisons that follow check it.
  void reserve_now_and_then() {
    if (op_ % 1024 != 512) return;
    const std::size_t want = wheel_->size() + 2500;
    wheel_->reserve(want);
    DIFF_CHECK(wheel_->capacity() >= want, "reserve(" << want << ") left capacity " << wheel_->capacity());
  }
  std::string run() {
    try {
      for (op_ = 0; op_ < ops_; ++op_) {
        if (!wheel_ || ops_in_epoch_ >= epoch_len_ || wheel_->min_allowed_key() == kMaxRep) new_epoch();
        ++ops_in_epoch_;
        step();
        if (ahead_budget_ != 0) {
          kind_ = "cascade_ahead after the step";
          wheel_->cascade_ahead(rng_.below(ahead_budget_));
        }
        reserve_now_and_then();
        observe();
        if (small_ || op_ % 64 == 0) check_invariants();
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
    os << name() << " epoch=" << stats_.epochs << " op=" << op_ << " (op " << ops_in_epoch_ << " of epoch) kind=" << kind_
       << " min_allowed=" << model_min_ << " model_size=" << model_.size() << ": ";
    return os.str();
  }

  void new_epoch() {
    end_epoch();
    ++stats_.epochs;
    wheel_.emplace(bits_, static_cast<std::size_t>(rng_.below(3) * 32));
    model_min_ = 0;
    prev_max_ = 0;
    ops_in_epoch_ = 0;
    epoch_len_ = 3000 + rng_.below(6000);
    stale_.assign(1, Elt{});
    DIFF_CHECK(Token::live == 0, "live values before a new epoch");
    DIFF_CHECK(wheel_->min_allowed_key() == 0 && wheel_->empty(), "fresh wheel");
    // Some epochs start high, to exercise keys near 2^61-1.
    if (stats_.epochs % 3 == 2) {
      const Key k = kMaxRep - rng_.below(std::uint64_t{1} << (10 + rng_.below(40)));
      increase(k);
    }
  }

  void end_epoch() {
    if (!wheel_) return;
    check_invariants();
    if (rng_.chance(50)) {
      wheel_->clear();
      DIFF_CHECK(wheel_->empty() && Token::live == 0, "clear left values alive");
      check_invariants();
    }
    model_.clear();
    wheel_.reset();
    DIFF_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

  Key pick_key() {
    const Key min = model_min_;
    const Key max = wheel_->max_allowed_key();
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
    if (model_.empty()) {
      kind_ = "min allowed key (empty)";
      return min;
    }
    kind_ = "key of an existing element";
    return model_.find(model_.random_id(rng_))->key;
  }

  void step() {
    const std::uint64_t w_add = model_.size() < target_size_ ? 350 : 120;
    const std::uint64_t weights[] = {w_add, 100, 120, 250, 40, 40, 40, 1, 60};
    std::uint64_t total = 0;
    for (std::uint64_t w : weights) total += w;
    std::uint64_t r = rng_.below(total);
    int op = 0;
    while (r >= weights[op]) r -= weights[op++];
    switch (op) {
      case 0: op_add(); break;
      case 1: op_remove(); break;
      case 2: op_change_key(); break;
      case 3: op_increase(); break;
      case 4: op_stale(); break;
      case 5: op_live(); break;
      case 6: op_for_each(); break;
      case 7: op_clear(); break;
      case 8:
        op_cascade_ahead();
        break;
    }
  }

  // cascade_ahead moves elements between levels and changes nothing a caller
  // sees: observe() compares the minimum after it, and for_each here.
  void op_cascade_ahead() {
    kind_ = "cascade_ahead";
    const std::size_t budget = rng_.chance(20) ? SIZE_MAX : rng_.below(6);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    DIFF_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left elements behind");
    DIFF_CHECK(wheel_->size() == size, "cascade_ahead changed size");
  }

  bool accepts(Key k) const { return k >= model_min_ && k <= wheel_->max_allowed_key(); }

  void op_add() {
    ++stats_.add_attempts;
    const Key key = pick_key();
    const bool expect_ok = accepts(key);
    const std::uint64_t id = next_id_++;
    const std::size_t size_before = wheel_->size();
    try {
      const Elt e = wheel_->add(key, Token(id));
      DIFF_CHECK(expect_ok, "add accepted key " << key << " max_allowed " << wheel_->max_allowed_key());
      model_.insert(id, key, e);
      DIFF_CHECK(wheel_->key(e) == key, "key() after add");
    } catch (const std::out_of_range&) {
      DIFF_CHECK(!expect_ok, "add rejected key " << key << " max_allowed " << wheel_->max_allowed_key());
      DIFF_CHECK(wheel_->size() == size_before, "rejected add changed size");
      ++stats_.add_rejected;
    }
  }

  void op_remove() {
    if (model_.empty()) return op_stale();
    kind_ = "remove";
    const std::uint64_t id = model_.random_id(rng_);
    const Elt e = model_.find(id)->handle;
    wheel_->remove(e);
    model_.erase(id);
    DIFF_CHECK(!wheel_->contains(e), "removed element still contained");
    push_stale(e);
  }

  void op_change_key() {
    if (model_.empty()) return op_add();
    const std::uint64_t id = model_.random_id(rng_);
    const Elt e = model_.find(id)->handle;
    const Key key = pick_key();
    kind_ = "change_key to " + kind_;
    const bool expect_ok = accepts(key);
    try {
      wheel_->change_key(e, key);
      DIFF_CHECK(expect_ok, "change_key accepted key " << key);
      model_.change(id, key);
    } catch (const std::out_of_range&) {
      DIFF_CHECK(!expect_ok, "change_key rejected key " << key);
    }
    DIFF_CHECK(wheel_->contains(e) && wheel_->key(e) == model_.find(id)->key, "key() after change_key");
  }

  void increase(Key key) {
    ++stats_.increases;
    struct Rec {
      Elt e;
      Key key;
      std::uint64_t id;
      bool contained;
    };
    std::vector<Rec> fired;
    auto handler = [&](Elt e) { fired.push_back({e, wheel_->key(e), wheel_->value(e).id, wheel_->contains(e)}); };
    std::vector<std::pair<std::uint64_t, Model::Entry>> expected;
    if (key > model_min_) expected = model_.take_below(key);
    wheel_->increase_min_allowed_key(key, handler);
    if (key > model_min_) model_min_ = key;
    DIFF_CHECK(wheel_->min_allowed_key() == model_min_, "min_allowed_key " << wheel_->min_allowed_key());
    std::vector<std::uint64_t> got, want;
    for (const Rec& r : fired) got.push_back(r.id);
    for (const auto& [id, e] : expected) want.push_back(id);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    DIFF_CHECK(got == want, "increase_min_allowed_key(" << key << ") removed " << got.size() << " elements, model "
                                                        << want.size());
    std::unordered_map<std::uint64_t, Key> want_key;
    for (const auto& [id, e] : expected) want_key.emplace(id, e.key);
    for (std::size_t i = 0; i < fired.size(); ++i) {
      DIFF_CHECK(!fired[i].contained, "contains() true inside handle_removed");
      DIFF_CHECK(fired[i].key == want_key.at(fired[i].id), "key() inside handle_removed");
      if (i > 0) { DIFF_CHECK(fired[i - 1].key <= fired[i].key, "removed out of key order at position " << i); }
      push_stale(fired[i].e);
    }
    stats_.removed_by_increase += fired.size();
  }

  void op_increase() {
    const Key min = model_min_;
    const Key max = wheel_->max_allowed_key();
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
    } else if (r < 620 && !model_.empty()) {
      kind_ = "increase to an element's key (+1)";
      key = i128{model_.find(model_.random_id(rng_))->key} + rng_.below(2);
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
      increase_rejected(kMaxRep + 1 + rng_.below(1000));
      return;
    } else {
      kind_ = "increase by one level-0 span";
      key = i128{min} + (i128{1} << bits_v_[0]);
    }
    if (key > kMaxRep) key = late ? i128{kMaxRep} : i128{min} + 1;
    if (key > kMaxRep) key = kMaxRep;
    increase(static_cast<Key>(key));
  }

  void increase_rejected(Key key) {
    ++stats_.increases;
    bool threw = false;
    int calls = 0;
    try {
      wheel_->increase_min_allowed_key(key, [&](Elt) { ++calls; });
    } catch (const std::out_of_range&) {
      threw = true;
    }
    DIFF_CHECK(threw && calls == 0 && wheel_->min_allowed_key() == model_min_,
               "increase_min_allowed_key(" << key << ") above 2^61-1 did not throw out_of_range cleanly");
  }

  void push_stale(Elt e) {
    if (stale_.size() < 256) {
      stale_.push_back(e);
    } else {
      stale_[rng_.below(stale_.size())] = e;
    }
  }

  void op_stale() {
    kind_ = "stale handle";
    const Elt s = stale_[rng_.below(stale_.size())];
    DIFF_CHECK(!wheel_->contains(s), "stale element is contained");
    bool ok = false;
    try {
      switch (rng_.below(4)) {
        case 0: (void)wheel_->key(s); break;
        case 1: (void)wheel_->value(s); break;
        case 2: wheel_->remove(s); break;
        case 3: wheel_->change_key(s, model_min_); break;
      }
    } catch (const std::invalid_argument&) {
      ok = true;
    }
    DIFF_CHECK(ok, "stale element accessor did not throw invalid_argument");
  }

  void op_live() {
    if (model_.empty()) return op_stale();
    kind_ = "live handle";
    const std::uint64_t id = model_.random_id(rng_);
    const Model::Entry& e = *model_.find(id);
    DIFF_CHECK(wheel_->contains(e.handle), "live element not contained");
    DIFF_CHECK(wheel_->key(e.handle) == e.key, "key()");
    DIFF_CHECK(wheel_->value(e.handle).id == id, "value()");
  }

  void op_for_each() {
    kind_ = "for_each";
    if (!rng_.chance(10)) return;
    std::vector<std::uint64_t> seen;
    wheel_->for_each([&](Elt e) { seen.push_back(wheel_->value(e).id); });
    std::vector<std::uint64_t> want = model_.ids();
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    DIFF_CHECK(seen == want, "for_each visited " << seen.size() << " elements, model has " << want.size());
  }

  void op_clear() {
    kind_ = "clear";
    wheel_->clear();
    for (std::uint64_t id : model_.ids()) push_stale(model_.find(id)->handle);
    model_.clear();
  }

  void check_invariants() {
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      throw Divergence{std::string("check_invariants: ") + e.what()};
    }
  }

  void observe() {
    // The checks shared with the wheel fuzz target (wheel_observe.hpp).
    if (const auto failed = observe_key_wheel(*wheel_, model_, model_min_, num_bits_, kMaxRep, prev_max_)) {
      throw Divergence{*failed};
    }
    DIFF_CHECK(Token::live == static_cast<long>(model_.size()), "live values " << Token::live);
  }

  std::vector<int> bits_v_;
  LevelBits bits_;
  int num_bits_ = 0;
  bool small_ = false;
  std::uint64_t target_size_ = 0;
  std::uint64_t seed_;
  std::uint64_t ops_;
  Random rng_;
  std::optional<Wheel> wheel_;
  Model model_;
  Key model_min_ = 0;
  Key prev_max_ = 0;
  std::uint64_t op_ = 0;
  std::uint64_t ops_in_epoch_ = 0;
  std::uint64_t epoch_len_ = 0;
  std::uint64_t next_id_ = 1;
  std::vector<Elt> stale_;
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
