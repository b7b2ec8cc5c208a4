# SPDX-License-Identifier: BSL-1.0
# Install rules and the CMake package: find_package(chime CONFIG) gives chime::wheel
# (and every other target in `chime_installed_targets`, see the top-level CMakeLists.txt).
#
# Installed layout (relative to the prefix):
#   include/chime/**                      public headers
#   lib/cmake/chime/chimeConfig.cmake     entry point (configure_package_config_file)
#   lib/cmake/chime/chimeConfigVersion.cmake
#   lib/cmake/chime/chimeTargets*.cmake   the exported targets, namespace chime::
#   share/chime/ (stress/tsan.supp)      ThreadSanitizer suppressions for a user's TSan build
#                                         (docs/using.md, "Using chime under ThreadSanitizer")
#   lib/pkgconfig/chime.pc                pkg-config: the headers and chime::runtime's library
#                                         (with -pthread, and -latomic when TimerId needs it)
#   share/doc/chime/copyright             the licences (DEP-5, cmake/debian/copyright.in):
#                                         chime's and those of what libchime_runtime.a compiles in
# `lib` is GNUInstallDirs' CMAKE_INSTALL_LIBDIR: lib/<multiarch triplet> on Debian when the
# prefix is /usr (the `package` preset), and CMAKE_INSTALL_DOCDIR names the doc folder.
include(CMakePackageConfigHelpers)

set(CHIME_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/chime
    CACHE STRING "Where chimeConfig.cmake is installed, relative to the prefix")

install(TARGETS ${chime_installed_targets} EXPORT chimeTargets)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/chime
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
# The same file scripts/test uses (stress/tsan.supp): third-party false positives only.
install(FILES ${PROJECT_SOURCE_DIR}/stress/tsan.supp DESTINATION ${CMAKE_INSTALL_DATADIR}/chime)
install(EXPORT chimeTargets
        NAMESPACE chime::
        FILE chimeTargets.cmake
        DESTINATION ${CHIME_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/chimeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/chimeConfig.cmake
  INSTALL_DESTINATION ${CHIME_INSTALL_CMAKEDIR})
# 0.x: minor versions may break the API, so only the same minor version is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/chimeConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chimeConfig.cmake
              ${PROJECT_BINARY_DIR}/chimeConfigVersion.cmake
        DESTINATION ${CHIME_INSTALL_CMAKEDIR})

# chime.pc: relocatable (its prefix is ${pcfiledir} up to the install prefix), so the same
# file serves an install under any --prefix and an unpacked .deb.
set(CHIME_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH CHIME_PC_RELATIVE_PREFIX /prefix/${CHIME_PKGCONFIG_DIR} /prefix)
string(REGEX REPLACE "/$" "" CHIME_PC_RELATIVE_PREFIX "${CHIME_PC_RELATIVE_PREFIX}")
set(CHIME_PC_LIBATOMIC "")
if(CHIME_LINK_LIBATOMIC)
  set(CHIME_PC_LIBATOMIC " -latomic")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/chime.pc.in ${PROJECT_BINARY_DIR}/chime.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/chime.pc DESTINATION ${CHIME_PKGCONFIG_DIR})

# The licences: chime's (BSL-1.0) and the notices of moodycamel's queue, which
# libchime_runtime.a compiles in (README, "License").
set(CHIME_PACKAGE_MAINTAINER "chime developers <chime-dev@lists.example.org>"
    CACHE STRING "Maintainer field of the .deb, and contact of the copyright file: \"Name <address>\"")
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/copyright.in ${PROJECT_BINARY_DIR}/copyright @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
