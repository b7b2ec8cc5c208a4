// SPDX-License-Identifier: BSL-1.0
// chime/keyed_timers.hpp: timers named by a key, each carrying a value
// (go-zero's keyed TimingWheel: SetTimer / MoveTimer / RemoveTimer / Drain),
// as a header-only layer over the public chime::Runtime API.
//
// What it is: a thread-safe map from Key to a pending {value, due time}.
// When a key's time comes, `execute(key, std::move(value))` runs on one of the
// runtime's workers and the key is gone. The typical use is idle-connection
// timeouts: `set(conn, handle, 30s)` on accept, `reschedule_after(conn, 30s)` on every
// packet (the hot path), `remove(conn)` on close; `execute` closes the idle
// ones.
//
// Guarantees, each with its ID (a key is *pending* from the `set` that inserts it until it fires,
// is removed, or is drained; `contains` reports exactly this):
// G50 (keyed exactly once): each value given to `set` ends in exactly one of
//   {execute (it fired), destroyed by the `set` that replaced it, destroyed by
//   the `remove` that removed it, passed to `drain`'s fn, destroyed by the
//   destructor}. A replaced or removed value never executes; `execute` runs
//   only for a key that was pending when it fired, with the value it held then.
// G51 (keyed never early): by the runtime's clock, a key set or moved with `delay` at
//   time t does not execute before the runtime would fire a timer scheduled
//   with schedule_after(delay) at t (see runtime.hpp); after `reschedule_after(key, d)`
//   returns true, the key does not execute at its old time unless that is
//   also its new one (earlier or later both work).
// G52 (keyed return values): return values are linearizable per key: each call takes effect at one
//   instant inside it, under the key's shard mutex, and a fire takes effect at
//   the instant its callback removes the key from the map. `set` returns true
//   iff the key was not pending; `reschedule_after` and `remove` return true iff it was.
//   Concurrent `reschedule_after`s of one key: the key ends with the due time of one of
//   them.
// G53 (keyed touch): `reschedule_after` to a later time (the idle-timeout "touch") takes the key's shard
//   mutex once for a lookup, then calls Runtime::reschedule_after, which for a
//   later due time is a lock-free CAS pair that never involves the wheel
//   thread. Nothing allocates on that path.
// - The key -> entry map is split into `shard_count` (64) shards by a mixed
//   hash, each with its own std::mutex and std::unordered_map, so operations
//   on different keys rarely contend. A shard mutex is held only for one map
//   operation: never while calling into the runtime, `execute`, `drain`'s fn,
//   or a Value's destructor. So `execute` and fn may call back into this
//   object (re-arm a key, remove another one).
// G54 (keyed destruction): destruction cancels every pending key (their values are destroyed, never
//   executed) and waits for every `execute` of this object in progress to
//   return; no `execute` starts after the destructor returns.
//
// Not guaranteed: the order in which keys due in the same interval execute
// (they go to several workers); `size()` is a sum of per-shard counters read
// without locking, exact only when nothing runs concurrently; `drain` is not
// atomic across shards (a key set concurrently may or may not be drained).
// Runtime::drain() and shutdown(ShutdownMode::fire_pending) fire the keys'
// timers early like any other timer, and then they execute early.
//
// Requirements: Key is CopyConstructible (the map and each timer hold a copy;
// with sizeof(Key) <= 32 and a nothrow move, a timer's task is stored inline
// in the runtime without allocation), hashable by Hash and comparable by
// KeyEqual (both default-constructed). Value is MoveConstructible and
// MoveAssignable. The KeyedTimers must be destroyed before its Runtime
// (detected in every build: set and reschedule_after afterwards throw std::logic_error;
// remove, contains, drain and the destructor touch nothing of the runtime;
// a call racing the Runtime's destruction is not detected), and not from
// inside its own `execute` (it would wait for itself; this is detected and
// calls std::terminate). No call may run concurrently with the
// destructor except from this object's own `execute` callbacks, which the
// destructor waits for.
//
// Error model: `set` and `reschedule_after` propagate the runtime's exceptions
// (chime::StoppedError after Runtime::shutdown, std::out_of_range for a delay
// beyond the wheel's range, chime::CapacityError over max_pending or with
// the command queue at max_queue_depth); when one
// is thrown the key is left not pending (a throwing `reschedule_after` on the fast path
// changes nothing). An exception from `execute` propagates to the runtime,
// which passes it to RuntimeOptions::on_error; the key counts as fired. An
// exception from `drain`'s fn propagates; the drained keys not yet passed to
// fn are dropped (destroyed, not pending).
// Cancelling a timer is always best effort here: correctness comes from the
// map (see "Races"), so a cancel that loses or throws changes nothing.
//
// How it works: each pending key has an entry {value, TimerId id, version}
// in its shard. Every timer scheduled for a key carries {shard, key, version};
// `version` comes from a per-shard counter that never repeats, and an entry
// gets a fresh one whenever it gets a new timer. A firing timer locks the
// shard, and executes only if the entry is still there with the same version:
// then it extracts the entry, unlocks, and calls execute. Any other timer is
// stale and does nothing. `id` is invalid while the timer that goes with a
// fresh version is being scheduled (between the two locks of `set`); it is
// filled in by the second lock if the version is still current.
//
// Races (A = the operation, F = the firing timer's callback, both on key k):
// - set vs fire: set gives k a fresh version under the lock and cancels the old
//   timer after unlocking. F locked first: it took the old value (set then
//   inserts; returns true). set locked first: F finds a newer version and does
//   nothing, so the old value (destroyed by set) never executes.
// - reschedule_after vs fire: it reads {id, version} under the lock and reschedules id
//   outside it. If reschedule succeeds, F had not started, so k fires only at
//   the new time. If it fails, F may be in flight: it relocks; if k is gone
//   (F or a remove won) it returns false; if k has another version (a set or
//   reschedule came between) it returns true, ordered before that one; otherwise it
//   gives k a fresh version and schedules a new timer, and the in-flight F
//   finds a newer version and does nothing.
// - remove vs fire: remove extracts the entry under the lock, then cancels
//   outside it. F locked first: k is gone, remove returns false. remove locked
//   first: F finds no entry and does nothing, even if the cancel lost.
// - set/reschedule_after vs the window where k's timer is being scheduled (id invalid): a
//   second set or reschedule gives k a fresh version and its own timer; the first
//   one, at its second lock, sees the version changed and cancels its timer.
//   A remove or drain in that window erases k; the first one finds k gone and
//   cancels its timer. Its F, if it ran meanwhile, found k gone or newer.
// - destructor vs fire: the destructor sets `closed`, then for each shard
//   takes the lock, extracts every entry (cancelling its timer), releases the
//   lock and waits until the shard's count of running `execute`s is 0. F
//   increments that count under the same lock, after checking `closed` and
//   the entry, so an F that locked before the sweep is waited for and one
//   that locks after does nothing. Keys set by those callbacks while the
//   destructor waits are removed by a second sweep. Timers that stay in the
//   runtime (a cancel that lost) hold a reference on their shard, so the
//   shared state they touch lives until the last one is gone (see Core).
// - drain vs fire: like remove, for every entry of a shard at once.
//
// Memory ordering: everything a thread did before `set(k, ...)` or a `reschedule_after(k)`
// that returned true happens-before `execute` for k runs (the shard mutex,
// plus the runtime's schedule/run ordering). Everything an `execute` did
// happens-before the destructor returns (the running count: a seq_cst
// fetch_sub (K1) read by the destructor's seq_cst load (K2)).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "chime/runtime.hpp"
#include "chime/task.hpp"
#include "chime/time.hpp"

namespace chime {

namespace detail {
// The KeyedTimers core whose `execute` is running on this thread (null if
// none): lets the destructor detect destruction from inside its own execute.
inline thread_local const void* keyed_timers_executing = nullptr;
}  // namespace detail

template <class Key, class Value, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
class KeyedTimers {
 public:
  using key_type = Key;
  using mapped_type = Value;
  using Execute = std::function<void(const Key&, Value&&)>;

  static constexpr std::size_t shard_count = 64;

  // Runs `execute(key, std::move(value))` on a worker of `runtime` for each key
  // whose time comes. Throws std::invalid_argument if execute is empty. The
  // runtime must outlive this object. May allocate.
  KeyedTimers(Runtime& runtime, Execute execute) : runtime_(&runtime), alive_(runtime.alive_token()) {
    if (!execute) throw std::invalid_argument("chime::KeyedTimers: execute is empty");
    core_ = new Core(std::move(execute));
  }

  // Cancels every pending key (values destroyed, never executed) and waits for
  // every execute of this object in progress to return. Must not be called
  // from inside this object's execute (calls std::terminate). May block.
  ~KeyedTimers() {
    if (detail::keyed_timers_executing == core_) {
      std::fputs("chime::KeyedTimers destroyed from inside its own execute: it would wait for itself\n",
                 stderr);
      std::terminate();
    }
    core_->closed.store(true, std::memory_order_seq_cst);  // (K0) pairs with K3 in Core::fire's guard
    for (Shard& s : core_->shards) {
      sweep(s);
      // (K2) seq_cst: reads the count that K1 decrements (release half);
      // with K0/K3 (a Dekker pair) either we read 0 or K1's thread sees
      // `closed` and notifies.
      for (std::uint32_t n = s.running.load(std::memory_order_seq_cst); n != 0;
           n = s.running.load(std::memory_order_seq_cst)) {
        s.running.wait(n, std::memory_order_seq_cst);
      }
    }
    // Keys set by this object's own callbacks while we waited for them.
    for (Shard& s : core_->shards) sweep(s);
    // The last release may free the core: index through a copy of the pointer.
    Core* const core = core_;
    for (std::size_t i = 0; i < shard_count; ++i) Core::release(core->shards[i]);
  }

  KeyedTimers(const KeyedTimers&) = delete;
  KeyedTimers& operator=(const KeyedTimers&) = delete;
  KeyedTimers(KeyedTimers&&) = delete;
  KeyedTimers& operator=(KeyedTimers&&) = delete;

  // Makes `key` pending with `value`, due `delay` from now (runtime clock).
  // If the key was pending, its old value is replaced (and destroyed on this
  // thread, never executed) and its old due time forgotten. Returns true iff
  // the key was not pending. Any thread. May block (the key's shard mutex,
  // twice, for one map operation each). May allocate (a map node for a new
  // key; the runtime's queue block).
  bool set(const Key& key, Value value, Duration delay) {
    check_runtime();
    Shard& s = shard_for(key);
    std::optional<Value> old_value;  // destroyed after the lock is released
    TimerId old_id;
    std::uint64_t version;
    bool inserted;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      version = ++s.next_version;
      auto [it, fresh] = s.map.try_emplace(key, std::move(value), version);  // moves value only if inserted
      inserted = fresh;
      if (inserted) {
        s.size.fetch_add(1, std::memory_order_relaxed);
      } else {
        Entry& e = it->second;
        old_value.emplace(std::move(e.value));
        e.value = std::move(value);
        old_id = std::exchange(e.id, TimerId{});
        e.version = version;  // the old timer, if it fires, now does nothing
      }
    }
    if (old_id) cancel_quietly(old_id);
    arm(s, key, version, delay);
    return inserted;
  }

  // Moves a pending key's due time to `delay` from now, earlier or later.
  // Returns true iff the key was pending (false: never set, fired, removed or
  // drained). Any thread. May block (the key's shard mutex, for one lookup).
  // Never allocates when pushing the due time later; earlier posts a runtime
  // command (its queue may allocate a block). On the rare path where the
  // key's timer already fired but its callback has not run yet, schedules a
  // new timer (may allocate, like set).
  bool reschedule_after(const Key& key, Duration delay) {
    check_runtime();
    Shard& s = shard_for(key);
    TimerId id;
    std::uint64_t version;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.map.find(key);
      if (it == s.map.end()) return false;
      id = it->second.id;
      version = it->second.version;
    }
    // The hot path: succeeds iff the timer has not started; it then fires
    // only at its new due time.
    if (id && runtime_->reschedule_after(id, delay)) return true;
    // The timer is in flight (its callback will find a newer version), or is
    // being scheduled by a concurrent set/reschedule_after (id invalid), or a concurrent
    // set/remove/drain cancelled it.
    std::uint64_t fresh;
    TimerId stale;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.map.find(key);
      if (it == s.map.end()) return false;               // it fired or was removed meanwhile
      if (it->second.version != version) return true;    // replaced meanwhile: ordered before that
      fresh = it->second.version = ++s.next_version;
      stale = std::exchange(it->second.id, TimerId{});
    }
    if (stale && stale != id) cancel_quietly(stale);
    arm(s, key, fresh, delay);
    return true;
  }
  [[deprecated("renamed: reschedule_after(key, delay)")]] bool move(const Key& key, Duration delay) {
    return reschedule_after(key, delay);
  }

  // Removes a pending key; its value is destroyed on this thread and never
  // executes. Returns true iff the key was pending. Any thread. May block (the
  // key's shard mutex, for one map operation). Allocates nothing itself (the
  // runtime's cancel posts no command; a slot it frees may take a chunk of
  // free-list containers, as Runtime::cancel says).
  bool remove(const Key& key) {
    Shard& s = shard_for(key);
    typename Map::node_type node;  // destroyed after the lock is released
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.map.find(key);
      if (it == s.map.end()) return false;
      node = s.map.extract(it);
      s.size.fetch_sub(1, std::memory_order_relaxed);
    }
    if (node.mapped().id) cancel_quietly(node.mapped().id);
    return true;
  }

  // True iff the key is pending: set, not yet fired, removed or drained. Any
  // thread. May block (the key's shard mutex, for one lookup). Never allocates.
  bool contains(const Key& key) const {
    Shard& s = shard_for(key);
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.map.find(key) != s.map.end();
  }

  // The number of pending keys: a sum of per-shard counts, exact when no call
  // runs concurrently. Any thread. Lock-free. Never allocates.
  std::size_t size() const noexcept {
    std::size_t n = 0;
    for (const Shard& s : core_->shards) n += s.size.load(std::memory_order_relaxed);
    return n;
  }

  // go-zero's Drain: removes every pending key and calls fn(key,
  // std::move(value)) for each, synchronously on this thread, then returns
  // how many it drained. It first takes the keys of every shard (one shard
  // lock at a time) and cancels their timers, then calls fn with no lock
  // held; none of the drained keys executes. A key set concurrently may or
  // may not be drained; keys fn itself sets stay pending (fn may call back
  // into this object). If fn throws, the exception propagates and the keys
  // not yet passed to fn are dropped (destroyed, not pending). Any thread.
  // May block. May allocate.
  template <class F>
  std::size_t drain(F&& fn) {
    static_assert(std::is_invocable_v<F&, const Key&, Value&&>,
                  "chime::KeyedTimers::drain: fn must be callable as fn(const Key&, Value&&)");
    std::array<Map, shard_count> taken;
    std::size_t n = 0;
    for (std::size_t i = 0; i < shard_count; ++i) {
      taken[i] = take_all(core_->shards[i]);
      n += taken[i].size();
    }
    for (Map& map : taken) {
      for (auto& [key, entry] : map) std::invoke(fn, key, std::move(entry.value));
    }
    return n;
  }

  // The runtime the timers run on. Any thread. Lock-free. Never allocates.
  Runtime& runtime() const noexcept { return *runtime_; }

 private:
  struct Entry {
    Entry(Value v, std::uint64_t ver) : value(std::move(v)), version(ver) {}
    Value value;
    TimerId id;              // invalid while its timer is being scheduled
    std::uint64_t version;   // the only timer that may execute this entry carries it
  };
  using Map = std::unordered_map<Key, Entry, Hash, KeyEqual>;

  struct Core;

  // One slice of the keys. `mutex` guards `map` and `next_version`; `size`
  // and `running` are written under it (running's decrement is not) and read
  // without it.
  struct alignas(64) Shard {
    std::mutex mutex;
    Map map;
    std::uint64_t next_version = 0;
    std::atomic<std::size_t> size{0};
    // executes of this shard's keys in progress (the destructor waits for 0)
    std::atomic<std::uint32_t> running{0};
    // 1 for the owning KeyedTimers plus 1 per live FireTask (see Core)
    std::atomic<std::size_t> refs{1};
    Core* core = nullptr;
  };

  // The state shared with the runtime's timers. It is heap-allocated and
  // freed when the KeyedTimers is gone and the last FireTask referring to it
  // is destroyed (run, cancelled, or dropped by runtime shutdown), so a stale
  // timer firing after the destructor still finds valid (empty, closed)
  // shards. References are counted per shard, so scheduling a timer touches
  // only its own shard's counter; the core dies when every shard's count has
  // reached 0.
  struct Core {
    explicit Core(Execute e) : execute(std::move(e)) {
      for (Shard& s : shards) s.core = this;
    }

    static void release(Shard& s) noexcept {
      // acq_rel: whoever frees the core sees every use of it by the others.
      if (s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        Core* core = s.core;
        if (core->live_shards.fetch_sub(1, std::memory_order_acq_rel) == 1) delete core;
      }
    }

    // A timer for (key, version) of shard s fired.
    void fire(Shard& s, const Key& key, std::uint64_t version) {
      std::unique_lock<std::mutex> lock(s.mutex);
      // relaxed: the destructor stores `closed` before it takes this lock to
      // sweep; if we lock after that sweep the mutex makes the store visible.
      if (closed.load(std::memory_order_relaxed)) return;
      auto it = s.map.find(key);
      if (it == s.map.end() || it->second.version != version) return;  // stale timer
      s.running.fetch_add(1, std::memory_order_relaxed);  // under the lock: the destructor sees it
      Running running_guard{this, s};   // destroyed last: after the value
      typename Map::node_type node = s.map.extract(it);
      s.size.fetch_sub(1, std::memory_order_relaxed);
      lock.unlock();
      const void* outer = std::exchange(detail::keyed_timers_executing, this);
      struct Restore {
        const void* outer;
        ~Restore() { detail::keyed_timers_executing = outer; }
      } restore{outer};
      execute(key, std::move(node.mapped().value));
    }

    struct Running {
      Core* core;
      Shard& s;
      ~Running() {
        // (K1) seq_cst: the release half publishes what execute did to the
        // destructor's K2; with K3 it is the Dekker pair against K0/K2.
        if (s.running.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
            core->closed.load(std::memory_order_seq_cst)) {  // (K3)
          s.running.notify_all();
        }
      }
    };

    std::array<Shard, shard_count> shards;
    Execute execute;
    std::atomic<bool> closed{false};
    std::atomic<std::size_t> live_shards{shard_count};
  };

  // The runtime Task of a key's timer: {shard, version, key}, holding a
  // reference on its shard. 16 bytes plus the key: inline in the Task (no
  // allocation) for a key of up to 32 bytes with a nothrow move.
  struct FireTask {
    FireTask(Shard* shard_in, std::uint64_t version_in, const Key& key_in)
        : shard(shard_in), version(version_in), key(key_in) {
      // relaxed: the owner's reference keeps the count above 0 while we add.
      shard->refs.fetch_add(1, std::memory_order_relaxed);
    }
    FireTask(FireTask&& other) noexcept(std::is_nothrow_move_constructible_v<Key>)
        : shard(std::exchange(other.shard, nullptr)), version(other.version), key(std::move(other.key)) {}
    FireTask(const FireTask&) = delete;
    FireTask& operator=(const FireTask&) = delete;
    FireTask& operator=(FireTask&&) = delete;
    ~FireTask() {
      if (shard != nullptr) Core::release(*shard);
    }
    void operator()() { shard->core->fire(*shard, key, version); }

    Shard* shard;
    std::uint64_t version;
    Key key;
  };

  Shard& shard_for(const Key& key) const {
    // Fibonacci hashing of the top bits: std::hash of an integer is often the
    // identity, and the maps use the low bits.
    const auto h = static_cast<std::uint64_t>(Hash{}(key)) * 0x9E3779B97F4A7C15ull;
    return core_->shards[static_cast<std::size_t>(h >> 58)];
  }
  static_assert(shard_count == 64, "shard_for takes the top 6 bits of the mixed hash");

  // Schedules the timer for (key, version) and records its id if the entry
  // still has that version; otherwise the timer is stale and cancelled. If
  // the runtime throws, removes the entry if it still has that version (it
  // would have no timer) and rethrows.
  void arm(Shard& s, const Key& key, std::uint64_t version, Duration delay) {
    TimerId id;
    try {
      id = runtime_->schedule_after(delay, Task(FireTask(&s, version, key)));
    } catch (...) {
      typename Map::node_type node;  // destroyed after the lock is released
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        auto it = s.map.find(key);
        if (it != s.map.end() && it->second.version == version) {
          node = s.map.extract(it);
          s.size.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      throw;
    }
    bool current;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.map.find(key);
      current = it != s.map.end() && it->second.version == version;
      if (current) it->second.id = id;
    }
    if (!current) cancel_quietly(id);
  }

  // Extracts every entry of a shard and cancels their timers.
  Map take_all(Shard& s) noexcept {
    Map taken;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      taken.swap(s.map);
      s.size.store(0, std::memory_order_relaxed);
    }
    for (auto& [key, entry] : taken) {
      if (entry.id) cancel_quietly(entry.id);
    }
    return taken;
  }

  void sweep(Shard& s) noexcept { Map taken = take_all(s); }

  // Best effort: a timer that escapes cancellation finds its entry gone or
  // newer and does nothing. The runtime's cancel only fails by returning
  // false; a throw (an allocation failure posting the command) is ignored.
  void cancel_quietly(TimerId id) noexcept {
    if (!(*alive_)()) return;  // the runtime is gone, and with it every timer
    try {
      (void)runtime_->cancel(id);
    } catch (...) {
    }
  }

  // Throws std::logic_error if the runtime is gone (one load).
  void check_runtime() const {
    if (!(*alive_)()) detail::throw_runtime_gone("KeyedTimers");
  }

  Runtime* runtime_;
  std::shared_ptr<const detail::RuntimeAlive> alive_;  // chime/runtime.hpp
  Core* core_;
};

}  // namespace chime
