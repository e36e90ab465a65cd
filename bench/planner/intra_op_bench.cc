// Performance targets of issue 6 (intra-op pass), measured with Google Benchmark:
//  - synthetic Alpa-like graphs of ~200, ~1000, ~3000 operators (stacked GPT layers,
//    forward + backward + update) for the DP and the ILP;
//  - one GPT-3 2.6B layer (forward + backward + update) on 2x4 and 1x8: target < 1 s;
//  - a 24-layer GPT-3 2.6B stage on 8 devices: target < 10 s.
// Counters: nodes (operators), reduced (nodes after the exact reductions), cost_us (the
// optimum, microseconds of communication), optimal (1 when proven), and for the ILP the
// status of GLPK at its deadline.
#include <benchmark/benchmark.h>

#include "planner/intra_op/intra_op_pass.h"
#include "planner/intra_op/synthetic_graphs.h"

namespace alpasim::planner::intra_op {
namespace {

// Eight V100s in one p3.16xlarge seen as a logical 2x4 or 1x8 mesh: NVLink for both axes,
// axis 0 crossing the slower pairs. Alpha-beta fallback numbers (not calibrated): 100 and
// 50 GB/s, 5 us latency.
CostHooks hooks_for(const LogicalMesh& mesh) {
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  ab.bandwidth = {core::gbyte_per_s(50.0), core::gbyte_per_s(100.0)};
  ab.latency = {core::microseconds(5.0), core::microseconds(5.0)};
  return {ab, 0.0, {}};
}

// GPT-3 2.6B (Brown et al. 2020, Table 2.1: d_model 2560, 32 heads, d_head 80); sequence
// 1024 and micro-batch 8 sequences as in Alpa's GPT benchmarks.
GptShape gpt3_2_6b(int layers) {
  GptShape s;
  s.batch = 8;
  s.seq = 1024;
  s.hidden = 2560;
  s.heads = 32;
  s.ffn = 4 * 2560;
  s.layers = layers;
  return s;
}

void run(benchmark::State& state, const IntraOpGraph& graph, const LogicalMesh& mesh,
         IntraOpOptions options) {
  IntraOpPlan plan;
  for (auto _ : state) {
    IntraOpPass pass;  // fresh: no cache hits across iterations
    auto r = pass.run(graph, mesh, hooks_for(mesh), options);
    if (!r.ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    plan = *r;
  }
  state.counters["nodes"] = plan.nodes;
  state.counters["reduced"] = plan.reduced_nodes;
  state.counters["cost_us"] = plan.cost.value() * 1e6;
  state.counters["objective_us"] = plan.objective.value() * 1e6;
  state.counters["pruned"] = static_cast<double>(plan.pruned_strategies);
  state.counters["bound_us"] = plan.lower_bound.value() * 1e6;
  state.counters["optimal"] = plan.proven_optimal ? 1 : 0;
  state.counters["mem_GiB"] = core::to_gib(plan.memory);
  state.SetLabel(plan.method + (plan.feasibility == Feasibility::kFeasible
                                    ? ""
                                    : " (no plan: " + describe_memory(plan, options.memory_limit) +
                                          ")"));
}

// Layers so that the graph has about 200 / 1000 / 3000 operators (61 per layer + 2).
int layers_for(std::int64_t nodes) { return static_cast<int>((nodes - 2 + 30) / 61); }

void BM_AlpaLike(benchmark::State& state, Algorithm alg) {
  const IntraOpGraph g = gpt_graph(gpt3_2_6b(layers_for(state.range(0))));
  IntraOpOptions o;
  o.algorithm = alg;
  o.time_limit = core::seconds(60.0);
  run(state, g, {2, 4}, o);
}
BENCHMARK_CAPTURE(BM_AlpaLike, dp, Algorithm::kDp)
    ->Arg(200)->Arg(1000)->Arg(3000)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_AlpaLike, ilp, Algorithm::kIlp)
    ->Arg(200)->Arg(1000)->Arg(3000)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// The same without any reduction (dominance, folding, bound pruning): the plain ILP of
// Alpa §4.2 with GLPK, warm-started by the greedy assignment, deadline 60 s.
void BM_AlpaLikePlainIlp(benchmark::State& state) {
  const IntraOpGraph g = gpt_graph(gpt3_2_6b(layers_for(state.range(0))));
  IntraOpOptions o;
  o.algorithm = Algorithm::kIlp;
  o.simplify.drop_dominated = false;
  o.simplify.fold_single_strategy = false;
  o.prune_by_bound = false;
  o.time_limit = core::seconds(60.0);
  run(state, g, {2, 4}, o);
}
BENCHMARK(BM_AlpaLikePlainIlp)
    ->Arg(200)->Arg(1000)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

void BM_Gpt3Layer(benchmark::State& state, LogicalMesh mesh, Algorithm alg) {
  const IntraOpGraph g = gpt_graph(gpt3_2_6b(1));
  IntraOpOptions o;
  o.algorithm = alg;
  run(state, g, mesh, o);
}
BENCHMARK_CAPTURE(BM_Gpt3Layer, auto_2x4, LogicalMesh{2, 4}, Algorithm::kAuto)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Gpt3Layer, auto_1x8, LogicalMesh{1, 8}, Algorithm::kAuto)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Gpt3Layer, ilp_2x4, LogicalMesh{2, 4}, Algorithm::kIlp)
    ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_Gpt3Layer, ilp_1x8, LogicalMesh{1, 8}, Algorithm::kIlp)
    ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// A 24-layer GPT-3 2.6B stage on 8 devices, unconstrained and under a 24 GiB limit (between
// the smallest footprint and the unconstrained optimum's, so the limit binds).
void BM_Gpt3Stage24(benchmark::State& state, LogicalMesh mesh, bool limited) {
  const IntraOpGraph g = gpt_graph(gpt3_2_6b(24));
  IntraOpOptions o;
  if (limited) {
    o.memory_limit = core::gib(24);
    o.time_limit = core::seconds(10.0);  // the ILP closes what gap is left, within the target
  }
  run(state, g, mesh, o);
}
BENCHMARK_CAPTURE(BM_Gpt3Stage24, auto_2x4, LogicalMesh{2, 4}, false)
    ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_Gpt3Stage24, auto_1x8, LogicalMesh{1, 8}, false)
    ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_Gpt3Stage24, auto_2x4_24GiB, LogicalMesh{2, 4}, true)
    ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace alpasim::planner::intra_op
