// SPDX-License-Identifier: BSL-1.0
// fuzz/wheel_fuzz.cpp: libFuzzer target that decodes bytes into wheel
// operations and replays them on chime's TimingWheel<T> or KeyWheel<T> and on
// the plain reference model of tests/reference_wheel.hpp (an ordered
// multiset with exact 128-bit interval arithmetic).
//
// Input layout (every read past the end is 0, so any byte string is valid):
//   byte 0      which wheel: even TimingWheel, odd KeyWheel
//   byte 1      level bits, from kBitSets (tiny ones hit the upper bound constantly)
//   byte 2      pool capacity: 0, 1 or 64
//   TimingWheel only:
//   byte 3      precision, from {1, 3, 1000, 1000000} ns
//   byte 4 + .. start time: a selector byte and its operand (see pick_start)
//   then        operations, at most kMaxOps: an op byte and its operand bytes.
//
// After every operation: size, now, the upper bound (within the contract's
// bounds, nondecreasing), min_alarm_time / next_alarm_fires_at /
// min_alarm_interval_num (or min_key / min_elt) against the model, the number
// of live values, and check_invariants() (after every operation early in an input, every 8th later
// and after the last: see invariants_due). Every call's fired set is compared
// exactly (which alarms, in nondecreasing interval order, never early, at()
// and value() readable inside the handler, contains() false there). Bad
// times must throw std::out_of_range, stale handles std::invalid_argument,
// mutation from inside a handler std::logic_error, exactly when the model
// says so, and a throwing call must change nothing. A handler that throws
// leaves the wheel as the contract says (the fired prefix gone, now at the
// throwing alarm's interval). Any divergence aborts with a message.
#include <chime/key_wheel.hpp>
#include <chime/timing_wheel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fuzz_input.hpp"
#include "reference_wheel.hpp"
#include "wheel_observe.hpp"

namespace {

using namespace chime_test;
using chime::Duration;
using chime::LevelBits;
using chime::TimePoint;
using chime_fuzz::Input;

constexpr int kMaxOps = 256;

// check_invariants() walks every slot of every level (7,168 with the default level bits) and the pool's
// free list: after every operation it took 60-70 % of the target's time (perf). It runs after
// each of an input's first 4 operations, after every 8th one from then on, and after the last (700 ->
// 1,130 executions/s). The model comparison (observe_timing_wheel / observe_key_wheel) still runs after
// every operation, and a broken structure stays broken (nothing in the wheel repairs it), so a later
// check in the same input finds it.
constexpr int kInvariantsEveryOpUpTo = 4;
constexpr int kInvariantsEvery = 8;
bool invariants_due(int op) { return op < kInvariantsEveryOpUpTo || op % kInvariantsEvery == kInvariantsEvery - 1; }
constexpr std::size_t kMaxStale = 64;

chime::TimePoint T(std::int64_t ns) { return TimePoint{Duration{ns}}; }
std::int64_t N(TimePoint t) { return t.time_since_epoch().count(); }

const std::vector<std::vector<int>>& bit_sets() {
  static const std::vector<std::vector<int>> sets = {
      {1},       {1, 1},       {2, 1, 3}, {3, 1}, {4, 4, 4}, {6, 6, 6, 6}, {11, 10, 10, 10, 10, 10},
      {2, 2},    {5, 4, 3, 2, 1},         {8, 8, 8, 8, 8, 8, 8, 5},       std::vector<int>(61, 1), {12},
      {1, 2, 3}, {7, 7, 7, 7, 7, 7, 7, 7, 5}};
  return sets;
}
constexpr std::int64_t kPrecisions[] = {1, 3, 1000, 1000000};

std::string bits_string(const std::vector<int>& bits) {
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

// Runs f, which must throw exactly E (or nothing when !expect); returns whether it threw.
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

// ---------------------------------------------------------------------------
// TimingWheel<Token> against ReferenceQueue<time, Alarm>

class TimingFuzz {
 public:
  using Wheel = chime::TimingWheel<Token>;
  using Alarm = Wheel::Alarm;
  using Model = ReferenceQueue<std::int64_t, Alarm>;

  explicit TimingFuzz(Input& in) : in_(in) {
    const auto& sets = bit_sets();
    bits_v_ = sets[in_.u8() % sets.size()];
    bits_ = LevelBits::create(std::span<const int>(bits_v_));
    num_bits_ = bits_.num_bits();
    const std::size_t capacities[] = {0, 1, 64};
    const std::size_t capacity = capacities[in_.u8() % 3];
    p_ = kPrecisions[in_.u8() % 4];
    const std::int64_t start = pick_start();
    m_ = IntervalMath{start, p_};
    now_ = start;
    FUZZ_TRACE("TimingWheel precision=" << p_ << "ns bits=" << bits_string(bits_v_) << " capacity=" << capacity
                                        << " start=" << start);
    wheel_.emplace(chime::WheelConfig{Duration{p_}, bits_, capacity}, T(start));
    stale_.push_back(Alarm{});
    FUZZ_CHECK(N(wheel_->now()) == start && N(wheel_->start()) == start, "start/now of a new wheel");
    FUZZ_CHECK(wheel_->alarm_precision() == Duration{p_}, "alarm_precision");
    observe();
  }

  void run() {
    for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) {
      step(in_.u8());
      observe(invariants_due(op));
    }
    check_invariants();
    finish();
  }

 private:
  std::int64_t pick_start() {
    const std::uint8_t sel = in_.u8();
    switch (sel % 8) {
      case 0: return 0;
      case 1: return in_.u16();
      case 2: return -static_cast<std::int64_t>(in_.u64() & ((std::uint64_t{1} << 62) - 1));
      case 3: return clamp64(static_cast<i128>(kI64Max) - static_cast<i128>(p_) * (256 + in_.u16()));
      case 4: return kI64Min + in_.u16();
      case 5: return static_cast<std::int64_t>(in_.u64());
      case 6: return kI64Max - in_.u16();
      default: return 1'000'000'000'000;
    }
  }

  std::int64_t ub() const { return N(wheel_->alarm_upper_bound()); }
  bool accepts(i128 at) const { return at >= now_ && at < ub(); }

  std::optional<std::uint64_t> pick_id() {
    if (model_.empty()) return std::nullopt;
    const auto ids = model_.ids();
    return ids[in_.below(ids.size())];
  }

  // A time for add/reschedule: at now, near, far, at and around the upper bound, before now, at or in the
  // interval of an existing alarm, or anything at all.
  std::int64_t pick_time() {
    const i128 now = now_;
    const i128 u = ub();
    const i128 p = p_;
    switch (in_.u8() % 12) {
      case 0: return now_;
      case 1: return clamp64(now + in_.u8());
      case 2: return clamp64(now + in_.u8() * p + in_.u8() % p);
      case 3: return clamp64(now + in_.log_uniform());
      case 4: return clamp64(u - 1 - static_cast<i128>(in_.u16()) % p);
      case 5: return clamp64(u);
      case 6: return clamp64(u + 1 + in_.log_uniform());
      case 7: return clamp64(now - 1 - in_.u16());
      case 8:
        if (const auto id = pick_id()) return model_.find(*id)->key;
        return now_;
      case 9:
        if (const auto id = pick_id()) return clamp64(m_.interval_start(model_.find(*id)->key) + in_.u16() % p);
        return now_;
      case 10: return static_cast<std::int64_t>(in_.u64());
      default: return clamp64(now + static_cast<i128>(in_.u16()) * p);
    }
  }

  void step(std::uint8_t op) {
    switch (op % 16) {
      case 0:
      case 1: return op_add();
      case 2: return op_remove();
      case 3: return op_reschedule();
      case 4:
      case 6: return op_advance();
      case 5:
        return op_cascade_ahead();
      case 7: return op_fire_past();
      case 8: return op_stale();
      case 9: return op_live();
      case 10: return op_interval_math();
      case 11: return op_query();
      case 12: return op_clear();
      case 13: return op_advance_handler_misbehaves();
      case 14: return op_add_at_interval_num();
      default: return op_reschedule_at_interval_num();
    }
  }

  void op_add() {
    const std::int64_t at = pick_time();
    const std::uint64_t id = next_id_++;
    const bool ok = accepts(at);
    FUZZ_TRACE("add at=" << at << " (now=" << now_ << " ub=" << ub() << ") expect " << (ok ? "ok" : "out_of_range"));
    const std::size_t before = wheel_->size();
    try {
      const Alarm a = wheel_->add(T(at), Token(id));
      FUZZ_CHECK(ok, "add accepted at=" << at << " now=" << now_ << " upper_bound=" << ub());
      model_.insert(id, at, a);
      FUZZ_CHECK(wheel_->contains(a) && N(wheel_->at(a)) == at && wheel_->value(a).id == id, "new alarm");
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "add rejected at=" << at << " now=" << now_ << " upper_bound=" << ub());
      FUZZ_CHECK(wheel_->size() == before, "a rejected add changed size");
    }
  }

  void op_add_at_interval_num() {
    std::int64_t k;
    switch (in_.u8() % 4) {
      case 0: k = static_cast<std::int64_t>(std::min<i128>(m_.num(now_) + in_.u8(), kI64Max)); break;
      case 1: k = -1 - static_cast<std::int64_t>(in_.u8()); break;
      case 2: k = static_cast<std::int64_t>(std::min<i128>(m_.num(now_) + in_.log_uniform(), kI64Max)); break;
      default: k = static_cast<std::int64_t>(in_.u64()); break;
    }
    const i128 s = k < 0 ? i128{-1} : m_.num_start(k);
    const bool ok = k >= 0 && s <= kI64Max && accepts(s);
    const std::uint64_t id = next_id_++;
    FUZZ_TRACE("add_at_interval_num k=" << k << " expect " << (ok ? "ok" : "out_of_range"));
    try {
      const Alarm a = wheel_->add_at_interval_num(k, Token(id));
      FUZZ_CHECK(ok, "add_at_interval_num accepted k=" << k << " now=" << now_ << " upper_bound=" << ub());
      model_.insert(id, static_cast<std::int64_t>(s), a);
      FUZZ_CHECK(N(wheel_->at(a)) == s && wheel_->interval_num(a) == k, "add_at_interval_num: at()/interval_num()");
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "add_at_interval_num rejected k=" << k << " now=" << now_ << " upper_bound=" << ub());
    }
  }

  void op_remove() {
    const auto id = pick_id();
    if (!id) return op_stale();
    const Alarm h = model_.find(*id)->handle;
    FUZZ_TRACE("remove id=" << *id);
    wheel_->remove(h);
    model_.erase(*id);
    FUZZ_CHECK(!wheel_->contains(h), "removed alarm still contained");
    push_stale(h);
  }

  void op_reschedule() {
    const auto id = pick_id();
    if (!id) return op_add();
    const Model::Entry e = *model_.find(*id);
    std::int64_t at;
    switch (in_.u8() % 3) {
      case 0: at = clamp64(static_cast<i128>(e.key) - static_cast<i128>(in_.log_uniform())); break;  // earlier
      case 1: at = clamp64(static_cast<i128>(e.key) + static_cast<i128>(in_.log_uniform())); break;  // later
      default: at = pick_time(); break;
    }
    const bool ok = accepts(at);
    FUZZ_TRACE("reschedule id=" << *id << " from " << e.key << " to " << at << " expect "
                                << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->reschedule(e.handle, T(at));
      FUZZ_CHECK(ok, "reschedule accepted at=" << at << " now=" << now_ << " upper_bound=" << ub());
      model_.change(*id, at);
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "reschedule rejected at=" << at << " now=" << now_ << " upper_bound=" << ub());
    }
    FUZZ_CHECK(wheel_->contains(e.handle) && N(wheel_->at(e.handle)) == model_.find(*id)->key,
               "after reschedule, at() " << N(wheel_->at(e.handle)) << " != model " << model_.find(*id)->key);
  }

  void op_reschedule_at_interval_num() {
    const auto id = pick_id();
    if (!id) return op_add_at_interval_num();
    const Model::Entry e = *model_.find(*id);
    std::int64_t k;
    switch (in_.u8() % 3) {
      case 0: k = static_cast<std::int64_t>(std::min<i128>(m_.num(now_) + in_.u8(), kI64Max)); break;
      case 1: k = -1 - static_cast<std::int64_t>(in_.u8()); break;
      default: k = static_cast<std::int64_t>(std::min<i128>(m_.num(now_) + in_.log_uniform(), kI64Max)); break;
    }
    const i128 s = k < 0 ? i128{-1} : m_.num_start(k);
    const bool ok = k >= 0 && s <= kI64Max && accepts(s);
    FUZZ_TRACE("reschedule_at_interval_num id=" << *id << " k=" << k << " expect " << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->reschedule_at_interval_num(e.handle, k);
      FUZZ_CHECK(ok, "reschedule_at_interval_num accepted k=" << k);
      model_.change(*id, static_cast<std::int64_t>(s));
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "reschedule_at_interval_num rejected k=" << k << " now=" << now_ << " ub=" << ub());
    }
    FUZZ_CHECK(N(wheel_->at(e.handle)) == model_.find(*id)->key, "at() after reschedule_at_interval_num");
  }

  struct FiredRec {
    Alarm alarm;
    std::int64_t at;
    std::uint64_t id;
    bool contained;
  };

  // A time to advance to: now, backwards, tiny and huge steps, to the next firing time, to an alarm's time,
  // close to and past the upper bound, beyond every alarm, too far to represent.
  i128 pick_advance() {
    const i128 now = now_;
    const i128 p = p_;
    const i128 u = ub();
    switch (in_.u8() % 14) {
      case 0: return now;
      case 1: return now - 1 - in_.u8();
      case 2: return now + 1;
      case 3: return now + in_.u8() % p;
      case 4: return now + p;
      case 5: return now + static_cast<i128>(in_.u8()) * p + in_.u8() % p;
      case 6:
        if (const auto min = model_.min_key()) return m_.interval_start(*min) + p - (in_.flag() ? 1 : 0);
        return now + p;
      case 7:
        if (const auto id = pick_id()) return static_cast<i128>(model_.find(*id)->key) + in_.u8() % 2;
        return now + 1;
      case 8: return now + static_cast<i128>(in_.log_uniform() % static_cast<std::uint64_t>(std::max<i128>(u - now, 1)));
      case 9: return u - 1 - static_cast<i128>(in_.u16()) % p;
      case 10: return u + static_cast<i128>(in_.u16());
      case 11: return std::max<i128>(now, model_.max_key().value_or(now_)) + p + in_.log_uniform();
      case 12: return in_.flag() ? m_.num_start(kMaxRepresentableKey + 1) + in_.u16() % p : i128{kI64Max};
      default: return now + static_cast<i128>(in_.log_uniform());
    }
  }

  // Compares one call's fired alarms with what the model expected.
  void compare_fired(const std::vector<FiredRec>& fired, const std::vector<std::pair<std::uint64_t, Model::Entry>>& want,
                     const char* what) {
    std::unordered_map<std::uint64_t, std::int64_t> want_at;
    for (const auto& [id, e] : want) want_at.emplace(id, e.key);
    FUZZ_CHECK(fired.size() == want.size(), what << ": fired " << fired.size() << " alarms, model expected "
                                                 << want.size());
    for (std::size_t i = 0; i < fired.size(); ++i) {
      const FiredRec& f = fired[i];
      const auto it = want_at.find(f.id);
      FUZZ_CHECK(it != want_at.end(), what << ": fired id " << f.id << " at " << f.at << ", not expected");
      FUZZ_CHECK(it->second == f.at, what << ": at() " << f.at << " != model " << it->second);
      want_at.erase(it);  // each alarm once
      FUZZ_CHECK(!f.contained, what << ": contains() true inside the handler");
      if (i > 0) {
        FUZZ_CHECK(m_.num(fired[i - 1].at) <= m_.num(f.at),
                   what << ": interval order broken: " << fired[i - 1].at << " then " << f.at);
      }
      push_stale(f.alarm);
    }
  }

  void op_advance() { advance(pick_advance(), HandlerMode::record, 0); }

  void op_advance_handler_misbehaves() {
    const bool mutate = in_.flag();
    const std::size_t throw_at = in_.u8() % 8;
    advance(pick_advance(), mutate ? HandlerMode::try_mutate : HandlerMode::throw_at, throw_at);
  }

  // Inside a handler every mutation must throw std::logic_error and change nothing.
  void try_mutate_inside(Alarm a, std::uint8_t which) {
    bool threw = false;
    try {
      switch (which % 5) {
        case 0: (void)wheel_->add(wheel_->now(), Token(0)); break;
        case 1: wheel_->remove(a); break;
        case 2: wheel_->clear(); break;
        case 3: wheel_->fire_past_alarms([](Alarm) {}); break;
        default:
          if (const auto id = pick_id()) wheel_->reschedule(model_.find(*id)->handle, wheel_->now());
          else threw = true;  // nothing left to reschedule: count it as refused
          break;
      }
    } catch (const std::logic_error&) {
      // std::logic_error as documented (std::invalid_argument, a stale handle, would also be a refusal for
      // remove(a)); observe() then checks that nothing changed.
      threw = true;
    }
    FUZZ_CHECK(threw, "mutation #" << int(which % 5) << " from inside handle_fired was not refused");
  }

  void advance(i128 to, HandlerMode mode, std::size_t throw_at) {
    const std::int64_t to64 = clamp64(to);
    const std::int64_t now = now_;
    std::vector<FiredRec> fired;
    const std::uint8_t mutate_which = in_.u8();
    auto handler = [&](Alarm a) {
      fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)});
      // The value may be moved out.
      Token moved = std::move(wheel_->value(a));
      (void)moved;
      if (mode == HandlerMode::try_mutate) try_mutate_inside(a, mutate_which);
      if (mode == HandlerMode::throw_at && fired.size() == throw_at + 1) throw Thrown{};
    };
    FUZZ_TRACE("advance_clock to=" << to64 << " (now=" << now << ", delta=" << to_string(static_cast<i128>(to64) - now)
                                   << ") handler=" << int(mode) << " throw_at=" << throw_at);
    if (to64 <= now) {
      wheel_->advance_clock(T(to64), handler);
      FUZZ_CHECK(fired.empty() && N(wheel_->now()) == now, "advance_clock to <= now did something");
      return;
    }
    if (m_.num(to64) > kMaxRepresentableKey) {
      const bool threw = throws<std::out_of_range>([&] { wheel_->advance_clock(T(to64), handler); });
      FUZZ_CHECK(threw, "advance_clock to " << to64 << " (interval " << to_string(m_.num(to64))
                                            << " > 2^61-1) did not throw out_of_range");
      FUZZ_CHECK(fired.empty() && N(wheel_->now()) == now, "a rejected advance_clock changed the wheel");
      return;
    }
    const std::int64_t bound = static_cast<std::int64_t>(m_.interval_start(to64));
    auto expected = model_.take_below(bound);
    bool threw = false;
    try {
      wheel_->advance_clock(T(to64), handler);
    } catch (const Thrown&) {
      threw = true;
    }
    for (const FiredRec& f : fired) FUZZ_CHECK(f.at < to64, "fired early: at " << f.at << " >= to " << to64);
    if (!threw) {
      FUZZ_CHECK(mode != HandlerMode::throw_at || expected.size() <= throw_at, "the handler should have thrown");
      now_ = to64;
      compare_fired(fired, expected, "advance_clock");
      return;
    }
    // The handler threw on the last fired alarm: those fired are gone, the others must still be there, and
    // now() is the start of the throwing alarm's interval (or stays if later).
    FUZZ_CHECK(fired.size() == throw_at + 1 && expected.size() > throw_at, "the handler threw at the wrong call");
    std::vector<std::pair<std::uint64_t, Model::Entry>> gone;
    std::unordered_map<std::uint64_t, bool> fired_ids;
    for (const FiredRec& f : fired) fired_ids[f.id] = true;
    const i128 last_k = m_.num(fired.back().at);
    for (auto& [id, e] : expected) {
      if (fired_ids.count(id)) {
        gone.emplace_back(id, e);
      } else {
        FUZZ_CHECK(m_.num(e.key) >= last_k, "alarm id " << id << " at " << e.key
                                                        << " in an earlier interval than the throwing alarm survived");
        model_.insert(id, e.key, e.handle);
        FUZZ_CHECK(wheel_->contains(e.handle), "an alarm after the throwing one is gone");
      }
    }
    compare_fired(fired, gone, "advance_clock (handler threw)");
    now_ = std::max<std::int64_t>(now, static_cast<std::int64_t>(m_.num_start(last_k)));
  }

  void op_fire_past() {
    std::vector<FiredRec> fired;
    auto expected = model_.take_at_most(now_);
    FUZZ_TRACE("fire_past_alarms (now=" << now_ << ", expect " << expected.size() << ")");
    wheel_->fire_past_alarms(
        [&](Alarm a) { fired.push_back({a, N(wheel_->at(a)), wheel_->value(a).id, wheel_->contains(a)}); });
    compare_fired(fired, expected, "fire_past_alarms");
  }

  void push_stale(Alarm a) {
    if (stale_.size() < kMaxStale) {
      stale_.push_back(a);
    } else {
      stale_[next_id_ % kMaxStale] = a;
    }
  }

  void op_stale() {
    const Alarm s = stale_[in_.below(stale_.size())];
    const int which = in_.u8() % 7;
    FUZZ_TRACE("stale handle check #" << which);
    FUZZ_CHECK(!wheel_->contains(s), "a stale alarm is contained");
    const std::size_t before = wheel_->size();
    bool ok = false;
    switch (which) {
      case 0: ok = throws<std::invalid_argument>([&] { (void)wheel_->at(s); }); break;
      case 1: ok = throws<std::invalid_argument>([&] { (void)wheel_->value(s); }); break;
      case 2: ok = throws<std::invalid_argument>([&] { (void)wheel_->interval_num(s); }); break;
      case 3: ok = throws<std::invalid_argument>([&] { wheel_->remove(s); }); break;
      case 4: ok = throws<std::invalid_argument>([&] { wheel_->reschedule(s, T(now_)); }); break;
      case 5:
        // A stale handle and a bad time: the contract does not order the two checks, so either error will do
        // (std::invalid_argument and std::out_of_range are both std::logic_error), but it must throw.
        ok = throws<std::logic_error>([&] { wheel_->reschedule(s, T(clamp64(static_cast<i128>(ub()) + 1))); });
        break;
      default:
        ok = throws<std::invalid_argument>(
            [&] { wheel_->reschedule_at_interval_num(s, static_cast<std::int64_t>(m_.num(now_))); });
        break;
    }
    FUZZ_CHECK(ok, "accessor #" << which << " on a stale alarm did not throw invalid_argument");
    FUZZ_CHECK(wheel_->size() == before, "a stale-handle call changed size");
  }

  void op_live() {
    const auto id = pick_id();
    if (!id) return op_stale();
    const Model::Entry& e = *model_.find(*id);
    FUZZ_TRACE("live handle check id=" << *id);
    FUZZ_CHECK(wheel_->contains(e.handle), "live alarm " << *id << " not contained");
    FUZZ_CHECK(N(wheel_->at(e.handle)) == e.key, "at() " << N(wheel_->at(e.handle)) << " != " << e.key);
    FUZZ_CHECK(wheel_->value(e.handle).id == *id, "value() of alarm " << *id);
    FUZZ_CHECK(wheel_->interval_num(e.handle) == m_.num(e.key), "interval_num(alarm)");
  }

  // interval_num(t), interval_start(t), interval_num_start(k) against 128-bit arithmetic.
  void op_interval_math() {
    std::int64_t t;
    switch (in_.u8() % 4) {
      case 0: t = static_cast<std::int64_t>(in_.u64()); break;
      case 1: t = clamp64(static_cast<i128>(m_.start) - 1 - in_.u8()); break;
      case 2: t = clamp64(m_.num_start(kMaxRepresentableKey) + static_cast<i128>(in_.u64() % (2 * p_ + 1)) - p_); break;
      default: t = clamp64(static_cast<i128>(now_) + in_.log_uniform()); break;
    }
    FUZZ_TRACE("interval math t=" << t);
    const bool t_ok = t >= m_.start && m_.num(t) <= kMaxRepresentableKey;
    try {
      const std::int64_t k = wheel_->interval_num(T(t));
      FUZZ_CHECK(t_ok && k == m_.num(t), "interval_num(" << t << ") = " << k);
      FUZZ_CHECK(N(wheel_->interval_start(T(t))) == m_.interval_start(t), "interval_start(" << t << ")");
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!t_ok, "interval_num(" << t << ") threw out_of_range");
      FUZZ_CHECK(throws<std::out_of_range>([&] { (void)wheel_->interval_start(T(t)); }),
                 "interval_start(" << t << ") did not throw");
    }
    std::int64_t k;
    switch (in_.u8() % 3) {
      case 0: k = static_cast<std::int64_t>(in_.u64()); break;
      case 1: k = static_cast<std::int64_t>(std::max<i128>(0, std::min<i128>(m_.k_max() - 2 + in_.u8() % 4, kI64Max))); break;
      default: k = static_cast<std::int64_t>(in_.u16()); break;
    }
    const bool k_ok = k >= 0 && k <= m_.k_max();
    try {
      const std::int64_t s = N(wheel_->interval_num_start(k));
      FUZZ_CHECK(k_ok && s == m_.num_start(k), "interval_num_start(" << k << ") = " << s);
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!k_ok, "interval_num_start(" << k << ") threw out_of_range, k_max=" << to_string(m_.k_max()));
    }
  }

  void op_query() {
    FUZZ_TRACE("queries");
    const auto max = wheel_->max_alarm_time();
    FUZZ_CHECK(max.has_value() == !model_.empty(), "max_alarm_time presence");
    if (max) FUZZ_CHECK(N(*max) == *model_.max_key(), "max_alarm_time " << N(*max) << " != " << *model_.max_key());
    FUZZ_CHECK(N(wheel_->now_interval_num_start()) == m_.interval_start(now_), "now_interval_num_start");
    compare_for_each();
  }

  // Moving the next block down ahead changes nothing a caller sees: the
  // observation after every step and the queries here compare it all.
  void op_cascade_ahead() {
    const std::uint8_t b = in_.u8();
    const std::size_t budget = b >= 240 ? SIZE_MAX : b % 8;
    FUZZ_TRACE("cascade_ahead budget=" << budget);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    FUZZ_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left alarms behind");
    FUZZ_CHECK(wheel_->size() == size, "cascade_ahead changed size");
    op_query();
  }

  void op_clear() {
    FUZZ_TRACE("clear");
    wheel_->clear();
    for (std::uint64_t id : model_.ids()) {
      const Alarm h = model_.find(id)->handle;
      FUZZ_CHECK(!wheel_->contains(h), "a cleared alarm is still contained");
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
    FUZZ_CHECK(seen == want, "for_each visited " << seen.size() << " alarms, model has " << want.size());
  }

  // After every operation: the checks shared with the differential tests (tests/wheel_observe.hpp), the
  // values alive, and check_invariants().
  void observe(bool with_invariants = true) {
    if (const auto failed = observe_timing_wheel(*wheel_, model_, m_, now_, num_bits_, prev_ub_)) {
      FUZZ_CHECK(false, *failed);
    }
    FUZZ_CHECK(Token::live == static_cast<long>(model_.size()), "live values " << Token::live << " != alarms "
                                                                               << model_.size());
    if (with_invariants) check_invariants();
  }

  void check_invariants() {
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      FUZZ_CHECK(false, "check_invariants: " << e.what());
    }
  }

  void finish() {
    compare_for_each();
    if (in_.flag()) op_clear();
    wheel_.reset();
    FUZZ_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

  Input& in_;
  std::vector<int> bits_v_;
  LevelBits bits_ = LevelBits::default_bits();
  int num_bits_ = 0;
  std::int64_t p_ = 1;
  IntervalMath m_;
  std::optional<Wheel> wheel_;
  Model model_;
  std::int64_t now_ = 0;
  std::int64_t prev_ub_ = kI64Min;
  std::uint64_t next_id_ = 1;
  std::vector<Alarm> stale_;
};

// ---------------------------------------------------------------------------
// KeyWheel<Token> against ReferenceQueue<key, Elt>

class KeyFuzz {
 public:
  using Wheel = chime::KeyWheel<Token>;
  using Elt = Wheel::Elt;
  using Key = Wheel::Key;
  using Model = ReferenceQueue<Key, Elt>;
  static constexpr Key kMaxRep = Wheel::max_representable_key;

  explicit KeyFuzz(Input& in) : in_(in) {
    const auto& sets = bit_sets();
    bits_v_ = sets[in_.u8() % sets.size()];
    bits_ = LevelBits::create(std::span<const int>(bits_v_));
    num_bits_ = bits_.num_bits();
    const std::size_t capacities[] = {0, 1, 64};
    const std::size_t capacity = capacities[in_.u8() % 3];
    FUZZ_TRACE("KeyWheel bits=" << bits_string(bits_v_) << " capacity=" << capacity);
    wheel_.emplace(bits_, capacity);
    stale_.push_back(Elt{});
    FUZZ_CHECK(wheel_->min_allowed_key() == 0 && wheel_->empty(), "a new KeyWheel");
    observe();
  }

  void run() {
    for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) {
      step(in_.u8());
      observe(invariants_due(op));
    }
    check_invariants();
    wheel_.reset();
    FUZZ_CHECK(Token::live == 0, "destroying the wheel left " << Token::live << " values alive");
  }

 private:
  std::optional<std::uint64_t> pick_id() {
    if (model_.empty()) return std::nullopt;
    const auto ids = model_.ids();
    return ids[in_.below(ids.size())];
  }

  Key pick_key() {
    const u128 min = min_;
    const u128 max = wheel_->max_allowed_key();
    const auto sat = [](u128 v) { return static_cast<Key>(std::min<u128>(v, ~Key{0})); };
    switch (in_.u8() % 10) {
      case 0: return min_;
      case 1: return sat(min + in_.u8());
      case 2: return sat(min + in_.log_uniform());
      case 3: return static_cast<Key>(max);
      case 4: return sat(max + 1 + in_.u8());
      case 5: return sat(u128{kMaxRep} + 1 + in_.u16());
      case 6: return min_ - std::min<Key>(min_, 1 + in_.u8());
      case 7:
        if (const auto id = pick_id()) return model_.find(*id)->key;
        return min_;
      case 8: return in_.u64();
      default: return sat(max - std::min<u128>(max - min, in_.u8()));
    }
  }

  bool accepts(Key k) const { return k >= min_ && k <= wheel_->max_allowed_key(); }

  void step(std::uint8_t op) {
    switch (op % 10) {
      case 0:
      case 1: return op_add();
      case 2: return op_remove();
      case 3: return op_change_key();
      case 4:
        return op_increase();
      case 5:
        return op_cascade_ahead();
      case 6: return op_stale();
      case 7: return op_live();
      case 8: return op_for_each();
      default: return op_clear();
    }
  }

  void op_add() {
    const Key key = pick_key();
    const bool ok = accepts(key);
    const std::uint64_t id = next_id_++;
    FUZZ_TRACE("add key=" << key << " (min=" << min_ << " max=" << wheel_->max_allowed_key() << ") expect "
                          << (ok ? "ok" : "out_of_range"));
    const std::size_t before = wheel_->size();
    try {
      const Elt e = wheel_->add(key, Token(id));
      FUZZ_CHECK(ok, "add accepted key " << key << ", max_allowed " << wheel_->max_allowed_key());
      model_.insert(id, key, e);
      FUZZ_CHECK(wheel_->contains(e) && wheel_->key(e) == key && wheel_->value(e).id == id, "new element");
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "add rejected key " << key << ", max_allowed " << wheel_->max_allowed_key());
      FUZZ_CHECK(wheel_->size() == before, "a rejected add changed size");
    }
  }

  void op_remove() {
    const auto id = pick_id();
    if (!id) return op_stale();
    FUZZ_TRACE("remove id=" << *id);
    const Elt e = model_.find(*id)->handle;
    wheel_->remove(e);
    model_.erase(*id);
    FUZZ_CHECK(!wheel_->contains(e), "a removed element is still contained");
    push_stale(e);
  }

  void op_change_key() {
    const auto id = pick_id();
    if (!id) return op_add();
    const Elt e = model_.find(*id)->handle;
    const Key key = pick_key();
    const bool ok = accepts(key);
    FUZZ_TRACE("change_key id=" << *id << " to " << key << " expect " << (ok ? "ok" : "out_of_range"));
    try {
      wheel_->change_key(e, key);
      FUZZ_CHECK(ok, "change_key accepted key " << key);
      model_.change(*id, key);
    } catch (const std::out_of_range&) {
      FUZZ_CHECK(!ok, "change_key rejected key " << key);
    }
    FUZZ_CHECK(wheel_->contains(e) && wheel_->key(e) == model_.find(*id)->key, "key() after change_key");
  }

  void op_increase() {
    const u128 min = min_;
    const u128 max = wheel_->max_allowed_key();
    u128 key;
    switch (in_.u8() % 9) {
      case 0: key = min - std::min<u128>(min, in_.u8() % 3); break;
      case 1: key = min + 1; break;
      case 2: key = min + 1 + in_.u8() % 8; break;
      case 3:
        if (const auto id = pick_id()) {
          key = u128{model_.find(*id)->key} + in_.u8() % 2;
        } else {
          key = min + 1;
        }
        break;
      case 4: key = min + 1 + in_.log_uniform() % static_cast<std::uint64_t>(max - min + 1); break;
      case 5: key = max + 1 + in_.log_uniform() % static_cast<std::uint64_t>(max - min + 1); break;
      case 6: key = u128{kMaxRep} - in_.u8(); break;
      case 7: key = u128{kMaxRep} + 1 + in_.u16(); break;
      default: key = min + (u128{1} << bits_v_[0]); break;
    }
    const Key k = static_cast<Key>(std::min<u128>(key, ~Key{0}));
    const bool mutate = (in_.u8() & 3) == 0;
    const std::size_t throw_at = in_.flag() ? in_.u8() % 8 : SIZE_MAX;
    increase(k, mutate, throw_at);
  }

  void increase(Key key, bool mutate, std::size_t throw_at) {
    struct Rec {
      Elt e;
      Key key;
      std::uint64_t id;
      bool contained;
    };
    std::vector<Rec> fired;
    FUZZ_TRACE("increase_min_allowed_key " << key << " (min=" << min_ << ") mutate=" << mutate
                                           << " throw_at=" << (throw_at == SIZE_MAX ? -1 : static_cast<long>(throw_at)));
    auto handler = [&](Elt e) {
      fired.push_back({e, wheel_->key(e), wheel_->value(e).id, wheel_->contains(e)});
      if (mutate) {
        const bool refused = throws<std::logic_error>([&] { (void)wheel_->add(wheel_->min_allowed_key(), Token(0)); }) &&
                             throws<std::logic_error>([&] { wheel_->clear(); }) &&
                             throws<std::logic_error>([&] { wheel_->increase_min_allowed_key(kMaxRep, [](Elt) {}); });
        FUZZ_CHECK(refused, "a mutation from inside handle_removed was not refused");
      }
      if (fired.size() == throw_at + 1) throw Thrown{};
    };
    if (key > kMaxRep) {
      const bool threw = throws<std::out_of_range>([&] { wheel_->increase_min_allowed_key(key, handler); });
      FUZZ_CHECK(threw && fired.empty() && wheel_->min_allowed_key() == min_,
                 "increase_min_allowed_key(" << key << ") above 2^61-1 did not throw out_of_range cleanly");
      return;
    }
    std::vector<std::pair<std::uint64_t, Model::Entry>> expected;
    if (key > min_) expected = model_.take_below(key);
    bool threw = false;
    try {
      wheel_->increase_min_allowed_key(key, handler);
    } catch (const Thrown&) {
      threw = true;
    }
    std::unordered_map<std::uint64_t, Key> want_key;
    for (const auto& [id, e] : expected) want_key.emplace(id, e.key);
    for (std::size_t i = 0; i < fired.size(); ++i) {
      const auto it = want_key.find(fired[i].id);
      FUZZ_CHECK(it != want_key.end(), "removed id " << fired[i].id << " key " << fired[i].key << ", not expected");
      FUZZ_CHECK(it->second == fired[i].key, "key() inside handle_removed " << fired[i].key << " != " << it->second);
      want_key.erase(it);
      FUZZ_CHECK(!fired[i].contained, "contains() true inside handle_removed");
      if (i > 0) FUZZ_CHECK(fired[i - 1].key <= fired[i].key, "removed out of key order at position " << i);
      push_stale(fired[i].e);
    }
    if (!threw) {
      FUZZ_CHECK(want_key.empty(), "increase_min_allowed_key(" << key << ") removed " << fired.size()
                                                               << " elements, model " << expected.size());
      if (key > min_) min_ = key;
      FUZZ_CHECK(wheel_->min_allowed_key() == min_, "min_allowed_key " << wheel_->min_allowed_key());
      return;
    }
    // The handler threw on the last element given: smaller keys are gone, min_allowed_key is its key.
    FUZZ_CHECK(fired.size() == throw_at + 1, "the handler threw at the wrong call");
    const Key last = fired.back().key;
    for (const auto& [id, e] : expected) {
      if (want_key.count(id) == 0) continue;  // fired
      FUZZ_CHECK(e.key >= last, "element " << id << " with key " << e.key << " < " << last << " survived");
      model_.insert(id, e.key, e.handle);
      FUZZ_CHECK(wheel_->contains(e.handle), "an element after the throwing one is gone");
    }
    min_ = std::max(min_, last);
    FUZZ_CHECK(wheel_->min_allowed_key() == min_, "after a throwing handler min_allowed_key "
                                                      << wheel_->min_allowed_key() << " != " << min_);
  }

  void push_stale(Elt e) {
    if (stale_.size() < kMaxStale) {
      stale_.push_back(e);
    } else {
      stale_[next_id_ % kMaxStale] = e;
    }
  }

  void op_stale() {
    const Elt s = stale_[in_.below(stale_.size())];
    const int which = in_.u8() % 5;
    FUZZ_TRACE("stale element check #" << which);
    FUZZ_CHECK(!wheel_->contains(s), "a stale element is contained");
    bool ok = false;
    switch (which) {
      case 0: ok = throws<std::invalid_argument>([&] { (void)wheel_->key(s); }); break;
      case 1: ok = throws<std::invalid_argument>([&] { (void)wheel_->value(s); }); break;
      case 2: ok = throws<std::invalid_argument>([&] { wheel_->remove(s); }); break;
      case 3: ok = throws<std::invalid_argument>([&] { wheel_->change_key(s, min_); }); break;
      default: ok = throws<std::invalid_argument>([&] { wheel_->change_key(s, kMaxRep + 1); }); break;
    }
    FUZZ_CHECK(ok, "accessor #" << which << " on a stale element did not throw invalid_argument");
  }

  void op_live() {
    const auto id = pick_id();
    if (!id) return op_stale();
    FUZZ_TRACE("live element check id=" << *id);
    const Model::Entry& e = *model_.find(*id);
    FUZZ_CHECK(wheel_->contains(e.handle) && wheel_->key(e.handle) == e.key && wheel_->value(e.handle).id == *id,
               "live element " << *id);
  }

  void op_for_each() {
    FUZZ_TRACE("for_each");
    std::vector<std::uint64_t> seen;
    wheel_->for_each([&](Elt e) { seen.push_back(wheel_->value(e).id); });
    std::vector<std::uint64_t> want = model_.ids();
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    FUZZ_CHECK(seen == want, "for_each visited " << seen.size() << " elements, model has " << want.size());
  }

  // Moving the next block down ahead changes nothing a caller sees: the
  // observation after every step compares the minimum, for_each here the rest.
  void op_cascade_ahead() {
    const std::uint8_t b = in_.u8();
    const std::size_t budget = b >= 240 ? SIZE_MAX : b % 8;
    FUZZ_TRACE("cascade_ahead budget=" << budget);
    const std::size_t size = wheel_->size();
    const bool more = wheel_->cascade_ahead(budget);
    FUZZ_CHECK(!(more && budget == SIZE_MAX), "cascade_ahead with an unbounded budget left elements behind");
    FUZZ_CHECK(wheel_->size() == size, "cascade_ahead changed size");
    op_for_each();
  }

  void op_clear() {
    FUZZ_TRACE("clear");
    wheel_->clear();
    for (std::uint64_t id : model_.ids()) push_stale(model_.find(id)->handle);
    model_.clear();
  }

  void observe(bool with_invariants = true) {
    if (const auto failed = observe_key_wheel(*wheel_, model_, min_, num_bits_, kMaxRep, prev_max_)) {
      FUZZ_CHECK(false, *failed);
    }
    FUZZ_CHECK(Token::live == static_cast<long>(model_.size()), "live values " << Token::live);
    if (with_invariants) check_invariants();
  }

  void check_invariants() {
    try {
      wheel_->check_invariants();
    } catch (const std::exception& e) {
      FUZZ_CHECK(false, "check_invariants: " << e.what());
    }
  }

  Input& in_;
  std::vector<int> bits_v_;
  LevelBits bits_ = LevelBits::default_bits();
  int num_bits_ = 0;
  std::optional<Wheel> wheel_;
  Model model_;
  Key min_ = 0;
  Key prev_max_ = 0;
  std::uint64_t next_id_ = 1;
  std::vector<Elt> stale_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  chime_fuzz::Trace::get().reset();
  Token::live = 0;
  Input in(data, size);
  try {
    if (in.u8() % 2 == 0) {
      TimingFuzz(in).run();
    } else {
      KeyFuzz(in).run();
    }
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: " << e.what());
  } catch (const Thrown&) {
    FUZZ_CHECK(false, "a handler's exception escaped where the model did not expect it");
  }
  return 0;
}
