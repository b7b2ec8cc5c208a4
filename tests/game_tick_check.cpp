// SPDX-License-Identifier: BSL-1.0
// game_tick_check: the checked simulation behind examples/game_tick.cpp (ctests
// example_game_tick_manual, _live, _live_slack, _live_tick_slack, _coroutines,
// _coroutines_live). The example's world (the same moods, think delays, stuns and despawns,
// seeded its own way): 100,000 entities thinking on their own timers and a 60 Hz world tick, on
// the game thread's chime::Lane; every think is checked against a model of the due its entity
// armed, and the run exits 1 on any violation.
//
// The game thread (main) makes a lane (Runtime::lane()) and runs it: its game loop is
// lane.wait_and_run(end) (or, on a ManualClock, advance + flush(), which on the lane's thread runs
// the lane's ready callbacks itself). The wheel thread only decides what is due; every callback
// below runs on the game thread, one at a time, so the world tick and the thinks share entity
// state without locks. The world tick is a fixed-rate lane timer (lane.schedule_every(16666667ns),
// Missed::skip). Each entity thinks on its own timer, in one of two styles:
// - timers (default): every entity holds a chime::Timer(lane, ...), its "think" timer. Its callback
//   runs the entity's state machine (sleeping, idle, patrolling, alert, fighting) and re-arms its
//   own Timer from inside the callback, arm_at(this think's due + delay), with a delay set by the
//   new state: 5 s, 1 s, 250 ms, 100 ms or 50 ms, each -25 % to +25 % from the entity's own seeded
//   generator. Re-arming from the due (not from the clock) keeps a late think from pushing every
//   later one back.
// - --coroutines: every entity is a chime::Detached coroutine, `for (;;) { co_await
//   lane.sleep_for(delay); think(); }`, resumed on the game thread. A Detached coroutine's sleep
//   cannot be cancelled from outside (nobody holds its frame), so a coroutine that a stun or a
//   despawn superseded notices when it wakes (the entity's generation moved on) and returns
//   without thinking; it holds a shared_ptr to its entity, which lives until then.
//
// Every world tick picks 8 entities from a seeded generator. One in four is despawned and a fresh
// entity spawned in its place; the others are stunned: their next think moves to now + 2 ms +
// a random offset. Timers: arm_at replaces the pending think, and despawning destroys the
// entity's Timer (~Timer: disarm_and_wait). The tick may pick an entity whose think is due in the
// same wheel advance, its run already in the lane's ready queue: on the lane's thread a cancel
// wins until the callback starts (lane.hpp), so the stun or the despawn still takes effect and
// that think never runs. Coroutines: a stun bumps the entity's generation and starts a new
// coroutine for the new due (StopCoroutine + StartCoroutine, as Unity has it); a despawn bumps it
// and lets go of the entity; the superseded coroutine's next wake is a "stale wake".
//
// Checked for every think: it ran for the due its entity last armed (none lost, doubled or stale)
// and never early; at the end, every think due by the end ran.
//   --manual  (default) a chime::ManualClock advanced in 1 ms steps, flush() after each:
//             deterministic. A think due at d must run on exactly the first advance whose
//             reading is at or past d (a ManualClock runs a timer at the first flush that
//             reaches its due: runtime/wheel_thread_manual.cpp, "A manual clock"); at the end every
//             live entity's next due is one the final advance could not fire yet; the world
//             tick ran exactly as often as its fixed rate says, and stats().fired counts
//             exactly the thinks, ticks and stale wakes seen.
//   --live    the steady clock for --seconds (3 by default): a think must not start before its
//             due (coroutines: the clock read just before its sleep_for, plus the delay);
//             entities stop re-arming past the end, and the program flushes until every think
//             due by the end has run (10 s at most). World tick: +-1 run.
//   --slack-us U  (with --live) RuntimeOptions::slack, every timer's slack: thinks and ticks run
//             within U us of their due (design.md, "Slack"); U >= 1000 (the precision) is the
//             interval rule, a timer runs when its 1 ms interval ends. Without it (or 0) each
//             timer gets the default slack, proportional to its delay (runtime/slack.hpp).
//   --tick-slack-us U  (with --live) the world tick's own slack (the per-timer argument of
//             schedule_every), whatever the entities' thinks get: compare the world tick's
//             jitter with and without it.
// Live runs also report the process's CPU time (getrusage, every thread) over the game loop.
// Exits 1 on any violation.
//
// Tick budget: RuntimeOptions::slow_run is --tick-budget-us (default one frame, 16,667 us): a
// callback that runs longer counts in Stats::slow_runs, and on_slow_run counts the world
// tick's own overruns. Reported with Stats::run_time (p50, p99, max), world tick jitter
// (callback clock time minus Firing::due), missed ticks (sum of Firing::missed), thinks per
// state, despawns, spawns and stuns.
#include <chime/clock.hpp>
#include <chime/lane.hpp>
#include <chime/runtime.hpp>
#include <chime/timer.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using chime::Duration;
using chime::TimePoint;

constexpr Duration kTickPeriod{16666667};
constexpr Duration kPrecision = 1ms;
constexpr Duration kMargin = 2ms;   // a stun or a spawn thinks no sooner than this from now
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
  // Timers: its think Timer is bound to the game's lane. Coroutines: no Timer; spawn() starts
  // its coroutine.
  Entity(Game& g, std::uint64_t seed);
  // The Timer's task and the coroutine point at this entity: it must not move.
  Entity(const Entity&) = delete;
  Entity& operator=(const Entity&) = delete;

  std::uint64_t rng;
  Mood mood = Mood::idle;
  bool open = false;                      // live: armed for a due at or before the cutoff
  TimePoint next_due = TimePoint::max();  // the due its next think is armed for (the checks' model)
  std::uint64_t runs = 0;
  std::uint64_t generation = 0;  // coroutines: the one coroutine of this generation thinks for it
  // Last member, so destroyed first: ~Timer() is disarm_and_wait(), and on the lane's thread
  // no think is in progress, so it cancels a pending think and returns at once.
  chime::Timer think;
};

struct Game {
  chime::Runtime* rt = nullptr;
  const chime::Clock* clock = nullptr;
  bool live = false;
  bool coroutines = false;
  TimePoint t0{};
  // Declared before the entities, so destroyed after them: the lane outlives their Timers. Its
  // close destroys the frames of the coroutines still sleeping (perhaps on the wheel thread),
  // and with them the last references to their entities, which hold nothing else.
  chime::Lane lane;
  std::vector<std::shared_ptr<Entity>> entities;  // shared with the entities' coroutines
  std::mt19937_64 rng;
  std::uint64_t next_seed = 0;  // the seed of the next entity spawned
  std::vector<std::int64_t> jitter_ns;
  std::uint64_t ticks = 0;
  std::uint64_t tick_missed = 0;
  std::uint64_t despawns = 0;
  std::uint64_t stuns = 0;
  std::uint64_t despawned_runs = 0;  // thinks of entities despawned since
  std::uint64_t stale_wakes = 0;     // coroutines: wakes of a coroutine a stun or despawn superseded
  std::uint64_t touched_due = 0;     // stuns and despawns of an entity whose think was due, not yet run
  std::array<std::uint64_t, kMoods> runs_by_mood{};
  std::uint64_t wrong_due = 0;          // a think for a due its entity was not armed for
  std::uint64_t wrong_time = 0;         // manual: not on the exact advance; live: early
  TimePoint cutoff = TimePoint::max();  // live: the end; no think is armed past it
  std::int64_t open = 0;                // live: entities armed for a due at or before the cutoff
};

Entity::Entity(Game& g, std::uint64_t seed) : rng(seed) {
  mood = static_cast<Mood>(next_random(rng) % kMoods);
  if (!g.coroutines) think = chime::Timer(g.lane, [this, &g](const chime::Firing& f) { on_think(g, *this, f); });
}

// The advance that fires a due d > t0 (manual run, 1 ms steps from t0): the first step at or
// after d.
TimePoint fire_time(TimePoint t0, TimePoint d) {
  return t0 + ((d - t0 + kPrecision - Duration(1)) / kPrecision) * kPrecision;
}

Duration think_delay(Entity& e) {
  const Duration base = kThinkDelay[static_cast<std::size_t>(e.mood)];
  return base * 3 / 4 + Duration(static_cast<std::int64_t>(next_random(e.rng) % (base.count() / 2 + 1)));
}

// Records e's next think at `due` (live: only up to the cutoff) and, for a Timer, arms it.
// From inside e's own callback the arm takes effect when that run returns. Returns e.open.
bool arm_think(Game& g, Entity& e, TimePoint due) {
  e.next_due = due;
  const bool open = !g.live || due <= g.cutoff;
  if (g.live && open != e.open) g.open += open ? 1 : -1;
  e.open = open;
  if (!g.coroutines) {
    if (open) {
      e.think.arm_at(due);
    } else {
      e.think.disarm();  // the run is over: this entity thinks no more
    }
  }
  return open;
}

// A think due at `due`: check when it ran, step the entity's state machine.
void think(Game& g, Entity& e, TimePoint due) {
  const TimePoint now = g.clock->now();
  if (g.live ? now < due : now != fire_time(g.t0, due)) ++g.wrong_time;
  ++e.runs;
  ++g.runs_by_mood[static_cast<std::size_t>(e.mood)];
  const std::uint64_t r = next_random(e.rng) % 8;  // 1 in 8 calms down, 1 in 8 gets agitated
  if (r == 0 && e.mood != Mood::sleeping) e.mood = static_cast<Mood>(static_cast<int>(e.mood) - 1);
  if (r == 1 && e.mood != Mood::fighting) e.mood = static_cast<Mood>(static_cast<int>(e.mood) + 1);
}

// An entity's think Timer: check it, think, re-arm its own Timer.
void on_think(Game& g, Entity& e, const chime::Firing& f) {
  if (f.due != e.next_due) ++g.wrong_due;
  think(g, e, f.due);
  arm_think(g, e, f.due + think_delay(e));
}

// An entity's think loop (--coroutines): sleep on the lane, think, sleep again, for as long as
// it is the entity's current generation (live: and its due is not past the cutoff). Holds its
// entity, which a despawn may have let go of.
chime::Detached think_loop(Game& g, std::shared_ptr<Entity> e, Duration delay) {
  const std::uint64_t generation = e->generation;
  // sleep_for reads the clock when called; the model reads it just before (the same time, on a
  // ManualClock, which moves only between flushes).
  while (arm_think(g, *e, g.clock->now() + delay)) {
    co_await g.lane.sleep_for(delay);  // resumed on the game thread, inside run_ready
    if (e->generation != generation) {
      ++g.stale_wakes;  // stunned (a newer coroutine thinks for it) or despawned meanwhile
      co_return;
    }
    think(g, *e, e->next_due);
    delay = think_delay(*e);
  }
}

// A new entity in `slot`, first thinking within one think delay of `from`.
void spawn(Game& g, std::shared_ptr<Entity>& slot, TimePoint from) {
  slot = std::make_shared<Entity>(g, g.next_seed++);
  const Duration first = kThinkDelay[static_cast<std::size_t>(slot->mood)];
  const TimePoint due = from + Duration(static_cast<std::int64_t>(next_random(slot->rng) % first.count()));
  if (g.coroutines) {
    think_loop(g, slot, due - g.clock->now());
  } else {
    arm_think(g, *slot, due);
  }
}

void despawn(Game& g, std::shared_ptr<Entity>& slot) {
  if (slot->open) --g.open;
  g.despawned_runs += slot->runs;
  ++g.despawns;
  // Timers: ~Entity runs here, ~Timer first (disarm_and_wait: on the lane's thread, a cancel
  // that wins and returns at once), then the rest of the entity. Coroutines: its coroutine
  // still holds it, and returns when it wakes.
  ++slot->generation;
  slot.reset();
}

// The next think moves to `delay` from now: the pending one never runs.
void stun(Game& g, std::shared_ptr<Entity>& e, Duration delay) {
  if (!g.coroutines) {
    arm_think(g, *e, g.clock->now() + delay);  // arm_at replaces the pending think
    return;
  }
  ++e->generation;  // the sleeping coroutine's next wake is stale
  think_loop(g, e, delay);
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
  // No think runs while this does (one lane, one thread), and any entity may be touched: one
  // whose think is due, even one whose run waits in the lane's ready queue, is stunned or
  // despawned all the same (timers: the cancel wins until the callback starts).
  for (int i = 0; i < kTouchesPerTick; ++i) {
    std::shared_ptr<Entity>& slot = g.entities[g.rng() % g.entities.size()];
    const bool respawn = g.rng() % 4 == 0;
    const std::uint64_t r = g.rng();
    if (slot->open && slot->next_due <= now) ++g.touched_due;
    if (respawn) {
      despawn(g, slot);
      spawn(g, slot, now + kMargin);
    } else {
      const Duration base = kThinkDelay[static_cast<std::size_t>(slot->mood)];
      stun(g, slot, kMargin + Duration(static_cast<std::int64_t>(r % (2 * base.count()))));
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

// Manual run: a due d fires by the final advance to `end` (a step) iff d <= end, that is iff
// d < end + 1 ns.
TimePoint manual_fire_limit(TimePoint end) { return end + Duration(1); }

struct Args {
  bool live = false;
  bool coroutines = false;
  int seconds = -1;
  std::size_t entities = 100000;
  std::uint64_t seed = 1;
  std::int64_t tick_budget_us = 16667;
  std::int64_t slack_us = 0;        // RuntimeOptions::slack; 0: unset, the default (proportional)
  std::int64_t tick_slack_us = -1;  // the world tick's own slack; -1: none given
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "game_tick_check: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--manual") {
      a.live = false;
    } else if (s == "--live") {
      a.live = true;
    } else if (s == "--coroutines") {
      a.coroutines = true;
    } else if (s == "--seconds") {
      a.seconds = std::atoi(value());
    } else if (s == "--entities") {
      a.entities = std::strtoull(value(), nullptr, 10);
    } else if (s == "--seed") {
      a.seed = std::strtoull(value(), nullptr, 10);
    } else if (s == "--tick-budget-us") {
      a.tick_budget_us = std::strtoll(value(), nullptr, 10);
    } else if (s == "--slack-us") {
      a.slack_us = std::strtoll(value(), nullptr, 10);
    } else if (s == "--tick-slack-us") {
      a.tick_slack_us = std::strtoll(value(), nullptr, 10);
      if (a.tick_slack_us < 0) {
        std::fprintf(stderr, "game_tick_check: --tick-slack-us must be >= 0\n");
        std::exit(2);
      }
    } else {
      std::fprintf(stderr,
                   "usage: game_tick_check [--manual | --live] [--coroutines] [--seconds S] [--entities N] [--seed N] "
                   "[--tick-budget-us U] [--slack-us U] [--tick-slack-us U]\n");
      std::exit(2);
    }
  }
  if (a.seconds < 0) a.seconds = a.live ? 3 : 10;
  if (a.slack_us < 0 || ((a.slack_us != 0 || a.tick_slack_us >= 0) && !a.live)) {
    // The manual run checks each think against its exact advance (a ManualClock has no slack).
    std::fprintf(stderr, "game_tick_check: --slack-us must be >= 0; it and --tick-slack-us are for --live runs only\n");
    std::exit(2);
  }
  if (a.entities == 0 || a.seconds <= 0 || a.tick_budget_us <= 0) {
    std::fprintf(stderr, "game_tick_check: --entities, --seconds and --tick-budget-us must be > 0\n");
    std::exit(2);
  }
  return a;
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// User + system CPU time of the whole process (every thread), in ns.
std::int64_t process_cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) {
    return static_cast<std::int64_t>(tv.tv_sec) * 1'000'000'000 + static_cast<std::int64_t>(tv.tv_usec) * 1'000;
  };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

// A slack in us as the report names it (`unset`: what a timer gets without one).
std::string slack_name(std::int64_t us, const char* unset) {
  if (us < 0) return unset;
  if (us >= kPrecision / 1us) return std::to_string(us) + " us, the interval rule";
  return std::to_string(us) + " us";
}

std::uint64_t key_of(chime::TimerId id) { return (std::uint64_t{id.slot()} << 32) | id.generation(); }

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  chime::ManualClock manual;
  chime::SteadyClock steady;
  chime::Clock* clock = args.live ? static_cast<chime::Clock*>(&steady) : &manual;

  // on_slow_run runs on the thread that ran the slow callback, after it returned: here, always
  // the game thread.
  std::uint64_t world_key = ~std::uint64_t{0};
  std::uint64_t tick_overruns = 0;
  const Duration tick_budget = std::chrono::microseconds(args.tick_budget_us);
  chime::Runtime rt(chime::RuntimeOptions{
      .precision = kPrecision,
      .workers = 0,  // every timer here runs on the game thread's lane: no worker threads
      .clock = clock,
      .on_error = {},
      .slow_run = tick_budget,
      .on_slow_run =
          [&](chime::TimerId id, Duration) {
            if (key_of(id) == world_key) ++tick_overruns;
          },
      .slack = std::chrono::microseconds(args.slack_us),
  });

  // Declared after the runtime, so destroyed before it: every Timer, then the lane (whose close
  // destroys the frames of the coroutines still sleeping) go before their Runtime.
  Game g;
  g.rt = &rt;
  g.clock = clock;
  g.live = args.live;
  g.coroutines = args.coroutines;
  g.lane = rt.lane();
  g.rng.seed(args.seed);
  g.next_seed = args.seed * 0x9e3779b97f4a7c15ULL;
  g.jitter_ns.reserve(static_cast<std::size_t>(args.seconds) * 70);
  // This thread is the game thread, the lane's thread, from here on (the one that calls
  // run_ready / wait_and_run): flush() called here runs the lane's callbacks itself.
  g.lane.run_ready();
  const TimePoint t0 = clock->now();  // the wheel started at (or just before) this time
  g.t0 = t0;
  if (args.live) g.cutoff = t0 + std::chrono::seconds(args.seconds);

  g.entities.resize(args.entities);
  for (std::shared_ptr<Entity>& slot : g.entities) spawn(g, slot, t0 + 1ms);
  const TimePoint tick_first = t0 + kTickPeriod;
  const std::optional<Duration> tick_slack =
      args.tick_slack_us >= 0 ? std::optional<Duration>(std::chrono::microseconds(args.tick_slack_us)) : std::nullopt;
  const chime::TimerId world =
      g.lane.schedule_every(kTickPeriod, [&g](const chime::Firing& f) { world_tick(g, f); },
                            {.first_due = tick_first, .on_missed = chime::Missed::skip, .slack = tick_slack});
  world_key = key_of(world);

  const auto wall_start = std::chrono::steady_clock::now();
  const std::int64_t cpu_start = process_cpu_ns();
  const std::uint64_t wakeups_start = rt.stats().wakeups;
  std::int64_t loop_cpu_ns = 0;
  std::uint64_t loop_wakeups = 0;
  double loop_wall_s = 0;
  TimePoint end;
  bool drained = true;  // live: every think due by the end ran
  if (args.live) {
    end = g.cutoff;
    // The game loop: sleep on the lane until a think or the world tick is due, run it, here.
    const TimePoint stop = end + 2 * kPrecision;  // every think due by `end` is due to fire
    while (clock->now() < stop) g.lane.wait_and_run(stop);
    loop_cpu_ns = process_cpu_ns() - cpu_start;
    loop_wakeups = rt.stats().wakeups - wakeups_start;
    loop_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    const auto f0 = std::chrono::steady_clock::now();
    // A late think re-arms for a due already past, which fires at once: flush (on this thread
    // it runs the lane's callbacks) until the chains of thinks due by the end have all run.
    rt.flush();
    while (g.open != 0 && std::chrono::steady_clock::now() < f0 + 10s) rt.flush();
    drained = g.open == 0;
    std::printf("live: flush took %.3f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count());
  } else {
    const std::int64_t steps = std::chrono::seconds(args.seconds) / 1ms;
    for (std::int64_t i = 0; i < steps; ++i) {
      manual.advance(1ms);
      rt.flush();  // on the lane's thread: runs every callback this advance made ready
    }
    end = clock->now();
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const chime::Stats stats = rt.stats();

  // Every think due before the last one the final advance could fire has run (the callbacks
  // checked that each ran for the due its entity expected, so none ran twice or out of turn).
  const TimePoint limit = args.live ? g.cutoff + Duration(1) : manual_fire_limit(end);
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
  const bool fired_ok = args.live || stats.fired == thinks + g.ticks + g.stale_wakes;

  std::vector<std::int64_t> j = g.jitter_ns;
  std::sort(j.begin(), j.end());
  auto pct = [&](double q) {
    return j.empty() ? 0 : j[static_cast<std::size_t>(q * static_cast<double>(j.size() - 1))];
  };

  std::printf("game_tick_check %s, %s: %zu entities + 60 Hz world tick, %d s simulated (%.2f s wall), seed %" PRIu64
              "\n",
              args.live ? "live (steady clock)" : "manual (ManualClock, 1 ms steps)",
              args.coroutines ? "coroutines (co_await lane.sleep_for)" : "timers (chime::Timer on the lane)",
              g.entities.size(), args.seconds, wall_s, args.seed);
  std::printf("world tick: %" PRIu64 " runs (expected %" PRIu64 "), missed %" PRIu64
              ", jitter p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              g.ticks, tick_expected, g.tick_missed, ms(pct(0.50)), ms(pct(0.99)), ms(j.empty() ? 0 : j.back()));
  const std::string every_slack = slack_name(args.slack_us != 0 ? args.slack_us : -1, "default, proportional");
  std::printf("slack: every timer %s; world tick %s\n", every_slack.c_str(),
              slack_name(args.tick_slack_us, "as every timer").c_str());
  if (args.live) {
    std::printf("live: game loop %.3f s: CPU %.1f ms (all threads), %" PRIu64 " wheel wake-ups\n", loop_wall_s,
                ms(loop_cpu_ns), loop_wakeups);
  }
  std::printf("tick budget %.3f ms (RuntimeOptions::slow_run): %" PRIu64 " world tick overruns, %" PRIu64
              " slow callbacks in all; run time p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              ms(tick_budget.count()), tick_overruns, stats.slow_runs, ms(stats.run_time.p50.count()),
              ms(stats.run_time.p99.count()), ms(stats.run_time.max.count()));
  std::printf("entities: %" PRIu64 " thinks (", thinks);
  for (std::size_t m = 0; m < kMoods; ++m) std::printf("%s%s %" PRIu64, m ? ", " : "", kMoodName[m], g.runs_by_mood[m]);
  std::printf("), %" PRIu64 " despawned and respawned, %" PRIu64 " stunned", g.despawns, g.stuns);
  if (args.coroutines) std::printf(", %" PRIu64 " stale wakes of superseded coroutines", g.stale_wakes);
  std::printf("\n");
  std::printf("entities: %" PRIu64
              " stuns and despawns hit an entity whose think was due but had not run (its run "
              "perhaps in the lane's ready queue): %s\n",
              g.touched_due, args.coroutines ? "its coroutine woke stale" : "the cancel won, and that think never ran");
  std::printf("checks: %" PRIu64 " thinks for a due not armed, %" PRIu64 " %s, %" PRIu64
              " thinks due by the end not run%s\n",
              g.wrong_due, g.wrong_time, args.live ? "early" : "not on their exact advance", lost,
              drained ? "" : " (live: gave up waiting after 10 s)");
  std::printf("runtime: fired %" PRIu64 ", cancelled %" PRIu64 ", rescheduled %" PRIu64 ", wakeups %" PRIu64
              ", lateness p50 %.3f ms p99 %.3f ms max %.3f ms\n",
              stats.fired, stats.cancelled, stats.rescheduled, stats.wakeups, ms(stats.lateness.p50.count()),
              ms(stats.lateness.p99.count()), ms(stats.lateness.max.count()));
  if (!fired_ok) {
    std::printf("FAIL: stats().fired = %" PRIu64 ", the callbacks saw %" PRIu64 "\n", stats.fired,
                thinks + g.ticks + g.stale_wakes);
  }

  const bool ok = g.wrong_due == 0 && g.wrong_time == 0 && lost == 0 && drained && tick_ok && fired_ok;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
