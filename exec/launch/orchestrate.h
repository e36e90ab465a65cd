#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"
#include "exec/launch/rank_env.h"
#include "exec/launch/rendezvous.h"

namespace alpasim::exec::launch {

/// The built-in launcher's settings.
struct LaunchOptions {
  /// Folder for the NCCL ids, the ranks' results and logs; empty: a fresh folder under
  /// $TMPDIR (or /tmp), removed after a successful run (kept on failure, for the logs).
  std::string work_dir;
  double timeout_s = 600.0;       ///< the whole run; then every child is killed
  double poll_interval_s = 0.01;  ///< how often the launcher looks at its children
};

/// "rank<r>.result": the file a rank's result goes to in the rendezvous folder.
std::string rank_result_name(int rank);

/// Parent side of the built-in launcher: starts `world_size` children running `argv`
/// (rank r with ALPASIM_EXEC_RANK=r, _WORLD_SIZE, _LOCAL_RANK=r, _RENDEZVOUS_DIR, _RUN_ID
/// and CUDA_DEVICE_ORDER=PCI_BUS_ID), waits for all (run_children: a failing child kills
/// the others), reads every rank's result and merges them (merge_rank_results). Errors are
/// prefixed "one process per GPU (logs in <dir>): ".
core::Result<ExecutionResult> launch_and_merge(const std::vector<std::string>& argv, int world_size,
                                               const LaunchOptions& options);

/// Rank side: writes `result` to the rendezvous folder for the launcher or rank 0.
core::Status publish_rank_result(const RankEnv& env, const RankResult& result);

/// mpirun rank 0 without MPI in the build: waits (up to `timeout_s`) for ranks 1..N-1's
/// result files and merges them with its own `mine`.
core::Result<ExecutionResult> gather_rank_results(const RankEnv& env, RankResult mine, double timeout_s);

/// True when this rank exchanges with the others over MPI (dist::world()): started by
/// mpirun in a build with MPI. Else the rendezvous folder carries what they share.
bool exchanges_over_mpi(const RankEnv& env);

/// Rank 0's `make()` on every rank (NCCL unique ids): over MPI when exchanges_over_mpi (a
/// failure of rank 0's make() reaches every rank as "rank 0: <error>" instead of a hang),
/// else through the rendezvous file `name` (rank 0 publishes, the others wait timeout_s).
core::Result<std::string> share_from_rank0(const RankEnv& env, const std::string& name,
                                           const std::function<core::Result<std::string>()>& make,
                                           double timeout_s);

/// Over MPI (exchanges_over_mpi): every rank's result to rank 0, merged there
/// (merge_rank_results); the other ranks get nullopt once they have sent theirs.
core::Result<std::optional<ExecutionResult>> gather_rank_results_over_mpi(const RankEnv& env,
                                                                         const RankResult& mine);

}  // namespace alpasim::exec::launch
