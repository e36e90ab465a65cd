#include "exec/launch/orchestrate.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "exec/launch/launcher.h"
#include "exec/launch/poll.h"

namespace alpasim::exec::launch {

std::string rank_result_name(int rank) { return "rank" + std::to_string(rank) + ".result"; }

core::Result<ExecutionResult> launch_and_merge(const std::vector<std::string>& argv, int world_size,
                                               const LaunchOptions& options) {
  std::string dir = options.work_dir;
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
  RankEnv env;
  env.rendezvous_dir = dir;
  // Unique per launch, so results of an earlier run in the same folder are never read.
  static std::atomic<int> launches{0};
  env.run_id = "run" + std::to_string(::getpid()) + "-" + std::to_string(launches++);
  std::vector<ChildSpec> children;
  for (int r = 0; r < world_size; ++r) {
    ChildSpec c;
    c.argv = argv;
    c.env = {{kEnvRank, std::to_string(r)},
             {kEnvWorldSize, std::to_string(world_size)},
             {kEnvLocalRank, std::to_string(r)},
             {kEnvRendezvous, dir},
             {kEnvRunId, env.run_id},
             {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};  // local rank r = the r-th GPU by bus id
    c.log_path = dir + "/rank" + std::to_string(r) + ".log";
    children.push_back(std::move(c));
  }
  const std::string prefix = "one process per GPU (logs in " + dir + "): ";
  SteadyClock clock;
  core::Status st = run_children(children, options.timeout_s, options.poll_interval_s, clock);
  if (!st.ok()) return core::Status(st.code(), prefix + st.message());
  std::vector<RankResult> results;
  for (int r = 0; r < world_size; ++r) {
    const std::string path = rendezvous_path(env, rank_result_name(r));
    auto text = wait_for_file(path, 0.0, options.poll_interval_s, clock);  // the child has exited: now or never
    if (!text.ok()) return core::Status(text.status().code(), prefix + "rank " + std::to_string(r) + " exited 0 without a result: " + text.status().message());
    auto rr = decode_rank_result(*text, path);
    if (!rr.ok()) return core::Status(rr.status().code(), prefix + rr.status().message());
    results.push_back(std::move(*rr));
  }
  auto merged = merge_rank_results(results, world_size);
  if (!merged.ok()) return core::Status(merged.status().code(), prefix + merged.status().message());
  if (own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return merged;
}

core::Status publish_rank_result(const RankEnv& env, const RankResult& result) {
  return publish_file(rendezvous_path(env, rank_result_name(env.rank)), encode_rank_result(result));
}

core::Result<ExecutionResult> gather_rank_results(const RankEnv& env, RankResult mine, double timeout_s) {
  std::vector<RankResult> all{std::move(mine)};
  SteadyClock clock;
  for (int k = 0; k < env.world_size; ++k) {
    if (k == env.rank) continue;
    const std::string path = rendezvous_path(env, rank_result_name(k));
    ALPASIM_ASSIGN_OR_RETURN(std::string text, wait_for_file(path, timeout_s, 0.01, clock));
    ALPASIM_ASSIGN_OR_RETURN(RankResult rr, decode_rank_result(text, path));
    all.push_back(std::move(rr));
  }
  return merge_rank_results(all, env.world_size);
}

}  // namespace alpasim::exec::launch
