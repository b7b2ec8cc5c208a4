# SPDX-License-Identifier: BSL-1.0
# libuv for the optional adapter include/chime/uv.hpp (its tests, its example and the header
# check): found with pkg-config (Debian: libuv1-dev + pkg-config), as bench/CMakeLists.txt does.
# Sets the global imported target PkgConfig::CHIME_LIBUV when found; without it, whatever needs
# libuv is left out (and the header check skips chime/uv.hpp).
include_guard(GLOBAL)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(CHIME_LIBUV QUIET IMPORTED_TARGET GLOBAL libuv)
endif()
if(TARGET PkgConfig::CHIME_LIBUV)
  message(STATUS "chime: libuv ${CHIME_LIBUV_VERSION} found: chime/uv.hpp is checked, tested and used by examples")
else()
  message(STATUS "chime: no libuv (install libuv1-dev and pkg-config): chime/uv.hpp's tests and example are left out")
endif()
