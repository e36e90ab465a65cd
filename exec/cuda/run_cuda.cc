#include "exec/cuda/run_cuda.h"

#include <cstdlib>
#include <iostream>
#include <memory>

#include "exec/cuda/cuda_backend.h"
#include "exec/cuda/cuda_devices.h"
#include "exec/cuda/modes.h"
#include "exec/launch/launcher.h"
#include "exec/launch/mode.h"
#include "exec/launch/orchestrate.h"
#include "exec/launch/rank_env.h"
#include "exec/launch/rendezvous.h"

namespace alpasim::exec::cuda {
namespace {

/// A launcher child or an mpirun rank: run, publish the result, and (except mpirun rank 0)
/// end the process so the caller never prints a partial result.
core::Result<ExecutionResult> run_as_rank(const Program& p, const RunOptions& o, const launch::RankEnv& env) {
  auto r = run_rank(p, o, env);
  launch::RankResult mine;
  if (r.ok()) {
    mine = std::move(*r);
  } else {
    mine.rank = env.rank;
    mine.error = r.status().to_string();
  }
  if (launch::exchanges_over_mpi(env)) {
    // Every rank sends its result (or error) to rank 0 over MPI; rank 0 merges and returns.
    auto merged = launch::gather_rank_results_over_mpi(env, mine);
    if (merged.ok() && merged->has_value()) return std::move(**merged);
    if (!merged.ok()) std::cerr << "alpa-exec rank " << env.rank << ": " << merged.status().to_string() << "\n";
    if (!mine.error.empty()) std::cerr << "alpa-exec rank " << env.rank << ": " << mine.error << "\n";
    if (env.rank == 0) return merged.ok() ? core::internal_error("rank 0: no merged result") : merged.status();
    std::cout.flush();
    std::cerr.flush();
    std::exit(mine.error.empty() && merged.ok() ? 0 : 1);
  }
  if (env.source == launch::RankSource::kMpirun && env.rank == 0) {
    // Its own failure first: the other ranks may be stuck until their timeout.
    if (!mine.error.empty()) return core::internal_error("rank 0: " + mine.error);
    // The other ranks run the same iterations; allow their whole run again.
    const double wait_s = 60.0 + (o.warmup_iterations + o.iterations + 2) * o.timeout_s;
    return launch::gather_rank_results(env, std::move(mine), wait_s);
  }
  const core::Status st = launch::publish_rank_result(env, mine);
  // The launcher keeps this log and shows its tail: the error is readable there too.
  if (!mine.error.empty()) std::cerr << "alpa-exec rank " << env.rank << ": " << mine.error << "\n";
  if (!st.ok()) std::cerr << "alpa-exec rank " << env.rank << ": " << st.to_string() << "\n";
  std::cout.flush();
  std::cerr.flush();
  std::exit(mine.error.empty() && st.ok() ? 0 : 1);
}

/// The built-in launcher: one child per device, each this same command line.
core::Result<ExecutionResult> launch_ranks(const Program& p, const CudaRunOptions& o) {
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::string> argv, launch::own_command_line());
  launch::LaunchOptions lo;
  lo.work_dir = o.work_dir;
  lo.timeout_s = o.launch_timeout_s > 0 ? o.launch_timeout_s
                                        : 60.0 + (o.run.warmup_iterations + o.run.iterations + 2) * o.run.timeout_s;
  return launch::launch_and_merge(argv, static_cast<int>(p.devices.size()), lo);
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  core::Result<ExecutionResult> run(const Program& p, const RunOptions& options) override {
    CudaRunOptions o;
    o.run = options;
    // The mode can be forced without a command-line flag (the apps own their flags).
    if (const char* m = std::getenv("ALPASIM_EXEC_CUDA_MODE"); m && *m) o.mode = m;
    return run_cuda(p, o);
  }
};

}  // namespace

core::Result<ExecutionResult> run_cuda(const Program& p, const CudaRunOptions& o) {
  ALPASIM_ASSIGN_OR_RETURN(launch::RankEnv env, launch::rank_env_from_process());
  ALPASIM_ASSIGN_OR_RETURN(launch::CudaModeRequest request, launch::parse_cuda_mode_request(o.mode, "CUDA mode"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<GpuDeviceInfo> gpus, list_cuda_devices());
  ALPASIM_ASSIGN_OR_RETURN(launch::CudaMode mode, launch::choose_cuda_mode(env, request, static_cast<int>(gpus.size()),
                                                                          static_cast<int>(p.devices.size())));
  switch (mode) {
    case launch::CudaMode::kVirtual: return run_virtual(p, o.run);
    case launch::CudaMode::kRank: return run_as_rank(p, o.run, env);
    case launch::CudaMode::kLaunch: return launch_ranks(p, o);
  }
  return core::internal_error("unknown CUDA mode");
}

core::Result<std::unique_ptr<Backend>> make_cuda_backend() {
  auto devices = list_cuda_devices();
  if (!devices.ok()) return devices.status();
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>());
}

}  // namespace alpasim::exec::cuda
