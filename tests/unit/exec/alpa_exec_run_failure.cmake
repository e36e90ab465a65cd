# Runs alpa-exec on the CPU backend with a timeout no device can meet (1 ns: the first device
# to reach a collective of the 2-device stages waits for its peer) and checks that the run
# FAILS (exit 1, the "timed out" message), where it used to exit 77 (skipped): a kUnavailable
# from a run is not "no GPU" (apps/alpa-exec/exit_codes.h).
execute_process(COMMAND ${ALPA_EXEC} ${PLAN} --timeout 1e-9 --iterations 1 --warmup 0
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit code 1, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "^alpa-exec: error: .*timed out after")
  message(FATAL_ERROR "unexpected message: ${err}")
endif()
