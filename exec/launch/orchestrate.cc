#include "exec/launch/orchestrate.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/check.h"
#include "dist/communicator.h"
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

bool exchanges_over_mpi(const RankEnv& env) {
  return env.source == RankSource::kMpirun && dist::built_with_mpi();
}

core::Result<std::string> share_from_rank0(const RankEnv& env, const std::string& name,
                                           const std::function<core::Result<std::string>()>& make,
                                           double timeout_s) {
  if (exchanges_over_mpi(env)) {
    ALPASIM_ASSIGN_OR_RETURN(dist::Communicator * world, dist::world());
    // One byte says what follows: 'K' the bytes, 'E' rank 0's error.
    std::string payload;
    core::Status made;
    if (env.rank == 0) {
      auto bytes = make();
      made = bytes.status();
      payload = bytes.ok() ? "K" + *bytes : "E" + bytes.status().to_string();
    }
    core::Result<std::string> got = world->broadcast(payload);
    if (!got.ok()) return got.status();
    if (!made.ok()) return made;
    const std::string& bytes = got.value();
    if (bytes.compare(0, 1, "K") != 0) {
      return core::unavailable("rank 0 could not make " + name + ": " +
                               (bytes.empty() ? std::string("nothing sent") : bytes.substr(1)));
    }
    return bytes.substr(1);
  }
  const std::string path = rendezvous_path(env, name);
  if (env.rank == 0) {
    ALPASIM_ASSIGN_OR_RETURN(std::string bytes, make());
    ALPASIM_RETURN_IF_ERROR(publish_file(path, bytes));
    return bytes;
  }
  SteadyClock clock;
  return wait_for_file(path, timeout_s, 0.01, clock);
}

core::Result<std::optional<ExecutionResult>> gather_rank_results_over_mpi(const RankEnv& env,
                                                                         const RankResult& mine) {
  ALPASIM_CHECK(exchanges_over_mpi(env));
  ALPASIM_ASSIGN_OR_RETURN(dist::Communicator * world, dist::world());
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::string> all, world->gather(encode_rank_result(mine)));
  if (env.rank != 0) return std::optional<ExecutionResult>();
  std::vector<RankResult> results;
  for (std::size_t r = 0; r < all.size(); ++r) {
    ALPASIM_ASSIGN_OR_RETURN(RankResult rr,
                             decode_rank_result(all[r], "the result of MPI rank " + std::to_string(r)));
    results.push_back(std::move(rr));
  }
  ALPASIM_ASSIGN_OR_RETURN(ExecutionResult merged, merge_rank_results(results, env.world_size));
  return std::optional<ExecutionResult>(std::move(merged));
}

}  // namespace alpasim::exec::launch
