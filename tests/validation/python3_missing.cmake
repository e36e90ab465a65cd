# Stands in for python3 in validation/profiles_in_sync when the build was configured without
# one (tests/validation/CMakeLists.txt): the test fails with this message rather than being
# left out of the suite. The arguments after "--" (the script and its flags) are ignored.
message(FATAL_ERROR "validation/profiles_in_sync: python3 was not found when the build was configured; "
                    "the test runs profiles/derive_from_reference.py --check. Install python3 "
                    "(tools/setup.sh does with ALPASIM_TEST_PACKAGES=1, as tools/test.sh sets) and reconfigure.")
