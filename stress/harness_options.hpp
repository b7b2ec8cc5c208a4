// SPDX-License-Identifier: BSL-1.0
// stress/harness_options.hpp: the command line of chime-stress.
//
// What this is: the options of one chime-stress run, their defaults, the
// usage text, and a parser that either fills them or names the one argument it
// rejects. Who uses it: chime_stress.cpp's main(), once, before any thread
// starts.
//
// Contract:
// - Every flag takes its value as `--flag VALUE` or `--flag=VALUE`.
// - parse_options returns ParseResult::ok with the options filled,
//   ParseResult::help for --help / -h, or ParseResult::error with a one-line
//   message that names the offending argument (unknown flag, missing value,
//   non-numeric, negative, ratio outside [0, 1], precision <= 0, out of
//   range). The caller prints it and the usage and exits 2.
// - Durations (--precision) are a number with an optional unit: ns, us, ms,
//   s; a bare number is milliseconds.
#pragma once

#include <chime/level_bits.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace chime_stress {

struct HarnessOptions {
  unsigned producers = 2;
  std::uint64_t timers = 2'000'000;  // one-shot timers in total, over all producers
  double cancel_ratio = 0.3;         // fraction of one-shot timers a producer tries to cancel
  double reschedule_ratio = 0.3;     // fraction of one-shot timers a producer reschedules (1-3 times)
  unsigned periodic = 16;            // periodic timers, periods 1-16 * precision
  double seconds = 10.0;             // the producing phase lasts at most this long
  std::chrono::nanoseconds precision = std::chrono::milliseconds(1);
  std::chrono::nanoseconds slack{0};  // RuntimeOptions::slack; 0: the default (proportional to the delay)
  std::vector<int> level_bits;        // RuntimeOptions::level_bits; empty: the default
  std::optional<double>
      rate;  // timers scheduled per second, all producers; unset: 1.05 x timers / seconds; 0: no pacing
  unsigned workers = std::thread::hardware_concurrency() == 0 ? 2 : std::thread::hardware_concurrency();
  std::optional<std::uint64_t> seed;  // unset: drawn at random (and printed)
  std::optional<std::string> json;    // --json FILE, "-" for stdout
  std::uint64_t max_queue_depth = 0;  // RuntimeOptions::max_queue_depth; 0: the default
  std::uint64_t burst = 0;            // --burst N: the burst mode, N timers per producer, unpaced; 0: the usual run
  unsigned shards = 0;                // RuntimeOptions::shards; 0: the default (CHIME_SHARDS, else 1)
};

inline constexpr const char* kUsage =
    "usage: chime-stress [--producers P] [--timers N] [--cancel-ratio R] [--reschedule-ratio R]\n"
    "                    [--periodic K] [--seconds S] [--precision D] [--slack D] [--rate OPS] [--workers W]\n"
    "                    [--seed N] [--json FILE|-] [--max-queue-depth Q] [--burst N] [--shards K]\n"
    "                    [--level-bits B0,B1,...] [--help]\n"
    "\n"
    "Drives a chime::Runtime from P producer threads and checks its guarantees.\n"
    "\n"
    "  --producers P         producer threads, each with its own Runtime::producer()   (default 2)\n"
    "  --timers N            one-shot timers to schedule in total                      (default 2000000)\n"
    "  --cancel-ratio R      fraction of timers cancelled, half at once, half later     (default 0.3)\n"
    "  --reschedule-ratio R  fraction of timers rescheduled earlier or later, 1-3 times (default 0.3)\n"
    "  --periodic K          periodic timers with periods of 1-16 x precision          (default 16)\n"
    "  --seconds S           stop producing after S seconds even if N are not reached  (default 10)\n"
    "  --precision D         the runtime's precision: a number and ns|us|ms|s; bare = ms (default 1ms)\n"
    "  --slack D             RuntimeOptions::slack, as --precision (default 0: not set, each timer's\n"
    "                        slack is clamp(delay / 16, 50 us, precision)); the report counts runs\n"
    "                        later than due + slack (or the precision) + 2 ms (OS allowance)\n"
    "  --rate OPS            timers scheduled per second, all producers; 0: as fast as\n"
    "                        possible                          (default 1.05 x N / S: spread over the run)\n"
    "  --workers W           the runtime's worker threads; 0 runs callbacks on the wheel thread\n"
    "                                                                   (default: hardware threads)\n"
    "  --seed N              seed of the random choices (printed; default: random)\n"
    "  --json FILE|-         also write the report as JSON to FILE (- : stdout; the text report\n"
    "                        then goes to stderr)\n"
    "  --max-queue-depth Q   RuntimeOptions::max_queue_depth: commands queued before schedules are\n"
    "                        refused (counted and reported); 0: the default; 18446744073709551615: no bound\n"
    "  --burst N             instead of the run above: each producer posts N timers due within\n"
    "                        0-4 x precision as fast as it can, counting refusals; reports peak\n"
    "                        queue depth and RSS, and checks every accepted timer runs exactly once\n"
    "  --shards K            RuntimeOptions::shards: wheel threads, each producer bound to one\n"
    "                        round-robin; 0: the default (CHIME_SHARDS, else 1)  (default 0)\n"
    "  --level-bits B0,B1,.. RuntimeOptions::level_bits, e.g. 8,4,20,20: small levels bring the\n"
    "                        wheel's level boundaries every few seconds  (default 11,10,10,10,10,10)\n"
    "  --help, -h            print this and exit\n"
    "\n"
    "Due times: 60% within 0-4 x precision, 35% within 64-4096 x precision (level 1 of\n"
    "the wheel at the default level bits), 5% far out (2^11 to 2^34 x precision, capped at 30 days).\n"
    "Exit status: 0 when every invariant holds, 1 on any violation, 2 on bad arguments.\n";

enum class ParseResult { ok, help, error };

namespace detail {

inline bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

// A finite decimal number (no unit, no trailing characters).
inline bool parse_double(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) return false;
  // Reject hex floats, "inf", "nan": only digits, one '.', a sign, an exponent.
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) return false;
  }
  out = v;
  return true;
}

inline bool looks_negative(std::string_view text) { return !text.empty() && text[0] == '-'; }

}  // namespace detail

// Fills `options` from argv; on ParseResult::error, `message` names the argument.
inline ParseResult parse_options(int argc, char** argv, HarnessOptions& options, std::string& message) {
  using namespace std::string_literals;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return ParseResult::help;
    if (arg.rfind("--", 0) != 0) {
      message = "unexpected argument '" + arg + "' (flags start with --)";
      return ParseResult::error;
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    static constexpr const char* known[] = {
        "--producers",       "--timers", "--cancel-ratio", "--reschedule-ratio", "--periodic", "--seconds",
        "--precision",       "--slack",  "--rate",         "--workers",          "--seed",     "--json",
        "--max-queue-depth", "--burst",  "--shards",       "--level-bits"};
    bool is_known = false;
    for (const char* k : known) is_known = is_known || name == k;
    if (!is_known) {
      message = "unknown argument '" + name + "'";
      return ParseResult::error;
    }
    if (!value) {
      // A following argument is the value unless it is another flag (a negative number is a value).
      if (i + 1 >= argc || (std::string_view(argv[i + 1]).rfind("--", 0) == 0)) {
        message = name + ": missing value";
        return ParseResult::error;
      }
      value = argv[++i];
    }
    const std::string& v = *value;
    auto bad = [&](const std::string& what) {
      message = name + ": " + what + ", got '" + v + "'";
      return ParseResult::error;
    };
    auto integer = [&](std::uint64_t lo, std::uint64_t hi, std::uint64_t& out) -> bool {
      if (detail::looks_negative(v)) return (bad("must not be negative"), false);
      if (!detail::parse_u64(v, out)) return (bad("expected a non-negative integer"), false);
      if (out < lo || out > hi) {
        return (bad("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"), false);
      }
      return true;
    };
    auto number = [&](double& out) -> bool {
      if (!detail::parse_double(v, out)) return (bad("expected a number"), false);
      if (out < 0 || (out == 0 && detail::looks_negative(v))) return (bad("must not be negative"), false);
      return true;
    };
    std::uint64_t u = 0;
    double d = 0;
    if (name == "--producers") {
      if (!integer(1, 256, u)) return ParseResult::error;
      options.producers = static_cast<unsigned>(u);
    } else if (name == "--timers") {
      if (!integer(0, 50'000'000, u)) return ParseResult::error;
      options.timers = u;
    } else if (name == "--cancel-ratio" || name == "--reschedule-ratio") {
      if (!number(d)) return ParseResult::error;
      if (d > 1) return bad("must be a ratio in [0, 1]");
      (name == "--cancel-ratio" ? options.cancel_ratio : options.reschedule_ratio) = d;
    } else if (name == "--periodic") {
      if (!integer(0, 100'000, u)) return ParseResult::error;
      options.periodic = static_cast<unsigned>(u);
    } else if (name == "--seconds") {
      if (!number(d)) return ParseResult::error;
      if (d <= 0 || d > 86'400) return bad("must be in (0, 86400]");
      options.seconds = d;
    } else if (name == "--precision" || name == "--slack") {
      if (detail::looks_negative(v)) return bad("must be positive");
      std::size_t unit_at = 0;
      while (unit_at < v.size() && ((v[unit_at] >= '0' && v[unit_at] <= '9') || v[unit_at] == '.')) ++unit_at;
      const std::string digits = v.substr(0, unit_at);
      const std::string unit = v.substr(unit_at);
      double scale = 0;
      if (unit.empty() || unit == "ms")
        scale = 1e6;
      else if (unit == "us")
        scale = 1e3;
      else if (unit == "ns")
        scale = 1;
      else if (unit == "s")
        scale = 1e9;
      else
        return bad("expected a duration such as 1ms, 250us, 100000ns (units ns, us, ms, s)");
      if (!detail::parse_double(digits, d)) return bad("expected a duration such as 1ms, 250us, 100000ns");
      const double ns = std::round(d * scale);
      if (ns <= 0) return bad("must be positive (at least 1ns)");
      if (ns > 1e9) return bad("must be at most 1s");
      (name == "--precision" ? options.precision : options.slack) =
          std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
    } else if (name == "--rate") {
      if (!number(d)) return ParseResult::error;
      options.rate = d;
    } else if (name == "--workers") {
      if (!integer(0, 256, u)) return ParseResult::error;
      options.workers = static_cast<unsigned>(u);
    } else if (name == "--seed") {
      if (!integer(0, UINT64_MAX, u)) return ParseResult::error;
      options.seed = u;
    } else if (name == "--max-queue-depth") {
      if (!integer(0, UINT64_MAX, u)) return ParseResult::error;
      options.max_queue_depth = u;
    } else if (name == "--burst") {
      if (!integer(1, 100'000'000, u)) return ParseResult::error;
      options.burst = u;
    } else if (name == "--shards") {
      if (!integer(0, 64, u)) return ParseResult::error;
      options.shards = static_cast<unsigned>(u);
    } else if (name == "--level-bits") {
      std::vector<int> bits;
      std::size_t at = 0;
      while (at <= v.size()) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        std::uint64_t b = 0;
        if (!detail::parse_u64(v.substr(at, comma - at), b) || b == 0 || b > 61) {
          return bad("expected a comma-separated list of level widths in bits, each 1-61, such as 8,4,20,20");
        }
        bits.push_back(static_cast<int>(b));
        at = comma + 1;
      }
      try {
        (void)chime::LevelBits::create(std::span<const int>(bits));
      } catch (const std::invalid_argument& e) {
        return bad(e.what());
      }
      options.level_bits = bits;
    } else if (name == "--json") {
      if (v.empty()) return bad("expected a file name or -");
      options.json = v;
    }
  }
  return ParseResult::ok;
}

}  // namespace chime_stress
