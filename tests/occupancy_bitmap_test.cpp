// SPDX-License-Identifier: BSL-1.0
// The wheel's slot bitmap (include/chime/detail/occupancy_bitmap.hpp): find_next / find_prev agree
// with a plain vector<bool> under random set/reset at sizes that end inside, on and past word and layer
// boundaries, and check() holds throughout and names a bit set beyond the size.
#include <chime/detail/occupancy_bitmap.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using chime::detail::OccupancyBitmap;

std::size_t model_next(const std::vector<bool>& m, std::size_t from) {
  for (std::size_t i = from; i < m.size(); ++i) {
    if (m[i]) return i;
  }
  return OccupancyBitmap::npos;
}

std::size_t model_prev(const std::vector<bool>& m, std::size_t from) {
  if (m.empty()) return OccupancyBitmap::npos;
  for (std::size_t i = std::min(from, m.size() - 1) + 1; i-- > 0;) {
    if (m[i]) return i;
  }
  return OccupancyBitmap::npos;
}

TEST(OccupancyBitmap, searches_agree_with_a_plain_bit_vector_and_check_holds) {
  std::mt19937_64 rng(20261125);
  for (const std::size_t size : {1u, 2u, 63u, 64u, 65u, 100u, 4095u, 4096u, 4097u, 262145u}) {
    OccupancyBitmap b(size);
    std::vector<bool> m(size, false);
    for (int op = 0; op < 3000; ++op) {
      // Dense around a few hot spots so words fill up and empty again.
      const std::size_t i = (rng() % 4 == 0 ? rng() : (rng() % 8) * (size / 8 + 1) + rng() % 70) % size;
      if (rng() % 2) {
        b.set(i);
        m[i] = true;
      } else {
        b.reset(i);
        m[i] = false;
      }
      const std::size_t from = rng() % (size + 2);
      ASSERT_EQ(b.test(i), m[i]) << "size " << size << " bit " << i;
      ASSERT_EQ(b.find_next(from), model_next(m, from)) << "size " << size << " from " << from;
      ASSERT_EQ(b.find_prev(from), model_prev(m, from)) << "size " << size << " from " << from;
      ASSERT_EQ(b.any(), model_next(m, 0) != OccupancyBitmap::npos);
      if (op % 100 == 0) {
        ASSERT_NO_THROW(b.check()) << "size " << size;
      }
    }
    ASSERT_NO_THROW(b.check()) << "size " << size;
  }
}

TEST(OccupancyBitmap, check_names_a_bit_set_beyond_the_size) {
  OccupancyBitmap b(100);
  b.set(99);
  ASSERT_NO_THROW(b.check());
  b.set(110);  // outside the contract (i < size), inside the last word: what check() is for
  try {
    b.check();
    FAIL() << "check() accepted bit 110 of a 100-bit bitmap";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("bit 110 set beyond size 100"), std::string::npos) << e.what();
  }
}

}  // namespace
