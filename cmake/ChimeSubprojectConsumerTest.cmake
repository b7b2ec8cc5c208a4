# SPDX-License-Identifier: BSL-1.0
# ctests `subproject_consumer_add_subdirectory` and `subproject_consumer_fetchcontent`:
# configures, builds and runs tests/subproject_consumer, which takes the chime source tree
# SOURCE_DIR into its own build (MODE add_subdirectory or FetchContent with SOURCE_DIR: no
# download), with the same generator, compiler, flags and build type as the main build. It
# compiles chime's runtime again, in WORK_DIR (about a minute of CPU).
#
# cmake -DSOURCE_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DMODE=... -DGENERATOR=...
#       -DMAKE_PROGRAM=... -DCXX_COMPILER=... "-DCXX_FLAGS=..." -DBUILD_TYPE=...
#       -P ChimeSubprojectConsumerTest.cmake
foreach(var SOURCE_DIR CONSUMER_DIR WORK_DIR MODE GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ChimeSubprojectConsumerTest.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run step)
  message(STATUS "[subproject_consumer ${MODE}] ${step}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[subproject_consumer ${MODE}] ${step} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(configure_args
  -S ${CONSUMER_DIR} -B ${WORK_DIR} -G ${GENERATOR}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  -DCHIME_SOURCE_DIR=${SOURCE_DIR}
  -DCHIME_CONSUMER_MODE=${MODE}
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
set(config_args)
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
  set(config_args --config ${BUILD_TYPE})
endif()
run(configure ${CMAKE_COMMAND} ${configure_args})
run(build ${CMAKE_COMMAND} --build ${WORK_DIR} ${config_args})
foreach(name chime_install_consumer chime_install_consumer_runtime)
  set(exe ${WORK_DIR}/${name})
  if(NOT EXISTS ${exe} AND BUILD_TYPE)
    set(exe ${WORK_DIR}/${BUILD_TYPE}/${name})
  endif()
  run(run ${exe})
endforeach()
message(STATUS "[subproject_consumer ${MODE}] ok")
