# SPDX-License-Identifier: BSL-1.0
# CPack: `cpack -G DEB` in a build tree makes chime-dev_<version>_<arch>.deb from the install
# rules (cmake/ChimeInstall.cmake): the headers, the static chime::runtime library, the CMake
# package, chime.pc and tsan.supp, under /usr. scripts/check-deb builds it and checks that a
# consumer builds against it (find_package and pkg-config).
set(CPACK_PACKAGE_NAME chime-dev)
set(CPACK_PACKAGE_VENDOR "chime")
set(CPACK_PACKAGE_CONTACT "chime maintainers <chime@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++20 timers: a header-only hashed timing wheel and a multi-threaded timer runtime")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_NAME chime-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # chime-dev_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# A static library and headers: what a consumer's compile and link need. libstdc++-dev and
# libgcc-dev (libatomic.so for -latomic) come with any g++; named so that apt pulls them.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6-dev, libstdc++-12-dev | libstdc++-dev, libgcc-12-dev | libgcc-dev")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "g++ (>= 12) | clang (>= 14), cmake (>= 3.25), pkg-config")
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR "")
include(CPack)
