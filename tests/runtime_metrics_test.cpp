// SPDX-License-Identifier: BSL-1.0
// chime::write_openmetrics (chime/metrics.hpp): the exact text for a known Stats
// (families, _total counters, gauges, cumulative histogram buckets in exact seconds
// ending in +Inf, _count, _sum, labels on every sample, # EOF), label escaping, the
// names it refuses; and DurationStats' buckets, count and sum from a live runtime.
// The same text through the Prometheus client's OpenMetrics parser: ctest
// metrics_parse_with_prometheus_client (tests/check_openmetrics.py).

#include "runtime_test_support.hpp"

#include <chime/metrics.hpp>
#include <chime/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

using namespace chime_test;

std::string metrics_text(const chime::Stats& s, std::string_view prefix = "chime",
                         const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  std::ostringstream out;
  chime::write_openmetrics(out, s, prefix, labels);
  return out.str();
}

// The histogram lines of `d` for family `name` (bucket bounds 2^k - 1 ns written as exact seconds).
std::string histogram_lines(const std::string& name, const std::string& labels, const chime::DurationStats& d) {
  static const char* const kLe[] = {
      "0.000000255", "0.000000511", "0.000001023", "0.000002047", "0.000004095", "0.000008191", "0.000016383",
      "0.000032767", "0.000065535", "0.000131071", "0.000262143", "0.000524287", "0.001048575", "0.002097151",
      "0.004194303", "0.008388607", "0.016777215", "0.033554431", "0.067108863", "0.134217727", "0.268435455",
      "0.536870911", "1.073741823", "2.147483647", "4.294967295", "8.589934591", "17.179869183"};
  static_assert(std::size(kLe) == chime::DurationStats::bucket_count);
  const std::string sep = labels.empty() ? "" : ",";
  std::string out;
  for (std::size_t i = 0; i < d.buckets.size(); ++i) {
    out += name + "_bucket{" + labels + sep + "le=\"" + kLe[i] + "\"} " + std::to_string(d.buckets[i].count) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(d.count) + "\n";
  return out;
}

chime::Stats known_stats() {
  chime::Stats s;
  s.scheduled = 10;
  s.fired = 6;
  s.cancelled = 3;
  s.rescheduled = 2;
  s.pending = 1;
  s.callback_errors = 1;
  s.queue_depth = 4;
  s.wakeups = 7;
  s.zombie_sweeps = 5;  // not exported: not a family of design.md's "Metrics"
  s.slow_runs = 1;
  s.refused_overload = 2;
  // Lateness: 1 run at 0 ns, 2 at 3 ms, 1 at 40 s (above the last bound: only in +Inf).
  s.lateness.count = 4;
  s.lateness.sum = std::chrono::seconds(40) + 6ms;
  for (std::size_t i = 0; i < s.lateness.buckets.size(); ++i) {
    s.lateness.buckets[i].count = s.lateness.buckets[i].le >= 3ms ? 3 : 1;
  }
  // Run time: 6 runs of 1.5 µs.
  s.run_time.count = 6;
  s.run_time.sum = 9us;
  for (auto& b : s.run_time.buckets) b.count = b.le >= 1500ns ? 6 : 0;
  return s;
}

// The whole text for a known Stats, without labels: every family of design.md's "Metrics", in
// order, each with HELP and TYPE; counters as _total; times as exact decimal seconds; # EOF last.
TEST(RuntimeMetrics, writes_every_family_exactly) {
  const chime::Stats s = known_stats();
  const std::string expected =
      "# HELP chime_scheduled Timers accepted by schedule_*.\n"
      "# TYPE chime_scheduled counter\n"
      "chime_scheduled_total 10\n"
      "# HELP chime_fired Callback runs completed (each run of a periodic timer counts).\n"
      "# TYPE chime_fired counter\n"
      "chime_fired_total 6\n"
      "# HELP chime_cancelled Successful cancels, and timers cancelled by shutdown.\n"
      "# TYPE chime_cancelled counter\n"
      "chime_cancelled_total 3\n"
      "# HELP chime_rescheduled Successful reschedules.\n"
      "# TYPE chime_rescheduled counter\n"
      "chime_rescheduled_total 2\n"
      "# HELP chime_callback_errors Callbacks that threw.\n"
      "# TYPE chime_callback_errors counter\n"
      "chime_callback_errors_total 1\n"
      "# HELP chime_slow_runs Callback runs longer than RuntimeOptions::slow_run.\n"
      "# TYPE chime_slow_runs counter\n"
      "chime_slow_runs_total 1\n"
      "# HELP chime_wakeups Times the wheel thread woke up.\n"
      "# TYPE chime_wakeups counter\n"
      "chime_wakeups_total 7\n"
      "# HELP chime_refused_overload Schedules refused with CapacityError because a shard's command queue was at "
      "max_queue_depth.\n"
      "# TYPE chime_refused_overload counter\n"
      "chime_refused_overload_total 2\n"
      "# HELP chime_pending Timers not yet finished (periodic ones until cancelled).\n"
      "# TYPE chime_pending gauge\n"
      "chime_pending 1\n"
      "# HELP chime_queue_depth Commands posted but not yet applied (approximate).\n"
      "# TYPE chime_queue_depth gauge\n"
      "chime_queue_depth 4\n"
      "# HELP chime_lateness_seconds Callback start minus due time (drained runs excluded).\n"
      "# TYPE chime_lateness_seconds histogram\n"
      "# UNIT chime_lateness_seconds seconds\n" +
      histogram_lines("chime_lateness_seconds", "", s.lateness) +
      "chime_lateness_seconds_count 4\n"
      "chime_lateness_seconds_sum 40.006\n"
      "# HELP chime_run_time_seconds How long callbacks ran, on the steady clock.\n"
      "# TYPE chime_run_time_seconds histogram\n"
      "# UNIT chime_run_time_seconds seconds\n" +
      histogram_lines("chime_run_time_seconds", "", s.run_time) +
      "chime_run_time_seconds_count 6\n"
      "chime_run_time_seconds_sum 0.000009\n"
      "# EOF\n";
  EXPECT_EQ(metrics_text(s), expected);
  // Spot checks of the generated bucket lines.
  EXPECT_NE(expected.find("chime_lateness_seconds_bucket{le=\"0.002097151\"} 1\n"), std::string::npos);
  EXPECT_NE(expected.find("chime_lateness_seconds_bucket{le=\"0.004194303\"} 3\n"), std::string::npos);
  EXPECT_NE(expected.find("chime_run_time_seconds_bucket{le=\"0.000001023\"} 0\n"), std::string::npos);
  EXPECT_NE(expected.find("chime_run_time_seconds_bucket{le=\"0.000002047\"} 6\n"), std::string::npos);
}

// With Stats::shards (a runtime's stats()), queue_depth is one gauge sample per shard, each
// shard's wheel thread CPU time is a counter in seconds, its longest pass a gauge in seconds and
// the most alarms one pass re-filed a gauge, all labelled shard="k" after the user's labels; a
// user label named shard is then refused.
TEST(RuntimeMetrics, per_shard_samples_carry_a_shard_label) {
  chime::Stats s = known_stats();
  s.shards = {chime::ShardStats{4, 7, 1500us, 0, 250us, 12}};
  const std::string text = metrics_text(s, "chime", {{"service", "api"}});
  EXPECT_NE(text.find("# TYPE chime_queue_depth gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nchime_queue_depth{service=\"api\",shard=\"0\"} 4\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\nchime_queue_depth{service=\"api\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE chime_wheel_busy_seconds counter\n# UNIT chime_wheel_busy_seconds seconds\n"
                      "chime_wheel_busy_seconds_total{service=\"api\",shard=\"0\"} 0.0015\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE chime_longest_pass_seconds gauge\n# UNIT chime_longest_pass_seconds seconds\n"
                      "chime_longest_pass_seconds{service=\"api\",shard=\"0\"} 0.00025\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE chime_most_refiled_in_a_pass gauge\n"
                      "chime_most_refiled_in_a_pass{service=\"api\",shard=\"0\"} 12\n"),
            std::string::npos)
      << text;
  EXPECT_THROW(metrics_text(s, "chime", {{"shard", "x"}}), std::invalid_argument);
  s.shards.clear();
  EXPECT_NO_THROW(metrics_text(s, "chime", {{"shard", "x"}}));
}

// Every sample line carries the user's labels, in order, before le; the prefix renames every family.
TEST(RuntimeMetrics, labels_on_every_sample_and_prefix_on_every_family) {
  const chime::Stats s = known_stats();
  const std::string text = metrics_text(s, "app_timers", {{"service", "api"}, {"zone", "eu-1"}});
  std::istringstream lines(text);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.starts_with("# ")) {
      if (line != "# EOF") {
        EXPECT_TRUE(line.find(" app_timers_") != std::string::npos) << line;
      }
      continue;
    }
    ++samples;
    EXPECT_TRUE(line.starts_with("app_timers_")) << line;
    EXPECT_NE(line.find("{service=\"api\",zone=\"eu-1\""), std::string::npos) << line;
  }
  EXPECT_EQ(samples, 8 + 2 + 2 * (static_cast<int>(chime::DurationStats::bucket_count) + 3));  // 8 counters
  EXPECT_NE(text.find("app_timers_pending{service=\"api\",zone=\"eu-1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("app_timers_lateness_seconds_bucket{service=\"api\",zone=\"eu-1\",le=\"+Inf\"} 4\n"),
            std::string::npos);
}

// Label values are escaped as the format says: backslash, double quote and newline.
TEST(RuntimeMetrics, label_values_are_escaped) {
  const std::string text = metrics_text(known_stats(), "chime", {{"path", "a\"b\\c\nd"}});
  EXPECT_NE(text.find("chime_fired_total{path=\"a\\\"b\\\\c\\nd\"} 6\n"), std::string::npos) << text;
}

// A prefix that is not a metric name, or a label name that is not a label name (or le, or twice),
// throws before anything is written.
TEST(RuntimeMetrics, refuses_bad_names_before_writing) {
  const chime::Stats s;
  for (const char* prefix : {"", "9lives", "has-dash", "sp ace"}) {
    std::ostringstream out;
    EXPECT_THROW(chime::write_openmetrics(out, s, prefix), std::invalid_argument) << prefix;
    EXPECT_TRUE(out.str().empty());
  }
  const std::vector<std::vector<std::pair<std::string, std::string>>> bad = {
      {{"", "x"}}, {{"a:b", "x"}}, {{"le", "1"}}, {{"1a", "x"}}, {{"a", "x"}, {"a", "y"}}};
  for (const auto& labels : bad) {
    std::ostringstream out;
    EXPECT_THROW(chime::write_openmetrics(out, s, "chime", labels), std::invalid_argument);
    EXPECT_TRUE(out.str().empty());
  }
  std::ostringstream out;
  chime::write_openmetrics(out, s, "ns:chime_2", {{"_ok", ""}});
  EXPECT_TRUE(out.str().ends_with("# EOF\n"));
}

// Label names starting with __ are reserved (Prometheus's __name__ and its internal labels):
// refused before anything is written, the message naming the label.
TEST(RuntimeMetrics, refuses_reserved_label_names_before_writing) {
  const chime::Stats s;
  for (const char* name : {"__name__", "__", "__x", "__meta_job"}) {
    std::ostringstream out;
    try {
      chime::write_openmetrics(out, s, "chime", {{"job", "a"}, {name, "x"}});
      ADD_FAILURE() << "label " << name << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + name + "\""), std::string::npos) << e.what();
    }
    EXPECT_TRUE(out.str().empty()) << name;
  }
  std::ostringstream out;
  chime::write_openmetrics(out, s, "chime", {{"_x", "a"}, {"a__b", "b"}});
  EXPECT_NE(out.str().find("chime_fired_total{_x=\"a\",a__b=\"b\"} 0\n"), std::string::npos) << out.str();
}

// A label value that is not valid UTF-8 (a stray continuation byte, a truncated sequence, an
// overlong encoding, a surrogate, a code point beyond U+10FFFF, a byte never in UTF-8) is refused
// before anything is written, the message naming the label and the value's bytes (\xNN); valid
// multi-byte values are written as they are.
TEST(RuntimeMetrics, refuses_label_values_that_are_not_utf8_before_writing) {
  const chime::Stats s;
  for (const char* value : {"a\x80", "ab\xC3", "\xE2\x82", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF",
                            "\xE0\x80\xAF", "\xF0\x80\x80\xAF"}) {
    std::ostringstream out;
    try {
      chime::write_openmetrics(out, s, "chime", {{"path", value}});
      ADD_FAILURE() << "a value that is not UTF-8 was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("\"path\""), std::string::npos) << what;
      EXPECT_NE(what.find("UTF-8"), std::string::npos) << what;
      EXPECT_TRUE(std::all_of(what.begin(), what.end(), [](unsigned char c) { return c < 0x80; }))
          << "the message repeats the bytes that are not UTF-8";
    }
    EXPECT_TRUE(out.str().empty());
  }
  try {
    std::ostringstream out;
    chime::write_openmetrics(out, s, "chime", {{"path", "ok\xFF"}});
    ADD_FAILURE() << "a value that is not UTF-8 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ok\\xff"), std::string::npos) << e.what();
  }
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xEF\xBF\xBF \xF4\x8F\xBF\xBF";
  std::ostringstream out;
  chime::write_openmetrics(out, s, "chime", {{"path", valid}});
  EXPECT_NE(out.str().find("chime_fired_total{path=\"" + valid + "\"} 0\n"), std::string::npos) << out.str();
}

// A default Stats has every bucket bound and no counts; its histograms are empty but well formed.
TEST(RuntimeMetrics, default_stats_have_bounds_and_zero_counts) {
  const chime::DurationStats d;
  EXPECT_EQ(d.count, 0u);
  EXPECT_EQ(d.sum, chime::Duration::zero());
  for (std::size_t i = 0; i < d.buckets.size(); ++i) {
    EXPECT_EQ(d.buckets[i].le, chime::Duration((std::int64_t{1} << (i + 8)) - 1));
    EXPECT_EQ(d.buckets[i].count, 0u);
  }
  const std::string text = metrics_text(chime::Stats{});
  EXPECT_NE(text.find("chime_run_time_seconds_bucket{le=\"+Inf\"} 0\nchime_run_time_seconds_count 0\n"
                      "chime_run_time_seconds_sum 0\n"),
            std::string::npos);
}

// A live runtime's lateness histogram: count and sum are exact, buckets are cumulative and exact
// at their bounds, and the +Inf bucket (count) covers them all. All 100 runs are 3 ms late.
TEST(RuntimeMetrics, runtime_histogram_counts_sum_and_buckets_are_exact) {
  chime::ManualClock clock(kStart);
  chime::Runtime rt(manual_options(clock, 1));
  for (int i = 0; i < 100; ++i) rt.schedule_at(at(10ms), [] {});
  advance_to(clock, rt, at(13ms));
  const chime::Stats s = rt.stats();
  EXPECT_EQ(s.lateness.count, 100u);
  EXPECT_EQ(s.lateness.sum, 100 * 3ms);
  for (const auto& b : s.lateness.buckets) EXPECT_EQ(b.count, b.le >= 3ms ? 100u : 0u) << b.le.count();
  EXPECT_EQ(s.run_time.count, 100u);
  std::uint64_t previous = 0;
  for (const auto& b : s.run_time.buckets) {
    EXPECT_GE(b.count, previous);
    previous = b.count;
  }
  EXPECT_LE(previous, s.run_time.count);
  EXPECT_GE(s.run_time.sum, chime::Duration::zero());
  EXPECT_NE(metrics_text(s).find("chime_lateness_seconds_sum 0.3\n"), std::string::npos);
}

}  // namespace
