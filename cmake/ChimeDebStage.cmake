# SPDX-License-Identifier: BSL-1.0
# Run by cpack on the staged package tree before it makes the .deb (CPACK_PRE_BUILD_SCRIPTS,
# cmake/ChimePackage.cmake). Refuses a build tree that is not laid out as Debian expects (the
# library in /usr/lib/<multiarch triplet>, the docs in /usr/share/doc/<package>): configure
# with the `package` preset. Then strips the static libraries as Debian's dh_strip does
# (debug sections, .comment and .note; deterministic archive headers).
set(pkg "${CPACK_DEBIAN_PACKAGE_NAME}")
if(CPACK_CHIME_LIBRARY_ARCHITECTURE AND NOT CPACK_CHIME_LIBDIR STREQUAL "lib/${CPACK_CHIME_LIBRARY_ARCHITECTURE}")
  message(FATAL_ERROR "${pkg}: the library directory is '${CPACK_CHIME_LIBDIR}', not the multiarch "
                      "lib/${CPACK_CHIME_LIBRARY_ARCHITECTURE}: make the .deb with the package preset "
                      "(cmake --workflow --preset package), or configure with -DCMAKE_INSTALL_PREFIX=/usr")
endif()
if(NOT CPACK_CHIME_DOCDIR STREQUAL "share/doc/${pkg}")
  message(FATAL_ERROR "${pkg}: the doc directory is '${CPACK_CHIME_DOCDIR}', not share/doc/${pkg}: make the "
                      ".deb with the package preset (cmake --workflow --preset package), or configure with "
                      "-DCMAKE_INSTALL_DOCDIR=share/doc/${pkg}")
endif()
file(GLOB_RECURSE libs "${CPACK_TEMPORARY_DIRECTORY}/*.a")
if(NOT libs)
  message(FATAL_ERROR "${pkg}: no static library staged under ${CPACK_TEMPORARY_DIRECTORY}")
endif()
foreach(lib IN LISTS libs)
  execute_process(COMMAND ${CPACK_CHIME_STRIP} --strip-debug --remove-section=.comment --remove-section=.note
                          --enable-deterministic-archives ${lib}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${pkg}: ${CPACK_CHIME_STRIP} failed on ${lib}")
  endif()
endforeach()
