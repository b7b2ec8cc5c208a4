#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Parses chime::write_openmetrics output with the Prometheus client's OpenMetrics parser.

Usage: check_openmetrics.py PROGRAM   (runs PROGRAM, e.g. tests/metrics_print.cpp, and reads
its stdout). The ctest metrics_parse_with_prometheus_client runs it. Checks, beyond what the
parser itself refuses (bucket order, +Inf, _count == +Inf, # EOF, escaping): every family
of design.md's "Metrics" is there with its type; every sample carries the program's labels,
values unescaped back to what the program passed; histogram buckets are cumulative
(nondecreasing in le); the per-shard families carry a shard label; and the live runtime's
numbers are what it did (3 schedules refused for overload, one callback error, one slow
run, 5 pending, the wheel thread's CPU time above 0).
Needs Debian's python3-prometheus-client (scripts/lib/deps.sh installs it).
"""
import math
import subprocess
import sys

try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError:
    sys.exit(f"error: {sys.executable} has no prometheus_client: "
             "apt-get install python3-prometheus-client (scripts/lib/deps.sh)")

EXPECTED = {
    "chime_scheduled": "counter",
    "chime_fired": "counter",
    "chime_cancelled": "counter",
    "chime_rescheduled": "counter",
    "chime_callback_errors": "counter",
    "chime_slow_runs": "counter",
    "chime_wakeups": "counter",
    "chime_refused_overload": "counter",
    "chime_pending": "gauge",
    "chime_queue_depth": "gauge",
    "chime_wheel_busy_seconds": "counter",
    "chime_longest_pass_seconds": "gauge",
    "chime_most_refiled_in_a_pass": "gauge",
    "chime_lateness_seconds": "histogram",
    "chime_run_time_seconds": "histogram",
}
LABELS = {"service": "print", "note": 'a "quoted" \\ value\nwith a newline'}
# Families with one sample per shard (labelled shard="0", "1", ...); the runtime has one.
PER_SHARD = {
    "chime_queue_depth",
    "chime_wheel_busy_seconds",
    "chime_longest_pass_seconds",
    "chime_most_refiled_in_a_pass",
}
SECONDS = {"chime_wheel_busy_seconds", "chime_longest_pass_seconds"}


def fail(message):
    sys.exit(f"check_openmetrics: {message}")


def main():
    if len(sys.argv) != 2:
        fail("usage: check_openmetrics.py PROGRAM")
    text = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}

    if set(families) != set(EXPECTED):
        fail(f"families {sorted(families)}, expected {sorted(EXPECTED)}")
    values = {}
    for name, typ in EXPECTED.items():
        family = families[name]
        if family.type != typ:
            fail(f"{name} is a {family.type}, expected a {typ}")
        if (typ == "histogram" or name in SECONDS) and family.unit != "seconds":
            fail(f"{name} has unit {family.unit!r}, expected seconds")
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            expected = dict(LABELS, shard="0") if name in PER_SHARD else LABELS
            if labels != expected:
                fail(f"{sample.name} has labels {labels}, expected {expected}")
        if typ == "counter":
            (sample,) = [s for s in family.samples if s.name == name + "_total"]
            values[name] = sample.value
        elif typ == "gauge":
            (sample,) = family.samples
            values[name] = sample.value
        else:
            buckets = [(float(s.labels["le"]), s.value) for s in family.samples if s.name == name + "_bucket"]
            if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
                fail(f"{name}: buckets do not end in +Inf: {buckets}")
            for (le_a, count_a), (le_b, count_b) in zip(buckets, buckets[1:]):
                if not le_a < le_b or count_a > count_b:
                    fail(f"{name}: buckets not cumulative at le={le_a}, {le_b}: {count_a}, {count_b}")
            (count,) = [s.value for s in family.samples if s.name == name + "_count"]
            (total,) = [s.value for s in family.samples if s.name == name + "_sum"]
            if count != buckets[-1][1] or count <= 0 or total < 0:
                fail(f"{name}: count {count}, +Inf {buckets[-1][1]}, sum {total}")
            values[name] = count

    # The program's own timers: 200 + 2 + 10 cancelled + 5 pending, one holding the wheel
    # thread, and F fillers accepted before the refusals, all cancelled (F is not printed:
    # scheduled - cancelled does not depend on it).
    checks = [
        ("chime_fired", lambda v: v == 203),
        ("chime_rescheduled", lambda v: v == 5),
        ("chime_callback_errors", lambda v: v == 1),
        ("chime_slow_runs", lambda v: v >= 1),
        ("chime_refused_overload", lambda v: v == 3),
        ("chime_pending", lambda v: v == 5),
        ("chime_queue_depth", lambda v: v == 0),
        ("chime_wheel_busy_seconds", lambda v: v > 0),
        ("chime_longest_pass_seconds", lambda v: v > 0),
        ("chime_most_refiled_in_a_pass", lambda v: v >= 0),
        ("chime_run_time_seconds", lambda v: v == 203),
        ("chime_lateness_seconds", lambda v: v == 203),
    ]
    for name, ok in checks:
        if not ok(values[name]):
            fail(f"{name} = {values[name]}: not what the program did")
    if values["chime_scheduled"] - values["chime_cancelled"] != 208 or values["chime_cancelled"] < 10 + 1024:
        fail(f"chime_scheduled = {values['chime_scheduled']}, chime_cancelled = {values['chime_cancelled']}: "
             "expected 208 more scheduled than cancelled, and at least the 1,024 fillers cancelled")
    print(f"check_openmetrics: ok ({len(families)} families, "
          f"{sum(len(f.samples) for f in families.values())} samples)")


if __name__ == "__main__":
    main()
