# SPDX-License-Identifier: BSL-1.0
# cmake -DCOMPILER=clang++ -DINCLUDE_DIR=<src>/include -DWORK_DIR=<dir> "-DFLAGS=-pedantic-errors;-Wall;-Wextra;-Werror"
#       [-DSKIP=chime/uv.hpp] -P ChimeCheckHeaders.cmake
# Compiles a translation unit that includes each header of INCLUDE_DIR/chime/ twice, as ISO
# C++20 (-std=c++20), with FLAGS. Fails (listing every offending header and its diagnostics)
# if any does not compile.
# SKIP: headers left out on purpose (an optional adapter whose library is missing).
foreach(var COMPILER INCLUDE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ChimeCheckHeaders.cmake: -D${var}=... is required")
  endif()
endforeach()

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/chime/*.hpp)
list(SORT headers)
if(SKIP)
  list(REMOVE_ITEM headers ${SKIP})
  message(STATUS "skipped (library missing): ${SKIP}")
endif()
if(NOT headers)
  message(FATAL_ERROR "no headers found in ${INCLUDE_DIR}/chime")
endif()
file(MAKE_DIRECTORY ${WORK_DIR})

set(failed)
foreach(header IN LISTS headers)
  string(MAKE_C_IDENTIFIER "${header}" tu_name)
  set(tu ${WORK_DIR}/${tu_name}.cpp)
  file(WRITE ${tu} "#include <${header}>\n#include <${header}>\n")
  execute_process(
    COMMAND ${COMPILER} -std=c++20 ${FLAGS} -I${INCLUDE_DIR} -fsyntax-only ${tu}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(rc EQUAL 0)
    message(STATUS "ok    ${header}")
  else()
    message(STATUS "FAIL  ${header}\n${out}")
    list(APPEND failed ${header})
  endif()
endforeach()

list(LENGTH headers n_headers)
if(failed)
  list(LENGTH failed n_failed)
  message(FATAL_ERROR "${n_failed} of ${n_headers} headers are not self-contained with ${COMPILER}: ${failed}")
endif()
message(STATUS "all ${n_headers} headers are self-contained with ${COMPILER}")
