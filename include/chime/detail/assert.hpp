// SPDX-License-Identifier: BSL-1.0
// chime/detail/assert.hpp: CHIME_ASSERT, the check for what "cannot happen".
//
// CHIME_ASSERT(cond, "what broke") is active when NDEBUG is not defined: the
// debug, asan and tsan presets (so the stress tests and the fuzzers check the
// invariants instead of trusting them), and compiled out in release builds
// (the release preset defines NDEBUG), where `cond` is not evaluated.
// A failed check prints the condition, the message, the file and the line to
// stderr and aborts: it is a bug in chime (or a violated documented
// precondition), never an expected outcome. Expected outcomes are return
// values; bad input is an exception (G21 in chime/runtime.hpp).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace chime::detail {

[[noreturn]] [[gnu::cold]] inline void assertion_failed(const char* cond, const char* what, const char* file,
                                                         int line) noexcept {
  std::fprintf(stderr, "chime: CHIME_ASSERT(%s) failed at %s:%d: %s\n", cond, file, line, what);
  std::abort();
}

}  // namespace chime::detail

// A statement: `CHIME_ASSERT(cond, "what broke");`.
#ifdef NDEBUG
#define CHIME_ASSERT(cond, what) \
  do {                           \
  } while (false)
#else
#define CHIME_ASSERT(cond, what)                                          \
  do {                                                                    \
    if (!static_cast<bool>(cond)) [[unlikely]] {                          \
      ::chime::detail::assertion_failed(#cond, what, __FILE__, __LINE__); \
    }                                                                     \
  } while (false)
#endif
