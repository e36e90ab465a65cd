# alpa-profile without a GPU: exit code 77, one clear line on stderr, nothing on stdout and
# no profile file. Registered by apps/alpa-profile/targets.cmake (label cli).
#   -DALPA_PROFILE=<binary> -DWORK_DIR=<scratch folder>
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(ENV{CUDA_VISIBLE_DEVICES} "")
execute_process(COMMAND ${ALPA_PROFILE} --quick --out ${WORK_DIR}/p.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(failed FALSE)
if(NOT rc STREQUAL "77")
  message(SEND_ERROR "exit code: expected 77, got ${rc}\nstderr: ${err}")
  set(failed TRUE)
endif()
# Either build: a CUDA build reports the runtime's reason, a CPU build says it has no CUDA.
if(NOT err MATCHES "^alpa-profile: no GPU: (no usable CUDA device: [^\n]+|built without CUDA [^\n]+) ?\\(?nothing measured\\)?\n$")
  message(SEND_ERROR "stderr: unexpected text [${err}]")
  set(failed TRUE)
endif()
if(NOT out STREQUAL "")
  message(SEND_ERROR "stdout: expected nothing, got [${out}]")
  set(failed TRUE)
endif()
if(EXISTS ${WORK_DIR}/p.json)
  message(SEND_ERROR "a profile was written without a GPU")
  set(failed TRUE)
endif()
# A bad --ops is a user error (exit 1) with the exact text, whether or not there is a GPU
# (a build without CUDA measures nothing and skips it).
execute_process(COMMAND ${ALPA_PROFILE} --ops gemm,fft --out ${WORK_DIR}/p.json
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT err MATCHES "built without CUDA")
  if(NOT rc2 STREQUAL "1" OR NOT err2 STREQUAL "alpa-profile: error: --ops: unknown operator family \"fft\" (expected gemm, conv, hbm or nccl)\n")
    message(SEND_ERROR "--ops gemm,fft: expected exit 1 and the exact error, got ${rc2} [${err2}]")
    set(failed TRUE)
  endif()
endif()
if(failed)
  message(FATAL_ERROR "alpa-profile no-GPU check failed")
endif()
