// The MPI backend of a build without MPI: a multi-process launch is an error that says so.
#include "dist/communicator.h"

namespace alpasim::dist {

bool built_with_mpi() { return false; }

core::Result<Communicator*> mpi_world() {
  ALPASIM_ASSIGN_OR_RETURN(LaunchInfo info, launch_info());
  return core::invalid_argument(
      "started by " + info.launcher + " as rank " + std::to_string(info.rank) + " of " +
      std::to_string(info.size) +
      ", but this alpa-sim was built without MPI: install libopenmpi-dev (tools/setup.sh "
      "does) and rebuild, or split the work with --rank/--world-size");
}

}  // namespace alpasim::dist
