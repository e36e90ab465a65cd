#pragma once

#include <string>

#include "core/status.h"
#include "exec/backend.h"

namespace alpasim::exec::cuda {

/// How run_cuda runs a program (exec/cuda/README.md).
struct CudaRunOptions {
  RunOptions run;
  /// "auto": one process per GPU when this machine has at least as many GPUs as the plan
  /// has devices (and more than one), else virtual devices on GPU 0; "virtual"; "processes".
  /// Processes started by the launcher or by mpirun always run as ranks.
  std::string mode = "auto";
  /// Built-in launcher: folder for the NCCL ids, the ranks' results and logs; empty: a fresh
  /// folder under $TMPDIR (or /tmp), removed after a successful run.
  std::string work_dir;
  /// Built-in launcher: the children are killed after this long; 0: 60 s plus
  /// (warmup + iterations + 2) × run.timeout_s.
  double launch_timeout_s = 0;
};

/// Runs `program` on the GPU(s), choosing the mode (exec/launch/mode.h):
/// - virtual devices: the whole program on GPU 0 of this process;
/// - built-in launcher: this process re-executes its own command line (/proc/self/exe) once
///   per device with ALPASIM_EXEC_RANK / _WORLD_SIZE / _LOCAL_RANK / _RENDEZVOUS_DIR set,
///   waits for all (killing every child when one fails or on the timeout, naming the rank),
///   and returns the merged result;
/// - rank (a launcher child, or a process of `mpirun -np N` with OMPI_COMM_WORLD_* and
///   ALPASIM_EXEC_RENDEZVOUS_DIR set): runs device index `rank` with NCCL. A launcher child
///   writes its result for the parent and EXITS the process (status 0, or 1 on failure):
///   it never returns to the caller. Under mpirun, rank 0 waits for the other ranks'
///   results and returns the merged result; ranks > 0 write theirs and exit.
/// kUnavailable when no GPU is usable (callers exit 77), or in a build without NCCL when
/// the mode needs processes.
core::Result<ExecutionResult> run_cuda(const Program& program, const CudaRunOptions& options);

}  // namespace alpasim::exec::cuda
