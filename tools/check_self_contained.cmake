# Fails when a file of the repository refers to the project's shared folder that sits beside a
# working copy (the parent folder's "shared", its reference figures or reliability reproducers).
# A fresh clone has no such folder, so every figure a test, benchmark, tool or document uses
# must live in the repository (validation/data/, tests/data/).
# Usage: cmake -DSOURCE_DIR=<tree> -P tools/check_self_contained.cmake   (CTest "self_contained")
# Files: `git ls-files` when SOURCE_DIR is a git work tree (what a clone carries), else every
# file under SOURCE_DIR (the fixture of "self_contained_catches_violation").
cmake_policy(VERSION 3.25)
# The patterns are assembled from pieces so that this file does not match itself.
set(dotdot "..")
set(shared "shared")
set(patterns "${dotdot}/${shared}" "${shared}/reference" "${shared}/reliability")

set(files "")
if(EXISTS ${SOURCE_DIR}/.git)
  find_program(GIT git)
  if(GIT)
    execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} ls-files
                    OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" files "${listing}")
    endif()
  endif()
endif()
if(NOT files)
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} LIST_DIRECTORIES false ${SOURCE_DIR}/*)
  list(FILTER files EXCLUDE REGEX "^(build[^/]*|\\.git)/")
endif()

set(violations "")
set(files_checked 0)
foreach(rel IN LISTS files)
  if(rel STREQUAL "" OR NOT EXISTS ${SOURCE_DIR}/${rel} OR IS_DIRECTORY ${SOURCE_DIR}/${rel})
    continue()
  endif()
  math(EXPR files_checked "${files_checked} + 1")
  file(READ ${SOURCE_DIR}/${rel} text)
  foreach(pattern IN LISTS patterns)
    string(FIND "${text}" "${pattern}" at)
    if(NOT at EQUAL -1)
      list(APPEND violations "${rel}: refers to \"${pattern}\"")
      break()
    endif()
  endforeach()
endforeach()

list(LENGTH violations n)
if(n GREATER 0)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "self_contained: ${n} file(s) refer to the folder beside the repository "
                      "(copy what they need into validation/data/ or tests/data/):\n  ${text}")
endif()
message(STATUS "self_contained: ${files_checked} files checked, none refers outside the repository")
