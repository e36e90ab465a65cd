#include "exec/launch/rank_env.h"

#include <charconv>
#include <cstdlib>

#include "dist/communicator.h"

namespace alpasim::exec::launch {
namespace {

const std::string* find(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

/// An integer in [lo, hi) from variable `name`.
core::Result<int> parse_int(const std::map<std::string, std::string>& env, const std::string& name, int lo,
                            int hi) {
  const std::string* v = find(env, name);
  const std::string range = "[" + std::to_string(lo) + ", " + (hi == 1 << 30 ? std::string("inf") : std::to_string(hi)) + ")";
  if (!v) return core::invalid_argument(name + ": expected an integer in " + range + ", got nothing (unset)");
  int x = 0;
  const char* end = v->data() + v->size();
  auto [p, ec] = std::from_chars(v->data(), end, x);
  if (v->empty() || ec != std::errc() || p != end || x < lo || x >= hi) {
    return core::invalid_argument(name + ": expected an integer in " + range + ", got \"" + *v + "\"");
  }
  return x;
}

}  // namespace

core::Result<RankEnv> rank_env_from(const std::map<std::string, std::string>& env, bool mpi_exchange) {
  RankEnv r;
  constexpr int kUnbounded = 1 << 30;
  const char* size_var = nullptr;
  const char* rank_var = nullptr;
  const char* local_var = nullptr;
  if (find(env, kEnvRank)) {
    r.source = RankSource::kLauncher;
    size_var = kEnvWorldSize;
    rank_var = kEnvRank;
    local_var = kEnvLocalRank;
  } else if (find(env, "OMPI_COMM_WORLD_RANK")) {
    r.source = RankSource::kMpirun;
    size_var = "OMPI_COMM_WORLD_SIZE";
    rank_var = "OMPI_COMM_WORLD_RANK";
    local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
  } else {
    return r;
  }
  ALPASIM_ASSIGN_OR_RETURN(r.world_size, parse_int(env, size_var, 1, kUnbounded));
  ALPASIM_ASSIGN_OR_RETURN(r.rank, parse_int(env, rank_var, 0, r.world_size));
  ALPASIM_ASSIGN_OR_RETURN(r.local_rank, parse_int(env, local_var, 0, r.world_size));
  const std::string* dir = find(env, kEnvRendezvous);
  const bool needs_dir = !(mpi_exchange && r.source == RankSource::kMpirun);
  if (needs_dir && (!dir || dir->empty())) {
    return core::invalid_argument(std::string(kEnvRendezvous) +
                                  ": expected a folder every rank can read and write (shared across nodes), "
                                  "got nothing (unset)");
  }
  if (dir) r.rendezvous_dir = *dir;
  if (const std::string* id = find(env, kEnvRunId); id && !id->empty()) {
    r.run_id = *id;
  } else if (const std::string* job = find(env, "OMPI_MCA_ess_base_jobid");
             job && !job->empty() && r.source == RankSource::kMpirun) {
    r.run_id = *job;
  } else {
    r.run_id = r.source == RankSource::kMpirun ? "mpirun" : "launcher";
  }
  for (char c : r.run_id) {
    const bool safe = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
                      c == '_' || c == '.';
    if (!safe) {
      return core::invalid_argument("run id: expected letters, digits, '-', '_' or '.', got \"" + r.run_id + "\"");
    }
  }
  return r;
}

core::Result<RankEnv> rank_env_from_process() {
  std::map<std::string, std::string> env;
  for (const char* name : {kEnvRank, kEnvWorldSize, kEnvLocalRank, kEnvRendezvous, kEnvRunId, "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_MCA_ess_base_jobid"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return rank_env_from(env, dist::built_with_mpi());
}

}  // namespace alpasim::exec::launch
