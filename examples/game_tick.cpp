// SPDX-License-Identifier: BSL-1.0
// game_tick: a 60 Hz game loop on a chime::Lane. A fixed-rate world tick and 100,000 entities
// thinking on their own timers all run on the game thread, one callback at a time, so they share
// entity state without a lock.
//
// The game thread (main) makes a lane (Runtime::lane()) and runs it: its game loop is
// lane.wait_and_run(end), which sleeps until something is due and runs it here. The wheel
// thread only decides what is due. The pieces:
// - The world tick: lane.schedule_every(16666667ns) with Missed::skip (a late frame is not
//   replayed; Firing::missed says how many were coalesced). Each tick stuns 8 random entities
//   (their next think moves to now + 2 ms + a random delay) or despawns one and spawns a fresh
//   one in its place. It reports its jitter: the clock in the callback minus Firing::due.
// - Each entity's think: a chime::Timer(lane, ...) that re-arms itself from inside its callback,
//   arm_at(f.due + delay), with a delay set by the entity's mood (5 s sleeping ... 50 ms
//   fighting, +-25 %). Re-arming from the due, not from the clock, keeps a late think from
//   pushing every later one back. A stun is arm_at (it replaces the pending think); a despawn
//   destroys the entity and its Timer (~Timer: disarm_and_wait, which on the lane's thread just
//   cancels). Even a think already in the lane's ready queue never runs once cancelled.
// - --coroutines: each entity is a chime::Detached coroutine,
//   `for (;;) { co_await lane.sleep_for(delay); think(); }`, resumed on the game thread. Nobody
//   can cancel a Detached coroutine's sleep, so a stun or a despawn bumps the entity's
//   generation, and the superseded coroutine returns when it wakes (a "stale wake").
// - --slack-us U: RuntimeOptions::slack. Timers then run within U us of their due; without it
//   each timer's slack is proportional to its delay, which for the tick (16.7 ms) and the thinks
//   (50 ms and more) is the interval rule: they run when their 1 ms interval ends
//   (docs/design.md, "Slack"); compare the tick's jitter with and without it. --tick-budget-us:
//   RuntimeOptions::slow_run, a callback that runs longer is counted (Stats::slow_runs; on_slow_run counts the world
//   tick's own overruns).
//
// tests/game_tick_check.cpp runs this world with a model of every due, on a ManualClock
// (each think on exactly the advance the runtime's contract says) and live (never early, none
// lost); ctest -L example runs it.
#include <chime/clock.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;

constexpr Duration kTickPeriod{16666667};  // 60 Hz
constexpr Duration kMargin = 2ms;          // a stun or a spawn thinks no sooner than this from now
constexpr int kTouchesPerTick = 8;         // entities each world tick stuns or respawns

enum class Mood : std::uint8_t { sleeping, idle, patrolling, alert, fighting };
constexpr std::size_t kMoods = 5;
constexpr std::array<Duration, kMoods> kThinkDelay = {5s, 1s, 250ms, 100ms, 50ms};
constexpr std::array<const char*, kMoods> kMoodName = {"sleeping", "idle", "patrolling", "alert", "fighting"};

struct Game;

struct Entity {
  Entity(Game& g, std::uint64_t seed);
  Entity(const Entity&) = delete;  // its Timer's callback points at it
  Entity& operator=(const Entity&) = delete;

  std::mt19937_64 rng;
  Mood mood = Mood::idle;
  std::uint64_t generation = 0;  // coroutines: the coroutine of this generation thinks for it
  chime::Timer think;            // timers: its think, bound to the game's lane
};

struct Game {
  const chime::Clock* clock = nullptr;
  bool coroutines = false;
  // Declared before the entities, so destroyed after them: the lane outlives their Timers, and
  // its close destroys the frames of the coroutines still sleeping.
  chime::Lane lane;
  std::vector<std::shared_ptr<Entity>> entities;  // shared with the entities' coroutines
  std::mt19937_64 rng;
  std::uint64_t next_seed = 0;
  std::vector<std::int64_t> jitter_ns;  // the world tick's: callback clock time - Firing::due
  std::uint64_t ticks = 0, tick_missed = 0, despawns = 0, stuns = 0, stale_wakes = 0;
  std::array<std::uint64_t, kMoods> thinks{};
};

void on_think(Game& g, Entity& e, const chime::Firing& f);

Entity::Entity(Game& g, std::uint64_t seed) : rng(seed) {
  mood = static_cast<Mood>(rng() % kMoods);
  if (!g.coroutines) think = chime::Timer(g.lane, [this, &g](const chime::Firing& f) { on_think(g, *this, f); });
}

// The entity's mood's delay, -25 % to +25 %.
Duration think_delay(Entity& e) {
  const Duration base = kThinkDelay[static_cast<std::size_t>(e.mood)];
  return base * 3 / 4 + Duration(static_cast<std::int64_t>(e.rng() % static_cast<std::uint64_t>(base.count() / 2)));
}

// The entity's AI: one in eight calms down, one in eight gets agitated.
void think(Game& g, Entity& e) {
  ++g.thinks[static_cast<std::size_t>(e.mood)];
  const std::uint64_t r = e.rng() % 8;
  if (r == 0 && e.mood != Mood::sleeping) e.mood = static_cast<Mood>(static_cast<int>(e.mood) - 1);
  if (r == 1 && e.mood != Mood::fighting) e.mood = static_cast<Mood>(static_cast<int>(e.mood) + 1);
}

// Timers: think, then re-arm from this think's due (takes effect when this callback returns).
void on_think(Game& g, Entity& e, const chime::Firing& f) {
  think(g, e);
  e.think.arm_at(f.due + think_delay(e));
}

// Coroutines: sleep on the lane, think, for as long as this is the entity's current coroutine.
chime::Detached think_loop(Game& g, std::shared_ptr<Entity> e, Duration delay) {
  const std::uint64_t generation = e->generation;
  for (;;) {
    co_await g.lane.sleep_for(delay);  // resumed on the game thread, inside wait_and_run
    if (e->generation != generation) {
      ++g.stale_wakes;  // stunned (a newer coroutine thinks for it) or despawned meanwhile
      co_return;
    }
    think(g, *e);
    delay = think_delay(*e);
  }
}

// Moves e's next think to `delay` from now: the pending one never runs.
void stun(Game& g, const std::shared_ptr<Entity>& e, Duration delay) {
  if (g.coroutines) {
    ++e->generation;  // the sleeping coroutine's next wake is stale
    think_loop(g, e, delay);
  } else {
    e->think.arm_at(g.clock->now() + delay);  // replaces the pending think
  }
}

// A new entity in `slot`, first thinking within one think delay of now + kMargin.
void spawn(Game& g, std::shared_ptr<Entity>& slot) {
  slot = std::make_shared<Entity>(g, g.next_seed++);
  const Duration first = kThinkDelay[static_cast<std::size_t>(slot->mood)];
  const Duration delay = kMargin + Duration(static_cast<std::int64_t>(slot->rng() % first.count()));
  if (g.coroutines) {
    think_loop(g, slot, delay);
  } else {
    slot->think.arm_at(g.clock->now() + delay);
  }
}

// Timers: ~Entity runs here, ~Timer first (on the lane's thread a cancel that wins at once).
// Coroutines: its sleeping coroutine still holds it, and returns when it wakes.
void despawn(Game& g, std::shared_ptr<Entity>& slot) {
  ++slot->generation;
  slot.reset();
  ++g.despawns;
}

// The world tick: no think runs while it does (one lane, one thread), so it touches any entity.
void world_tick(Game& g, const chime::Firing& f) {
  g.jitter_ns.push_back((g.clock->now() - f.due).count());
  g.tick_missed += f.missed;
  ++g.ticks;
  for (int i = 0; i < kTouchesPerTick; ++i) {
    std::shared_ptr<Entity>& slot = g.entities[g.rng() % g.entities.size()];
    if (g.rng() % 4 == 0) {
      despawn(g, slot);
      spawn(g, slot);
    } else {
      const auto base = static_cast<std::uint64_t>(kThinkDelay[static_cast<std::size_t>(slot->mood)].count());
      stun(g, slot, kMargin + Duration(static_cast<std::int64_t>(g.rng() % (2 * base))));
      ++g.stuns;
    }
  }
}

struct Args {
  bool coroutines = false;
  int seconds = 3;
  std::size_t entities = 100000;
  std::uint64_t seed = 1;
  std::int64_t tick_budget_us = 16667;  // one frame
  std::int64_t slack_us = 0;            // 0: the default slack (proportional to the delay)
};

Args parse(int argc, char** argv) {
  Args a;
  bool ok = true;
  for (int i = 1; i < argc && ok; ++i) {
    const std::string s = argv[i];
    if (s == "--coroutines") {
      a.coroutines = true;
      continue;
    }
    const char* v = i + 1 < argc ? argv[++i] : "";
    if (s == "--seconds") {
      a.seconds = std::atoi(v);
    } else if (s == "--entities") {
      a.entities = std::strtoull(v, nullptr, 10);
    } else if (s == "--seed") {
      a.seed = std::strtoull(v, nullptr, 10);
    } else if (s == "--tick-budget-us") {
      a.tick_budget_us = std::strtoll(v, nullptr, 10);
    } else if (s == "--slack-us") {
      a.slack_us = std::strtoll(v, nullptr, 10);
    } else {
      ok = false;
    }
  }
  if (!ok || a.entities == 0 || a.seconds <= 0 || a.tick_budget_us <= 0 || a.slack_us < 0) {
    std::fprintf(stderr,
                 "usage: game_tick [--coroutines] [--seconds S > 0] [--entities N > 0] [--seed N] "
                 "[--tick-budget-us U > 0] [--slack-us U >= 0]\n");
    std::exit(2);
  }
  return a;
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);

  // on_slow_run runs on the thread that ran the slow callback, after it returned: the game thread.
  chime::TimerId world{};
  std::uint64_t tick_overruns = 0;
  const Duration tick_budget = std::chrono::microseconds(args.tick_budget_us);
  chime::Runtime rt(chime::RuntimeOptions{
      .precision = 1ms,
      .workers = 0,  // every timer here runs on the game thread's lane: no worker threads
      .slow_run = tick_budget,
      .on_slow_run =
          [&](chime::TimerId id, Duration) {
            if (id == world) ++tick_overruns;
          },
      .slack = std::chrono::microseconds(args.slack_us),
  });

  // Declared after the runtime, so destroyed before it: the entities' Timers, then the lane.
  Game g;
  g.clock = &rt.clock();
  g.coroutines = args.coroutines;
  g.lane = rt.lane();
  g.rng.seed(args.seed);
  g.next_seed = args.seed * 0x9e3779b97f4a7c15ULL;
  g.jitter_ns.reserve(static_cast<std::size_t>(args.seconds) * 70);
  g.lane.run_ready();  // this thread is the game thread, the lane's thread, from here on

  g.entities.resize(args.entities);
  for (std::shared_ptr<Entity>& slot : g.entities) spawn(g, slot);
  world = g.lane.schedule_every(kTickPeriod, [&g](const chime::Firing& f) { world_tick(g, f); },
                                {.on_missed = chime::Missed::skip});  // first: now + period

  // The game loop: sleep on the lane until a think or the world tick is due, run it, here. A
  // game that renders would wait_and_run(next_frame) and render when it returns past it.
  const TimePoint end = g.clock->now() + std::chrono::seconds(args.seconds);
  while (g.clock->now() < end) g.lane.wait_and_run(end);

  const chime::Stats stats = rt.stats();
  std::vector<std::int64_t> j = g.jitter_ns;
  std::sort(j.begin(), j.end());
  auto pct = [&](double q) {
    return j.empty() ? 0 : j[static_cast<std::size_t>(q * static_cast<double>(j.size() - 1))];
  };
  std::uint64_t thinks = 0;
  for (const std::uint64_t n : g.thinks) thinks += n;

  std::printf("game_tick, %s: %zu entities + 60 Hz world tick, %d s, seed %" PRIu64 "\n",
              args.coroutines ? "coroutines (co_await lane.sleep_for)" : "timers (chime::Timer on the lane)",
              g.entities.size(), args.seconds, args.seed);
  std::printf("world tick: %" PRIu64 " runs, missed %" PRIu64
              ", jitter p50 %.3f ms, p99 %.3f ms, max %.3f ms (slack: %s)\n",
              g.ticks, g.tick_missed, ms(pct(0.50)), ms(pct(0.99)), ms(j.empty() ? 0 : j.back()),
              args.slack_us != 0 ? (std::to_string(args.slack_us) + " us").c_str() : "default, proportional");
  std::printf("tick budget %.3f ms (RuntimeOptions::slow_run): %" PRIu64 " world tick overruns, %" PRIu64
              " slow callbacks in all; run time p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              ms(tick_budget.count()), tick_overruns, stats.slow_runs, ms(stats.run_time.p50.count()),
              ms(stats.run_time.p99.count()), ms(stats.run_time.max.count()));
  std::printf("entities: %" PRIu64 " thinks (", thinks);
  for (std::size_t m = 0; m < kMoods; ++m) std::printf("%s%s %" PRIu64, m ? ", " : "", kMoodName[m], g.thinks[m]);
  std::printf("), %" PRIu64 " despawned and respawned, %" PRIu64 " stunned", g.despawns, g.stuns);
  if (args.coroutines) std::printf(", %" PRIu64 " stale wakes of superseded coroutines", g.stale_wakes);
  std::printf("\nruntime: fired %" PRIu64 ", cancelled %" PRIu64 ", rescheduled %" PRIu64 ", wakeups %" PRIu64
              ", lateness p50 %.3f ms p99 %.3f ms max %.3f ms\n",
              stats.fired, stats.cancelled, stats.rescheduled, stats.wakeups, ms(stats.lateness.p50.count()),
              ms(stats.lateness.p99.count()), ms(stats.lateness.max.count()));
  return 0;
}
