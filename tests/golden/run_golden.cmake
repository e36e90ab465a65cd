# Runs `alpa-sim --json SCENARIO` twice; both outputs must equal EXPECTED byte for byte
# (the second run proves determinism). Rewrite goldens with tools/update_goldens.sh.
file(MAKE_DIRECTORY ${WORK_DIR})
get_filename_component(name ${SCENARIO} NAME_WE)
foreach(run 1 2)
  execute_process(COMMAND ${ALPA_SIM} --json --no-timing ${SCENARIO}
                  RESULT_VARIABLE rc OUTPUT_FILE ${WORK_DIR}/${name}.${run}.json ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "alpa-sim --json ${SCENARIO} exited ${rc}:\n${err}")
  endif()
endforeach()
if(NOT EXISTS ${EXPECTED})
  message(FATAL_ERROR "no golden file ${EXPECTED}; create it with tools/update_goldens.sh")
endif()
foreach(run 1 2)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/${name}.${run}.json ${EXPECTED}
                  RESULT_VARIABLE differs)
  if(differs)
    file(READ ${WORK_DIR}/${name}.${run}.json got)
    message(FATAL_ERROR "run ${run} of ${SCENARIO} differs from ${EXPECTED}; got:\n${got}")
  endif()
endforeach()
