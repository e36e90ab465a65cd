// The IR adapter on convolutional and MoE models: loop nests for forward, data-gradient and
// filter-gradient convolutions (strided ones included), planner::search on the tiny
// Wide-ResNet of the executor's tests, and the MoE einsums' expert-parallel kinds.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "planner/adapters/ir_adapter.h"
#include "planner/search/search.h"
#include "tests/support/shipped_calibration.h"
#include "tests/support/tiny_models.h"

using namespace alpasim;

namespace {

const std::map<std::string, cost_model::Calibration>& shipped() { return ::alpasim::testing::shipped_calibrations(); }

using ::alpasim::testing::tiny_wide_resnet;  // the executor tests run the same model

// `nodes` p3.16xlarge nodes of `gpus_per_node` V100 each.
planner::SearchInput wresnet_input(const std::string& mode, std::int64_t nodes,
                                   std::int64_t gpus_per_node) {
  planner::SearchInput in;
  in.model = tiny_wide_resnet();
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", nodes).value();
  in.cluster.gpus_per_node = gpus_per_node;
  in.cost = cost_model::CostModel::create(
                in.cluster, cost_model::params_for_preset(shipped(), "aws-p3.16xlarge").value())
                .value();
  in.global_batch_size = 8;
  in.mode = mode;
  in.options.compare_baselines = false;
  in.options.time_limit_s = 5;
  in.options.microbatch_sizes = {2, 4};
  in.options.recompute = {schema::Recompute::kNone};
  in.options.top_k = 1;
  return in;
}

}  // namespace

TEST_CASE("every convolution of a Wide-ResNet becomes a loop nest, strided ones included") {
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  const ir::Graph fwd = ir::build_forward_graph(tiny_wide_resnet(), bo).value();
  const ir::Graph g = ir::derive_training_graph(fwd, {});
  int convs = 0, strided = 0, filter_grads = 0;
  for (std::int32_t l = 0; l < g.num_layers(); ++l) {
    std::vector<ir::OpId> ops;
    auto r = planner::adapters::layer_range_graph(g, l, l + 1, &ops);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    for (std::size_t v = 0; v < ops.size(); ++v) {
      const ir::Op& op = g.op(ops[v]);
      if (op.kind != ir::OpKind::kConv2d || op.layer != l) continue;
      const auto& node = r.value().nodes[v];
      INFO(op.name);
      ++convs;
      strided += op.conv.stride > 1 ? 1 : 0;
      filter_grads += op.conv.variant == ir::ConvSpec::Variant::kGradFilter ? 1 : 0;
      CHECK(node.kind == planner::intra_op::OpKind::kEinsum);
      CHECK(node.shape == op.out.shape);
      CHECK(node.flops == static_cast<double>(op.flops));
      // Loops n, ho, wo, ci, kh, kw, co of the op's ConvSpec.
      const ir::ConvSpec& c = op.conv;
      CHECK(node.loop_extents ==
            std::vector<std::int64_t>{c.n, c.out_h(), c.out_w(), c.ci, c.kh, c.kw, c.co});
    }
  }
  // The stem's 7x7 stride-2 conv and each stage's first 3x3 conv and projection (stride 2
  // in stages 2-4) are strided; every forward conv with a weight has a filter gradient.
  CHECK(convs > 0);
  CHECK(strided > 0);
  CHECK(filter_grads > 0);
}

TEST_CASE("planner::search plans the tiny Wide-ResNet in modes alpa, data_parallel, inter_op_only") {
  // Once failed with "node 2 (\"stem/conv_init\"): output axis 1 does not match its loop":
  // a strided convolution's output rows were a loop absent from its operands.
  const std::vector<std::pair<std::int64_t, std::int64_t>> clusters = {{1, 2}, {1, 4}, {2, 2}};
  for (const auto& [nodes, gpn] : clusters) {
    for (const std::string mode : {"alpa", "data_parallel", "inter_op_only"}) {
      auto r = planner::search(wresnet_input(mode, nodes, gpn));
      INFO(mode << " on " << nodes << "x" << gpn << " GPUs");
      REQUIRE_MESSAGE(r.ok(), r.status().message());
      const schema::Plan& plan = r.value().plan;
      std::set<std::int64_t> devices;
      for (const auto& st : plan.stages) devices.insert(st.device_ids.begin(), st.device_ids.end());
      CHECK(static_cast<std::int64_t>(devices.size()) == nodes * gpn);
      // data_parallel: one stage on every GPU; inter_op_only: one GPU per stage.
      if (mode == "data_parallel") CHECK(plan.stages.size() == 1);
      if (mode == "inter_op_only") {
        CHECK(static_cast<std::int64_t>(plan.stages.size()) >= nodes * gpn);
      }
    }
  }
}

TEST_CASE("the MoE builders' dispatch and combine keep their expert-parallel kinds") {
  ir::TransformerConfig t;
  t.builtin = "moe";
  t.num_layers = 2;
  t.hidden_size = 64;
  t.num_heads = 4;
  t.num_kv_heads = 4;
  t.seq_len = 32;
  t.vocab_size = 128;
  t.ffn_hidden_size = 128;
  t.num_experts = 4;
  t.top_k = 2;
  t.moe_layer_interval = 2;
  t.expert_group_size = 16;
  t.capacity_factor = 1.0;
  ir::set_architecture_defaults(t);
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  const ir::Graph fwd = ir::build_forward_graph(ir::ModelConfig{"tiny MoE", t}, bo).value();
  const ir::Graph g = ir::derive_training_graph(fwd, {});
  // Every forward dispatch / combine (spelled "xyec,xyh->exch" and "xyec,exch->xyh" by the
  // builder) is a kMoeDispatch / kMoeCombine node, so expert parallelism is on offer.
  int dispatches = 0, combines = 0;
  for (std::int32_t l = 0; l < g.num_layers(); ++l) {
    std::vector<ir::OpId> ops;
    auto r = planner::adapters::layer_range_graph(g, l, l + 1, &ops);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    for (std::size_t v = 0; v < ops.size(); ++v) {
      const ir::Op& op = g.op(ops[v]);
      if (op.layer != l || op.phase != ir::Phase::kForward) continue;
      const auto kind = r.value().nodes[v].kind;
      if (op.kind == ir::OpKind::kMoeDispatch) {
        ++dispatches;
        CHECK(kind == planner::intra_op::OpKind::kMoeDispatch);
      }
      if (op.kind == ir::OpKind::kMoeCombine) {
        ++combines;
        CHECK(kind == planner::intra_op::OpKind::kMoeCombine);
      }
    }
  }
  CHECK(dispatches == 1);  // layers 1..2, experts every second layer
  CHECK(combines == 1);
}
