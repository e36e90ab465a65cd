// planner::search on a small GPT: valid plans in every mode, determinism, re-evaluation of
// a written plan, the memory message, and the IR adapter.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "planner/adapters/ir_adapter.h"
#include "planner/intra_op/strategies.h"
#include "planner/search/pipeline_bound.h"
#include "planner/search/search.h"
#include "planner/search/searcher.h"
#include "schema/plan.h"
#include "sim/pipeline_sim.h"
#include "tests/support/shipped_calibration.h"
#include "tests/support/tiny_models.h"

using namespace alpasim;

namespace {

const std::map<std::string, cost_model::Calibration>& shipped() { return ::alpasim::testing::shipped_calibrations(); }

ir::ModelConfig tiny_gpt(std::int64_t layers = 2) { return ::alpasim::testing::tiny_gpt_hidden256(layers); }

// The cost model of in.cluster (p3.16xlarge GPUs and links) with the shipped calibration:
// after any change to in.cluster.
void price_with_shipped_p3(planner::SearchInput& in) {
  in.cost = cost_model::CostModel::create(
                in.cluster, cost_model::params_for_preset(shipped(), "aws-p3.16xlarge").value())
                .value();
}

// 4 V100 of one p3.16xlarge (a partial node).
planner::SearchInput tiny_input(const std::string& mode) {
  planner::SearchInput in;
  in.model = tiny_gpt();
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
  in.cluster.gpus_per_node = 4;
  price_with_shipped_p3(in);
  in.global_batch_size = 16;
  in.mode = mode;
  in.options.microbatch_sizes = {2, 4};
  in.options.compare_baselines = false;
  return in;
}

// The training graph the search priced `plan` with: its microbatch size and recomputation.
ir::Graph training_graph_of(const planner::SearchInput& in, const schema::Plan& plan) {
  ir::BuildOptions bo;
  bo.microbatch_size = plan.global_batch_size / plan.num_microbatches;
  bo.dtype = in.dtype;
  ir::TrainingOptions to;
  to.recompute = plan.recompute == schema::Recompute::kFull        ? ir::RecomputePolicy::kFull
                 : plan.recompute == schema::Recompute::kSelective ? ir::RecomputePolicy::kSelective
                                                                   : ir::RecomputePolicy::kNone;
  return ir::derive_training_graph(ir::build_forward_graph(in.model, bo).value(), to);
}

// The tiny GPT Megatron plan file (t = 2, p = 2, d = 2, as alpa-sim --out writes it) and
// what evaluate_plan needs to price it on the shipped p3 calibration.
std::pair<schema::Plan, planner::SearchInput> tiny_megatron_plan_file() {
  auto plan = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) +
                                     "/tests/unit/exec/data/tiny_gpt_megatron_plan_file_tp2_pp2_dp2.json");
  REQUIRE_MESSAGE(plan.ok(), plan.status().message());
  planner::SearchInput in = tiny_input("alpa");
  in.model = plan->model;
  in.dtype = plan->dtype;
  in.global_batch_size = plan->global_batch_size;
  in.cluster.gpus_per_node = 8;
  price_with_shipped_p3(in);
  return {*plan, in};
}

// The intra_op_only plan of tiny_input (one stage on the 4 GPUs), the training graph it was
// priced with, and its stage's shardings by operator name.
struct OneStagePlan {
  planner::SearchInput in;
  planner::SearchResult result;
  ir::Graph graph;
  std::map<std::string, const schema::OperatorSharding*> sharding_of;
  const schema::PlanStage& stage() const { return result.plan.stages.at(0); }
};
std::unique_ptr<OneStagePlan> intra_op_only_plan() {
  auto out = std::make_unique<OneStagePlan>();
  out->in = tiny_input("intra_op_only");
  auto r = planner::search(out->in);
  REQUIRE(r.ok());
  out->result = std::move(r).value();
  REQUIRE(out->result.plan.stages.size() == 1);
  out->graph = training_graph_of(out->in, out->result.plan);
  for (const auto& sh : out->stage().shardings) out->sharding_of[sh.op] = &sh;
  return out;
}

core::Status validate(const schema::Plan& plan) {
  const core::Json j = schema::plan_to_json(plan);
  return schema::validate_plan(plan, core::JsonValue(j, "plan.json", ""));
}

}  // namespace

TEST_CASE("a searched plan lists its intra-op communication operator by operator, summing to its comm time") {
  // Issue 17 #7: the trace of a searched plan shows each operator's collectives inside the
  // compute task they block, as Megatron plans show their tensor-parallel all-reduces.
  const auto one = intra_op_only_plan();
  const sim::PipelineProblem& pb = one->result.problem;
  REQUIRE(pb.stages.size() == 1);
  const sim::StageCosts& st = pb.stages[0];
  REQUIRE(pb.meshes[0].num_gpus == 4);
  auto sum = [](const std::vector<sim::BlockingCollective>& calls) {
    double t = 0;
    for (const auto& c : calls) t += c.time.value();
    return t;
  };
  REQUIRE_FALSE(st.forward_collectives.empty());
  REQUIRE_FALSE(st.backward_collectives.empty());
  CHECK(sum(st.forward_collectives) == doctest::Approx(st.forward_tp_comm_s.value()).epsilon(1e-9));
  CHECK(sum(st.backward_collectives) == doctest::Approx(st.backward_tp_comm_s.value()).epsilon(1e-9));
  for (const auto& calls : {st.forward_collectives, st.backward_collectives, st.recompute_collectives}) {
    for (const auto& c : calls) {
      CAPTURE(c.where);
      CHECK(c.where.rfind("layer ", 0) == 0);
      CHECK(c.time.value() > 0);
      CHECK((c.collective == "all_reduce" || c.collective == "reduce_scatter" || c.collective == "reshard"));
      CHECK(c.group_size >= 1);
      CHECK(c.group_size <= 4);
      if (c.collective != "reshard") CHECK(c.bytes > 0);
    }
  }
  // The backward lists the last layer's operators first.
  const auto& last = st.backward_collectives.front().where;
  const auto& first = st.backward_collectives.back().where;
  CHECK(std::stoi(last.substr(6)) >= std::stoi(first.substr(6)));
  // The plan file evaluated by itself lists the same communication.
  auto again = planner::evaluate_plan(one->in, one->result.plan);
  REQUIRE(again.ok());
  CHECK(sum(again.value().problem.stages[0].forward_collectives) ==
        doctest::Approx(sum(st.forward_collectives)).epsilon(1e-12));
  CHECK(sum(again.value().problem.stages[0].backward_collectives) ==
        doctest::Approx(sum(st.backward_collectives)).epsilon(1e-12));
  // The gradient collectives of its grad-sync task too: weight-update sharding's
  // reduce-scatter + all-gather over the axes a weight is replicated on, per layer, and the
  // optimizer-phase operators' communication; all inside grad_sync_s.
  REQUIRE(st.grad_sync_s.has_value());
  REQUIRE_FALSE(st.grad_sync_collectives.empty());
  int scatters = 0, gathers = 0;
  for (const auto& c : st.grad_sync_collectives) {
    CAPTURE(c.where);
    CHECK(c.category == "grad_collective");
    CHECK(c.where.rfind("layer ", 0) == 0);
    CHECK(c.group_size >= 1);
    CHECK(c.group_size <= 4);
    if (c.collective == "reduce_scatter" && c.algorithm == "weight-update sharding") {
      ++scatters;
      CHECK(c.bytes > 0);
    }
    gathers += c.collective == "all_gather" && c.algorithm == "weight-update sharding";
  }
  CHECK(scatters > 0);
  CHECK(scatters == gathers);
  CHECK(sum(st.grad_sync_collectives) > 0);
  CHECK(sum(st.grad_sync_collectives) <= st.grad_sync_s->value() * (1 + 1e-12));
  CHECK(sum(again.value().problem.stages[0].grad_sync_collectives) ==
        doctest::Approx(sum(st.grad_sync_collectives)).epsilon(1e-12));
}

TEST_CASE("identical transformer blocks convert to the same intra-op graph") {
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  const ir::Graph fwd = ir::build_forward_graph(tiny_gpt(3), bo).value();
  const ir::Graph g = ir::derive_training_graph(fwd, {});
  std::vector<ir::OpId> ops;
  auto b1 = planner::adapters::layer_range_graph(g, 1, 2, &ops);
  auto b2 = planner::adapters::layer_range_graph(g, 2, 3);
  auto head = planner::adapters::layer_range_graph(g, 4, 5);
  REQUIRE(b1.ok());
  REQUIRE(b2.ok());
  REQUIRE(head.ok());
  CHECK(ops.size() == b1.value().nodes.size());  // one model op per node
  CHECK(b1.value().structural_hash() == b2.value().structural_hash());
  CHECK(b1.value().structural_hash() != head.value().structural_hash());
  // Without weight gradients there are no update nodes.
  auto nw = planner::adapters::layer_range_graph(g, 1, 2, nullptr, false).value();
  int updates = 0;
  for (const auto& n : nw.nodes) updates += n.kind == planner::intra_op::OpKind::kUpdate;
  CHECK(updates == 0);
  CHECK(nw.nodes.size() < b1.value().nodes.size());
}

TEST_CASE("every search mode returns a valid plan") {
  for (const std::string& mode : planner::search_mode_names()) {
    CAPTURE(mode);
    auto r = planner::search(tiny_input(mode));
    REQUIRE(r.ok());
    CHECK(validate(r.value().plan).ok());
    CHECK(r.value().prediction.iteration_time_s > 0);
    CHECK(r.value().prediction.fits);
    // Σ stage GPUs (one period of the interleaved stages) = the 4 GPUs.
    std::int64_t gpus = 0;
    const auto& plan = r.value().plan;
    const std::size_t p = plan.stages.size() / static_cast<std::size_t>(plan.interleave);
    for (std::size_t i = 0; i < p; ++i) gpus += static_cast<std::int64_t>(plan.stages[i].device_ids.size());
    CHECK(gpus == 4);
  }
}

TEST_CASE("the search is deterministic and its plan re-evaluates to the same prediction") {
  planner::SearchInput in = tiny_input("alpa");
  in.options.threads = 2;
  auto a = planner::search(in);
  in.options.threads = 1;
  auto b = planner::search(in);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(schema::plan_to_json(a.value().plan).dump() == schema::plan_to_json(b.value().plan).dump());
  CHECK(a.value().prediction.iteration_time_s == b.value().prediction.iteration_time_s);
  auto e = planner::evaluate_plan(in, a.value().plan);
  REQUIRE(e.ok());
  CHECK(e.value().prediction.iteration_time_s == a.value().prediction.iteration_time_s);
  CHECK(e.value().prediction.peak_memory_bytes == a.value().prediction.peak_memory_bytes);
}

TEST_CASE("the IR adapter marks the backward's gradient sums, and only adds, as sums of their operands") {
  // What charge_combined_reductions relies on: a block's Q, K and V input gradients meet in
  // "add" operators (IntraOpNode::sums_operands); a product or a GEMM is never one.
  planner::SearchInput in = tiny_input("alpa");
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(in.model, bo).value(), {});
  std::vector<ir::OpId> ops;
  auto layer = planner::adapters::layer_range_graph(g, 1, 2, &ops, false);
  REQUIRE_MESSAGE(layer.ok(), layer.status().message());
  int sums = 0, norm_sums = 0;
  for (std::size_t v = 0; v < layer->nodes.size(); ++v) {
    const ir::Op& op = g.op(ops[v]);
    const auto& node = layer->nodes[v];
    CAPTURE(op.name);
    if (op.layer != 1) {  // another layer's tensor: an input of this graph
      CHECK_FALSE(node.sums_operands);
      continue;
    }
    const bool add = op.kind == ir::OpKind::kElementwise && op.function == "add" && op.inputs.size() >= 2;
    CHECK(node.sums_operands == add);
    sums += node.sums_operands ? 1 : 0;
    if (node.sums_operands && op.name.find("attn_norm/grad_sum") != std::string::npos) ++norm_sums;
  }
  CHECK(sums > 0);
  CHECK(norm_sums == 2);  // (dQ + dK) + dV
}

TEST_CASE("one GPU: each microbatch accumulates the weights' gradients, the step adds the mixed-precision passes") {
  // One stage on one GPU (nothing communicates, nothing is split): the backward is the
  // training graph's backward operators plus, per weight, one accumulation kernel of
  // gradient_accumulation_bytes_per_parameter (fp16: 2 + 2·2 bytes per element), for a GEMM
  // weight only when the plan does not fuse it into the weight-gradient GEMM
  // (Plan::gradient_accumulation_fusion, true in searched plans); the step is, per layer, one
  // memory-bound pass over the updates' bytes plus mixed_precision_step_bytes_per_parameter
  // (fp16: 26) per weight (a multi-tensor kernel). What sim/lowering charges a Megatron plan;
  // before, neither was charged, and then the updates were priced as one kernel each.
  planner::SearchInput in = tiny_input("alpa");
  in.cluster.gpus_per_node = 1;
  price_with_shipped_p3(in);
  REQUIRE(in.dtype == core::DType::kFp16);
  auto r = planner::search(in);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  schema::Plan plan = r->plan;
  REQUIRE(plan.stages.size() == 1);
  CHECK(plan.gradient_accumulation_fusion);
  const ir::Graph g = training_graph_of(in, plan);
  double backward = 0, step = 0, gemm_weights = 0;
  for (const auto& t : planner::adapters::per_layer_compute(g, 1, *in.cost)) backward += t.backward.value();
  std::map<std::int32_t, std::int64_t> update_bytes;
  for (const ir::Op& op : g.ops()) {
    if (op.phase == ir::Phase::kOptimizer) update_bytes[op.layer] += ir::memory_traffic_bytes(g, op);
  }
  std::set<ir::OpId> gemm;
  for (const ir::Op& op : g.ops()) {
    if (op.phase == ir::Phase::kForward && op.is_einsum() && op.inputs.size() >= 2) gemm.insert(op.inputs[1]);
  }
  std::map<std::int32_t, std::int64_t> layer_params;
  for (const ir::Op& op : g.ops()) {
    if (op.kind != ir::OpKind::kParameter) continue;
    const double accumulate = in.cost->memory_bound(core::bytes(op.out.num_elements() * 6)).value();
    (gemm.count(op.id) != 0 ? gemm_weights : backward) += accumulate;
    layer_params[op.layer] += op.out.num_elements();
  }
  REQUIRE(gemm_weights > 0);
  for (const auto& [layer, params] : layer_params) {
    step += in.cost->memory_bound(core::bytes(update_bytes[layer] + params * 26)).value();
  }
  const sim::StageCosts& st = r->problem.stages.at(0);
  CHECK(st.backward_s.value() == doctest::Approx(backward).epsilon(1e-9));
  CHECK(st.optimizer_step_s.value() == doctest::Approx(step).epsilon(1e-9));
  // Unfused (Megatron-LM of 2021), every weight is added separately.
  plan.gradient_accumulation_fusion = false;
  auto unfused = planner::evaluate_plan(in, plan);
  REQUIRE_MESSAGE(unfused.ok(), unfused.status().message());
  CHECK(unfused->problem.stages.at(0).backward_s.value() == doctest::Approx(backward + gemm_weights).epsilon(1e-9));
  // The key round-trips through the plan file (written only when false).
  const core::Json unfused_json = schema::plan_to_json(plan);
  CHECK(unfused_json.at("gradient_accumulation_fusion") == false);
  CHECK_FALSE(schema::plan_to_json(r->plan).contains("gradient_accumulation_fusion"));
  auto read_back = schema::parse_plan(core::JsonValue(unfused_json, "plan.json", ""), ".");
  REQUIRE_MESSAGE(read_back.ok(), read_back.status().message());
  CHECK_FALSE(read_back->gradient_accumulation_fusion);
  CHECK(*read_back == plan);
}

TEST_CASE("a plan file's blocking p2p makes each stage wait for its sends, as Megatron-LM does") {
  // Two p3.16xlarge nodes of one GPU each: the stages' sends cross the 25 Gb/s network.
  planner::SearchInput in = tiny_input("inter_op_only");
  in.cluster.nodes = 2;
  in.cluster.gpus_per_node = 1;
  price_with_shipped_p3(in);
  auto r = planner::search(in);
  REQUIRE(r.ok());
  schema::Plan plan = r.value().plan;
  REQUIRE(plan.stages.size() == 2);
  plan.p2p = schema::P2pMode::kAsync;  // the grid writes Megatron's blocking sends
  auto async = planner::evaluate_plan(in, plan);
  plan.p2p = schema::P2pMode::kBlocking;
  auto blocking = planner::evaluate_plan(in, plan);
  REQUIRE(async.ok());
  REQUIRE(blocking.ok());
  CHECK_FALSE(async.value().problem.blocking_p2p);
  CHECK(blocking.value().problem.blocking_p2p);
  // Waiting for a send can only delay a stage: never faster, and slower here (a send over
  // the network is on the critical path of the stage that waits for it).
  CHECK(blocking.value().prediction.iteration_time_s > async.value().prediction.iteration_time_s);
}

TEST_CASE("a searched plan with sharded multi-GPU stages re-evaluates to the same memory") {
  // intra_op_only: one stage on the 4 GPUs with per-operator shardings. During the search
  // that stage's memory is a sum over layers; the emitted plan is priced by the executor's
  // walk over its shardings, which is what evaluate_plan of the plan file sees.
  planner::SearchInput in = tiny_input("intra_op_only");
  auto r = planner::search(in);
  REQUIRE(r.ok());
  REQUIRE(r.value().plan.stages.size() == 1);
  REQUIRE(r.value().plan.stages[0].device_ids.size() == 4);
  REQUIRE_FALSE(r.value().plan.stages[0].shardings.empty());
  auto e = planner::evaluate_plan(in, r.value().plan);
  REQUIRE(e.ok());
  CHECK(e.value().prediction.iteration_time_s == r.value().prediction.iteration_time_s);
  CHECK(e.value().prediction.peak_memory_bytes == r.value().prediction.peak_memory_bytes);
  CHECK(e.value().prediction.peak_memory_bytes_per_stage == r.value().prediction.peak_memory_bytes_per_stage);
}

// Per device: every saved forward tensor of stage `st` (`g`: the training graph it was
// priced with) at its bytes over the shards of the layout its spec gives it, the model's
// inputs (which plans list no layout for) split over the batch as the executor keeps them;
// and the same tensors all split over every device of the mesh.
struct StoredBytes {
  std::int64_t by_spec = 0, split_everywhere = 0;
  int not_split = 0;  // saved tensors whose spec leaves them whole on some mesh axis
};
StoredBytes stored_by_spec(const ir::Graph& g, const schema::PlanStage& st) {
  std::map<std::string, const schema::OperatorSharding*> sharding_of;
  for (const auto& sh : st.shardings) sharding_of[sh.op] = &sh;
  const std::int64_t devices = st.logical_rows * st.logical_cols;
  StoredBytes out;
  for (const ir::Op& op : g.ops()) {
    if (op.phase != ir::Phase::kForward || op.kind == ir::OpKind::kParameter) continue;
    if (op.layer < st.layer_begin || op.layer >= st.layer_end) continue;
    bool saved = false;
    for (ir::OpId u : g.consumers(op.id)) {
      saved = saved || g.op(u).phase == ir::Phase::kBackward || g.op(u).phase == ir::Phase::kRecompute;
    }
    if (!saved) continue;
    auto it = sharding_of.find(op.name);
    if (it == sharding_of.end()) CHECK(op.kind == ir::OpKind::kInput);
    const std::int64_t shards =
        it == sharding_of.end() ? devices : it->second->output.num_shards(st.logical_rows, st.logical_cols);
    out.by_spec += op.out.bytes() / shards;
    out.split_everywhere += op.out.bytes() / devices;
    out.not_split += shards < devices ? 1 : 0;
  }
  return out;
}

TEST_CASE("a plan that lists the cross entropy's labels spec (as plans written before 2026-11-26 do) "
          "evaluates as the same plan without it") {
  // The intra-op node of the softmax cross entropy has the logits as its only operand (a
  // reduction over the vocabulary); the IR operator also reads the labels.
  const auto run = intra_op_only_plan();
  schema::Plan with_labels = run->result.plan;
  int listed = 0;
  for (auto& sh : with_labels.stages[0].shardings) {
    if (sh.op != "head/cross_entropy") continue;
    REQUIRE(sh.inputs.size() == 1);
    sh.inputs.push_back(schema::ShardingSpec::replicated(2));  // labels [b, s]
    ++listed;
  }
  REQUIRE(listed == 1);
  auto e = planner::evaluate_plan(run->in, with_labels);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  // Both are priced as written (neither lists the search's own layouts): the labels' spec
  // changes nothing.
  schema::Plan logits_only = with_labels;
  for (auto& sh : logits_only.stages[0].shardings) {
    if (sh.op == "head/cross_entropy") sh.inputs.resize(1);
  }
  logits_only.stages[0].shardings.front().strategy += " (written)";
  auto w = planner::evaluate_plan(run->in, logits_only);
  REQUIRE_MESSAGE(w.ok(), w.status().message());
  CHECK(e->prediction.iteration_time_s == w->prediction.iteration_time_s);
  CHECK(e->prediction.peak_memory_bytes == w->prediction.peak_memory_bytes);
}

TEST_CASE("stored activations follow the plan's shardings: a replicated tensor is held in full") {
  // Each stage's stored activations are, per device, each saved forward tensor's bytes
  // divided by the shards of the layout the plan gives it (before: divided by the devices
  // whatever the layout). (1) the search's intra_op_only plan, one stage on 4 GPUs, which
  // splits every saved tensor 4 ways (exact); (2) a Megatron plan file (tp 2, pp 2, dp 2,
  // as `alpa-sim --out` writes it), whose layer norms, residuals and dropouts are
  // replicated over the tensor-parallel axis (more than the even split).
  const auto run = intra_op_only_plan();
  const StoredBytes searched = stored_by_spec(run->graph, run->stage());
  const std::int64_t stored = run->result.problem.stages.at(0).stored_activation_bytes.value();
  MESSAGE("searched: stored " << stored << " B per device; " << searched.not_split << " saved tensors not split");
  CHECK(stored == searched.by_spec);

  const auto [plan, in] = tiny_megatron_plan_file();
  auto e = planner::evaluate_plan(in, plan);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  const ir::Graph g = training_graph_of(in, plan);
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    CAPTURE(s);
    const StoredBytes megatron = stored_by_spec(g, plan.stages[s]);
    const std::int64_t got = e->problem.stages.at(s).stored_activation_bytes.value();
    MESSAGE("Megatron stage " << s << ": stored " << got << " B per device, split everywhere "
                              << megatron.split_everywhere << " B; " << megatron.not_split
                              << " saved tensors not split");
    // Not equal to by_spec: the evaluator takes the executor's own walk for a plan
    // evaluated as written (planner::sharded_stage_memory, equal to alpa-exec's high-water
    // mark: tests/unit/exec/memory_test.cc), which also keeps resharding copies made for
    // the backward and the tensors sent in the data-parallel layout, and sizes each tensor
    // by the layout its reader reads rather than the spec written for it.
    CHECK(megatron.not_split > 0);
    CHECK(got > megatron.split_everywhere);
  }
}

TEST_CASE("the replicas synchronise a chunk's gradients as one buffer per set of mesh axes") {
  // Megatron all-reduces its contiguous gradient buffer once (XLA combines all-reduces): a
  // chunk of several layers pays one collective per set of replicated mesh axes, over all
  // their gradients, not one per layer with its fixed costs each time (SC'21 7.5B: 39
  // all-reduces, 168.6 ms, against sim/lowering's one, 152.1 ms). The tiny Megatron plan
  // file has two layers per stage, both replicated over the data-parallel pair.
  const auto [plan, in] = tiny_megatron_plan_file();
  auto e = planner::evaluate_plan(in, plan);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  for (std::size_t s = 0; s < e->problem.stages.size(); ++s) {
    CAPTURE(s);
    REQUIRE(plan.stages[s].layer_end - plan.stages[s].layer_begin >= 2);
    std::map<std::pair<std::string, std::string>, int> replica_calls;  // (collective, axes) -> calls
    double replica_s = 0;
    for (const auto& c : e->problem.stages[s].grad_sync_collectives) {
      if (c.algorithm != "replica all-reduce" && c.algorithm != "weight-update sharding") continue;
      CHECK(c.where.find("one buffer for the chunk") != std::string::npos);
      CHECK(c.bytes > 0);
      ++replica_calls[{c.collective, c.where}];
      replica_s += c.time.value();
    }
    REQUIRE_FALSE(replica_calls.empty());
    for (const auto& [key, calls] : replica_calls) {
      CAPTURE(key.first);
      CAPTURE(key.second);
      CHECK(calls == 1);
    }
    REQUIRE(e->problem.stages[s].grad_sync_s.has_value());
    CHECK(replica_s <= e->problem.stages[s].grad_sync_s->value() * (1 + 1e-12));
  }
}

TEST_CASE("a weight gradient computed whole from replicated inputs is not synchronised over that axis") {
  // A Megatron plan file, t = 2, d = 2, no sequence parallelism: each stage's 2x2 mesh
  // splits the batch on one axis and the tensor-parallel weights on the other. A layer
  // norm's scale or a row-parallel bias is replicated on both axes, but its gradient is
  // summed from inputs replicated on the tensor-parallel axis (every GPU of the pair
  // computes the same whole gradient), so only the data-parallel pair synchronises it, as
  // Megatron does. Before, such weights were all-reduced over all 4 GPUs.
  const auto [plan, in] = tiny_megatron_plan_file();
  auto e = planner::evaluate_plan(in, plan);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  REQUIRE(e->problem.stages.size() == 2);
  for (const sim::StageCosts& st : e->problem.stages) {
    REQUIRE_FALSE(st.grad_sync_collectives.empty());
    for (const auto& c : st.grad_sync_collectives) {
      CAPTURE(c.where);
      CAPTURE(c.algorithm);
      // The tied embedding's first/last-stage all-reduce pairs two GPUs too.
      CHECK(c.group_size == 2);
    }
  }
}

TEST_CASE("a memory-bound operator computes its tile: a replicated one its whole size on every device") {
  // intra_op_only: one stage on the 4 GPUs. Its forward compute is the even split of every
  // operator over the 4 GPUs (adapters::per_layer_compute) plus, for each memory-bound
  // operator the plan does not split 4 ways, its time on its tile instead of on a quarter
  // (before: the even split whatever the layout). The intra-op pass sees that price
  // (CostHooks::memory_bound) and chooses layouts with it.
  const auto run = intra_op_only_plan();
  const planner::SearchInput& in = run->in;
  const schema::PlanStage& stage = run->stage();
  const ir::Graph& g = run->graph;
  const auto& sharding_of = run->sharding_of;
  double even = 0;
  for (const auto& t : planner::adapters::per_layer_compute(g, 4, *in.cost)) even += t.forward.value();
  double extra = 0;
  int replicated = 0;
  for (const ir::Op& op : g.ops()) {
    // Memory-bound operators only: the embedding lookup and a two-operand reduce are
    // contractions whose strategies split their work over every device.
    if (op.phase != ir::Phase::kForward || op.is_source() || op.is_matmul() || op.kind == ir::OpKind::kConv2d ||
        op.kind == ir::OpKind::kEmbedding || (op.kind == ir::OpKind::kReduce && op.inputs.size() == 2)) {
      continue;
    }
    auto it = sharding_of.find(op.name);
    if (it == sharding_of.end()) continue;
    // A reduce works on its operand's tiles (its result may be replicated).
    const schema::ShardingSpec& work =
        op.kind == ir::OpKind::kReduce ? it->second->inputs.at(0) : it->second->output;
    const std::int64_t shards = work.num_shards(stage.logical_rows, stage.logical_cols);
    if (shards >= 4) continue;
    ++replicated;
    extra += (planner::adapters::op_compute(g, op, shards, *in.cost) -
              planner::adapters::op_compute(g, op, 4, *in.cost)).value();
  }
  const sim::StageCosts& st = run->result.problem.stages.at(0);
  const double compute = st.forward_s.value() - st.forward_tp_comm_s.value();
  MESSAGE(replicated << " forward memory-bound operators not split 4 ways: +" << extra * 1e6 << " us");
  CHECK(compute == doctest::Approx(even + extra).epsilon(1e-9));
  if (replicated > 0) CHECK(compute > even * (1 + 1e-6));
}

TEST_CASE("pipeline sends that leave a node share its NICs: 1 NIC vs 8 per node") {
  // Two p3.16xlarge-like nodes and a 2-stage plan with one whole node per stage (8x1
  // data-parallel meshes): each microbatch's activation crosses the network as 8 flows,
  // one per receiving GPU, all at once. With one 25 Gb/s NIC per node they share it (1/8
  // each); with 8 NICs each flow has one. Before, both got a whole NIC per flow.
  auto evaluate = [](std::int64_t nics) {
    planner::SearchInput in = tiny_input("alpa");
    in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 2).value();
    in.cluster.inter_node.nics_per_node = nics;
    price_with_shipped_p3(in);
    in.global_batch_size = 64;
    schema::Plan plan;
    plan.model = in.model;
    plan.cluster = in.cluster;
    plan.dtype = in.dtype;
    plan.global_batch_size = 64;
    plan.num_microbatches = 4;
    for (std::int64_t node = 0; node < 2; ++node) {
      schema::PlanStage st;
      st.layer_begin = node == 0 ? 0 : 2;
      st.layer_end = node == 0 ? 2 : 4;
      st.submesh_nodes = 1;
      st.submesh_gpus_per_node = 8;
      st.logical_rows = 8;
      st.logical_cols = 1;
      for (std::int64_t g = 0; g < 8; ++g) st.device_ids.push_back(node * 8 + g);
      plan.stages.push_back(st);
    }
    auto r = planner::evaluate_plan(in, plan);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return std::move(r).value();
  };
  const planner::SearchResult one = evaluate(1);
  const planner::SearchResult eight = evaluate(8);
  auto send_capacity = [](const planner::SearchResult& r) {
    for (const auto& link : r.problem.links) {
      if (link.name == "mesh0->mesh1") return link.capacity.value();
    }
    FAIL("no link mesh0->mesh1");
    return 0.0;
  };
  const double nic_bytes_per_s = 25e9 / 8;
  CHECK(send_capacity(one) == doctest::Approx(nic_bytes_per_s / 8).epsilon(1e-12));
  CHECK(send_capacity(eight) == doctest::Approx(nic_bytes_per_s).epsilon(1e-12));
  CHECK(one.prediction.iteration_time_s > eight.prediction.iteration_time_s);
}

TEST_CASE("the Megatron grid's plan reads back in Megatron-LM's terms as the grid described it") {
  for (const std::int64_t gpus : {4, 8}) {
    planner::SearchInput in = tiny_input("megatron");
    if (gpus == 8) {
      in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
      price_with_shipped_p3(in);
    }
    // The grid alone: mode megatron's exploration answers with runtime flags (the
    // distributed optimizer, the overlaps) a plan file cannot say.
    in.options.explore_megatron_parallelism = false;
    auto r = planner::search(in);
    REQUIRE(r.ok());
    const auto shape = schema::megatron_shape(r.value().plan);
    REQUIRE(shape.has_value());
    CHECK(r.value().explanation.at(0) == "mode megatron: " + shape->to_string());
    CHECK(shape->tp * shape->pp * shape->dp == gpus);
  }
}

TEST_CASE("a plan without weight-update sharding keeps whole optimizer states per replica") {
  // intra_op_only: one stage on the 4 GPUs; the search writes weight_update_sharding = true
  // (states split over the 4 devices). The same plan with the flag off keeps each replica's
  // states whole, split only as its parameters are: states per device = parameter elements
  // per device × Adam's 12 bytes (fp32 master, m, v) = parameter bytes × 12 / 2 at fp16.
  planner::SearchInput in = tiny_input("intra_op_only");
  auto r = planner::search(in);
  REQUIRE(r.ok());
  schema::Plan plan = r.value().plan;
  REQUIRE(plan.stages.size() == 1);
  REQUIRE(plan.stages[0].weight_update_sharding);
  auto split = planner::evaluate_plan(in, plan);
  plan.stages[0].weight_update_sharding = false;
  auto whole = planner::evaluate_plan(in, plan);
  REQUIRE(split.ok());
  REQUIRE(whole.ok());
  const auto& a = split.value().problem.stages.at(0);
  const auto& b = whole.value().problem.stages.at(0);
  CHECK(b.parameter_bytes == a.parameter_bytes);
  CHECK(b.optimizer_state_bytes.value() == b.parameter_bytes.value() * 12 / 2);
  CHECK(b.optimizer_state_bytes.value() > a.optimizer_state_bytes.value());
  CHECK(whole.value().prediction.peak_memory_bytes > split.value().prediction.peak_memory_bytes);
}

TEST_CASE("the searched plan is never slower than the baselines scored the same way") {
  planner::SearchInput in = tiny_input("alpa");
  in.options.compare_baselines = true;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  REQUIRE(r.value().baselines.size() == planner::search_mode_names().size() - 1);
  int compared = 0;
  for (const auto& b : r.value().baselines) {
    CAPTURE(b.mode);
    // The searched plan itself (before any baseline takes over the answer) is never slower
    // than the equal partitions: the seeds run exactly as those baselines do.
    if (b.ok && (b.mode == "equal_layer" || b.mode == "equal_operator")) {
      CHECK(r.value().searched_prediction.iteration_time_s <= b.prediction.iteration_time_s);
      ++compared;
    }
    // One-stage plans may scan sizes the seeds do not: the answer, which a faster baseline
    // priced by the same evaluator takes over, is never slower than any of them.
    if (b.ok && (b.mode == "equal_layer" || b.mode == "equal_operator" ||
                 b.mode == "intra_op_only" || b.mode == "dp_ep")) {
      CHECK(r.value().prediction.iteration_time_s <= b.prediction.iteration_time_s);
    }
  }
  CHECK(compared == 2);
}

TEST_CASE("the equal-partition baseline rows, taken from the seeds' runs, equal those modes run alone") {
  // With baselines the alpa mode's seeds run as the equal_layer / equal_operator baselines
  // do and the baseline rows reuse their answers (Searcher::equal_partition_answers): each row
  // must be what the mode answers on its own.
  planner::SearchInput in = tiny_input("alpa");
  in.options.compare_baselines = true;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  int compared = 0;
  for (const auto& b : r.value().baselines) {
    if (b.mode != "equal_layer" && b.mode != "equal_operator") continue;
    CAPTURE(b.mode);
    planner::SearchInput alone = tiny_input(b.mode);
    auto a = planner::search(alone);
    REQUIRE(a.ok());
    CHECK(b.ok);
    CHECK(b.prediction.iteration_time_s == a.value().prediction.iteration_time_s);
    CHECK(b.prediction.peak_memory_bytes == a.value().prediction.peak_memory_bytes);
    ++compared;
  }
  CHECK(compared == 2);
}

TEST_CASE("the dp_ep baseline row is not planned for a model without experts") {
  planner::SearchInput in = tiny_input("alpa");
  in.options.compare_baselines = true;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  int rows = 0;
  for (const auto& b : r.value().baselines) {
    if (b.mode != "dp_ep") continue;
    ++rows;
    CHECK_FALSE(b.ok);
    CHECK(b.description == "not applicable: the model has no experts");
  }
  CHECK(rows == 1);
  // As a mode of its own it still plans (one stage, data parallel).
  auto alone = planner::search(tiny_input("dp_ep"));
  REQUIRE(alone.ok());
  CHECK(alone.value().prediction.fits);
}

TEST_CASE("MoE: model TFLOP/s x iteration time x GPUs = the model's FLOPs in every mode") {
  // Issue 15 #8: with expert_group_size 0 a token group is the whole microbatch, and the
  // dispatch/combine einsums grow with its square. Counted as model FLOPs they made the
  // prediction's TFLOP/s (the plan's microbatch) disagree with the model's FLOPs (Mixtral
  // 8x7B dp_ep on 64 H100: 523.4 TFLOP/s vs 192.5 from FLOPs / (time x GPUs)).
  ir::TransformerConfig t;
  t.builtin = "mixtral";
  t.num_layers = 2;
  t.hidden_size = 256;
  t.num_heads = 4;
  t.num_kv_heads = 4;
  t.seq_len = 128;
  t.vocab_size = 1024;
  t.ffn_hidden_size = 512;
  t.num_experts = 4;
  t.top_k = 2;
  t.moe_layer_interval = 1;
  t.expert_group_size = 0;
  t.capacity_factor = 1.0;  // capacity = tokens·2/4, exact at every microbatch size
  ir::set_architecture_defaults(t);
  planner::SearchInput base = tiny_input("alpa");
  base.model = ir::ModelConfig{"tiny Mixtral", t};
  // The model's FLOPs, from the graph of one sample (what the model summary counts).
  ir::BuildOptions bo;
  bo.microbatch_size = 1;
  const ir::Graph g =
      ir::derive_training_graph(ir::build_forward_graph(base.model, bo).value(), {});
  const double flops = ir::flops_per_iteration(g, base.global_batch_size).model.value();
  REQUIRE(flops > 0);
  for (const std::string& mode : planner::search_mode_names()) {
    CAPTURE(mode);
    planner::SearchInput in = base;
    in.mode = mode;
    auto r = planner::search(in);
    REQUIRE(r.ok());
    const auto& p = r.value().prediction;
    const double implied = p.model_tflops_per_gpu * 1e12 * p.iteration_time_s * 4;
    CHECK(implied == doctest::Approx(flops).epsilon(1e-9));
  }
}

TEST_CASE("the last pipeline stage holds the tied word embedding and all-reduces its gradient") {
  // Issue 15 #3: the head reads the word-embedding table of layer 0. As in sim/lowering
  // (Megatron), a stage without layer 0 keeps a copy: parameters, gradient and optimizer
  // state, and its gradient is all-reduced with the first stage once per iteration.
  planner::SearchInput in = tiny_input("inter_op_only");  // tp 1, pp > 1
  // The grid's analytic price, which follows Megatron's convention (sim/lowering). Re-scored
  // as a plan file, a data-parallel stage takes alpa-exec's memory walk instead, where the
  // head's stage receives the table and sends its gradient back to the owner.
  in.options.rescore_grid = false;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  const auto& plan = r.value().plan;
  const auto& pb = r.value().problem;
  REQUIRE(plan.stages.size() >= 2);
  REQUIRE(plan.stages.front().layer_begin == 0);
  REQUIRE(plan.stages.back().layer_begin > 0);
  ir::BuildOptions bo;
  bo.microbatch_size = 1;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(in.model, bo).value(), {});
  const auto stats = ir::layer_stats(g);
  std::int64_t table = 0;  // elements of the layer-0 parameters the head reads
  const auto head = static_cast<std::int32_t>(stats.size() - 1);
  for (const ir::Op& op : g.ops()) {
    if (op.kind != ir::OpKind::kParameter || op.layer != 0) continue;
    for (ir::OpId u : g.consumers(op.id)) {
      if (g.op(u).layer == head) {
        table += op.out.num_elements();
        break;
      }
    }
  }
  REQUIRE(table == 1024 * 256);
  std::int64_t own = 0;
  for (auto l = plan.stages.back().layer_begin; l < plan.stages.back().layer_end; ++l) {
    own += stats[static_cast<std::size_t>(l)].parameters;
  }
  const std::int64_t wb = 2;  // fp16
  const auto& last = pb.stages.back();
  CHECK(last.parameter_bytes.value() == (own + table) * wb);
  CHECK(last.gradient_bytes.value() == (own + table) * wb);
  // Adam, fp16: fp32 master + two moments = 12 bytes per parameter.
  CHECK(last.optimizer_state_bytes.value() == (own + table) * 12);
  // The gradient all-reduce of the copy (each device with its peer on the first stage)
  // adds to the data-parallel gradient sync of the first and the last stage.
  const auto& first_ids = plan.stages.front().device_ids;
  const auto& last_ids = plan.stages.back().device_ids;
  std::vector<std::vector<std::int64_t>> pairs;
  for (std::size_t i = 0; i < first_ids.size(); ++i) pairs.push_back({first_ids[i], last_ids[i]});
  const auto pair_info = in.cost->concurrent_groups(pairs).value().front();
  const double tied_s =
      in.cost->collective(cost_model::Collective::kAllReduce, core::bytes(table * wb), pair_info).time.value();
  REQUIRE(tied_s > 0);
  if (first_ids.size() > 1) {  // dp > 1: the sync is the stage's grad_sync_s
    for (std::size_t j : {std::size_t{0}, pb.stages.size() - 1}) {
      const auto& st = pb.stages[j];
      const std::vector<std::vector<std::int64_t>> dp_group = {plan.stages[j].device_ids};
      const auto dp_info = in.cost->concurrent_groups(dp_group).value().front();
      const double own_s =
          in.cost->collective(cost_model::Collective::kAllReduce, st.grad_sync_bytes, dp_info).time.value();
      REQUIRE(st.grad_sync_s.has_value());
      CHECK(st.grad_sync_s->value() == doctest::Approx(own_s + tied_s).epsilon(1e-12));
    }
  }
}

TEST_CASE("an impossible memory budget names the memory it would need") {
  planner::SearchInput in = tiny_input("alpa");
  in.options.memory_limit = core::bytes(1 << 20);  // 1 MiB per GPU
  auto r = planner::search(in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == core::StatusCode::kResourceExhausted);
  const std::string m = r.status().message();
  CHECK(m.find("no plan fits in 1.00 MiB per GPU; the smallest plan found needs ") == 0);
}

// The byte counts of "... (N bytes) ..." in an error message, in order.
std::vector<std::int64_t> byte_counts(const std::string& m) {
  std::vector<std::int64_t> out;
  for (std::size_t at = m.find(" bytes)"); at != std::string::npos; at = m.find(" bytes)", at + 1)) {
    const std::size_t open = m.rfind('(', at);
    out.push_back(std::stoll(m.substr(open + 1, at - open - 1)));
  }
  return out;
}

TEST_CASE("a mode that cannot fit says so with its own smallest plan, and names a mode that fits") {
  // Data parallelism replicates every weight: on 4 GPUs its smallest plan needs more than
  // the Megatron grid's (tensor and pipeline parallelism divide the weights). The message
  // used to print the smaller of the two as "the smallest plan found", a figure that fits.
  planner::SearchInput in = tiny_input("data_parallel");
  in.options.memory_limit = core::bytes(1 << 20);  // 1 MiB: nothing fits
  // The message's figure for mode megatron is its grid's; its exploration (the distributed
  // optimizer among the flags) can answer with less (docs/search.md).
  in.options.explore_megatron_parallelism = false;
  auto r = planner::search(in);
  REQUIRE_FALSE(r.ok());
  std::vector<std::int64_t> needs = byte_counts(r.status().message());
  REQUIRE_MESSAGE(needs.size() == 2, r.status().message());
  const std::int64_t dp_need = needs[0];
  CHECK(needs[1] < dp_need);  // the grid's least-memory figure, named as the grid's
  CHECK(r.status().message().find("; mode megatron has one that needs ") != std::string::npos);
  CHECK(r.status().message().find("fits,") == std::string::npos);

  // One byte less than data parallelism needs: it still cannot fit; the message names a
  // mode whose search answers with a fitting plan under the same limit, with that plan's
  // memory.
  in.options.memory_limit = core::bytes(dp_need - 1);
  r = planner::search(in);
  REQUIRE_FALSE(r.ok());
  const std::string m = r.status().message();
  needs = byte_counts(m);
  REQUIRE_MESSAGE(needs.size() == 2, m);
  CHECK(needs[0] == dp_need);
  const std::string quote = "(search.mode \"";
  const std::size_t named = m.find(quote);
  REQUIRE_MESSAGE(named != std::string::npos, m);
  const std::size_t begin = named + quote.size();
  in.mode = m.substr(begin, m.find('"', begin) - begin);
  const auto fits = planner::search(in);
  REQUIRE_MESSAGE(fits.ok(), fits.status().message());
  CHECK(fits.value().prediction.fits);
  CHECK(fits.value().prediction.peak_memory_bytes == needs[1]);
  CHECK(needs[1] <= dp_need - 1);

  // With exactly its own figure, data parallelism fits.
  in.mode = "data_parallel";
  in.options.memory_limit = core::bytes(dp_need);
  const auto dp = planner::search(in);
  REQUIRE_MESSAGE(dp.ok(), dp.status().message());
  CHECK(dp.value().prediction.peak_memory_bytes <= dp_need);
}

TEST_CASE("the search prices sliding-window layers apart from full-attention layers") {
  // Two blocks at 1,024 tokens with fused attention; a window of 128 keys on every layer,
  // on every 2nd layer (block 0 slides, block 1 attends to all keys), or on none. Block 1
  // of the alternating model costs what the full model's blocks cost and block 0 what the
  // sliding model's do: if the two blocks were one structural class (priced once), the
  // alternating model would cost as one of the others.
  auto time_of = [](std::int64_t window, std::int64_t pattern) {
    planner::SearchInput in = tiny_input("intra_op_only");
    in.model = ir::gpt_model_config("sliding", 2, 256, 4, 1024, 1024);
    auto& t = std::get<ir::TransformerConfig>(in.model.spec);
    t.fused_attention = true;
    t.sliding_window = window;
    t.sliding_window_pattern = pattern;
    in.options.microbatch_sizes = {2};
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return r.value().prediction.iteration_time_s;
  };
  const double every = time_of(128, 0), alternating = time_of(128, 2), none = time_of(0, 0);
  CHECK(every < alternating);
  CHECK(alternating < none);
}

TEST_CASE("the cluster's reserved memory is out of every plan's reach") {
  planner::SearchInput in = tiny_input("alpa");
  in.cluster.reserved_memory = core::bytes(0);
  const auto full = planner::search(in);
  REQUIRE(full.ok());
  const std::int64_t peak = full.value().prediction.peak_memory_bytes;
  const core::Bytes capacity = in.cluster.gpu.memory;
  REQUIRE(peak > 0);

  // One byte less than that plan needs: the search must answer with a plan that needs less.
  in.cluster.reserved_memory = capacity - core::bytes(peak) + core::bytes(1);
  const auto tighter = planner::search(in);
  REQUIRE(tighter.ok());
  CHECK(tighter.value().prediction.fits);
  CHECK(tighter.value().prediction.peak_memory_bytes <= peak - 1);

  // Far less than any plan needs: the error names the reserve.
  in.cluster.reserved_memory = capacity - core::mib(1);
  const auto none = planner::search(in);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message().find("no plan fits in 1.00 MiB per GPU (16.00 GiB less the ") == 0);
  CHECK(none.status().message().find(" reserved for the runtime, cluster.reserved_memory_gib)") !=
        std::string::npos);
}

TEST_CASE("a baseline faster than the searched plan is pointed out") {
  planner::SearchResult r;
  r.prediction.iteration_time_s = 10.0;
  r.prediction.fits = true;
  r.searched_prediction = r.prediction;
  auto row = [](const std::string& mode, double t, bool fits, bool by_evaluator) {
    planner::BaselineRow b;
    b.mode = mode;
    b.ok = fits;
    b.prediction.iteration_time_s = t;
    b.prediction.fits = fits;
    b.by_evaluator = by_evaluator;
    return b;
  };
  r.baselines = {row("megatron", 10.5, true, true), row("zero3", 12.0, true, false)};
  CHECK(planner::faster_baseline_note(r).empty());
  r.baselines.push_back(row("equal_layer", 9.5, true, true));
  r.baselines.push_back(row("data_parallel", 8.0, false, true));  // does not fit: not an answer
  r.baselines.push_back(row("zero2", 9.0, true, false));
  CHECK(planner::faster_baseline_note(r) ==
        "note: the zero2 baseline (9.000 s) is 10.0 % faster than the searched plan "
        "(10.000 s): the search space does not contain its plan; \"search\": {\"mode\": "
        "\"zero2\"} plans it (its price is analytic, not the evaluator's)\n");
  // A baseline that is the answer (the search answered with it): said so.
  r.baselines.push_back(row("megatron", 8.5, true, true));
  r.answered_by = "megatron";
  r.prediction = r.baselines.back().prediction;
  CHECK(planner::faster_baseline_note(r) ==
        "note: the megatron baseline (8.500 s) is 15.0 % faster than the searched plan (10.000 s) "
        "under the same evaluator: its plan is the answer (the prediction above, plan.json)\n");
  // A row faster than the answer is pointed out after it.
  r.baselines.push_back(row("dp_ep", 8.0, true, false));
  CHECK(planner::faster_baseline_note(r) ==
        "note: the megatron baseline (8.500 s) is 15.0 % faster than the searched plan (10.000 s) "
        "under the same evaluator: its plan is the answer (the prediction above, plan.json)\n"
        "note: the dp_ep baseline (8.000 s) is 5.9 % faster than the answer (8.500 s): the search space "
        "does not contain its plan; \"search\": {\"mode\": \"dp_ep\"} plans it (its price is analytic, "
        "not the evaluator's)\n");
  const std::string table = planner::format_comparison(r);
  CHECK(table.find("searched        10.000 s") != std::string::npos);
  CHECK(table.find("(not the answer: the megatron baseline is faster)") != std::string::npos);
  CHECK(table.find("  <- the answer") != std::string::npos);
}

TEST_CASE("bad inputs are reported") {
  planner::SearchInput in = tiny_input("fastest");
  auto r = planner::search(in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "search.mode: expected one of alpa, megatron, data_parallel, zero2, zero3, "
        "inter_op_only, intra_op_only, equal_layer, equal_operator, dp_ep, got \"fastest\"");
  in = tiny_input("alpa");
  in.num_microbatches = 3;
  r = planner::search(in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "training.num_microbatches: expected a divisor of the global batch 16, got 3");
}

namespace {

// 4 uniform stages, B = 8 microbatches, forward 3 ms, backward 5 ms, 1F1B, no links: the
// closed-form cases of the pipeline bounds.
sim::UniformPipelineSpec four_uniform_stages() {
  sim::UniformPipelineSpec spec;
  spec.num_stages = 4;
  spec.num_microbatches = 8;
  spec.stage.forward_s = core::seconds(0.003);
  spec.stage.backward_s = core::seconds(0.005);
  return spec;
}

// `spec` run with `schedule` (interleaved: 2 chunks), a recomputation, and 64 MiB sends over
// 10 GB/s links: a bound must stay below the simulation of each.
sim::PipelineProblem with_links(sim::UniformPipelineSpec spec, sim::PipelineSchedule schedule) {
  spec.schedule = schedule;
  spec.interleave = schedule == sim::PipelineSchedule::kInterleaved1F1B ? 2 : 1;
  spec.stage.recompute_s = core::seconds(0.001);
  spec.stage.output_activation_bytes = core::bytes(64 << 20);
  spec.p2p_bandwidth = core::gbyte_per_s(10);
  spec.p2p_latency = core::seconds(1e-5);
  return sim::make_uniform_problem(spec);
}

constexpr sim::PipelineSchedule kAllSchedules[] = {sim::PipelineSchedule::kOneFOneB, sim::PipelineSchedule::kGPipe,
                                                   sim::PipelineSchedule::kInterleaved1F1B};

}  // namespace

TEST_CASE("the pipeline lower bound is exact without communication and below the simulation") {
  // p uniform stages, forward f = 3 ms, backward b = 5 ms, optimizer step 2 ms, no links,
  // 1F1B, B = 8: the last stage starts after (p-1)·f, runs B·(f+b), and microbatch B-1's
  // backward then crosses p-1 stages before stage 0's step:
  // (p-1)·f + B·(f+b) + (p-1)·b + opt = (B+p-1)·(f+b) + opt; p = 4: 11·8 + 2 = 90 ms.
  sim::UniformPipelineSpec spec = four_uniform_stages();
  spec.stage.optimizer_step_s = core::seconds(0.002);
  const sim::PipelineProblem pb = sim::make_uniform_problem(spec);
  const auto bound = planner::pipeline_lower_bound(pb);
  REQUIRE(bound.ok());
  CHECK(bound.value() == 90'000'000);
  const auto simulated = sim::simulate_pipeline(pb);
  REQUIRE(simulated.ok());
  CHECK(sim::to_time(simulated.value().report.iteration_time) == bound.value());
  // With links, recomputation, GPipe and interleaving the bound stays below the simulation.
  for (const auto schedule : kAllSchedules) {
    CAPTURE(static_cast<int>(schedule));
    const sim::PipelineProblem q = with_links(spec, schedule);
    const auto b = planner::pipeline_lower_bound(q);
    const auto s = sim::simulate_pipeline(q);
    REQUIRE(b.ok());
    REQUIRE(s.ok());
    CHECK(b.value() > 0);
    CHECK(b.value() <= sim::to_time(s.value().report.iteration_time));
  }
}

TEST_CASE("the peak-memory bound is exact for 1F1B stages and never above the simulation") {
  // 1F1B, p = 4 uniform stages, B = 8, static 1000 B, stored 100 B per microbatch, backward
  // working 30 B, forward working 50 B. Stage s holds p - s microbatches' activations when
  // its first backward starts: stage 0 peaks at 1000 + 4·100 + 50 = 1450 B (its 4th
  // forward's working bytes exceed the backward's), stage 3 at 1000 + 100 + 50 = 1150 B.
  sim::UniformPipelineSpec spec = four_uniform_stages();
  spec.stage.parameter_bytes = core::bytes(600);
  spec.stage.gradient_bytes = core::bytes(100);
  spec.stage.optimizer_state_bytes = core::bytes(300);
  spec.stage.stored_activation_bytes = core::bytes(100);
  spec.stage.working_activation_bytes = core::bytes(30);
  spec.stage.forward_working_activation_bytes = core::bytes(50);
  const sim::PipelineProblem pb = sim::make_uniform_problem(spec);
  const auto bound = planner::peak_memory_lower_bound(pb);
  REQUIRE(bound.ok());
  CHECK(bound.value() == std::vector<std::int64_t>{1450, 1350, 1250, 1150});
  const auto simulated = sim::simulate_pipeline(pb);
  REQUIRE(simulated.ok());
  for (std::size_t d = 0; d < 4; ++d) {
    CHECK(simulated.value().report.devices[d].peak_memory_bytes == bound.value()[d]);
  }
  // A limit of 1449 B: stage 0 cannot fit, and the simulation agrees; 1450 B fits.
  sim::PipelineProblem limited = pb;
  for (auto& mesh : limited.meshes) mesh.memory_limit = core::bytes(1449);
  CHECK(planner::cannot_fit(limited).value());
  CHECK_FALSE(sim::simulate_pipeline(limited).value().report.overflows.empty());
  for (auto& mesh : limited.meshes) mesh.memory_limit = core::bytes(1450);
  CHECK_FALSE(planner::cannot_fit(limited).value());
  CHECK(sim::simulate_pipeline(limited).value().report.overflows.empty());
  // Uneven stages, links, recomputation, GPipe and interleaving: never above the simulation.
  for (const auto schedule : kAllSchedules) {
    CAPTURE(static_cast<int>(schedule));
    sim::PipelineProblem q = with_links(spec, schedule);
    for (std::size_t vs = 0; vs < q.stages.size(); ++vs) {
      const auto k = static_cast<std::int64_t>(vs);
      q.stages[vs].stored_activation_bytes = core::bytes(100 + 37 * k);
      q.stages[vs].working_activation_bytes = core::bytes(200 - 11 * k);
      q.stages[vs].forward_working_activation_bytes = core::bytes(k % 3 == 0 ? 0 : 90);
    }
    const auto b = planner::peak_memory_lower_bound(q);
    const auto s = sim::simulate_pipeline(q);
    REQUIRE(b.ok());
    REQUIRE(s.ok());
    for (std::size_t d = 0; d < q.meshes.size(); ++d) {
      CAPTURE(d);
      CHECK(b.value()[d] > 1000);
      CHECK(b.value()[d] <= s.value().report.devices[d].peak_memory_bytes);
    }
  }
}

TEST_CASE("the pruned Megatron grid chooses the same plan as simulating every grid point") {
  // Bound-and-prune is exact: same plan bytes and prediction with and without it, over
  // the grid baselines, cluster sizes, batches and a memory budget that rules plans out.
  struct Case { std::string mode; std::int64_t nodes, gpn, batch; std::int64_t limit_mib; };
  const std::vector<Case> cases = {
      {"megatron", 1, 4, 16, 0},      {"megatron", 1, 8, 64, 0},  {"megatron", 2, 8, 32, 0},
      {"megatron", 2, 8, 128, 0},     {"zero2", 1, 8, 32, 0},     {"zero3", 1, 8, 32, 0},
      {"inter_op_only", 1, 8, 32, 0}, {"data_parallel", 1, 8, 32, 0},
      {"megatron", 1, 8, 64, 96}};
  for (const Case& c : cases) {
    CAPTURE(c.mode);
    CAPTURE(c.nodes);
    CAPTURE(c.gpn);
    CAPTURE(c.batch);
    planner::SearchInput in = tiny_input(c.mode);
    in.model = tiny_gpt(4);
    in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", c.nodes).value();
    in.cluster.gpus_per_node = c.gpn;
    price_with_shipped_p3(in);
    in.global_batch_size = c.batch;
    if (c.limit_mib > 0) in.options.memory_limit = core::bytes(c.limit_mib << 20);
    auto pruned = planner::search(in);
    in.options.prune_grid = false;
    auto full = planner::search(in);
    REQUIRE(pruned.ok() == full.ok());
    if (!pruned.ok()) {
      CHECK(pruned.status().message() == full.status().message());
      continue;
    }
    CHECK(schema::plan_to_json(pruned.value().plan).dump() ==
          schema::plan_to_json(full.value().plan).dump());
    CHECK(pruned.value().prediction.iteration_time_s == full.value().prediction.iteration_time_s);
    CHECK(pruned.value().prediction.peak_memory_bytes == full.value().prediction.peak_memory_bytes);
    CHECK(pruned.value().explanation == full.value().explanation);
  }
}

TEST_CASE("the zero2 baseline reduce-scatters every microbatch's gradients in its backward, not once per "
          "iteration") {
  // DeepSpeed's stage 2 keeps only its partition of the gradients, so it reduces each
  // microbatch's (DeepSpeed #2252). On 8 GPUs, 4 microbatches of 1, no recomputation: the
  // backward's communication (tp = 1: no tensor-parallel collectives) is a reduce-scatter
  // of every layer's gradients over the 8 GPUs, priced here from the layers' parameters;
  // after the last backward no gradient collective runs, only the weights' all-gather.
  auto run = [](const std::string& mode) {
    planner::SearchInput in = tiny_input(mode);
    in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
    price_with_shipped_p3(in);
    in.global_batch_size = 32;
    in.num_microbatches = 4;
    in.options.recompute = {schema::Recompute::kNone};
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    REQUIRE(r->problem.stages.size() == 1);
    return std::move(r).value();
  };
  const planner::SearchResult zero = run("zero2"), dp = run("data_parallel");
  const sim::StageCosts& z = zero.problem.stages[0];
  const sim::StageCosts& d = dp.problem.stages[0];
  const planner::SearchInput in = [] {
    planner::SearchInput i = tiny_input("zero2");
    i.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
    price_with_shipped_p3(i);
    return i;
  }();
  ir::BuildOptions bo;
  bo.microbatch_size = 1;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(in.model, bo).value(), {});
  const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const cluster::GroupInfo group = in.cost->group(all).value();
  double reduce_scatters = 0;
  for (const ir::LayerStats& layer : ir::layer_stats(g)) {
    if (layer.parameters == 0) continue;
    reduce_scatters += in.cost->collective(cost_model::Collective::kReduceScatter,
                                           core::bytes(layer.parameters * core::dtype_bytes(in.dtype)), group)
                           .time.value();
  }
  CHECK(reduce_scatters > 0);
  CHECK(z.backward_tp_comm_s.value() == doctest::Approx(reduce_scatters).epsilon(1e-9));
  REQUIRE(d.grad_sync_s.has_value());
  CHECK(d.grad_sync_s->value() > 0);  // data parallelism all-reduces once per iteration
  REQUIRE(z.grad_sync_s.has_value());
  CHECK(z.grad_sync_s->value() == 0.0);
  REQUIRE(z.param_all_gather_s.has_value());
  CHECK(z.param_all_gather_s->value() > 0);  // ZeRO-2 gathers the updated weights
  // ZeRO-3 keeps the weights partitioned after the step (it gathers each layer's in its
  // forward and backward): no all-gather follows it.
  const planner::SearchResult three = run("zero3");
  REQUIRE(three.problem.stages[0].param_all_gather_s.has_value());
  CHECK(three.problem.stages[0].param_all_gather_s->value() == 0.0);
  CHECK(three.problem.stages[0].grad_sync_s->value() == 0.0);
}

TEST_CASE("per_layer_compute equals layer_range_compute of every layer, bit for bit") {
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  const ir::Graph fwd = ir::build_forward_graph(tiny_gpt(3), bo).value();
  ir::TrainingOptions to;
  to.recompute = ir::RecomputePolicy::kFull;
  const ir::Graph g = ir::derive_training_graph(fwd, to);
  const planner::SearchInput in = tiny_input("alpa");
  for (const std::int64_t devices : {1, 2, 4}) {
    CAPTURE(devices);
    const auto all = planner::adapters::per_layer_compute(g, devices, *in.cost);
    REQUIRE(static_cast<std::int32_t>(all.size()) == g.num_layers());
    for (std::int32_t l = 0; l < g.num_layers(); ++l) {
      CAPTURE(l);
      const auto one = planner::adapters::layer_range_compute(g, l, l + 1, devices, *in.cost);
      const auto& a = all[static_cast<std::size_t>(l)];
      CHECK(a.forward.value() == one.forward.value());
      CHECK(a.backward.value() == one.backward.value());
      CHECK(a.recompute.value() == one.recompute.value());
      CHECK(a.optimizer.value() == one.optimizer.value());
      CHECK(one.forward.value() > 0);
    }
  }
}

TEST_CASE("lower-bound skips of points and equal partitions never change a plan for the worse") {
  // prune_points = false evaluates every point and partition. Equal-partition modes must
  // return the same bytes (their skips are exact when the iteration time is unimodal in the
  // microbatch size, as on these cases; otherwise a skip can only extend the size scan,
  // run_equal); mode alpa may reach more points when a point is skipped (docs/search.md),
  // so it must be at least as fast.
  // limit_percent > 0: a memory limit at that share of the best unlimited plan's peak, so
  // that plans are skipped as unable to fit (cannot_fit) as well.
  struct Case { std::int64_t gpn; std::int64_t batch; int limit_percent; };
  for (const Case c : {Case{2, 16, 0}, Case{4, 16, 0}, Case{2, 16, 90}}) {
    for (const std::string mode : {"alpa", "equal_layer", "equal_operator"}) {
      CAPTURE(c.gpn);
      CAPTURE(mode);
      planner::SearchInput in = tiny_input(mode);
      in.model = tiny_gpt(4);
      in.cluster.gpus_per_node = c.gpn;
      price_with_shipped_p3(in);
      in.global_batch_size = c.batch;
      in.options.microbatch_sizes = {1, 2, 4, 8};
      // 4 GPUs: recompute none only (the full-recompute layer graphs need the ILP on 2x2:
      // seconds); 2 GPUs: both, so a full-recompute point is skipped by its bound.
      if (c.gpn == 4) in.options.recompute = {schema::Recompute::kNone};
      if (c.limit_percent > 0) {
        auto unlimited = planner::search(in);
        REQUIRE(unlimited.ok());
        in.options.memory_limit =
            core::bytes(unlimited.value().prediction.peak_memory_bytes * c.limit_percent / 100);
      }
      CAPTURE(c.limit_percent);
      auto pruned = planner::search(in);
      in.options.prune_points = false;
      auto full = planner::search(in);
      REQUIRE(pruned.ok());
      REQUIRE(full.ok());
      if (mode == "alpa") {
        CHECK(pruned.value().prediction.iteration_time_s <= full.value().prediction.iteration_time_s);
        // On 2 GPUs the full-recompute points' compute alone exceeds the best plan's time.
        bool skipped = false;
        for (const auto& line : pruned.value().explanation) {
          skipped = skipped || line.find("skipped by lower bounds: ") == 0;
        }
        if (c.limit_percent == 0) CHECK(skipped == (c.gpn == 2));
      } else {
        CHECK(schema::plan_to_json(pruned.value().plan).dump() ==
              schema::plan_to_json(full.value().plan).dump());
        CHECK(pruned.value().prediction.iteration_time_s == full.value().prediction.iteration_time_s);
      }
    }
  }
}

// Per size, the search's answer when that size is the only one (infinitely slow where no
// plan fits); the scan over all `sizes` must answer with the fastest of them up to the first
// size slower than the one before (unimodality, run_equal) and solve exactly what the scan
// over that prefix solves: nothing at the sizes past it. Returns the first slower size's
// answer alone, so a caller can say which kind of "slower" it exercised.
double check_size_scan_stops_at_first_slower(planner::SearchInput in, const std::vector<std::int64_t>& sizes) {
  std::vector<double> alone_s;
  for (std::int64_t m : sizes) {
    in.options.microbatch_sizes = {m};
    auto r = planner::search(in);
    REQUIRE((r.ok() || r.status().code() == core::StatusCode::kResourceExhausted));
    alone_s.push_back(r.ok() ? r.value().prediction.iteration_time_s : std::numeric_limits<double>::infinity());
  }
  std::size_t stop = 1;  // index of the first size slower than the one before
  while (stop < sizes.size() && alone_s[stop] <= alone_s[stop - 1]) ++stop;
  std::string times;
  for (double t : alone_s) times += std::to_string(t) + " ";
  INFO("each size alone, s: " << times);
  // Not vacuous: the scan stops before the last size.
  REQUIRE(stop < sizes.size() - 1);
  in.options.microbatch_sizes = sizes;
  auto scanned = planner::search(in);
  in.options.microbatch_sizes.assign(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(stop) + 1);
  auto prefix = planner::search(in);
  REQUIRE(scanned.ok());
  REQUIRE(prefix.ok());
  const double fastest = *std::min_element(alone_s.begin(), alone_s.begin() + static_cast<std::ptrdiff_t>(stop));
  CHECK(scanned.value().prediction.iteration_time_s == fastest);
  CHECK(scanned.value().intra_op_solves == prefix.value().intra_op_solves);
  CHECK(schema::plan_to_json(scanned.value().plan).dump() == schema::plan_to_json(prefix.value().plan).dump());
  return alone_s[stop];
}

planner::SearchInput tiny_equal_layer_scan_input(std::int64_t global_batch_size) {
  planner::SearchInput in = tiny_input("equal_layer");
  in.model = tiny_gpt(4);
  in.cluster.gpus_per_node = 2;
  price_with_shipped_p3(in);
  in.global_batch_size = global_batch_size;
  in.options.recompute = {schema::Recompute::kNone};
  return in;
}

TEST_CASE("an equal-partition baseline scans microbatch sizes up to the first slower one, as the alpa mode does") {
  // Larger microbatches are faster on this tiny model until memory runs out: a limit at
  // the size-4 answer's peak makes a larger size slower (no plan fits: infinitely slow).
  planner::SearchInput in = tiny_equal_layer_scan_input(32);
  in.options.microbatch_sizes = {4};
  auto at4 = planner::search(in);
  REQUIRE(at4.ok());
  in.options.memory_limit = core::bytes(at4.value().prediction.peak_memory_bytes);
  CHECK(std::isinf(check_size_scan_stops_at_first_slower(in, {1, 2, 4, 8, 16})));
}

TEST_CASE("the size scan also stops at a size that fits but is slower than the one before") {
  // The case the memory limit above does not reach: without a limit every size fits, and the
  // pipeline's bubble grows as fewer, larger microbatches fill it, so a size is slower than
  // the one before while fitting.
  planner::SearchInput in = tiny_equal_layer_scan_input(16);
  // Large GEMMs (hidden 2,048, 1,024 tokens): their efficiency saturates with the
  // microbatch size while the pipeline's bubble keeps growing.
  in.model = ir::gpt_model_config("mid GPT", 4, 2048, 16, 1024, 8192);
  CHECK(std::isfinite(check_size_scan_stops_at_first_slower(in, {1, 2, 4, 8, 16})));
}

TEST_CASE("the time limit covers the whole search: past it no point, seed or baseline starts, and the output says so") {
  // time_limit_s = 0: the first (microbatch, recompute) point always answers (its solves
  // under a 1 ms hard limit, its candidates until one fits); then the clock has run out, so
  // no further point, no equal-partition seed (not even at the explored point) and no
  // baseline starts (issue 18 #8: before, the seeds and all baselines ignored the limit).
  planner::SearchInput in = tiny_input("alpa");
  in.model = tiny_gpt(4);
  in.options.microbatch_sizes = {1, 2, 4, 8};
  in.options.time_limit_s = 0;
  in.options.compare_baselines = true;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  int clock_lines = 0;
  for (const auto& line : r.value().explanation) {
    clock_lines += line.rfind("stopped by the wall clock: ", 0) == 0;
  }
  // The point loop, the seeds and the baselines; and, depending on the machine's speed,
  // lines for solves or candidates of the first point cut at the limit.
  CHECK(clock_lines >= 3);
  CHECK(std::find(r.value().explanation.begin(), r.value().explanation.end(),
                  "stopped by the wall clock: the equal-partition seeds were cut at the time limit "
                  "(0.000 s)") != r.value().explanation.end());
  CHECK(std::find(r.value().explanation.begin(), r.value().explanation.end(),
                  "stopped by the wall clock: time limit 0.000 s reached after 1 (microbatch, "
                  "recompute) points") != r.value().explanation.end());
  for (const auto& b : r.value().baselines) {
    CAPTURE(b.mode);
    if (b.mode == "dp_ep") continue;  // not applicable without experts
    CHECK_FALSE(b.ok);
    CHECK(b.description == "skipped: the search's time limit (0.000 s) was reached");
  }
}

TEST_CASE("a baseline the one evaluator prices faster than the searched plan is the answer") {
  // Issue 15 ("a best-of answer"): with a one-point budget the search explores microbatch 2
  // only, while the equal-partition baselines try every point. The default scenario of the
  // README (GPT-3 2.6B on 8 V100) would answer 37.432 s with max_points 1 (equal_layer: 36.143 s).
  planner::SearchInput in = tiny_input("alpa");
  in.options.compare_baselines = true;
  in.options.microbatch_sizes = {1, 2, 4, 8};
  in.options.max_points = 1;
  auto r = planner::search(in);
  REQUIRE(r.ok());
  const planner::SearchResult& res = r.value();
  const planner::BaselineRow* fastest = nullptr;
  for (const auto& b : res.baselines) {
    if (b.ok && b.by_evaluator && (fastest == nullptr || b.prediction.iteration_time_s < fastest->prediction.iteration_time_s)) {
      fastest = &b;
    }
  }
  REQUIRE(fastest != nullptr);
  REQUIRE_MESSAGE(fastest->prediction.iteration_time_s < res.searched_prediction.iteration_time_s,
                  "the budget no longer makes a baseline win: pick another case");
  CHECK(res.answered_by == fastest->mode);
  CHECK(res.prediction.iteration_time_s == fastest->prediction.iteration_time_s);
  CHECK(res.prediction.iteration_time_s < res.searched_prediction.iteration_time_s);
  bool said = false;
  for (const auto& line : res.explanation) said = said || line.rfind("answer: the " + fastest->mode + " baseline", 0) == 0;
  CHECK(said);
  // The answer's plan file reproduces the answer.
  auto again = planner::evaluate_plan(in, res.plan);
  REQUIRE(again.ok());
  CHECK(again.value().prediction.iteration_time_s == res.prediction.iteration_time_s);
  CHECK(again.value().prediction.peak_memory_bytes == res.prediction.peak_memory_bytes);
  // Without the budget the answer is at least as fast, and it is the fastest of the searched
  // plan and the baselines the evaluator priced. (On this 4-GPU toy the full search's own
  // plan, 4 stages of one GPU, loses to a baseline grid here too.)
  in.options.max_points = 0;
  auto full = planner::search(in);
  REQUIRE(full.ok());
  CHECK(full.value().prediction.iteration_time_s <= res.prediction.iteration_time_s);
  REQUIRE_FALSE(full.value().answered_by.empty());
  const planner::BaselineRow* best = nullptr;
  for (const auto& b : full.value().baselines) {
    if (b.ok && b.by_evaluator && (best == nullptr || b.prediction.iteration_time_s < best->prediction.iteration_time_s)) {
      best = &b;
    }
  }
  REQUIRE(best != nullptr);
  CHECK(full.value().answered_by == best->mode);
  CHECK(full.value().prediction.iteration_time_s == best->prediction.iteration_time_s);
  CHECK(best->prediction.iteration_time_s < full.value().searched_prediction.iteration_time_s);
}

TEST_CASE("tensor parallelism may span the trays of one NVLink domain (GB200 NVL72)") {
  // Issue 16: on 4-GPU GB200 trays an 8-way model axis stays on NVLink when the trays share
  // a rack's NVLink domain. One large layer and one sequence per iteration (one microbatch:
  // a pipeline only idles) make tp = 8 on 2 trays the Megatron grid's best point; while tp
  // stopped at a node the grid could only answer tp 4 x pp 2, twice as slow.
  planner::SearchInput in;
  in.model = ir::gpt_model_config("one-layer", 1, 8192, 64, 2048, 51200);
  in.cluster = cluster::make_preset_cluster("gb200-nvl72", 2).value();
  auto price = [&]() {
    in.cost = cost_model::CostModel::create(in.cluster,
                                            cost_model::params_for_preset(shipped(), "gb200-nvl72").value())
                  .value();
  };
  price();
  in.global_batch_size = 1;
  in.dtype = core::DType::kBf16;
  in.mode = "megatron";
  in.options.compare_baselines = false;
  REQUIRE(in.cluster.nvlink_domain_gpus() == 8);
  auto wide = planner::search(in);
  REQUIRE_MESSAGE(wide.ok(), wide.status().message());
  const auto shape = schema::megatron_shape(wide.value().plan);
  REQUIRE(shape.has_value());  // an 8-wide model axis over 2 trays still reads as tp
  CHECK(shape->tp == 8);
  CHECK(shape->pp == 1);
  // One-tray NVLink domains: the trays meet over InfiniBand, no model axis wider than 4.
  in.cluster.nvlink_domain_nodes = 1;
  price();
  auto narrow = planner::search(in);
  REQUIRE_MESSAGE(narrow.ok(), narrow.status().message());
  const auto narrow_shape = schema::megatron_shape(narrow.value().plan);
  REQUIRE(narrow_shape.has_value());
  CHECK(narrow_shape->tp == 4);
  CHECK(wide.value().prediction.iteration_time_s < narrow.value().prediction.iteration_time_s);
}

TEST_CASE("max_points is a deterministic work budget") {
  planner::SearchInput in = tiny_input("alpa");
  in.model = tiny_gpt(4);
  in.options.microbatch_sizes = {1, 2, 4, 8};
  in.options.compare_baselines = false;
  in.options.prune_points = false;  // every point counts, so the budget is what stops it
  in.options.max_points = 2;
  auto a = planner::search(in);
  auto b = planner::search(in);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(std::find(a.value().explanation.begin(), a.value().explanation.end(),
                  "work budget: max_points 2 (microbatch, recompute) points explored") !=
        a.value().explanation.end());
  CHECK(schema::plan_to_json(a.value().plan).dump() == schema::plan_to_json(b.value().plan).dump());
  // The same search without the budget explores more points.
  in.options.max_points = 0;
  auto c = planner::search(in);
  REQUIRE(c.ok());
  CHECK(c.value().explanation.front() == a.value().explanation.front());  // same mode line
  CHECK(c.value().explanation != a.value().explanation);
}

TEST_CASE("a plan is priced by the layouts it writes, not by the search's own") {
  // intra_op_only: one stage on the 4 GPUs. Its first block's first forward matmul gets
  // another of its strategies' layouts in the plan file; evaluate_plan must price that
  // layout (before: any layouts other than the search's were priced as the search's
  // variant 0, so two different edits gave the same time).
  const auto run = intra_op_only_plan();
  const schema::PlanStage& stage = run->stage();
  const ir::Graph& g = run->graph;
  const planner::intra_op::LogicalMesh mesh{stage.logical_rows, stage.logical_cols};
  REQUIRE(mesh.num_devices() == 4);
  // The first block's graph as the search solved it (variant 1: with weight updates).
  std::vector<ir::OpId> ops;
  auto layer = planner::adapters::layer_range_graph(g, 1, 2, &ops, true);
  REQUIRE(layer.ok());
  int node = -1;
  for (std::size_t v = 0; v < ops.size() && node < 0; ++v) {
    const ir::Op& op = g.op(ops[v]);
    if (op.layer == 1 && op.phase == ir::Phase::kForward && op.is_matmul() &&
        run->sharding_of.count(op.name) != 0) {
      node = static_cast<int>(v);
    }
  }
  REQUIRE(node >= 0);
  const std::string name = g.op(ops[static_cast<std::size_t>(node)]).name;
  CAPTURE(name);
  auto hook = planner::adapters::make_collective_hook(
      *run->in.cost, {stage.submesh_nodes, stage.submesh_gpus_per_node}, mesh);
  REQUIRE(hook.ok());
  planner::intra_op::CostHooks hooks;
  hooks.collective = hook.value();
  const auto strategies = planner::intra_op::enumerate_strategies(layer.value(), node, mesh, hooks);
  const schema::OperatorSharding& chosen = *run->sharding_of.at(name);
  // Two other layouts of the matmul with different communication.
  std::vector<const planner::intra_op::Strategy*> others;
  for (const auto& s : strategies) {
    if (s.output == chosen.output && s.inputs == chosen.inputs) continue;
    bool new_cost = true;
    for (const auto* o : others) new_cost = new_cost && o->communication != s.communication;
    if (new_cost) others.push_back(&s);
  }
  REQUIRE(others.size() >= 2);
  auto with_layout = [&](const schema::OperatorSharding& sh) {
    schema::Plan plan = run->result.plan;
    for (auto& entry : plan.stages[0].shardings) {
      if (entry.op == name) entry = sh;
    }
    return planner::evaluate_plan(run->in, plan);
  };
  auto edited = [&](const planner::intra_op::Strategy& s) {
    auto r = with_layout({name, s.name, s.inputs, s.output});
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return r.value().prediction.iteration_time_s;
  };
  const double searched = run->result.prediction.iteration_time_s;
  const double a = edited(*others[0]);
  const double b = edited(*others[1]);
  CHECK(a != b);
  CHECK(a != searched);
  CHECK(b != searched);
  // The search's own layout back in place: its own prediction, byte for byte.
  auto restored = with_layout(chosen);
  REQUIRE(restored.ok());
  CHECK(restored.value().prediction.iteration_time_s == searched);
  // A layout outside the matmul's strategies (replicated work) is an error naming it.
  schema::OperatorSharding replicated = chosen;
  replicated.strategy = "";
  replicated.output = schema::ShardingSpec::replicated(chosen.output.rank());
  for (auto& in : replicated.inputs) in = schema::ShardingSpec::replicated(in.rank());
  auto bad = with_layout(replicated);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("/stages/0/shardings (layer 1): operator " + name) == 0);
  CHECK(bad.status().message().find("is not among its") != std::string::npos);
}

TEST_CASE("a weight gradient's even split divides its tokens by sample first: Megatron's GEMM shape") {
  // dW = X^T·dY contracts over the tokens of the graph's samples. On d = dp·tp devices, with
  // the graph's dp samples split one per data-parallel row, the even split is (M, N/tp,
  // K/dp), as Megatron runs it; before, it was the thin (M/d, N, K). Other matmuls keep
  // batch·M first, then N.
  const planner::SearchInput in = tiny_input("alpa");
  ir::BuildOptions bo;
  bo.microbatch_size = 4;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(in.model, bo).value(), {});
  int checked = 0;
  for (const ir::Op& op : g.ops()) {
    if (!op.is_matmul() || op.layer != 1) continue;
    const ir::DotDims& dims = op.dot_dims;
    cost_model::GemmShape s;
    s.dtype = g.meta.dtype;
    if (op.grad_role == ir::GradRole::kWeightGrad && dims.batch == 1) {
      // 8 devices: the 4 samples' tokens, then N over the other 2.
      s.m = dims.m;
      s.n = (dims.n + 1) / 2;
      s.k = dims.k / 4;
      ++checked;
    } else {
      const std::int64_t bm = dims.batch * dims.m;
      s.m = (bm + 7) / 8;
      s.n = dims.n;
      s.k = dims.k;
    }
    CAPTURE(op.name);
    CHECK(planner::adapters::op_compute(g, op, 8, *in.cost).value() == in.cost->gemm(s).time.value());
  }
  CHECK(checked >= 4);  // Q, K, V, out projection, fc1, fc2 weights
}

TEST_CASE("the Megatron grid's winner is priced by the one evaluator, its plan written with Megatron's layouts") {
  // 8 V100 of one node: the grid's winner (ranked by its analytic costs) comes back as a plan
  // whose multi-GPU stages carry Megatron's per-operator layouts, and its prediction is
  // evaluate_plan's of that plan, byte for byte (before: the analytic price, and no layouts).
  planner::SearchInput in = tiny_input("megatron");
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
  price_with_shipped_p3(in);
  in.options.explore_megatron_parallelism = false;  // the grid's answer, not the flags'
  auto r = planner::search(in);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const schema::Plan& plan = r.value().plan;
  bool multi_gpu = false;
  for (const auto& st : plan.stages) {
    if (st.device_ids.size() < 2) continue;
    multi_gpu = true;
    CHECK_FALSE(st.shardings.empty());
  }
  CHECK(multi_gpu);
  auto again = planner::evaluate_plan(in, plan);
  REQUIRE_MESSAGE(again.ok(), again.status().message());
  CHECK(again.value().prediction.iteration_time_s == r.value().prediction.iteration_time_s);
  CHECK(again.value().prediction.peak_memory_bytes == r.value().prediction.peak_memory_bytes);
  // The analytic price, asked for: the same grid point, without layouts.
  in.options.rescore_grid = false;
  auto analytic = planner::search(in);
  REQUIRE(analytic.ok());
  CHECK(schema::megatron_shape(analytic.value().plan)->to_string() == schema::megatron_shape(plan)->to_string());
  for (const auto& st : analytic.value().plan.stages) CHECK(st.shardings.empty());
}

TEST_CASE("a Megatron grid plan sends as Megatron does: blocking, overlapped only when interleaved") {
  // Megatron-LM's batched send/recv block the sender; overlap_p2p_comm (Megatron-Core's
  // default) overlaps them only in the interleaved schedule. sim/lowering prices a fixed plan
  // so and megatron_plan_file writes it so. The grid ranked every point with blocking sends
  // (interleaved ones too) but wrote its plans, and the evaluator priced them, with the plan
  // format's default, async sends (GPT-3 39B / 64 V100: the megatron row's tp 4 pp 16 was
  // priced 86.08 s with async sends).
  for (const bool rescore : {true, false}) {
    CAPTURE(rescore);
    planner::SearchInput in = tiny_input("inter_op_only");  // tp 1, pp > 1
    in.options.rescore_grid = rescore;
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const schema::Plan& plan = r.value().plan;
    REQUIRE(plan.stages.size() >= 2);
    CHECK(plan.p2p == (plan.interleave > 1 ? schema::P2pMode::kAsync : schema::P2pMode::kBlocking));
    if (!rescore) continue;  // the analytic price is not the evaluator's
    // What alpa-sim reports is the plan as written, its sends included.
    auto again = planner::evaluate_plan(in, plan);
    REQUIRE_MESSAGE(again.ok(), again.status().message());
    CHECK(again.value().prediction.iteration_time_s == r.value().prediction.iteration_time_s);
  }
}

TEST_CASE("a Megatron grid point whose stage spans part of a node is not written as a plan file") {
  // 3 nodes of 4 GPUs: pp 2 gives each stage dp 3 x tp 2 = 6 GPUs, a node and a half, which
  // a plan file's submesh (nodes x GPUs per node) cannot describe. Writing it used to give
  // the stage a 1 x 4 submesh under a 3 x 2 mesh, and evaluating that aborted on a CHECK
  // (alpa-sim capacity on GPT-3 175B: dp 3 x tp 4 on 8-GPU nodes). Now it is "unimplemented",
  // and the grid makes no such point (schema::submesh_expressible).
  planner::SearchInput in = tiny_input("megatron");
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 3).value();
  in.cluster.gpus_per_node = 4;
  price_with_shipped_p3(in);
  in.global_batch_size = 24;
  planner::search_detail::Searcher s(in);
  schema::Plan plan = s.base_plan();
  plan.num_microbatches = 4;  // microbatch 2 per replica: 24 = 3 replicas x 4 x 2
  const auto graph = training_graph_of(in, plan);
  const std::int64_t layers = graph.num_layers();
  for (std::int64_t c = 0; c < 2; ++c) {
    schema::PlanStage st;
    st.layer_begin = c * layers / 2;
    st.layer_end = (c + 1) * layers / 2;
    st.submesh_nodes = 1;
    st.submesh_gpus_per_node = 4;
    st.logical_rows = 3;
    st.logical_cols = 2;
    for (std::int64_t d = 0; d < 6; ++d) st.device_ids.push_back(c * 6 + d);
    plan.stages.push_back(st);
  }
  auto written = s.with_megatron_layouts(plan);
  REQUIRE_FALSE(written.ok());
  CHECK(written.status().code() == core::StatusCode::kUnimplemented);
  CHECK(written.status().message().find("a stage of 6 GPUs spans part of a node") != std::string::npos);
  // The whole grid still answers, with a plan the format can write.
  in.options.microbatch_sizes = {2};
  auto r = planner::search(in);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(validate(r.value().plan).ok());
  for (const auto& st : r.value().plan.stages) {
    CHECK(st.submesh_nodes * st.submesh_gpus_per_node == st.logical_rows * st.logical_cols);
    CHECK(schema::submesh_expressible(st.logical_rows * st.logical_cols, 4));
  }
  CHECK_FALSE(schema::submesh_expressible(6, 4));
  CHECK(schema::submesh_expressible(3, 4));
  CHECK(schema::submesh_expressible(8, 4));
}

TEST_CASE("a searched stage's gradient collectives are their own task, not part of the optimizer step") {
  // intra_op_only: one stage on the 4 GPUs with weight-update sharding. Its once-per-
  // iteration gradient reduce-scatter + all-gather run after the last backward as a
  // grad-sync task of their own (issue 15 #7; before: added to optimizer_step_s, so the
  // trace showed a long optimizer step and no gradient collective).
  const auto run = intra_op_only_plan();
  const sim::PipelineProblem& pb = run->result.problem;
  REQUIRE(pb.data_parallel == 1);
  const sim::StageCosts& st = pb.stages.at(0);
  REQUIRE(st.grad_sync_s.has_value());
  CHECK(st.grad_sync_s->value() > 0);
  auto simulated = sim::simulate_pipeline(pb);
  REQUIRE(simulated.ok());
  const auto& device = simulated->report.devices.at(0);
  // Nothing runs after the last backward but the sync and the step: all of it is exposed.
  CHECK(device.grad_sync_exposed.value() == doctest::Approx(st.grad_sync_s->value()).epsilon(1e-6));
}
