// SPDX-License-Identifier: BSL-1.0
// stress/stress_support.hpp: small helpers shared by the stress tests and
// chime-stress: a TimerId packed into one 64-bit word (so ids can travel
// through std::atomic<std::uint64_t> between threads), nanosecond counts,
// the options of a runtime on the steady clock, and waiting for it to idle.
#pragma once

#include <chime/runtime.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace stress_support {

// A TimerId is {slot, generation, runtime tag}: 96 bits, too wide for a
// lock-free atomic. The stress tests pack {slot, generation} into 64 bits and
// keep the tag of the runtime they drive aside: pack() records it (every id
// packed comes from that runtime), unpack() puts it back. Valid because each
// test drives one runtime at a time and packs an id of it before unpacking.
inline std::atomic<std::uint32_t>& runtime_tag_of_packed_ids() {
  static std::atomic<std::uint32_t> tag{0};
  return tag;
}
inline std::uint64_t pack(chime::TimerId id) {
  if (id) runtime_tag_of_packed_ids().store(id.runtime(), std::memory_order_relaxed);
  return (std::uint64_t{id.slot()} << 32) | id.generation();
}
inline chime::TimerId unpack(std::uint64_t v) {
  return chime::TimerId{static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v & 0xFFFFFFFFu),
                        runtime_tag_of_packed_ids().load(std::memory_order_relaxed)};
}
inline std::int64_t ns(chime::TimePoint t) { return t.time_since_epoch().count(); }

// A runtime on the steady clock with 1 ms precision.
inline chime::RuntimeOptions steady_options(unsigned workers) {
  chime::RuntimeOptions options;
  options.precision = std::chrono::milliseconds(1);
  options.workers = workers;
  return options;
}

// Flushes until nothing is pending (the tests' timers are at most a few
// hundred ms away), bounded by 10 s.
inline void wait_until_idle(chime::Runtime& rt) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    rt.flush();
    if (rt.stats().pending == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  rt.flush();
  rt.check_invariants();  // every filed timer held once, none lost; throws (fails the test) if broken
}

}  // namespace stress_support
