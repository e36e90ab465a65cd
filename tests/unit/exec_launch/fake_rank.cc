// A stand-in for an alpa-exec rank, for the launcher tests (no GPU): reads its rank from the
// launcher's environment and publishes a result with loss rank + 1 and one timing, or fails
// as asked: ALPASIM_FAKE_FAIL_RANK=r exits 3 after a line on stderr, ALPASIM_FAKE_HANG_RANK=r
// sleeps 60 s, ALPASIM_FAKE_SILENT_RANK=r exits 0 without a result.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "exec/launch/orchestrate.h"
#include "exec/launch/rank_env.h"

namespace {

bool is(const char* var, int rank) {
  const char* v = std::getenv(var);
  return v && std::to_string(rank) == v;
}

}  // namespace

int main() {
  using namespace alpasim::exec::launch;
  auto env = rank_env_from_process();
  if (!env.ok()) {
    std::fprintf(stderr, "fake rank: %s\n", env.status().message().c_str());
    return 2;
  }
  if (is("ALPASIM_FAKE_FAIL_RANK", env->rank)) {
    std::fprintf(stderr, "fake rank %d: failing on purpose\n", env->rank);
    return 3;
  }
  if (is("ALPASIM_FAKE_HANG_RANK", env->rank)) ::sleep(60);
  if (is("ALPASIM_FAKE_SILENT_RANK", env->rank)) return 0;
  RankResult r;
  r.rank = env->rank;
  r.losses[env->rank] = env->rank + 1.0;
  r.iteration_s = {0.001 * (env->rank + 1)};
  r.timings = {{env->rank, 0, 0, 1000}};
  auto st = publish_rank_result(*env, r);
  if (!st.ok()) {
    std::fprintf(stderr, "fake rank: %s\n", st.message().c_str());
    return 4;
  }
  return 0;
}
