// SPDX-License-Identifier: BSL-1.0
// chime/detail/occupancy_bitmap.hpp: which slots of one wheel level are non-empty.
//
// What this is: a fixed-size set of bit indices [0, size), stored as a 64-ary
// tree of words. Layer 0 holds one bit per slot; each bit of layer L+1 says
// "word w of layer L is non-zero". The top layer is a single word.
//
// Who may touch it: the owning KeyWheel, on its one thread.
//
// Cost: set/reset touch at most `layers()` words (2 for a 2^11-slot level);
// find_next/find_prev touch at most 2 * layers() words. This is what lets the
// wheel skip empty slots without scanning them.
//
// Invariant (check() verifies): for every layer L > 0, bit w of layer L is set
// iff word w of layer L-1 is non-zero; no bit at or beyond `size` is set.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace chime::detail {

class OccupancyBitmap {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  OccupancyBitmap() = default;
  // `size` bits, all clear. May allocate.
  explicit OccupancyBitmap(std::size_t size) : size_(size) {
    std::size_t bits = size;
    std::size_t offset = 0;
    do {
      const std::size_t words = (bits + 63) / 64;
      if (layers_ == kMaxLayers) throw std::length_error("OccupancyBitmap: too many bits");
      layer_offset_[layers_] = static_cast<std::uint32_t>(offset);
      layer_words_[layers_] = static_cast<std::uint32_t>(words);
      ++layers_;
      offset += words;
      bits = words;
    } while (bits > 1);
    words_.assign(offset, 0);
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t layers() const noexcept { return layers_; }
  bool any() const noexcept { return words_.back() != 0; }

  bool test(std::size_t i) const noexcept { return (word(0, i >> 6) >> (i & 63)) & 1u; }
  // Bits 64 * wi to 64 * wi + 63 (wi < (size + 63) / 64), bit 0 first. For checks.
  std::uint64_t word_at(std::size_t wi) const noexcept { return word(0, wi); }

  // Sets bit i (i < size). Never allocates.
  void set(std::size_t i) noexcept {
    std::uint64_t& w0 = words_[i >> 6];  // layer 0 starts at offset 0
    const bool was_zero = w0 == 0;
    w0 |= std::uint64_t{1} << (i & 63);
    if (was_zero && layers_ > 1) set_upper(i >> 6);
  }

  // Clears bit i (i < size). Never allocates.
  void reset(std::size_t i) noexcept {
    std::uint64_t& w0 = words_[i >> 6];
    w0 &= ~(std::uint64_t{1} << (i & 63));
    if (w0 == 0 && layers_ > 1) reset_upper(i >> 6);
  }

  void clear() noexcept {
    for (auto& w : words_) w = 0;
  }

  // Smallest set index >= from, or npos. Inline for the common case, a set
  // bit in from's own word; the search up the layers is out of line.
  std::size_t find_next(std::size_t from) const noexcept {
    if (from >= size_) return npos;
    const std::size_t wi = from >> 6;
    if (const std::uint64_t w = words_[wi] & (~std::uint64_t{0} << (from & 63)); w != 0) {
      return (wi << 6) + static_cast<std::size_t>(std::countr_zero(w));
    }
    return find_next_word(wi + 1);
  }

  // Largest set index <= from (from is clamped to size - 1), or npos.
  std::size_t find_prev(std::size_t from) const noexcept {
    if (size_ == 0) return npos;
    if (from >= size_) from = size_ - 1;
    std::size_t layer = 0;
    std::size_t i = from;
    for (;;) {
      const std::size_t wi = i >> 6;
      const unsigned bit = static_cast<unsigned>(i & 63);
      const std::uint64_t mask = bit == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << bit) - 1;
      const std::uint64_t w = word(layer, wi) & mask;
      if (w != 0) {
        i = (wi << 6) + 63 - static_cast<std::size_t>(std::countl_zero(w));
        break;
      }
      if (++layer == layers() || wi == 0) return npos;
      i = wi - 1;
    }
    while (layer-- > 0) i = (i << 6) + 63 - static_cast<std::size_t>(std::countl_zero(word(layer, i)));
    return i;
  }

  // Throws std::logic_error if the summary layers disagree with the layer below
  // or a bit beyond size is set.
  void check() const {
    // Word by word: the last word of layer 0 may hold bits beyond size_; every other word is all valid.
    for (std::size_t wi = 0; wi < layer_words_[0]; ++wi) {
      const std::size_t valid = std::min<std::size_t>(64, size_ - std::min(size_, wi << 6));
      const std::uint64_t beyond = valid == 64 ? 0 : ~std::uint64_t{0} << valid;
      if (const std::uint64_t bad = word(0, wi) & beyond; bad != 0) {
        throw std::logic_error("OccupancyBitmap: bit " +
                               std::to_string((wi << 6) + static_cast<std::size_t>(std::countr_zero(bad))) +
                               " set beyond size " + std::to_string(size_));
      }
    }
    for (std::size_t layer = 1; layer < layers(); ++layer) {
      for (std::size_t wi = 0; wi < layer_words_[layer]; ++wi) {
        // The summary word wi should have bit b set exactly when word 64 * wi + b below is non-zero.
        std::uint64_t want = 0;
        for (std::size_t b = 0; b < 64 && (wi << 6) + b < layer_words_[layer - 1]; ++b) {
          want |= std::uint64_t{word(layer - 1, (wi << 6) + b) != 0} << b;
        }
        if (const std::uint64_t bad = word(layer, wi) ^ want; bad != 0) {
          throw std::logic_error("OccupancyBitmap: summary bit " +
                                 std::to_string((wi << 6) + static_cast<std::size_t>(std::countr_zero(bad))) +
                                 " of layer " + std::to_string(layer) + " disagrees with the layer below");
        }
      }
    }
  }

 private:
  std::uint64_t word(std::size_t layer, std::size_t wi) const noexcept { return words_[layer_offset_[layer] + wi]; }
  std::uint64_t& word(std::size_t layer, std::size_t wi) noexcept { return words_[layer_offset_[layer] + wi]; }

  // Records that layer-0 word wi became non-zero (zero), in the layers above.
  void set_upper(std::size_t wi) noexcept {
    for (std::size_t layer = 1; layer < layers_; ++layer) {
      std::uint64_t& w = word(layer, wi >> 6);
      const bool was_zero = w == 0;
      w |= std::uint64_t{1} << (wi & 63);
      if (!was_zero) return;  // upper layers already record this word
      wi >>= 6;
    }
  }
  void reset_upper(std::size_t wi) noexcept {
    for (std::size_t layer = 1; layer < layers_; ++layer) {
      std::uint64_t& w = word(layer, wi >> 6);
      w &= ~(std::uint64_t{1} << (wi & 63));
      if (w != 0) return;  // the word is still non-zero: upper layers unchanged
      wi >>= 6;
    }
  }

  // The first set bit of the first non-zero layer-0 word at or after word
  // wi, or npos.
  [[gnu::noinline]] std::size_t find_next_word(std::size_t wi) const noexcept {
    if (layers_ == 2) {
      // Two layers (64 to 4,096 bits: level 0 and the default levels above):
      // one summary word.
      if (wi >= layer_words_[0]) return npos;
      const std::uint64_t s = words_[layer_offset_[1]] & (~std::uint64_t{0} << wi);
      if (s == 0) return npos;
      const std::size_t w = static_cast<std::size_t>(std::countr_zero(s));
      return (w << 6) + static_cast<std::size_t>(std::countr_zero(words_[w]));
    }
    // General case: climb from layer 0 at bit index 64 * wi.
    std::size_t layer = 0;
    std::size_t i = wi << 6;
    for (;;) {
      const std::size_t wj = i >> 6;
      if (wj >= layer_words_[layer]) return npos;
      const std::uint64_t w = word(layer, wj) & (~std::uint64_t{0} << (i & 63));
      if (w != 0) {
        i = (wj << 6) + static_cast<std::size_t>(std::countr_zero(w));
        break;
      }
      if (++layer == layers()) return npos;
      i = wj + 1;
    }
    while (layer-- > 0) i = (i << 6) + static_cast<std::size_t>(std::countr_zero(word(layer, i)));
    return i;
  }

  // 2^36 bits at most: more than any wheel level (KeyWheel caps levels at 2^30 slots).
  static constexpr std::size_t kMaxLayers = 6;

  std::size_t size_ = 0;
  std::size_t layers_ = 0;
  std::array<std::uint32_t, kMaxLayers> layer_offset_{};
  std::array<std::uint32_t, kMaxLayers> layer_words_{};
  std::vector<std::uint64_t> words_;
};

}  // namespace chime::detail
