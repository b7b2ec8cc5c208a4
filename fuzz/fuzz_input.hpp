// SPDX-License-Identifier: BSL-1.0
// fuzz/fuzz_input.hpp: what the fuzz targets share: a reader that turns the
// fuzzer's bytes into choices, the failure hook, and an optional trace.
//
// What this is: test support for fuzz/wheel_fuzz.cpp and fuzz/runtime_fuzz.cpp,
// not part of chime. A target reads its configuration and then one operation
// at a time from an `Input`; when the bytes run out every read returns 0, so
// any byte string (the empty one included) is a valid, finite program.
//
// Failures: FUZZ_CHECK(cond, what) prints the condition, the message and the
// operation trace so far to stderr, then calls std::abort(): libFuzzer records
// the input as a crash, the corpus replay exits non-zero. Setting the
// environment variable CHIME_FUZZ_TRACE=1 also prints every operation as it
// runs (to turn a crashing input into a readable reproducer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

namespace chime_fuzz {

// Reads the fuzzer's bytes front to back; past the end every read is 0.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

  bool exhausted() const noexcept { return pos_ >= size_; }
  std::size_t consumed() const noexcept { return pos_; }

  std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(u16()) | (static_cast<std::uint32_t>(u16()) << 16); }
  std::uint64_t u64() noexcept { return static_cast<std::uint64_t>(u32()) | (static_cast<std::uint64_t>(u32()) << 32); }
  // A value of at most `width` bits (0 <= width <= 64), read from as few bytes as needed.
  std::uint64_t bits(int width) noexcept {
    if (width <= 0) return 0;
    std::uint64_t v = 0;
    for (int got = 0; got < width; got += 8) v |= static_cast<std::uint64_t>(u8()) << got;
    return width >= 64 ? v : v & ((std::uint64_t{1} << width) - 1);
  }
  // A log-uniform value: a byte picks the bit width (0..64), then that many bits.
  std::uint64_t log_uniform() noexcept { return bits(u8() % 65); }
  // An index below n (n > 0).
  std::size_t below(std::size_t n) noexcept { return n <= 256 ? u8() % n : u16() % n; }
  bool flag() noexcept { return (u8() & 1) != 0; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// The operation trace of the current input: the last few operations, printed
// on failure; every operation as it runs with CHIME_FUZZ_TRACE=1.
class Trace {
 public:
  static Trace& get() {
    static Trace t;
    return t;
  }
  void reset() { log_.clear(); }
  void op(const std::string& line) {
    if (echo_) std::fprintf(stderr, "[fuzz] %s\n", line.c_str());
    log_ += line;
    log_ += '\n';
    if (log_.size() > kKeep) log_.erase(0, log_.size() - kKeep);
  }
  const std::string& recent() const { return log_; }

 private:
  static constexpr std::size_t kKeep = 4096;
  Trace() {
    const char* e = std::getenv("CHIME_FUZZ_TRACE");
    echo_ = e != nullptr && std::strcmp(e, "0") != 0 && *e != '\0';
  }
  bool echo_ = false;
  std::string log_;
};

[[noreturn]] inline void fail(const char* file, int line, const char* cond, const std::string& what) {
  std::fprintf(stderr, "\n==== chime fuzz check failed at %s:%d\n  check: %s\n  what:  %s\n==== last operations:\n%s====\n",
               file, line, cond, what.c_str(), Trace::get().recent().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace chime_fuzz

#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::ostringstream fuzz_check_os_;                                  \
      fuzz_check_os_ << what; /* NOLINT */                                \
      ::chime_fuzz::fail(__FILE__, __LINE__, #cond, fuzz_check_os_.str()); \
    }                                                                     \
  } while (0)

// FUZZ_TRACE(expr): appends one line to the trace (built only when needed is
// not worth the complexity: the lines are short and the inputs bounded).
#define FUZZ_TRACE(what)                             \
  do {                                               \
    std::ostringstream fuzz_trace_os_;               \
    fuzz_trace_os_ << what; /* NOLINT */             \
    ::chime_fuzz::Trace::get().op(fuzz_trace_os_.str()); \
  } while (0)
