// SPDX-License-Identifier: BSL-1.0
// chime/metrics.hpp: Stats in the OpenMetrics text format, for Prometheus.
//
// Formats: OpenMetrics 1.0.0 text only. Serve it with the Content-Type
// `application/openmetrics-text; version=1.0.0; charset=utf-8` (Prometheus
// asks for it and parses it as OpenMetrics). The classic Prometheus text
// format (`text/plain; version=0.0.4`) is not supported: a classic-format
// parser reads each counter family (`# TYPE chime_fired counter` over samples
// `chime_fired_total`) as an empty counter plus an untyped `*_total` family.
// docs/using.md, "Metrics", has a handler.
//
// Contract:
// - `write_openmetrics(out, stats, prefix, labels)` writes `stats` in the
//   OpenMetrics text format, one family per field, for prefix `chime`:
//   counters `chime_scheduled`, `chime_fired`, `chime_cancelled`,
//   `chime_rescheduled`, `chime_callback_errors`, `chime_slow_runs`,
//   `chime_wakeups`, `chime_refused_overload` (samples `..._total`);
//   gauges `chime_pending`, `chime_queue_depth`; histograms `chime_lateness_seconds` and
//   `chime_run_time_seconds` (cumulative `_bucket{le="..."}` lines at
//   DurationStats' bounds, then `le="+Inf"`, `_count`, `_sum`), in seconds,
//   written exactly (decimal nanoseconds, no rounding).
// - Every sample line carries `labels`, in the order given (a histogram's
//   `le` comes last); label values are escaped (`\\`, `\"`, `\n`). The text
//   ends with `# EOF`.
// - Throws std::invalid_argument, before writing anything, naming the
//   offender, if `prefix` is not a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`)
//   or a label name is not a label name (`[a-zA-Z_][a-zA-Z0-9_]*`), is `le`,
//   starts with `__` (reserved: `__name__` and Prometheus's internal
//   labels), is `shard` while Stats::shards is not empty, or appears twice;
//   or if a label value is not valid UTF-8 (the format's text is UTF-8;
//   strict parsers refuse anything else).
// - Per shard (design.md, "Metrics"): when Stats::shards is not empty (a
//   runtime's stats() always has one entry per shard, one or more),
//   `chime_queue_depth` has one sample per shard, labelled `shard="k"`
//   (after `labels`), instead of the total, and the counter
//   `chime_wheel_busy_seconds` gives each shard's wheel thread CPU time
//   (`ShardStats::busy`, unit seconds); the gauges
//   `chime_longest_pass_seconds` (`ShardStats::longest_pass`, unit
//   seconds) and `chime_most_refiled_in_a_pass`
//   (`ShardStats::most_refiled_in_a_pass`) give its longest pass and the most
//   alarms one pass moved between the wheel's levels. A Stats without shards
//   gets the total `chime_queue_depth` and none of the per-shard figures.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chime/runtime.hpp"

namespace chime {

void write_openmetrics(std::ostream& out, const Stats& stats, std::string_view prefix = "chime",
                       const std::vector<std::pair<std::string, std::string>>& labels = {});

}  // namespace chime
