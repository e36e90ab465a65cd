# alpa-profile (docs/profilers.md), included from apps/CMakeLists.txt. With the microbench
# library (CUDA toolkit + cuDNN + NCCL) it is the real profiler; otherwise a main that says
# "built without CUDA" and exits 77, so the command line is testable on every machine.
# The file is chosen here, never by #ifdef (STYLE.md 9.6).
if(TARGET alpasim_exec_microbench)
  alpasim_add_executable(NAME alpa-profile SRCS alpa-profile/main.cc
    DEPS exec_microbench core CLI11::CLI11)
else()
  alpasim_add_executable(NAME alpa-profile SRCS alpa-profile/main_without_cuda.cc DEPS CLI11::CLI11)
endif()

if(ALPASIM_BUILD_TESTS)
  # Without a GPU the profiler must exit 77 with its message: CUDA_VISIBLE_DEVICES="" hides
  # every GPU, so this checks the same path on GPU machines too (and never measures).
  add_test(NAME cli/alpa_profile_no_gpu
    COMMAND ${CMAKE_COMMAND} -DALPA_PROFILE=$<TARGET_FILE:alpa-profile>
            -DWORK_DIR=${CMAKE_BINARY_DIR}/tests/alpa_profile_work
            -P ${PROJECT_SOURCE_DIR}/tests/unit/profile/alpa_profile_no_gpu.cmake)
  set_tests_properties(cli/alpa_profile_no_gpu PROPERTIES LABELS "cli")
endif()

if(ALPASIM_BUILD_TESTS AND TARGET alpasim_exec_microbench)
  # On a GPU machine (ctest -L gpu): a quick profile is written and calibrates; skipped (77)
  # where there is no GPU.
  add_test(NAME gpu/alpa_profile_quick
    COMMAND ${PROJECT_SOURCE_DIR}/tests/unit/profile/alpa_profile_gpu.sh $<TARGET_FILE:alpa-profile>
            $<TARGET_FILE:alpa-sim> ${CMAKE_BINARY_DIR}/tests/alpa_profile_gpu_work)
  set_tests_properties(gpu/alpa_profile_quick PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77)
endif()
