# Fails when a doctest TEST_CASE name holds a character that CTest's test discovery
# (doctest_discover_tests) cannot carry: ';' splits the name into two CTest tests whose
# "--test-case" filters match nothing, so the test case never runs and CTest reports both
# halves as passed. Until 2026-11-26, 24 test cases were silently skipped that way.
#   cmake -DSOURCE_DIR=<tree> -P tools/check_test_names.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "check_test_names: set -DSOURCE_DIR")
endif()
file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/tests/*.cc ${SOURCE_DIR}/fuzz/*.cc)
list(SORT sources)
set(bad "")
set(count 0)
foreach(rel IN LISTS sources)
  if(rel MATCHES "^tests/data/")  # fixtures, never compiled
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${rel} lines REGEX "TEST_CASE\\(\"")
  foreach(line IN LISTS lines)
    math(EXPR count "${count} + 1")
  endforeach()
  # file(STRINGS) itself splits on ';', so look for the pattern in the raw text instead.
  file(READ ${SOURCE_DIR}/${rel} text)
  string(REGEX MATCHALL "TEST_CASE\\(\"[^\"\n]*;[^\"\n]*\"" hits "${text}")
  if(hits)
    string(APPEND bad "  ${rel}: a TEST_CASE name holds ';'\n")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "test names: CTest cannot run these test cases:\n${bad}")
endif()
message(STATUS "test names: ${count} TEST_CASE lines, none with ';'")
