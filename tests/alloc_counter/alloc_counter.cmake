# SPDX-License-Identifier: BSL-1.0
# The allocation counter of tests/ and bench/ (alloc_counter.hpp: what it measures), two builds
# of the one alloc_counter.cpp, as OBJECT libraries so that their replacement allocation
# functions are always linked. tests/CMakeLists.txt and bench/CMakeLists.txt include this file,
# whichever of them is built.
#   chime_alloc_counter         counts in operator new/delete (chime_runtime_tests)
#   chime_alloc_counter_malloc  counts in the malloc family, which the linker wraps (chime_bench)
include_guard(GLOBAL)

add_library(chime_alloc_counter OBJECT ${CMAKE_CURRENT_LIST_DIR}/alloc_counter.cpp)
target_include_directories(chime_alloc_counter PUBLIC ${CMAKE_CURRENT_LIST_DIR})

add_library(chime_alloc_counter_malloc OBJECT ${CMAKE_CURRENT_LIST_DIR}/alloc_counter.cpp)
target_include_directories(chime_alloc_counter_malloc PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(chime_alloc_counter_malloc PRIVATE CHIME_ALLOC_COUNTER_WRAP_MALLOC=1)
target_link_options(chime_alloc_counter_malloc INTERFACE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=free")
