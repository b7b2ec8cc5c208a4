// SPDX-License-Identifier: BSL-1.0
// chime/runtime.hpp: the multi-threaded timer runtime.
//
// What it is: producer threads post schedule and reschedule-earlier commands
// into lock-free queues, one per shard (RuntimeOptions::shards, 1 by
// default); each shard's wheel thread owns a TimingWheel, drains its
// commands, sleeps until its next alarm is due, advances its wheel to the
// clock's time and hands fired timers to one pool of worker threads, which
// run the callbacks.
//
//   producers --(a shard's lock-free command queue)--> its wheel thread --(hand-off queue)--> workers
//
// Guarantees, each with its ID (README and docs cite the IDs;
// docs/guarantees.md maps each to its tests; the state machine behind them is
// in runtime/timer_state.hpp and docs/state-machine.md, where the races are
// argued):
// G10 (never early): every run of a timer due at d has fired_at >= d (the
//   runtime's clock), whatever its slack. Below saturation also fired_at <=
//   F(d) + the OS's wake-up latency, where F(d) is d rounded up to its
//   slack's grid (G25: a power of two of nanoseconds, at most the slack),
//   or to the end of d's precision interval for a slack at or above the
//   precision (the interval rule). A due already reached when its command
//   is applied is due now (G13). On a ManualClock G28 applies instead.
// G11 (fire or cancel): exactly one of {fire, successful cancel} happens to every one-shot timer:
//   `cancel` returns true iff the callback has not started and never will.
//   Cancel wins until the callback starts: a run already handed to a worker
//   but not started is skipped. For a periodic timer, true iff no further
//   run starts after cancel returns.
// G12 (command order): the calls of one thread take effect in the order it
//   made them, through whichever handles (Runtime, Producers, Lanes,
//   Timers). A cancel, state or reschedule of an id is never lost because
//   its schedule was not applied yet, whichever thread made each call. On
//   clocks other than a ManualClock, calls of different threads take
//   effect in no promised order beyond that (each shard applies one
//   Producer's queue in bulk, then another's); on a ManualClock, ties run
//   in the happens-before order of the calls (G28).
// G13 (run order, due now): within one wheel advance, timers go to the workers in nondecreasing
//   interval order; with workers = 0 or 1 callbacks run in that order.
//   A timer whose due time is at or before the clock's time when its command
//   (schedule, or reschedule to an earlier time) is applied is due now: it
//   goes out with that application (not on a ManualClock: G28); those
//   applied in one pass go out in nondecreasing due order (ties: posting
//   order), merged with the advance's timers in nondecreasing interval order.
//   A periodic timer's missed runs coalesced into one (Missed::skip, delay)
//   are ordered by the earliest of their dues; Firing::due is the latest.
// G28 (manual clock; design.md, "Clocks"): on a ManualClock callbacks run
//   only inside flush() (and drain(), shutdown(fire_pending), which begin
//   with one), never between calls: flush() applies every command posted
//   before it, then runs every timer whose due is at or before the clock's
//   reading at the flush, with Firing::fired_at equal to that reading (or,
//   for a reading past the horizon, G23, the horizon's start, where the
//   wheel stops), and returns when those runs have ended. The runs start in due order, ties in
//   call order (the order of the schedule, reschedule or periodic re-arm
//   that set the due; across threads, happens-before), one at a time,
//   whatever `workers` is: each starts after the one before has returned,
//   and sees what that one scheduled, cancelled or rescheduled. A timer a
//   callback schedules due at or before the reading runs in the same flush,
//   in its place. A periodic timer's missed runs that go out as one
//   (Missed::skip, delay) take the place of the earliest of them; its
//   Firing::due is the latest. On a Lane, the lane's runs that come next in that order
//   go to it together and run in order on its thread; what one of them
//   schedules comes after them. No slack, no interval rule, no "due now" at
//   application: which timers run, their order, due, missed and fired_at
//   depend only on the sequence of calls, from one thread or several.
//   With RuntimeOptions::shards > 1 (a ManualClock has one shard unless
//   asked) the order is one over every shard; a lane's batch then holds
//   only its runs before every other shard's next.
// G14 (periodic): a periodic timer's runs never overlap; its n-th run is due at
//   first + n * period (fixed rate, no drift).
// G15 (no allocation per timer): no heap allocation per timer in steady state: timers live in a slab of
//   slots that are reused; a Task up to 48 bytes is stored inline (up to 16
//   bytes in the timer's own 64-byte slot, more in the slot's side record,
//   made once per 4,096 slots).
// G16 (bounded memory): a cancel posts no command; it destroys the task (and
//   what it captured) before it returns, and a timer cancelled after the
//   wheel thread filed it keeps its slot (64 bytes) until its due time comes
//   up, or until such timers exceed a quarter of the filed ones
//   (and 1,024), when one sweep reclaims them all. Slots in use are at most
//   about 4/3 x pending + 1,024, plus commands in flight and 32 cached per
//   Producer. stats().pending and max_pending count a cancelled timer out at
//   once.
// G17 (idle costs nothing): with no timer due, a wheel thread never wakes
//   on its own (it sleeps without a timeout). A schedule wakes it only when
//   its timer must run before the wheel's planned wake-up, or once per
//   1,024 commands posted to its shard, whichever threads and handles post
//   them (design.md, "Overload").
// G18 (overload; design.md, "Overload"): a schedule that finds its shard's
//   queue at RuntimeOptions::max_queue_depth throws CapacityError and
//   queues nothing; the depth stays <= max_queue_depth + 64 x the threads
//   posting to the shard. Nothing accepted is dropped; cancels, reschedules
//   and periodic re-arms are never refused. stats() gives each shard's
//   depth and refused_overload.
// G19 (touch): pushing a due time later (reschedule to a later time, the idle-timeout
//   "touch") is one CAS pair on the timer's state word and a store; it does
//   not go through the wheel thread.
//
// Not guaranteed: how late a timer fires depends on scheduling of the wheel
// and worker threads (the lateness histogram in stats() measures it); order
// of callbacks across several workers; a TimerId is stale-checked by a 32-bit
// generation, so an id kept across 2^32 reuses of its slot could alias.
//
// G20 (misuse): where misuse is detected (every build unless said): a Producer,
// Timer, Lane or KeyedTimers used after its Runtime was destroyed throws
// std::logic_error (one load per call; destroying it afterwards is safe); a
// use racing the destruction is not detected. flush/drain/shutdown from a
// callback throw std::logic_error. Two callbacks cancel_and_wait-ing each
// other abort with a message in debug builds only. Using one Producer from
// two threads at once is not detected.
//
// G21 (errors): bad arguments (a due time beyond the wheel's range, a period
// <= 0) throw std::out_of_range / std::invalid_argument naming the values;
// calls after shutdown throw chime::StoppedError; over max_pending or
// max_queue_depth, chime::CapacityError; flush/drain/shutdown from inside a callback,
// std::logic_error. Racing outcomes are return values (cancel returns false
// when it lost). A callback's exception is caught on its worker, counted, and
// passed to on_error; the runtime keeps running.
// G22 (out of memory; design.md, "Out of memory"): a schedule that cannot
//   get memory throws std::bad_alloc and schedules nothing, also as a
//   thread's first call; a cancel always takes effect. Every accepted timer
//   runs exactly once (or is cancelled) once memory is back, possibly late
//   and out of due order; no chime thread dies of it. flush() and drain()
//   throw std::bad_alloc after about 1 s of a wheel thread out of memory
//   (nothing is lost; call again); shutdown() waits for memory.
//
// G23 (range): due times are accepted up to 2^num_bits - 1 intervals past the
// wheel's time, and never from the horizon on: the start of interval
// min(K_max, 2^61 - 1) - 1, K_max being the last interval whose start is a
// representable TimePoint (at 1 ms precision, about 292 years past
// TimePoint zero). The wheel never advances past the horizon, so every
// accepted one-shot fires once the clock reaches it; a periodic run due
// beyond it never fires on its own (drain() and shutdown(fire_pending) still
// run it once, like any pending timer). The constructor throws
// std::invalid_argument for a clock with fewer than two intervals before
// TimePoint::max().
//
// G24 (memory ordering): everything a thread did before schedule_* happens-before
// the callback runs; everything a callback did happens-before a flush() that
// waited for it returns, and before the next run of the same periodic timer.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "chime/clock.hpp"
#include "chime/level_bits.hpp"
#include "chime/task.hpp"
#include "chime/time.hpp"

namespace chime {

class CapacityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class StoppedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TimerState { pending, running, fired, cancelled, unknown };
// What a periodic timer does with runs it missed (due at or before the
// dispatch of a late run): skip coalesces them into one run; catch_up runs
// each; delay runs once, like skip, then restarts the fixed rate from the end
// of that run (Tokio's MissedTickBehavior::Delay).
enum class Missed { skip, catch_up, delay };
// G27 (cancel results; docs/state-machine.md): the outcome of try_cancel /
// cancel_and_wait:
// - cancelled: this call won; no run of the timer starts after it returns
//   (a run handed to a worker but not started counts as not started);
// - running: a run has started and not returned (one-shot: its only run;
//   periodic: no further run starts after the call returned);
// - done: it already fired and finished, or was cancelled before;
// - unknown: a default id, an id never issued, or an id from another
//   runtime. An id this runtime issued whose slot was since reused is
//   finished: done (state() says unknown for it).
enum class CancelResult { cancelled, running, done, unknown };
enum class ShutdownMode { cancel_pending, fire_pending };
// Kept for one release (CHANGELOG.md): the commands always travel through
// moodycamel's queue, and RuntimeOptions::command_queue is ignored.
enum class [[deprecated("ignored: commands always travel through moodycamel's queue")]] CommandQueueBackend{
    moodycamel, boost_lockfree};

// A one-shot schedule's options (schedule_at, schedule_after; Timer::arm_at,
// arm_after; a Lane's sleeps): schedule_at(due, task, {.slack = 50us}).
struct ScheduleOptions {
  std::optional<Duration> slack{};  // G25; empty: RuntimeOptions::slack, or the default for the delay
};

// A periodic timer's options (schedule_every, Timer::arm_every).
struct PeriodicOptions {
  std::optional<TimePoint> first_due{};  // empty: now + period
  Missed on_missed = Missed::skip;
  std::optional<Duration> slack{};  // G25, of every run; empty: RuntimeOptions::slack, or the default for the period
};

// One cumulative bucket of a histogram: `count` values were <= `le`.
struct HistogramBucket {
  Duration le{0};
  std::uint64_t count = 0;
};

// A histogram's summary: percentiles are the upper edge of their bucket (at
// most 12.5 % above the true value); max is exact. `count`, `sum` and
// `buckets` are the histogram itself, as a scraper wants it
// (chime/metrics.hpp writes them): cumulative counts at the fixed inclusive
// upper bounds 2^k - 1 ns, k = 8..34 (255 ns, 511 ns, ..., 17.18 s), which
// are exact edges of the recording histogram; a value above the last bound
// counts only in `count`. Negative values (lateness of an early run) are
// recorded as 0.
struct DurationStats {
  static constexpr std::size_t bucket_count = 27;

  Duration p50{0};
  Duration p99{0};
  Duration p999{0};
  Duration max{0};
  std::uint64_t count = 0;  // values recorded
  Duration sum{0};          // their sum
  std::array<HistogramBucket, bucket_count> buckets = empty_buckets();

  // The inclusive upper bound of bucket i.
  static constexpr Duration bucket_le(std::size_t i) noexcept { return Duration{(std::int64_t{1} << (i + 8)) - 1}; }
  // Every bound, every count 0.
  static constexpr std::array<HistogramBucket, bucket_count> empty_buckets() noexcept {
    std::array<HistogramBucket, bucket_count> b{};
    for (std::size_t i = 0; i < bucket_count; ++i) b[i].le = bucket_le(i);
    return b;
  }
};
using LatenessStats = DurationStats;

// One shard's load (design.md, "Shards"): a shard is one wheel thread and
// its command queue (RuntimeOptions::shards).
struct ShardStats {
  // Commands posted to the shard's queue, not yet taken by its wheel thread (approximate).
  std::uint64_t queue_depth = 0;
  std::uint64_t wakeups = 0;  // times the shard's wheel thread woke up
  Duration busy{0};           // the wheel thread's CPU time so far (CLOCK_THREAD_CPUTIME_ID); 0 if not known
  // Schedules refused because this shard's queue was at max_queue_depth
  // (Stats::refused_overload is the shards' sum).
  std::uint64_t refused_overload = 0;
  // The longest pass of the shard's wheel thread so far (steady clock: the
  // work between two sleeps, not the sleeps), and the most moves one pass
  // made (alarms moved between the wheel's levels by its advance and by
  // moving the next span down ahead, and fired alarms re-filed at a later
  // due): how close "no pass does unbounded work" (design.md, "Slack")
  // runs. 0 with no wheel thread started.
  Duration longest_pass{0};
  std::uint64_t most_refiled_in_a_pass = 0;
};

struct Stats {
  std::uint64_t scheduled = 0;        // timers accepted by schedule_*
  std::uint64_t fired = 0;            // callback runs completed (periodic runs each count)
  std::uint64_t cancelled = 0;        // successful cancels (and timers cancelled by shutdown)
  std::uint64_t rescheduled = 0;      // successful reschedules
  std::uint64_t pending = 0;          // timers not yet finished (periodic ones until cancelled)
  std::uint64_t callback_errors = 0;  // callbacks that threw
  std::uint64_t queue_depth = 0;      // commands posted but not yet applied (approximate; the shards' sum)
  std::uint64_t wakeups = 0;          // times a wheel thread woke up (the shards' sum)
  std::uint64_t zombie_sweeps = 0;    // passes over the wheel that reclaimed cancelled timers in one go
  std::uint64_t slow_runs = 0;        // callback runs longer than RuntimeOptions::slow_run
  // Schedules refused with CapacityError because their shard's queue was at
  // RuntimeOptions::max_queue_depth (refusals over max_pending are not counted).
  std::uint64_t refused_overload = 0;
  LatenessStats lateness;          // callback start minus due, drained runs excluded
  DurationStats run_time;          // how long callbacks ran (steady clock), every run
  std::vector<ShardStats> shards;  // one per shard, in shard order
};

struct RuntimeOptions {
  // The most workers a Runtime starts: more throws std::invalid_argument.
  // Workers run short callbacks; thousands of threads would only contend (a
  // callback that blocks wants a pool of its own), and the count is checked
  // before any thread starts, so a mistaken huge value fails cleanly.
  static constexpr unsigned max_workers = 4096;

  Duration precision = std::chrono::milliseconds(1);
  LevelBits level_bits = LevelBits::default_bits();
  unsigned workers = std::thread::hardware_concurrency();  // 0: callbacks run on the wheel thread
  Clock* clock = nullptr;                                  // non-owning; null: the steady clock
  std::size_t max_pending = 0;  // 0: unbounded; a timer stops counting once cancel returned true or its last run ended
  std::function<void(TimerId, std::exception_ptr)> on_error{};
  // Kept for one release (CHANGELOG.md), ignored: the Boost.Lockfree
  // command queue was 2-6x slower on schedule+cancel (docs/benchmarks.md).
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  CommandQueueBackend command_queue = CommandQueueBackend::moodycamel;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
  // Timers to make room for up front: the slot slab (64 bytes per timer,
  // the wheel's node and a callable of up to 16 bytes included) is
  // allocated and pre-faulted at construction, so the first `reserve`
  // schedules take no page fault (side records, for periodic and lane
  // timers and larger callables, are made when first needed). It still
  // grows past it. 0: nothing up front.
  std::size_t reserve = 0;
  // A run longer than this (on the steady clock) counts in Stats::slow_runs
  // and is reported to on_slow_run, after it returned, on the thread that
  // ran it (an exception from on_slow_run is swallowed).
  Duration slow_run = std::chrono::milliseconds(10);
  std::function<void(TimerId, Duration)> on_slow_run{};
  // G25 (slack; design.md, "Slack"): a timer's slack s is how late past its
  // due d it may run: below saturation it runs no earlier than d and no later
  // than d + s plus the OS's wake-up latency (G10), and timers whose dues
  // fall in one cell of the same slack grid share a wake-up. Each schedule
  // call (Runtime, Producer, Lane), Timer::arm_* and Lane's sleeps take a
  // slack of their own (ScheduleOptions::slack, PeriodicOptions::slack); this field is
  // a fixed slack for every timer that gives none; zero means not set, and
  // then a timer's slack is clamp(D / 16, 50 us, precision) of its delay D
  // (the due minus the clock in the call; for schedule_at, when its shard's
  // wheel thread files it, which is never earlier; a periodic timer's
  // period): short timers run close to their due, long ones on the
  // precision grid (runtime/slack.hpp; docs/benchmarks.md, "Slack", has the
  // measurements). A slack at or above `precision` is the interval rule: a
  // timer runs when its precision interval ends. Negative, here or per
  // timer, throws std::invalid_argument naming the value. Not on a
  // ManualClock (G28).
  Duration slack = Duration::zero();
  // Overload (design.md, "Overload"): a schedule that would push its shard's
  // command queue past this many commands throws chime::CapacityError
  // instead of queueing (nothing already accepted is dropped; cancels,
  // reschedules and periodic re-arms are never refused). The queue then
  // exceeds it by at most the commands in flight: 64 per posting thread,
  // however many Producers it posts through.
  // 0 means default_max_queue_depth; SIZE_MAX, no bound. A value below
  // min_max_queue_depth throws std::invalid_argument.
  std::size_t max_queue_depth = 0;
  // 2^20 commands (24 bytes each, beside a 64-byte slot per queued
  // schedule: about 90 MB at the bound): about 0.2 s of a wheel thread's
  // work at its measured ceiling, far above the depth any load it keeps up
  // with reaches (docs/benchmarks.md, "Overload").
  static constexpr std::size_t default_max_queue_depth = std::size_t{1} << 20;
  // Producers look at the depth every 64 posts, so a smaller bound would be
  // mostly that slack.
  static constexpr std::size_t min_max_queue_depth = 1024;
  // G26 (shards; design.md, "Shards"): this many wheel threads, each with its own
  // wheel and command queue, over one slot slab and one worker pool. A
  // Producer or a Lane binds to a shard when made (round-robin; with
  // workers = 0 every Lane is on shard 0, so that callbacks, which then run
  // on the wheel threads, never wait for each other to close a Lane); the
  // Runtime's own schedule calls use the calling thread's shard (chosen once
  // per thread). 0 means the default: the environment variable CHIME_SHARDS
  // if it is set and not empty (decimal digits, no sign or spaces, leading
  // zeros allowed: "064" and "0064" are 64; a number from 1 to max_shards),
  // else 1, because one shard is fastest until one wheel thread is the bottleneck
  // (docs/benchmarks.md, "Shards"). Above max_shards, or a CHIME_SHARDS
  // that is not such a number, throws std::invalid_argument.
  unsigned shards = 0;
  static constexpr unsigned max_shards = 64;
};

namespace detail {
class RuntimeCore;
struct ProducerQueueToken;
// Whether a Runtime still exists. The Runtime and the handles that might
// outlive it by mistake (Producer, Timer, Lane, KeyedTimers) share it; a
// handle checks it (one load) before it touches the runtime, and throws
// std::logic_error instead of using freed memory. The Runtime's destructor
// clears it once its threads are joined.
struct RuntimeAlive {
  std::atomic<bool> alive{true};
  bool operator()() const noexcept { return alive.load(std::memory_order_acquire); }
};
// Throws std::logic_error: "chime::<what> ... outlives its Runtime".
[[noreturn]] void throw_runtime_gone(const char* what);
}  // namespace detail

class Runtime;
class Producer;
class Lane;  // chime/lane.hpp
template <class Key, class Value, class Hash, class KeyEqual>
class KeyedTimers;  // chime/keyed_timers.hpp

namespace detail {
struct LaneCore;
// Where a handle's timer operations go: its runtime, the queue token it
// posts through (null: the calling thread's shard's) and the lane its
// timers run on (null: the workers).
struct OpsTarget {
  RuntimeCore* core;
  ProducerQueueToken* token;
  LaneCore* lane;
};
// The operations behind TimerOperations, one function each for every
// handle (runtime/runtime.cpp). `what` names the call in errors.
TimerId ops_schedule_at(const OpsTarget& t, TimePoint due, Task&& task, const ScheduleOptions& options);
TimerId ops_schedule_after(const OpsTarget& t, Duration delay, Task&& task, const ScheduleOptions& options);
TimerId ops_schedule_every(const OpsTarget& t, Duration period, Task&& task, const PeriodicOptions& options);
bool ops_cancel(const OpsTarget& t, TimerId id);
CancelResult ops_try_cancel(const OpsTarget& t, TimerId id);
CancelResult ops_cancel_and_wait(const OpsTarget& t, TimerId id);
bool ops_reschedule_at(const OpsTarget& t, TimerId id, TimePoint due);
bool ops_reschedule_after(const OpsTarget& t, TimerId id, Duration delay);
TimerState ops_state(const OpsTarget& t, TimerId id) noexcept;

// The nine timer operations, declared once for Runtime, Producer and Lane
// (each derives from TimerOperations<itself> and says, in ops_target(what),
// where its calls go, throwing std::logic_error naming `what` if it cannot
// be used). The operations' table below is their contract.
template <class Handle>
class TimerOperations {
 public:
  // Schedules a one-shot timer; a due time in the past is due now (G13).
  // CapacityError at max_queue_depth names the depth and the bound: the
  // wheel thread is behind, so retry later or shed the work (G18). Thread,
  // blocking, allocation, errors: the operations' table below.
  TimerId schedule_at(TimePoint due, Task task, ScheduleOptions options = {}) {
    return ops_schedule_at(target("schedule_at"), due, std::move(task), options);
  }
  TimerId schedule_after(Duration delay, Task task, ScheduleOptions options = {}) {
    return ops_schedule_after(target("schedule_after"), delay, std::move(task), options);
  }
  // Fixed-rate periodic timer (G14).
  TimerId schedule_every(Duration period, Task task, PeriodicOptions options = {}) {
    return ops_schedule_every(target("schedule_every"), period, std::move(task), options);
  }

  // Returns true iff this call stopped at least one run from starting: a
  // one-shot's callback has not started and never will (a run handed to a
  // worker but not started is skipped); a periodic timer's further runs
  // will not start, though a run already in progress finishes (try_cancel
  // would say `cancelled`, or `running` for that periodic timer). False for
  // a one-shot that fired or started, a timer cancelled before (a second
  // cancel returns false), or a stale/invalid id. The wheel thread reclaims
  // a filed timer's slot lazily (G16); a timer it has not filed yet is freed
  // by this call: its slot goes back to the shared free list, which takes a
  // chunk of list containers (under a mutex) when none is empty; if that
  // allocation fails the slot stays out of use (never reused twice, no timer
  // lost).
  bool cancel(TimerId id) { return ops_cancel(target("cancel"), id); }

  // The same decision, with the outcome told apart (CancelResult above):
  // `running` means a run is in progress now, so what its callback uses must
  // not be freed yet.
  CancelResult try_cancel(TimerId id) { return ops_try_cancel(target("try_cancel"), id); }

  // Like try_cancel; when the result is `running` it returns only after that
  // run has returned, so the caller may then free what the callback uses
  // (the Linux kernel's timer_delete_sync). Waiting blocks on a futex, never
  // spins; when there is no run to wait for it costs what try_cancel costs.
  // Called from the timer's own callback it does not wait (it would wait for
  // itself) and returns `running`. Deadlock the caller can still build: two
  // callbacks each waiting for the other's timer (debug builds abort with a
  // message on that form); a callback waiting for a timer whose callback
  // blocks on something the first holds.
  CancelResult cancel_and_wait(TimerId id) { return ops_cancel_and_wait(target("cancel_and_wait"), id); }

  // True iff the timer was still pending and now has the new due time. A
  // run already handed to a worker or a lane, not started yet, is past
  // rescheduling (false; state() still says pending): only a Lane's own
  // reschedule_*, on the lane's thread, takes its handed run back. A
  // later due time is one CAS pair on the state word and never involves the
  // wheel thread (G19); an earlier one also posts a command.
  bool reschedule_at(TimerId id, TimePoint due) { return ops_reschedule_at(target("reschedule_at"), id, due); }
  bool reschedule_after(TimerId id, Duration delay) {
    return ops_reschedule_after(target("reschedule_after"), id, delay);
  }

  // pending (a run handed to a worker but not started is still pending),
  // running (a run is in progress, cancelled meanwhile or not), fired,
  // cancelled (once a cancelled timer's last run returned); unknown for a
  // reused slot, an id never issued, an id from another runtime, or the
  // default id. noexcept on a Runtime; a Producer or Lane that cannot be
  // used throws std::logic_error.
  TimerState state(TimerId id) const noexcept(std::is_same_v<Handle, Runtime>) {
    return ops_state(static_cast<const Handle&>(*this).ops_target("state"), id);
  }

  // The spellings with a trailing slack, kept for one release.
  [[deprecated("pass the slack in ScheduleOptions: schedule_at(due, task, {.slack = s})")]] TimerId schedule_at(
      TimePoint due, Task task, std::optional<Duration> slack) {
    return schedule_at(due, std::move(task), ScheduleOptions{.slack = slack});
  }
  [[deprecated("pass the slack in ScheduleOptions: schedule_after(delay, task, {.slack = s})")]] TimerId schedule_after(
      Duration delay, Task task, std::optional<Duration> slack) {
    return schedule_after(delay, std::move(task), ScheduleOptions{.slack = slack});
  }
  [[deprecated("pass the slack in PeriodicOptions: schedule_every(period, task, {.slack = s})")]] TimerId
  schedule_every(Duration period, Task task, PeriodicOptions options, std::optional<Duration> slack) {
    options.slack = slack;
    return schedule_every(period, std::move(task), options);
  }

 protected:
  TimerOperations() = default;
  ~TimerOperations() = default;
  TimerOperations(const TimerOperations&) = default;
  TimerOperations& operator=(const TimerOperations&) = default;

 private:
  OpsTarget target(const char* what) { return static_cast<Handle&>(*this).ops_target(what); }
};
}  // namespace detail

// The timer operations' contract. Runtime, Producer and Lane (chime/lane.hpp)
// have these nine, declared once (detail::TimerOperations above); the table
// holds for each of them, and Producer and Lane say only how theirs differ.
//
//   operation            thread  blocks        allocates      throws          returns
//   schedule_at,         any     never (a)     not in steady  (c)             the TimerId
//   schedule_after                             state (b)
//   schedule_every       any     never (a)     as above (b)   (c), and (d)    the TimerId
//   cancel               any     never (e)     as above (b)   nothing         true iff this call stopped a run
//                                                                             from starting (G11)
//   try_cancel           any     never (e)     as above (b)   nothing         CancelResult (G27)
//   cancel_and_wait      any     (f)           as above (b)   nothing         CancelResult (G27)
//   reschedule_at,       any     never (g)     later: never;  (h)             true iff the timer was pending and
//   reschedule_after                           earlier: (b)                   now has the new due
//   state                any     never         never          nothing         TimerState (noexcept)
//
// (a) Lock-free in steady state; the slab's growth takes a mutex.
// (b) "Steady state": slots come from the slab's free list and queue blocks
//     are reused. Rarely the slab grows (a chunk, under a mutex, once per
//     4,096 new slots), a command queue takes a new block, or the free list
//     takes a chunk of containers. A later reschedule posts nothing (G19); an
//     earlier one posts a command.
// (c) In this order: StoppedError after shutdown; std::out_of_range for a due
//     beyond the wheel's range (G23); CapacityError when the shard's queue is
//     at max_queue_depth (G18), then over max_pending; std::bad_alloc out of
//     memory (G22).
// (d) std::invalid_argument for a period <= 0.
// (e) One CAS loop on the timer's state word; no command (G16).
// (f) Blocks (futex, never spins) while the timer's run is in progress, and
//     returns once it returned; from the timer's own callback it does not
//     wait and returns `running`.
// (g) Lock-free, except that two threads rescheduling one timer at the same
//     instant serialize on it (yields, then short sleeps; never a lock).
// (h) std::out_of_range for a due beyond the wheel's range.
//
// A per-thread handle with the producer calls, faster than the Runtime's: it
// owns its own queue token and a cache of free slots. Movable, not copyable.
// It differs from the operations' table above in:
// - thread: one thread at a time, any thread (not detected); its commands
//   take effect in the order it posted them (G12);
// - schedule_*: slots come from its own cache, refilled 32 at a time; a new
//   block, when one is needed, is one of this Producer's queue;
// - cancel: a slot it frees goes to its own cache (32 at a time go back to
//   the shared list as one batch);
// - every call throws std::logic_error on a moved-from Producer or once its
//   Runtime is gone (G20). A Producer must not outlive its Runtime: its
//   destructor then touches nothing of the runtime (its queue token, a few
//   hundred bytes, is leaked); a call racing the Runtime's destruction is
//   not detected.
class Producer : public detail::TimerOperations<Producer> {
 public:
  // Never block, never allocate. Giving a token back (move-assigning over a
  // Producer, the destructor) returns its cached free slots to the runtime:
  // no allocation in steady state.
  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  ~Producer();

  // The nine timer operations (detail::TimerOperations): the table above,
  // and the differences above.

 private:
  friend class Runtime;
  friend class detail::TimerOperations<Producer>;
  detail::OpsTarget ops_target(const char* what) const { return {&core(what), token_.get(), nullptr}; }
  Producer(detail::RuntimeCore* core, std::unique_ptr<detail::ProducerQueueToken> token);
  // Throws if the Runtime is gone or this Producer was moved from. Inline:
  // one load on every call (an out-of-line call costs 36 instructions per
  // schedule+cancel pair under callgrind).
  detail::RuntimeCore& core(const char* what) const {
    if (token_ && (*alive_)()) [[likely]]
      return *core_;
    fail(what);
  }
  [[noreturn]] void fail(const char* what) const;
  detail::RuntimeCore* core_;
  std::unique_ptr<detail::ProducerQueueToken> token_;
  std::shared_ptr<const detail::RuntimeAlive> alive_;
};

class Runtime : public detail::TimerOperations<Runtime> {
 public:
  using Options = RuntimeOptions;

  // Starts the wheel thread and the workers; the wheel starts at the clock's
  // time now. Throws std::invalid_argument for precision <= 0, for
  // workers > RuntimeOptions::max_workers and for a nonzero max_queue_depth
  // below RuntimeOptions::min_max_queue_depth, naming the value. If a thread
  // cannot start (the system's thread limit, address space for its stack),
  // stops and joins those that started and throws std::system_error; it
  // never terminates the process.
  Runtime();
  explicit Runtime(Options options);
  // shutdown(ShutdownMode::cancel_pending).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The nine timer operations (detail::TimerOperations): the table above.

  // Returns once every command posted before the call is applied, the wheel
  // has advanced to the clock's time at the call, and every callback handed
  // to workers before or by that advance has returned (drained runs and
  // periodic catch-up runs due at or before that time included), with their
  // on_error calls and stats counts complete. Throws std::logic_error from
  // inside a callback. May block: the wheel thread settles a flush in a pass
  // that empties the command queue, so while other threads post commands
  // faster than it applies them (a queue that only grows), flush(), drain()
  // and shutdown() wait until they slow down.
  void flush();

  // The earliest due of a pending timer, over every shard and lane, once
  // every command posted before the call is applied (a touch's later due
  // counts); std::nullopt when none is pending, and after shutdown. A run
  // already handed to a worker or a lane is not pending. Waits for a pass of
  // each wheel thread, and looks at every timer it holds: O(pending timers).
  // Throws std::logic_error from inside a callback. May block.
  std::optional<TimePoint> next_due();

  // Simulation on a ManualClock (G28): the runtime moves the clock from due
  // to due, as Tokio's paused time auto-advances. Each throws
  // std::logic_error if the runtime's clock is not a ManualClock, or from
  // inside a callback. Call them from the one thread that moves the clock.
  // A step is a flush at one reading: every timer due by then runs, in due
  // order with ties in call order, and so does every timer a callback
  // schedules due at or before that reading, in the same step, in its place
  // in that order (on a Lane, after the lane's batch it came from).
  //
  // advance_to_next(): sets the clock to next_due() if that is later than
  // its reading, then flushes. Returns the reading it flushed at, or
  // std::nullopt (having done nothing) when no timer is pending.
  std::optional<TimePoint> advance_to_next();
  // run_until(t): steps from due to due while next_due() is at or before
  // t, then sets the clock to t and flushes. Returns the steps taken, the
  // last flush at t included. Throws std::invalid_argument if t is before
  // the clock's reading.
  std::size_t run_until(TimePoint t);
  // run_until_idle(): advance_to_next() until no timer is pending, or
  // max_steps steps (a periodic timer is always pending: bound it, or use
  // run_until). Returns the steps taken.
  std::size_t run_until_idle(std::size_t max_steps = SIZE_MAX);

  // Fires every pending timer now, before its due time (the one exception to
  // "never early"; excluded from the lateness histogram). Periodic timers run
  // once and keep their schedule. Returns the count once they are handed to
  // workers (flush() waits for them); a cancel that wins before such a run
  // starts still stops it, so the count is the runs handed over. May block.
  std::size_t drain();

  // Stops accepting timers, then cancels or fires (before their due time) the
  // pending ones, joins all threads, and returns how many pending timers were
  // not fired. Idempotent: a second call does nothing and returns 0. Throws
  // std::logic_error from inside a callback. May block.
  std::size_t shutdown(ShutdownMode mode = ShutdownMode::cancel_pending);

  // A per-thread producer handle. May allocate.
  Producer producer();

  // A lane: timers whose callbacks run on the thread that runs the lane
  // (chime/lane.hpp). Throws StoppedError after shutdown. May allocate.
  Lane lane();

  // Approximate snapshot of the counters. Any thread. May allocate.
  Stats stats() const;

  // For tests and fuzzing: checks the runtime's internal invariants on its
  // wheel thread, in a pass (it waits for one, as flush() does, but not for
  // runs), and throws std::logic_error naming the first one broken:
  // - every alarm in the wheel and every entry of the overdue list is a slot
  //   the wheel thread filed (its filed bit set, the generation it filed,
  //   Pending, Writing, or cancelled: a zombie), listed once, with the
  //   wheel's handle for it;
  // - every slot the wheel thread filed and that is not cancelled is in the
  //   wheel or on the overdue list (none lost);
  // - the zombie estimate never counts more reclaims than lazy cancels;
  // - the wheel's own invariants (TimingWheel::check_invariants).
  // Sound while other threads use the runtime: only the wheel thread sets a
  // filed bit or frees a filed slot. O(slots + filed timers). Any thread but
  // a callback (std::logic_error there); after shutdown it checks nothing.
  // May allocate.
  void check_invariants();

  // The runtime's clock and precision.
  const Clock& clock() const noexcept;
  Duration precision() const noexcept;

 private:
  friend class Timer;  // chime/timer.hpp: arms through the core
  friend class Lane;   // chime/lane.hpp
  friend class detail::TimerOperations<Runtime>;
  detail::OpsTarget ops_target(const char*) const noexcept { return {core_.get(), nullptr, nullptr}; }
  template <class Key, class Value, class Hash, class KeyEqual>
  friend class KeyedTimers;  // chime/keyed_timers.hpp: the alive token
  // Shared with the handles that check it (detail::RuntimeAlive).
  std::shared_ptr<const detail::RuntimeAlive> alive_token() const;
  std::unique_ptr<detail::RuntimeCore> core_;
};

}  // namespace chime
