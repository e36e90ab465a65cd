// Performance target of the model-graph issue: building GPT-3 175B (96 layers) with its
// backward pass and optimizer update takes under 1 s. Run:
//   build-ir/bench/ir_graph_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/clustering.h"

namespace alpasim::ir {
namespace {

TransformerConfig gpt3_175b() {
  TransformerConfig c;
  c.builtin = "gpt";
  c.num_layers = 96;
  c.hidden_size = 12288;
  c.num_heads = 96;
  c.num_kv_heads = 96;
  c.seq_len = 2048;
  c.vocab_size = 51200;
  c.ffn_hidden_size = 4 * 12288;
  set_architecture_defaults(c);
  return c;
}

void BM_Gpt3_175B_Forward(benchmark::State& state) {
  const auto c = gpt3_175b();
  for (auto _ : state) {
    Graph g = build_transformer(c, {}, "GPT-3 175B");
    benchmark::DoNotOptimize(g.size());
  }
}
BENCHMARK(BM_Gpt3_175B_Forward)->Unit(benchmark::kMillisecond);

// The target: forward + backward + Adam update, with and without full recomputation.
void BM_Gpt3_175B_TrainingGraph(benchmark::State& state) {
  const auto c = gpt3_175b();
  const auto recompute = static_cast<RecomputePolicy>(state.range(0));
  std::size_t ops = 0;
  for (auto _ : state) {
    Graph g = derive_training_graph(build_transformer(c, {}, "GPT-3 175B"),
                                    {OptimizerKind::kAdam, recompute});
    ops = g.size();
    benchmark::DoNotOptimize(ops);
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_Gpt3_175B_TrainingGraph)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);

void BM_Gpt3_175B_Accounting(benchmark::State& state) {
  const Graph g = derive_training_graph(build_transformer(gpt3_175b(), {}, "GPT-3 175B"),
                                        {OptimizerKind::kAdam, RecomputePolicy::kFull});
  for (auto _ : state) {
    benchmark::DoNotOptimize(flops_per_iteration(g, 1536));
    benchmark::DoNotOptimize(activation_bytes_per_layer(g));
  }
}
BENCHMARK(BM_Gpt3_175B_Accounting)->Unit(benchmark::kMillisecond);

// Operator clustering (Alpa §5.2) of the 175B forward graph into 96 layers.
void BM_Gpt3_175B_Clustering(benchmark::State& state) {
  const Graph g = build_transformer(gpt3_175b(), {}, "GPT-3 175B");
  for (auto _ : state) {
    auto c = cluster_operators(g, {static_cast<std::int32_t>(state.range(0)), 0.25});
    benchmark::DoNotOptimize(c.ok());
  }
}
BENCHMARK(BM_Gpt3_175B_Clustering)->Arg(16)->Arg(96)->Unit(benchmark::kMillisecond);

void BM_Topological_Order_175B(benchmark::State& state) {
  const Graph g = derive_training_graph(build_transformer(gpt3_175b(), {}, "GPT-3 175B"), {});
  for (auto _ : state) benchmark::DoNotOptimize(g.topological_order());
}
BENCHMARK(BM_Topological_Order_175B)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace alpasim::ir
