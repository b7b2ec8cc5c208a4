// game_tick: a 60 Hz world tick and 100,000 entities, each thinking on its own chime::Timer.
//
// A chime::Runtime runs a fixed-rate world tick (schedule_every(16666667ns), Missed::skip).
// Every entity holds a chime::Timer (chime/timer.hpp), its "think" timer. Its callback runs
// the entity's state machine (sleeping, idle, patrolling, alert, fighting) and re-arms its own
// Timer from inside the callback, arm_at(this think's due + delay), with a delay set by the new
// state: 5 s, 1 s, 250 ms, 100 ms or 50 ms, each -25 % to +25 % from the entity's own seeded
// generator. An arm made inside the callback takes effect when the run returns, so an entity's
// thinks never overlap, and re-arming from the due (not from the clock) keeps a late think from
// pushing every later one back.
//
// Every world tick picks 8 entities from a seeded generator. One in four is despawned and a
// fresh entity (a new Timer) spawned in its place; the others are stunned: arm_at(now + offset)
// from the tick replaces the pending think. Despawning frees the entity; its Timer is the
// Entity's last member, so it is destroyed first, and a Timer's destructor is
// disarm_and_wait(): when it returns, no think of that entity is pending or running, and only
// then does the rest of the entity's memory go (what the callback uses is alive until the wait
// is over). Here callbacks run on one worker (or on the wheel thread with --workers 0), so the
// wait returns at once and the world tick reads entity state without locks; with more workers
// the same destructor is what makes despawning safe. The tick only touches an entity whose next
// think is more than 2 ms away, so no run of it is in flight.
//
// Checked for every think: it ran for the due its entity last armed (none lost, doubled or
// stale) and never early; at the end, every think due by the end ran.
//   --manual  (default) a chime::ManualClock advanced in 1 ms steps, flush() after each:
//             deterministic. A think due at d must run on the advance to exactly
//             interval_start(d) + precision (the runtime's contract); at the end every live
//             entity's next due is one the final advance could not fire yet; the world tick
//             ran exactly as often as its fixed rate says, and stats().fired counts exactly
//             the thinks and ticks seen.
//   --live    the steady clock for --seconds (3 by default): a think must not start before its
//             due; entities stop re-arming past the end, and the program flushes until every
//             think due by the end has run (10 s at most). World tick: +-1 run.
// Exits 1 on any violation.
//
// Tick budget: RuntimeOptions::slow_run is --tick-budget-us (default one frame, 16,667 us): a
// callback that runs longer counts in Stats::slow_runs, and on_slow_run counts the world
// tick's own overruns. Reported with Stats::run_time (p50, p99, max), world tick jitter
// (callback clock time minus Firing::due), missed ticks (sum of Firing::missed), thinks per
// state, despawns, spawns and stuns.
#include <chime/clock.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
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
constexpr Duration kPrecision = 1ms;
constexpr Duration kMargin = 2ms;   // only touch an entity whose next think is further away
constexpr int kTouchesPerTick = 8;  // entities the world tick looks at, each tick

// An entity's state, calmest first, and how long it waits before its next think.
enum class Mood : std::uint8_t { sleeping, idle, patrolling, alert, fighting };
constexpr std::size_t kMoods = 5;
constexpr std::array<Duration, kMoods> kThinkDelay = {5s, 1s, 250ms, 100ms, 50ms};
constexpr std::array<const char*, kMoods> kMoodName = {"sleeping", "idle", "patrolling", "alert", "fighting"};

// splitmix64: each entity's own generator is one word.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Game;
struct Entity;
void on_think(Game& g, Entity& e, const chime::Firing& f);

struct Entity {
  Entity(chime::Runtime& rt, Game& g, std::uint64_t seed)
      : rng(seed), think(rt, [this, &g](const chime::Firing& f) { on_think(g, *this, f); }) {
    mood = static_cast<Mood>(next_random(rng) % kMoods);
  }
  // The Timer's task points at this entity: it must not move.
  Entity(const Entity&) = delete;
  Entity& operator=(const Entity&) = delete;

  std::uint64_t rng;
  Mood mood = Mood::idle;
  bool open = false;                      // live: armed for a due at or before the cutoff
  TimePoint next_due = TimePoint::max();  // the due its Timer is armed for (what the checks expect)
  std::uint64_t runs = 0;
  // Last member, so destroyed first: ~Timer() is disarm_and_wait(), and the members above,
  // which the callback uses, are still alive while it waits for a think in progress.
  chime::Timer think;
};

struct Game {
  chime::Runtime* rt = nullptr;
  const chime::Clock* clock = nullptr;
  bool live = false;
  TimePoint t0{};
  std::vector<std::unique_ptr<Entity>> entities;
  std::mt19937_64 rng;
  std::uint64_t next_seed = 0;  // the seed of the next entity spawned
  std::vector<std::int64_t> jitter_ns;
  std::uint64_t ticks = 0;
  std::uint64_t tick_missed = 0;
  std::uint64_t despawns = 0;
  std::uint64_t stuns = 0;
  std::uint64_t despawned_runs = 0;  // thinks of entities despawned since
  std::array<std::uint64_t, kMoods> runs_by_mood{};
  std::uint64_t wrong_due = 0;          // a think for a due its entity was not armed for
  std::uint64_t wrong_time = 0;         // manual: not on the exact advance; live: early
  TimePoint cutoff = TimePoint::max();  // live: the end; no think is armed past it
  std::atomic<std::int64_t> open{0};    // live: entities armed for a due at or before the cutoff
};

// The advance that fires a due d (manual run, 1 ms steps from t0): interval_start(d) + precision.
TimePoint fire_time(TimePoint t0, TimePoint d) { return t0 + ((d - t0) / kPrecision) * kPrecision + kPrecision; }

Duration think_delay(Entity& e) {
  const Duration base = kThinkDelay[static_cast<std::size_t>(e.mood)];
  return base * 3 / 4 + Duration(static_cast<std::int64_t>(next_random(e.rng) % (base.count() / 2 + 1)));
}

// Arms e's next think for `due` (live: only up to the cutoff) and keeps the checks' model.
// From inside e's own callback the arm takes effect when that run returns.
void arm_think(Game& g, Entity& e, TimePoint due) {
  e.next_due = due;
  if (!g.live) {
    e.think.arm_at(due);
    return;
  }
  const bool open = due <= g.cutoff;
  if (open != e.open) g.open.fetch_add(open ? 1 : -1, std::memory_order_relaxed);
  e.open = open;
  if (open) {
    e.think.arm_at(due);
  } else {
    e.think.disarm();  // the run is over: this entity thinks no more
  }
}

// An entity's think: check it, step its state machine, re-arm its own Timer.
void on_think(Game& g, Entity& e, const chime::Firing& f) {
  const TimePoint now = g.clock->now();
  if (f.due != e.next_due) ++g.wrong_due;
  if (g.live ? now < f.due : now != fire_time(g.t0, f.due)) ++g.wrong_time;
  ++e.runs;
  ++g.runs_by_mood[static_cast<std::size_t>(e.mood)];
  const std::uint64_t r = next_random(e.rng) % 8;  // 1 in 8 calms down, 1 in 8 gets agitated
  if (r == 0 && e.mood != Mood::sleeping) e.mood = static_cast<Mood>(static_cast<int>(e.mood) - 1);
  if (r == 1 && e.mood != Mood::fighting) e.mood = static_cast<Mood>(static_cast<int>(e.mood) + 1);
  arm_think(g, e, f.due + think_delay(e));
}

// A new entity in `slot`, first thinking within one think delay of `from`.
void spawn(Game& g, std::unique_ptr<Entity>& slot, TimePoint from) {
  slot = std::make_unique<Entity>(*g.rt, g, g.next_seed++);
  const Duration first = kThinkDelay[static_cast<std::size_t>(slot->mood)];
  arm_think(g, *slot, from + Duration(static_cast<std::int64_t>(next_random(slot->rng) % first.count())));
}

void despawn(Game& g, std::unique_ptr<Entity>& slot) {
  if (slot->open) g.open.fetch_sub(1, std::memory_order_relaxed);
  g.despawned_runs += slot->runs;
  ++g.despawns;
  // ~Entity: ~Timer first (disarm_and_wait: no think pending or running once it returns),
  // then the rest of the entity.
  slot.reset();
}

// Counts a world tick (and the ticks Missed::skip coalesced into it: Firing::due is the latest
// of them) due at or before the cutoff; then despawns, respawns and stuns entities.
void world_tick(Game& g, const chime::Firing& f) {
  const TimePoint now = g.clock->now();
  if (f.due > g.cutoff) {  // live, after the end: count the coalesced runs due by the cutoff
    const TimePoint first = f.due - kTickPeriod * static_cast<std::int64_t>(f.missed);
    if (first <= g.cutoff) g.tick_missed += static_cast<std::uint64_t>((g.cutoff - first) / kTickPeriod) + 1;
    return;
  }
  g.jitter_ns.push_back((now - f.due).count());
  g.tick_missed += f.missed;
  ++g.ticks;
  for (int i = 0; i < kTouchesPerTick; ++i) {
    std::unique_ptr<Entity>& slot = g.entities[g.rng() % g.entities.size()];
    const bool respawn = g.rng() % 4 == 0;
    const std::uint64_t r = g.rng();
    if (slot->next_due <= now + kMargin) continue;  // its think may be in flight: leave it
    if (respawn) {
      despawn(g, slot);
      spawn(g, slot, now + kMargin);
    } else {
      const Duration base = kThinkDelay[static_cast<std::size_t>(slot->mood)];
      arm_think(g, *slot, now + kMargin + Duration(static_cast<std::int64_t>(r % (2 * base.count()))));
      ++g.stuns;
    }
  }
}

// #{n >= 0 : s + n p <= c}
std::uint64_t count_le(TimePoint s, Duration p, TimePoint c) {
  if (s > c) return 0;
  return static_cast<std::uint64_t>((c - s) / p) + 1;
}

// #{n >= 0 : s + n p < l}
std::uint64_t count_lt(TimePoint s, Duration p, TimePoint l) { return count_le(s, p, l - Duration(1)); }

// Manual run: a due d fires by the final advance to `end` iff interval_start(d) + precision
// <= end, with interval_start(d) = t0 + floor((d - t0) / precision) * precision; that is
// iff d < t0 + (floor((end - precision - t0) / precision) + 1) * precision.
TimePoint manual_fire_limit(TimePoint t0, TimePoint end) {
  return t0 + ((end - kPrecision - t0) / kPrecision + 1) * kPrecision;
}

struct Args {
  bool live = false;
  int seconds = -1;
  std::size_t entities = 100000;
  std::uint64_t seed = 1;
  unsigned workers = 1;
  std::int64_t tick_budget_us = 16667;
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
    } else if (s == "--tick-budget-us") {
      a.tick_budget_us = std::strtoll(value(), nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: game_tick [--manual | --live] [--seconds S] [--entities N] [--seed N] "
                   "[--workers 0|1] [--tick-budget-us U]\n");
      std::exit(2);
    }
  }
  if (a.seconds < 0) a.seconds = a.live ? 3 : 10;
  if (a.workers > 1 || a.entities == 0 || a.seconds <= 0 || a.tick_budget_us <= 0) {
    std::fprintf(stderr, "game_tick: --workers must be 0 or 1, --entities, --seconds and --tick-budget-us > 0\n");
    std::exit(2);
  }
  return a;
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::uint64_t key_of(chime::TimerId id) { return (std::uint64_t{id.slot()} << 32) | id.generation(); }

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chime::ManualClock manual;
  chime::SteadyClock steady;
  chime::Clock* clock = args.live ? static_cast<chime::Clock*>(&steady) : &manual;

  // on_slow_run runs on the thread that ran the slow callback, after it returned.
  std::atomic<std::uint64_t> world_key{~std::uint64_t{0}};
  std::atomic<std::uint64_t> tick_overruns{0};
  const Duration tick_budget = std::chrono::microseconds(args.tick_budget_us);
  chime::Runtime rt(chime::RuntimeOptions{
      .precision = kPrecision,
      .workers = args.workers,
      .clock = clock,
      .on_error = {},
      .slow_run = tick_budget,
      .on_slow_run =
          [&](chime::TimerId id, Duration) {
            if (key_of(id) == world_key.load(std::memory_order_relaxed))
              tick_overruns.fetch_add(1, std::memory_order_relaxed);
          },
  });

  // Declared after the runtime, so destroyed before it: every Timer must go before its Runtime.
  Game g;
  g.rt = &rt;
  g.clock = clock;
  g.live = args.live;
  g.rng.seed(args.seed);
  g.next_seed = args.seed * 0x9e3779b97f4a7c15ULL;
  g.jitter_ns.reserve(static_cast<std::size_t>(args.seconds) * 70);
  const TimePoint t0 = clock->now();  // the wheel started at (or just before) this time
  g.t0 = t0;
  if (args.live) g.cutoff = t0 + std::chrono::seconds(args.seconds);

  g.entities.resize(args.entities);
  for (std::unique_ptr<Entity>& slot : g.entities) spawn(g, slot, t0 + 1ms);
  const TimePoint tick_first = t0 + kTickPeriod;
  const chime::TimerId world = rt.schedule_every(kTickPeriod, [&g](const chime::Firing& f) { world_tick(g, f); },
                                                 {.first_due = tick_first, .on_missed = chime::Missed::skip});
  world_key.store(key_of(world), std::memory_order_relaxed);

  const auto wall_start = std::chrono::steady_clock::now();
  TimePoint end;
  bool drained = true;  // live: every think due by the end ran
  if (args.live) {
    end = g.cutoff;
    std::this_thread::sleep_until(end + 2 * kPrecision);  // every think due by `end` is due to fire
    const auto f0 = std::chrono::steady_clock::now();
    // A late think re-arms for a due already past, which fires at once: flush until the chains
    // of thinks due by the end have all run.
    rt.flush();
    while (g.open.load(std::memory_order_relaxed) != 0 && std::chrono::steady_clock::now() < f0 + 10s) rt.flush();
    drained = g.open.load(std::memory_order_relaxed) == 0;
    const auto f1 = std::chrono::steady_clock::now();
    rt.shutdown();  // joins the threads: every count below is final and visible
    std::printf("live: flush took %.3f s, shutdown %.3f s\n", std::chrono::duration<double>(f1 - f0).count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - f1).count());
  } else {
    const std::int64_t steps = std::chrono::seconds(args.seconds) / 1ms;
    for (std::int64_t i = 0; i < steps; ++i) {
      manual.advance(1ms);
      rt.flush();
    }
    end = clock->now();
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const chime::Stats stats = rt.stats();

  // Every think due before the last one the final advance could fire has run (the callbacks
  // checked that each ran for the due its entity expected, so none ran twice or out of turn).
  const TimePoint limit = args.live ? g.cutoff + Duration(1) : manual_fire_limit(t0, end);
  std::uint64_t thinks = g.despawned_runs, lost = 0;
  for (std::size_t i = 0; i < g.entities.size(); ++i) {
    const Entity& e = *g.entities[i];
    thinks += e.runs;
    if (e.next_due >= limit) continue;
    if (++lost <= 5) {
      std::printf("entity %zu (%s): think due at t0 + %.3f ms never ran (%" PRIu64 " thinks)\n", i,
                  kMoodName[static_cast<std::size_t>(e.mood)], ms((e.next_due - t0).count()), e.runs);
    }
  }
  const std::uint64_t tick_expected =
      args.live ? count_le(tick_first, kTickPeriod, end) : count_lt(tick_first, kTickPeriod, limit);
  const std::uint64_t tick_got = g.ticks + (args.live ? g.tick_missed : 0);
  const std::uint64_t tick_diff = tick_got > tick_expected ? tick_got - tick_expected : tick_expected - tick_got;
  const bool tick_ok = tick_diff == 0 || (args.live && tick_diff == 1);
  // Manual: nothing ran that the callbacks did not see (live runs the ticks past the end too).
  const bool fired_ok = args.live || stats.fired == thinks + g.ticks;

  std::vector<std::int64_t> j = g.jitter_ns;
  std::sort(j.begin(), j.end());
  auto pct = [&](double q) {
    return j.empty() ? 0 : j[static_cast<std::size_t>(q * static_cast<double>(j.size() - 1))];
  };

  std::printf("game_tick %s: %zu entities + 60 Hz world tick, %d s simulated (%.2f s wall), workers %u, seed %" PRIu64
              "\n",
              args.live ? "live (steady clock)" : "manual (ManualClock, 1 ms steps)", g.entities.size(), args.seconds,
              wall_s, args.workers, args.seed);
  std::printf("world tick: %" PRIu64 " runs (expected %" PRIu64 "), missed %" PRIu64
              ", jitter p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              g.ticks, tick_expected, g.tick_missed, ms(pct(0.50)), ms(pct(0.99)), ms(j.empty() ? 0 : j.back()));
  std::printf("tick budget %.3f ms (RuntimeOptions::slow_run): %" PRIu64 " world tick overruns, %" PRIu64
              " slow callbacks in all; run time p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              ms(tick_budget.count()), tick_overruns.load(), stats.slow_runs, ms(stats.run_time.p50.count()),
              ms(stats.run_time.p99.count()), ms(stats.run_time.max.count()));
  std::printf("entities: %" PRIu64 " thinks (", thinks);
  for (std::size_t m = 0; m < kMoods; ++m) std::printf("%s%s %" PRIu64, m ? ", " : "", kMoodName[m], g.runs_by_mood[m]);
  std::printf("), %" PRIu64 " despawned and respawned, %" PRIu64 " stunned\n", g.despawns, g.stuns);
  std::printf("checks: %" PRIu64 " thinks for a due not armed, %" PRIu64 " %s, %" PRIu64
              " thinks due by the end not run%s\n",
              g.wrong_due, g.wrong_time, args.live ? "early" : "not on their exact advance", lost,
              drained ? "" : " (live: gave up waiting after 10 s)");
  std::printf("runtime: fired %" PRIu64 ", cancelled %" PRIu64 ", rescheduled %" PRIu64 ", wakeups %" PRIu64
              ", lateness p50 %.3f ms p99 %.3f ms max %.3f ms\n",
              stats.fired, stats.cancelled, stats.rescheduled, stats.wakeups, ms(stats.lateness.p50.count()),
              ms(stats.lateness.p99.count()), ms(stats.lateness.max.count()));
  if (!fired_ok) {
    std::printf("FAIL: stats().fired = %" PRIu64 ", the callbacks saw %" PRIu64 "\n", stats.fired, thinks + g.ticks);
  }

  const bool ok = g.wrong_due == 0 && g.wrong_time == 0 && lost == 0 && drained && tick_ok && fired_ok;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
