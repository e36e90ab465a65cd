// One rank of `mpirun -np N alpasim_exec_mpi_exchange` (CTest exec_launch/mpi_exchange): the
// exchanges of alpa-exec's mpirun mode over MPI, without a GPU. Rank 0's bytes reach every
// rank (as the NCCL unique ids do), and every rank's result reaches rank 0, merged. Rank 0
// prints "ok: ..." and exits 0 when everything matches; any mismatch exits 1.
#include <iostream>
#include <string>

#include "exec/launch/orchestrate.h"
#include "exec/launch/rank_env.h"

int main() {
  using namespace alpasim::exec::launch;
  auto env = rank_env_from_process();
  if (!env.ok()) {
    std::cerr << env.status().to_string() << "\n";
    return 1;
  }
  const std::string me = "rank " + std::to_string(env->rank) + ": ";
  if (!exchanges_over_mpi(*env)) {
    std::cerr << me << "not exchanging over MPI (run under mpirun in a build with MPI)\n";
    return 1;
  }
  auto ids = share_from_rank0(
      *env, "ids", [] { return alpasim::core::Result<std::string>(std::string("ids of rank 0")); },
      10.0);
  if (!ids.ok() || *ids != "ids of rank 0") {
    std::cerr << me << "got " << (ids.ok() ? *ids : ids.status().to_string()) << "\n";
    return 1;
  }
  // Rank r reports loss r and an iteration of r + 1 s: the merge takes the mean loss and
  // the slowest iteration.
  RankResult mine;
  mine.rank = env->rank;
  mine.losses[7] = env->rank;
  mine.iteration_s = {env->rank + 1.0};
  auto merged = gather_rank_results_over_mpi(*env, mine);
  if (!merged.ok()) {
    std::cerr << me << merged.status().to_string() << "\n";
    return 1;
  }
  if (env->rank != 0) return merged->has_value() ? 1 : 0;
  const int n = env->world_size;
  const double mean_loss = (n - 1) / 2.0;
  const auto& m = **merged;
  if (m.loss != mean_loss || m.iteration_s.size() != 1 || m.iteration_s[0] != n) {
    std::cerr << me << "merged loss " << m.loss << " (expected " << mean_loss << "), iteration "
              << (m.iteration_s.empty() ? -1.0 : m.iteration_s[0]) << " s (expected " << n << ")\n";
    return 1;
  }
  std::cout << "ok: " << n << " ranks shared rank 0's ids and merged their results over MPI\n";
  return 0;
}
