#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace alpasim::exec::launch {

/// How this process was started (exec/cuda/README.md, "one process per GPU").
enum class RankSource {
  kNone,      ///< a plain process: it may launch ranks itself
  kLauncher,  ///< a child of the built-in launcher (ALPASIM_EXEC_RANK ...)
  kMpirun,    ///< one of `mpirun -np N` processes (OMPI_COMM_WORLD_*)
};

/// This process's place in a multi-process run.
struct RankEnv {
  RankSource source = RankSource::kNone;
  int rank = 0;        ///< 0 .. world_size-1; runs Program device index `rank`
  int world_size = 1;  ///< number of processes (= Program::devices.size())
  int local_rank = 0;  ///< index among this node's processes: the CUDA device it uses
  /// Folder every rank can read and write: NCCL unique ids and per-rank results go through
  /// it (a path on a shared file system under mpirun across nodes).
  std::string rendezvous_dir;
  /// Distinguishes runs that share `rendezvous_dir` (file names include it).
  std::string run_id;
};

/// Variables the built-in launcher sets in each child.
inline constexpr const char* kEnvRank = "ALPASIM_EXEC_RANK";
inline constexpr const char* kEnvWorldSize = "ALPASIM_EXEC_WORLD_SIZE";
inline constexpr const char* kEnvLocalRank = "ALPASIM_EXEC_LOCAL_RANK";
inline constexpr const char* kEnvRendezvous = "ALPASIM_EXEC_RENDEZVOUS_DIR";
inline constexpr const char* kEnvRunId = "ALPASIM_EXEC_RUN_ID";

/// Reads the rank from `env` (name -> value). The launcher's ALPASIM_EXEC_* variables win
/// over Open MPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; under mpirun the ranks
/// exchange over MPI when `mpi_exchange` (a build with dist/'s MPI backend), else through the
/// rendezvous folder ALPASIM_EXEC_RENDEZVOUS_DIR (then required: kInvalidArgument naming it); the run
/// id ALPASIM_EXEC_RUN_ID, else OMPI_MCA_ess_base_jobid, else "mpirun". Errors name the
/// variable, what was expected and what was found: "OMPI_COMM_WORLD_RANK: expected an
/// integer in [0, 4), got \"x\"".
core::Result<RankEnv> rank_env_from(const std::map<std::string, std::string>& env,
                                    bool mpi_exchange = false);

/// rank_env_from() of this process's environment, with mpi_exchange = dist::built_with_mpi().
core::Result<RankEnv> rank_env_from_process();

}  // namespace alpasim::exec::launch
