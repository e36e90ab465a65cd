// Fixture for tools/check_test_names.cmake (never compiled): a name CTest would split.
TEST_CASE("runs the thing; checks the other") {}
