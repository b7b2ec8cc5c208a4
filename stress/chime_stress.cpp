// SPDX-License-Identifier: BSL-1.0
// chime-stress: a multi-producer load on chime::Runtime (steady clock) that
// reports throughput, lateness, wake-ups and memory, and checks the runtime's
// guarantees on every timer (include/chime/runtime.hpp,
// docs/state-machine.md). The project's main demo (scripts/demo).
//
// The run:
//  1. P producer threads, each with its own Runtime::producer(), schedule
//     their share of N one-shot timers (paced to --rate, default 1.05 x N / S per
//     second), with due times 60% near (0-4 x precision), 35% level 1
//     (64-4096 x precision) and 5% far (2^11-2^34 x precision, capped at 30
//     days) so every level of the wheel holds timers. A fraction of them is
//     cancelled, a fraction rescheduled 1-3 times, earlier or later; each of
//     these actions happens either at once or later, from a per-producer ring
//     of recent timers (so later actions race with the timer firing). K
//     periodic timers (periods 1-16 x precision) run throughout.
//  2. After N timers or S seconds, the producers finish their ring and stop;
//     the harness waits a little for the near timers, calls flush(), checks,
//     cancels the periodic timers, flushes, calls shutdown(cancel_pending)
//     and checks again.
//
// What is checked (one-shot timers: one preallocated record each):
// - exactly once: a timer ran at most once; never both ran and had a cancel
//   return true; never neither (unless shutdown swept it, see nothing lost);
//   a cancel or reschedule that returned false lost to a run that happened.
// - never early: the callback's rt.clock().now() >= Firing::due; Firing::due
//   equals the timer's final due: that of its last reschedule that returned
//   true, or its schedule's if none did; Firing::id is the scheduled id.
//   Why this is exact without any timing assumption: one producer owns each
//   timer and makes its calls one after another, and it records a new due
//   only after reschedule returns true. A reschedule that returned true
//   means the runtime now holds that due and has not started the run (R1
//   happened before the claim W1); one that returned false means the run had
//   started (or the timer was cancelled), so the run used the due of the last
//   successful call. The records are compared only once the run is quiescent
//   (after flush and after shutdown joined every thread), so it does not
//   matter that a callback may run before the producer has written the new
//   due into its record.
// - nothing lost: after flush(), every timer whose final due is earlier than
//   (time before the flush call - precision), hence before the flush's wheel
//   interval, ran or was cancelled; after shutdown, per timer, runs +
//   successful cancels + swept == 1, where swept means shutdown found it
//   pending (it neither ran nor was cancelled, and state(id) is cancelled),
//   and the swept count equals shutdown's return value.
// - periodic no overlap: an in-flight flag per periodic timer, exchanged on
//   entry; never already set.
// - periodic run counts: each run's Firing::due is the previous run's due +
//   (missed + 1) x period (fixed rate, Missed::skip), the first first_due +
//   missed x period; runs never start early; after the flush the next due is
//   not behind the flush's wheel interval (the timer did not fall behind);
//   cancel returns true, and at most one callback (the run in progress)
//   starts after it returned.
// - the runtime's stats() agree with the harness's own counts at the end
//   (refused_overload included: a schedule refused with CapacityError at
//   --max-queue-depth is counted by its producer and its timer left out).
// The report also gives the overload figures: the queue depth's peak
// (sampled), the refusals, and the wheel threads' busy fraction (their CPU
// time, stats().shards[k].busy, over the run's wall time), in all and per
// shard (--shards).
//
// --burst N is another run (run_burst): each producer posts N timers due
// within 0-4 x precision as fast as it can, counting refusals; it reports
// the peak queue depth, pending and RSS, and checks that every accepted
// timer ran exactly once and no refused one ran.
// Exits 0 if all hold, 1 on any violation or error, 2 on bad arguments.

#include <unistd.h>
#include "stress_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <chime/runtime.hpp>

#include "harness_options.hpp"
#include "harness_rss.hpp"

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::Firing;
using chime::TimePoint;
using chime::TimerId;
using chime_stress::HarnessOptions;
using SteadyTime = std::chrono::steady_clock::time_point;

using stress_support::ns;
using stress_support::pack;
using stress_support::unpack;
double seconds_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }
double seconds_of(chime::Duration d) { return std::chrono::duration<double>(d).count(); }
// The bound the runtime applies (RuntimeOptions::max_queue_depth; 0: its default).
std::uint64_t queue_bound(const HarnessOptions& o) {
  return o.max_queue_depth != 0 ? o.max_queue_depth : chime::RuntimeOptions::default_max_queue_depth;
}

// ---- formatting ----

std::string with_commas(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_duration(std::int64_t v) {
  char buf[64];
  const double d = static_cast<double>(v);
  if (v < 1'000) {
    std::snprintf(buf, sizeof buf, "%" PRId64 " ns", v);
  } else if (v < 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f us", d / 1e3);
  } else if (v < 1'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.2f ms", d / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", d / 1e9);
  }
  return buf;
}

std::string format_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// ---- per-timer records ----

enum : std::uint8_t {
  kScheduled = 1,
  kCancelWon = 2,
  kCancelLost = 4,
  kReschedWon = 8,
  kReschedLost = 16,
};

// One per one-shot timer, preallocated (N of them), so the hot path never allocates.
struct TimerRecord {
  // Written only by the producer that owns the timer; read by main after the
  // producers are joined.
  std::uint64_t id = 0;        // packed TimerId
  std::int64_t due_ns = 0;     // final due: the schedule's, then each reschedule that returned true
  std::int64_t called_ns = 0;  // the clock just before the call that set due_ns (lateness split)
  std::uint8_t flags = 0;
  // Written by the callback. Atomics (relaxed, then the release of `fires`)
  // so that a double run, itself a violation, is not also a data race; main
  // reads them after flush() or shutdown(), which order the callbacks before.
  std::atomic<std::uint32_t> fires{0};
  std::atomic<std::int64_t> fired_due_ns{0};  // Firing::due
  std::atomic<std::int64_t> fired_now_ns{0};  // rt.clock().now(), first thing in the callback
  std::atomic<std::int64_t> fired_at_ns{0};   // Firing::fired_at: the pass that dispatched it
  std::atomic<std::uint64_t> fired_id{0};     // Firing::id, packed
};

// One per periodic timer. The callback fields are written by the runs, which
// never overlap if the runtime keeps its promise; atomics so a violation is
// not also a data race.
struct PeriodicRecord {
  // Written by main before schedule_every (which orders them before every run).
  std::uint64_t id = 0;
  std::int64_t period_ns = 0;
  std::int64_t first_due_ns = 0;
  // Set by main after cancel returned true; runs read it on entry.
  std::atomic<bool> cancel_returned{false};
  std::atomic<bool> in_flight{false};
  std::atomic<std::uint64_t> runs{0};
  std::atomic<std::uint64_t> missed{0};
  std::atomic<std::uint64_t> overlaps{0};
  std::atomic<std::uint64_t> early{0};
  std::atomic<std::uint64_t> off_rate{0};
  std::atomic<std::uint64_t> after_cancel{0};
  std::atomic<std::int64_t> last_due_ns{INT64_MIN};
  std::atomic<std::int64_t> last_now_ns{0};
  // The first off-rate run, for the report.
  std::atomic<std::int64_t> off_rate_expected_ns{0};
  std::atomic<std::int64_t> off_rate_got_ns{0};
};

// Per-producer counters: single writer (the producer, relaxed stores), read by
// the progress line and, after join, by the report.
struct alignas(64) ProducerCounters {
  std::atomic<std::uint64_t> scheduled{0};
  std::atomic<std::uint64_t> cancel_calls{0};
  std::atomic<std::uint64_t> cancel_won{0};
  std::atomic<std::uint64_t> resched_calls{0};
  std::atomic<std::uint64_t> resched_won{0};
  std::atomic<std::uint64_t> resched_earlier{0};
  std::atomic<std::uint64_t> near{0};
  std::atomic<std::uint64_t> mid{0};
  std::atomic<std::uint64_t> far{0};
  std::atomic<std::uint64_t> refused{0};  // schedules refused with CapacityError (overload)
};

void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // single writer
}

// A later action on a recent timer: reschedule it `reschedules` times, then cancel it if `cancel`.
struct LaterAction {
  std::uint32_t index = 0;
  std::uint8_t reschedules = 0;
  bool cancel = false;
};

constexpr std::size_t kRing = 512;  // later actions happen about this many schedules later

struct Shared {
  Shared(const HarnessOptions& o, std::uint64_t sd, double r, chime::Runtime& runtime, TimerRecord* recs)
      : options(o), seed(sd), rate(r), rt(runtime), records(recs), counters(o.producers) {}
  const HarnessOptions& options;
  std::uint64_t seed;
  double rate;  // 0: unpaced
  chime::Runtime& rt;
  TimerRecord* records;
  std::vector<ProducerCounters> counters;
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};  // a producer failed: the others stop too
  SteadyTime start{};
  SteadyTime deadline{};
  std::atomic<unsigned> producers_running{0};
  std::mutex error_mutex;
  std::string error;  // the first exception a producer saw
};

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Producer {
 public:
  Producer(Shared& shared, unsigned p)
      : s_(shared),
        p_(p),
        c_(shared.counters[p]),
        rng_(splitmix64(shared.seed ^ splitmix64(p + 1))),
        producer_(shared.rt.producer()),
        clock_(shared.rt.clock()),
        precision_ns_(shared.options.precision.count()) {
    ring_.resize(kRing);
  }

  void run() {
    const std::uint64_t n = s_.options.timers, parts = s_.options.producers;
    const std::uint64_t begin = n * p_ / parts, end = n * (p_ + 1) / parts;
    const double rate = s_.rate / static_cast<double>(parts);
    while (!s_.go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (std::uint64_t i = begin; i < end; ++i) {
      if ((i - begin) % 64 == 0) {
        const SteadyTime now = std::chrono::steady_clock::now();
        if (now >= s_.deadline || s_.stop.load(std::memory_order_relaxed)) break;
        if (rate > 0) {
          const auto target = s_.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(static_cast<double>(i - begin) / rate));
          if (now < target) std::this_thread::sleep_until(std::min(target, s_.deadline));
        }
      }
      schedule_one(static_cast<std::uint32_t>(i));
    }
    // The ring's later actions still happen (they keep the ratios), oldest first.
    while (ring_size_ > 0) {
      perform(ring_[ring_head_]);
      ring_head_ = (ring_head_ + 1) % kRing;
      --ring_size_;
    }
  }

 private:
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }

  std::int64_t draw_delay() {
    const double r = uniform();
    if (r < 0.60) {
      bump(c_.near);
      return uniform_int(0, 4 * precision_ns_);
    }
    if (r < 0.95) {
      bump(c_.mid);
      return uniform_int(64 * precision_ns_, 4096 * precision_ns_);
    }
    bump(c_.far);
    const double exponent = 11.0 + 23.0 * uniform();  // 2^11 .. 2^34 x precision
    const double delay = static_cast<double>(precision_ns_) * std::exp2(exponent);
    constexpr double kCap = 30.0 * 86400e9;  // keeps any precision inside the wheel's range and int64
    return static_cast<std::int64_t>(std::min(delay, kCap));
  }

  chime::Task task(std::uint32_t index) {
    return [record = &s_.records[index], clock = &clock_](const Firing& f) {
      const std::int64_t now = ns(clock->now());
      record->fired_now_ns.store(now, std::memory_order_relaxed);
      record->fired_due_ns.store(ns(f.due), std::memory_order_relaxed);
      record->fired_at_ns.store(ns(f.fired_at), std::memory_order_relaxed);
      record->fired_id.store(pack(f.id), std::memory_order_relaxed);
      record->fires.fetch_add(1, std::memory_order_release);
    };
  }

  void schedule_one(std::uint32_t index) {
    TimerRecord& r = s_.records[index];
    const std::int64_t called = ns(clock_.now());
    const std::int64_t due = called + draw_delay();
    r.due_ns = due;
    r.called_ns = called;
    TimerId id;
    try {
      id = producer_.schedule_at(TimePoint(Duration(due)), task(index));
    } catch (const chime::CapacityError&) {
      bump(c_.refused);  // the queue is at max_queue_depth: this timer is not scheduled
      return;
    }
    r.id = pack(id);
    r.flags |= kScheduled;
    bump(c_.scheduled);

    LaterAction later{index, 0, false};
    if (uniform() < s_.options.reschedule_ratio) {
      int count = 1 + (uniform() < 0.3) + (uniform() < 0.1);
      if (uniform() < 0.5) {
        while (count-- > 0) reschedule(r);
      } else {
        later.reschedules = static_cast<std::uint8_t>(count);
      }
    }
    if (uniform() < s_.options.cancel_ratio) {
      if (later.reschedules == 0 && uniform() < 0.5) {
        cancel(r);
      } else {
        later.cancel = true;
      }
    }
    if (later.reschedules > 0 || later.cancel) push_later(later);
  }

  void push_later(const LaterAction& a) {
    if (ring_size_ == kRing) {
      perform(ring_[ring_head_]);
      ring_head_ = (ring_head_ + 1) % kRing;
      --ring_size_;
    }
    ring_[(ring_head_ + ring_size_) % kRing] = a;
    ++ring_size_;
  }

  void perform(const LaterAction& a) {
    TimerRecord& r = s_.records[a.index];
    for (int k = 0; k < a.reschedules; ++k) reschedule(r);
    if (a.cancel) cancel(r);
  }

  void reschedule(TimerRecord& r) {
    const std::int64_t now = ns(clock_.now());
    std::int64_t target;
    const bool earlier = uniform() < 0.5 && r.due_ns > now;
    if (earlier) {
      target = uniform_int(now, r.due_ns);  // the "earlier" move: a command to the wheel thread
      bump(c_.resched_earlier);
    } else {
      target = std::max(r.due_ns, now) + uniform_int(1, 8) * precision_ns_;  // the "touch": no wheel round trip
    }
    bump(c_.resched_calls);
    if (producer_.reschedule_at(unpack(r.id), TimePoint(Duration(target)))) {
      r.due_ns = target;  // only after it returned true (see the header comment)
      r.called_ns = now;
      r.flags |= kReschedWon;
      bump(c_.resched_won);
    } else {
      r.flags |= kReschedLost;
    }
  }

  void cancel(TimerRecord& r) {
    bump(c_.cancel_calls);
    if (producer_.cancel(unpack(r.id))) {
      r.flags |= kCancelWon;
      bump(c_.cancel_won);
    } else {
      r.flags |= kCancelLost;
    }
  }

  Shared& s_;
  unsigned p_;
  ProducerCounters& c_;
  std::mt19937_64 rng_;
  chime::Producer producer_;
  const chime::Clock& clock_;
  std::int64_t precision_ns_;
  std::vector<LaterAction> ring_;
  std::size_t ring_head_ = 0, ring_size_ = 0;
};

chime::Task periodic_task(PeriodicRecord& rec, const chime::Clock& clock) {
  return [record = &rec, clock = &clock](const Firing& f) {
    const std::int64_t now = ns(clock->now());
    if (record->cancel_returned.load(std::memory_order_acquire)) {
      record->after_cancel.fetch_add(1, std::memory_order_relaxed);
    }
    if (record->in_flight.exchange(true, std::memory_order_acq_rel)) {
      record->overlaps.fetch_add(1, std::memory_order_relaxed);
    }
    const std::int64_t due = ns(f.due);
    if (now < due) record->early.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t prev = record->last_due_ns.load(std::memory_order_relaxed);
    const std::int64_t base = prev == INT64_MIN ? record->first_due_ns : prev + record->period_ns;
    const std::int64_t expected = base + static_cast<std::int64_t>(f.missed) * record->period_ns;
    if (due != expected && record->off_rate.fetch_add(1, std::memory_order_relaxed) == 0) {
      record->off_rate_expected_ns.store(expected, std::memory_order_relaxed);
      record->off_rate_got_ns.store(due, std::memory_order_relaxed);
    }
    record->last_due_ns.store(due, std::memory_order_relaxed);
    record->last_now_ns.store(now, std::memory_order_relaxed);
    record->missed.fetch_add(f.missed, std::memory_order_relaxed);
    record->runs.fetch_add(1, std::memory_order_relaxed);
    // A little work, so that an overlapping run would find the flag set.
    const auto until = std::chrono::steady_clock::now() + 2us;
    while (std::chrono::steady_clock::now() < until) {
    }
    record->in_flight.store(false, std::memory_order_release);
  };
}

// ---- invariants ----

struct Invariant {
  Invariant(std::string k, std::string t) : key(std::move(k)), title(std::move(t)) {}
  std::string key;    // JSON name
  std::string title;  // text report
  std::uint64_t checked = 0;
  std::uint64_t violations = 0;
  std::string detail;
};

constexpr std::size_t kMaxExamples = 8;

struct Checks {
  std::vector<std::string> examples;  // the first few violations, spelled out
  std::uint64_t example_total = 0;
  void example(const std::string& s) {
    if (examples.size() < kMaxExamples) examples.push_back(s);
    ++example_total;
  }
};

std::string describe(std::size_t index, const TimerRecord& r) {
  char buf[320];
  const TimerId id = unpack(r.id);
  std::snprintf(buf, sizeof buf,
                "timer #%zu (id %u:%u, flags%s%s%s%s): final due %" PRId64 " ns, %u run(s), last run: due %" PRId64
                " ns at now %" PRId64 " ns, id %u:%u",
                index, id.slot(), id.generation(), (r.flags & kCancelWon) ? " cancel-won" : "",
                (r.flags & kCancelLost) ? " cancel-lost" : "", (r.flags & kReschedWon) ? " resched-won" : "",
                (r.flags & kReschedLost) ? " resched-lost" : "", r.due_ns, r.fires.load(), r.fired_due_ns.load(),
                r.fired_now_ns.load(), unpack(r.fired_id.load()).slot(), unpack(r.fired_id.load()).generation());
  return buf;
}

struct Percentiles {
  std::int64_t p50 = 0, p99 = 0, p999 = 0, max = 0;
  std::uint64_t count = 0;
};

Percentiles percentiles(std::vector<std::int64_t>& v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]; };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  return p;
}

// ---- progress ----

class Progress {
 public:
  Progress(FILE* out, bool tty) : out_(out), tty_(tty) {}

  void line(double elapsed, std::uint64_t scheduled, std::uint64_t cancels, std::uint64_t reschedules,
            const chime::Stats& s, std::uint64_t rss) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%6.1f s  scheduled %s  cancels %s  reschedules %s  fired %s  pending %s  queued %s  wake-ups %s  "
                  "rss %s",
                  elapsed, with_commas(scheduled).c_str(), with_commas(cancels).c_str(),
                  with_commas(reschedules).c_str(), with_commas(s.fired).c_str(), with_commas(s.pending).c_str(),
                  with_commas(s.queue_depth).c_str(), with_commas(s.wakeups).c_str(),
                  format_bytes(static_cast<double>(rss)).c_str());
    if (tty_) {
      std::fprintf(out_, "\r%s\033[K", buf);
      open_ = true;
    } else {
      std::fprintf(out_, "%s\n", buf);
    }
    std::fflush(out_);
  }
  void end() {
    if (open_) std::fputc('\n', out_);
    open_ = false;
    std::fflush(out_);
  }
  bool tty() const { return tty_; }

 private:
  FILE* out_;
  bool tty_;
  bool open_ = false;
};

// ---- the run, phase by phase ----
//
// run() is the table of phases; each phase is one function below, in order:
// announce, start the periodic timers, produce (sampling the runtime while the
// producers run), settle and flush, check what the flush promised, cancel the
// periodic timers, shut down, tally every record, judge each invariant,
// report, and write the JSON.

std::uint64_t producer_total(const Shared& shared, std::atomic<std::uint64_t> ProducerCounters::*field) {
  std::uint64_t sum = 0;
  for (const auto& c : shared.counters) sum += (c.*field).load(std::memory_order_relaxed);
  return sum;
}

void announce(FILE* out, const HarnessOptions& options, std::uint64_t seed, double rate) {
  std::fprintf(out,
               "chime-stress: %u producers, %s one-shot timers %s for at most %g s, cancel ratio %.2f, reschedule "
               "ratio %.2f, %u periodic, precision %s, %u workers\n",
               options.producers, with_commas(options.timers).c_str(),
               rate > 0 ? ("at " + with_commas(static_cast<std::uint64_t>(rate)) + "/s").c_str() : "unpaced",
               options.seconds, options.cancel_ratio, options.reschedule_ratio, options.periodic,
               format_duration(options.precision.count()).c_str(), options.workers);
  std::fprintf(out, "seed %" PRIu64 " (replay the random choices: --seed %" PRIu64 ")\n", seed, seed);
  std::fflush(out);
}

// Periodic timers, periods 1-16 x precision, first run one period from now. Returns how many.
std::uint64_t schedule_periodic(chime::Runtime& rt, std::vector<PeriodicRecord>& periodic, std::int64_t precision_ns) {
  const chime::Clock& clock = rt.clock();
  std::uint64_t scheduled = 0;
  for (std::size_t k = 0; k < periodic.size(); ++k) {
    PeriodicRecord& pr = periodic[k];
    pr.period_ns = precision_ns * static_cast<std::int64_t>(1 + k % 16);
    pr.first_due_ns = ns(clock.now()) + pr.period_ns;
    chime::PeriodicOptions po;
    po.first_due = TimePoint(Duration(pr.first_due_ns));
    pr.id = pack(rt.schedule_every(Duration(pr.period_ns), periodic_task(pr, clock), po));
    ++scheduled;
  }
  return scheduled;
}

// Reads the runtime's stats and the RSS; keeps the peak of pending timers and the RSS then.
class Sampler {
 public:
  Sampler(chime::Runtime& rt, const Shared& shared, Progress& progress, std::uint64_t baseline_rss)
      : rt_(rt), shared_(shared), progress_(progress), rss_at_peak_pending_(baseline_rss) {}

  chime::Stats sample(bool print) {
    const chime::Stats s = rt_.stats();
    const std::uint64_t rss = chime_stress::current_rss_bytes();
    if (s.pending > peak_pending_) {
      peak_pending_ = s.pending;
      rss_at_peak_pending_ = rss;
    }
    peak_queue_depth_ = std::max<std::uint64_t>(peak_queue_depth_, s.queue_depth);
    peak_shard_depth_.resize(s.shards.size(), 0);
    for (std::size_t k = 0; k < s.shards.size(); ++k) {
      peak_shard_depth_[k] = std::max<std::uint64_t>(peak_shard_depth_[k], s.shards[k].queue_depth);
    }
    if (print) {
      progress_.line(seconds_between(shared_.start, std::chrono::steady_clock::now()),
                     producer_total(shared_, &ProducerCounters::scheduled),
                     producer_total(shared_, &ProducerCounters::cancel_calls),
                     producer_total(shared_, &ProducerCounters::resched_calls), s, rss);
    }
    return s;
  }
  std::uint64_t peak_pending() const { return peak_pending_; }
  std::uint64_t rss_at_peak_pending() const { return rss_at_peak_pending_; }
  std::uint64_t peak_queue_depth() const { return peak_queue_depth_; }
  const std::vector<std::uint64_t>& peak_shard_depth() const { return peak_shard_depth_; }

 private:
  chime::Runtime& rt_;
  const Shared& shared_;
  Progress& progress_;
  std::uint64_t peak_pending_ = 0;
  std::uint64_t rss_at_peak_pending_;
  std::uint64_t peak_queue_depth_ = 0;           // sampled every 20 ms
  std::vector<std::uint64_t> peak_shard_depth_;  // the same, per shard
};

// One line per shard: its queue depth's peak (sampled), its wheel thread's
// busy fraction, its refusals and wake-ups.
void print_shards(FILE* out, const chime::Stats& st, const std::vector<std::uint64_t>& peak_depth, double total_s,
                  const char* indent) {
  for (std::size_t k = 0; k < st.shards.size(); ++k) {
    const chime::ShardStats& sh = st.shards[k];
    const double busy_s = std::chrono::duration<double>(sh.busy).count();
    std::fprintf(out,
                 "%sshard %zu: queue depth peak %s; wheel thread busy %.0f%% (%.2f s CPU); %s refused; %s wake-ups;"
                 " longest pass %s, most alarms re-filed in one %s\n",
                 indent, k, with_commas(k < peak_depth.size() ? peak_depth[k] : 0).c_str(),
                 total_s > 0 ? 100.0 * busy_s / total_s : 0.0, busy_s, with_commas(sh.refused_overload).c_str(),
                 with_commas(sh.wakeups).c_str(), format_duration(sh.longest_pass.count()).c_str(),
                 with_commas(sh.most_refiled_in_a_pass).c_str());
  }
}

struct Produced {
  SteadyTime at;       // when the last producer was joined
  chime::Stats stats;  // the runtime's stats then
};

// Starts the producer threads, samples the runtime until they are done, joins them. Returns
// false (after printing the error) if a producer failed.
bool produce(const HarnessOptions& options, Shared& shared, std::vector<std::unique_ptr<Producer>>& producers,
             Sampler& sampler, Progress& progress, Produced& produced) {
  std::vector<std::thread> threads;
  shared.producers_running.store(options.producers);
  for (unsigned p = 0; p < options.producers; ++p) {
    threads.emplace_back([&shared, &producers, p] {
      try {
        producers[p]->run();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(shared.error_mutex);
        if (shared.error.empty()) shared.error = "producer " + std::to_string(p) + ": " + e.what();
        shared.stop.store(true, std::memory_order_relaxed);
      }
      shared.producers_running.fetch_sub(1, std::memory_order_release);
    });
  }
  shared.start = std::chrono::steady_clock::now();
  shared.deadline = shared.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(options.seconds));
  shared.go.store(true, std::memory_order_release);

  const auto print_every = progress.tty() ? 100ms : 1000ms;
  auto next_print = shared.start + print_every;
  while (shared.producers_running.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(20ms);
    const bool print = std::chrono::steady_clock::now() >= next_print;
    if (print) next_print += print_every;
    sampler.sample(print);
  }
  for (auto& t : threads) t.join();
  produced.at = std::chrono::steady_clock::now();
  produced.stats = sampler.sample(true);
  progress.end();
  if (!shared.error.empty()) {
    std::fprintf(stderr, "chime-stress: error: %s\n", shared.error.c_str());
    return false;
  }
  return true;
}

struct Flushed {
  std::int64_t called_ns = 0;  // the runtime clock just before flush()
  SteadyTime at;               // when flush() returned
};

// Lets the near timers (due within 4 x precision, touched up to 8 x precision per reschedule)
// come due, then flushes.
Flushed settle_and_flush(chime::Runtime& rt, Sampler& sampler, std::int64_t precision_ns) {
  std::this_thread::sleep_for(std::min<Duration>(Duration(40 * precision_ns), 2s) + 10ms);
  Flushed f;
  f.called_ns = ns(rt.clock().now());
  rt.flush();
  f.at = std::chrono::steady_clock::now();
  sampler.sample(false);
  return f;
}

struct DueByFlush {
  std::uint64_t due = 0;      // one-shot timers due before the flush's interval
  std::uint64_t missing = 0;  // ... of which did not run
};

// Nothing lost: every one-shot timer due before the flush's wheel interval ran (or was cancelled).
DueByFlush check_one_shots_due_by_flush(const TimerRecord* records, std::uint64_t n, std::int64_t flush_called_ns,
                                        std::int64_t precision_ns, Checks& checks) {
  DueByFlush d;
  for (std::uint64_t i = 0; i < n; ++i) {
    const TimerRecord& r = records[i];
    if (!(r.flags & kScheduled) || (r.flags & kCancelWon)) continue;
    if (r.due_ns < flush_called_ns - precision_ns) {
      ++d.due;
      if (r.fires.load(std::memory_order_acquire) == 0) {
        ++d.missing;
        checks.example("nothing lost: due by the flush at " + std::to_string(flush_called_ns) +
                       " ns but not run: " + describe(i, r));
      }
    }
  }
  return d;
}

// Periodic run counts: no periodic timer's next run is behind the flush's wheel interval.
std::uint64_t check_periodic_behind_flush(const std::vector<PeriodicRecord>& periodic, std::int64_t flush_called_ns,
                                          std::int64_t precision_ns, Checks& checks) {
  std::uint64_t behind = 0;
  for (std::size_t k = 0; k < periodic.size(); ++k) {
    const PeriodicRecord& pr = periodic[k];
    const std::int64_t last = pr.last_due_ns.load(std::memory_order_relaxed);
    const std::int64_t next_due = last == INT64_MIN ? pr.first_due_ns : last + pr.period_ns;
    if (next_due <= flush_called_ns - precision_ns) {
      ++behind;
      checks.example("periodic run counts: periodic #" + std::to_string(k) + " (period " +
                     std::to_string(pr.period_ns) + " ns, " + std::to_string(pr.runs.load()) +
                     " runs) has its next run due at " + std::to_string(next_due) + " ns, behind the flush at " +
                     std::to_string(flush_called_ns) + " ns");
    }
  }
  return behind;
}

struct PeriodicCancels {
  std::uint64_t won = 0, lost = 0;
};

// Cancels the periodic timers; at most the run in progress may start after cancel returned.
PeriodicCancels cancel_periodic(chime::Runtime& rt, std::vector<PeriodicRecord>& periodic, Checks& checks) {
  PeriodicCancels c;
  for (std::size_t k = 0; k < periodic.size(); ++k) {
    PeriodicRecord& pr = periodic[k];
    if (rt.cancel(unpack(pr.id))) {
      pr.cancel_returned.store(true, std::memory_order_release);
      ++c.won;
    } else {
      ++c.lost;
      checks.example("periodic run counts: cancel of periodic #" + std::to_string(k) + " returned false");
    }
  }
  return c;
}

// What the one-shot records say, once every thread of the runtime is joined.
struct OneShotTally {
  std::uint64_t scheduled = 0, ran = 0, runs = 0, cancelled = 0, swept = 0;
  std::uint64_t fired_twice = 0, both = 0, neither = 0, lost_to_nothing = 0;
  std::uint64_t early = 0, wrong_due = 0, wrong_id = 0;
  std::vector<std::int64_t> lateness;  // callback's now - final due, one per run timer
  // Where the lateness accrues, per run timer (fired_at is the dispatching
  // pass's clock read): due now at its call (final due at or before the
  // call): fired_at - call, the wait for the wheel thread to apply it;
  // otherwise fired_at - due, the wait for the wheel to dispatch it; and
  // for every run, callback start - fired_at, the hand-off.
  std::vector<std::int64_t> wait_to_apply, wait_in_wheel, hand_off;
  std::uint64_t past_bound = 0;  // runs later than due + the bound (tally_one_shots' late_bound_ns)
};

// late_bound_ns: the lateness a run may have below saturation (the slack,
// or the precision for the interval rule, plus an OS allowance); runs past
// it are counted, not failed (a loaded machine delays threads).
// The OS's wake-up allowance on top of the slack (or the precision) for the
// lateness bound the report counts against.
constexpr std::int64_t kOsAllowanceNs = 2'000'000;
std::int64_t late_bound_ns(const HarnessOptions& o) {
  const std::int64_t slack = o.slack.count() > 0 ? std::min(o.slack.count(), o.precision.count()) : o.precision.count();
  return slack + kOsAllowanceNs;
}

OneShotTally tally_one_shots(const chime::Runtime& rt, const TimerRecord* records, std::uint64_t n,
                             std::uint64_t fired_hint, Checks& checks, std::int64_t late_bound_ns) {
  OneShotTally t;
  t.lateness.reserve(static_cast<std::size_t>(fired_hint));
  for (std::uint64_t i = 0; i < n; ++i) {
    const TimerRecord& r = records[i];
    if (!(r.flags & kScheduled)) continue;
    ++t.scheduled;
    const std::uint32_t fires = r.fires.load(std::memory_order_acquire);
    const bool won = (r.flags & kCancelWon) != 0;
    if (fires > 0) ++t.ran;
    t.runs += fires;
    if (won) ++t.cancelled;
    if (fires > 1) {
      ++t.fired_twice;
      checks.example("exactly once: ran " + std::to_string(fires) + " times: " + describe(i, r));
    }
    if (fires > 0 && won) {
      ++t.both;
      checks.example("exactly once: ran although cancel returned true: " + describe(i, r));
    }
    if (fires == 0 && !won) {
      if (rt.state(unpack(r.id)) == chime::TimerState::cancelled) {
        ++t.swept;
      } else {
        ++t.neither;
        checks.example("exactly once: neither ran, nor cancelled, nor swept by shutdown: " + describe(i, r));
      }
    }
    if (fires == 0 && (r.flags & (kCancelLost | kReschedLost)) && !won) {
      ++t.lost_to_nothing;
      checks.example("exactly once: a cancel/reschedule returned false but the timer never ran: " + describe(i, r));
    }
    if (fires > 0) {
      const std::int64_t fired_due = r.fired_due_ns.load(std::memory_order_relaxed);
      const std::int64_t fired_now = r.fired_now_ns.load(std::memory_order_relaxed);
      if (fired_now < fired_due || fired_now < r.due_ns) {
        ++t.early;
        checks.example("never early: the callback saw now < due: " + describe(i, r));
      }
      if (fired_due != r.due_ns) {
        ++t.wrong_due;
        checks.example("never early: ran with a due other than its final one: " + describe(i, r));
      }
      if (r.fired_id.load(std::memory_order_relaxed) != r.id) {
        ++t.wrong_id;
        checks.example("never early: ran with a Firing::id other than its own: " + describe(i, r));
      }
      t.lateness.push_back(fired_now - r.due_ns);
      if (fired_now - r.due_ns > late_bound_ns) ++t.past_bound;
      const std::int64_t fired_at = r.fired_at_ns.load(std::memory_order_relaxed);
      if (r.due_ns <= r.called_ns) {
        t.wait_to_apply.push_back(fired_at - r.called_ns);
      } else {
        t.wait_in_wheel.push_back(fired_at - r.due_ns);
      }
      t.hand_off.push_back(fired_now - fired_at);
    }
  }
  return t;
}

// What the periodic records say, once every thread of the runtime is joined.
struct PeriodicTally {
  std::uint64_t runs = 0, missed = 0, overlaps = 0, early = 0, off_rate = 0, after_cancel = 0;
};

PeriodicTally tally_periodic(const std::vector<PeriodicRecord>& periodic, Checks& checks) {
  PeriodicTally t;
  for (std::size_t k = 0; k < periodic.size(); ++k) {
    const PeriodicRecord& pr = periodic[k];
    t.runs += pr.runs.load();
    t.missed += pr.missed.load();
    t.overlaps += pr.overlaps.load();
    t.early += pr.early.load();
    t.off_rate += pr.off_rate.load();
    if (pr.overlaps.load() != 0) {
      checks.example("periodic no overlap: periodic #" + std::to_string(k) + " had " +
                     std::to_string(pr.overlaps.load()) + " overlapping runs");
    }
    if (pr.early.load() != 0) {
      checks.example("never early: periodic #" + std::to_string(k) + " ran early " + std::to_string(pr.early.load()) +
                     " times");
    }
    if (pr.off_rate.load() != 0) {
      checks.example("periodic run counts: periodic #" + std::to_string(k) + " left its fixed rate " +
                     std::to_string(pr.off_rate.load()) + " times; first: due " +
                     std::to_string(pr.off_rate_got_ns.load()) + " ns, expected " +
                     std::to_string(pr.off_rate_expected_ns.load()) + " ns");
    }
    if (pr.after_cancel.load() > 1) {
      ++t.after_cancel;
      checks.example("periodic run counts: periodic #" + std::to_string(k) + " started " +
                     std::to_string(pr.after_cancel.load()) + " runs after its cancel returned true (at most 1)");
    }
  }
  return t;
}

// Everything the invariants and the report read.
struct Outcome {
  const HarnessOptions* options = nullptr;
  const Shared* shared = nullptr;
  std::uint64_t periodic_scheduled = 0;
  DueByFlush due_by_flush;
  std::uint64_t periodic_behind = 0;
  PeriodicCancels periodic_cancels;
  std::size_t not_fired = 0;  // shutdown's return
  chime::Stats final_stats;
  OneShotTally one_shot;
  PeriodicTally periodic;
  std::uint64_t queue_bound = 0;  // max_queue_depth as the runtime applies it
};

// ---- the invariants, one function each (the list at the top of this file) ----

Invariant exactly_once(const Outcome& o) {
  const OneShotTally& t = o.one_shot;
  Invariant v{"exactly_once", "exactly once"};
  v.checked = t.scheduled;
  v.violations = t.fired_twice + t.both + t.neither + t.lost_to_nothing;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s one-shot timers: %s ran, %s cancelled, %s swept by shutdown; %s ran twice, %s ran and were "
                "cancelled, %s neither, %s lost a race to a run that never came",
                with_commas(t.scheduled).c_str(), with_commas(t.ran).c_str(), with_commas(t.cancelled).c_str(),
                with_commas(t.swept).c_str(), with_commas(t.fired_twice).c_str(), with_commas(t.both).c_str(),
                with_commas(t.neither).c_str(), with_commas(t.lost_to_nothing).c_str());
  v.detail = buf;
  return v;
}

Invariant never_early(const Outcome& o) {
  const OneShotTally& t = o.one_shot;
  const std::uint64_t periodic_runs = o.periodic.runs;
  Invariant v{"never_early", "never early"};
  v.checked = t.ran + periodic_runs;
  v.violations = t.early + t.wrong_due + t.wrong_id + o.periodic.early;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s runs (%s one-shot, %s periodic): %s early, %s with a due other than the final one, %s with "
                "another id",
                with_commas(t.ran + periodic_runs).c_str(), with_commas(t.ran).c_str(),
                with_commas(periodic_runs).c_str(), with_commas(t.early + o.periodic.early).c_str(),
                with_commas(t.wrong_due).c_str(), with_commas(t.wrong_id).c_str());
  v.detail = buf;
  return v;
}

Invariant nothing_lost(const Outcome& o, Checks& checks) {
  const OneShotTally& t = o.one_shot;
  Invariant v{"nothing_lost", "nothing lost"};
  v.checked = t.scheduled;
  const bool balance = t.scheduled == t.ran + t.cancelled + t.swept;
  const bool sweep_matches = t.swept == o.not_fired;
  v.violations = o.due_by_flush.missing + (balance ? 0 : 1) + (sweep_matches ? 0 : 1);
  if (!sweep_matches) {
    checks.example("nothing lost: shutdown returned " + std::to_string(o.not_fired) + " not fired, but " +
                   std::to_string(t.swept) + " one-shot timers were found swept");
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "scheduled %s %s ran %s + cancelled %s + shutdown's not-fired %s (%s swept per timer); %s of %s "
                "due by the flush not run",
                with_commas(t.scheduled).c_str(), balance && sweep_matches ? "==" : "!=", with_commas(t.ran).c_str(),
                with_commas(t.cancelled).c_str(), with_commas(o.not_fired).c_str(), with_commas(t.swept).c_str(),
                with_commas(o.due_by_flush.missing).c_str(), with_commas(o.due_by_flush.due).c_str());
  v.detail = buf;
  return v;
}

Invariant periodic_no_overlap(const Outcome& o) {
  Invariant v{"periodic_no_overlap", "periodic no overlap"};
  v.checked = o.periodic.runs;
  v.violations = o.periodic.overlaps;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%u timers, %s runs: %s overlapping", o.options->periodic,
                with_commas(o.periodic.runs).c_str(), with_commas(o.periodic.overlaps).c_str());
  v.detail = buf;
  return v;
}

Invariant periodic_run_counts(const Outcome& o) {
  const PeriodicTally& t = o.periodic;
  Invariant v{"periodic_run_counts", "periodic run counts"};
  v.checked = o.options->periodic;
  v.violations = t.off_rate + o.periodic_behind + o.periodic_cancels.lost + t.after_cancel;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%u timers, %s runs + %s coalesced (skip): %s off the fixed rate, %s behind at the flush, %s "
                "cancels lost, %s with > 1 run after cancel",
                o.options->periodic, with_commas(t.runs).c_str(), with_commas(t.missed).c_str(),
                with_commas(t.off_rate).c_str(), with_commas(o.periodic_behind).c_str(),
                with_commas(o.periodic_cancels.lost).c_str(), with_commas(t.after_cancel).c_str());
  v.detail = buf;
  return v;
}

Invariant stats_agree(const Outcome& o, Checks& checks) {
  const chime::Stats& s = o.final_stats;
  Invariant v{"stats_agree", "runtime stats agree"};
  const std::uint64_t cancel_won_total = o.one_shot.cancelled + o.periodic_cancels.won;
  struct Row {
    const char* name;
    std::uint64_t runtime, harness;
  } rows[] = {
      {"scheduled", s.scheduled, o.one_shot.scheduled + o.periodic_scheduled},
      {"fired", s.fired, o.one_shot.runs + o.periodic.runs},
      {"cancelled", s.cancelled, cancel_won_total + o.not_fired},
      {"rescheduled", s.rescheduled, producer_total(*o.shared, &ProducerCounters::resched_won)},
      {"pending", s.pending, 0},
      {"callback_errors", s.callback_errors, 0},
      {"refused_overload", s.refused_overload, producer_total(*o.shared, &ProducerCounters::refused)},
  };
  std::string mismatches;
  for (const Row& row : rows) {
    ++v.checked;
    if (row.runtime != row.harness) {
      ++v.violations;
      mismatches += std::string(mismatches.empty() ? "" : ", ") + row.name + " " + with_commas(row.runtime) +
                    " (harness: " + with_commas(row.harness) + ")";
      checks.example(std::string("runtime stats agree: stats().") + row.name + " = " + std::to_string(row.runtime) +
                     ", the harness counted " + std::to_string(row.harness));
    }
  }
  v.detail = mismatches.empty()
                 ? "scheduled, fired, cancelled, rescheduled, pending (0), callback_errors (0), refused_overload"
                 : "differ: " + mismatches;
  return v;
}

std::vector<Invariant> judge(const Outcome& o, Checks& checks) {
  std::vector<Invariant> inv;
  inv.push_back(exactly_once(o));
  inv.push_back(never_early(o));
  inv.push_back(nothing_lost(o, checks));
  inv.push_back(periodic_no_overlap(o));
  inv.push_back(periodic_run_counts(o));
  inv.push_back(stats_agree(o, checks));
  return inv;
}

// ---- the report ----

// The figures of the text report and the JSON.
struct Figures {
  double producing_s = 0, total_s = 0, settle_s = 0;
  std::uint64_t cancel_calls = 0, cancel_won = 0, resched_calls = 0, resched_won = 0, resched_earlier = 0;
  std::uint64_t near = 0, mid = 0, far = 0;
  std::uint64_t fired_producing = 0, fires_total = 0;
  Percentiles own;
  Percentiles wait_to_apply, wait_in_wheel, hand_off;  // the lateness split (OneShotTally)
  std::uint64_t peak_rss = 0, baseline_rss = 0, peak_pending = 0, rss_at_peak_pending = 0;
  double growth = 0, bytes_per_pending = 0;
  std::uint64_t peak_queue_depth = 0, refused = 0;
  double wheel_busy_s = 0;                      // the wheel threads' CPU time (the shards' busy, summed)
  std::vector<std::uint64_t> peak_shard_depth;  // per shard, sampled as peak_queue_depth
  std::uint64_t total_violations = 0;
  double per_s(std::uint64_t count) const { return producing_s > 0 ? static_cast<double>(count) / producing_s : 0.0; }
};

void print_report(FILE* out, std::uint64_t seed, const Outcome& o, const Figures& f, const std::vector<Invariant>& inv,
                  const Checks& checks) {
  const chime::LatenessStats& rl = o.final_stats.lateness;
  const std::uint64_t scheduled = o.one_shot.scheduled;
  const double mix_total = static_cast<double>(std::max<std::uint64_t>(f.near + f.mid + f.far, 1));
  std::fprintf(out, "\nreport: producing %.2f s, then settling + flush %.2f s; %.2f s in all\n", f.producing_s,
               f.settle_s, f.total_s);
  std::fprintf(out, "  operations        count      per second while producing\n");
  std::fprintf(out, "    schedule   %12s  %12s   due: %.0f%% near, %.0f%% level 1, %.0f%% far\n",
               with_commas(scheduled).c_str(), with_commas(static_cast<std::uint64_t>(f.per_s(scheduled))).c_str(),
               100.0 * static_cast<double>(f.near) / mix_total, 100.0 * static_cast<double>(f.mid) / mix_total,
               100.0 * static_cast<double>(f.far) / mix_total);
  std::fprintf(out, "    cancel     %12s  %12s   %s won, %s lost to a run\n", with_commas(f.cancel_calls).c_str(),
               with_commas(static_cast<std::uint64_t>(f.per_s(f.cancel_calls))).c_str(),
               with_commas(f.cancel_won).c_str(), with_commas(f.cancel_calls - f.cancel_won).c_str());
  std::fprintf(out, "    reschedule %12s  %12s   %s won, %s lost to a run or cancel; %s earlier, %s later\n",
               with_commas(f.resched_calls).c_str(),
               with_commas(static_cast<std::uint64_t>(f.per_s(f.resched_calls))).c_str(),
               with_commas(f.resched_won).c_str(), with_commas(f.resched_calls - f.resched_won).c_str(),
               with_commas(f.resched_earlier).c_str(), with_commas(f.resched_calls - f.resched_earlier).c_str());
  std::fprintf(out, "    fire       %12s  %12s   %s one-shot, %s periodic runs (%s while producing)\n",
               with_commas(f.fires_total).c_str(),
               with_commas(static_cast<std::uint64_t>(f.per_s(f.fired_producing))).c_str(),
               with_commas(o.one_shot.ran).c_str(), with_commas(o.periodic.runs).c_str(),
               with_commas(f.fired_producing).c_str());
  std::fprintf(out, "  fire lateness          p50         p99        p999         max\n");
  std::fprintf(out, "    runtime stats() %11s %11s %11s %11s   worker start - due, all runs (buckets: +12.5%%)\n",
               format_duration(rl.p50.count()).c_str(), format_duration(rl.p99.count()).c_str(),
               format_duration(rl.p999.count()).c_str(), format_duration(rl.max.count()).c_str());
  std::fprintf(out, "    harness         %11s %11s %11s %11s   callback's clock().now() - final due, %s one-shots\n",
               format_duration(f.own.p50).c_str(), format_duration(f.own.p99).c_str(),
               format_duration(f.own.p999).c_str(), format_duration(f.own.max).c_str(),
               with_commas(f.own.count).c_str());
  const auto split_row = [&](const char* name, const Percentiles& p, const char* what) {
    std::fprintf(out, "    %-15s %11s %11s %11s %11s   %s, %s runs\n", name, format_duration(p.p50).c_str(),
                 format_duration(p.p99).c_str(), format_duration(p.p999).c_str(), format_duration(p.max).c_str(), what,
                 with_commas(p.count).c_str());
  };
  split_row("wait to apply", f.wait_to_apply, "due now at its call: Firing::fired_at - the call");
  split_row("wait in wheel", f.wait_in_wheel, "due after its call: Firing::fired_at - due");
  split_row("hand-off", f.hand_off, "callback's now - Firing::fired_at");
  std::fprintf(out, "    past the bound  %s of %s runs later than due + %s (%s) + %s OS allowance\n",
               with_commas(o.one_shot.past_bound).c_str(), with_commas(f.own.count).c_str(),
               format_duration(late_bound_ns(*o.options) - kOsAllowanceNs).c_str(),
               o.options->slack.count() > 0 ? "slack" : "precision: the most a default slack is",
               format_duration(kOsAllowanceNs).c_str());
  std::fprintf(out, "  wheel wake-ups    %s (%s/s; %.3f per fire)\n", with_commas(o.final_stats.wakeups).c_str(),
               with_commas(static_cast<std::uint64_t>(static_cast<double>(o.final_stats.wakeups) / f.total_s)).c_str(),
               f.fires_total ? static_cast<double>(o.final_stats.wakeups) / static_cast<double>(f.fires_total) : 0.0);
  std::fprintf(out,
               "  overload          queue depth peak %s (sampled every 20 ms; bound %s); %s schedules refused; "
               "wheel threads busy %.0f%% (%.2f s CPU in %.2f s)\n",
               with_commas(f.peak_queue_depth).c_str(), with_commas(o.queue_bound).c_str(),
               with_commas(f.refused).c_str(), f.total_s > 0 ? 100.0 * f.wheel_busy_s / f.total_s : 0.0, f.wheel_busy_s,
               f.total_s);
  print_shards(out, o.final_stats, f.peak_shard_depth, f.total_s, "                    ");
  std::fprintf(out, "  memory            peak RSS %s; peak pending %s timers at RSS %s over the start",
               format_bytes(static_cast<double>(f.peak_rss)).c_str(), with_commas(f.peak_pending).c_str(),
               format_bytes(f.growth).c_str());
  if (f.peak_pending > 0)
    std::fprintf(out, " = %.0f bytes per pending timer\n", f.bytes_per_pending);
  else
    std::fprintf(out, "\n");
  std::fprintf(out, "invariants\n");
  for (const Invariant& v : inv) {
    std::fprintf(out, "  %-4s  %-20s %s\n", v.violations == 0 ? "ok" : "FAIL", v.title.c_str(), v.detail.c_str());
  }
  for (const std::string& e : checks.examples) std::fprintf(out, "  violation: %s\n", e.c_str());
  if (checks.example_total > checks.examples.size()) {
    std::fprintf(out, "  ... and %s more\n", with_commas(checks.example_total - checks.examples.size()).c_str());
  }
  if (f.total_violations == 0) {
    std::fprintf(out, "result: every invariant holds (seed %" PRIu64 ")\n", seed);
  } else {
    std::fprintf(out, "result: %s violation(s) (seed %" PRIu64 ", replay: --seed %" PRIu64 ")\n",
                 with_commas(f.total_violations).c_str(), seed, seed);
  }
  std::fflush(out);
}

// --json FILE (or - for stdout). Returns false if the file cannot be opened.
bool write_json(const HarnessOptions& options, bool json_stdout, std::uint64_t seed, double rate, const Outcome& o,
                const Figures& f, const std::vector<Invariant>& inv, const Checks& checks) {
  FILE* jf = json_stdout ? stdout : std::fopen(options.json->c_str(), "w");
  if (jf == nullptr) {
    std::fprintf(stderr, "chime-stress: cannot write --json %s\n", options.json->c_str());
    return false;
  }
  const chime::LatenessStats& rl = o.final_stats.lateness;
  const std::uint64_t scheduled = o.one_shot.scheduled;
  auto op = [&](const char* name, std::uint64_t count, double rate_s, bool last) {
    std::fprintf(jf, "    \"%s\": {\"count\": %" PRIu64 ", \"per_second\": %.1f}%s\n", name, count, rate_s,
                 last ? "" : ",");
  };
  std::fprintf(jf, "{\n  \"seed\": %" PRIu64 ",\n", seed);
  std::fprintf(jf,
               "  \"options\": {\"producers\": %u, \"timers\": %" PRIu64
               ", \"cancel_ratio\": %g, \"reschedule_ratio\": %g, \"periodic\": %u, \"seconds\": %g, "
               "\"precision_ns\": %" PRId64 ", \"rate\": %.1f, \"workers\": %u},\n",
               options.producers, options.timers, options.cancel_ratio, options.reschedule_ratio, options.periodic,
               options.seconds, static_cast<std::int64_t>(options.precision.count()), rate, options.workers);
  std::fprintf(jf, "  \"seconds\": {\"producing\": %.3f, \"settling\": %.3f, \"total\": %.3f},\n", f.producing_s,
               f.settle_s, f.total_s);
  std::fprintf(jf, "  \"operations\": {\n");
  op("schedule", scheduled, f.per_s(scheduled), false);
  op("cancel", f.cancel_calls, f.per_s(f.cancel_calls), false);
  op("reschedule", f.resched_calls, f.per_s(f.resched_calls), false);
  op("fire", f.fires_total, f.per_s(f.fired_producing), true);
  std::fprintf(jf, "  },\n");
  std::fprintf(jf,
               "  \"outcomes\": {\"cancel_won\": %" PRIu64 ", \"reschedule_won\": %" PRIu64
               ", \"reschedule_earlier\": %" PRIu64 ", \"one_shot_ran\": %" PRIu64 ", \"periodic_runs\": %" PRIu64
               ", \"periodic_missed\": %" PRIu64 ", \"shutdown_not_fired\": %zu},\n",
               f.cancel_won, f.resched_won, f.resched_earlier, o.one_shot.ran, o.periodic.runs, o.periodic.missed,
               o.not_fired);
  std::fprintf(jf,
               "  \"lateness_ns\": {\n    \"runtime\": {\"p50\": %" PRId64 ", \"p99\": %" PRId64 ", \"p999\": %" PRId64
               ", \"max\": %" PRId64 "},\n",
               static_cast<std::int64_t>(rl.p50.count()), static_cast<std::int64_t>(rl.p99.count()),
               static_cast<std::int64_t>(rl.p999.count()), static_cast<std::int64_t>(rl.max.count()));
  std::fprintf(jf,
               "    \"harness\": {\"p50\": %" PRId64 ", \"p99\": %" PRId64 ", \"p999\": %" PRId64 ", \"max\": %" PRId64
               ", \"count\": %" PRIu64 "}\n  },\n",
               f.own.p50, f.own.p99, f.own.p999, f.own.max, f.own.count);
  std::fprintf(jf, "  \"wakeups\": %" PRIu64 ",\n", o.final_stats.wakeups);
  std::fprintf(jf,
               "  \"overload\": {\"peak_queue_depth\": %" PRIu64 ", \"max_queue_depth\": %" PRIu64
               ", \"refused\": %" PRIu64 ", \"wheel_busy_s\": %.3f, \"wheel_busy_fraction\": %.4f},\n",
               f.peak_queue_depth, o.queue_bound, f.refused, f.wheel_busy_s,
               f.total_s > 0 ? f.wheel_busy_s / f.total_s : 0.0);
  std::fprintf(jf, "  \"shards\": [");
  for (std::size_t k = 0; k < o.final_stats.shards.size(); ++k) {
    const chime::ShardStats& sh = o.final_stats.shards[k];
    const double busy_s = std::chrono::duration<double>(sh.busy).count();
    std::fprintf(jf,
                 "%s{\"peak_queue_depth\": %" PRIu64 ", \"refused\": %" PRIu64
                 ", \"wheel_busy_s\": %.3f"
                 ", \"wheel_busy_fraction\": %.4f, \"wakeups\": %" PRIu64 "}",
                 k == 0 ? "" : ", ", k < f.peak_shard_depth.size() ? f.peak_shard_depth[k] : 0, sh.refused_overload,
                 busy_s, f.total_s > 0 ? busy_s / f.total_s : 0.0, sh.wakeups);
  }
  std::fprintf(jf, "],\n");
  std::fprintf(jf,
               "  \"memory\": {\"peak_rss_bytes\": %" PRIu64 ", \"baseline_rss_bytes\": %" PRIu64
               ", \"rss_at_peak_pending_bytes\": %" PRIu64 ", \"peak_pending\": %" PRIu64
               ", \"bytes_per_pending_timer\": %.1f},\n",
               f.peak_rss, f.baseline_rss, f.rss_at_peak_pending, f.peak_pending, f.bytes_per_pending);
  std::fprintf(jf, "  \"invariants\": {\n");
  for (std::size_t k = 0; k < inv.size(); ++k) {
    std::fprintf(
        jf, "    \"%s\": {\"ok\": %s, \"checked\": %" PRIu64 ", \"violations\": %" PRIu64 ", \"detail\": \"%s\"}%s\n",
        inv[k].key.c_str(), inv[k].violations == 0 ? "true" : "false", inv[k].checked, inv[k].violations,
        json_escape(inv[k].detail).c_str(), k + 1 == inv.size() ? "" : ",");
  }
  std::fprintf(jf, "  },\n  \"violation_examples\": [");
  for (std::size_t k = 0; k < checks.examples.size(); ++k) {
    std::fprintf(jf, "%s\"%s\"", k == 0 ? "" : ", ", json_escape(checks.examples[k]).c_str());
  }
  std::fprintf(jf, "],\n  \"violations\": %" PRIu64 ",\n  \"ok\": %s\n}\n", f.total_violations,
               f.total_violations == 0 ? "true" : "false");
  if (jf != stdout)
    std::fclose(jf);
  else
    std::fflush(jf);
  return true;
}

// ---- the burst mode (--burst N) ----
//
// Each producer posts N one-shot timers due within 0-4 x precision, unpaced,
// through its own Producer; a schedule refused with CapacityError is counted
// and the producer goes on with the next timer. A sampler reads stats() every
// millisecond for the peak queue depth. Then the harness waits for the dues,
// flushes and checks that every accepted timer ran exactly once and no
// refused one ran (one byte per timer, preallocated before the baseline), and
// that the runtime's counts agree. Exits 1 on any violation.
int run_burst(const HarnessOptions& options) {
  FILE* out = stdout;
  const std::uint64_t per = options.burst, total = per * options.producers;
  const std::int64_t precision_ns = options.precision.count();
  std::fprintf(out,
               "chime-stress --burst: %u producers x %s timers due within 0-4 x %s, unpaced, %u workers, "
               "max_queue_depth %s\n",
               options.producers, with_commas(per).c_str(), format_duration(precision_ns).c_str(), options.workers,
               options.max_queue_depth == UINT64_MAX ? "none" : with_commas(queue_bound(options)).c_str());
  std::fflush(out);
  // runs[i]: the timer's runs (its task adds 1); accepted[i]: 1 once its schedule returned.
  std::unique_ptr<std::atomic<std::uint8_t>[]> runs(new std::atomic<std::uint8_t>[total]());
  std::unique_ptr<std::uint8_t[]> accepted(new std::uint8_t[total]());
  chime::RuntimeOptions rt_options;
  rt_options.precision = options.precision;
  rt_options.slack = options.slack;
  if (!options.level_bits.empty())
    rt_options.level_bits = chime::LevelBits::create(std::span<const int>(options.level_bits));
  rt_options.workers = options.workers;
  rt_options.max_queue_depth = static_cast<std::size_t>(options.max_queue_depth);
  rt_options.shards = options.shards;
  chime::Runtime rt(rt_options);
  const std::uint64_t baseline_rss = chime_stress::current_rss_bytes();

  std::vector<std::uint64_t> refused(options.producers, 0);
  std::atomic<unsigned> running{options.producers};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (unsigned p = 0; p < options.producers; ++p) {
    threads.emplace_back([&, p] {
      chime::Producer producer = rt.producer();
      const chime::Clock& clock = rt.clock();
      std::uint64_t my_refused = 0;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (std::uint64_t i = p * per; i < (p + 1) * per; ++i) {
        const chime::TimePoint due = clock.now() + Duration(precision_ns * static_cast<std::int64_t>(i % 5));
        try {
          producer.schedule_at(due, [r = &runs[i]] { r->fetch_add(1, std::memory_order_relaxed); });
          accepted[i] = 1;
        } catch (const chime::CapacityError&) {
          ++my_refused;
        }
      }
      refused[p] = my_refused;
      running.fetch_sub(1, std::memory_order_release);
    });
  }
  const SteadyTime start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  std::uint64_t peak_depth = 0, peak_pending = 0;
  std::vector<std::uint64_t> peak_shard_depth;
  while (running.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(1ms);
    const chime::Stats s = rt.stats();
    peak_depth = std::max<std::uint64_t>(peak_depth, s.queue_depth);
    peak_pending = std::max<std::uint64_t>(peak_pending, s.pending);
    peak_shard_depth.resize(s.shards.size(), 0);
    for (std::size_t k = 0; k < s.shards.size(); ++k) {
      peak_shard_depth[k] = std::max<std::uint64_t>(peak_shard_depth[k], s.shards[k].queue_depth);
    }
  }
  for (auto& t : threads) t.join();
  const SteadyTime produced = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(Duration(6 * precision_ns));  // every due has passed
  rt.flush();
  const SteadyTime flushed = std::chrono::steady_clock::now();
  const chime::Stats st = rt.stats();
  rt.shutdown(chime::ShutdownMode::cancel_pending);

  std::uint64_t n_accepted = 0, n_refused = 0, lost = 0, twice = 0, refused_ran = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    const unsigned r = runs[i].load(std::memory_order_relaxed);
    if (accepted[i] != 0) {
      ++n_accepted;
      lost += r == 0;
      twice += r > 1;
    } else {
      ++n_refused;
      refused_ran += r != 0;
    }
  }
  std::uint64_t refused_counted = 0;
  for (std::uint64_t r : refused) refused_counted += r;
  const bool stats_agree = st.refused_overload == n_refused && refused_counted == n_refused &&
                           st.scheduled == n_accepted && st.fired == n_accepted && st.pending == 0;
  const double producing_s = seconds_between(start, produced), total_s = seconds_between(start, flushed);
  double busy_s = 0;
  for (const chime::ShardStats& sh : st.shards) busy_s += seconds_of(sh.busy);
  std::fprintf(out, "  posted     %s in %.2f s (%s/s); accepted %s, refused %s (%.1f%%)\n", with_commas(total).c_str(),
               producing_s, with_commas(static_cast<std::uint64_t>(static_cast<double>(total) / producing_s)).c_str(),
               with_commas(n_accepted).c_str(), with_commas(n_refused).c_str(),
               100.0 * static_cast<double>(n_refused) / static_cast<double>(std::max<std::uint64_t>(total, 1)));
  std::fprintf(out,
               "  queue      depth peak %s (sampled every 1 ms; bound %s); pending peak %s (queued, filed or\n"
               "             handed to a worker, not yet run)\n",
               with_commas(peak_depth).c_str(),
               options.max_queue_depth == UINT64_MAX ? "none" : with_commas(queue_bound(options)).c_str(),
               with_commas(peak_pending).c_str());
  std::fprintf(out, "  wheel      busy %.0f%% (%.2f s CPU in %.2f s to the flush); %s wake-ups\n",
               total_s > 0 ? 100.0 * busy_s / total_s : 0.0, busy_s, total_s, with_commas(st.wakeups).c_str());
  print_shards(out, st, peak_shard_depth, total_s, "             ");
  std::fprintf(out, "  memory     peak RSS %s (baseline %s, the per-timer bytes of the check included: 2 per timer)\n",
               format_bytes(static_cast<double>(chime_stress::peak_rss_bytes())).c_str(),
               format_bytes(static_cast<double>(baseline_rss)).c_str());
  std::fprintf(out, "  checks     accepted and never ran (lost) %s; ran twice %s; refused and ran %s; stats %s\n",
               with_commas(lost).c_str(), with_commas(twice).c_str(), with_commas(refused_ran).c_str(),
               stats_agree ? "agree" : "DISAGREE");
  if (!stats_agree) {
    std::fprintf(out,
                 "  stats: scheduled %" PRIu64 " fired %" PRIu64 " pending %" PRIu64 " refused_overload %" PRIu64
                 "; harness: accepted %" PRIu64 " refused %" PRIu64 " (producers counted %" PRIu64 ")\n",
                 st.scheduled, st.fired, st.pending, st.refused_overload, n_accepted, n_refused, refused_counted);
  }
  const bool ok = lost == 0 && twice == 0 && refused_ran == 0 && stats_agree;
  std::fprintf(out, "result: %s\n", ok ? "every accepted timer ran exactly once" : "VIOLATION");
  return ok ? 0 : 1;
}

int run(const HarnessOptions& options) {
  const bool json_stdout = options.json && *options.json == "-";
  FILE* out = json_stdout ? stderr : stdout;
  Progress progress(out, isatty(fileno(out)) != 0);

  const std::uint64_t seed =
      options.seed ? *options.seed : (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  // Default pace: N over S seconds, 5% faster so that N is reached just before the deadline.
  const double rate = options.rate ? *options.rate : 1.05 * static_cast<double>(options.timers) / options.seconds;
  const std::int64_t precision_ns = options.precision.count();
  announce(out, options, seed, rate);

  // The records first (value-initialized, so their pages are resident before the baseline).
  std::unique_ptr<TimerRecord[]> records(new TimerRecord[options.timers]);
  std::vector<PeriodicRecord> periodic(options.periodic);

  chime::RuntimeOptions rt_options;
  rt_options.precision = options.precision;
  rt_options.slack = options.slack;
  if (!options.level_bits.empty())
    rt_options.level_bits = chime::LevelBits::create(std::span<const int>(options.level_bits));
  rt_options.workers = options.workers;
  rt_options.max_queue_depth = static_cast<std::size_t>(options.max_queue_depth);
  rt_options.shards = options.shards;
  chime::Runtime rt(rt_options);

  Shared shared(options, seed, rate, rt, records.get());
  std::vector<std::unique_ptr<Producer>> producers;
  for (unsigned p = 0; p < options.producers; ++p) producers.push_back(std::make_unique<Producer>(shared, p));

  const std::uint64_t baseline_rss = chime_stress::current_rss_bytes();
  Outcome o;
  o.options = &options;
  o.shared = &shared;
  o.periodic_scheduled = schedule_periodic(rt, periodic, precision_ns);

  Sampler sampler(rt, shared, progress, baseline_rss);
  Produced produced;
  if (!produce(options, shared, producers, sampler, progress, produced)) return 1;

  // Settle, flush, and check what the flush promises.
  const Flushed flushed = settle_and_flush(rt, sampler, precision_ns);
  Checks checks;
  o.due_by_flush = check_one_shots_due_by_flush(records.get(), options.timers, flushed.called_ns, precision_ns, checks);
  o.periodic_behind = check_periodic_behind_flush(periodic, flushed.called_ns, precision_ns, checks);
  o.periodic_cancels = cancel_periodic(rt, periodic, checks);
  rt.flush();
  const chime::Stats before_shutdown = rt.stats();
  o.not_fired = rt.shutdown(chime::ShutdownMode::cancel_pending);
  const SteadyTime shut_down_at = std::chrono::steady_clock::now();
  o.final_stats = rt.stats();

  // Every thread of the runtime is joined: tally the records and judge.
  o.one_shot =
      tally_one_shots(rt, records.get(), options.timers, before_shutdown.fired, checks, late_bound_ns(options));
  o.periodic = tally_periodic(periodic, checks);
  const std::vector<Invariant> inv = judge(o, checks);

  Figures f;
  for (const Invariant& v : inv) f.total_violations += v.violations;
  f.producing_s = seconds_between(shared.start, produced.at);
  f.total_s = seconds_between(shared.start, shut_down_at);
  f.settle_s = seconds_between(produced.at, flushed.at);
  f.cancel_calls = producer_total(shared, &ProducerCounters::cancel_calls);
  f.cancel_won = producer_total(shared, &ProducerCounters::cancel_won);
  f.resched_calls = producer_total(shared, &ProducerCounters::resched_calls);
  f.resched_won = producer_total(shared, &ProducerCounters::resched_won);
  f.resched_earlier = producer_total(shared, &ProducerCounters::resched_earlier);
  f.near = producer_total(shared, &ProducerCounters::near);
  f.mid = producer_total(shared, &ProducerCounters::mid);
  f.far = producer_total(shared, &ProducerCounters::far);
  f.fired_producing = produced.stats.fired;
  f.fires_total = o.final_stats.fired;
  f.own = percentiles(o.one_shot.lateness);
  f.wait_to_apply = percentiles(o.one_shot.wait_to_apply);
  f.wait_in_wheel = percentiles(o.one_shot.wait_in_wheel);
  f.hand_off = percentiles(o.one_shot.hand_off);
  f.peak_rss = chime_stress::peak_rss_bytes();
  f.baseline_rss = baseline_rss;
  f.peak_pending = sampler.peak_pending();
  f.rss_at_peak_pending = sampler.rss_at_peak_pending();
  f.growth = f.rss_at_peak_pending > baseline_rss ? static_cast<double>(f.rss_at_peak_pending - baseline_rss) : 0;
  f.bytes_per_pending = f.peak_pending > 0 ? f.growth / static_cast<double>(f.peak_pending) : 0;
  f.peak_queue_depth = sampler.peak_queue_depth();
  f.refused = producer_total(shared, &ProducerCounters::refused);
  for (const chime::ShardStats& sh : o.final_stats.shards) f.wheel_busy_s += seconds_of(sh.busy);
  f.peak_shard_depth = sampler.peak_shard_depth();
  o.queue_bound = queue_bound(options);

  print_report(out, seed, o, f, inv, checks);
  if (options.json && !write_json(options, json_stdout, seed, rate, o, f, inv, checks)) return 1;
  return f.total_violations == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  HarnessOptions options;
  std::string message;
  switch (chime_stress::parse_options(argc, argv, options, message)) {
    case chime_stress::ParseResult::help:
      std::fputs(chime_stress::kUsage, stdout);
      return 0;
    case chime_stress::ParseResult::error:
      std::fprintf(stderr, "chime-stress: %s\n\n%s", message.c_str(), chime_stress::kUsage);
      return 2;
    case chime_stress::ParseResult::ok:
      break;
  }
  try {
    return options.burst != 0 ? run_burst(options) : run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chime-stress: error: %s\n", e.what());
    return 1;
  }
}
