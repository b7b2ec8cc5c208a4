// SPDX-License-Identifier: BSL-1.0
// fuzz/wheel_fuzz.cpp: libFuzzer target that decodes bytes into wheel
// operations and runs them with tests/wheel_op_driver.hpp, which applies each
// to chime's TimingWheel<T> or KeyWheel<T> and to the plain reference model
// of tests/reference_wheel.hpp (an ordered multiset with exact 128-bit
// interval arithmetic) and compares. This file is the decoding.
//
// Input layout (every read past the end is 0, so any byte string is valid):
//   byte 0      which wheel: even TimingWheel, odd KeyWheel
//   byte 1      level bits, from bit_sets() (tiny ones hit the upper bound constantly)
//   byte 2      pool capacity: 0, 1 or 64
//   TimingWheel only:
//   byte 3      precision, from {1, 3, 1000, 1000000} ns
//   byte 4 + .. start time: a selector byte and its operand (see pick_start)
//   then        operations, at most kMaxOps: an op byte and its operand bytes.
//
// After every operation the driver's observe(): size, now, the upper bound
// (within the contract's bounds, nondecreasing), min_alarm_time /
// next_alarm_fires_at / min_alarm_interval_num (or min_key / min_elt) against
// the model and the number of live values; and check_invariants() after
// every operation early in an input, every 8th later and after the last (see
// invariants_due). What each operation checks is in the driver's header. Any
// divergence aborts with a message and the operation trace.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "reference_wheel.hpp"
#include "wheel_op_driver.hpp"

namespace {

using namespace chime_test;
using chime::LevelBits;
using chime_fuzz::Input;

constexpr int kMaxOps = 256;

// check_invariants() walks every slot of every level (7,168 with the default level bits) and the pool's
// free list: after every operation it took 60-70 % of the target's time (perf). It runs after
// each of an input's first 4 operations, after every 8th one from then on, and after the last (700 ->
// 1,130 executions/s). The model comparison (the driver's observe()) still runs after
// every operation, and a broken structure stays broken (nothing in the wheel repairs it), so a later
// check in the same input finds it.
constexpr int kInvariantsEveryOpUpTo = 4;
constexpr int kInvariantsEvery = 8;
bool invariants_due(int op) { return op < kInvariantsEveryOpUpTo || op % kInvariantsEvery == kInvariantsEvery - 1; }
constexpr std::size_t kMaxStale = 64;

const std::vector<std::vector<int>>& bit_sets() {
  static const std::vector<std::vector<int>> sets = {
      {1},       {1, 1},       {2, 1, 3}, {3, 1}, {4, 4, 4}, {6, 6, 6, 6}, {11, 10, 10, 10, 10, 10},
      {2, 2},    {5, 4, 3, 2, 1},         {8, 8, 8, 8, 8, 8, 8, 5},       std::vector<int>(61, 1), {12},
      {1, 2, 3}, {7, 7, 7, 7, 7, 7, 7, 7, 5}};
  return sets;
}
constexpr std::int64_t kPrecisions[] = {1, 3, 1000, 1000000};

// The driver's failures abort with the trace (fuzz_input.hpp); every operation goes into the trace.
struct FuzzReport {
  [[noreturn]] static void fail(const char* file, int line, const char* cond, const std::string& what) {
    chime_fuzz::fail(file, line, cond, what);
  }
  static constexpr bool kTraces = true;
  static void trace(const std::string& line) { chime_fuzz::Trace::get().op(line); }
};

// ---------------------------------------------------------------------------
// TimingWheel<Token> against ReferenceQueue<time, Alarm>

class TimingFuzz {
 public:
  using Driver = TimingWheelDriver<Input, FuzzReport>;
  using Alarm = Driver::Alarm;

  explicit TimingFuzz(Input& in) : in_(in) {
    const auto& sets = bit_sets();
    const std::vector<int>& bits = sets[in_.u8() % sets.size()];
    const std::size_t capacities[] = {0, 1, 64};
    const std::size_t capacity = capacities[in_.u8() % 3];
    p_ = kPrecisions[in_.u8() % 4];
    const std::int64_t start = pick_start();
    FUZZ_TRACE("TimingWheel precision=" << p_ << "ns bits=" << bits_string(bits) << " capacity=" << capacity
                                        << " start=" << start);
    d_.emplace(in_, p_, LevelBits::create(std::span<const int>(bits)), capacity, start, kMaxStale);
  }

  void run() {
    for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) {
      step(in_.u8());
      d().observe();
      if (invariants_due(op)) d().check_invariants();
    }
    d().finish(in_.flag());
  }

 private:
  Driver& d() { return *d_; }
  const IntervalMath& m() const { return d_->math(); }
  std::int64_t model_now() const { return d_->now(); }
  std::int64_t ub() const { return d_->upper_bound(); }

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

  // A time for add/reschedule: at now, near, far, at and around the upper bound, before now, at or in the
  // interval of an existing alarm, or anything at all.
  std::int64_t pick_time() {
    const i128 now = model_now();
    const i128 u = ub();
    const i128 p = p_;
    switch (in_.u8() % 12) {
      case 0:
        return model_now();
      case 1: return clamp64(now + in_.u8());
      case 2: return clamp64(now + in_.u8() * p + in_.u8() % p);
      case 3: return clamp64(now + in_.log_uniform());
      case 4: return clamp64(u - 1 - static_cast<i128>(in_.u16()) % p);
      case 5: return clamp64(u);
      case 6: return clamp64(u + 1 + in_.log_uniform());
      case 7: return clamp64(now - 1 - in_.u16());
      case 8:
        if (const auto id = d().pick_id()) return d().model().find(*id)->key;
        return model_now();
      case 9:
        if (const auto id = d().pick_id()) {
          return clamp64(m().interval_start(d().model().find(*id)->key) + in_.u16() % p);
        }
        return model_now();
      case 10: return static_cast<std::int64_t>(in_.u64());
      default: return clamp64(now + static_cast<i128>(in_.u16()) * p);
    }
  }

  // An interval number for add_at_interval_num / reschedule_at_interval_num: near now's, negative, far,
  // or (`any`) anything at all.
  std::int64_t pick_interval_num(bool any) {
    switch (in_.u8() % (any ? 4 : 3)) {
      case 0:
        return static_cast<std::int64_t>(std::min<i128>(m().num(model_now()) + in_.u8(), kI64Max));
      case 1:
        return -1 - static_cast<std::int64_t>(in_.u8());
      case 2:
        return static_cast<std::int64_t>(std::min<i128>(m().num(model_now()) + in_.log_uniform(), kI64Max));
      default:
        return static_cast<std::int64_t>(in_.u64());
    }
  }

  // A time to advance to: now, backwards, tiny and huge steps, to the next firing time, to an alarm's time,
  // close to and past the upper bound, beyond every alarm, too far to represent.
  i128 pick_advance() {
    const i128 now = model_now();
    const i128 p = p_;
    const i128 u = ub();
    const auto& model = d().model();
    switch (in_.u8() % 14) {
      case 0: return now;
      case 1: return now - 1 - in_.u8();
      case 2: return now + 1;
      case 3: return now + in_.u8() % p;
      case 4: return now + p;
      case 5: return now + static_cast<i128>(in_.u8()) * p + in_.u8() % p;
      case 6:
        if (const auto min = model.min_key()) return m().interval_start(*min) + p - (in_.flag() ? 1 : 0);
        return now + p;
      case 7:
        if (const auto id = d().pick_id()) return static_cast<i128>(model.find(*id)->key) + in_.u8() % 2;
        return now + 1;
      case 8: return now + static_cast<i128>(in_.log_uniform() % static_cast<std::uint64_t>(std::max<i128>(u - now, 1)));
      case 9: return u - 1 - static_cast<i128>(in_.u16()) % p;
      case 10: return u + static_cast<i128>(in_.u16());
      case 11:
        return std::max<i128>(now, model.max_key().value_or(model_now())) + p + in_.log_uniform();
      case 12:
        return in_.flag() ? m().num_start(kMaxRepresentableKey + 1) + in_.u16() % p : i128{kI64Max};
      default: return now + static_cast<i128>(in_.log_uniform());
    }
  }

  void step(std::uint8_t op) {
    switch (op % 16) {
      case 0:
      case 1:
        return d().add(pick_time());
      case 2:
        return op_remove();
      case 3:
        return op_reschedule();
      case 4:
      case 6:
        return op_advance();
      case 5:
        return op_cascade_ahead();
      case 7:
        return d().fire_past();
      case 8:
        return op_stale();
      case 9:
        return op_live();
      case 10:
        return op_interval_math();
      case 11:
        return d().query(true);
      case 12:
        return d().clear();
      case 13:
        return op_advance_handler_misbehaves();
      case 14:
        return d().add_at_interval_num(pick_interval_num(true));
      default:
        return op_reschedule_at_interval_num();
    }
  }

  void op_remove() {
    const auto id = d().pick_id();
    if (!id) return op_stale();
    d().remove(*id);
  }

  void op_reschedule() {
    const auto id = d().pick_id();
    if (!id) return d().add(pick_time());
    const std::int64_t key = d().model().find(*id)->key;
    std::int64_t at;
    switch (in_.u8() % 3) {
      case 0:
        at = clamp64(static_cast<i128>(key) - static_cast<i128>(in_.log_uniform()));
        break;  // earlier
      case 1:
        at = clamp64(static_cast<i128>(key) + static_cast<i128>(in_.log_uniform()));
        break;  // later
      default:
        at = pick_time();
        break;
    }
    d().reschedule(*id, at);
  }

  void op_reschedule_at_interval_num() {
    const auto id = d().pick_id();
    if (!id) return d().add_at_interval_num(pick_interval_num(true));
    d().reschedule_at_interval_num(*id, pick_interval_num(false));
  }

  void op_advance() {
    const i128 to = pick_advance();
    const std::uint8_t mutate_which = in_.u8();
    d().advance(to, HandlerMode::record, 0, mutate_which);
  }

  void op_advance_handler_misbehaves() {
    const bool mutate = in_.flag();
    const std::size_t throw_at = in_.u8() % 8;
    const i128 to = pick_advance();
    const std::uint8_t mutate_which = in_.u8();
    d().advance(to, mutate ? HandlerMode::try_mutate : HandlerMode::throw_at, throw_at, mutate_which);
  }

  void op_stale() {
    const Alarm s = d().pick_stale();
    d().stale(s, in_.u8());
  }

  void op_live() {
    const auto id = d().pick_id();
    if (!id) return op_stale();
    d().live(*id);
  }

  // interval_num(t), interval_start(t), interval_num_start(k) on any t and k.
  void op_interval_math() {
    std::int64_t t;
    switch (in_.u8() % 4) {
      case 0: t = static_cast<std::int64_t>(in_.u64()); break;
      case 1:
        t = clamp64(static_cast<i128>(m().start) - 1 - in_.u8());
        break;
      case 2:
        t = clamp64(m().num_start(kMaxRepresentableKey) + static_cast<i128>(in_.u64() % (2 * p_ + 1)) - p_);
        break;
      default:
        t = clamp64(static_cast<i128>(model_now()) + in_.log_uniform());
        break;
    }
    std::int64_t k;
    switch (in_.u8() % 3) {
      case 0: k = static_cast<std::int64_t>(in_.u64()); break;
      case 1:
        k = static_cast<std::int64_t>(std::max<i128>(0, std::min<i128>(m().k_max() - 2 + in_.u8() % 4, kI64Max)));
        break;
      default: k = static_cast<std::int64_t>(in_.u16()); break;
    }
    d().interval_math(t, k);
  }

  void op_cascade_ahead() {
    const std::uint8_t b = in_.u8();
    d().cascade_ahead(b >= 240 ? SIZE_MAX : b % 8);
    d().query(true);
  }

  Input& in_;
  std::int64_t p_ = 1;
  std::optional<Driver> d_;
};

// ---------------------------------------------------------------------------
// KeyWheel<Token> against ReferenceQueue<key, Elt>

class KeyFuzz {
 public:
  using Driver = KeyWheelDriver<Input, FuzzReport>;
  using Elt = Driver::Elt;
  using Key = Driver::Key;
  static constexpr Key kMaxRep = Driver::kMaxRep;

  explicit KeyFuzz(Input& in) : in_(in) {
    const auto& sets = bit_sets();
    bits_v_ = sets[in_.u8() % sets.size()];
    const std::size_t capacities[] = {0, 1, 64};
    const std::size_t capacity = capacities[in_.u8() % 3];
    FUZZ_TRACE("KeyWheel bits=" << bits_string(bits_v_) << " capacity=" << capacity);
    d_.emplace(in_, LevelBits::create(std::span<const int>(bits_v_)), capacity, kMaxStale);
  }

  void run() {
    for (int op = 0; op < kMaxOps && !in_.exhausted(); ++op) {
      step(in_.u8());
      d().observe();
      if (invariants_due(op)) d().check_invariants();
    }
    d().finish(false);
  }

 private:
  Driver& d() { return *d_; }

  Key pick_key() {
    const Key min_key = d().min();
    const u128 min = min_key;
    const u128 max = d().max_allowed();
    const auto sat = [](u128 v) { return static_cast<Key>(std::min<u128>(v, ~Key{0})); };
    switch (in_.u8() % 10) {
      case 0:
        return min_key;
      case 1: return sat(min + in_.u8());
      case 2: return sat(min + in_.log_uniform());
      case 3: return static_cast<Key>(max);
      case 4: return sat(max + 1 + in_.u8());
      case 5: return sat(u128{kMaxRep} + 1 + in_.u16());
      case 6:
        return min_key - std::min<Key>(min_key, 1 + in_.u8());
      case 7:
        if (const auto id = d().pick_id()) return d().model().find(*id)->key;
        return min_key;
      case 8: return in_.u64();
      default: return sat(max - std::min<u128>(max - min, in_.u8()));
    }
  }

  void step(std::uint8_t op) {
    switch (op % 10) {
      case 0:
      case 1:
        return d().add(pick_key());
      case 2: return op_remove();
      case 3: return op_change_key();
      case 4:
        return op_increase();
      case 5:
        return op_cascade_ahead();
      case 6: return op_stale();
      case 7: return op_live();
      case 8:
        return d().for_each();
      default:
        return d().clear();
    }
  }

  void op_remove() {
    const auto id = d().pick_id();
    if (!id) return op_stale();
    d().remove(*id);
  }

  void op_change_key() {
    const auto id = d().pick_id();
    if (!id) return d().add(pick_key());
    d().change_key(*id, pick_key());
  }

  void op_increase() {
    const u128 min = d().min();
    const u128 max = d().max_allowed();
    u128 key;
    switch (in_.u8() % 9) {
      case 0: key = min - std::min<u128>(min, in_.u8() % 3); break;
      case 1: key = min + 1; break;
      case 2: key = min + 1 + in_.u8() % 8; break;
      case 3:
        if (const auto id = d().pick_id()) {
          key = u128{d().model().find(*id)->key} + in_.u8() % 2;
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
    const std::size_t throw_at = in_.flag() ? in_.u8() % 8 : kNoThrow;
    d().increase(k, mutate, throw_at);
  }

  void op_cascade_ahead() {
    const std::uint8_t b = in_.u8();
    d().cascade_ahead(b >= 240 ? SIZE_MAX : b % 8);
    d().for_each();
  }

  void op_stale() {
    const Elt s = d().pick_stale();
    d().stale(s, in_.u8());
  }

  void op_live() {
    const auto id = d().pick_id();
    if (!id) return op_stale();
    d().live(*id);
  }

  Input& in_;
  std::vector<int> bits_v_;
  std::optional<Driver> d_;
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
