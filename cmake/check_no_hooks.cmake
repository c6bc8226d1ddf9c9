# Fails unless every source given compiles warning-free without the fault-injection hooks
# (CINDER_FAULT_INJECTION undefined, as a -DCINDER_TESTS=OFF build compiles it) and names none of
# them once preprocessed: what a packaged build's binary is made of has no hook's field, branch or
# environment variable.
#   cmake -DCC=cc -DROOT=. -DGEN=build/generated -DFILES="a.c;b.c" [-DDEFS="A=1|B"] -P cmake/check_no_hooks.cmake
# DEFS: the layers' own definitions, |-separated (all but the hooks' switch).
# PROBE_FLAGS (the test of the check itself) are added to the compiler's flags.
cmake_minimum_required(VERSION 3.25)

# What only the hooks use: their fields, their state and the variable the disk tier's reads.
set(hook_names CINDER_FAULT_DISK fail_every fail_commits fail_copies cvk_faults io_fault kv_disk_fault_set)
string(REPLACE "|" ";" defs "${DEFS}")
list(TRANSFORM defs PREPEND -D)
set(flags ${defs} -std=c17 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Werror -I${ROOT} -I${GEN} ${PROBE_FLAGS})
set(bad 0)
foreach(f ${FILES})
  execute_process(COMMAND ${CC} ${flags} -fsyntax-only ${ROOT}/${f} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message("${f} does not compile without the hooks:\n${err}")
    math(EXPR bad "${bad} + 1")
    continue()
  endif()
  execute_process(COMMAND ${CC} ${flags} -E -P ${ROOT}/${f} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  foreach(name ${hook_names})
    string(REGEX MATCH "[^A-Za-z0-9_]${name}[^A-Za-z0-9_]" hit "${text}")
    if(hit)
      message("${f} names ${name} without the hooks")
      math(EXPR bad "${bad} + 1")
    endif()
  endforeach()
endforeach()
list(LENGTH FILES n)
if(bad)
  message(FATAL_ERROR "${bad} problem(s) in ${n} sources compiled without the fault-injection hooks")
endif()
message("${n} sources compile without the fault-injection hooks and name none of them")
