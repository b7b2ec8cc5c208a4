// SPDX-License-Identifier: BSL-1.0
// fuzz/runtime_fuzz/setup.hpp: RuntimeFuzz: the configuration the input's
// first bytes choose (fuzz/runtime_fuzz.cpp's header has the layout), and
// the runtime under test: threaded (a Runtime) or simulated (the test seam
// runtime/simulation.hpp, for fuzz/runtime_sim_fuzz.cpp). Part of the
// runtime fuzz targets; see harness.hpp.
#pragma once

#include "harness.hpp"

namespace chime_fuzz::runtime_target {

inline void RuntimeFuzz::start_runtime(const chime::RuntimeOptions& o) {
  if (sim_) {
    sim_rt_.emplace(o);
    rt_ = &sim_rt_->runtime();
  } else {
    threaded_rt_.emplace(o);
    rt_ = &*threaded_rt_;
  }
}

inline RuntimeFuzz::RuntimeFuzz(Input& in, bool simulated) : in_(in), sim_(simulated) {
  const std::uint8_t b0 = in_.u8();
  p_ = kPrecisions[b0 % 4];
  // The simulation has no workers (its callbacks run in the passes).
  workers_ = !sim_ && ((b0 >> 2) & 3) == 3 ? 1 + ((b0 >> 4) & 1) : 0;
  lane_mode_ = workers_ == 0 && (b0 >> 5) == 7;
  // Two shards when there are no workers and bit 4 is set (with workers,
  // bit 4 chooses their count): the fuzzing thread's Producer and Lane bind
  // to shard 0 and 1 in turn, its Runtime calls to its thread's shard.
  shards_ = workers_ == 0 && ((b0 >> 4) & 1) != 0 ? 2 : 1;
  const auto& sets = bit_sets();
  bits_v_ = sets[in_.u8() % sets.size()];
  num_bits_ = 0;
  for (int b : bits_v_) num_bits_ += b;
  start_ = pick_start();
  const std::uint8_t opts = in_.u8();
  const std::size_t max_pending = (opts & 7) < 5 ? 0 : 1 + (opts >> 3) % 8;
  // Bit 7 is unused (corpus inputs keep their meaning).
  slow_all_ = (opts & 0x40) != 0;
  clock_.emplace(T(start_));
  c_ = wheel_now_ = start_;
  k_max_ = (static_cast<i128>(kI64Max) - start_) / p_;
  FUZZ_TRACE("Runtime precision=" << p_ << "ns bits=" << num_bits_ << "(" << bits_v_.size()
                                  << " levels) start=" << start_ << " max_pending=" << max_pending
                                  << " workers=" << workers_ << " shards=" << shards_ << (lane_mode_ ? " lane" : "")
                                  << (slow_all_ ? " slow_run=0" : "") << (sim_ ? " simulated" : ""));
  chime::RuntimeOptions o;
  o.precision = Duration{p_};
  o.level_bits = chime::LevelBits::create(std::span<const int>(bits_v_));
  o.workers = workers_;
  o.shards = shards_;
  o.clock = &*clock_;
  o.max_pending = max_pending;
  o.on_error = [this](TimerId id, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ids_.push_back(id);
    if (!e) bad_error_ = true;
  };
  if (slow_all_) o.slow_run = Duration{0};  // every run is slow (a run takes more than 0 ns)
  o.on_slow_run = [this](TimerId id, Duration took) {
    const std::uint64_t n = slow_calls_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!id || took <= (slow_all_ ? Duration{0} : Duration{std::chrono::milliseconds(10)})) bad_slow_ = true;
    if (n % 16 == 0) throw std::runtime_error("chime fuzz: on_slow_run throws (swallowed)");
  };
  max_pending_ = max_pending;
  if (k_max_ < 2) {
    // Fewer than two intervals before TimePoint::max(): the runtime refuses the clock, naming its time.
    bool refused = false;
    try {
      start_runtime(o);
    } catch (const std::invalid_argument& e) {
      refused = std::string(e.what()).find(std::to_string(start_)) != std::string::npos;
    }
    FUZZ_CHECK(refused, "a clock at " << start_ << " (" << static_cast<std::int64_t>(k_max_)
                                      << " intervals before the end of time) was not refused by name");
    return;
  }
  start_runtime(o);
  producer_.emplace(rt_->producer());
  if (lane_mode_) lane_.emplace(rt_->lane());  // made here: this thread runs it
  FUZZ_CHECK(rt_->precision() == Duration{p_} && N(rt_->clock().now()) == start_, "precision()/clock()");
}

}  // namespace chime_fuzz::runtime_target
