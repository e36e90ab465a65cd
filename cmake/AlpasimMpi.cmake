# Optional MPI (Open MPI from Debian: libopenmpi-dev), auto-detected like CUDA. It carries
# `alpa-sim sweep` across the processes of an mpirun/srun job (dist/). Without it alpa-sim
# still runs on one machine and a multi-process launch says how to get MPI.
set(ALPASIM_WITH_MPI "AUTO" CACHE STRING "Build the MPI backend of dist/: AUTO, ON or OFF")
set_property(CACHE ALPASIM_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(ALPASIM_HAVE_MPI OFF)
if(NOT ALPASIM_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(ALPASIM_HAVE_MPI ON)
  elseif(ALPASIM_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "ALPASIM_WITH_MPI=ON but no MPI was found (apt-get install libopenmpi-dev)")
  endif()
endif()
find_program(ALPASIM_MPIEXEC NAMES mpirun mpiexec)
