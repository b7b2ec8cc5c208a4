// stress/stress_support.hpp: small helpers shared by the stress tests and
// chime-stress: a TimerId packed into one 64-bit word (so ids can travel
// through std::atomic<std::uint64_t> between threads) and nanosecond counts.
#pragma once

#include <chime/runtime.hpp>

#include <cstdint>

namespace stress_support {

inline std::uint64_t pack(chime::TimerId id) { return (std::uint64_t{id.slot()} << 32) | id.generation(); }
inline chime::TimerId unpack(std::uint64_t v) {
  return chime::TimerId{static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v & 0xFFFFFFFFu)};
}
inline std::int64_t ns(chime::TimePoint t) { return t.time_since_epoch().count(); }

}  // namespace stress_support
