// The search's sharded plans (tests/unit/exec/search_fixtures.h) as the CUDA backend would
// run them, checked on the host: every resharding copy's plan (exec/launch/reshard_plan.h)
// against the element-by-element reference, and the one-process-per-GPU stream schedule
// replayed without deadlock (exec/launch/stream_plan.h). A separate executable: the planner
// is not a dependency of exec_launch.
#include <doctest/doctest.h>

#include <string>

#include "exec/launch/comm_plan.h"
#include "exec/launch/stream_plan.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "planner/search/search.h"
#include "tests/unit/exec/search_fixtures.h"
#include "tests/unit/exec_launch/reshard_reference.h"

namespace alpasim::exec::launch {
namespace {

TEST_CASE("the search's sharded plans: resharding copies match the reference, NCCL streams replay (tiny GPT, "
          "tiny Wide-ResNet, 2x1 and 2x2 meshes, 4 stages)") {
  struct Case {
    bool wresnet;
    std::string mode;
    std::int64_t gpus, nodes;
  };
  int reshards = 0;
  for (const Case& c : {Case{false, "intra_op_only", 2, 1}, Case{false, "intra_op_only", 4, 2},
                        Case{false, "alpa", 4, 1}, Case{true, "alpa", 4, 1}, Case{true, "intra_op_only", 2, 1}}) {
    CAPTURE(c.wresnet);
    CAPTURE(c.mode);
    CAPTURE(c.gpus);
    const ir::ModelConfig model = c.wresnet ? exec::testing::tiny_wide_resnet() : exec::testing::tiny_gpt(2);
    planner::SearchInput in = exec::testing::small_search(model, c.mode, 8, c.gpus, c.nodes);
    if (c.wresnet) in.optimizer = "sgd";  // as the executor trains it (sharded_plans_test.cc)
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    auto p = lower_plan(r->plan);
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    REQUIRE(verify_program(*p).ok());
    const int n = testing::check_program_reshards(*p);
    reshards += n;
    auto comms = comm_plan(*p);
    REQUIRE_MESSAGE(comms.ok(), comms.status().message());
    const core::Status st = check_stream_schedule(*p, *comms);
    CHECK_MESSAGE(st.ok(), st.message());
    MESSAGE(std::string(c.wresnet ? "Wide-ResNet " : "GPT ") << c.mode << " on " << c.gpus << " GPUs: " << r->plan.stages.size()
                                                 << " stage(s), first mesh " << r->plan.stages[0].logical_rows << "x"
                                                 << r->plan.stages[0].logical_cols << ", " << n << " resharding copies");
  }
  CHECK(reshards > 0);
}

}  // namespace
}  // namespace alpasim::exec::launch
