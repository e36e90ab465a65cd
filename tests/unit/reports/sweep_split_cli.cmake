# `alpa-sim sweep` split across 3 separate jobs by --rank/--world-size (part files in --out,
# merged by rank 0, which runs last) gives byte-identical CSV, JSON, Markdown and HTML to one
# process with 2 threads. Run: cmake -DALPA_SIM=... -DSCENARIO=... -DWORK_DIR=... -P this.
# (The processes of one MPI job are tested by sweep_mpirun.cmake.)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${err}")
  endif()
endfunction()
run(${ALPA_SIM} sweep ${SCENARIO} -q --threads 2 --out ${WORK_DIR}/single)
run(${ALPA_SIM} sweep ${SCENARIO} -q --threads 1 --out ${WORK_DIR}/split --rank 2 --world-size 3)
run(${ALPA_SIM} sweep ${SCENARIO} -q --threads 1 --out ${WORK_DIR}/split --rank 1 --world-size 3)
run(${ALPA_SIM} sweep ${SCENARIO} -q --threads 1 --out ${WORK_DIR}/split --rank 0 --world-size 3)
foreach(f sweep.csv sweep.json sweep.md sweep.html)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/single/${f}
                          ${WORK_DIR}/split/${f} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "${f}: the 3-rank sweep differs from the single-process one")
  endif()
endforeach()
message(STATUS "3 ranks merged = 1 process: sweep.csv, .json, .md, .html identical")
