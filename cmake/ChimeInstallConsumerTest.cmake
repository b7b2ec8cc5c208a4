# SPDX-License-Identifier: BSL-1.0
# ctest `install_consumer`: installs the build tree BUILD_DIR into WORK_DIR/prefix, then
# configures, builds and runs the consumer project CONSUMER_DIR against that prefix, with the
# same generator, compiler, flags and build type as the main build; then, if pkg-config is
# found, compiles and runs the consumer's runtime_main.cpp with only the flags that the
# installed chime.pc gives (`pkg-config --cflags --libs chime`).
#
# cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DGENERATOR=... -DMAKE_PROGRAM=...
#       -DCXX_COMPILER=... "-DCXX_FLAGS=..." -DBUILD_TYPE=... -P ChimeInstallConsumerTest.cmake
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ChimeInstallConsumerTest.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run step)
  message(STATUS "[install_consumer] ${step}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[install_consumer] ${step} failed (${rc})")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

set(config_args)
if(BUILD_TYPE)
  set(config_args --config ${BUILD_TYPE})
endif()
run(install ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_args})
if(NOT EXISTS ${prefix}/share/chime/tsan.supp)
  message(FATAL_ERROR "[install_consumer] the install has no share/chime/tsan.supp")
endif()

set(configure_args
  -S ${CONSUMER_DIR} -B ${consumer_build} -G ${GENERATOR}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  -DCMAKE_PREFIX_PATH=${prefix}
  # Only the prefix just installed may satisfy find_package(chime).
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
  -DCHIME_EXPECTED_PREFIX=${prefix})
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
run(configure ${CMAKE_COMMAND} ${configure_args})
run(build ${CMAKE_COMMAND} --build ${consumer_build} ${config_args})

# Single-config generators put the binaries at the top; multi-config ones in <config>/.
foreach(name chime_install_consumer chime_install_consumer_runtime)
  set(exe ${consumer_build}/${name})
  if(NOT EXISTS ${exe} AND BUILD_TYPE)
    set(exe ${consumer_build}/${BUILD_TYPE}/${name})
  endif()
  run(run ${exe})
endforeach()

find_program(PKG_CONFIG_EXECUTABLE NAMES pkg-config pkgconf)
if(PKG_CONFIG_EXECUTABLE)
  set(ENV{PKG_CONFIG_PATH} "")
  set(ENV{PKG_CONFIG_LIBDIR} "")
  file(GLOB pc_file ${prefix}/lib*/pkgconfig/chime.pc ${prefix}/lib/*/pkgconfig/chime.pc)
  if(NOT pc_file)
    message(FATAL_ERROR "[install_consumer] the install has no chime.pc")
  endif()
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --cflags --libs chime
                  OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[install_consumer] pkg-config --cflags --libs chime failed (${rc})")
  endif()
  message(STATUS "[install_consumer] pkg-config --cflags --libs chime: ${pc_flags}")
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
  set(pc_exe ${WORK_DIR}/chime_pkg_config_consumer)
  run(pkg-config-build ${CXX_COMPILER} -std=c++20 ${cxx_flags} ${CONSUMER_DIR}/runtime_main.cpp -o ${pc_exe}
      ${pc_flags})
  run(pkg-config-run ${pc_exe})
else()
  message(STATUS "[install_consumer] no pkg-config: chime.pc not checked")
endif()
message(STATUS "[install_consumer] ok")
