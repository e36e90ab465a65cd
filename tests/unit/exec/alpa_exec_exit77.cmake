# Runs alpa-exec with --backend cuda where no GPU is usable (or in a CPU-only build) and
# checks exit code 77 (no device) with an "alpa-exec: error:" line naming the reason.
execute_process(COMMAND ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${ALPA_EXEC} ${PLAN} --backend cuda
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 77)
  message(FATAL_ERROR "expected exit code 77, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "^alpa-exec: error: (no usable CUDA device|backend cuda: built without CUDA)")
  message(FATAL_ERROR "unexpected message: ${err}")
endif()
