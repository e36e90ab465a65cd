#include "driver/run.h"

#include <set>

#include <doctest/doctest.h>

#include "cluster/cluster_spec.h"
#include "core/json_reader.h"
#include "driver/evaluate.h"
#include "driver/search_run.h"
#include "schema/plan.h"

namespace alpasim::driver {
namespace {

TEST_CASE("bf16 on a GPU without bf16 tensor cores is a warning, fp16 is not") {
  Scenario s = load_default_scenario().value();  // 8 V100
  s.training.dtype = core::DType::kBf16;
  const auto warnings = scenario_warnings(s);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("V100") != std::string::npos);
  CHECK(warnings[0].find("no bf16 tensor cores") != std::string::npos);
  CHECK(warnings[0].find("(8.0x below fp16)") != std::string::npos);  // 125 / 15.7 TFLOP/s
  s.training.dtype = core::DType::kFp16;
  CHECK(scenario_warnings(s).empty());
  s.training.dtype = core::DType::kFp32;
  CHECK(scenario_warnings(s).empty());
}

// The search.megatron block of a plan_megatron shape (the JSON alpa-sim writes).
MegatronPlanConfig megatron_config_of(const core::Json& shape) {
  MegatronPlanConfig m;
  m.tp = shape["tp"].get<std::int64_t>();
  m.pp = shape["pp"].get<std::int64_t>();
  m.dp = shape["dp"].get<std::int64_t>();
  m.cp = shape["cp"].get<std::int64_t>();
  m.ep = shape["ep"].get<std::int64_t>();
  m.etp = shape.contains("etp") ? shape["etp"].get<std::int64_t>() : 0;
  m.microbatch_size = shape["mbs"].get<std::int64_t>();
  m.interleave = shape["vp"].get<std::int64_t>();
  m.recompute = schema::parse_recompute(shape["recompute"].get<std::string>());
  m.sequence_parallel = shape.contains("sequence_parallel");
  m.zero_stage = shape.contains("distributed_optimizer") ? 1 : 0;
  m.overlap_grad_reduce = shape.contains("overlap_grad_reduce");
  m.overlap_param_gather = shape.contains("overlap_param_gather");
  m.tp_comm_overlap = shape.contains("tp_comm_overlap");
  return m;
}

// run_scenario without wall-clock fields (the report is compared byte for byte or by value).
RunReport run_untimed(const Scenario& s) {
  RunSettings settings;
  settings.include_timing = false;
  return run_scenario(s, settings).value();
}

// Seconds per iteration of scenario `s` with its search replaced by the fixed Megatron plan
// of a plan_megatron `shape`.
double fixed_plan_time_s(const Scenario& s, const core::Json& shape) {
  Scenario fixed = s;
  fixed.search.mode = "fixed";
  fixed.search.megatron = megatron_config_of(shape);
  return run_untimed(fixed).json["prediction"]["iteration_time_s"].get<double>();
}

// GShard MoE 27B on 32 V100 (the MoE golden), mode megatron, about 2.5 s: the grid alone
// (tp 8 pp 4, no expert parallelism) against the grid with Megatron-Core's expert
// parallelism tried around it.
TEST_CASE("mode megatron tries expert parallelism on a MoE model, priced as the fixed Megatron plan it names") {
  Scenario s = load_scenario(std::filesystem::path(ALPASIM_SOURCE_DIR) / "scenarios/alpa_moe_27b_p3_32gpu.json").value();
  s.search.mode = "megatron";
  s.search.compare_baselines = false;
  RunReport explored = run_untimed(s);
  const core::Json& shape = explored.json["plan_megatron"];
  REQUIRE(shape.is_object());
  CHECK(shape["ep"].get<std::int64_t>() > 1);
  // No plan file: the plan format cannot say ep; the summary says why.
  CHECK_FALSE(explored.plan.has_value());
  CHECK(explored.json.contains("plan_file_unavailable"));
  CHECK(explored.text.find("no plan file") != std::string::npos);
  const double explored_s = explored.json["prediction"]["iteration_time_s"].get<double>();

  // The same point as a fixed Megatron plan (search.megatron): the same time, byte for byte.
  const MegatronPlanConfig m = megatron_config_of(shape);
  // Megatron-Core trains a MoE layer with tp > 1 only with sequence parallelism.
  CHECK(m.sequence_parallel == (m.tp > 1));
  CHECK(fixed_plan_time_s(s, shape) == explored_s);

  // Without the exploration: the grid's own answer, with no expert parallelism, slower even
  // at the grid's analytic price (the plan format cannot write a MoE point for the evaluator).
  const cost_model::CostModel cost = cost_model_for_scenario(s).value();
  planner::SearchInput in = search_input(s, cost);
  in.options.explore_megatron_parallelism = false;
  auto grid = planner::search(in);
  REQUIRE_MESSAGE(grid.ok(), grid.status().message());
  CHECK_FALSE(grid.value().megatron_shape.has_value());  // no cp or ep
  CHECK(grid.value().plan_file_unavailable.empty());
  CHECK(grid.value().prediction.iteration_time_s > explored_s);
}

// A rotary 8-block, 4,096-wide model at 65,536 tokens on one DGX H100: the grid's points
// without context parallelism hold a whole sequence's activations per GPU, which no runtime
// flag shrinks (at 32,768 tokens the distributed optimizer makes room for them: dp 8 cp 1).
TEST_CASE("mode megatron tries context parallelism on a long-sequence rotary model") {
  const char* text = R"({"schema_version": 1,
    "model": {"builtin": "llama", "name": "8 blocks at 64k", "num_layers": 8, "hidden_size": 4096,
              "num_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "seq_len": 65536,
              "vocab_size": 128256, "fused_attention": true},
    "cluster": {"preset": "dgx-h100", "nodes": 1},
    "training": {"global_batch_size": 16, "dtype": "bf16", "optimizer": "adam", "microbatches": "auto"},
    "search": {"mode": "megatron", "baselines": false}})";
  Scenario s = parse_scenario(text, "long_context.json", ".").value();
  RunReport explored = run_untimed(s);
  const core::Json& shape = explored.json["plan_megatron"];
  REQUIRE(shape.is_object());
  CHECK(shape["cp"].get<std::int64_t>() > 1);
  CHECK(shape["cp"].get<std::int64_t>() * shape["dp"].get<std::int64_t>() * shape["tp"].get<std::int64_t>() *
            shape["pp"].get<std::int64_t>() == 8);
  CHECK_FALSE(explored.plan.has_value());
  // As the fixed Megatron plan it names: the same time.
  CHECK(fixed_plan_time_s(s, shape) == explored.json["prediction"]["iteration_time_s"].get<double>());
}

// A Megatron model on H100 with 4,096 (two nodes) or 8,192 tokens (one node, 24 blocks of
// 8,192, tp > 1 needed to fit), mode megatron: the answer names the runtime flags
// (RuntimeFlags in planner/search/baselines.cc) that shorten its step, is priced as the fixed
// plan with those flags, and is slower without them (the bundle as a whole; the flags inside
// it are not tried one by one).
std::string megatron_llama(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t ffn,
                           std::int64_t seq_len, std::int64_t nodes, std::int64_t batch) {
  return R"({"schema_version": 1,
    "model": {"builtin": "llama", "name": "flags", "num_layers": )" + std::to_string(layers) +
         R"(, "hidden_size": )" + std::to_string(hidden) + R"(, "num_heads": )" + std::to_string(heads) +
         R"(, "num_kv_heads": 8, "ffn_hidden_size": )" + std::to_string(ffn) + R"(, "seq_len": )" +
         std::to_string(seq_len) + R"(, "vocab_size": 128256, "fused_attention": true},
    "cluster": {"preset": "dgx-h100", "nodes": )" + std::to_string(nodes) + R"(},
    "training": {"global_batch_size": )" + std::to_string(batch) +
         R"(, "dtype": "bf16", "optimizer": "adam", "microbatches": "auto"},
    "search": {"mode": "megatron", "baselines": false}})";
}

TEST_CASE("mode megatron turns on the runtime flags that shorten the step, priced as the fixed Megatron plan it names") {
  SUBCASE("data parallelism over two nodes: the distributed optimizer and the gradient overlaps") {
    Scenario s = parse_scenario(megatron_llama(8, 4096, 32, 14336, 4096, 2, 64), "dp.json", ".").value();
    RunReport explored = run_untimed(s);
    const core::Json& shape = explored.json["plan_megatron"];
    REQUIRE(shape.is_object());
    CHECK(shape.contains("distributed_optimizer"));
    CHECK(shape.contains("overlap_grad_reduce"));
    CHECK(explored.text.find("overlap_grad_reduce") != std::string::npos);
    // A plan file cannot say the overlaps: none is written, and the summary says why.
    CHECK_FALSE(explored.plan.has_value());
    CHECK(explored.json.contains("plan_file_unavailable"));
    const double explored_s = explored.json["prediction"]["iteration_time_s"].get<double>();
    CHECK(fixed_plan_time_s(s, shape) == explored_s);
    core::Json plain = shape;
    for (const char* flag : {"distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather"}) plain.erase(flag);
    CHECK(fixed_plan_time_s(s, plain) > explored_s);
    // Exposed gradient communication is what the overlaps hide.
    Scenario fixed = s;
    fixed.search.mode = "fixed";
    fixed.search.megatron = megatron_config_of(plain);
    const double exposed_plain_s = run_untimed(fixed).json["prediction"]["communication_exposed_s"].get<double>();
    CHECK(explored.json["prediction"]["communication_exposed_s"].get<double>() < exposed_plain_s);
  }
  SUBCASE("tensor parallelism on one node: sequence parallelism and tp_comm_overlap") {
    Scenario s = parse_scenario(megatron_llama(24, 8192, 64, 28672, 8192, 1, 16), "tp.json", ".").value();
    RunReport explored = run_untimed(s);
    const core::Json& shape = explored.json["plan_megatron"];
    REQUIRE(shape.is_object());
    CHECK(shape["tp"].get<std::int64_t>() > 1);
    CHECK(shape.contains("sequence_parallel"));
    CHECK(shape.contains("tp_comm_overlap"));
    const double explored_s = explored.json["prediction"]["iteration_time_s"].get<double>();
    CHECK(fixed_plan_time_s(s, shape) == explored_s);
    core::Json blocking = shape;
    blocking.erase("tp_comm_overlap");
    CHECK(fixed_plan_time_s(s, blocking) > explored_s);
  }
}

// 3 experts: no power of two > 1 divides them, so no expert parallelism to try; the grid's
// price of a MoE point is analytic (a plan file cannot write its layers), so the answer is
// still the Megatron lowering's, as the fixed plan it names.
TEST_CASE("mode megatron answers a MoE model at the Megatron lowering's price even without expert parallelism") {
  const char* text = R"({"schema_version": 1,
    "model": {"builtin": "moe", "name": "3-expert MoE", "num_layers": 4, "hidden_size": 1024, "num_heads": 16,
              "seq_len": 1024, "vocab_size": 32000, "ffn_hidden_size": 4096, "fused_attention": true,
              "num_experts": 3, "top_k": 2, "moe_layer_interval": 2, "expert_group_size": 1024},
    "cluster": {"preset": "aws-p3.16xlarge", "nodes": 1},
    "training": {"global_batch_size": 64, "dtype": "fp16", "optimizer": "adam", "microbatches": "auto"},
    "search": {"mode": "megatron", "baselines": false}})";
  Scenario s = parse_scenario(text, "three_experts.json", ".").value();
  RunReport answered = run_untimed(s);
  const core::Json& shape = answered.json["plan_megatron"];
  REQUIRE(shape.is_object());
  CHECK(shape["ep"].get<std::int64_t>() == 1);
  CHECK(answered.json.contains("plan_file_unavailable"));
  CHECK(fixed_plan_time_s(s, shape) == answered.json["prediction"]["iteration_time_s"].get<double>());
}

// fp8 and Blackwell's block-scaled formats have a price only in the Megatron lowering
// (planner::prices_only_by_megatron_lowering): mode megatron ranks its grid at bf16 and
// prices its points by the lowering at the run's precision (since 2026-11-27, stop 41;
// before, every search refused them). 8 Llama-shaped blocks at 4,096 tokens on one node.
TEST_CASE("mode megatron in fp8 and mxfp8: the answer is priced by the Megatron lowering at that precision") {
  auto scenario = [](const std::string& preset, const std::string& dtype) {
    return parse_scenario(R"({"schema_version": 1,
      "model": {"builtin": "llama", "name": "8 blocks", "num_layers": 8, "hidden_size": 4096, "num_heads": 32,
                "num_kv_heads": 8, "ffn_hidden_size": 14336, "seq_len": 4096, "vocab_size": 128256},
      "cluster": {"preset": ")" + preset + R"(", "nodes": 1},
      "training": {"global_batch_size": 32, "dtype": ")" + dtype + R"("},
      "search": {"mode": "megatron", "baselines": false}})",
                          "low_precision.json", ".")
        .value();
  };
  for (const auto& [preset, dtype] : {std::pair<std::string, std::string>{"dgx-h100", "fp8"}, {"dgx-b200", "mxfp8"}}) {
    CAPTURE(dtype);
    const Scenario s = scenario(preset, dtype);
    const RunReport low = run_untimed(s);
    const core::Json& shape = low.json["plan_megatron"];
    REQUIRE(shape.is_object());
    CHECK_FALSE(low.plan.has_value());  // a plan file prices no fp8 / mxfp8
    CHECK(low.json["plan_file_unavailable"].get<std::string>().find(dtype + " training") != std::string::npos);
    const double low_s = low.json["prediction"]["iteration_time_s"].get<double>();
    // The fixed Megatron plan it names, at the same precision: the same time.
    CHECK(fixed_plan_time_s(s, shape) == low_s);
    // The same model in bf16 (its answer priced by the evaluator or the lowering): slower;
    // these blocks are GEMM-bound and fp8 GEMMs run at twice the bf16 peak.
    const RunReport bf16 = run_untimed(scenario(preset, "bf16"));
    CHECK(bf16.json["prediction"]["iteration_time_s"].get<double>() > low_s);
  }
  // The other modes and plan files refuse them, naming the mode.
  const Scenario s = scenario("dgx-h100", "fp8");
  const cost_model::CostModel cost = cost_model_for_scenario(s).value();
  planner::SearchInput in = search_input(s, cost);
  in.mode = "alpa";
  auto alpa = planner::search(in);
  REQUIRE_FALSE(alpa.ok());
  CHECK(alpa.status().message() ==
        "training.dtype: fp8 is priced by the Megatron lowering only: fixed Megatron plans and search.mode "
        "\"megatron\"; mode \"alpa\" prices fp32, fp16 or bf16");
  // Moved to a GPU without fp8 (a what-if or capacity axis can): said once, naming the GPU.
  planner::SearchInput a100 = search_input(s, cost);
  a100.cluster = cluster::make_preset_cluster("dgx-a100-80gb", 1).value();
  auto refused = planner::search(a100);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() ==
        "training.dtype: fp8 needs fp8 tensor cores (Hopper or later); the NVIDIA A100-SXM4-80GB has none");
  // Too large for one node even at fp8: the error names the least memory a priced point needs.
  Scenario big = s;
  std::get<ir::TransformerConfig>(big.model.spec).num_layers = 200;
  const cost_model::CostModel big_cost = cost_model_for_scenario(big).value();
  auto none = planner::search(search_input(big, big_cost));
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == core::StatusCode::kResourceExhausted);
  CHECK(none.status().message().rfind("no plan fits in 75.00 GiB per GPU", 0) == 0);
  CHECK(none.status().message().find("; the Megatron lowering priced the grid's points at fp8: the smallest needs ") != std::string::npos);
}

// Megatron-LM interleaves any v with the blocks splitting evenly into pp·v chunks and the
// microbatches a multiple of pp; NVIDIA's recipes use 5, 8, 12 or 20, the grid 1 and 2.
// Llama 3 70B's shape on 64 H100 in fp8 (NVIDIA's recipe: tp 4 pp 8 vp 5 dp 2), about 3 s.
TEST_CASE("mode megatron tries interleaving factors beyond the grid's 2, priced as the fixed plan it names") {
  Scenario s = parse_scenario(R"({"schema_version": 1,
    "model": {"builtin": "llama", "name": "Llama 3 70B", "num_layers": 80, "hidden_size": 8192, "num_heads": 64,
              "num_kv_heads": 8, "ffn_hidden_size": 28672, "seq_len": 8192, "vocab_size": 128256,
              "cross_entropy_loss_fusion": true, "cross_entropy_fusion_impl": "te"},
    "cluster": {"preset": "dgx-h100", "nodes": 8},
    "training": {"global_batch_size": 128, "dtype": "fp8"},
    "search": {"mode": "megatron", "baselines": false}})",
                              "llama3_70b.json", ".")
                   .value();
  const RunReport answered = run_untimed(s);
  const core::Json& shape = answered.json["plan_megatron"];
  REQUIRE(shape.is_object());
  const std::int64_t vp = shape["vp"].get<std::int64_t>();
  CHECK(vp > 2);
  CHECK(80 % (shape["pp"].get<std::int64_t>() * vp) == 0);
  const double answered_s = answered.json["prediction"]["iteration_time_s"].get<double>();
  CHECK(fixed_plan_time_s(s, shape) == answered_s);
  // The same point without interleaving: slower (its pipeline bubble).
  core::Json flat = shape;
  flat["vp"] = 1;
  CHECK(fixed_plan_time_s(s, flat) > answered_s);
}

// The default scenario is searched (mode "alpa"): a whole planner run, a few seconds.
TEST_CASE("the same scenario gives byte-identical JSON without wall-clock fields") {
  RunSettings settings;
  settings.include_timing = false;
  Scenario a = load_default_scenario().value();
  Scenario b = load_default_scenario().value();
  RunReport first = run_scenario(a, settings).value();
  RunReport second = run_scenario(b, settings).value();
  std::string first_json = core::dump_json(first.json);
  CHECK(first_json == core::dump_json(second.json));
  CHECK(first_json.find("\"status\": \"planned\"") != std::string::npos);
  CHECK(first_json.find("wall_time_s") == std::string::npos);
  // The plan covers the cluster and the summary names the hardware.
  REQUIRE(first.plan.has_value());
  std::set<std::int64_t> devices;
  for (const auto& stage : first.plan->stages) devices.insert(stage.device_ids.begin(), stage.device_ids.end());
  CHECK(devices.size() == 8);
  CHECK(first.text.find("8 x NVIDIA Tesla V100-SXM2-16GB") != std::string::npos);
  CHECK(first.text.find("comparison under the same cost model and simulator") != std::string::npos);
  // The model summary describes the chosen plan's microbatching and recomputation, not the
  // scenario's "auto" (it used to say 1024 microbatches x 1 for a plan of 512 x 2).
  const schema::Plan& plan = *first.plan;
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  CHECK(first.text.find("1024 samples/iteration = " + std::to_string(plan.num_microbatches) +
                        " microbatches x " + std::to_string(mbs) + "\n") != std::string::npos);
  CHECK(first.text.find("recompute " + std::string(schema::recompute_name(plan.recompute)) + "\n") !=
        std::string::npos);
  CHECK(first.json.at("model_summary").at("microbatch_size").get<std::int64_t>() == mbs);
  // The summary reports the cluster's reserve and what plans may use.
  CHECK(first.text.find("(16.00 GiB each, 1.80 GiB reserved for the runtime: plans may use 14.20 GiB)") !=
        std::string::npos);
}

}  // namespace
}  // namespace alpasim::driver
