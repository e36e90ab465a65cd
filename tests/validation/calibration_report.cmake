# Runs `alpa-sim calibrate PROFILE` (from the source folder, PROFILE relative to it) and
# requires its report to equal EXPECTED byte for byte: the committed report, which
# docs/validation.md quotes, stays what today's calibration makes of the profile.
execute_process(COMMAND ${ALPA_SIM} calibrate ${PROFILE} WORKING_DIRECTORY ${SOURCE_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE got ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "alpa-sim calibrate ${PROFILE} exited ${rc}:\n${err}")
endif()
file(READ ${SOURCE_DIR}/${EXPECTED} want)
if(NOT got STREQUAL want)
  message(FATAL_ERROR "alpa-sim calibrate ${PROFILE} differs from ${EXPECTED} (regenerate it with "
                      "`alpa-sim calibrate ${PROFILE} > ${EXPECTED}` and update docs/validation.md); got:\n${got}")
endif()
