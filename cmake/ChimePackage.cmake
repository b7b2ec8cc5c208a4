# SPDX-License-Identifier: BSL-1.0
# CPack: the Debian package chime-dev_<version>_<arch>.deb from the install rules
# (cmake/ChimeInstall.cmake): the headers, the static chime::runtime library, the CMake
# package, chime.pc and tsan.supp under /usr, the DEP-5 copyright file and the changelog in
# /usr/share/doc/chime-dev. Make it with the `package` presets (CMakePresets.json), which
# configure with CMAKE_INSTALL_PREFIX=/usr (so GNUInstallDirs picks the multiarch library
# directory, /usr/lib/<triplet>), Release flags without -g, and nothing but what ships:
#   cmake --workflow --preset package     # build/package/chime-dev_<version>_<arch>.deb
# cmake/ChimeDebStage.cmake refuses to package a tree configured otherwise and strips the
# library as Debian's dh_strip does. scripts/check-deb checks the result (lintian included).

# CHIME_PACKAGE_MAINTAINER (cmake/ChimeInstall.cmake) is the Maintainer field, and the
# changelog's and copyright file's contact: override it with
# -DCHIME_PACKAGE_MAINTAINER="Name <address>" when you build a package you distribute.
set(CHIME_PACKAGE_HOMEPAGE "" CACHE STRING "Homepage field of the .deb (none if empty)")

set(CPACK_PACKAGE_NAME chime-dev)
set(CPACK_PACKAGE_VENDOR "chime")
set(CPACK_PACKAGE_CONTACT "${CHIME_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++20 timers: hierarchical timing wheel and timer runtime")
# CPack puts the summary above it as the synopsis.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "chime is a C++20 timer library for programs that keep very many timeouts
alive at once: a header-only hierarchical timing wheel (CMake target
chime::wheel) and a multi-threaded timer runtime (chime::runtime, the static
library libchime_runtime.a): producer threads schedule, cancel and
reschedule timers through lock-free queues, a wheel thread fires them on
worker threads or on an event loop's lane. Optional headers run a lane
inside a Boost.Asio io_context (chime/asio.hpp) or a libuv loop
(chime/uv.hpp).
.
This package holds the headers, the static library, the CMake package
(find_package(chime)) and chime.pc for pkg-config.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_NAME chime-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # chime-dev_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CHIME_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
if(CHIME_PACKAGE_HOMEPAGE)
  set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${CHIME_PACKAGE_HOMEPAGE}")
endif()
# What a consumer's compile and link need: the installed headers include only the standard
# library (chime/asio.hpp and chime/uv.hpp aside), chimeConfig.cmake finds only Threads, and
# moodycamel's queue is compiled into libchime_runtime.a (its headers are not installed or
# included). libgcc-dev brings libatomic.so for -latomic (std::atomic<TimerId>).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6-dev, libstdc++-12-dev | libstdc++-dev, libgcc-12-dev | libgcc-dev")
# The optional adapters: chime/asio.hpp includes Boost.Asio, chime/uv.hpp includes <uv.h>.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libboost-dev (>= 1.74), libuv1-dev, cmake (>= 3.25), pkg-config")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "g++ (>= 4:12) | clang (>= 1:14)")
set(CPACK_STRIP_FILES ON)  # executables and shared objects; the .a is stripped in ChimeDebStage
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/ChimeDebStage.cmake)
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR "")
# What ChimeDebStage.cmake checks the staged tree against.
set(CPACK_CHIME_LIBDIR ${CMAKE_INSTALL_LIBDIR})
set(CPACK_CHIME_DOCDIR ${CMAKE_INSTALL_DOCDIR})
set(CPACK_CHIME_LIBRARY_ARCHITECTURE "${CMAKE_LIBRARY_ARCHITECTURE}")
set(CPACK_CHIME_STRIP ${CMAKE_STRIP})
include(CPack)

# changelog.gz (the version is native: no Debian revision), compressed as Debian does (gzip -9n:
# no name, no timestamp).
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${PROJECT_BINARY_DIR}/debian/changelog @ONLY)
find_program(CHIME_GZIP gzip REQUIRED)
# At configure time, so that an install needs no build step for it.
execute_process(COMMAND ${CHIME_GZIP} -9nc ${PROJECT_BINARY_DIR}/debian/changelog
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/debian/changelog.gz RESULT_VARIABLE chime_gzip_rc)
if(NOT chime_gzip_rc EQUAL 0)
  message(FATAL_ERROR "gzip of debian/changelog failed (${chime_gzip_rc})")
endif()
install(FILES ${PROJECT_BINARY_DIR}/debian/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
