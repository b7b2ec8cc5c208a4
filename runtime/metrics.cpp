// SPDX-License-Identifier: BSL-1.0
// runtime/metrics.cpp: chime::write_openmetrics (include/chime/metrics.hpp).
//
// The text is built in a string and written with one call, so a rejected
// prefix or label throws before anything reaches the stream. Times are
// integer nanoseconds written as exact decimal seconds (no floating point).
#include "chime/metrics.hpp"

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chime {
namespace {

bool is_name(std::string_view s, bool colon_ok) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no
// overlong forms, no surrogates, nothing beyond U+10FFFF), 0 if there is none.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return byte(k) >= lo && byte(k) <= hi;
  };
  const unsigned b = byte(i);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    const unsigned lo = b == 0xE0 ? 0xA0 : 0x80;  // E0: no overlong form
    const unsigned hi = b == 0xED ? 0x9F : 0xBF;  // ED: no surrogate
    return cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    const unsigned lo = b == 0xF0 ? 0x90 : 0x80;  // F0: no overlong form
    const unsigned hi = b == 0xF4 ? 0x8F : 0xBF;  // F4: nothing beyond U+10FFFF
    return cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;  // a continuation byte, C0, C1, F5-FF
}

// Throws naming the label and its value (bytes outside printable ASCII as
// \xNN, so that the message itself is ASCII) if the value is not UTF-8.
void check_utf8_value(const std::string& name, std::string_view value) {
  for (std::size_t i = 0; i < value.size();) {
    const std::size_t n = utf8_sequence(value, i);
    if (n != 0) {
      i += n;
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string shown;
    for (const char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u < 0x7F && c != '\\') {
        shown += c;
      } else {
        shown += "\\x";
        shown += kHex[u >> 4];
        shown += kHex[u & 0xF];
      }
    }
    throw std::invalid_argument("chime::write_openmetrics: the value of label \"" + name + "\" is not valid UTF-8 (\"" +
                                shown + "\", byte " + std::to_string(i) + ")");
  }
}

// `ns` nanoseconds as decimal seconds: 1500000 -> "0.0015", 2000000000 -> "2".
std::string seconds(std::int64_t ns) {
  std::string out;
  std::uint64_t v = static_cast<std::uint64_t>(ns);
  if (ns < 0) {
    out += '-';
    v = ~v + 1;  // magnitude, INT64_MIN included
  }
  out += std::to_string(v / 1'000'000'000u);
  std::uint64_t frac = v % 1'000'000'000u;
  if (frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 9 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += '.';
    out += digits;
  }
  return out;
}

class Writer {
 public:
  Writer(std::string_view prefix, const std::vector<std::pair<std::string, std::string>>& labels) : prefix_(prefix) {
    for (const auto& [name, value] : labels) {
      if (!labels_.empty()) labels_ += ',';
      labels_ += name;
      labels_ += "=\"";
      for (const char c : value) {
        if (c == '\\') {
          labels_ += "\\\\";
        } else if (c == '"') {
          labels_ += "\\\"";
        } else if (c == '\n') {
          labels_ += "\\n";
        } else {
          labels_ += c;
        }
      }
      labels_ += '"';
    }
  }

  void counter(std::string_view name, std::string_view help, std::uint64_t value) {
    family(name, "counter", help);
    sample(name, "_total", {}, std::to_string(value));
  }
  void gauge(std::string_view name, std::string_view help, std::uint64_t value) {
    family(name, "gauge", help);
    sample(name, "", {}, std::to_string(value));
  }
  // One sample per shard, labelled shard="k".
  void shard_gauge(std::string_view name, std::string_view help, const std::vector<ShardStats>& shards,
                   std::uint64_t ShardStats::*field) {
    family(name, "gauge", help);
    for (std::size_t k = 0; k < shards.size(); ++k) {
      sample(name, "", "shard", std::to_string(k), std::to_string(shards[k].*field));
    }
  }
  void shard_seconds_counter(std::string_view name, std::string_view help, const std::vector<ShardStats>& shards,
                             Duration ShardStats::*field) {
    family(name, "counter", help);
    meta("UNIT", name, "seconds");
    for (std::size_t k = 0; k < shards.size(); ++k) {
      sample(name, "_total", "shard", std::to_string(k), seconds((shards[k].*field).count()));
    }
  }
  void shard_seconds_gauge(std::string_view name, std::string_view help, const std::vector<ShardStats>& shards,
                           Duration ShardStats::*field) {
    family(name, "gauge", help);
    meta("UNIT", name, "seconds");
    for (std::size_t k = 0; k < shards.size(); ++k) {
      sample(name, "", "shard", std::to_string(k), seconds((shards[k].*field).count()));
    }
  }
  void histogram(std::string_view name, std::string_view help, const DurationStats& d) {
    family(name, "histogram", help);
    meta("UNIT", name, "seconds");
    for (const HistogramBucket& b : d.buckets) sample(name, "_bucket", seconds(b.le.count()), std::to_string(b.count));
    sample(name, "_bucket", "+Inf", std::to_string(d.count));
    sample(name, "_count", {}, std::to_string(d.count));
    sample(name, "_sum", {}, seconds(d.sum.count()));
  }
  std::string finish() {
    text_ += "# EOF\n";
    return std::move(text_);
  }

 private:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    meta("HELP", name, help);
    meta("TYPE", name, type);
  }
  void meta(std::string_view keyword, std::string_view name, std::string_view text) {
    text_ += "# ";
    text_ += keyword;
    text_ += ' ';
    text_ += prefix_;
    text_ += '_';
    text_ += name;
    text_ += ' ';
    text_ += text;
    text_ += '\n';
  }
  void sample(std::string_view name, std::string_view suffix, std::string_view le, std::string_view value) {
    sample(name, suffix, le.empty() ? std::string_view{} : "le", le, value);
  }
  // With one more label `label`="label_value" (none if label is empty);
  // label_value needs no escaping (a number).
  void sample(std::string_view name, std::string_view suffix, std::string_view label, std::string_view label_value,
              std::string_view value) {
    text_ += prefix_;
    text_ += '_';
    text_ += name;
    text_ += suffix;
    if (!labels_.empty() || !label.empty()) {
      text_ += '{';
      text_ += labels_;
      if (!label.empty()) {
        if (!labels_.empty()) text_ += ',';
        text_ += label;
        text_ += "=\"";
        text_ += label_value;
        text_ += '"';
      }
      text_ += '}';
    }
    text_ += ' ';
    text_ += value;
    text_ += '\n';
  }

  std::string_view prefix_;
  std::string labels_;  // name="escaped value",...
  std::string text_;
};

}  // namespace

void write_openmetrics(std::ostream& out, const Stats& stats, std::string_view prefix,
                       const std::vector<std::pair<std::string, std::string>>& labels) {
  if (!is_name(prefix, true)) {
    throw std::invalid_argument("chime::write_openmetrics: prefix \"" + std::string(prefix) +
                                "\" is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::string& name = labels[i].first;
    if (!is_name(name, false) || name == "le") {
      throw std::invalid_argument("chime::write_openmetrics: \"" + name +
                                  "\" is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not le)");
    }
    if (name.starts_with("__")) {
      throw std::invalid_argument("chime::write_openmetrics: label \"" + name +
                                  "\" is reserved (names starting with __, such as __name__, are Prometheus's)");
    }
    if (name == "shard" && !stats.shards.empty()) {
      throw std::invalid_argument(
          "chime::write_openmetrics: label \"shard\" is taken by the per-shard samples (Stats::shards)");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].first == name) {
        throw std::invalid_argument("chime::write_openmetrics: label \"" + name + "\" appears twice");
      }
    }
    check_utf8_value(name, labels[i].second);
  }

  Writer w(prefix, labels);
  w.counter("scheduled", "Timers accepted by schedule_*.", stats.scheduled);
  w.counter("fired", "Callback runs completed (each run of a periodic timer counts).", stats.fired);
  w.counter("cancelled", "Successful cancels, and timers cancelled by shutdown.", stats.cancelled);
  w.counter("rescheduled", "Successful reschedules.", stats.rescheduled);
  w.counter("callback_errors", "Callbacks that threw.", stats.callback_errors);
  w.counter("slow_runs", "Callback runs longer than RuntimeOptions::slow_run.", stats.slow_runs);
  w.counter("wakeups", "Times the wheel thread woke up.", stats.wakeups);
  w.counter("refused_overload",
            "Schedules refused with CapacityError because a shard's command queue was at max_queue_depth.",
            stats.refused_overload);
  w.gauge("pending", "Timers not yet finished (periodic ones until cancelled).", stats.pending);
  if (stats.shards.empty()) {
    w.gauge("queue_depth", "Commands posted but not yet applied (approximate).", stats.queue_depth);
  } else {
    w.shard_gauge("queue_depth", "Commands posted to a shard's queue but not yet applied (approximate).", stats.shards,
                  &ShardStats::queue_depth);
    w.shard_seconds_counter("wheel_busy_seconds", "CPU time of a shard's wheel thread.", stats.shards,
                            &ShardStats::busy);
    w.shard_seconds_gauge("longest_pass_seconds", "The longest pass of a shard's wheel thread so far.", stats.shards,
                          &ShardStats::longest_pass);
    w.shard_gauge("most_refiled_in_a_pass",
                  "The most alarms one pass of a shard's wheel thread moved between the wheel's levels.", stats.shards,
                  &ShardStats::most_refiled_in_a_pass);
  }
  w.histogram("lateness_seconds", "Callback start minus due time (drained runs excluded).", stats.lateness);
  w.histogram("run_time_seconds", "How long callbacks ran, on the steady clock.", stats.run_time);
  const std::string text = w.finish();
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

}  // namespace chime
