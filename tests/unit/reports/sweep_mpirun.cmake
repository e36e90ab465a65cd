# `mpirun -np 4 --oversubscribe alpa-sim sweep` (the ranks' results gathered to rank 0 by
# MPI, dist/mpi_communicator.cc; no part files) gives byte-identical CSV, JSON, Markdown and
# HTML to one process, and writes nothing but the outputs. Registered only in builds with
# MPI and an mpirun (cmake/AlpasimMpi.cmake).
# Run: cmake -DMPIEXEC=... -DALPA_SIM=... -DSCENARIO=... -DWORK_DIR=... -P this.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run(${ALPA_SIM} sweep ${SCENARIO} -q --threads 1 --out ${WORK_DIR}/single)
# CI runs as root, which Open MPI refuses without these two variables.
execute_process(COMMAND ${CMAKE_COMMAND} -E env OMPI_ALLOW_RUN_AS_ROOT=1
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                        ${MPIEXEC} -np 4 --oversubscribe ${ALPA_SIM} sweep ${SCENARIO} --json
                        --threads 1 --out ${WORK_DIR}/mpi
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun failed (${rc}):\n${out}\n${err}")
endif()
# One JSON document on stdout: rank 0 prints, ranks 1-3 only send their parts. (Four would
# mean four processes that each ran the whole sweep alone.)
string(REGEX MATCHALL "\"format\": \"alpa-sim sweep v1\"" documents "${out}")
list(LENGTH documents n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one sweep on stdout (rank 0's), got ${n}:\n${out}")
endif()
foreach(f sweep.csv sweep.json sweep.md sweep.html)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/single/${f}
                          ${WORK_DIR}/mpi/${f} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "${f}: the 4-rank MPI sweep differs from the single-process one")
  endif()
endforeach()
file(GLOB written RELATIVE ${WORK_DIR}/mpi ${WORK_DIR}/mpi/*)
list(SORT written)
if(NOT written STREQUAL "sweep.csv;sweep.html;sweep.json;sweep.md")
  message(FATAL_ERROR "the MPI sweep wrote ${written}: expected only its four outputs")
endif()
message(STATUS "mpirun -np 4 = 1 process: sweep.csv, .json, .md, .html identical; no part files")
