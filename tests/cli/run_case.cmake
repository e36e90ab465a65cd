# Runs alpa-sim as a user would and checks its exit code, stdout and stderr.
# A case file (tests/cli/cases/<name>.case) is a CMake script that sets:
#   ARGS             the command-line arguments (a list; @SRC@ = repository root,
#                    @WORK@ = a scratch folder for this case)
#   EXPECT_EXIT      the exit code
#   EXPECT_STDERR    (optional) the exact stderr text, "" for none
#   EXPECT_STDOUT    (optional) the exact stdout text (@WORK@ replaced as in ARGS)
#   EXPECT_STDOUT_REGEX (optional) a regex stdout must match
#   EXPECT_STDOUT_EMPTY (optional) TRUE when stdout must be empty
#   EXPECT_FILES     (optional) files (relative to @WORK@) that must exist after the run
#   FILES / FILE_<name> (optional) names and contents of files to create in @WORK@ first
#   CHECK            (optional) CMake code run after the checks above (variables `work` and
#                    ALPA_SIM), which calls message(SEND_ERROR ...) on a failure
include(${CASE})
get_filename_component(case_name ${CASE} NAME_WE)
set(work ${WORK_DIR}/${case_name})
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})
foreach(name IN LISTS FILES)
  file(WRITE ${work}/${name} "${FILE_${name}}")
endforeach()
set(args "")
foreach(a IN LISTS ARGS)
  string(REPLACE "@SRC@" "${SOURCE_DIR}" a "${a}")
  string(REPLACE "@WORK@" "${work}" a "${a}")
  list(APPEND args "${a}")
endforeach()
execute_process(COMMAND ${ALPA_SIM} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
include(${CMAKE_CURRENT_LIST_DIR}/check_run.cmake)
foreach(f IN LISTS EXPECT_FILES)
  if(NOT EXISTS ${work}/${f})
    message(SEND_ERROR "expected file ${work}/${f} was not written")
    set(failed TRUE)
  endif()
endforeach()
if(DEFINED CHECK)
  cmake_language(EVAL CODE "${CHECK}")
endif()
if(failed)
  message(FATAL_ERROR "case ${case_name} failed (command: ${ALPA_SIM} ${args})")
endif()
