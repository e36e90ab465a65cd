#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace alpasim::dist {

/// How this process was started, read from its launcher's environment (no MPI call).
struct LaunchInfo {
  int rank = 0;  ///< in [0, size)
  int size = 1;  ///< processes of the job; 1 when started alone
  /// "" (started alone), "Open MPI (mpirun)", "PMIx" or "PMI (srun, MPICH)".
  std::string launcher;
};

/// Reads OMPI_COMM_WORLD_RANK/SIZE, PMIX_RANK/PMIX_SIZE... in that order of precedence.
/// Errors name a malformed variable ("environment variable OMPI_COMM_WORLD_SIZE: expected an
/// integer in [1, 1048576], got \"x\"").
core::Result<LaunchInfo> launch_info();

/// The processes of one job. A plain C++ interface: dist/mpi_communicator.cc implements it
/// with MPI when Open MPI's development files were found at configure time
/// (cmake/AlpasimMpi.cmake); every other module builds and tests without MPI.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Collective (every rank must call it): rank 0 gets every rank's `bytes` in rank order,
  /// the other ranks an empty vector. Errors carry MPI's message.
  virtual core::Result<std::vector<std::string>> gather(const std::string& bytes) = 0;
  /// Collective: every rank returns rank 0's `bytes` (the others' argument is ignored).
  virtual core::Result<std::string> broadcast(const std::string& bytes) = 0;
};

/// True when this build links MPI.
bool built_with_mpi();

/// The job's communicator. Started alone: a one-process communicator. Started by an MPI
/// launcher with more than one process: MPI's world, initialised on the first call and
/// finalised at exit; in a build without MPI that is an error that says how to get one.
core::Result<Communicator*> world();

}  // namespace alpasim::dist
