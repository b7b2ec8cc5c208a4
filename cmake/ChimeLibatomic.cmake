# SPDX-License-Identifier: BSL-1.0
# Whether a std::atomic of a 12-byte trivially copyable type (chime::TimerId: slot,
# generation, runtime tag) links without libatomic. GCC and Clang compile its load, store
# and compare-exchange to calls (__atomic_load, __atomic_compare_exchange) that only
# libatomic defines, so a user's `std::atomic<chime::TimerId>` would fail to link. When
# that is so, chime::runtime links libatomic PUBLIC: whoever links chime::runtime (in the
# build tree, through the installed CMake package, or through chime.pc) gets -latomic.
#
# Sets CHIME_LINK_LIBATOMIC (ON/OFF). Fails when even -latomic does not link it.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

set(chime_atomic_probe [[
#include <atomic>
#include <cstdint>
struct Id { std::uint32_t a, b, c; };
int main() {
  std::atomic<Id> x{};
  Id expected = x.load();
  x.compare_exchange_strong(expected, Id{1, 2, 3});
  x.store(Id{4, 5, 6});
  return static_cast<int>(x.load().a);
}
]])

cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_QUIET ON)
set(CMAKE_CXX_STANDARD 20)
check_cxx_source_compiles("${chime_atomic_probe}" CHIME_ATOMIC12_WITHOUT_LIBATOMIC)
if(CHIME_ATOMIC12_WITHOUT_LIBATOMIC)
  set(CHIME_LINK_LIBATOMIC OFF)
else()
  set(CMAKE_REQUIRED_LIBRARIES atomic)
  check_cxx_source_compiles("${chime_atomic_probe}" CHIME_ATOMIC12_WITH_LIBATOMIC)
  if(NOT CHIME_ATOMIC12_WITH_LIBATOMIC)
    message(FATAL_ERROR "chime: std::atomic<TimerId> links neither without nor with -latomic "
                        "(on Debian, libatomic comes with libgcc-12-dev)")
  endif()
  set(CHIME_LINK_LIBATOMIC ON)
endif()
cmake_pop_check_state()
message(STATUS "chime: chime::runtime links libatomic: ${CHIME_LINK_LIBATOMIC}")
