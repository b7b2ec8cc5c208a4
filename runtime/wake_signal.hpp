// SPDX-License-Identifier: BSL-1.0
// runtime/wake_signal.hpp: how the wheel thread sleeps and is woken.
//
// What this is: a futex word. The sleeper reads the word (`prepare`), checks
// its wake conditions, then `wait`s while the word still has the value it
// read, until a deadline. A waker bumps the word and wakes the sleeper.
// Because the sleeper only sleeps if the word is unchanged since `prepare`,
// a wake that lands between "decided to sleep" and "sleeps" is never lost.
// Who may touch it: one sleeper (the wheel thread); any thread wakes.
//
// Memory ordering: `wake` is a release RMW and `prepare` an acquire load;
// with the seq_cst fences documented in wheel_thread_sleep.cpp (P1/P2) they order "post a
// command, then read the sleeper's deadline" against "publish the deadline,
// then look at the queue".
#pragma once

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chime/time.hpp"

namespace chime::detail {

class WakeSignal {
 public:
  std::uint32_t prepare() const noexcept { return word_.load(std::memory_order_acquire); }

  // Sleeps while the word equals `seen`, until `deadline` on CLOCK_MONOTONIC
  // (the steady clock), or without a deadline if `deadline` is nullptr.
  void wait_until(std::uint32_t seen, const TimePoint* deadline) noexcept {
    timespec ts{};
    timespec* pts = nullptr;
    if (deadline != nullptr) {
      const auto ns = deadline->time_since_epoch().count();
      ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
      pts = &ts;
    }
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout.
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAIT_BITSET_PRIVATE, seen, pts, nullptr,
            FUTEX_BITSET_MATCH_ANY);
  }

  void wake() noexcept {
    word_.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

 private:
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  std::atomic<std::uint32_t> word_{0};
};

// Waiting for a run to end (cancel_and_wait): a futex on the low 32 bits of
// a slot's 64-bit state word (timer_state.hpp, WB). Sleeps while the half at
// `word`'s address still holds `seen`; returns on a wake, a signal, or at
// once if the value differs. The caller re-reads the word and loops.
inline void futex_wait_low_half(std::atomic<std::uint64_t>& word, std::uint32_t seen) noexcept {
  static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));
  static_assert(std::endian::native == std::endian::little, "the low half of the word is at its address");
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
// Wakes every thread waiting on the word's low half.
inline void futex_wake_all_low_half(std::atomic<std::uint64_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace chime::detail
