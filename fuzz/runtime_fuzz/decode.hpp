// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/decode.hpp: RuntimeFuzz: what the input's bytes mean:
// the clock's start, due times, delays, periods, callback actions, the
// clock's next time, the id an operation targets, and forged ids (this
// runtime's tag with a generation never issued, a real id with another tag,
// an id from a second Runtime). Part of the runtime fuzz target; see
// harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

inline std::int64_t RuntimeFuzz::pick_start() {
  switch (in_.u8() % 7) {
    case 0: return 0;
    case 1: return 1'000'000'000'000;  // 1000 s
    case 2: return -static_cast<std::int64_t>(in_.u64() & ((std::uint64_t{1} << 62) - 1));
    case 3: return kI64Min + in_.u16();
    case 4: return kI64Max - static_cast<std::int64_t>(in_.u32());
    case 5: return static_cast<std::int64_t>(in_.u64());
    default: return in_.u32();
  }
}

inline std::optional<std::size_t> RuntimeFuzz::pick_timer() {
  if (timers_.empty()) return std::nullopt;
  return in_.below(timers_.size());
}

// A due time: at or around now, the range limit, the past (near and far), an existing timer's due, anything.
inline i128 RuntimeFuzz::pick_due() {
  const i128 c = c_;
  const i128 p = p_;
  const i128 l = limit();
  switch (in_.u8() % 12) {
    case 0: return c;
    case 1: return c + in_.u8();
    case 2: return c + static_cast<i128>(in_.u8()) * p + in_.u8() % p;
    case 3: return c + in_.log_uniform();
    case 4: return l - 1 - in_.u8() % p;
    case 5: return l;
    case 6: return l + 1 + in_.log_uniform();
    case 7: return c - 1 - in_.u16();
    case 8: return interval_start(c) - (in_.flag() ? 1 : 0);
    case 9: return c - in_.log_uniform();
    case 10:
      if (const auto i = pick_timer()) return static_cast<i128>(timers_[*i].due) + in_.u8() % 2;
      return c;
    default: return static_cast<std::int64_t>(in_.u64());
  }
}

inline i128 RuntimeFuzz::pick_delay() {
  const i128 p = p_;
  switch (in_.u8() % 9) {
    case 0: return 0;
    case 1: return in_.u8();
    case 2: return static_cast<i128>(in_.u8()) * p;
    case 3: return in_.log_uniform();
    case 4: return -static_cast<i128>(in_.u16());
    case 5: return limit() - c_ - 1 - in_.u8() % p;
    case 6: return limit() - c_;
    case 7: return -static_cast<i128>(in_.log_uniform());
    default: return static_cast<std::int64_t>(in_.u64());
  }
}

inline i128 RuntimeFuzz::pick_period() {
  const i128 p = p_;
  switch (in_.u8() % 7) {
    case 0: return p;
    case 1: return 1 + in_.u8();
    case 2: return (1 + static_cast<i128>(in_.u8())) * p;
    case 3: return 1 + static_cast<i128>(in_.log_uniform());
    case 4: return ((i128{1} << num_bits_) - 1) * p - in_.u8();
    case 5: return -static_cast<i128>(in_.u8());
    default: return static_cast<std::int64_t>(in_.u64());
  }
}

inline Action RuntimeFuzz::pick_action() {
  const std::uint8_t b = in_.u8();
  const Action a = b < 150 ? Action::record : static_cast<Action>(1 + (b - 150) % (kNumActions - 1));
  // The simulation has no other thread to find a slow run in progress: a sleep would only cost time.
  return sim_ && a == Action::slow ? Action::record : a;
}

// The clock's next time: tiny and huge steps, exactly to a timer's due (or just before, or after).
inline i128 RuntimeFuzz::pick_clock() {
  const i128 c = c_;
  const i128 p = p_;
  switch (in_.u8() % 10) {
    case 0: return c;
    case 1: return c + 1;
    case 2: return c + in_.u8() % p;
    case 3: return c + p;
    case 4: return c + static_cast<i128>(in_.u8()) * p;
    case 5:
      if (const auto i = pick_timer()) return static_cast<i128>(timers_[*i].due) - (in_.flag() ? 1 : 0);
      return c + p;
    case 6:
      if (const auto i = pick_timer()) return static_cast<i128>(timers_[*i].due) + in_.u8() % 2;
      return c + 1;
    case 7: return c + in_.log_uniform();
    case 8: return limit() + in_.u16();
    default: return c + static_cast<i128>(in_.u16()) * p;
  }
}

inline RuntimeFuzz::Target RuntimeFuzz::pick_target() {
  const std::uint8_t b = in_.u8();
  if (b < 224 && !timers_.empty()) {
    const std::size_t i = in_.below(timers_.size());
    return {i, timers_[i].id};
  }
  if (b < 240) return {std::nullopt, TimerId{}};
  return {std::nullopt, forged_id()};
}

// An id this runtime never issued, so `unknown` / false everywhere: with this runtime's tag, a slot the
// model knows with a generation it never saw, or a far slot; a real timer's slot and generation with
// another tag (0, or one no runtime of ours has); or an id issued by a second runtime.
inline TimerId RuntimeFuzz::forged_id() {
  const std::uint8_t how = in_.u8();
  if (how % 4 == 2 && !timers_.empty()) {
    const TimerId real = timers_[in_.below(timers_.size())].id;
    const std::uint32_t foreign = (how & 4) ? 0u : tag_ + 1u + in_.u8();
    return TimerId(real.slot(), real.generation(), foreign);
  }
  if (how % 4 == 3) {
    if (const auto id = other_runtime_id()) return *id;
  }
  const std::uint32_t slot = (how & 4) ? in_.u8() % 16 : in_.u32();
  std::uint32_t gen = in_.u32() | 1u;
  for (;;) {
    bool clash = false;
    for (const MTimer& t : timers_) clash = clash || (t.id.slot() == slot && t.id.generation() == gen);
    if (!clash) return TimerId(slot, gen, tag_);
    gen += 2;
  }
}

// A pending timer's id in a second runtime (made once per input, on its own ManualClock that never
// moves, so its timer never runs); nullopt if that runtime refuses the clock or the due time.
inline std::optional<TimerId> RuntimeFuzz::other_runtime_id() {
  if (!other_rt_ && !other_clock_) {
    other_clock_.emplace(T(start_));
    try {
      chime::RuntimeOptions o;
      o.precision = Duration{1};
      o.workers = 0;
      o.clock = &*other_clock_;
      if (sim_) {
        other_rt_ = &other_sim_.emplace(o).runtime();
      } else {
        other_rt_ = &other_threaded_.emplace(o);
      }
      other_id_ = other_rt_->schedule_after(Duration{1}, [] {});
    } catch (const std::exception&) {
      other_rt_ = nullptr;
      other_sim_.reset();
      other_threaded_.reset();
    }
    if (other_rt_) {
      FUZZ_CHECK(other_id_.runtime() != 0 && other_id_.runtime() != tag_, "two runtimes share the tag " << tag_);
      // Ours are unknown to it.
      for (const MTimer& t : timers_) {
        FUZZ_CHECK(other_rt_->state(t.id) == TimerState::unknown && !other_rt_->cancel(t.id) &&
                       other_rt_->try_cancel(t.id) == CancelResult::unknown,
                   "another runtime took timer " << t.id.slot() << "/" << t.id.generation() << " for its own");
      }
    }
  }
  if (!other_rt_) return std::nullopt;
  return other_id_;
}

}  // namespace chime_fuzz::runtime_target
