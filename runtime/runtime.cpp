// SPDX-License-Identifier: BSL-1.0
// runtime/runtime.cpp: chime::Runtime and chime::Producer (thin forwards to
// RuntimeCore), and the lifecycle: construction, flush, drain, shutdown,
// stats.
//
// Race: shutdown vs producers still scheduling (docs/state-machine.md, "Shutdown vs producers still
// scheduling").
//   producer (schedule)                           shutdown
//   slot.word = Pending (S1, release)             stopped_ = true (seq_cst)
//   post the ADD; fence (seq_cst) (P1)            fence (seq_cst)
//   if stopped_: withdraw_posted: C1, then K1     ... join threads ...
//     won: not accepted, throw StoppedError       sweep: every Pending -> Cancelled (X1), counted
//     lost: the sweep (or a claim) decided it; return its id
// Either the producer sees stopped_, or the sweep sees its Pending word, and
// exactly one CAS wins: every accepted timer is fired, cancelled, or counted
// by shutdown as not fired. The commands still queued need nothing.
//
// Race: shutdown vs cancel: a timer cancelled after the wheel thread's last
// pass stays filed (a zombie nobody reclaims); the sweep frees it (Cancelled
// and still filed) itself. One cancelled before it was filed was freed by its
// canceller (docs/state-machine.md, "Shutdown vs cancel").
//
// Race: shutdown vs a running callback: shutdown joins the workers after the
// wheel thread has stopped dispatching; a run in progress finishes; a
// periodic timer it re-arms is counted by the sweep.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "chime/lane.hpp"
#include "runtime_core.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define CHIME_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHIME_LSAN 1
#endif
#endif
#ifndef CHIME_LSAN
#define CHIME_LSAN 0
#endif
#if CHIME_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace chime {
namespace detail {

namespace {
// The horizon: the last interval the wheel advances into, H = min(K_max,
// 2^61 - 1) - 1, where K_max is the last interval whose start is a
// representable TimePoint. At H the wheel still accepts alarms up to the
// start of H + 1 (at K_max it would accept none), so a timer is always
// filable; runs due at or after start(H) never happen, and producers are
// refused due times from start(H) on (due_limit_for). Throws if the clock
// leaves fewer than two intervals before the end of representable time.
std::int64_t horizon_key(std::int64_t start_ns, std::int64_t precision_ns) {
  const __int128 k_max = (static_cast<__int128>(INT64_MAX) - start_ns) / precision_ns;
  if (k_max < 2) {
    throw std::invalid_argument("chime::Runtime: the clock reads " + std::to_string(start_ns) +
                                " ns at construction; with precision " + std::to_string(precision_ns) +
                                " ns the wheel needs at least two intervals before TimePoint::max() (" +
                                std::to_string(INT64_MAX) + " ns)");
  }
  return static_cast<std::int64_t>(std::min<__int128>(k_max, (__int128{1} << LevelBits::max_num_bits) - 1) - 1);
}

}  // namespace

// now + delay, saturating at the ends of time (the range check then rejects it).
TimePoint saturating_after(TimePoint now, Duration delay) {
  const std::int64_t n = now.time_since_epoch().count();
  const std::int64_t d = delay.count();
  if (d > 0 && n > INT64_MAX - d) return TimePoint::max();
  if (d < 0 && n < INT64_MIN - d) return TimePoint::min();
  return now + delay;
}

namespace {
// Each runtime's tag for its TimerIds: a process-wide counter, never 0 (the
// tag of no runtime), so an id from another runtime is never one of ours
// until 2^32 - 1 runtimes have been created.
std::uint32_t next_runtime_tag() noexcept {
  static std::atomic<std::uint32_t> counter{0};
  for (;;) {
    // relaxed: only uniqueness matters, which the RMW gives.
    const std::uint32_t t = counter.fetch_add(1, std::memory_order_relaxed) + 1;
    if (t != 0) return t;
  }
}

// RuntimeOptions::shards = 0: CHIME_SHARDS if set and not empty, else 1 (runtime.hpp).
unsigned default_shards() {
  const char* env = std::getenv("CHIME_SHARDS");
  if (env == nullptr || *env == '\0') return 1;  // unset or empty: the default
  const std::string text(env);
  // Decimal digits only (no sign, no spaces; leading zeros at any length):
  // 1 to max_shards. n stops growing past max_shards, so it cannot overflow.
  unsigned long n = 0;
  bool digits = true;
  for (const char c : text) {
    digits = digits && c >= '0' && c <= '9';
    if (digits) n = std::min<unsigned long>(n * 10 + static_cast<unsigned long>(c - '0'), 1000);
  }
  if (!digits || n < 1 || n > RuntimeOptions::max_shards) {
    throw std::invalid_argument("chime::Runtime: the environment variable CHIME_SHARDS = \"" + text +
                                "\" is not a number from 1 to " + std::to_string(RuntimeOptions::max_shards) +
                                " (it sets RuntimeOptions::shards when that is 0)");
  }
  return static_cast<unsigned>(n);
}

RuntimeOptions validated(RuntimeOptions o) {
  if (o.precision <= Duration::zero()) {
    throw std::invalid_argument("chime::Runtime: precision must be positive, got " +
                                std::to_string(o.precision.count()) + " ns");
  }
  if (o.slack < Duration::zero()) {
    throw std::invalid_argument("chime::Runtime: slack must not be negative, got " + std::to_string(o.slack.count()) +
                                " ns");
  }
  if (o.workers > RuntimeOptions::max_workers) {
    throw std::invalid_argument("chime::Runtime: workers = " + std::to_string(o.workers) + " is more than " +
                                std::to_string(RuntimeOptions::max_workers) +
                                " (RuntimeOptions::max_workers); callbacks that block want a pool of their own");
  }
  if (o.max_queue_depth != 0 && o.max_queue_depth < RuntimeOptions::min_max_queue_depth) {
    throw std::invalid_argument(
        "chime::Runtime: max_queue_depth = " + std::to_string(o.max_queue_depth) + " is below " +
        std::to_string(RuntimeOptions::min_max_queue_depth) +
        " (RuntimeOptions::min_max_queue_depth): producers look at the queue every 64 posts, so the bound would be "
        "mostly that slack; 0 means the default, " +
        std::to_string(RuntimeOptions::default_max_queue_depth) + ", and SIZE_MAX no bound");
  }
  if (o.shards > RuntimeOptions::max_shards) {
    throw std::invalid_argument("chime::Runtime: shards = " + std::to_string(o.shards) + " is more than " +
                                std::to_string(RuntimeOptions::max_shards) + " (RuntimeOptions::max_shards)");
  }
  if (o.shards == 0) o.shards = default_shards();
  return o;
}
}  // namespace

RuntimeConfig::RuntimeConfig(RuntimeOptions validated_options)
    : options(std::move(validated_options)),
      clock(options.clock != nullptr ? options.clock : &steady_clock),
      clock_kind(dynamic_cast<const SteadyClock*>(clock) != nullptr   ? ClockKind::steady
                 : dynamic_cast<const ManualClock*>(clock) != nullptr ? ClockKind::manual
                                                                      : ClockKind::other),
      precision(options.precision),
      fixed_slack_code(options.slack == Duration::zero()
                           ? SlackCode::runtime_default
                           : slack_code_for(options.slack.count(), options.precision.count())),
      start_ns(clock->now().time_since_epoch().count()),
      max_offset_intervals((std::int64_t{1} << options.level_bits.num_bits()) - 1),
      horizon_key(detail::horizon_key(start_ns, precision.count())),
      max_wheel_now_ns(static_cast<std::int64_t>(start_ns + static_cast<__int128>(horizon_key) * precision.count())),
      tag(next_runtime_tag()),
      // A manual clock never wakes the wheel on its own (clock.hpp): commands
      // wait for a flush or for a schedule that needs the wheel earlier.
      wake_on_post_count(clock_kind != ClockKind::manual) {}

RuntimeCore::RuntimeCore(RuntimeOptions options)
    : config_(validated(std::move(options))), due_limit_ns_(due_limit_for(config_.start_ns)) {
  slab_.reserve(config_.options.reserve);
  if (tls_simulation_request != nullptr) [[unlikely]] {  // a test seam: no thread (simulation.hpp)
    if (config_.options.workers != 0) {
      throw std::invalid_argument("chime::detail::Simulation: workers must be 0 (callbacks run in the passes), got " +
                                  std::to_string(config_.options.workers));
    }
    *tls_simulation_request = this;
    tls_simulation_request = nullptr;
    simulated_ = true;
    simulation_thread_ = std::this_thread::get_id();
  }
  shards_.reserve(config_.options.shards);
  for (unsigned k = 0; k < config_.options.shards; ++k) shards_.add(std::make_unique<WheelThread>(*this, k));
  if (simulated_) return;
  pool_.threads.reserve(config_.options.workers);
  unsigned started = 0;  // wheel threads
  try {
    for (unsigned i = 0; i < config_.options.workers; ++i)
      pool_.threads.emplace_back([this] { runner_.worker_main(pool_); });
    for (auto& shard : shards_) {
      shard->start();
      ++started;
    }
  } catch (const std::system_error& e) {
    // A thread could not start (out of threads, or of address space for its
    // stack): stop the wheel threads and join the workers that started,
    // then report it. Destroying a joinable std::thread would call
    // std::terminate.
    stop_started_threads(started);
    throw std::system_error(e.code(), "chime::Runtime: could not start thread " +
                                          std::to_string(pool_.threads.size() + started + 1) + " of " +
                                          std::to_string(config_.options.workers + config_.options.shards) +
                                          " (workers = " + std::to_string(config_.options.workers) + ", plus " +
                                          std::to_string(config_.options.shards) + " wheel threads)");
  } catch (...) {
    stop_started_threads(started);  // out of memory for a thread's state
    throw;
  }
}

// A failed construction: stops the first `started` wheel threads (a stop
// request each; nothing was scheduled), then the workers.
void RuntimeCore::stop_started_threads(unsigned started) {
  for (unsigned k = 0; k < started; ++k) {
    StopRequest request;
    CommandPoster::post_request(*shards_[k], CommandKind::stop, &request);
    shards_[k]->join();
  }
  stop_workers();
}

// Queues one stop record per worker behind every run, then joins them.
// After every wheel thread stopped dispatching (shutdown), or before any
// started (a failed construction). With one shard, the records go through
// its wheel thread's producer token, behind its runs (FIFO). With several,
// the hand-off queue's sub-queues have no order between them, so a worker
// could take its stop record before another shard's runs: the runs are
// first all taken (the queue is empty: nothing enqueues any more), then the
// records are queued.
void RuntimeCore::stop_workers() {
  if (shards_.size() > 1) {
    while (pool_.handoff.size_approx() != 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (std::size_t i = 0; i < pool_.threads.size(); ++i) {
    Dispatch stop;
    stop.flags = Dispatch::stop;
    retry_until_memory([&] { return pool_.handoff.enqueue(*shards_[0]->wt().handoff_token, stop); });
    ++shards_[0]->wt().handoff_tail;  // the wheel thread has exited: its token's count is ours now
  }
  for (auto& t : pool_.threads) t.join();
}

RuntimeCore::~RuntimeCore() {
  shutdown(ShutdownMode::cancel_pending);
  // release: a handle that then sees it cleared (acquire) sees the shutdown
  // done. From now on every Producer, Timer, Lane or KeyedTimers of this
  // runtime throws std::logic_error on use, and its destructor touches
  // nothing of the runtime (runtime.hpp, Preconditions).
  alive_->alive.store(false, std::memory_order_release);
}

void throw_runtime_gone(const char* what) {
  throw std::logic_error(std::string("chime::") + what +
                         " after its Runtime was destroyed (a Producer, Timer, Lane or KeyedTimers must not "
                         "outlive its Runtime)");
}

// Every shard in turn, each with the same target: every timer due at or
// before the call's clock reading has run, whatever its shard.
namespace {
// Each thread's flush and drain request, reused (no allocation per call):
// taken while in use, given back when served. One given up on (out of
// memory) belongs to the wheel thread, and the thread's next call makes a
// new one.
thread_local std::unique_ptr<FlushRequest> tls_flush_request;
thread_local std::unique_ptr<DrainRequest> tls_drain_request;
template <class Request>
std::unique_ptr<Request> take_request(std::unique_ptr<Request>& cached) {
  if (!cached) return std::make_unique<Request>();
  std::unique_ptr<Request> r = std::move(cached);
  r->reset();
  return r;
}
}  // namespace

void RuntimeCore::flush() {
  throw_if_in_callback("flush");
  if (stopped_.load(std::memory_order_acquire)) return;  // after shutdown there is nothing left to wait for
  // On a lane's thread the flush waits for runs only this thread runs: it
  // runs them while it waits (lanes.cpp).
  const ThreadLanes lanes = lanes_.lanes_of_this_thread();
  const std::int64_t target_ns = config_.clock->now().time_since_epoch().count();
  for (auto& shard : shards_) {
    // On the heap: a flush that gives up on a wheel thread out of memory
    // leaves it to that thread (Completion). Reused: one per thread.
    std::unique_ptr<FlushRequest> request = take_request(tls_flush_request);
    const std::int64_t waiting_since = config_.steady_clock.now().time_since_epoch().count();
    if (!lanes.empty() && !simulated_) request->completion.notify_fd = lane_flush_notify_fd();
    request->target_ns = target_ns;
    CommandPoster::post_request_or_throw(*shard, CommandKind::flush, request.get());
    bool served = true;
    if (simulated_) [[unlikely]] {
      // Passes that give up (simulate_until throws) may leave the request
      // in a shard's held commands: it is leaked, never freed under them.
      try {
        simulate_until(request->completion, lanes);
      } catch (...) {
        [[maybe_unused]] FlushRequest* const leaked = request.release();
        throw;
      }
    } else if (lanes.empty()) {
      served = request->completion.wait_or_abandon(shard->seam.exited,
                                                   [&] { return shard->out_of_memory_too_long(waiting_since); });
    } else {
      served = lanes_.run_flush_on_lanes(*request, lanes, *shard, waiting_since);
    }
    if (!served) [[unlikely]] {
      [[maybe_unused]] FlushRequest* const abandoned = request.release();  // the wheel thread deletes it
      throw WheelOutOfMemory();
    }
    tls_flush_request = std::move(request);
  }
}

std::size_t RuntimeCore::drain() {
  throw_if_in_callback("drain");
  if (stopped_.load(std::memory_order_acquire)) return 0;
  // A manual clock: what is due by the clock's reading runs first, on time
  // (design.md, "Clocks"); the drain then fires the rest early.
  if (manual()) flush();
  std::size_t count = 0;
  for (auto& shard : shards_) {
    std::unique_ptr<DrainRequest> request = take_request(tls_drain_request);  // as flush's
    const std::int64_t waiting_since = config_.steady_clock.now().time_since_epoch().count();
    CommandPoster::post_request_or_throw(*shard, CommandKind::drain, request.get());
    if (simulated_) [[unlikely]] {
      try {  // as flush's
        simulate_until(request->completion, ThreadLanes{});
      } catch (...) {
        [[maybe_unused]] DrainRequest* const leaked = request.release();
        throw;
      }
    } else if (!request->completion.wait_or_abandon(
                   shard->seam.exited, [&] { return shard->out_of_memory_too_long(waiting_since); })) [[unlikely]] {
      [[maybe_unused]] DrainRequest* const abandoned = request.release();  // the wheel thread deletes it
      throw WheelOutOfMemory();
    }
    count += request->count;
    tls_drain_request = std::move(request);
  }
  return count;
}

// Posts a request the shard's wheel thread serves in a pass and waits until
// it has (or until that thread has exited). Not on a lane's thread's
// behalf: the wait runs no lane.
void RuntimeCore::post_request_and_wait(WheelThread& shard, CommandKind kind, void* request, Completion& completion) {
  CommandPoster::post_request(shard, kind, request);
  if (simulated_) [[unlikely]] {
    simulate_until(completion, ThreadLanes{});
  } else {
    completion.wait(shard.seam.exited);
  }
}

std::size_t RuntimeCore::shutdown(ShutdownMode mode) {
  throw_if_in_callback("shutdown");
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shutdown_done_.load(std::memory_order_relaxed)) return 0;
  // A manual clock: fire_pending begins with a flush, as drain() does.
  if (mode == ShutdownMode::fire_pending && manual()) flush();
  // No timer due after this call runs, however long the queue: the wheel
  // threads stop at their next look (WheelThread::run_pass) instead of waiting for the
  // stop command behind the backlog; the sweep below cancels the rest.
  if (mode == ShutdownMode::cancel_pending) cancel_requested_.store(true, std::memory_order_seq_cst);
  stopped_.store(true, std::memory_order_seq_cst);  // the other half of S1's Dekker pair
  // One stop request per shard, all posted before any is waited for: the
  // shards stop together (with fire_pending, each drains its own wheel).
  std::vector<StopRequest> requests(shards_.size());
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    requests[k].mode = mode;
    CommandPoster::post_request(*shards_[k], CommandKind::stop, &requests[k]);
  }
  if (simulated_) [[unlikely]] {
    simulate_until_stopped();
  } else {
    for (auto& shard : shards_) shard->join();
  }
  // The wheel threads have stopped dispatching; queue one stop per worker
  // behind every run, then join them.
  stop_workers();
  // A lane's batch in progress finishes first (lanes.cpp, the Dekker pair on
  // each lane's runs_active): its re-arms are then leftovers below, and no
  // lane starts a run while the sweep looks at Handed words.
  // Not under the lanes' mutex: a callback in progress may open or close a lane.
  const std::vector<LaneCore*> lanes = lanes_.all_lanes();
  for (LaneCore* lane : lanes) {
    while (lane->runs_active.load(std::memory_order_seq_cst) != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Commands still queued need nothing: a timer whose ADD was never
  // applied is either still Pending (swept below) or was cancelled before
  // it was filed, and then its canceller freed its slot (timer_state.hpp,
  // "Who frees the slot").
  // Sweep: every timer still pending is cancelled and counted (X1). The
  // wheel thread has exited (joined), so its fields (filed_generation) are
  // ours now.
  std::size_t not_fired = 0;
  const std::uint32_t extent = slab_.extent();
  for (std::uint32_t i = 0; i < extent; ++i) {
    TimerSlot& slot = slab_[i];
    // A reschedule or cancel racing shutdown settles first, and again after a failed CAS.
    for (std::uint64_t w = settled_word(slot);; w = settled(slot, w)) {
      const SlotState s = StateWord::state(w);
      if (s == SlotState::cancelled &&
          slot.wheel.filed_generation.load(std::memory_order_relaxed) == StateWord::generation(w)) {
        // Cancelled while filed after the wheel thread's last pass (a cancel
        // racing shutdown): a zombie only the wheel thread would have
        // reclaimed. Free it here, so its task does not outlive shutdown.
        slot.wheel.filed_generation.store(0, std::memory_order_relaxed);
        slot.task.reset();
        slab_.release(i);
        break;
      }
      if (s == SlotState::handed) {
        // Only a lane's ready runs are still Handed (the workers are joined,
        // and no lane starts a run until shutdown is done). (X2) acq_rel, as
        // C4: cancel_pending cancels them; the lane frees them when it
        // dequeues them (or is destroyed). fire_pending leaves them to run.
        if (mode == ShutdownMode::fire_pending) break;
        if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled),
                                            std::memory_order_acq_rel, std::memory_order_acquire)) {
          ++not_fired;
          ends_.end_cancelled_timer();
          break;
        }
        continue;
      }
      if (s != SlotState::pending) break;
      if (slot.word.compare_exchange_weak(w, StateWord::with_state(w, SlotState::cancelled), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        ++not_fired;
        ends_.end_cancelled_timer();
        slot.task.reset();  // release what the callback captured now, not at destruction
        break;
      }
    }
  }
  // release: a lane thread waiting for it (lanes.cpp) then sees the sweep done.
  shutdown_done_.store(true, std::memory_order_release);
  return not_fired;
}

Stats RuntimeCore::stats() const {
  Stats s;
  s.scheduled = counters_.sum(Counter::scheduled);
  s.fired = counters_.sum(Counter::fired);
  s.cancelled = counters_.sum(Counter::cancelled);
  s.rescheduled = counters_.sum(Counter::rescheduled);
  const std::uint64_t ended = counters_.sum(Counter::ended);
  s.pending = s.scheduled > ended ? s.scheduled - ended : 0;
  s.callback_errors = counters_.sum(Counter::callback_errors);
  s.shards.reserve(shards_.size());
  for (const auto& shard : shards_) {
    ShardStats k{shard->seam.commands.size_approx(),
                 shard->seam.wakeups.load(std::memory_order_relaxed),
                 shard->busy(),
                 shard->seam.commands.bound().refused(),
                 Duration(shard->seam.longest_pass_ns.load(std::memory_order_relaxed)),
                 shard->seam.most_refiled_in_a_pass.load(std::memory_order_relaxed)};
    s.queue_depth += k.queue_depth;
    s.wakeups += k.wakeups;
    s.refused_overload += k.refused_overload;
    s.zombie_sweeps += shard->seam.zombie_sweeps.load(std::memory_order_relaxed);
    s.shards.push_back(k);
  }
  s.slow_runs = counters_.sum(Counter::slow_runs);
  s.lateness = lateness_.summary();
  s.run_time = run_time_.summary();
  return s;
}

}  // namespace detail

// ---- chime::Producer ----

namespace detail {
namespace {
// A Producer outliving its runtime: the token's queue (and slot slab) went
// with the runtime, and its destructor would touch the freed queue, so it is
// leaked (a few hundred bytes, once per such misuse), on purpose.
void leak_token(std::unique_ptr<ProducerQueueToken>& token) noexcept {
  [[maybe_unused]] ProducerQueueToken* const leaked = token.release();
#if CHIME_LSAN
  __lsan_ignore_object(leaked);  // not a leak to report
#endif
}
}  // namespace
}  // namespace detail

Producer::Producer(detail::RuntimeCore* core, std::unique_ptr<detail::ProducerQueueToken> token)
    : core_(core), token_(std::move(token)), alive_(core->alive()) {}
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&& other) noexcept {
  if (this != &other) {
    if (token_) {
      if ((*alive_)()) {
        core_->return_token(*token_);
      } else {
        detail::leak_token(token_);
      }
    }
    core_ = other.core_;
    token_ = std::move(other.token_);
    alive_ = std::move(other.alive_);
  }
  return *this;
}
Producer::~Producer() {
  if (!token_) return;
  if ((*alive_)()) {
    core_->return_token(*token_);
  } else {
    detail::leak_token(token_);
  }
}

void Producer::fail(const char* what) const {
  if (!token_) {
    throw std::logic_error(std::string("chime::Producer::") + what + " on a moved-from Producer");
  }
  detail::throw_runtime_gone("Producer");
}

TimerId Producer::schedule_at(TimePoint due, Task task, std::optional<Duration> slack) {
  detail::RuntimeCore& c = core("schedule_at");
  return c.schedule(due, 0, Missed::skip, std::move(task), token_.get(), nullptr, 0,
                    c.slack_code(slack, "schedule_at"));
}
TimerId Producer::schedule_after(Duration delay, Task task, std::optional<Duration> slack) {
  detail::RuntimeCore& c = core("schedule_after");
  return c.schedule(detail::saturating_after(c.now(), delay), 0, Missed::skip, std::move(task), token_.get(), nullptr,
                    0, c.slack_code_after(slack, delay, "schedule_after"));
}

namespace detail {
TimerId schedule_periodic(RuntimeCore& core, Duration period, Task&& task, const PeriodicOptions& options,
                          ProducerQueueToken* token, LaneCore* lane, std::optional<Duration> slack) {
  const std::uint8_t slack_code = core.slack_code(slack, "schedule_every");
  if (period <= Duration::zero()) {
    throw std::invalid_argument("chime: schedule_every needs a positive period, got " + std::to_string(period.count()) +
                                " ns");
  }
  const TimePoint first = options.first_due ? *options.first_due : detail::saturating_after(core.now(), period);
  return core.schedule(first, period.count(), options.on_missed, std::move(task), token, lane, 0, slack_code);
}
}  // namespace detail

using detail::schedule_periodic;

TimerId Producer::schedule_every(Duration period, Task task, PeriodicOptions options, std::optional<Duration> slack) {
  return schedule_periodic(core("schedule_every"), period, std::move(task), options, token_.get(), nullptr, slack);
}
bool Producer::cancel(TimerId id) { return core("cancel").cancel(id, token_.get()); }
CancelResult Producer::try_cancel(TimerId id) { return core("try_cancel").try_cancel(id); }
CancelResult Producer::cancel_and_wait(TimerId id) { return core("cancel_and_wait").cancel_and_wait(id); }
bool Producer::reschedule_at(TimerId id, TimePoint due) {
  return core("reschedule_at").reschedule(id, due, token_.get());
}
bool Producer::reschedule_after(TimerId id, Duration delay) {
  detail::RuntimeCore& c = core("reschedule_after");
  return c.reschedule(id, detail::saturating_after(c.now(), delay), token_.get());
}

// ---- chime::Runtime ----

Runtime::Runtime() : Runtime(Options{}) {}
Runtime::Runtime(Options options) : core_(std::make_unique<detail::RuntimeCore>(std::move(options))) {}
Runtime::~Runtime() = default;

TimerId Runtime::schedule_at(TimePoint due, Task task, std::optional<Duration> slack) {
  return core_->schedule(due, 0, Missed::skip, std::move(task), nullptr, nullptr, 0,
                         core_->slack_code(slack, "schedule_at"));
}
TimerId Runtime::schedule_after(Duration delay, Task task, std::optional<Duration> slack) {
  return core_->schedule(detail::saturating_after(core_->now(), delay), 0, Missed::skip, std::move(task), nullptr,
                         nullptr, 0, core_->slack_code_after(slack, delay, "schedule_after"));
}
TimerId Runtime::schedule_every(Duration period, Task task, PeriodicOptions options, std::optional<Duration> slack) {
  return schedule_periodic(*core_, period, std::move(task), options, nullptr, nullptr, slack);
}
bool Runtime::cancel(TimerId id) { return core_->cancel(id, nullptr); }
CancelResult Runtime::try_cancel(TimerId id) { return core_->try_cancel(id); }
CancelResult Runtime::cancel_and_wait(TimerId id) { return core_->cancel_and_wait(id); }
bool Runtime::reschedule_at(TimerId id, TimePoint due) { return core_->reschedule(id, due, nullptr); }
bool Runtime::reschedule_after(TimerId id, Duration delay) {
  return core_->reschedule(id, detail::saturating_after(core_->now(), delay), nullptr);
}
TimerState Runtime::state(TimerId id) const noexcept { return core_->state(id); }
void Runtime::flush() { core_->flush(); }
std::size_t Runtime::drain() { return core_->drain(); }
std::size_t Runtime::shutdown(ShutdownMode mode) { return core_->shutdown(mode); }
Producer Runtime::producer() { return Producer(core_.get(), core_->shards().make_token()); }
Lane Runtime::lane() { return Lane(core_.get(), core_->lanes().open_lane(), core_->alive()); }
Stats Runtime::stats() const { return core_->stats(); }
std::shared_ptr<const detail::RuntimeAlive> Runtime::alive_token() const { return core_->alive(); }
const Clock& Runtime::clock() const noexcept { return core_->clock(); }
Duration Runtime::precision() const noexcept { return core_->precision(); }

}  // namespace chime
