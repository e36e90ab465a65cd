// Solver exactness at realistic size (issue 20 #4): the plain intra-op ILP (no bound
// pruning, no conditioning: an independent exact reference) against the DP the search uses
// (bound pruning, conditioning) on real transformer layers converted by planner/adapters
// and on a whole small GPT stage; and the inter-op DP against brute force on 8-16 layers
// and 8 devices. The small-graph versions are in solver_exactness_test.cc / inter_op_test.cc.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "planner/adapters/ir_adapter.h"
#include "planner/ilp/glpk_solver.h"
#include "planner/inter_op/inter_op_dp.h"
#include "planner/intra_op/cost_problem.h"
#include "planner/intra_op/solve.h"
#include "planner/intra_op/strategies.h"
#include "tests/support/shipped_calibration.h"

using namespace alpasim;
using planner::intra_op::Algorithm;
using planner::intra_op::BuiltProblem;
using planner::intra_op::CostProblem;
using planner::intra_op::LogicalMesh;
using planner::intra_op::SolveOptions;

namespace {

// Objectives are sums of a few hundred doubles (seconds): equal up to rounding.
bool same(double a, double b) { return std::abs(a - b) <= 1e-15 + 1e-9 * std::abs(b); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ir::ModelConfig gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t seq,
                    std::int64_t vocab) {
  return ir::gpt_model_config("GPT", layers, hidden, heads, seq, vocab);
}

ir::Graph training_graph(const ir::ModelConfig& m, std::int64_t microbatch) {
  ir::BuildOptions bo;
  bo.microbatch_size = microbatch;
  return ir::derive_training_graph(ir::build_forward_graph(m, bo).value(), {});
}

/// The problem the search solves for layers [begin, end) on `mesh` of one 8-GPU
/// p3.16xlarge node: collectives priced by the shipped V100 cost model (as search.cc does).
CostProblem problem_of(const ir::Graph& g, std::int32_t begin, std::int32_t end, bool weight_gradients,
                       const LogicalMesh& mesh) {
  static const cluster::ClusterSpec cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
  static const cost_model::CostModel cost =
      cost_model::CostModel::create(
          cluster, cost_model::params_for_preset(::alpasim::testing::shipped_calibrations(), "aws-p3.16xlarge").value())
          .value();
  auto graph = planner::adapters::layer_range_graph(g, begin, end, nullptr, weight_gradients);
  REQUIRE_MESSAGE(graph.ok(), graph.status().message());
  auto hook = planner::adapters::make_collective_hook(cost, {1, 8}, mesh);
  REQUIRE_MESSAGE(hook.ok(), hook.status().message());
  planner::intra_op::CostHooks hooks;
  hooks.collective = *hook;
  return planner::intra_op::build_problem(*graph, mesh, hooks).problem;
}

/// Solves `p` with the plain ILP (GLPK, no pruning, no conditioning, no time pressure) and
/// with the search's solver (kAuto without an ILP solver: DP, bound pruning, cutset
/// conditioning) and, where its tables fit, the plain DP (no pruning); all must agree and
/// be proven optimal. Returns a line for the report.
std::string compare(const CostProblem& p, const std::string& what) {
  CAPTURE(what);
  double strategies = 0;
  for (std::size_t v = 0; v < p.nodes.size(); ++v) strategies += p.num_strategies(static_cast<int>(v));
  planner::ilp::GlpkSolver glpk;
  SolveOptions ilp;
  ilp.algorithm = Algorithm::kIlp;
  ilp.prune_by_bound = false;
  ilp.condition_before_ilp = false;
  ilp.ilp_solver = &glpk;
  ilp.time_limit = core::seconds(600.0);
  auto t0 = std::chrono::steady_clock::now();
  auto by_ilp = planner::intra_op::solve_problem(p, ilp);
  const double ilp_s = seconds_since(t0);
  REQUIRE_MESSAGE(by_ilp.ok(), by_ilp.status().message());
  REQUIRE(by_ilp->best.has_value());
  REQUIRE(by_ilp->ilp_status.has_value());
  CHECK(*by_ilp->ilp_status == planner::ilp::IlpStatus::kOptimal);
  CHECK(by_ilp->pruned_strategies == 0);
  CHECK(same(p.objective(by_ilp->best->choice), by_ilp->best->objective));
  // Where the optimum costs anything, it is not the trivial assignment (every node's first
  // strategy), so agreeing on it says something. (The embedding's optimum is free: its
  // lookups may run replicated, which needs no communication.)
  const std::vector<int> first(p.nodes.size(), 0);
  if (by_ilp->best->objective > 0) CHECK(p.objective(first) > by_ilp->best->objective * (1 + 1e-6));

  SolveOptions dp;  // as the search runs it: no ILP solver given
  t0 = std::chrono::steady_clock::now();
  auto by_dp = planner::intra_op::solve_problem(p, dp);
  const double dp_s = seconds_since(t0);
  REQUIRE_MESSAGE(by_dp.ok(), by_dp.status().message());
  REQUIRE(by_dp->best.has_value());
  CHECK(by_dp->proven_optimal);
  CHECK(same(by_dp->best->objective, by_ilp->best->objective));
  CHECK(same(p.objective(by_dp->best->choice), by_dp->best->objective));

  SolveOptions plain_dp;
  plain_dp.algorithm = Algorithm::kDp;
  plain_dp.prune_by_bound = false;
  plain_dp.prune_tables_above = std::int64_t{1} << 40;
  t0 = std::chrono::steady_clock::now();
  auto by_plain_dp = planner::intra_op::solve_problem(p, plain_dp);
  const double plain_dp_s = seconds_since(t0);
  std::string plain = "too wide";
  if (by_plain_dp.ok()) {
    REQUIRE(by_plain_dp->best.has_value());
    CHECK(by_plain_dp->proven_optimal);
    CHECK(same(by_plain_dp->best->objective, by_ilp->best->objective));
    plain = std::to_string(plain_dp_s) + " s";
  } else {
    CHECK(by_plain_dp.status().message().find("use the ILP") != std::string::npos);
  }
  return what + ": " + std::to_string(p.nodes.size()) + " nodes, " + std::to_string(p.edges.size()) + " edges, " +
         std::to_string(static_cast<std::int64_t>(strategies)) + " strategies; optimum " +
         std::to_string(by_ilp->best->objective * 1e3) + " ms; plain ILP " + std::to_string(ilp_s) + " s, DP (" +
         by_dp->method + ", " + std::to_string(by_dp->pruned_strategies) + " pruned) " + std::to_string(dp_s) +
         " s, plain DP " + plain;
}

}  // namespace

TEST_CASE("intra-op exactness on real GPT layers: the plain ILP equals the search's DP (2x4 and 1x8)") {
  // A GPT-3 1.3B-shaped block (hidden 2048, 32 heads, sequence 1024, microbatch 4) and the
  // embedding and head layers around it, with and without the weight gradients and updates
  // (the search solves both variants).
  const ir::Graph g = training_graph(gpt(1, 2048, 32, 1024, 51200), 4);
  REQUIRE(g.num_layers() == 3);
  std::string report;
  for (const LogicalMesh& mesh : {LogicalMesh{2, 4}, LogicalMesh{1, 8}}) {
    const std::string m = std::to_string(mesh.rows) + "x" + std::to_string(mesh.cols);
    for (bool weight_gradients : {false, true}) {
      const std::string v = weight_gradients ? ", with weight gradients" : "";
      report += compare(problem_of(g, 1, 2, weight_gradients, mesh), "GPT block on " + m + v) + "\n";
    }
    report += compare(problem_of(g, 0, 1, true, mesh), "GPT embedding on " + m) + "\n";
    report += compare(problem_of(g, 2, 3, true, mesh), "GPT head on " + m) + "\n";
  }
  MESSAGE("\n" << report);
}

TEST_CASE("a hard deadline stops a solve before its DP, without one the same limit only binds the ILP") {
  // The search's mid-point time limit (Searcher::deadline) relies on stop_at_time_limit.
  // A time limit of 1 ns has passed before any DP can run: with the flag the solve answers
  // with its best known assignment, unproven; without it the DP still proves the optimum
  // (only the ILP heeds the limit, so the method never depends on the machine).
  const ir::Graph g = training_graph(gpt(1, 2048, 32, 1024, 51200), 4);
  const CostProblem p = problem_of(g, 1, 2, true, LogicalMesh{2, 4});
  SolveOptions hard;
  hard.time_limit = core::seconds(1e-9);
  hard.stop_at_time_limit = true;
  auto cut = planner::intra_op::solve_problem(p, hard);
  REQUIRE_MESSAGE(cut.ok(), cut.status().message());
  CHECK_FALSE(cut->proven_optimal);
  CHECK(cut->method.find("deadline") != std::string::npos);
  if (cut->best) CHECK(same(p.objective(cut->best->choice), cut->best->objective));
  SolveOptions soft = hard;
  soft.stop_at_time_limit = false;
  auto full = planner::intra_op::solve_problem(p, soft);
  REQUIRE_MESSAGE(full.ok(), full.status().message());
  CHECK(full->proven_optimal);
  CHECK(full->method.find("deadline") == std::string::npos);
  REQUIRE(full->best.has_value());
  if (cut->best) CHECK(cut->best->objective >= full->best->objective);
}

TEST_CASE("intra-op exactness on a whole small GPT stage: the plain ILP equals the search's DP") {
  // Every layer of a 2-block GPT (embedding, 2 blocks, head; hidden 256, 4 heads,
  // sequence 128, vocabulary 1024, microbatch 4) as one stage: on 2x4 without the weight
  // gradients (the search's per-microbatch variant; with them the plain ILP of the whole
  // stage runs for minutes in GLPK), on 1x8 with and without.
  const ir::Graph g = training_graph(gpt(2, 256, 4, 128, 1024), 4);
  REQUIRE(g.num_layers() == 4);
  std::string report;
  report += compare(problem_of(g, 0, 4, false, LogicalMesh{2, 4}), "whole 2-block GPT on 2x4") + "\n";
  report += compare(problem_of(g, 0, 4, false, LogicalMesh{1, 8}), "whole 2-block GPT on 1x8") + "\n";
  report += compare(problem_of(g, 0, 4, true, LogicalMesh{1, 8}),
                    "whole 2-block GPT on 1x8, with weight gradients") + "\n";
  MESSAGE("\n" << report);
}

namespace {

double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// Random stage-time tables with the structure of real ones: a stage's time grows with
/// its layers (each layer has its own cost) and shrinks sub-linearly with its devices
/// (exponent 0.2-0.7: communication eats into the speed-up, so pipelining pays); its memory
/// grows with its layers and with the stages after it (more microbatches in flight under
/// 1F1B) and shrinks with its devices, so long stages on few devices run out of memory
/// (+inf) against a per-instance budget.
planner::inter_op::InterOpProblem random_inter_op(std::uint64_t seed, int layers, std::int64_t nodes,
                                                  std::int64_t gpus_per_node) {
  std::mt19937_64 rng(seed);
  planner::inter_op::InterOpProblem p;
  p.num_layers = layers;
  p.submeshes = planner::inter_op::submesh_shapes(nodes, gpus_per_node);
  p.num_devices = nodes * gpus_per_node;
  p.num_microbatches = 2 + static_cast<std::int64_t>(rng() % 31);  // 2..32
  p.max_stages = layers;
  p.resize();
  const double budget = 1.5 + 3.0 * unit(rng);  // layer-memories per device
  std::vector<double> layer_s(static_cast<std::size_t>(layers));
  for (double& t : layer_s) t = 0.5 + unit(rng);
  for (int k = 0; k < layers; ++k) {
    double work = 0;
    for (int i = k + 1; i <= layers; ++i) {
      work += layer_s[static_cast<std::size_t>(i - 1)];
      for (std::size_t j = 0; j < p.submeshes.size(); ++j) {
        const double devices = static_cast<double>(p.submeshes[j].size());
        const double t = work / std::pow(devices, 0.2 + 0.5 * unit(rng));
        for (int s = 1; s <= p.max_stages; ++s) {
          const double memory = (i - k) * (1.0 + 0.1 * static_cast<double>(std::min<std::int64_t>(s, p.num_microbatches))) / devices;
          const bool fits = memory <= budget;
          p.set(k, i, static_cast<int>(j), s, fits ? t * (1.0 + 0.03 * s) : planner::inter_op::InterOpProblem::kInfeasible);
        }
      }
    }
  }
  return p;
}

}  // namespace

TEST_CASE("the inter-op DP equals brute force on 8-16 layers and 8 devices (1x8 and 2x4 clusters)") {
  std::string report;
  int compared = 0;
  std::map<std::size_t, int> stage_counts;  // optima by number of stages
  for (const auto& [nodes, gpus] : {std::pair<std::int64_t, std::int64_t>{1, 8}, {2, 4}}) {
    for (int layers : {8, 10, 12, 16}) {
      for (std::uint64_t seed = 1; seed <= (layers >= 12 ? 4u : 10u); ++seed) {
        CAPTURE(nodes);
        CAPTURE(layers);
        CAPTURE(seed);
        const auto p = random_inter_op(seed * 7919 + static_cast<std::uint64_t>(layers), layers, nodes, gpus);
        auto t0 = std::chrono::steady_clock::now();
        const auto brute = planner::inter_op::brute_force_inter_op(p);
        const double brute_s = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        const auto dp = planner::inter_op::solve_inter_op(p, {});
        const double dp_s = seconds_since(t0);
        if (!std::isfinite(brute.total_s)) {
          CHECK(dp.solutions.empty());
          continue;
        }
        ++compared;
        REQUIRE_FALSE(dp.solutions.empty());
        const auto& best = dp.solutions.front();
        CHECK(best.total_s == doctest::Approx(brute.total_s).epsilon(1e-12));
        // The DP's answer is a valid pipeline whose time, recomputed from the table, is its
        // claimed time: every layer once, in order, exactly the 8 devices.
        std::int64_t devices = 0;
        int next = 0;
        double sum = 0, mx = 0;
        const int stages = static_cast<int>(best.stages.size());
        for (int idx = 0; idx < stages; ++idx) {
          const auto& st = best.stages[static_cast<std::size_t>(idx)];
          CHECK(st.layer_begin == next);
          next = st.layer_end;
          devices += p.submeshes[static_cast<std::size_t>(st.submesh)].size();
          const double t = p.time(st.layer_begin, st.layer_end, st.submesh, stages - idx);
          sum += t;
          mx = std::max(mx, t);
        }
        CHECK(next == layers);
        CHECK(devices == 8);
        CHECK(sum + static_cast<double>(p.num_microbatches - 1) * mx == doctest::Approx(best.total_s).epsilon(1e-12));
        ++stage_counts[best.stages.size()];
        report += std::to_string(nodes) + "x" + std::to_string(gpus) + " cluster, " + std::to_string(layers) +
                  " layers, seed " + std::to_string(seed) + ": " + std::to_string(best.stages.size()) +
                  " stages, brute force " + std::to_string(brute_s) + " s, DP " + std::to_string(dp_s) + " s\n";
      }
    }
  }
  CHECK(compared >= 40);  // most instances have a feasible pipeline
  // The optima are real pipelines, not one stage on every device: at least three different
  // stage counts, and most optima with 3 or more stages.
  int deep = 0;
  for (const auto& [stages, count] : stage_counts) deep += stages >= 3 ? count : 0;
  CHECK(stage_counts.size() >= 3);
  CHECK(2 * deep > compared);
  MESSAGE("\n" << report);
}

TEST_CASE("a gather may run replicated and pays its bytes, and nothing all-reduces the loss") {
  // Issue 15, found comparing the evaluator with sim/lowering on SC'21's 7.5B row: Alpa's rule
  // that heavy operators never run replicated also held for the embeddings' lookups (written
  // as one-hot contractions), so on a data x tensor mesh the position lookup, reading a
  // replicated table, split it over every device and all-reduced its output (0.37 ms per
  // microbatch there), and the loss was all-reduced over the replicas every microbatch
  // (0.32 ms). Megatron replicates the position lookup and averages the loss once per
  // iteration, for logging.
  static const cluster::ClusterSpec cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
  static const cost_model::CostModel cost =
      cost_model::CostModel::create(
          cluster, cost_model::params_for_preset(::alpasim::testing::shipped_calibrations(), "aws-p3.16xlarge").value())
          .value();
  const ir::Graph g = training_graph(gpt(2, 1024, 16, 1024, 51200), 4);
  const LogicalMesh mesh{2, 4};
  auto hook = planner::adapters::make_collective_hook(cost, {1, 8}, mesh);
  REQUIRE(hook.ok());
  planner::intra_op::CostHooks hooks;
  hooks.collective = *hook;
  hooks.memory_bound = [](core::Bytes b) { return cost.memory_bound(b); };
  auto node_named = [](const planner::intra_op::IntraOpGraph& graph, const std::string& name) {
    for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
      if (graph.nodes[v].name == name) return static_cast<int>(v);
    }
    FAIL("no node " << name);
    return -1;
  };
  const auto embedding = planner::adapters::layer_range_graph(g, 0, 1, nullptr, false);
  REQUIRE(embedding.ok());
  const int lookup = node_named(*embedding, "embedding/position_lookup");
  bool replicated = false;
  for (const auto& s : planner::intra_op::enumerate_strategies(*embedding, lookup, mesh, hooks)) {
    bool inputs_whole = s.output.is_replicated();
    for (const auto& in : s.inputs) inputs_whole = inputs_whole && in.is_replicated();
    if (!inputs_whole) continue;
    replicated = true;
    CHECK(s.communication.value() == 0.0);
    // Its whole bytes on every device, less the even split the caller adds.
    const std::int64_t bytes = embedding->nodes[static_cast<std::size_t>(lookup)].bytes_accessed;
    REQUIRE(bytes > 0);
    CHECK(s.compute.value() == doctest::Approx((cost.memory_bound(core::bytes(bytes)) -
                                                cost.memory_bound(core::bytes(bytes / 8))).value()));
  }
  CHECK(replicated);
  const auto head = planner::adapters::layer_range_graph(g, g.num_layers() - 1, g.num_layers(), nullptr, false);
  REQUIRE(head.ok());
  const int loss = node_named(*head, "head/loss");
  CHECK(head->nodes[static_cast<std::size_t>(loss)].result_unread);
  for (const auto& s : planner::intra_op::enumerate_strategies(*head, loss, mesh, hooks)) {
    CAPTURE(s.name);
    CHECK(s.communication.value() == 0.0);
  }
}
