#pragma once

// Internal: the NCCL sweep (one process per GPU) and its two launchers.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "schema/profile.h"

namespace alpasim::exec::microbench {

/// The rank layout when this process was started by mpirun (Open MPI, MPICH/PMI or Slurm
/// variables); nullopt when it was not.
struct MpiRank {
  int rank = 0;        ///< global rank
  int size = 1;        ///< number of ranks
  int local_rank = 0;  ///< rank within the node: the GPU this rank uses
  std::string job;     ///< a job id for the rendezvous file name
};
/// Reads OMPI_COMM_WORLD_*, else PMI_*, else SLURM_* variables.
std::optional<MpiRank> mpi_rank_from_environment();

/// Settings of the NCCL sweep shared by every rank.
struct NcclSweepOptions {
  bool quick = false;           ///< fewer sizes (x4 steps up to 256 MiB) and iterations
  std::int64_t max_bytes = 0;   ///< largest message
  bool progress = true;         ///< rank 0 draws the bar (terminal only)
  std::string citation;  ///< prefix of every row's citation (rank 0 only)
};

/// Built-in launcher: re-executes `self_exe --nccl-worker ...` once per local GPU (exec, so
/// no CUDA state crosses a fork), hands each the ncclUniqueId through a pipe on its stdin and
/// reads rank 0's result lines from a pipe on its stdout.
core::Result<std::vector<schema::CollectiveEntry>> run_nccl_launcher(
    int num_gpus, const std::filesystem::path& self_exe, const NcclSweepOptions& options);

/// Under mpirun: this process is rank `r.rank` on GPU `r.local_rank`; rank 0 publishes the
/// ncclUniqueId as a file in `rendezvous_dir` (a folder every node sees) and the others wait
/// for it. Returns the rows on rank 0 and nothing on the others.
core::Result<std::vector<schema::CollectiveEntry>> run_nccl_mpi(
    const MpiRank& r, const std::filesystem::path& rendezvous_dir, const NcclSweepOptions& options);

/// Parses one result line written by a rank-0 worker (tab-separated: collective, num_gpus,
/// num_nodes, placement, role, ranks, message_bytes, time_us, algbw, busbw).
core::Result<schema::CollectiveEntry> parse_result_line(const std::string& line,
                                                        const std::string& citation);

}  // namespace alpasim::exec::microbench
