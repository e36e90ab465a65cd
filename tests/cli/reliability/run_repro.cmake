# Runs alpa-sim or alpa-exec on a bad input and checks that it fails cleanly: the exit
# code and the exact stderr (one line naming the file and the key). Used for the
# reliability reproducers of issue 18 (tests/data/reliability/, see its README.md).
# A case file (tests/cli/reliability/<name>.case) is a CMake script that sets:
#   TOOL           alpa-sim (default) or alpa-exec
#   ARGS           the arguments; @DATA@ = tests/data/reliability (relative to the
#                  repository root, the working directory), @WORK@ = a scratch folder
#   EXPECT_EXIT    the exit code
#   EXPECT_STDERR  (optional) the exact stderr, with @WORK@ replaced
#   EXPECT_STDOUT_EMPTY (optional) TRUE when stdout must be empty
#   SETUP          (optional) CMake code run first (with variable `work` = @WORK@ and
#                  `data` = the absolute data folder): create files, links, FIFOs
#   CHECK          (optional) CMake code run after, which calls message(SEND_ERROR ...) on
#                  a failure; `work`, `out` and `err` are set
#   ENV            (optional) NAME=VALUE items set for the tool's run only
include(${CASE})
get_filename_component(case_name ${CASE} NAME_WE)
set(work ${WORK_DIR}/${case_name})
set(data ${SOURCE_DIR}/tests/data/reliability)
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})
if(NOT DEFINED TOOL)
  set(TOOL alpa-sim)
endif()
if(TOOL STREQUAL "alpa-sim")
  set(exe ${ALPA_SIM})
elseif(TOOL STREQUAL "alpa-exec")
  set(exe ${ALPA_EXEC})
else()
  message(FATAL_ERROR "unknown TOOL ${TOOL}")
endif()
if(DEFINED SETUP)
  cmake_language(EVAL CODE "${SETUP}")
endif()
set(args "")
foreach(a IN LISTS ARGS)
  string(REPLACE "@DATA@" "tests/data/reliability" a "${a}")
  string(REPLACE "@WORK@" "${work}" a "${a}")
  list(APPEND args "${a}")
endforeach()
set(env_prefix "")
if(DEFINED ENV)
  set(env_prefix ${CMAKE_COMMAND} -E env ${ENV})
endif()
execute_process(COMMAND ${env_prefix} ${exe} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 120)
include(${CMAKE_CURRENT_LIST_DIR}/../check_run.cmake)
if(DEFINED CHECK)
  cmake_language(EVAL CODE "${CHECK}")
endif()
if(failed)
  message(FATAL_ERROR "case ${case_name} failed (command: ${exe} ${args})")
endif()
