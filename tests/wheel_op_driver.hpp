// SPDX-License-Identifier: BSL-1.0
// tests/wheel_op_driver.hpp: the wheel operations that the differential tests
// (tests/wheel_differential_test.cpp) and the wheel fuzz target
// (fuzz/wheel_fuzz.cpp) run: each one applied to chime's TimingWheel<T> or
// KeyWheel<T> and to the reference model (reference_wheel.hpp), and what
// each must do compared: the one place that states the operation set and its
// checks. A caller decodes its operations and their operands (the fuzz target
// from bytes, the tests from a seeded Random), reading the model through the
// driver's accessors, and calls them; after each one it calls observe() (the
// checks of wheel_observe.hpp and the live values) and, as often as it can
// afford, check_invariants(); finish() ends a wheel.
//
// Two template parameters:
// - Source: where the driver's own picks come from (a live alarm or element,
//   a stale handle, the alarm a mutating handler reschedules): anything with
//   `below(n)`, an index below n > 0 (chime_fuzz::Input, Random).
// - Report: how a failure and the trace are reported, with
//     [[noreturn]] static void fail(const char* file, int line, const char* cond, const std::string& what);
//     static constexpr bool kTraces;  // whether trace() is called
//     static void trace(const std::string& line);  // one line per operation
//   The fuzz target aborts with its trace, the tests throw and name the seed.
//
// What the operations check: bad times and keys throw std::out_of_range,
// stale handles std::invalid_argument, mutation from inside a handler
// std::logic_error, exactly when the model says so, and a throwing call
// changes nothing. Every call's fired (or removed) set is the model's exactly:
// which alarms, in nondecreasing interval (or key) order, never early, at()
// and value() readable inside the handler, contains() false there. A handler
// may move the value out; one that throws leaves the wheel as the contract
// says (the fired prefix gone, now at the throwing alarm's interval).
#pragma once

#include <chime/key_wheel.hpp>
#include <chime/timing_wheel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reference_wheel.hpp"
#include "wheel_observe.hpp"

namespace chime_test {

inline chime::TimePoint T(std::int64_t ns) { return chime::TimePoint{chime::Duration{ns}}; }
inline std::int64_t N(chime::TimePoint t) { return t.time_since_epoch().count(); }

inline std::string bits_string(const std::vector<int>& bits) {
  if (bits.size() > 12) return "{1 x " + std::to_string(bits.size()) + "}";
  std::string s = "{";
  for (std::size_t i = 0; i < bits.size(); ++i) s += (i ? "," : "") + std::to_string(bits[i]);
  return s + "}";
}

// A value that counts its live instances, so value lifetimes are checked too.
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

// Runs f; returns whether it threw exactly E.
template <class E, class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  }
  return false;
}

// What a handler does with a fired alarm beyond recording it.
enum class HandlerMode { record, try_mutate, throw_at };

struct Thrown {};  // thrown by a handler on purpose

inline constexpr std::size_t kNoThrow = std::numeric_limits<std::size_t>::max();

#define CHIME_DRIVER_CHECK(cond, what)                                 \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::ostringstream chime_driver_os_;                             \
      chime_driver_os_ << what; /* NOLINT */                           \
      Report::fail(__FILE__, __LINE__, #cond, chime_driver_os_.str()); \
    }                                                                  \
  } while (0)

#define CHIME_DRIVER_TRACE(what)             \
  do {                                       \
    if constexpr (Report::kTraces) {         \
      std::ostringstream chime_driver_os_;   \
      chime_driver_os_ << what; /* NOLINT */ \
      Report::trace(chime_driver_os_.str()); \
    }                                        \
  } while (0)

// ---------------------------------------------------------------------------
// TimingWheel<Token> against ReferenceQueue<time, Alarm>

struct TimingDriverStats {
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

  void add(const TimingDriverStats& o) {
    add_attempts += o.add_attempts;
    add_rejected_over_bound += o.add_rejected_over_bound;
    add_rejected_before_now += o.add_rejected_before_now;
    reschedules += o.reschedules;
    advances += o.advances;
    advances_rejected += o.advances_rejected;
    fired += o.fired;
    fired_past += o.fired_past;
    max_size = std::max(max_size, o.max_size);
    invariant_checks += o.invariant_checks;
  }
};

template <class Source, class Report>
class TimingWheelDriver {
 public:
  using Wheel = chime::TimingWheel<Token>;
  using Alarm = Wheel::Alarm;
  using Model = ReferenceQueue<std::int64_t, Alarm>;
  using Taken = std::vector<std::pair<std::uint64_t, typename Model::Entry>>;

  // A new wheel of the given precision, level bits and pool capacity starting at `start`; up to
  // `max_stale` handles of removed alarms are kept for the stale-handle calls.
  TimingWheelDriver(Source& source, std::int64_t precision, chime::LevelBits bits, std::size_t capacity,
                    std::int64_t start, std::size_t max_stale)
      : source_(source),
        p_(precision),
        num_bits_(bits.num_bits()),
        m_{start, precision},
        now_(start),
        max_stale_(max_stale) {
    CHIME_DRIVER_CHECK(Token::live == 0, "live values " << Token::live << " before a new wheel");
    wheel_.emplace(chime::WheelConfig{chime::Duration{p_}, bits, capacity}, T(start));
    stale_.push_back(Alarm{});
    CHIME_DRIVER_CHECK(N(wheel_->now()) == start && N(wheel_->start()) == start, "start/now of a new wheel");
    CHIME_DRIVER_CHECK(wheel_->alarm_precision() == chime::Duration{p_}, "alarm_precision");
    observe();
  }

  // --- what a caller reads to pick operands -----------------------------

  const Model& model() const { return model_; }
  const IntervalMath& math() const { return m_; }
  std::int64_t precision() const { return p_; }
  std::int64_t now() const { return now_; }  // the model's
  std::int64_t upper_bound() const { return N(wheel_->alarm_upper_bound()); }
  bool accepts(i128 at) const { return at >= now_ && at < upper_bound(); }
  const TimingDriverStats& stats() const { return stats_; }

  // A live alarm's id (nullopt when there is none), and a handle of a removed alarm (or a default one).
  std::optional<std::uint64_t> pick_id() {
    if (model_.empty()) return std::nullopt;
    return model_.random_id(source_);
  }
  Alarm pick_stale() { return stale_[source_.below(stale_.size())]; }

  // --- the operations -----------------------------------------------------

  void add(std::int64_t at) {
    ++stats_.add_attempts;
    const std::uint64_t id = next_id_++;
    const bool ok = accepts(at);
    const std::int64_t ub = upper_bound();
    CHIME_DRIVER_TRACE("add at=" << at << " (now=" << now_ << " ub=" << ub << ") expect "
                                 << (ok ? "ok" : "out_of_range"));
    const std::size_t before = wheel_->size();
    try {
      const Alarm a = wheel_->add(T(at), Token(id));
      CHIME_DRIVER_CHECK(ok, "add accepted at=" << at << " now=" << now_ << " upper_bound=" << ub);
      model_.insert(id, at, a);
      check_new(a, at, id);
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!ok, "add rejected at=" << at << " now=" << now_ << " upper_bound=" << ub);
      CHIME_DRIVER_CHECK(wheel_->size() == before, "a rejected add changed size");
      if (at >= ub) ++stats_.add_rejected_over_bound;
      if (at < now_) ++stats_.add_rejected_before_now;
    }
  }

  // add_at_interval_num(k) == add(interval_num_start(k)), for any k.
  void add_at_interval_num(std::int64_t k) {
    ++stats_.add_attempts;
    const std::uint64_t id = next_id_++;
    const i128 s = k < 0 ? i128{-1} : m_.num_start(k);
    const bool ok = k >= 0 && s <= kI64Max && accepts(s);
    const std::int64_t ub = upper_bound();
    CHIME_DRIVER_TRACE("add_at_interval_num k=" << k << " expect " << (ok ? "ok" : "out_of_range"));
    const std::size_t before = wheel_->size();
    try {
      const Alarm a = wheel_->add_at_interval_num(k, Token(id));
      CHIME_DRIVER_CHECK(ok, "add_at_interval_num accepted k=" << k << " now=" << now_ << " upper_bound=" << ub);
      model_.insert(id, static_cast<std::int64_t>(s), a);
      check_new(a, static_cast<std::int64_t>(s), id);
      CHIME_DRIVER_CHECK(wheel_->interval_num(a) == k,
                         "add_at_interval_num: interval_num() " << wheel_->interval_num(a));
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!ok, "add_at_interval_num rejected k=" << k << " now=" << now_ << " upper_bound=" << ub);
      CHIME_DRIVER_CHECK(wheel_->size() == before, "a rejected add_at_interval_num changed size");
      if (k >= 0 && s >= ub) ++stats_.add_rejected_over_bound;
      if (k < 0 || s < now_) ++stats_.add_rejected_before_now;
    }
  }

  void remove(std::uint64_t id) {
    const Alarm h = model_.find(id)->handle;
    CHIME_DRIVER_TRACE("remove id=" << id);
    wheel_->remove(h);
    model_.erase(id);
    CHIME_DRIVER_CHECK(!wheel_->contains(h), "removed alarm " << id << " still contained");
    push_stale(h);
  }

  void reschedule(std::uint64_t id, std::int64_t at) {
    ++stats_.reschedules;
    const typename Model::Entry e = *model_.find(id);
    const bool ok = accepts(at);
    CHIME_DRIVER_TRACE("reschedule id=" << id << " from " << e.key << " to " << at << " expect "
                                        << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->reschedule(e.handle, T(at));
      CHIME_DRIVER_CHECK(ok, "reschedule accepted at=" << at << " now=" << now_ << " upper_bound=" << upper_bound());
      model_.change(id, at);
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!ok, "reschedule rejected at=" << at << " now=" << now_ << " upper_bound=" << upper_bound());
    }
    check_rescheduled(e.handle, id, "reschedule");
  }

  void reschedule_at_interval_num(std::uint64_t id, std::int64_t k) {
    ++stats_.reschedules;
    const typename Model::Entry e = *model_.find(id);
    const i128 s = k < 0 ? i128{-1} : m_.num_start(k);
    const bool ok = k >= 0 && s <= kI64Max && accepts(s);
    CHIME_DRIVER_TRACE("reschedule_at_interval_num id=" << id << " k=" << k << " expect "
                                                        << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->reschedule_at_interval_num(e.handle, k);
      CHIME_DRIVER_CHECK(
          ok, "reschedule_at_interval_num accepted k=" << k << " now=" << now_ << " upper_bound=" << upper_bound());
      model_.change(id, static_cast<std::int64_t>(s));
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(
          !ok, "reschedule_at_interval_num rejected k=" << k << " now=" << now_ << " upper_bound=" << upper_bound());
    }
    check_rescheduled(e.handle, id, "reschedule_at_interval_num");
  }

  // advance_clock(to) (`to` clamped to int64). The handler records each alarm and moves its value out;
  // with try_mutate it tries mutation `mutate_which` (which must be refused), with throw_at it throws on
  // call throw_at + 1.
  void advance(i128 to, HandlerMode mode = HandlerMode::record, std::size_t throw_at = 0,
               std::uint8_t mutate_which = 0) {
    ++stats_.advances;
    const std::int64_t to64 = clamp64(to);
    const std::int64_t now = now_;
    std::vector<FiredRec> fired;
    auto handler = [&](Alarm a) {
      fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)});
      // The value may be moved out.
      Token moved = std::move(wheel_->value(a));
      (void)moved;
      if (mode == HandlerMode::try_mutate) try_mutate_inside(a, mutate_which);
      if (mode == HandlerMode::throw_at && fired.size() == throw_at + 1) throw Thrown{};
    };
    CHIME_DRIVER_TRACE("advance_clock to=" << to64 << " (now=" << now
                                           << ", delta=" << to_string(static_cast<i128>(to64) - now)
                                           << ") handler=" << static_cast<int>(mode) << " throw_at=" << throw_at);
    if (to64 <= now) {
      wheel_->advance_clock(T(to64), handler);
      CHIME_DRIVER_CHECK(fired.empty(), "advance_clock to " << to64 << " <= now fired " << fired.size() << " alarms");
      CHIME_DRIVER_CHECK(N(wheel_->now()) == now, "advance_clock to <= now moved now to " << N(wheel_->now()));
      return;
    }
    if (m_.num(to64) > kMaxRepresentableKey) {
      ++stats_.advances_rejected;
      const bool threw = throws<std::out_of_range>([&] { wheel_->advance_clock(T(to64), handler); });
      CHIME_DRIVER_CHECK(threw, "advance_clock to " << to64 << " (interval " << to_string(m_.num(to64))
                                                    << " > 2^61-1) did not throw out_of_range");
      CHIME_DRIVER_CHECK(fired.empty(), "a rejected advance_clock fired " << fired.size() << " alarms");
      CHIME_DRIVER_CHECK(N(wheel_->now()) == now, "a rejected advance_clock moved now to " << N(wheel_->now()));
      return;
    }
    const std::int64_t bound = static_cast<std::int64_t>(m_.interval_start(to64));
    Taken expected = model_.take_below(bound);
    bool threw = false;
    try {
      wheel_->advance_clock(T(to64), handler);
    } catch (const Thrown&) {
      threw = true;
    }
    stats_.fired += fired.size();
    for (const FiredRec& f : fired) CHIME_DRIVER_CHECK(f.at < to64, "fired early: at " << f.at << " >= to " << to64);
    if (!threw) {
      CHIME_DRIVER_CHECK(mode != HandlerMode::throw_at || expected.size() <= throw_at,
                         "the handler should have thrown");
      now_ = to64;
      compare_fired(fired, expected, "advance_clock");
      return;
    }
    // The handler threw on the last fired alarm: those fired are gone, the others must still be there, and
    // now() is the start of the throwing alarm's interval (or stays if later).
    CHIME_DRIVER_CHECK(fired.size() == throw_at + 1 && expected.size() > throw_at,
                       "the handler threw at the wrong call");
    Taken gone;
    std::unordered_map<std::uint64_t, bool> fired_ids;
    for (const FiredRec& f : fired) fired_ids[f.id] = true;
    const i128 last_k = m_.num(fired.back().at);
    for (auto& [id, e] : expected) {
      if (fired_ids.count(id)) {
        gone.emplace_back(id, e);
      } else {
        CHIME_DRIVER_CHECK(m_.num(e.key) >= last_k, "alarm id " << id << " at " << e.key
                                                                << " in an earlier interval than the throwing alarm "
                                                                   "survived");
        model_.insert(id, e.key, e.handle);
        CHIME_DRIVER_CHECK(wheel_->contains(e.handle), "an alarm after the throwing one is gone");
      }
    }
    compare_fired(fired, gone, "advance_clock (handler threw)");
    now_ = std::max<std::int64_t>(now, static_cast<std::int64_t>(m_.num_start(last_k)));
  }

  void fire_past() {
    std::vector<FiredRec> fired;
    Taken expected = model_.take_at_most(now_);
    CHIME_DRIVER_TRACE("fire_past_alarms (now=" << now_ << ", expect " << expected.size() << ")");
    wheel_->fire_past_alarms([&](Alarm a) {
      fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)});
    });
    for (const FiredRec& f : fired) {
      CHIME_DRIVER_CHECK(f.at <= now_, "fire_past_alarms fired at " << f.at << " > now " << now_);
    }
    compare_fired(fired, expected, "fire_past_alarms");
    stats_.fired_past += fired.size();
  }

  // Call `which % 7` with the stale handle `s`: each must throw, and change nothing.
  void stale(Alarm s, unsigned which) {
    which %= 7;
    CHIME_DRIVER_TRACE("stale handle check #" << which);
    CHIME_DRIVER_CHECK(!wheel_->contains(s), "a stale alarm is contained");
    const std::size_t before = wheel_->size();
    bool ok = false;
    switch (which) {
      case 0:
        ok = throws<std::invalid_argument>([&] { (void)wheel_->at(s); });
        break;
      case 1:
        ok = throws<std::invalid_argument>([&] { (void)wheel_->value(s); });
        break;
      case 2:
        ok = throws<std::invalid_argument>([&] { (void)wheel_->interval_num(s); });
        break;
      case 3:
        ok = throws<std::invalid_argument>([&] { wheel_->remove(s); });
        break;
      case 4:
        ok = throws<std::invalid_argument>([&] { wheel_->reschedule(s, T(now_)); });
        break;
      case 5:
        // A stale handle and a bad time: the contract does not order the two checks, so either error will do
        // (std::invalid_argument and std::out_of_range are both std::logic_error), but it must throw.
        ok = throws<std::logic_error>([&] { wheel_->reschedule(s, T(clamp64(static_cast<i128>(upper_bound()) + 1))); });
        break;
      default:
        ok = throws<std::invalid_argument>(
            [&] { wheel_->reschedule_at_interval_num(s, static_cast<std::int64_t>(m_.num(now_))); });
        break;
    }
    CHIME_DRIVER_CHECK(ok, "call #" << which << " on a stale alarm did not throw");
    CHIME_DRIVER_CHECK(wheel_->size() == before, "a stale-handle call changed size");
  }

  void live(std::uint64_t id) {
    const typename Model::Entry& e = *model_.find(id);
    CHIME_DRIVER_TRACE("live handle check id=" << id);
    CHIME_DRIVER_CHECK(wheel_->contains(e.handle), "live alarm " << id << " not contained");
    CHIME_DRIVER_CHECK(N(wheel_->at(e.handle)) == e.key, "at() " << N(wheel_->at(e.handle)) << " != " << e.key);
    CHIME_DRIVER_CHECK(wheel_->value(e.handle).id == id, "value() id " << wheel_->value(e.handle).id << " != " << id);
    CHIME_DRIVER_CHECK(wheel_->interval_num(e.handle) == m_.num(e.key), "interval_num(alarm)");
  }

  // interval_num(t), interval_start(t) and interval_num_start(k) against 128-bit arithmetic, for any t and k.
  void interval_math(std::int64_t t, std::int64_t k) {
    CHIME_DRIVER_TRACE("interval math t=" << t << " k=" << k);
    const bool t_ok = t >= m_.start && m_.num(t) <= kMaxRepresentableKey;
    try {
      const std::int64_t kt = wheel_->interval_num(T(t));
      CHIME_DRIVER_CHECK(t_ok && kt == m_.num(t), "interval_num(" << t << ") = " << kt);
      CHIME_DRIVER_CHECK(N(wheel_->interval_start(T(t))) == m_.interval_start(t), "interval_start(" << t << ")");
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!t_ok, "interval_num(" << t << ") threw out_of_range");
      CHIME_DRIVER_CHECK(throws<std::out_of_range>([&] { (void)wheel_->interval_start(T(t)); }),
                         "interval_start(" << t << ") did not throw");
    }
    const bool k_ok = k >= 0 && k <= m_.k_max();
    try {
      const std::int64_t s = N(wheel_->interval_num_start(k));
      CHIME_DRIVER_CHECK(k_ok && s == m_.num_start(k), "interval_num_start(" << k << ") = " << s);
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!k_ok, "interval_num_start(" << k << ") threw out_of_range, k_max=" << to_string(m_.k_max()));
    }
  }

  // max_alarm_time, now_interval_num_start, interval_num(now); with `with_for_each`, for_each too.
  void query(bool with_for_each) {
    CHIME_DRIVER_TRACE("queries");
    const auto max = wheel_->max_alarm_time();
    CHIME_DRIVER_CHECK(max.has_value() == !model_.empty(), "max_alarm_time presence");
    if (max) {
      CHIME_DRIVER_CHECK(N(*max) == *model_.max_key(), "max_alarm_time " << N(*max) << " != " << *model_.max_key());
    }
    CHIME_DRIVER_CHECK(N(wheel_->now_interval_num_start()) == m_.interval_start(now_), "now_interval_num_start");
    CHIME_DRIVER_CHECK(wheel_->interval_num(T(now_)) == m_.num(now_), "interval_num(now)");
    if (with_for_each) compare_for_each();
  }

  void compare_for_each() {
    std::vector<std::uint64_t> seen;
    wheel_->for_each([&](Alarm a) { seen.push_back(wheel_->value(a).id); });
    std::vector<std::uint64_t> want = model_.ids();
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    CHIME_DRIVER_CHECK(seen == want, "for_each visited " << seen.size() << " alarms, model has " << want.size());
  }

  // Moving the next block down ahead changes nothing a caller sees: observe() after the operation and a
  // query() compare it all.
  void cascade_ahead(std::size_t budget) {
    CHIME_DRIVER_TRACE("cascade_ahead budget=" << budget);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    CHIME_DRIVER_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left alarms behind");
    CHIME_DRIVER_CHECK(wheel_->size() == size, "cascade_ahead changed size");
  }

  void clear() {
    CHIME_DRIVER_TRACE("clear");
    wheel_->clear();
    CHIME_DRIVER_CHECK(wheel_->empty() && wheel_->size() == 0, "clear left " << wheel_->size() << " alarms");
    CHIME_DRIVER_CHECK(Token::live == 0, "clear left " << Token::live << " values alive");
    for (std::uint64_t id : model_.ids()) {
      const Alarm h = model_.find(id)->handle;
      CHIME_DRIVER_CHECK(!wheel_->contains(h), "cleared alarm " << id << " still contained");
      push_stale(h);
    }
    model_.clear();
  }

  // reserve room for `extra` alarms more than the wheel holds: reserve writes the nodes growth left unused
  // and must keep every handle, value and order (the comparisons that follow check it).
  void reserve(std::size_t extra) {
    const std::size_t want = wheel_->size() + extra;
    CHIME_DRIVER_TRACE("reserve " << want);
    wheel_->reserve(want);
    CHIME_DRIVER_CHECK(wheel_->capacity() >= want, "reserve(" << want << ") left capacity " << wheel_->capacity());
  }

  // After every operation: the checks of wheel_observe.hpp and the values alive.
  void observe() {
    stats_.max_size = std::max<std::uint64_t>(stats_.max_size, model_.size());
    if (const auto failed = observe_timing_wheel(*wheel_, model_, m_, now_, num_bits_, prev_ub_)) {
      CHIME_DRIVER_CHECK(false, *failed);
    }
    CHIME_DRIVER_CHECK(Token::live == static_cast<long>(model_.size()),
                       "live values " << Token::live << " != alarms " << model_.size());
  }

  void check_invariants() {
    ++stats_.invariant_checks;
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      CHIME_DRIVER_CHECK(false, "check_invariants: " << e.what());
    }
  }

  // The end of the wheel: its structure and alarms once more, a clear() if `clear_first`, and no value
  // left alive once it is destroyed.
  void finish(bool clear_first) {
    check_invariants();
    compare_for_each();
    if (clear_first) {
      clear();
      check_invariants();
    }
    model_.clear();
    wheel_.reset();
    CHIME_DRIVER_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

 private:
  struct FiredRec {
    Alarm alarm;
    std::int64_t at;
    std::uint64_t id;
    bool contained;
  };

  void check_new(Alarm a, std::int64_t at, std::uint64_t id) {
    CHIME_DRIVER_CHECK(wheel_->contains(a), "new alarm not contained");
    CHIME_DRIVER_CHECK(N(wheel_->at(a)) == at, "at() " << N(wheel_->at(a)) << " != " << at);
    CHIME_DRIVER_CHECK(wheel_->value(a).id == id, "value() of a new alarm");
    CHIME_DRIVER_CHECK(wheel_->interval_num(a) == m_.num(at), "interval_num() of a new alarm");
  }

  void check_rescheduled(Alarm h, std::uint64_t id, const char* what) {
    CHIME_DRIVER_CHECK(wheel_->contains(h), what << ": alarm " << id << " not contained");
    CHIME_DRIVER_CHECK(N(wheel_->at(h)) == model_.find(id)->key,
                       what << ": at() " << N(wheel_->at(h)) << " != model " << model_.find(id)->key);
  }

  // Inside a handler every mutation must throw std::logic_error and change nothing.
  void try_mutate_inside(Alarm a, std::uint8_t which) {
    bool threw = false;
    try {
      switch (which % 5) {
        case 0:
          (void)wheel_->add(wheel_->now(), Token(0));
          break;
        case 1:
          wheel_->remove(a);
          break;
        case 2:
          wheel_->clear();
          break;
        case 3:
          wheel_->fire_past_alarms([](Alarm) {});
          break;
        default:
          if (const auto id = pick_id()) {
            wheel_->reschedule(model_.find(*id)->handle, wheel_->now());
          } else {
            threw = true;  // nothing left to reschedule: count it as refused
          }
          break;
      }
    } catch (const std::logic_error&) {
      // std::logic_error as documented (std::invalid_argument, a stale handle, would also be a refusal for
      // remove(a)); observe() then checks that nothing changed.
      threw = true;
    }
    CHIME_DRIVER_CHECK(threw,
                       "mutation #" << static_cast<int>(which % 5) << " from inside handle_fired was not refused");
  }

  // One call's fired alarms against the model's, exactly.
  void compare_fired(const std::vector<FiredRec>& fired, const Taken& expected, const char* what) {
    std::vector<std::uint64_t> got_ids;
    for (const FiredRec& f : fired) got_ids.push_back(f.id);
    std::vector<std::uint64_t> want_ids;
    for (const auto& [id, e] : expected) want_ids.push_back(id);
    std::sort(got_ids.begin(), got_ids.end());
    std::sort(want_ids.begin(), want_ids.end());
    if (got_ids != want_ids) {
      std::vector<std::uint64_t> missing, extra;
      std::set_difference(want_ids.begin(), want_ids.end(), got_ids.begin(), got_ids.end(),
                          std::back_inserter(missing));
      std::set_difference(got_ids.begin(), got_ids.end(), want_ids.begin(), want_ids.end(), std::back_inserter(extra));
      std::ostringstream os;
      os << what << ": fired " << fired.size() << " alarms, model expected " << expected.size() << "; missing:";
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
      CHIME_DRIVER_CHECK(false, os.str());
    }
    std::unordered_map<std::uint64_t, std::int64_t> want_at;
    for (const auto& [id, e] : expected) want_at.emplace(id, e.key);
    for (std::size_t i = 0; i < fired.size(); ++i) {
      const FiredRec& f = fired[i];
      const auto it = want_at.find(f.id);
      CHIME_DRIVER_CHECK(it != want_at.end(), what << ": alarm " << f.id << " fired twice");
      CHIME_DRIVER_CHECK(it->second == f.at, what << ": at() " << f.at << " != model " << it->second);
      want_at.erase(it);  // each alarm once
      CHIME_DRIVER_CHECK(!f.contained, what << ": contains() true inside the handler for id " << f.id);
      if (i > 0) {
        CHIME_DRIVER_CHECK(m_.num(fired[i - 1].at) <= m_.num(f.at), what << ": interval order broken at position " << i
                                                                         << ": " << fired[i - 1].at << " then "
                                                                         << f.at);
      }
      push_stale(f.alarm);
    }
  }

  void push_stale(Alarm a) {
    if (stale_.size() < max_stale_) {
      stale_.push_back(a);
    } else {
      stale_[next_stale_++ % max_stale_] = a;
    }
  }

  Source& source_;
  std::int64_t p_;
  int num_bits_;
  IntervalMath m_;
  std::optional<Wheel> wheel_;
  Model model_;
  std::int64_t now_;
  std::int64_t prev_ub_ = kI64Min;
  std::uint64_t next_id_ = 1;
  std::size_t max_stale_;
  std::size_t next_stale_ = 0;
  std::vector<Alarm> stale_;
  TimingDriverStats stats_;
};

// ---------------------------------------------------------------------------
// KeyWheel<Token> against ReferenceQueue<key, Elt>

struct KeyDriverStats {
  std::uint64_t add_attempts = 0;
  std::uint64_t add_rejected = 0;
  std::uint64_t increases = 0;
  std::uint64_t removed_by_increase = 0;
  std::uint64_t invariant_checks = 0;

  void add(const KeyDriverStats& o) {
    add_attempts += o.add_attempts;
    add_rejected += o.add_rejected;
    increases += o.increases;
    removed_by_increase += o.removed_by_increase;
    invariant_checks += o.invariant_checks;
  }
};

template <class Source, class Report>
class KeyWheelDriver {
 public:
  using Wheel = chime::KeyWheel<Token>;
  using Elt = Wheel::Elt;
  using Key = Wheel::Key;
  using Model = ReferenceQueue<Key, Elt>;
  using Taken = std::vector<std::pair<std::uint64_t, typename Model::Entry>>;
  static constexpr Key kMaxRep = Wheel::max_representable_key;

  // A new wheel of the given level bits and pool capacity; up to `max_stale` handles of removed elements
  // are kept for the stale-handle calls.
  KeyWheelDriver(Source& source, chime::LevelBits bits, std::size_t capacity, std::size_t max_stale)
      : source_(source), num_bits_(bits.num_bits()), max_stale_(max_stale) {
    CHIME_DRIVER_CHECK(Token::live == 0, "live values " << Token::live << " before a new wheel");
    wheel_.emplace(bits, capacity);
    stale_.push_back(Elt{});
    CHIME_DRIVER_CHECK(wheel_->min_allowed_key() == 0 && wheel_->empty(), "a new KeyWheel");
    observe();
  }

  // --- what a caller reads to pick operands -----------------------------

  const Model& model() const { return model_; }
  Key min() const { return min_; }  // the model's min_allowed_key
  Key max_allowed() const { return wheel_->max_allowed_key(); }
  bool accepts(Key k) const { return k >= min_ && k <= wheel_->max_allowed_key(); }
  const KeyDriverStats& stats() const { return stats_; }

  std::optional<std::uint64_t> pick_id() {
    if (model_.empty()) return std::nullopt;
    return model_.random_id(source_);
  }
  Elt pick_stale() { return stale_[source_.below(stale_.size())]; }

  // --- the operations -----------------------------------------------------

  void add(Key key) {
    ++stats_.add_attempts;
    const bool ok = accepts(key);
    const std::uint64_t id = next_id_++;
    CHIME_DRIVER_TRACE("add key=" << key << " (min=" << min_ << " max=" << wheel_->max_allowed_key() << ") expect "
                                  << (ok ? "ok" : "out_of_range"));
    const std::size_t before = wheel_->size();
    try {
      const Elt e = wheel_->add(key, Token(id));
      CHIME_DRIVER_CHECK(ok, "add accepted key " << key << ", max_allowed " << wheel_->max_allowed_key());
      model_.insert(id, key, e);
      CHIME_DRIVER_CHECK(wheel_->contains(e) && wheel_->key(e) == key && wheel_->value(e).id == id, "new element");
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!ok, "add rejected key " << key << ", max_allowed " << wheel_->max_allowed_key());
      CHIME_DRIVER_CHECK(wheel_->size() == before, "a rejected add changed size");
      ++stats_.add_rejected;
    }
  }

  void remove(std::uint64_t id) {
    CHIME_DRIVER_TRACE("remove id=" << id);
    const Elt e = model_.find(id)->handle;
    wheel_->remove(e);
    model_.erase(id);
    CHIME_DRIVER_CHECK(!wheel_->contains(e), "a removed element is still contained");
    push_stale(e);
  }

  void change_key(std::uint64_t id, Key key) {
    const Elt e = model_.find(id)->handle;
    const bool ok = accepts(key);
    CHIME_DRIVER_TRACE("change_key id=" << id << " to " << key << " expect " << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->change_key(e, key);
      CHIME_DRIVER_CHECK(ok, "change_key accepted key " << key);
      model_.change(id, key);
    } catch (const std::out_of_range&) {
      CHIME_DRIVER_CHECK(!ok, "change_key rejected key " << key);
    }
    CHIME_DRIVER_CHECK(wheel_->contains(e) && wheel_->key(e) == model_.find(id)->key, "key() after change_key");
  }

  // increase_min_allowed_key(key), for any key. The handler records each element; with `mutate` it tries
  // mutations (which must be refused), and it throws on call throw_at + 1 unless throw_at is kNoThrow.
  void increase(Key key, bool mutate = false, std::size_t throw_at = kNoThrow) {
    ++stats_.increases;
    struct Rec {
      Elt e;
      Key key;
      std::uint64_t id;
      bool contained;
    };
    std::vector<Rec> fired;
    CHIME_DRIVER_TRACE("increase_min_allowed_key " << key << " (min=" << min_ << ") mutate=" << mutate << " throw_at="
                                                   << (throw_at == kNoThrow ? -1 : static_cast<long>(throw_at)));
    auto handler = [&](Elt e) {
      fired.push_back({e, wheel_->key(e), wheel_->value(e).id, wheel_->contains(e)});
      if (mutate) {
        const bool refused =
            throws<std::logic_error>([&] { (void)wheel_->add(wheel_->min_allowed_key(), Token(0)); }) &&
            throws<std::logic_error>([&] { wheel_->clear(); }) &&
            throws<std::logic_error>([&] { wheel_->increase_min_allowed_key(kMaxRep, [](Elt) {}); });
        CHIME_DRIVER_CHECK(refused, "a mutation from inside handle_removed was not refused");
      }
      if (throw_at != kNoThrow && fired.size() == throw_at + 1) throw Thrown{};
    };
    if (key > kMaxRep) {
      const bool threw = throws<std::out_of_range>([&] { wheel_->increase_min_allowed_key(key, handler); });
      CHIME_DRIVER_CHECK(threw && fired.empty() && wheel_->min_allowed_key() == min_,
                         "increase_min_allowed_key(" << key << ") above 2^61-1 did not throw out_of_range cleanly");
      return;
    }
    Taken expected;
    if (key > min_) expected = model_.take_below(key);
    bool threw = false;
    try {
      wheel_->increase_min_allowed_key(key, handler);
    } catch (const Thrown&) {
      threw = true;
    }
    stats_.removed_by_increase += fired.size();
    std::unordered_map<std::uint64_t, Key> want_key;
    for (const auto& [id, e] : expected) want_key.emplace(id, e.key);
    for (std::size_t i = 0; i < fired.size(); ++i) {
      const auto it = want_key.find(fired[i].id);
      CHIME_DRIVER_CHECK(it != want_key.end(),
                         "removed id " << fired[i].id << " key " << fired[i].key << ", not expected (or twice)");
      CHIME_DRIVER_CHECK(it->second == fired[i].key,
                         "key() inside handle_removed " << fired[i].key << " != " << it->second);
      want_key.erase(it);
      CHIME_DRIVER_CHECK(!fired[i].contained, "contains() true inside handle_removed");
      if (i > 0) {
        CHIME_DRIVER_CHECK(fired[i - 1].key <= fired[i].key, "removed out of key order at position " << i);
      }
      push_stale(fired[i].e);
    }
    if (!threw) {
      CHIME_DRIVER_CHECK(throw_at == kNoThrow || expected.size() <= throw_at, "the handler should have thrown");
      CHIME_DRIVER_CHECK(want_key.empty(), "increase_min_allowed_key(" << key << ") removed " << fired.size()
                                                                       << " elements, model " << expected.size());
      if (key > min_) min_ = key;
      CHIME_DRIVER_CHECK(wheel_->min_allowed_key() == min_, "min_allowed_key " << wheel_->min_allowed_key());
      return;
    }
    // The handler threw on the last element given: smaller keys are gone, min_allowed_key is its key.
    CHIME_DRIVER_CHECK(fired.size() == throw_at + 1, "the handler threw at the wrong call");
    const Key last = fired.back().key;
    for (const auto& [id, e] : expected) {
      if (want_key.count(id) == 0) continue;  // fired
      CHIME_DRIVER_CHECK(e.key >= last, "element " << id << " with key " << e.key << " < " << last << " survived");
      model_.insert(id, e.key, e.handle);
      CHIME_DRIVER_CHECK(wheel_->contains(e.handle), "an element after the throwing one is gone");
    }
    min_ = std::max(min_, last);
    CHIME_DRIVER_CHECK(wheel_->min_allowed_key() == min_,
                       "after a throwing handler min_allowed_key " << wheel_->min_allowed_key() << " != " << min_);
  }

  // Call `which % 5` with the stale handle `s`: each must throw std::invalid_argument, and change nothing.
  void stale(Elt s, unsigned which) {
    which %= 5;
    CHIME_DRIVER_TRACE("stale element check #" << which);
    CHIME_DRIVER_CHECK(!wheel_->contains(s), "a stale element is contained");
    const std::size_t before = wheel_->size();
    bool ok = false;
    switch (which) {
      case 0:
        ok = throws<std::invalid_argument>([&] { (void)wheel_->key(s); });
        break;
      case 1:
        ok = throws<std::invalid_argument>([&] { (void)wheel_->value(s); });
        break;
      case 2:
        ok = throws<std::invalid_argument>([&] { wheel_->remove(s); });
        break;
      case 3:
        ok = throws<std::invalid_argument>([&] { wheel_->change_key(s, min_); });
        break;
      default:
        ok = throws<std::invalid_argument>([&] { wheel_->change_key(s, kMaxRep + 1); });
        break;
    }
    CHIME_DRIVER_CHECK(ok, "call #" << which << " on a stale element did not throw invalid_argument");
    CHIME_DRIVER_CHECK(wheel_->size() == before, "a stale-handle call changed size");
  }

  void live(std::uint64_t id) {
    CHIME_DRIVER_TRACE("live element check id=" << id);
    const typename Model::Entry& e = *model_.find(id);
    CHIME_DRIVER_CHECK(wheel_->contains(e.handle), "live element " << id << " not contained");
    CHIME_DRIVER_CHECK(wheel_->key(e.handle) == e.key, "key() " << wheel_->key(e.handle) << " != " << e.key);
    CHIME_DRIVER_CHECK(wheel_->value(e.handle).id == id, "value() id " << wheel_->value(e.handle).id << " != " << id);
  }

  void for_each() {
    CHIME_DRIVER_TRACE("for_each");
    std::vector<std::uint64_t> seen;
    wheel_->for_each([&](Elt e) { seen.push_back(wheel_->value(e).id); });
    std::vector<std::uint64_t> want = model_.ids();
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    CHIME_DRIVER_CHECK(seen == want, "for_each visited " << seen.size() << " elements, model has " << want.size());
  }

  // Moving the next block down ahead changes nothing a caller sees: observe() after the operation compares
  // the minimum, a for_each() the rest.
  void cascade_ahead(std::size_t budget) {
    CHIME_DRIVER_TRACE("cascade_ahead budget=" << budget);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    CHIME_DRIVER_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left elements behind");
    CHIME_DRIVER_CHECK(wheel_->size() == size, "cascade_ahead changed size");
  }

  void clear() {
    CHIME_DRIVER_TRACE("clear");
    wheel_->clear();
    CHIME_DRIVER_CHECK(wheel_->empty() && wheel_->size() == 0, "clear left " << wheel_->size() << " elements");
    CHIME_DRIVER_CHECK(Token::live == 0, "clear left " << Token::live << " values alive");
    for (std::uint64_t id : model_.ids()) {
      const Elt e = model_.find(id)->handle;
      CHIME_DRIVER_CHECK(!wheel_->contains(e), "cleared element " << id << " still contained");
      push_stale(e);
    }
    model_.clear();
  }

  // reserve room for `extra` elements more than the wheel holds; every handle, value and order stays.
  void reserve(std::size_t extra) {
    const std::size_t want = wheel_->size() + extra;
    CHIME_DRIVER_TRACE("reserve " << want);
    wheel_->reserve(want);
    CHIME_DRIVER_CHECK(wheel_->capacity() >= want, "reserve(" << want << ") left capacity " << wheel_->capacity());
  }

  // After every operation: the checks of wheel_observe.hpp and the values alive.
  void observe() {
    if (const auto failed = observe_key_wheel(*wheel_, model_, min_, num_bits_, kMaxRep, prev_max_)) {
      CHIME_DRIVER_CHECK(false, *failed);
    }
    CHIME_DRIVER_CHECK(Token::live == static_cast<long>(model_.size()),
                       "live values " << Token::live << " != elements " << model_.size());
  }

  void check_invariants() {
    ++stats_.invariant_checks;
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      CHIME_DRIVER_CHECK(false, "check_invariants: " << e.what());
    }
  }

  // The end of the wheel: its structure and elements once more, a clear() if `clear_first`, and no value
  // left alive once it is destroyed.
  void finish(bool clear_first) {
    check_invariants();
    for_each();
    if (clear_first) {
      clear();
      check_invariants();
    }
    model_.clear();
    wheel_.reset();
    CHIME_DRIVER_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

 private:
  void push_stale(Elt e) {
    if (stale_.size() < max_stale_) {
      stale_.push_back(e);
    } else {
      stale_[next_stale_++ % max_stale_] = e;
    }
  }

  Source& source_;
  int num_bits_;
  std::optional<Wheel> wheel_;
  Model model_;
  Key min_ = 0;
  Key prev_max_ = 0;
  std::uint64_t next_id_ = 1;
  std::size_t max_stale_;
  std::size_t next_stale_ = 0;
  std::vector<Elt> stale_;
  KeyDriverStats stats_;
};

#undef CHIME_DRIVER_CHECK
#undef CHIME_DRIVER_TRACE

}  // namespace chime_test
