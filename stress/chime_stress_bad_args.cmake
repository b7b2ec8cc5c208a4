# SPDX-License-Identifier: BSL-1.0
# ctest chime_stress_bad_args: chime-stress rejects each bad argument with exit
# code 2 and a one-line message naming it, and --help exits 0.
# Usage: cmake -DCHIME_STRESS=<path to chime-stress> -P chime_stress_bad_args.cmake
if(NOT CHIME_STRESS)
  message(FATAL_ERROR "pass -DCHIME_STRESS=<path to chime-stress>")
endif()

# Each case: the arguments (separated by commas), "|", then the text the first line of
# stderr must contain.
set(cases
  "--bogus|--bogus"
  "--producers|--producers: missing value"
  "--timers,abc|--timers"
  "--timers,-5|--timers"
  "--producers,0|--producers"
  "--cancel-ratio,1.5|--cancel-ratio"
  "--reschedule-ratio,-0.1|--reschedule-ratio"
  "--precision,0|--precision"
  "--precision,-1ms|--precision"
  "--precision,3parsecs|--precision"
  "--seconds,ten|--seconds"
  "--seconds,0|--seconds"
  "--seed,12x|--seed"
  "--seconds,--timers,5|--seconds: missing value"
  "--burst,0|--burst"
  "--burst,many|--burst"
  "--max-queue-depth,-1|--max-queue-depth"
  "stray|stray")

foreach(case IN LISTS cases)
  string(FIND "${case}" "|" bar)
  string(SUBSTRING "${case}" 0 ${bar} args)
  math(EXPR after "${bar} + 1")
  string(SUBSTRING "${case}" ${after} -1 expected)
  string(REPLACE "," ";" parts "${args}")
  execute_process(COMMAND ${CHIME_STRESS} ${parts}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
  string(FIND "${err}" "\n" eol)
  string(SUBSTRING "${err}" 0 ${eol} first_line)
  if(NOT code EQUAL 2)
    message(FATAL_ERROR "chime-stress ${parts}: exit code ${code}, expected 2\nstderr:\n${err}")
  endif()
  string(FIND "${first_line}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "chime-stress ${parts}: first stderr line '${first_line}' does not name '${expected}'")
  endif()
  string(FIND "${err}" "usage: chime-stress" usage_at)
  if(usage_at EQUAL -1)
    message(FATAL_ERROR "chime-stress ${parts}: no usage after the message\nstderr:\n${err}")
  endif()
  message(STATUS "ok: chime-stress ${parts} -> exit 2: ${first_line}")
endforeach()

execute_process(COMMAND ${CHIME_STRESS} --help RESULT_VARIABLE code OUTPUT_VARIABLE out TIMEOUT 20)
if(NOT code EQUAL 0 OR NOT out MATCHES "usage: chime-stress")
  message(FATAL_ERROR "chime-stress --help: exit code ${code}, expected 0 and the usage on stdout")
endif()
message(STATUS "ok: chime-stress --help -> exit 0")
