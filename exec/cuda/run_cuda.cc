#include "exec/cuda/run_cuda.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <system_error>

#include "exec/cuda/cuda_backend.h"
#include "exec/cuda/cuda_devices.h"
#include "exec/cuda/modes.h"
#include "exec/launch/launcher.h"
#include "exec/launch/mode.h"
#include "exec/launch/rank_env.h"
#include "exec/launch/rendezvous.h"

namespace alpasim::exec::cuda {
namespace {

std::string result_name(int rank) { return "rank" + std::to_string(rank) + ".result"; }

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
  const bool gather = env.source == launch::RankSource::kMpirun && env.rank == 0;
  if (!gather) {
    core::Status st = launch::publish_file(launch::rendezvous_path(env, result_name(env.rank)),
                                           launch::encode_rank_result(mine));
    // The launcher keeps this log: the error is readable there too.
    if (!mine.error.empty()) std::cerr << "alpa-exec rank " << env.rank << ": " << mine.error << "\n";
    if (!st.ok()) std::cerr << "alpa-exec rank " << env.rank << ": " << st.to_string() << "\n";
    std::cout.flush();
    std::cerr.flush();
    std::exit(mine.error.empty() && st.ok() ? 0 : 1);
  }
  std::vector<launch::RankResult> all{mine};
  launch::SteadyClock clock;
  // The other ranks finish within the same iterations; allow their whole run again.
  const double wait_s = 60.0 + (o.warmup_iterations + o.iterations + 2) * o.timeout_s;
  for (int k = 1; k < env.world_size; ++k) {
    const std::string path = launch::rendezvous_path(env, result_name(k));
    ALPASIM_ASSIGN_OR_RETURN(std::string text, launch::wait_for_file(path, wait_s, 0.01, clock));
    ALPASIM_ASSIGN_OR_RETURN(launch::RankResult rr, launch::decode_rank_result(text, path));
    all.push_back(std::move(rr));
  }
  return launch::merge_rank_results(all, env.world_size);
}

/// The built-in launcher: one child per device, each this same command line.
core::Result<ExecutionResult> launch_ranks(const Program& p, const CudaRunOptions& o) {
  const int n = static_cast<int>(p.devices.size());
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::string> argv, launch::own_command_line());
  std::string dir = o.work_dir;
  const bool own_dir = dir.empty();
  if (own_dir) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/alpa-exec-XXXXXX";
    if (!::mkdtemp(templ.data())) return core::unavailable(templ + ": mkdtemp failed");
    dir = templ;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return core::unavailable(dir + ": cannot create (" + ec.message() + ")");
  }
  const std::string run_id = "run" + std::to_string(::getpid());
  std::vector<launch::ChildSpec> children;
  for (int r = 0; r < n; ++r) {
    launch::ChildSpec c;
    c.argv = argv;
    c.env = {{launch::kEnvRank, std::to_string(r)},
             {launch::kEnvWorldSize, std::to_string(n)},
             {launch::kEnvLocalRank, std::to_string(r)},
             {launch::kEnvRendezvous, dir},
             {launch::kEnvRunId, run_id},
             {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
    c.log_path = dir + "/rank" + std::to_string(r) + ".log";
    children.push_back(std::move(c));
  }
  const double timeout_s = o.launch_timeout_s > 0
                               ? o.launch_timeout_s
                               : 60.0 + (o.run.warmup_iterations + o.run.iterations + 2) * o.run.timeout_s;
  launch::SteadyClock clock;
  core::Status st = launch::run_children(children, timeout_s, 0.01, clock);
  launch::RankEnv env;
  env.rendezvous_dir = dir;
  env.run_id = run_id;
  std::vector<launch::RankResult> results;
  for (int r = 0; r < n && st.ok(); ++r) {
    const std::string path = launch::rendezvous_path(env, result_name(r));
    auto text = launch::wait_for_file(path, 0.0, 0.01, clock);
    if (!text.ok()) return text.status();
    auto rr = launch::decode_rank_result(*text, path);
    if (!rr.ok()) return rr.status();
    results.push_back(std::move(*rr));
  }
  if (!st.ok()) return core::Status(st.code(), "one process per GPU (logs in " + dir + "): " + st.message());
  auto merged = launch::merge_rank_results(results, n);
  if (merged.ok() && own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return merged;
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
