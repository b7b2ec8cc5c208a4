// game_tick: a 60 Hz world tick and 100,000 entities, each on its own periodic timer.
//
// A chime::Runtime runs a fixed-rate world tick (schedule_every(16666667ns), Missed::skip)
// and one periodic timer per entity, with periods of 50 ms, 100 ms, 250 ms, 1 s or 5 s
// (the per-object intervals of the rescheduling timer wheel) and a random first due time
// within one period. Every world tick picks 8 entities from a seeded generator and cancels
// one in four of them and reschedules the others (reschedule_at moves the next run; the
// fixed rate continues from it). It only touches an entity whose next run is more than
// 2 ms away, so no run of it can be in flight; callbacks run on one worker (or on the
// wheel thread with --workers 0), so the world tick reads entity state without locks.
//
//   --manual  (default) a chime::ManualClock advanced in 1 ms steps, flush() after each:
//             deterministic. Each entity's expected run count is computed from its own
//             schedule history with the runtime's contract "a run due at d fires on the
//             first advance to a time >= interval_start(d) + precision": a segment that
//             starts at s with period p and ends at a cancel or reschedule at clock C (no
//             run pending at or before C) ran #{n : s + n p <= C} times; the last segment,
//             at the final clock E, ran #{n : interval_start(s + n p) + precision <= E}.
//             Exits 1 unless every entity and the world tick match exactly.
//   --live    the steady clock for --seconds (3 by default); each entity may be off by one
//             run (runs + missed counted), the figures are reported; exits 1 beyond that.
//
// Reported: world tick jitter (callback clock time minus Firing::due: p50, p99, max),
// missed ticks (sum of Firing::missed), runs checked, cancels and reschedules.
#include <chime/clock.hpp>
#include <chime/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;

constexpr Duration kTickPeriod{16666667};
constexpr Duration kPeriods[] = {50ms, 100ms, 250ms, 1s, 5s};
constexpr Duration kPrecision = 1ms;
constexpr Duration kMargin = 2ms;   // only touch an entity whose next run is further away
constexpr int kTouchesPerTick = 8;  // entities the world tick looks at, each tick

struct Entity {
  chime::TimerId id;
  Duration period{};
  TimePoint segment_start{};  // first due of the current schedule segment
  TimePoint next_due{};       // tracked from the callbacks
  std::uint64_t runs = 0;
  std::uint64_t missed = 0;
  std::uint64_t expected_done = 0;  // expected runs of finished segments
  bool active = true;
};

struct Game {
  chime::Runtime* rt = nullptr;
  const chime::Clock* clock = nullptr;
  std::vector<Entity> entities;
  std::mt19937_64 rng;
  std::vector<std::int64_t> jitter_ns;
  std::uint64_t ticks = 0;
  std::uint64_t tick_missed = 0;
  std::uint64_t cancels = 0;
  std::uint64_t reschedules = 0;
  std::uint64_t lost_races = 0;         // cancel/reschedule that returned false: must stay 0
  TimePoint cutoff = TimePoint::max();  // live: runs due after it are not counted
};

// Counts a run (and the runs Missed::skip coalesced into it: Firing::due is the latest of
// them) that were due at or before the cutoff.
void count_run(Entity& e, const Game& g, const chime::Firing& f) {
  e.next_due = f.due + e.period;
  if (f.due <= g.cutoff) {
    ++e.runs;
    e.missed += f.missed;
    return;
  }
  const TimePoint first = f.due - e.period * static_cast<std::int64_t>(f.missed);
  if (first <= g.cutoff) e.missed += static_cast<std::uint64_t>((g.cutoff - first) / e.period) + 1;
}

// #{n >= 0 : s + n p <= c}
std::uint64_t count_le(TimePoint s, Duration p, TimePoint c) {
  if (s > c) return 0;
  return static_cast<std::uint64_t>((c - s) / p) + 1;
}

// #{n >= 0 : s + n p < l}
std::uint64_t count_lt(TimePoint s, Duration p, TimePoint l) {
  return count_le(s, p, l - Duration(1));
}

// Manual run: a due d fires by the final advance to `end` iff interval_start(d) + precision
// <= end, with interval_start(d) = t0 + floor((d - t0) / precision) * precision; that is
// iff d < t0 + (floor((end - precision - t0) / precision) + 1) * precision.
TimePoint manual_fire_limit(TimePoint t0, TimePoint end) {
  return t0 + ((end - kPrecision - t0) / kPrecision + 1) * kPrecision;
}

void world_tick(Game& g, const chime::Firing& f) {
  const TimePoint now = g.clock->now();
  if (f.due > g.cutoff) {  // live, after the end: count the coalesced runs due by the cutoff
    const TimePoint first = f.due - kTickPeriod * static_cast<std::int64_t>(f.missed);
    if (first <= g.cutoff)
      g.tick_missed += static_cast<std::uint64_t>((g.cutoff - first) / kTickPeriod) + 1;
    return;
  }
  g.jitter_ns.push_back((now - f.due).count());
  g.tick_missed += f.missed;
  ++g.ticks;
  for (int i = 0; i < kTouchesPerTick; ++i) {
    Entity& e = g.entities[g.rng() % g.entities.size()];
    const bool cancel = g.rng() % 4 == 0;
    const Duration offset =
        kMargin + Duration(static_cast<std::int64_t>(g.rng() % (2 * e.period.count())));
    if (!e.active || e.next_due <= now + kMargin) continue;
    // Every run due at or before `now` has fired, none after: the segment ran count_le times.
    const std::uint64_t done = count_le(e.segment_start, e.period, now);
    if (cancel) {
      if (!g.rt->cancel(e.id)) {
        ++g.lost_races;
        continue;
      }
      e.active = false;
      ++g.cancels;
    } else {
      const TimePoint to = now + offset;
      if (!g.rt->reschedule_at(e.id, to)) {
        ++g.lost_races;
        continue;
      }
      e.segment_start = to;
      e.next_due = to;
      ++g.reschedules;
    }
    e.expected_done += done;
  }
}

struct Args {
  bool live = false;
  int seconds = -1;
  std::size_t entities = 100000;
  std::uint64_t seed = 1;
  unsigned workers = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "game_tick: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--manual") {
      a.live = false;
    } else if (s == "--live") {
      a.live = true;
    } else if (s == "--seconds") {
      a.seconds = std::atoi(value());
    } else if (s == "--entities") {
      a.entities = std::strtoull(value(), nullptr, 10);
    } else if (s == "--seed") {
      a.seed = std::strtoull(value(), nullptr, 10);
    } else if (s == "--workers") {
      a.workers = static_cast<unsigned>(std::atoi(value()));
    } else {
      std::fprintf(stderr,
                   "usage: game_tick [--manual | --live] [--seconds S] [--entities N] [--seed N] "
                   "[--workers 0|1]\n");
      std::exit(2);
    }
  }
  if (a.seconds < 0) a.seconds = a.live ? 3 : 10;
  if (a.workers > 1 || a.entities == 0 || a.seconds <= 0) {
    std::fprintf(stderr, "game_tick: --workers must be 0 or 1, --entities and --seconds > 0\n");
    std::exit(2);
  }
  return a;
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chime::ManualClock manual;
  chime::SteadyClock steady;
  chime::Clock* clock = args.live ? static_cast<chime::Clock*>(&steady) : &manual;

  Game g;
  g.clock = clock;
  g.rng.seed(args.seed);
  g.entities.resize(args.entities);
  g.jitter_ns.reserve(static_cast<std::size_t>(args.seconds) * 70);

  chime::Runtime rt(chime::RuntimeOptions{
      .precision = kPrecision, .workers = args.workers, .clock = clock, .on_error = {}});
  g.rt = &rt;
  const TimePoint t0 = clock->now();  // the wheel started at (or just before) this time
  if (args.live) g.cutoff = t0 + std::chrono::seconds(args.seconds);

  std::mt19937_64 setup(args.seed ^ 0x9e3779b97f4a7c15ULL);
  for (Entity& e : g.entities) {
    e.period = kPeriods[setup() % std::size(kPeriods)];
    e.segment_start = t0 + 1ms + Duration(static_cast<std::int64_t>(setup() % e.period.count()));
    e.next_due = e.segment_start;
    e.id = rt.schedule_every(e.period, [&e, &g](const chime::Firing& f) { count_run(e, g, f); },
                             {.first_due = e.segment_start, .on_missed = chime::Missed::skip});
  }
  const TimePoint tick_first = t0 + kTickPeriod;
  rt.schedule_every(kTickPeriod, [&g](const chime::Firing& f) { world_tick(g, f); },
                    {.first_due = tick_first, .on_missed = chime::Missed::skip});

  const auto wall_start = std::chrono::steady_clock::now();
  TimePoint end;
  if (args.live) {
    end = t0 + std::chrono::seconds(args.seconds);
    std::this_thread::sleep_until(end + 2 * kPrecision);  // every run due by `end` is due to fire
    const auto f0 = std::chrono::steady_clock::now();
    rt.flush();
    const auto f1 = std::chrono::steady_clock::now();
    rt.shutdown();
    std::printf("live: flush took %.3f s, shutdown %.3f s\n",
                std::chrono::duration<double>(f1 - f0).count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - f1)
                    .count());  // joins the threads: every count below is final and visible
  } else {
    const std::int64_t steps = std::chrono::seconds(args.seconds) / 1ms;
    for (std::int64_t i = 0; i < steps; ++i) {
      manual.advance(1ms);
      rt.flush();
    }
    end = clock->now();
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const chime::Stats stats = rt.stats();

  // Expected counts, from each entity's own schedule history.
  const TimePoint limit = manual_fire_limit(t0, end);
  std::uint64_t checked = 0, runs = 0, entity_missed = 0, wrong = 0, off_by_one = 0;
  for (std::size_t i = 0; i < g.entities.size(); ++i) {
    const Entity& e = g.entities[i];
    std::uint64_t expected = e.expected_done;
    if (e.active)
      expected += args.live ? count_le(e.segment_start, e.period, end)
                            : count_lt(e.segment_start, e.period, limit);
    const std::uint64_t got = e.runs + (args.live ? e.missed : 0);
    runs += e.runs;
    entity_missed += e.missed;
    ++checked;
    const std::uint64_t diff = got > expected ? got - expected : expected - got;
    if (diff == 0) continue;
    if (args.live && diff == 1) {
      ++off_by_one;
      continue;
    }
    if (++wrong <= 5) {
      std::printf("entity %zu (period %" PRId64 " ms, %s): ran %" PRIu64 " (+%" PRIu64
                  " missed), expected %" PRIu64 "\n",
                  i, static_cast<std::int64_t>(e.period / 1ms), e.active ? "active" : "cancelled",
                  e.runs, e.missed, expected);
    }
  }
  const std::uint64_t tick_expected =
      args.live ? count_le(tick_first, kTickPeriod, end) : count_lt(tick_first, kTickPeriod, limit);
  const std::uint64_t tick_got = g.ticks + (args.live ? g.tick_missed : 0);
  const std::uint64_t tick_diff =
      tick_got > tick_expected ? tick_got - tick_expected : tick_expected - tick_got;
  const bool tick_ok = tick_diff == 0 || (args.live && tick_diff == 1);

  std::vector<std::int64_t> j = g.jitter_ns;
  std::sort(j.begin(), j.end());
  auto pct = [&](double q) {
    return j.empty() ? 0 : j[static_cast<std::size_t>(q * static_cast<double>(j.size() - 1))];
  };

  std::printf(
      "game_tick %s: %zu entities + 60 Hz world tick, %d s simulated (%.2f s wall), workers %u, "
      "seed %" PRIu64 "\n",
      args.live ? "live (steady clock)" : "manual (ManualClock, 1 ms steps)", g.entities.size(),
      args.seconds, wall_s, args.workers, args.seed);
  std::printf("world tick: %" PRIu64 " runs (expected %" PRIu64 "), missed %" PRIu64
              ", jitter p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              g.ticks, tick_expected, g.tick_missed, ms(pct(0.50)), ms(pct(0.99)),
              ms(j.empty() ? 0 : j.back()));
  std::printf("entities: %" PRIu64 " checked, %" PRIu64 " runs, %" PRIu64 " missed, %" PRIu64
              " cancelled, %" PRIu64 " rescheduled, %" PRIu64 " lost cancel/reschedule, %" PRIu64
              " off by one, %" PRIu64 " wrong\n",
              checked, runs, entity_missed, g.cancels, g.reschedules, g.lost_races, off_by_one,
              wrong);
  std::printf("runtime: fired %" PRIu64 ", cancelled %" PRIu64 ", rescheduled %" PRIu64
              ", wakeups %" PRIu64 ", lateness p50 %.3f ms p99 %.3f ms max %.3f ms\n",
              stats.fired, stats.cancelled, stats.rescheduled, stats.wakeups,
              ms(stats.lateness.p50.count()), ms(stats.lateness.p99.count()),
              ms(stats.lateness.max.count()));

  const bool ok = wrong == 0 && tick_ok && g.lost_races == 0;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
