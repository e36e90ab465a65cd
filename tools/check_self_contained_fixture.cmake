# Proves that tools/check_self_contained.cmake fails on a reference outside the repository:
# writes a two-file tree (not a git work tree) whose second file names the folder beside it,
# runs the checker on it, and passes only when the checker reports exactly that file.
# Usage: cmake -DWORK_DIR=<scratch folder> -DCHECKER=<check_self_contained.cmake> -P <this file>
cmake_policy(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${WORK_DIR}/clean.txt "reads validation/data/gemm.csv\n")
set(dotdot "..")
file(WRITE ${WORK_DIR}/docs/bad.md "see ${dotdot}/shared/README.md\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${WORK_DIR} -P ${CHECKER}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the checker passed a tree that refers outside it:\n${out}${err}")
endif()
if(NOT err MATCHES "1 file\\(s\\) refer" OR NOT err MATCHES "docs/bad.md: refers to")
  message(FATAL_ERROR "the checker failed, but not on docs/bad.md alone:\n${err}")
endif()
message(STATUS "the checker caught docs/bad.md")
