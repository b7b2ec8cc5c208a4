// SPDX-License-Identifier: BSL-1.0
// chime/key_wheel.hpp: a hierarchical timing wheel over integer keys
// (Jane Street's `Timing_wheel.Priority_queue`).
//
// What it is: a priority queue of elements with unsigned 64-bit keys, whose
// minimum allowed key `min_allowed_key()` only increases. It has no
// "delete-min": `increase_min_allowed_key(k, f)` removes every element with a
// key below `k` (calling `f` on each) and raises the minimum to `k`. It is the
// engine of `TimingWheel`, where keys are interval numbers and the minimum
// allowed key is the interval of `now`. Nothing in it is asynchronous and it
// is not thread-safe: one thread owns it.
//
// Guarantees:
// - `add`, `remove`, `change_key`, `contains`, `key`, `value`: O(1).
// - `increase_min_allowed_key`: O(levels) plus O(1) per element removed or
//   moved down a level (each element moves down at most once per level, and
//   only ever to a lower level; consecutive elements of a slot bound for one
//   lower slot move as one spliced chain) plus O(levels) per non-empty slot
//   crossed.
//   Empty slots are skipped by bitmap, so the cost never depends on how far
//   the key jumps nor on the number of elements that stay.
// G9 (cascade ahead): `cascade_ahead(budget)`: O(levels + budget). It moves the next span of
//   every level down ahead of time, so the increase that enters a span
//   cascades only what is left. Called once per key step with a budget of
//   about twice the elements due per step per level (more if adds are
//   bursty), it leaves nothing: no increase of one key re-files an element
//   (see "Moving the next span down ahead" below).
//   `moved_by_last_increase()` reports what the last increase re-filed.
//   `bounded_increase_limit(key)`: O(levels), and O(1) for a key in now's
//   level-0 block. The largest k <= key such that
//   `increase_min_allowed_key(k)` re-files nothing, except when no such k
//   passes min_allowed_key(): then min_allowed_key() while cascade_ahead
//   has the blocking elements to move (the next cascade_ahead(budget >= 1)
//   moves at least one), so a caller that alternates cascade_ahead(budget)
//   and an increase to the limit reaches key, moving at most budget
//   elements a step, and removes what one increase to key would, in the
//   same order (elements added between the steps: as the order rule
//   below). It stops only before a slot that holds elements: empty spans,
//   and the far keys of a sparse wheel, cost no step.
// - Elements are removed in nondecreasing key order. Among equal keys, those
//   added while their key was within level 0 (now's block, or the next block
//   once cascade_ahead has moved it there) go in insertion order; elements
//   moved down from a higher level (by an increase or by cascade_ahead) join
//   the end of their slot.
// - `min_elt`, `min_key`: O(levels) bitmap lookups to find the first non-empty
//   slot, then, if it is above level 0, that slot's minimum: kept per slot as
//   elements are added (O(1)) and found by a scan of the slot only after its
//   minimum element left it; the answer is cached until it can change. An
//   increase within now's level-0 block starts from the cached minimum when
//   it is known (no search; none at all when nothing fires) and, after a
//   fire, caches the next level-0 slot it finds.
// - `max_allowed_key() >= min(max_representable_key, min_allowed_key() +
//   2^num_bits - 1)`, `max_allowed_key() <= max_representable_key`, and it
//   never decreases.
// - Handles (`Elt`, with the default storage) are {index, generation}: a
//   default handle, and a handle to an element that was removed or fired
//   (even if its storage was reused) is detected: `contains` is false and
//   the accessors throw std::invalid_argument. Never undefined behaviour.
//   With caller-owned nodes (see Storage below) there are no handles.
// - No allocation per element in steady state: elements live in a chunked
//   slab (detail/element_pool.hpp) and freed nodes are reused.
//
// Not guaranteed: stability of handles across 2^32 reuses of one node (the
// generation wraps); insertion order among equal keys that reached level 0 by
// different routes (see above).
//
// Error model: a key outside [min_allowed_key, max_allowed_key] throws
// std::out_of_range naming the key and the bounds; a stale handle throws
// std::invalid_argument; calling a mutating function from inside a
// `handle_removed` callback throws std::logic_error. None of these changes the
// wheel.
//
// ---------------------------------------------------------------------------
// Geometry. With level bits {b_0, ..., b_{L-1}} let S_i = b_0 + ... + b_{i-1}
// (S_0 = 0), B = S_L the total, and `now` = min_allowed_key().
//
//   level | slots  | keys per slot | an element with key k lives here iff
//   ------+--------+---------------+------------------------------------------
//   0     | 2^b_0  | 1             | k and now agree on every bit >= S_1
//   i     | 2^b_i  | 2^S_i         | the highest bit where k and now differ
//         |        |               |   is in [S_i, S_{i+1})
//   L-1   | 2^b_L-1| 2^S_{L-1}     | ... is >= S_{L-1}  (the top level)
//
// within slot (k >> S_i) mod 2^b_i; below the top, each level has a second
// bank of 2^b_i slots for its next span (see below), so the slot is
// (k >> S_i) mod 2^(b_i+1). Default bits {11,10,10,10,10,10}:
//
//   level | slots | keys per slot | span (keys)
//   ------+-------+---------------+------------
//   0     | 2x2048| 1             | 2^11 (two banks: now's span, the next)
//   1     | 2x1024| 2^11          | 2^21
//   2     | 2x1024| 2^21          | 2^31
//   3     | 2x1024| 2^31          | 2^41
//   4     | 2x1024| 2^41          | 2^51
//   5     | 1024  | 2^51          | 2^61 (the top: one bank)
//
// So level i holds exactly the keys of the level-(i+1) slot that `now` is in,
// minus `now`'s own level-i slot (those are lower): the levels cover disjoint,
// increasing key ranges, and within a level (below the top) slot order is key
// order. The top level is a circular buffer: with more than one level, the
// slot of `now` at the top is never needed for current keys (they are lower),
// so it holds the keys one full turn (2^B) ahead. Hence
//   max_allowed_key = floor(now, 2^S_top) + 2^B - 1 (+ 2^S_top if L > 1),
// clamped to max_representable_key = 2^61 - 1. Keys stay below 2^62, so no
// arithmetic here overflows 64 bits.
//
// The crucial invariant: every element sits at level_of(key) and
// slot_of(key) computed against the current `now`. Raising `now` can break it
// only for the elements of the slots `now` enters; `increase_min_allowed_key`
// restores it by visiting slots in key order: it fires a level-0 slot whose
// key is below the target, or re-files ("cascades") a higher slot whose first
// key is at or below the target, after setting `now` to that slot's first key.
// check_invariants() verifies all of it.
//
// Moving the next span down ahead. Cascading is O(1) per element, but the
// increase that enters a new level-i span (every 2^S_{i+1} keys) cascades
// the whole level-(i+1) slot of that span at once: every element due in it.
// At level 0 that is every 2^b_0 keys (19 ms at 600k timers/s in the
// runtime, docs/benchmarks.md); at level 1 it is a whole level-2 slot, 2^10
// times as many, every ~35 min at 1 ms. Linux's wheel stopped cascading
// (higher levels fire late); Erlang caps the work of each pass and resumes
// it later, which an increase that must remove every key below its target
// cannot do. So the work is done earlier instead, in bounded steps:
//
// - Below the top, level i has two banks of 2^b_i slots, addressed by
//   (key >> S_i) mod 2^(b_i+1): now's span P_i (the level-(i+1) slot of now)
//   and the next span N_i (the level-(i+1) slot after it).
// - `cascade_ahead(budget)` visits the levels below the top, lowest first.
//   Level i starts on N_i once all of N_i sits in one level-(i+1) slot, its
//   source: N_i lies in P_{i+1}, or N_i is the first slot of N_{i+1} and
//   level i+1 has finished moving N_{i+1} down (so the top's next slot feeds
//   level L-2, which feeds level L-3, and so on down to level 0). From then
//   on level i holds N_i too: adds and key changes into N_i go to level i's
//   second bank, and the call moves the source's elements there, up to what
//   is left of the budget. When a level finishes, the level below may start
//   at once if it was waiting for it.
// - When now_ enters N_i (set_now), the second bank simply becomes now's bank
//   (nothing moves), at that level and at every lower level whose span now_
//   left. What was not moved yet is cascaded by that increase, as without
//   the call: the source slot comes first in key order (its first key is
//   N_i's first), and after a higher slot is cascaded, now's slot on each
//   level above 0 is re-filed too (cascade_now_slots: it may hold elements
//   moved down ahead whose keys now belong lower).
// - So the exceptions to the placement rule are exactly: keys in N_i (for
//   each level i in ahead_levels_) sit at level i's second bank (or lower,
//   inside a lower level's N), or, not yet moved, in N_i's source slot one
//   level up. level_of() is "the first level whose keys (level_end_) include
//   the key". Finding the minimum looks, at the lowest non-empty level i, at
//   now's bank, then N_i's source slot, then N_i's bank; the levels stay in
//   key order otherwise.
// - Cost and bound: each element moves down at most once per level, by
//   cascade_ahead or by an increase. Moving N_i takes 2^S_{i+1} key steps'
//   worth of elements and must be done in the 2^S_{i+1} - 2^S_i steps before
//   level i-1 needs N_i's first slot, i.e. at most twice the elements due
//   per step, per level. With that budget per step (the test
//   one_key_increases_refile_nothing_when_cascade_ahead_keeps_up uses 2 x
//   levels x the elements due per step), an increase of one key re-files
//   nothing. A caller that calls it less often, or with a smaller budget,
//   leaves a remainder for the increase: never more than without the call.
// - Memory: one more bank per level below the top (2^b_i heads and bitmap
//   bits); no allocation per element.
// ---------------------------------------------------------------------------
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "chime/detail/assert.hpp"
#include "chime/detail/element_pool.hpp"
#include "chime/detail/occupancy_bitmap.hpp"
#include "chime/level_bits.hpp"

namespace chime {

namespace detail {
struct NoKeyOf {};  // KeyWheel's key_of_type when it stores the keys
}  // namespace detail

// KeyOf = void: the wheel stores each element's key beside it. Otherwise a
// KeyOf object key_of, given to the constructor, computes it: key_of(value)
// (a const call, noexcept) must equal the element's key from the add that
// stored the value until the element leaves the wheel (so a handle_removed
// that moves the value out must leave what key_of reads), and only
// change_key_in_range's update may change it. The node then holds no key:
// 8 bytes less per element (TimingWheel's alarms: 32 bytes, not 40).
//
// Storage: where the nodes live. The default, detail::ElementPool, owns them:
// add allocates one, handles (Elt) carry its generation. A storage whose
// owns_nodes is false (detail::CallerNodes, under IntrusiveTimingWheel) maps
// an index to a node the caller owns: T is then the node itself, nothing is
// allocated or freed, there are no generations, and the caller files and
// removes nodes by index through the "caller-owned nodes" functions; the Elt
// functions are not available, and handle_removed gets the node's index.
template <class T, class KeyOf = void, class Storage = detail::ElementPool<T, std::is_void_v<KeyOf>>>
class KeyWheel {
 public:
  using Key = std::uint64_t;
  using value_type = T;
  // True iff the wheel stores the keys (KeyOf is void).
  static constexpr bool stores_keys = std::is_void_v<KeyOf>;
  using key_of_type = std::conditional_t<stores_keys, detail::NoKeyOf, KeyOf>;
  // Bytes of storage per element (the slab's node: links, generation, level,
  // the value and, if stores_keys, the key).
  static constexpr std::size_t element_bytes = sizeof(typename Storage::Node);
  // True iff the wheel allocates its nodes (the default storage).
  static constexpr bool owns_nodes = Storage::owns_nodes;

  // Keys are at most 2^61 - 1 (Jane Street's max_representable_key).
  static constexpr Key max_representable_key = (Key{1} << LevelBits::max_num_bits) - 1;
  // A level is 2^b slot heads; wider levels are refused by the constructor.
  static constexpr int max_level_bits = 30;

  // A handle to an element. Trivially copyable; a default Elt is never
  // contained.
  class Elt {
   public:
    Elt() noexcept = default;
    friend bool operator==(Elt, Elt) noexcept = default;

   private:
    friend class KeyWheel;
    Elt(std::uint32_t index, std::uint32_t generation) noexcept : index_(index), generation_(generation) {}
    std::uint32_t index_ = 0;
    std::uint32_t generation_ = 0;
  };
  // What handle_removed and for_each's f get: an Elt, or with caller-owned
  // nodes the node's index.
  using Handle = std::conditional_t<owns_nodes, Elt, std::uint32_t>;

  // Throws std::invalid_argument if a level has more than max_level_bits bits,
  // std::length_error as reserve. `capacity` is passed to reserve(): storage
  // for that many elements is allocated and pre-faulted here (the wheel grows
  // past it). `key_of` computes keys unless stores_keys. May allocate.
  explicit KeyWheel(LevelBits bits = LevelBits::default_bits(), std::size_t capacity = 0,
                    key_of_type key_of = {}) requires(owns_nodes)
      : bits_(bits), pool_(capacity), key_of_(std::move(key_of)) {
    init();
  }
  // With caller-owned nodes: `storage` maps an index to its node. Throws as
  // the constructor above. May allocate (the slot heads).
  KeyWheel(LevelBits bits, Storage storage, key_of_type key_of) requires(!owns_nodes)
      : bits_(bits), pool_(std::move(storage)), key_of_(std::move(key_of)) {
    init();
  }

  KeyWheel(const KeyWheel&) = delete;
  KeyWheel& operator=(const KeyWheel&) = delete;

 private:
  void init() {
    const auto b = bits_.bits();
    num_levels_ = static_cast<int>(b.size());
    levels_.resize(b.size());
    std::size_t slot_base = 0;
    int shift = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (b[i] > max_level_bits) {
        throw std::invalid_argument("chime::KeyWheel: level " + std::to_string(i) + " has " + std::to_string(b[i]) +
                                    " bits; at most " + std::to_string(max_level_bits) +
                                    " per level (2^bits slots are allocated)");
      }
      Level& l = levels_[i];
      // Below the top, a level has two banks of 2^b_i slots: now's span and
      // the next one (see "Moving the next span down ahead").
      const int slot_bits = b[i] + (i + 1 < b.size() ? 1 : 0);
      l.shift = shift;
      l.bits = b[i];
      l.mask = (Key{1} << slot_bits) - 1;
      l.slot_base = slot_base;
      if (slot_bits > kNodeSlotBits) slots_in_nodes_ = false;
      l.occupied = detail::OccupancyBitmap(std::size_t{1} << slot_bits);
      slot_base += std::size_t{1} << slot_bits;
      shift += b[i];
    }
    num_bits_ = shift;
    block_shift_ = num_levels_ > 1 ? b[0] : 62;  // one level: keys < 2^62 never change block
    top_shift_ = levels_[num_levels_ - 1].shift;
    for (int bit = 0, level = 0; bit < 64; ++bit) {
      while (level + 1 < num_levels_ && bit >= levels_[level + 1].shift) ++level;
      level_by_bit_[bit] = static_cast<std::uint8_t>(level);
    }
    max_ahead_ = ((Key{1} << num_bits_) - 1) + (num_levels_ > 1 ? Key{1} << top_shift_ : 0);
    heads_.assign(slot_base, detail::kNilIndex);
    slot_min_.assign(slot_base, kMinUnknown);
    compute_level_ends();
  }

 public:
  // Number of elements. Never allocates.
  std::size_t size() const noexcept { return size_; }
  // size() == 0. Never allocates.
  bool empty() const noexcept { return size_ == 0; }
  // The level bits given to the constructor. Never allocates.
  const LevelBits& level_bits() const noexcept { return bits_; }

  // Elements the wheel holds before an add allocates (size() included); at
  // least the constructor's capacity and the largest reserve(n). Never
  // allocates.
  std::size_t capacity() const noexcept { return pool_.capacity(); }

  // Makes capacity() >= n and pre-faults it: the missing storage (rounded up
  // to whole 2,048-element chunks) is allocated as one block and every
  // element slot not yet used is written now, so the next n - size() adds
  // neither allocate nor take a page fault. Costs element_bytes per element
  // (24 + sizeof(T) for an 8-byte T, 8 less without stored keys) at once,
  // until the wheel is destroyed; growth without it adds blocks of a quarter
  // of the capacity (at most 65,536 elements) and faults their pages in as
  // adds reach them.
  // Throws std::length_error if n > 2^32 - 2048, or std::bad_alloc; either
  // way the wheel is unchanged. Allowed inside handle_removed (it moves no
  // element). May allocate.
  void reserve(std::size_t n) { pool_.reserve(n); }

  // The least key `add` accepts; only increases. Never allocates.
  Key min_allowed_key() const noexcept { return now_; }

  // Largest key `add` accepts now; see the geometry table. Never allocates.
  Key max_allowed_key() const noexcept {
    const Key max = (now_ >> top_shift_ << top_shift_) + max_ahead_;
    return max < max_representable_key ? max : max_representable_key;
  }

  // Adds an element. Throws std::out_of_range if key < min_allowed_key() or
  // key > max_allowed_key(). O(1). May allocate (only when the pool is full).
  Elt add(Key key, T value) requires stores_keys {
    check_not_removing("add");
    check_key("add", key);
    return add_checked(key, std::move(value));
  }

  // Removes an element. Throws std::invalid_argument if !contains(elt). O(1).
  // Never allocates.
  void remove(Elt elt) {
    check_not_removing("remove");
    checked_index("remove", elt);
    remove_contained(elt);
  }

  // Moves an element to a new key. Throws std::invalid_argument if
  // !contains(elt), std::out_of_range as add. O(1). Never allocates.
  void change_key(Elt elt, Key key) requires stores_keys {
    check_not_removing("change_key");
    const std::uint32_t i = checked_index("change_key", elt);
    check_key("change_key", key);
    change_key_checked(i, key, [](T&) noexcept {});
  }

  // True iff elt is in the wheel (false while it is being removed by
  // increase_min_allowed_key). Never allocates.
  bool contains(Elt elt) const noexcept {
    return pool_.holds(elt.index_, elt.generation_) && pool_[elt.index_].level() < kMaxLevels;
  }

  // Throw std::invalid_argument unless elt is in the wheel or is the element
  // being passed to handle_removed right now.
  Key key(Elt elt) const { return key("key", elt); }
  T& value(Elt elt) { return value("value", elt); }
  const T& value(Elt elt) const { return value("value", elt); }

  // Removes every element with a key < `key`, in nondecreasing key order,
  // calling handle_removed(Elt) on each; then min_allowed_key() == key. Does
  // nothing if key <= min_allowed_key(). Throws std::out_of_range if key >
  // max_representable_key. Inside handle_removed, key(e) and value(e) are
  // readable (the value may be moved out) and contains(e) is false; calling a
  // mutating function throws std::logic_error. If handle_removed throws, the
  // element it was given is gone, elements with smaller keys are gone,
  // min_allowed_key() is that element's key, and the exception propagates.
  // Never allocates.
  template <class F>
  void increase_min_allowed_key(Key key, F&& handle_removed) {
    check_not_removing("increase_min_allowed_key");
    if (key <= now_) return;
    if (key > max_representable_key) {
      throw std::out_of_range("chime::KeyWheel::increase_min_allowed_key: key " + std::to_string(key) +
                              " exceeds max_representable_key " + std::to_string(max_representable_key));
    }
    RemovingScope scope(*this);
    moved_by_last_increase_ = 0;
    for (;;) {
      if (num_levels_ > 1 && key < level0_end()) {
        // The common short advance: every key below `key` is on level 0, in
        // now's bank; higher levels start at or after level0_end() > key.
        advance_in_block(key, handle_removed);
        return;
      }
      const SlotRef s = first_slot();
      if (s.level < 0) break;
      if (s.level == 0) {
        if (s.first_key >= key) {
          cache_min(slot_head(s), s.first_key);  // the first non-empty slot is on level 0
          break;
        }
        set_now(s.first_key);
        remove_slot(s.slot, handle_removed);
      } else {
        if (s.first_key > key) break;
        const std::uint64_t ahead_before = ahead_levels_;
        set_now(s.first_key);
        cascade_slot(s);
        // Levels above 0 whose next span now_ entered: their slot of now may
        // hold elements moved down ahead.
        if (const std::uint64_t entered = ahead_before & ~ahead_levels_ & ~std::uint64_t{1}; entered != 0) {
          cascade_now_slots(entered);
        }
      }
    }
    set_now(key);
  }

  // Moves up to `budget` elements down ahead of time, from a higher level to
  // the level that holds the next span of a lower one, so that the increase
  // entering that span has (nearly) nothing left to cascade; returns true if
  // some of a span being moved are still on their higher level. For each
  // level j below the top, lowest first: once all of the next level-j span
  // (the keys of the level-(j+1) slot after now's) sits in one level-(j+1)
  // slot, level j takes that span too (its second bank), and this call moves
  // its elements down, up to the budget left. From then until the wheel
  // enters that span, adds and key changes into it go to level j directly.
  // A caller that calls this between increases with a budget of a few times
  // the elements due per key step (the runtime's wheel thread does, once per
  // pass) keeps every increase from cascading more than a remainder (see
  // "Moving the next span down ahead" above). Changes no result, only where
  // elements sit. Does nothing and returns false for a one-level wheel.
  // Throws std::logic_error inside handle_removed. O(levels + budget). Never
  // allocates.
  bool cascade_ahead(std::size_t budget) {
    check_not_removing("cascade_ahead");
    const std::size_t initial_budget = budget;
    bool more = false;
    for (int j = 0; j + 1 < num_levels_;) {
      if (((ahead_levels_ >> j) & 1) == 0 && !start_ahead(j)) {
        ++j;
        continue;
      }
      const std::uint32_t& head = heads_[levels_[j + 1].slot_base + ahead_source_slot(j)];
      for (; budget != 0 && head != detail::kNilIndex; --budget) {
        const std::uint32_t i = head;
        unlink(i);
        link(i);  // level j: its key is in the span moved down ahead
      }
      if (head != detail::kNilIndex) {
        more = true;
      } else if (j > 0 && ((ahead_levels_ >> (j - 1)) & 1) == 0 && start_ahead(j - 1)) {
        --j;  // the span below waited for this one to be all on level j
        continue;
      }
      ++j;
    }
    moved_by_last_cascade_ahead_ = initial_budget - budget;
    return more;
  }
  // Elements the last cascade_ahead moved down (at most its budget).
  std::size_t moved_by_last_cascade_ahead() const noexcept { return moved_by_last_cascade_ahead_; }

  // How far an increase toward `key` may go without re-filing: the largest
  // k <= key for which increase_min_allowed_key(k) moves no element between
  // levels (every slot above level 0 it would enter is empty: cascade_ahead
  // moved its elements down already, or it never held any). That is key
  // itself when key <= min_allowed_key(), for a key in now's level-0 block
  // (O(1)), and whenever nothing above level 0 lies in the way; otherwise
  // one key before the first non-empty slot above level 0. If that slot
  // starts at min_allowed_key() + 1, no k above min_allowed_key() re-files
  // nothing: the result is min_allowed_key(), and the slot is the source of
  // the span cascade_ahead moves down next, so the next cascade_ahead
  // (budget >= 1) moves at least one of its elements. A caller whose
  // increases must stay bounded (the runtime's wheel thread after a late
  // wake-up) alternates cascade_ahead(budget) and an increase to this
  // limit: each step re-files at most budget elements, the steps reach key,
  // and they remove the same elements in the same order as one increase to
  // key. Empty spans cost no step: a sparse wheel reaches a far key in a
  // few. Changes nothing. O(levels) bitmap lookups. Never allocates.
  Key bounded_increase_limit(Key key) const noexcept {
    if (key <= now_ || num_levels_ == 1 || key < level0_end()) return key;
    const Key first = first_key_above_level0();
    if (key < first) return key;
    // first > now_: slots above level 0 start after now's key.
    return first - 1;
  }

  // Elements the last increase_min_allowed_key that raised the minimum
  // re-filed from a higher level to a lower one (its cascading work; the
  // elements it removed are not counted). Never allocates.
  std::size_t moved_by_last_increase() const noexcept { return moved_by_last_increase_; }

  // An element with the minimum key, if any. O(levels) plus one slot scan on a
  // cache miss. Never allocates.
  std::optional<Elt> min_elt() const {
    const std::uint32_t i = min_index();
    if (i == detail::kNilIndex) return std::nullopt;
    return Elt(i, pool_[i].generation);
  }
  // The minimum key, if any; as min_elt. Never allocates.
  std::optional<Key> min_key() const {
    const std::uint32_t i = min_index();
    if (i == detail::kNilIndex) return std::nullopt;
    return min_cache_key_;  // min_index() cached it
  }

  // Calls f(Elt) for every element, in no particular order. f must not modify
  // the wheel. Never allocates.
  template <class F>
  void for_each(F&& f) const {
    for (int level = 0; level < num_levels_; ++level) {
      const Level& l = levels_[level];
      for (std::size_t j = l.occupied.find_next(0); j != detail::OccupancyBitmap::npos;
           j = l.occupied.find_next(j + 1)) {
        const std::uint32_t head = heads_[l.slot_base + j];
        std::uint32_t i = head;
        do {
          const std::uint32_t next = pool_[i].next;
          f(handle_of(i));
          i = next;
        } while (i != head);
      }
    }
  }

  // Removes every element (destroying its value) without calling anything;
  // min_allowed_key() and capacity() are unchanged. Every handle goes stale.
  // Throws std::logic_error inside handle_removed. Never allocates.
  void clear() {
    check_not_removing("clear");
    for (int level = 0; level < num_levels_; ++level) {
      Level& l = levels_[level];
      for (std::size_t j = l.occupied.find_next(0); j != detail::OccupancyBitmap::npos;
           j = l.occupied.find_next(j + 1)) {
        std::uint32_t& head = heads_[l.slot_base + j];
        std::uint32_t i = head;
        do {
          const std::uint32_t next = pool_[i].next;
          release_node(i);
          i = next;
        } while (i != head);
        head = detail::kNilIndex;
      }
      l.occupied.clear();
      l.count = 0;
    }
    nonempty_levels_ = 0;
    size_ = 0;
    hint_.slot = kNoSlot;
    min_cache_ = kMinUnknown;  // the spans moved down ahead stay so, with nothing left to move
  }

  // Verifies every internal invariant; throws std::logic_error naming the
  // first one broken. O(slots / 64 * 64 cheap loads + elements). For tests.
  void check_invariants() const {
    auto fail = [](const std::string& what) { throw std::logic_error("chime::KeyWheel invariant: " + what); };
    if constexpr (owns_nodes) pool_.check();
    if (now_ > max_representable_key) fail("min_allowed_key exceeds max_representable_key");
    const Key max_key = max_allowed_key();
    if (max_key < now_) fail("max_allowed_key < min_allowed_key");
    if (max_key < std::min(max_representable_key, now_ + ((Key{1} << num_bits_) - 1))) {
      fail("max_allowed_key below min_allowed_key + 2^num_bits - 1");
    }
    if ((ahead_levels_ >> (num_levels_ - 1)) != 0) fail("the top level records a next span moved down ahead");
    for (int j = 0; j + 1 < num_levels_; ++j) {
      const bool ahead = ((ahead_levels_ >> j) & 1) != 0;
      if (level_end_[j] != span_end(j, ahead)) {
        fail("level " + std::to_string(j) + " records the end of its keys as " + std::to_string(level_end_[j]) +
             ", not " + std::to_string(span_end(j, ahead)));
      }
      if (!ahead) continue;
      if (span_end(j, false) > max_representable_key) fail("a span past max_representable_key is moved down ahead");
      if (j + 2 < num_levels_ && (level_end_[j] > level_end_[j + 1] ||
                                  (span_end(j, false) >= span_end(j + 1, false) && !ahead_source_empty(j + 1)))) {
        fail("level " + std::to_string(j) + " holds the next span, but level " + std::to_string(j + 1) +
             " does not hold all of it");
      }
    }
    std::size_t total = 0;
    std::uint32_t true_min = detail::kNilIndex;
    for (int level = 0; level < num_levels_; ++level) {
      const Level& l = levels_[level];
      l.occupied.check();
      std::size_t in_level = 0;
      const std::size_t now_slot = static_cast<std::size_t>((now_ >> l.shift) & l.mask);
      // 64 slots at a time: the bitmap word must equal the slots' occupancy; then the non-empty ones.
      const std::size_t num_slots = static_cast<std::size_t>(l.mask) + 1;
      for (std::size_t wi = 0; wi < (num_slots + 63) / 64; ++wi) {
        const std::uint32_t* heads = &heads_[l.slot_base + (wi << 6)];
        const std::size_t in_word = std::min<std::size_t>(64, num_slots - (wi << 6));
        // Most words of a sparse wheel are clear: for those, one OR over the
        // heads (a loop the compiler vectorizes) shows every slot is empty.
        if (l.occupied.word_at(wi) == 0) {
          std::uint32_t any = 0;
          if (in_word == 64) {
            for (std::size_t b = 0; b < 64; ++b) any |= heads[b] ^ detail::kNilIndex;  // a fixed count: vectorized
          } else {
            for (std::size_t b = 0; b < in_word; ++b) any |= heads[b] ^ detail::kNilIndex;
          }
          if (any == 0) continue;
        }
        std::uint64_t occupied = 0;
        for (std::size_t b = 0; b < in_word; ++b) {
          occupied |= std::uint64_t{heads[b] != detail::kNilIndex} << b;
        }
        if (const std::uint64_t differ = occupied ^ l.occupied.word_at(wi); differ != 0) {
          fail("bitmap bit of level " + std::to_string(level) + " slot " +
               std::to_string((wi << 6) + static_cast<std::size_t>(std::countr_zero(differ))) +
               " disagrees with the slot");
        }
        for (; occupied != 0; occupied &= occupied - 1) {
          const std::size_t j = (wi << 6) + static_cast<std::size_t>(std::countr_zero(occupied));
          const std::uint32_t head = heads_[l.slot_base + j];
          if (level < num_levels_ - 1) {
            // Two banks: now's span (slots before now's empty, and now's own
            // above level 0) and the next span, which only holds elements
            // while it is moved down ahead.
            if (bank_end(level, j) == bank_end(level, now_slot) ? j < now_slot || (level > 0 && j == now_slot)
                                                                : ((ahead_levels_ >> level) & 1) == 0) {
              fail("level " + std::to_string(level) + " slot " + std::to_string(j) + " is behind now's slot " +
                   std::to_string(now_slot) +
                   " or in the next span's bank with no span moved down ahead, but not empty");
            }
          }
          std::uint32_t i = head;
          std::size_t guard = 0;
          do {
            const auto& n = pool_[i];
            const Key nk = key_at(i);
            if (n.level() != static_cast<std::uint32_t>(level))
              fail("element " + std::to_string(i) + " records level " + std::to_string(n.level()));
            if (slots_in_nodes_ && n.slot() != j)
              fail("element " + std::to_string(i) + " records slot " + std::to_string(n.slot()));
            if (nk < now_ || nk > max_key) {
              fail("element key " + std::to_string(nk) + " outside [" + std::to_string(now_) + ", " +
                   std::to_string(max_key) + "]");
            }
            // Part of a span moved down ahead may still be in its slot one level up.
            const bool not_yet_moved = level > 0 && ((ahead_levels_ >> (level - 1)) & 1) != 0 &&
                                       j == ahead_source_slot(level - 1) && level_of(nk) == level - 1 &&
                                       slot_of(nk, level) == j;
            if (!not_yet_moved && (level_of(nk) != level || slot_of(nk, level) != j)) {
              fail("element key " + std::to_string(nk) + " sits at level " + std::to_string(level) + " slot " +
                   std::to_string(j) + " but belongs at level " + std::to_string(level_of(nk)) + " slot " +
                   std::to_string(slot_of(nk, level_of(nk))));
            }
            if (pool_[n.next].prev != i || pool_[n.prev].next != i) fail("broken slot list links");
            if (true_min == detail::kNilIndex || nk < key_at(true_min)) true_min = i;
            ++in_level;
            if (++guard > size_) fail("slot list has a cycle");
            i = n.next;
          } while (i != head);
          const std::uint32_t m = slot_min_[l.slot_base + j];
          if (level > 0 && m != kMinUnknown) {
            std::uint32_t first_min = head;
            for (std::uint32_t k = pool_[head].next; k != head; k = pool_[k].next) {
              if (key_at(k) < key_at(first_min)) first_min = k;
            }
            if (m != first_min) {
              fail("level " + std::to_string(level) + " slot " + std::to_string(j) + " caches element " +
                   std::to_string(m) + " as its minimum, but its first smallest element is " +
                   std::to_string(first_min));
            }
          }
        }
      }
      if (((nonempty_levels_ >> level) & 1u) != (l.count != 0)) {
        fail("nonempty-levels mask disagrees with the count of level " + std::to_string(level));
      }
      if (in_level != l.count) {
        fail("level " + std::to_string(level) + " counts " + std::to_string(l.count) + " elements but holds " +
             std::to_string(in_level));
      }
      total += in_level;
    }
    if (total != size_) fail("size() is " + std::to_string(size_) + " but the slots hold " + std::to_string(total));
    if constexpr (owns_nodes) {
      if (pool_.live() != size_)
        fail("pool holds " + std::to_string(pool_.live()) + " values for size " + std::to_string(size_));
    }
    if (min_cache_ == detail::kNilIndex && size_ != 0) fail("min cache says empty but the wheel is not");
    if (min_cache_ != detail::kNilIndex && min_cache_ != kMinUnknown) {
      if (true_min == detail::kNilIndex || min_cache_ >= used_nodes() || pool_[min_cache_].level() >= kMaxLevels ||
          key_at(min_cache_) != key_at(true_min)) {
        fail("cached minimum element is not a minimum element of the wheel");
      }
      if (min_cache_key_ != key_at(min_cache_)) fail("cached minimum key is not the key of the cached element");
    }
  }

  // ---------------------------------------------------------------------------
  // The layering interface, for a structure built on KeyWheel (TimingWheel is
  // one): the operations above with their checks split out, so a caller that
  // has made a check itself does not pay for it twice, and with the caller's
  // operation named in error messages. Each function says which checks it
  // leaves to the caller; everything else behaves as the function it mirrors.

  // Throws std::logic_error naming `what` if called from inside
  // handle_removed (the check every mutating function makes first). Never
  // allocates.
  void check_not_removing(const char* what) const {
    if (removing_) [[unlikely]]
      throw_reentrant(what);
  }
  // Throws std::invalid_argument naming `what` unless contains(elt). Never
  // allocates.
  void check_contains(const char* what, Elt elt) const { checked_index(what, elt); }

  // add() without its checks. Precondition: check_not_removing passed and
  // min_allowed_key() <= key <= max_allowed_key() (CHIME_ASSERTed). O(1). May
  // allocate (only when the pool is full).
  // Unless stores_keys, key must be key_of(value) (CHIME_ASSERTed).
  Elt add_in_range(Key key, T&& value) {
    CHIME_ASSERT(!removing_ && key >= now_ && key <= max_allowed_key(), "KeyWheel::add_in_range: key out of range");
    return add_checked(key, std::move(value));
  }

  // change_key() without its checks; returns the element's value, for the
  // caller to update with the key. Precondition: check_not_removing passed,
  // contains(elt), and key is in range as for add_in_range (CHIME_ASSERTed).
  // O(1). Never allocates.
  T& change_key_in_range(Elt elt, Key key) noexcept requires stores_keys {
    CHIME_ASSERT(!removing_ && contains(elt) && key >= now_ && key <= max_allowed_key(),
                 "KeyWheel::change_key_in_range: stale handle or key out of range");
    change_key_checked(elt.index_, key, [](T&) noexcept {});
    return pool_[elt.index_].value();
  }
  // The same, with update(T&) called on the value while the element is out
  // of its slot: unless stores_keys, update must make key_of(value) == key
  // (CHIME_ASSERTed). update must not throw.
  template <class F>
  void change_key_in_range(Elt elt, Key key, F&& update) noexcept {
    CHIME_ASSERT(!removing_ && contains(elt) && key >= now_ && key <= max_allowed_key(),
                 "KeyWheel::change_key_in_range: stale handle or key out of range");
    change_key_checked(elt.index_, key, update);
  }

  // remove() without its checks. Precondition: check_not_removing passed and
  // contains(elt) (CHIME_ASSERTed). O(1). Never allocates.
  void remove_contained(Elt elt) noexcept {
    CHIME_ASSERT(!removing_ && contains(elt), "KeyWheel::remove_contained: stale handle");
    const std::uint32_t i = elt.index_;
    unlink(i);
    --size_;
    if (min_cache_ == i) min_cache_ = kMinUnknown;
    pool_.release(i);
  }

  // value(elt) without its check. Precondition: contains(elt)
  // (CHIME_ASSERTed). Never allocates.
  const T& value_contained(Elt elt) const noexcept {
    CHIME_ASSERT(contains(elt), "KeyWheel::value_contained: stale handle");
    return pool_[elt.index_].value();
  }

  // key(elt) and value(elt), with `what` naming the caller in the
  // std::invalid_argument they throw. Never allocate.
  Key key(const char* what, Elt elt) const { return key_at(readable_index(what, elt)); }
  T& value(const char* what, Elt elt) { return pool_[readable_index(what, elt)].value(); }
  const T& value(const char* what, Elt elt) const { return pool_[readable_index(what, elt)].value(); }

  // Calls f(const T&) for each element of the first (last) non-empty slot in
  // key order, in slot order; returns false, calling nothing, if the wheel is
  // empty. Every element with the minimum (maximum) key is in that slot,
  // with others of nearby keys. f must not modify the wheel. O(levels)
  // bitmap lookups plus the slot's length. Never allocates.
  // While a next span is being moved down (cascade_ahead), the first (last)
  // slot can be its slot one level up: f then also gets the elements of the
  // first (last) slot of the part already moved, so every element with the
  // minimum (maximum) key is still visited.
  template <class F>
  bool for_each_in_first_slot(F&& f) const {
    const SlotRef s = first_slot();
    if (!for_each_in_slot(s, f)) return false;
    if (is_ahead_source(s)) for_each_in_slot(ahead_bank_slot(s.level - 1, true), f);
    return true;
  }
  template <class F>
  bool for_each_in_last_slot(F&& f) const {
    const SlotRef s = last_slot();
    if (!for_each_in_slot(s, f)) return false;
    if (is_ahead_source(s)) for_each_in_slot(ahead_bank_slot(s.level - 1, false), f);
    return true;
  }

  // Removes, in slot order, the elements whose key is min_allowed_key() and
  // for which pred(const T&) holds, passing each to handle_removed(Elt) with
  // the rules of increase_min_allowed_key (TimingWheel::fire_past_alarms).
  // Throws std::logic_error naming `what` if called from inside
  // handle_removed. Never allocates.
  template <class Pred, class F>
  void remove_min_allowed_key_if(const char* what, Pred&& pred, F&& handle_removed) {
    check_not_removing(what);
    if (levels_[0].count == 0) return;
    RemovingScope scope(*this);
    const std::size_t slot = slot_of(now_, 0);
    const std::uint32_t& head = heads_[levels_[0].slot_base + slot];
    if (head == detail::kNilIndex) return;
    // Walk the list once; `stop` is the last element to visit.
    std::uint32_t i = head;
    const std::uint32_t stop = pool_[head].prev;
    for (;;) {
      const bool last = i == stop;
      const std::uint32_t next = pool_[i].next;
      if (pred(std::as_const(value_of(pool_[i])))) remove_detached(i, handle_removed);
      if (last) break;
      i = next;
    }
  }

  // ---------------------------------------------------------------------------
  // Caller-owned nodes (owns_nodes is false): node i is the caller's, reached
  // through the storage. The caller makes the checks these leave to it
  // (IntrusiveTimingWheel does), as for the layering interface above. Unlike
  // the pooled mode, handle_removed may file nodes (file_node) while a
  // removal pass runs: a node filed with a key the pass has not reached yet
  // is removed by the same pass. Everything else still throws
  // std::logic_error there (check_not_removing).

  // True iff node i is filed in a wheel (its place names a level). The
  // caller must know that a filed node is in this wheel. Never allocates.
  bool holds_node(std::uint32_t i) const noexcept requires(!owns_nodes) { return pool_[i].level() < kMaxLevels; }
  // Files node i, in no wheel, under key = key_of(node). Precondition:
  // min_allowed_key() <= key <= max_allowed_key() and !holds_node(i)
  // (CHIME_ASSERTed). O(1). Never allocates.
  void file_node(std::uint32_t i, Key key) noexcept requires(!owns_nodes) {
    CHIME_ASSERT(key >= now_ && key <= max_allowed_key() && !holds_node(i),
                 "KeyWheel::file_node: filed or out of range");
    Node& n = pool_[i];
    CHIME_ASSERT(key_of_(std::as_const(n)) == key, "KeyWheel::file_node: key != key_of(node)");
    link(i, n, key);
    ++size_;
    note_new_key(i, key);
  }
  // Moves filed node i to key; update(Node&) runs while it is out of its
  // slot and must make key_of(node) == key. Precondition: check_not_removing
  // passed, holds_node(i), key in range (CHIME_ASSERTed). O(1). Never
  // allocates.
  template <class F>
  void refile_node(std::uint32_t i, Key key, F&& update) noexcept requires(!owns_nodes) {
    CHIME_ASSERT(!removing_ && holds_node(i) && key >= now_ && key <= max_allowed_key(),
                 "KeyWheel::refile_node: not filed or key out of range");
    change_key_checked(i, key, update);
  }
  // Takes filed node i out of the wheel. Precondition: check_not_removing
  // passed and holds_node(i) (CHIME_ASSERTed). O(1). Never allocates.
  void unfile_node(std::uint32_t i) noexcept requires(!owns_nodes) {
    CHIME_ASSERT(!removing_ && holds_node(i), "KeyWheel::unfile_node: not filed");
    unlink(i);
    --size_;
    if (min_cache_ == i) min_cache_ = kMinUnknown;
  }
  // The key node i is filed under (or, inside handle_removed, was). Never
  // allocates.
  Key node_key(std::uint32_t i) const noexcept { return key_at(i); }
  // True while a removal pass runs (inside handle_removed). Never allocates.
  bool removing() const noexcept { return removing_; }

 private:
  using Node = typename Storage::Node;
  static_assert(owns_nodes || std::is_same_v<T, Node>, "with caller-owned nodes, T is the node type");
  static constexpr std::uint8_t kMaxLevels = LevelBits::max_num_bits;
  // min_cache_ values: an element index, kNilIndex ("the wheel is empty"), or:
  static constexpr std::uint32_t kMinUnknown = detail::kNilIndex - 1;

  struct Level {
    int shift = 0;              // S_i: log2(keys per slot)
    int bits = 0;               // b_i: log2(slots)
    Key mask = 0;               // 2^b_i - 1
    std::size_t slot_base = 0;  // index of slot 0 in heads_
    std::size_t count = 0;      // elements in this level
    detail::OccupancyBitmap occupied;
  };

  // A non-empty slot and the smallest key it can hold. level < 0: none.
  struct SlotRef {
    int level = -1;
    std::size_t slot = 0;
    Key first_key = 0;
  };

  // Marks the wheel as "inside handle_removed" for the lifetime of a removal
  // pass, so re-entrant mutation is refused instead of corrupting the pass.
  struct RemovingScope {
    explicit RemovingScope(KeyWheel& w) noexcept : w(w) { w.removing_ = true; }
    ~RemovingScope() { w.removing_ = false; }
    KeyWheel& w;
  };

  // The level an element with this key is filed at: the first whose keys
  // (below level_end_) include it. Keys near now_ stop at the first compare.
  // From the highest bit where key and now_ differ (level_by_bit_): no
  // lower level can hold the key; the level below still can while it holds
  // its next span, which the walk down checks (level_end_ never decreases
  // with the level).
  int level_of(Key key) const noexcept {
    int level = level_by_bit_[63 - std::countl_zero((key ^ now_) | 1)];
    while (level > 0 && key < level_end_[level - 1]) --level;
    return level;
  }

  // One past the last key of now's span at `level` (below the top), or of the
  // next span if `next`.
  Key span_end(int level, bool next) const noexcept {
    const int shift = levels_[level].shift + levels_[level].bits;
    return ((now_ >> shift) + (next ? 2 : 1)) << shift;
  }
  void compute_level_ends() noexcept {
    for (int j = 0; j + 1 < num_levels_; ++j) level_end_[j] = span_end(j, ((ahead_levels_ >> j) & 1) != 0);
  }

  // Raises now_ to `key`. At each level whose span now_ leaves, the next span
  // moved down ahead (if any) is now's span: its bank is now's bank, and
  // nothing moves.
  // Inline: most increases stay in now's block.
  void set_now(Key key) noexcept {
    const Key old = now_;
    now_ = key;
    if ((key >> block_shift_) != (old >> block_shift_)) [[unlikely]]
      leave_spans(old);
  }
  [[gnu::noinline]] void leave_spans(Key old) noexcept {
    for (int j = 0; j + 1 < num_levels_ && (now_ >> levels_[j + 1].shift) != (old >> levels_[j + 1].shift); ++j) {
      ahead_levels_ &= ~(std::uint64_t{1} << j);
    }
    compute_level_ends();
  }

  // Starts moving the next level-j span down ahead if all of it sits in one
  // level-(j+1) slot: the span lies in now's level-(j+1) span, or is the
  // first slot of the next one and all of that is on level j+1 already (or
  // level j+1 is the top, whose slot after now's holds just that span).
  bool start_ahead(int j) noexcept {
    const Key first = span_end(j, false);
    if (first > max_representable_key) return false;
    if (j + 2 < num_levels_ &&
        (span_end(j, true) > level_end_[j + 1] || (first >= span_end(j + 1, false) && !ahead_source_empty(j + 1)))) {
      return false;
    }
    ahead_levels_ |= std::uint64_t{1} << j;
    level_end_[j] = span_end(j, true);
    return true;
  }

  // While level j holds the next span: the level-(j+1) slot that held it,
  // and whether all of it has moved down.
  std::size_t ahead_source_slot(int j) const noexcept {
    return slot_of(level_end_[j] - (Key{1} << levels_[j + 1].shift), j + 1);
  }
  bool ahead_source_empty(int j) const noexcept {
    return heads_[levels_[j + 1].slot_base + ahead_source_slot(j)] == detail::kNilIndex;
  }

  // Below the top: one past the last physical slot of the bank (half of the
  // level's slots) that physical slot j is in.
  std::size_t bank_end(int level, std::size_t j) const noexcept {
    return (j | ((std::size_t{1} << levels_[level].bits) - 1)) + 1;
  }

  // Whether s is the slot still holding part of a span moved down ahead.
  bool is_ahead_source(const SlotRef& s) const noexcept {
    return s.level > 0 && ((ahead_levels_ >> (s.level - 1)) & 1) != 0 && s.slot == ahead_source_slot(s.level - 1);
  }

  // The first (or last) non-empty slot of the next span's bank of `level`
  // (below the top), or level < 0 if that bank is empty.
  SlotRef ahead_bank_slot(int level, bool first) const noexcept {
    const Level& l = levels_[level];
    const std::size_t bank = std::size_t{1} << l.bits;
    const std::size_t ahead = (slot_of(now_, level) & ~(bank - 1)) ^ bank;
    const std::size_t j = first ? l.occupied.find_next(ahead) : l.occupied.find_prev(ahead + bank - 1);
    if (j == detail::OccupancyBitmap::npos || j < ahead || j >= ahead + bank) return {};
    return {level, j, span_end(level, false) + (Key{j - ahead} << l.shift)};
  }
  std::size_t slot_of(Key key, int level) const noexcept {
    return static_cast<std::size_t>((key >> levels_[level].shift) & levels_[level].mask);
  }

  // add() after the checks: the key is known to be in range.
  Elt add_checked(Key key, T&& value) {
    const std::uint32_t i = pool_.allocate(std::move(value));
    Node& n = pool_[i];
    if constexpr (stores_keys) {
      n.key = key;
    } else {
      CHIME_ASSERT(key_of_(std::as_const(n.value())) == key, "KeyWheel::add_in_range: key != key_of(value)");
    }
    link(i, n, key);
    ++size_;
    note_new_key(i, key);
    return Elt(i, n.generation);
  }

  // change_key() after the checks; update(T&) runs while i is unlinked.
  template <class F>
  void change_key_checked(std::uint32_t i, Key key, F&& update) noexcept {
    unlink(i);
    Node& n = pool_[i];
    update(value_of(n));
    if constexpr (stores_keys) {
      n.key = key;
    } else {
      CHIME_ASSERT(key_of_(std::as_const(value_of(n))) == key, "KeyWheel::change_key_in_range: key != key_of(value)");
    }
    link(i, n, key);
    if (min_cache_ == i) min_cache_ = kMinUnknown;
    note_new_key(i, key);
  }

  // The checks are inline (check_not_removing is above); building the
  // message is out of line and cold, so the hot paths stay small.
  void check_key(const char* what, Key key) const {
    if (key < now_ || key > max_allowed_key()) [[unlikely]]
      throw_key_out_of_range(what, key);
  }
  // Index of an element in the wheel, or throws std::invalid_argument.
  std::uint32_t checked_index(const char* what, Elt elt) const {
    if (!contains(elt)) [[unlikely]]
      throw_stale(what, elt);
    return elt.index_;
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void throw_reentrant(const char* what) {
    throw std::logic_error(std::string("chime::KeyWheel::") + what +
                           ": called from inside handle_removed/handle_fired; the wheel may only be read there");
  }
  [[noreturn, gnu::cold, gnu::noinline]] void throw_key_out_of_range(const char* what, Key key) const {
    throw std::out_of_range(std::string("chime::KeyWheel::") + what + ": key " + std::to_string(key) +
                            " is outside [min_allowed_key, max_allowed_key] = [" + std::to_string(now_) + ", " +
                            std::to_string(max_allowed_key()) + "]");
  }
  [[noreturn, gnu::cold, gnu::noinline]] static void throw_stale(const char* what, Elt elt) {
    throw std::invalid_argument(std::string("chime::KeyWheel::") + what + ": stale or invalid handle {index " +
                                std::to_string(elt.index_) + ", generation " + std::to_string(elt.generation_) +
                                "}: the element was removed, fired, or never added");
  }
  // Like checked_index, but also accepts the element being removed right now.
  std::uint32_t readable_index(const char* what, Elt elt) const {
    if (!pool_.holds(elt.index_, elt.generation_)) checked_index(what, elt);
    return elt.index_;
  }

  // Keeps the min cache exact after element i got key `key`.
  void note_new_key(std::uint32_t i, Key key) noexcept {
    if (min_cache_ == detail::kNilIndex || (min_cache_ != kMinUnknown && key < min_cache_key_)) cache_min(i, key);
  }
  void cache_min(std::uint32_t i, Key key) const noexcept {
    min_cache_ = i;
    min_cache_key_ = key;
  }

  // The value of node n: the pool's stored value, or the caller's node itself.
  static T& value_of(Node& n) noexcept {
    if constexpr (owns_nodes) {
      return n.value();
    } else {
      return n;
    }
  }
  static const T& value_of(const Node& n) noexcept {
    if constexpr (owns_nodes) {
      return n.value();
    } else {
      return n;
    }
  }
  // One past the highest node index in use: the pool's, or any (the caller's).
  std::size_t used_nodes() const noexcept {
    if constexpr (owns_nodes) {
      return pool_.used();
    } else {
      return std::numeric_limits<std::size_t>::max();
    }
  }
  Handle handle_of(std::uint32_t i) const noexcept {
    if constexpr (owns_nodes) {
      return Elt(i, pool_[i].generation);
    } else {
      return i;
    }
  }
  // Forgets node i, which clear() took out of its slot: the pool frees it;
  // a caller's node is marked as in no wheel.
  void release_node(std::uint32_t i) noexcept {
    if constexpr (owns_nodes) {
      pool_.release(i);
    } else {
      pool_[i].place = detail::kNodeDetached;
    }
  }

  // The key of element i (stored, or computed from its value).
  [[gnu::always_inline]] Key key_at(std::uint32_t i) const noexcept {
    if constexpr (stores_keys) {
      return pool_[i].key;
    } else {
      return key_of_(value_of(pool_[i]));
    }
  }

  // Files element i, node n, with key `key`, at the end of its slot. O(1).
  void link(std::uint32_t i) noexcept { link(i, pool_[i], key_at(i)); }
  void link(std::uint32_t i, Node& n, Key key) noexcept {
    const int level = level_of(key);
    const std::size_t slot = slot_of(key, level);
    n.set_place(static_cast<std::uint32_t>(level), slot);
    splice(i, i, 1, level, slot, i, key);  // a chain of one
  }

  // Above level 0 a slot holds a range of keys and keeps its first smallest:
  // after elements joined the end of non-empty slot g, only a strictly
  // smaller key (min_key, of their first smallest, min) replaces it.
  [[gnu::always_inline]] void keep_slot_min(int level, std::size_t g, std::uint32_t min, Key min_key) noexcept {
    if (level == 0) return;
    if (std::uint32_t& m = slot_min_[g]; m != kMinUnknown) {
      Key slot_min_key = hint_.slot == g ? hint_.min_key : key_at(m);
      if (min_key < slot_min_key) {
        m = min;
        slot_min_key = min_key;
      }
      hint_ = {g, slot_min_key};
    }
  }

  // Appends the chain first..last (linked by next, `count` elements, every
  // one's place already set to level and slot) to the end of that slot;
  // min is the chain's first element with the smallest key, min_key that key.
  [[gnu::always_inline]] void splice(std::uint32_t first, std::uint32_t last, std::size_t count, int level,
                                     std::size_t slot, std::uint32_t min, Key min_key) noexcept {
    Level& l = levels_[level];
    const std::size_t g = l.slot_base + slot;
    std::uint32_t& head = heads_[g];
    if (head == detail::kNilIndex) {
      head = first;
      pool_[first].prev = last;
      pool_[last].next = first;
      l.occupied.set(slot);
      slot_min_[g] = min;
      if (level > 0) hint_ = {g, min_key};
    } else {
      keep_slot_min(level, g, min, min_key);
      Node& h = pool_[head];
      const std::uint32_t tail = h.prev;
      pool_[first].prev = tail;
      pool_[tail].next = first;
      pool_[last].next = head;
      h.prev = last;
    }
    if (l.count == 0) nonempty_levels_ |= std::uint64_t{1} << level;
    l.count += count;
  }

  // Takes element i out of its slot; it becomes detached. O(1).
  void unlink(std::uint32_t i) noexcept {
    Node& n = pool_[i];
    const std::uint32_t level = n.level();
    Level& l = levels_[level];
    const std::size_t slot = slots_in_nodes_ ? n.slot() : slot_of(key_at(i), static_cast<int>(level));
    std::uint32_t& head = heads_[l.slot_base + slot];
    if (slot_min_[l.slot_base + slot] == i) {
      slot_min_[l.slot_base + slot] = kMinUnknown;  // found again by a scan
      hint_.slot = kNoSlot;
    }
    if (n.next == i) {
      head = detail::kNilIndex;
      l.occupied.reset(slot);
    } else {
      pool_[n.prev].next = n.next;
      pool_[n.next].prev = n.prev;
      if (head == i) head = n.next;
    }
    if (--l.count == 0) nonempty_levels_ &= ~(std::uint64_t{1} << level);
    n.place = detail::kNodeDetached;
  }

  // The first non-empty slot in key order: O(levels) bitmap lookups.
  SlotRef first_slot() const noexcept {
    if (nonempty_levels_ == 0) return {};
    return first_slot_of(std::countr_zero(nonempty_levels_));
  }

  // The first key of the first non-empty slot above level 0 in key order
  // (an increase to it or past it re-files that slot's elements), or
  // max_representable_key + 1 if there is none: level 0's next span still
  // partly on level 1 (its first key is level0_end()), else the first slot
  // of the lowest non-empty level above 0. (Multi-level wheels.)
  Key first_key_above_level0() const noexcept {
    if ((ahead_levels_ & 1) != 0 && !ahead_source_empty(0)) return span_end(0, false);
    const std::uint64_t above = nonempty_levels_ & ~std::uint64_t{1};
    if (above == 0) return max_representable_key + 1;
    return first_slot_of(std::countr_zero(above)).first_key;
  }

  // The first non-empty slot of non-empty `level` (or, below the top, of the
  // part of its next span still one level up), in key order: every level
  // below it is empty, or holds only smaller keys.
  SlotRef first_slot_of(int level) const noexcept {
    const int top = num_levels_ - 1;
    if (level < top) {
      // Below the top, a level holds now's span and, while it is moved down
      // ahead, part of the next one: now's bank first (slots before now's
      // are empty, and so is now's own above level 0: its keys live lower),
      // then the next span's slot one level up if some of it is still there
      // (its first key is the span's first), then the next span's bank.
      const Level& l = levels_[level];
      const std::size_t now_slot = slot_of(now_, level);
      const std::size_t j = l.occupied.find_next(level == 0 ? now_slot : now_slot + 1);
      const std::size_t end = bank_end(level, now_slot);
      const Key next_span = span_end(level, false);
      if (j < end) return {level, j, next_span - (Key{end - j} << l.shift)};
      if (((ahead_levels_ >> level) & 1) != 0 && !ahead_source_empty(level)) {
        return {level + 1, ahead_source_slot(level), next_span};
      }
      return ahead_bank_slot(level, true);
    }
    const Level& l = levels_[top];
    const Key now_slot = (now_ >> l.shift) & l.mask;
    const Key skip = top > 0 ? 1 : 0;  // with lower levels, now's top slot holds the next turn
    std::size_t j = l.occupied.find_next(static_cast<std::size_t>((now_slot + skip) & l.mask));
    if (j == detail::OccupancyBitmap::npos) j = l.occupied.find_next(0);
    const Key turns = ((Key{j} - now_slot - skip) & l.mask) + skip;  // slots ahead of now's
    return {top, j, (now_ >> l.shift << l.shift) + (turns << l.shift)};
  }

  // The last non-empty slot in key order, or level < 0.
  SlotRef last_slot() const noexcept {
    const int top = num_levels_ - 1;
    {
      const Level& l = levels_[top];
      if (l.count != 0) {
        const Key now_slot = (now_ >> l.shift) & l.mask;
        const Key skip = top > 0 ? 1 : 0;
        const std::size_t last = static_cast<std::size_t>((now_slot + skip - 1) & l.mask);
        std::size_t j = l.occupied.find_prev(last);
        if (j == detail::OccupancyBitmap::npos) j = l.occupied.find_prev(static_cast<std::size_t>(l.mask));
        return {top, j, 0};
      }
    }
    for (int level = top - 1; level >= 0; --level) {
      const Level& l = levels_[level];
      if (l.count == 0) continue;
      // Below the top: the next span's bank, else now's bank.
      if (const SlotRef a = ahead_bank_slot(level, false); a.level >= 0) return a;
      return {level, l.occupied.find_prev(bank_end(level, slot_of(now_, level)) - 1), 0};
    }
    return {};
  }

  // One past the last key level 0 can hold now (multi-level wheels).
  Key level0_end() const noexcept { return ((now_ >> block_shift_) + 1) << block_shift_; }

  std::uint32_t slot_head(const SlotRef& s) const noexcept { return heads_[levels_[s.level].slot_base + s.slot]; }

  // Index of an element with the minimum key (cached), or kNilIndex.
  std::uint32_t min_index() const noexcept {
    if (min_cache_ != kMinUnknown) [[likely]]
      return min_cache_;
    return find_min_index();
  }
  // min_index on a cache miss: out of line, so the hit inlines small.
  [[gnu::noinline]] std::uint32_t find_min_index() const noexcept {
    const SlotRef s = first_slot();
    if (s.level < 0) return min_cache_ = detail::kNilIndex;
    std::uint32_t best = slot_min(s);
    Key best_key = key_at(best);
    if (is_ahead_source(s)) {  // the rest of that span is one level down
      if (const SlotRef a = ahead_bank_slot(s.level - 1, true); a.level >= 0) {
        const std::uint32_t m = slot_min(a);
        if (const Key k = key_at(m); k < best_key) {
          best = m;
          best_key = k;
        }
      }
    }
    cache_min(best, best_key);
    return best;
  }

  // The first element with the smallest key of non-empty slot s: the head on
  // level 0; above, a slot holds a range of keys and keeps its minimum,
  // found again by a scan after it left.
  std::uint32_t slot_min(const SlotRef& s) const noexcept {
    const std::uint32_t head = slot_head(s);
    if (s.level == 0) return head;
    std::uint32_t& m = slot_min_[levels_[s.level].slot_base + s.slot];
    if (m == kMinUnknown) {
      std::uint32_t best = head;
      Key best_key = key_at(head);
      for (std::uint32_t i = pool_[head].next; i != head; i = pool_[i].next) {
        if (const Key k = key_at(i); k < best_key) {
          best = i;
          best_key = k;
        }
      }
      m = best;
    }
    return m;
  }

  // increase_min_allowed_key(key) for now_ < key < level0_end(): fires the
  // level-0 slots of now's bank below key's, in order, then caches the
  // minimum if it is in now's bank. The first slot to fire is the cached
  // minimum's when that is known (no search), and nothing fires when the
  // cached minimum is at or after key.
  template <class F>
  void advance_in_block(Key key, F& handle_removed) {
    const Key base = now_ >> (block_shift_ + 1) << (block_shift_ + 1);  // the key of level 0's physical slot 0
    const std::size_t key_slot = static_cast<std::size_t>(key - base);
    const std::size_t end = static_cast<std::size_t>(level0_end() - base);  // now's bank ends there
    std::size_t j;
    if (min_cache_ != kMinUnknown) {
      // Known: nil (empty), or an element whose key below key means it is in
      // now's block, hence on level 0 in now's bank, and first there.
      if (min_cache_ == detail::kNilIndex || min_cache_key_ >= key) {
        now_ = key;
        return;
      }
      j = static_cast<std::size_t>(min_cache_key_ - base);
    } else {
      j = levels_[0].count == 0 ? detail::OccupancyBitmap::npos
                                : levels_[0].occupied.find_next(static_cast<std::size_t>(now_ - base));
    }
    while (j < key_slot) {
      now_ = base + j;  // j < key_slot < end: in now's bank
      remove_slot(j, handle_removed);
      j = levels_[0].count == 0 ? detail::OccupancyBitmap::npos : levels_[0].occupied.find_next(j + 1);
    }
    // Slot j, if it is in now's bank, is the first non-empty slot: its head
    // is a minimum. (A slot of the next block's bank may not be: part of
    // that block can still be on level 1. The cached minimum, if known,
    // stays right: nothing was added and it was not removed.)
    if (j < end) cache_min(heads_[levels_[0].slot_base + j], base + j);
    now_ = key;
  }

  // Removes the elements of level-0 slot j one by one, head first, passing
  // each to handle_removed. Elements stay linked until their turn, so an
  // exception leaves the rest in place.
  template <class F>
  void remove_slot(std::size_t j, F& handle_removed) {
    Level& l = levels_[0];
    std::uint32_t& head = heads_[l.slot_base + j];
    while (head != detail::kNilIndex) {
      const std::uint32_t i = head;
      Node& n = pool_[i];
      if (n.next == i) {
        head = detail::kNilIndex;
        l.occupied.reset(j);
      } else {
        pool_[n.prev].next = n.next;
        pool_[n.next].prev = n.prev;
        head = n.next;
      }
      if (--l.count == 0) nonempty_levels_ &= ~std::uint64_t{1};
      n.place = detail::kNodeDetached;
      --size_;
      if (min_cache_ == i) min_cache_ = kMinUnknown;
      hand_over(i, n, handle_removed);
    }
  }

  // Unlinks element i, hands it to handle_removed, then frees it (even if
  // handle_removed throws).
  template <class F>
  void remove_detached(std::uint32_t i, F& handle_removed) {
    unlink(i);
    --size_;
    if (min_cache_ == i) min_cache_ = kMinUnknown;
    hand_over(i, pool_[i], handle_removed);
  }

  // Passes detached element i (node n) to handle_removed; the pool then
  // frees it, even if handle_removed throws. A caller's node stays detached:
  // handle_removed may file it again.
  template <class F>
  void hand_over(std::uint32_t i, Node& n, F& handle_removed) {
    if constexpr (owns_nodes) {
      struct Release {
        ~Release() { pool.release(i); }
        Storage& pool;
        std::uint32_t i;
      } release{pool_, i};
      handle_removed(Elt(i, n.generation));
    } else {
      handle_removed(i);
    }
  }

  // Re-files every element of slot s (level > 0) against the current now_;
  // each lands on a lower level, at the end of its slot, in list order.
  // Consecutive elements bound for one slot (a run of nearby keys) are
  // moved as one chain: each is only read and marked, and the chain is
  // spliced in once. Never throws.
  void cascade_slot(const SlotRef& s) noexcept {
    Level& src = levels_[s.level];
    std::uint32_t& head_ref = heads_[src.slot_base + s.slot];
    const std::uint32_t head = head_ref;
    head_ref = detail::kNilIndex;
    src.occupied.reset(s.slot);
    // A copy: the loop's stores may alias the wheel's members, not a local.
    const key_of_type key_of = key_of_;
    auto key_of_node = [&key_of](const Node& n) noexcept -> Key {
      if constexpr (stores_keys) {
        static_cast<void>(key_of);  // captured for the other branch
        return n.key;
      } else {
        return key_of(value_of(n));
      }
    };
    std::size_t moved = 0;
    std::uint32_t first = head;
    Key first_key = key_of_node(pool_[first]);
    for (;;) {
      // The run starting at `first`: the keys of its slot are [lo, lo + 2^shift).
      const int level = level_of(first_key);
      const int shift = levels_[level].shift;
      const Key lo = first_key >> shift << shift;
      const std::size_t slot = slot_of(first_key, level);
      const std::uint32_t place = static_cast<std::uint32_t>(level) | static_cast<std::uint32_t>(slot << 8);
      pool_[first].place = place;
      std::uint32_t last = first;
      std::uint32_t min = first;
      Key min_key = first_key;
      std::size_t count = 1;
      std::uint32_t next;
      Key next_key = 0;
      for (;;) {
        next = pool_[last].next;
        if (next == head) break;
        Node& n = pool_[next];
        next_key = key_of_node(n);
        if (((next_key - lo) >> shift) != 0) break;  // another slot
        n.place = place;
        if (next_key < min_key) {
          min = next;
          min_key = next_key;
        }
        last = next;
        ++count;
      }
      splice(first, last, count, level, slot, min, min_key);
      moved += count;
      if (next == head) break;
      first = next;
      first_key = next_key;
    }
    // Every element landed lower, so the count of this level was not read.
    if ((src.count -= moved) == 0) nonempty_levels_ &= ~(std::uint64_t{1} << s.level);
    moved_by_last_increase_ += moved;
  }

  // After now_ entered the next span moved down ahead of the levels in
  // `levels` (bits; above 0, below the top), now's slot on each may hold
  // elements moved down ahead whose keys now belong lower: re-file them, as
  // the increase that enters a slot does. (Elsewhere now's slot above level
  // 0 is the slot the increase just cascaded, or was empty.)
  void cascade_now_slots(std::uint64_t levels) noexcept {
    for (; levels != 0; levels &= levels - 1) {
      const int level = std::countr_zero(levels);
      const std::size_t slot = slot_of(now_, level);
      if (heads_[levels_[level].slot_base + slot] != detail::kNilIndex) cascade_slot(SlotRef{level, slot, now_});
    }
  }

  // Calls f(const T&) for each element of slot s; false if s is none.
  template <class F>
  bool for_each_in_slot(const SlotRef& s, F& f) const {
    if (s.level < 0) return false;
    const std::uint32_t head = slot_head(s);
    std::uint32_t i = head;
    do {
      const Node& n = pool_[i];
      f(value_of(n));
      i = n.next;
    } while (i != head);
    return true;
  }

  LevelBits bits_;
  Storage pool_;  // the nodes (an ElementPool, or the caller's: detail::CallerNodes)
  [[no_unique_address]] key_of_type key_of_;
  std::vector<Level> levels_;
  std::vector<std::uint32_t> heads_;  // slot list heads, all levels
  // Per slot above level 0: the index of its first element with the smallest
  // key, or kMinUnknown (its minimum left; min_index scans it again). Only
  // meaningful while the slot is non-empty; the first link into an empty
  // slot sets it.
  mutable std::vector<std::uint32_t> slot_min_;
  // The slot above level 0 that link() last filed into (its index in heads_,
  // or kNoSlot) and the key of its cached minimum, so that the next link
  // there (adds and cascades file runs of nearby keys into one slot)
  // compares keys without computing the minimum's key again (a division for
  // TimingWheel). Valid while that slot's minimum stays cached: unlinking
  // the minimum, and clear(), forget it.
  static constexpr std::size_t kNoSlot = static_cast<std::size_t>(-1);
  struct LinkHint {
    std::size_t slot = kNoSlot;
    Key min_key = 0;
  } hint_;
  int num_levels_ = 0;
  int num_bits_ = 0;
  // Every level has at most 2^kNodeSlotBits slots, so a node's slot field
  // holds its slot and unlink needs no key (true unless a level has more
  // than 23 bits).
  static constexpr int kNodeSlotBits = 24;
  bool slots_in_nodes_ = true;
  int block_shift_ = 0;  // S_1: now_ >> it is now's block
  int top_shift_ = 0;    // S_{L-1}
  // max_allowed_key() before clamping is floor(now_, 2^S_{L-1}) + this.
  Key max_ahead_ = 0;
  Key now_ = 0;
  std::size_t size_ = 0;
  std::uint64_t nonempty_levels_ = 0;  // bit i set iff levels_[i].count > 0
  // Bit j set: level j (below the top) also holds the next level-j span,
  // moved down ahead by cascade_ahead (its second bank).
  std::uint64_t ahead_levels_ = 0;
  // Per level below the top: one past its last key, the end of now's span or,
  // while bit j of ahead_levels_ is set, of the next span. level_of reads it.
  std::array<Key, kMaxLevels> level_end_{};
  // Bit b -> the level whose slots are told apart by bit b (S_i <= b <
  // S_{i+1}; the top level for every bit from S_{L-1} on).
  std::array<std::uint8_t, 64> level_by_bit_{};
  mutable std::uint32_t min_cache_ = detail::kNilIndex;
  mutable Key min_cache_key_ = 0;  // the key of min_cache_ while it is an element
  std::size_t moved_by_last_increase_ = 0;
  std::size_t moved_by_last_cascade_ahead_ = 0;
  bool removing_ = false;
};

}  // namespace chime
