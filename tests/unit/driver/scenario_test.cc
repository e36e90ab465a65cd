#include "driver/scenario.h"

#include <filesystem>

#include <doctest/doctest.h>

#include "ir/builders.h"

namespace alpasim::driver {
namespace {

constexpr const char* kBase = R"({
  "schema_version": 1,
  "model": {"builtin": "gpt", "num_layers": 96, "hidden_size": 12288, "num_heads": 96,
            "seq_len": 2048, "vocab_size": 51200},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 192},
  "training": {"global_batch_size": 1536, "dtype": "fp16", "optimizer": "adam", "microbatches": "auto"},
  "search": {"mode": "fixed", "megatron": {"tp": 8, "pp": 12, "dp": 16, "microbatch_size": 1,
             "interleave": 1, "recompute": "full", "sequence_parallel": false, "zero_stage": 0}}
})";

std::string error_of(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  auto r = parse_scenario(text, "s.json", ".");
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

TEST_CASE("the issue's fixed spellings parse") {
  Scenario s = parse_scenario(kBase, "s.json", ".").value();
  CHECK(s.cluster.num_gpus() == 1536);
  REQUIRE(s.search.megatron.has_value());
  CHECK(s.search.megatron->pp == 12);
  CHECK(s.search.megatron->recompute == schema::Recompute::kFull);
  CHECK_FALSE(s.training.num_microbatches.has_value());
  CHECK(s.profile.preset == "auto");
  CHECK(s.search.time_limit_s == 600);
}

TEST_CASE("Megatron-Core's overlap flags parse with its defaults, distributed_optimizer is ZeRO-1") {
  Scenario s = parse_scenario(kBase, "s.json", ".").value();
  const MegatronPlanConfig& d = *s.search.megatron;
  CHECK_FALSE(d.tp_comm_overlap);
  CHECK_FALSE(d.overlap_grad_reduce);
  CHECK_FALSE(d.overlap_param_gather);
  CHECK(d.overlap_p2p_comm);  // --no-overlap-p2p-communication turns it off
  CHECK(d.ddp_bucket_size == 0);
  auto with = [](const std::string& keys) {
    std::string text = kBase;
    const std::string from = "\"zero_stage\": 0}";
    text.replace(text.find(from), from.size(), keys + "}");
    return parse_scenario(text, "s.json", ".");
  };
  auto on = with("\"distributed_optimizer\": true, \"tp_comm_overlap\": true, "
                 "\"overlap_grad_reduce\": true, \"overlap_param_gather\": true, "
                 "\"overlap_p2p_comm\": false, \"ddp_bucket_size\": 1000");
  REQUIRE_MESSAGE(on.ok(), on.status().message());
  const MegatronPlanConfig& m = *on->search.megatron;
  CHECK(m.zero_stage == 1);
  CHECK(m.tp_comm_overlap);
  CHECK(m.overlap_grad_reduce);
  CHECK(m.overlap_param_gather);
  CHECK_FALSE(m.overlap_p2p_comm);
  CHECK(m.ddp_bucket_size == 1000);
  auto both = with("\"zero_stage\": 1, \"distributed_optimizer\": true");
  REQUIRE(both.ok());
  CHECK(both->search.megatron->zero_stage == 1);
  auto contradict = with("\"zero_stage\": 0, \"distributed_optimizer\": true");
  REQUIRE_FALSE(contradict.ok());
  CHECK(contradict.status().message() ==
        "s.json: /search/megatron/distributed_optimizer: contradicts zero_stage 0 (the "
        "distributed optimizer is zero_stage 1)");
  // cp: tp·pp·cp·dp must be the cluster (8·12·2·16 = 3,072 of 1,536 here).
  auto cp = with("\"cp\": 2");
  REQUIRE_FALSE(cp.ok());
  CHECK(cp.status().message() ==
        "s.json: /search/megatron: tp·pp·cp·dp = 8·12·2·16 = 3072 GPUs, but the cluster has 1536");
  auto uneven = with("\"first_stage_layers\": 7, \"last_stage_layers\": 9");
  REQUIRE_MESSAGE(uneven.ok(), uneven.status().message());
  CHECK(uneven->search.megatron->first_stage_layers == 7);
  CHECK(uneven->search.megatron->last_stage_layers == 9);
  auto accounted = with("\"account_for_embedding_in_pipeline_split\": true, "
                        "\"account_for_loss_in_pipeline_split\": true");
  REQUIRE_MESSAGE(accounted.ok(), accounted.status().message());
  CHECK(accounted->search.megatron->account_for_embedding);
  CHECK(accounted->search.megatron->account_for_loss);
  // --pipeline-model-parallel-layout: read, written back by scenario_to_json, and it lifts
  // the even-split check (the base's 96 blocks on pp 12 split evenly anyway; what the
  // layout says is checked by the lowering, sim_lowering's layout test).
  auto layout = with("\"pipeline_model_parallel_layout\": \"Et*7|(t*8|)*10t*9L\"");
  REQUIRE_MESSAGE(layout.ok(), layout.status().message());
  CHECK(layout->search.megatron->pipeline_layout == "Et*7|(t*8|)*10t*9L");
  auto again = parse_scenario(scenario_to_json(*layout).dump(), "again.json", ".");
  REQUIRE_MESSAGE(again.ok(), again.status().message());
  CHECK(again->search.megatron->pipeline_layout == "Et*7|(t*8|)*10t*9L");
  auto empty_layout = with("\"pipeline_model_parallel_layout\": \"\"");
  REQUIRE_FALSE(empty_layout.ok());
  CHECK(empty_layout.status().message() ==
        "s.json: /search/megatron/pipeline_model_parallel_layout: expected a layout of 1 to 4,096 characters, got 0");
  auto bucket = with("\"ddp_bucket_size\": 0");
  REQUIRE_FALSE(bucket.ok());
  CHECK(bucket.status().message().find("/search/megatron/ddp_bucket_size: expected a parameter count >= 1") !=
        std::string::npos);
}

TEST_CASE("tp_comm_overlap_cfg reads Megatron's --tp-comm-overlap-cfg keys over TE's defaults and round-trips") {
  auto with = [](const std::string& keys) {
    std::string text = kBase;
    const std::string from = "\"zero_stage\": 0}";
    text.replace(text.find(from), from.size(), "\"zero_stage\": 0, \"sequence_parallel\": true" + keys + "}");
    const std::string sp = "\"sequence_parallel\": false, ";
    text.replace(text.find(sp), sp.size(), "");
    return parse_scenario(text, "s.json", ".");
  };
  using sim::lowering::TpOverlapGemmRole;
  using sim::lowering::TpOverlapMethod;
  // NeMo's Llama 3.1 405B H100 settings for two roles, as its recipe writes them.
  auto s = with(", \"tp_comm_overlap\": true, \"tp_comm_overlap_cfg\": {"
                "\"qkv_wgrad\": {\"method\": \"bulk\", \"num_sm\": 24, \"cga_size\": 2, \"set_sm_margin\": false},"
                "\"fc2_fprop\": {\"method\": \"pipeline\", \"num_sm\": 8, \"cga_size\": 2, \"num_splits\": 4,"
                " \"set_sm_margin\": true, \"fp8_buf\": true, \"atomic_gemm\": false}}");
  REQUIRE_MESSAGE(s.ok(), s.status().message());
  const auto& cfg = *s->search.megatron->tp_comm_overlap_cfg;
  CHECK(cfg[TpOverlapGemmRole::kQkvWgrad].num_sm == 24);
  CHECK_FALSE(cfg[TpOverlapGemmRole::kQkvWgrad].set_sm_margin);
  CHECK(cfg[TpOverlapGemmRole::kFc2Fprop].num_sm == 8);
  CHECK(cfg[TpOverlapGemmRole::kFc2Fprop].num_splits == 4);
  CHECK(cfg[TpOverlapGemmRole::kFc2Fprop].fp8_buf);
  // Roles not given keep Transformer Engine's defaults.
  CHECK(cfg[TpOverlapGemmRole::kProjFprop] == sim::lowering::TpOverlapConfig{}[TpOverlapGemmRole::kProjFprop]);
  auto again = parse_scenario(scenario_to_json(*s).dump(), "again.json", ".");
  REQUIRE_MESSAGE(again.ok(), again.status().message());
  CHECK(*again->search.megatron->tp_comm_overlap_cfg == cfg);
  // Errors name the key.
  auto unknown = with(", \"tp_comm_overlap\": true, \"tp_comm_overlap_cfg\": {\"fc2_fprops\": {}}");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() ==
        "s.json: /search/megatron/tp_comm_overlap_cfg/fc2_fprops: unknown key; did you mean \"fc2_fprop\"?");
  auto method = with(", \"tp_comm_overlap\": true, \"tp_comm_overlap_cfg\": {\"fc2_fprop\": {\"method\": \"ring\"}}");
  REQUIRE_FALSE(method.ok());
  CHECK(method.status().message().find("/search/megatron/tp_comm_overlap_cfg/fc2_fprop/method") != std::string::npos);
  auto atomic = with(", \"tp_comm_overlap\": true, \"tp_comm_overlap_cfg\": {\"fc2_fprop\": {\"atomic_gemm\": true}}");
  REQUIRE_FALSE(atomic.ok());
  CHECK(atomic.status().message() ==
        "s.json: /search/megatron/tp_comm_overlap_cfg/fc2_fprop/atomic_gemm: atomic GEMM overlap is not "
        "modelled; expected false");
  auto alone = with(", \"tp_comm_overlap_cfg\": {}");
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().message() ==
        "s.json: /search/megatron/tp_comm_overlap_cfg: needs \"tp_comm_overlap\": true");
}

TEST_CASE("fp8 parses for fixed Megatron plans and the Megatron grid on Hopper, other GPUs and formats are errors naming the GPU") {
  auto with = [](const std::string& preset, const std::string& dtype, bool fixed,
                 const std::string& mode = "alpa") {
    std::string text = kBase;
    auto swap = [&](const std::string& from, const std::string& to) {
      text.replace(text.find(from), from.size(), to);
    };
    swap("\"dgx-a100-80gb\"", "\"" + preset + "\"");
    swap("\"dtype\": \"fp16\"", "\"dtype\": \"" + dtype + "\"");
    if (!fixed) {
      const auto at = text.find("\"search\"");
      text = text.substr(0, at) + "\"search\": {\"mode\": \"" + mode + "\"}\n}";
    }
    return parse_scenario(text, "s.json", ".");
  };
  // The Megatron grid: its points priced by the Megatron lowering (planner/search/search.h).
  auto grid = with("dgx-h100", "fp8", false, "megatron");
  REQUIRE_MESSAGE(grid.ok(), grid.status().message());
  auto mx_grid = with("dgx-b200", "mxfp8", false, "megatron");
  REQUIRE_MESSAGE(mx_grid.ok(), mx_grid.status().message());
  auto ok = with("dgx-h100", "fp8", true);
  REQUIRE_MESSAGE(ok.ok(), ok.status().message());
  CHECK(ok->training.dtype == core::DType::kFp8);
  auto a100 = with("dgx-a100-80gb", "fp8", true);
  REQUIRE_FALSE(a100.ok());
  CHECK(a100.status().message() ==
        "s.json: /training/dtype: fp8 needs fp8 tensor cores (Hopper or later); the NVIDIA "
        "A100-SXM4-80GB has none");
  auto search = with("dgx-h100", "fp8", false);
  REQUIRE_FALSE(search.ok());
  CHECK(search.status().message() ==
        "s.json: /training/dtype: fp8 is priced by the Megatron lowering only: fixed Megatron plans "
        "(\"search\": {\"mode\": \"fixed\", \"megatron\": ...}) and the Megatron grid (\"search\": "
        "{\"mode\": \"megatron\"}); the alpa search, its other baselines and plan files price fp32, fp16 "
        "or bf16");
  auto mx = with("dgx-h100", "mxfp8", true);
  REQUIRE_FALSE(mx.ok());
  CHECK(mx.status().message() ==
        "s.json: /training/dtype: mxfp8 needs Blackwell tensor cores (block-scaled formats: B200, B300, "
        "GB200, GB300); the NVIDIA H100 80GB HBM3 (SXM5) has none");
  auto nv = with("dgx-b200", "nvfp4", true);
  REQUIRE_MESSAGE(nv.ok(), nv.status().message());
  CHECK(nv->training.dtype == core::DType::kBf16);
  CHECK(nv->training.block_scaled_dtype == "nvfp4");
  auto nv_search = with("dgx-b200", "nvfp4", false);
  REQUIRE_FALSE(nv_search.ok());
  CHECK(nv_search.status().message().rfind("s.json: /training/dtype: nvfp4 is priced by the Megatron lowering only", 0) == 0);
}

TEST_CASE("tensor parallelism may span the trays of an NVL72 NVLink domain, not two domains") {
  auto with = [](const std::string& cluster, std::int64_t tp, std::int64_t dp) {
    std::string text = kBase;
    auto swap = [&](const std::string& from, const std::string& to) {
      text.replace(text.find(from), from.size(), to);
    };
    swap(R"("cluster": {"preset": "dgx-a100-80gb", "nodes": 192})", R"("cluster": )" + cluster);
    swap(R"("tp": 8, "pp": 12, "dp": 16)",
         R"("tp": )" + std::to_string(tp) + R"(, "pp": 12, "dp": )" + std::to_string(dp));
    swap(R"("dtype": "fp16")", R"("dtype": "bf16")");
    return parse_scenario(text, "s.json", ".");
  };
  // 24 trays (96 GPUs) as two 12-tray domains: tp 8 spans two trays of a domain.
  auto nvl = with(R"({"preset": "gb200-nvl72", "nodes": 24})", 8, 1);
  REQUIRE_MESSAGE(nvl.ok(), nvl.status().message());
  CHECK(nvl->cluster.nvlink_domain_gpus() == 48);
  auto across = with(R"({"preset": "gb200-nvl72", "nodes": 288})", 96, 1);  // 16 racks
  REQUIRE_FALSE(across.ok());
  CHECK(across.status().message() ==
        "s.json: /search/megatron: tp 96 spans NVLink domains; expected at most 72 (GPUs of one "
        "NVLink domain)");
  // Trays cut into one-tray domains: tp 8 crosses the network, as on 4-GPU nodes.
  auto trays = with(R"({"preset": "gb200-nvl72", "nodes": 24, "nvlink_domain_gpus": 4})", 8, 1);
  REQUIRE_FALSE(trays.ok());
  CHECK(trays.status().message() ==
        "s.json: /search/megatron: tp 8 spans nodes; expected at most 4 (GPUs per node)");
}

TEST_CASE("the size estimates of a fixed plan are per microbatch: Llama 3.1 405B at batch 1536") {
  // NVIDIA's 405B runs: 1536 x 8,192 tokens per iteration (3.3e19 FLOPs, above the int64
  // bound of one graph), one sequence per microbatch. The fixed plan builds graphs of one
  // sequence, so it loads; a search, which may run the whole batch as one microbatch, is
  // refused before any graph is built.
  std::string text = R"({"schema_version": 1,
    "model": {"builtin": "llama", "num_layers": 126, "hidden_size": 16384, "num_heads": 128,
              "num_kv_heads": 8, "ffn_hidden_size": 53248, "seq_len": 8192, "vocab_size": 128256},
    "cluster": {"preset": "gb200-nvl72", "nodes": 64},
    "training": {"global_batch_size": 1536, "dtype": "fp8"},
    "search": {"mode": "fixed", "megatron": {"tp": 4, "pp": 16, "dp": 4, "microbatch_size": 1,
               "interleave": 4, "recompute": "none", "sequence_parallel": true,
               "account_for_embedding_in_pipeline_split": true,
               "account_for_loss_in_pipeline_split": true}}})";
  auto fixed = parse_scenario(text, "s.json", ".");
  REQUIRE_MESSAGE(fixed.ok(), fixed.status().message());
  const auto at = text.find("\"search\"");
  auto search = parse_scenario(text.substr(0, at) + R"("search": {"mode": "megatron"}})", "s.json", ".");
  REQUIRE_FALSE(search.ok());
  // Its attention scores (1.32e13 elements) are within 2^44; its FLOPs are not.
  CHECK(search.status().message() ==
        "s.json: /model: a training step of 1536 samples would take about 3.78e+19 FLOPs, at "
        "most 2^62 (4.61e+18) are supported (global_batch_size 1536)");
}

TEST_CASE("training.seq_len replaces the model's sequence length, for an HF config too") {
  // Builtin transformer: model.seq_len 2048 -> 1024; the echo keeps the override.
  std::string text = kBase;
  const std::string from = R"("microbatches": "auto"})";
  text.replace(text.find(from), from.size(), R"("microbatches": "auto", "seq_len": 1024})");
  Scenario s = parse_scenario(text, "s.json", ".").value();
  CHECK(std::get<ir::TransformerConfig>(s.model.spec).seq_len == 1024);
  CHECK(s.training.seq_len == 1024);
  CHECK(scenario_to_json(s)["training"]["seq_len"] == 1024);
  // An HF config trains on max_position_embeddings (32,768 for Qwen2-0.5B) unless told:
  // by training.seq_len, or by "seq_len" in the model block. The graph follows it.
  const std::string dir = std::string(ALPASIM_SOURCE_DIR) + "/tests/data/ir";
  auto hf = [&](const std::string& model_extra, const std::string& training_extra) {
    const std::string t = R"({"schema_version": 1,
      "model": {"file": "qwen2_0_5b_config.json", "format": "hf_config")" + model_extra + R"(},
      "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
      "training": {"global_batch_size": 8, "dtype": "bf16")" + training_extra + "}}";
    return parse_scenario(t, "s.json", dir);
  };
  auto tokens = [](const Scenario& sc) {
    ir::BuildOptions bo;
    bo.microbatch_size = 1;
    const ir::Graph g = ir::build_forward_graph(sc.model, bo).value();
    for (const ir::Op& op : g.ops()) {
      if (op.kind == ir::OpKind::kInput) return op.out.num_elements();
    }
    return std::int64_t{0};
  };
  CHECK(tokens(hf("", "").value()) == 32768);
  const Scenario by_training = hf("", R"(, "seq_len": 2048)").value();
  CHECK(tokens(by_training) == 2048);
  CHECK(std::get<ir::ModelFileConfig>(by_training.model.spec).seq_len == 2048);
  CHECK(ir::model_config_to_json(by_training.model)["seq_len"] == 2048);
  CHECK(tokens(hf(R"(, "seq_len": 1024)", "").value()) == 1024);
  CHECK(tokens(hf(R"(, "seq_len": 1024)", R"(, "seq_len": 512)").value()) == 512);  // training wins
  // Models with fixed shapes refuse it, naming the key.
  const std::string resnet = R"({"schema_version": 1,
    "model": {"builtin": "wide_resnet", "num_layers": 50, "base_channels": 64, "width_factor": 2},
    "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
    "training": {"global_batch_size": 8, "dtype": "fp16", "seq_len": 2048}})";
  auto r = parse_scenario(resnet, "s.json", ".");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("/training/seq_len") != std::string::npos);
  CHECK(r.status().message().find("got 2048") != std::string::npos);
}

TEST_CASE("scenario errors name the file, the JSON path, what was expected and found") {
  CHECK(error_of(kBase, "\"nodes\": 192", "\"nodes\": -4") ==
        "s.json: /cluster/nodes: expected a positive integer at most 16384, got -4");
  CHECK(error_of(kBase, "\"global_batch_size\": 1536", "\"global_batch\": 1536") ==
        "s.json: /training/global_batch_size: missing required key (expected a positive integer at most 4194304)");
  CHECK(error_of(kBase, "\"optimizer\": \"adam\"", "\"optimizer\": \"adam\", \"dtpye\": 1") ==
        "s.json: /training/dtpye: unknown key; did you mean \"dtype\"?");
  CHECK(error_of(kBase, "\"tp\": 8", "\"tp\": \"8\"") ==
        "s.json: /search/megatron/tp: expected a positive integer at most 1048576, got the string \"8\"");
  CHECK(error_of(kBase, "\"dp\": 16", "\"dp\": 8") ==
        "s.json: /search/megatron: tp·pp·dp = 8·12·8 = 768 GPUs, but the cluster has 1536");
  CHECK(error_of(kBase, "\"recompute\": \"full\"", "\"recompute\": \"ful\"") ==
        "s.json: /search/megatron/recompute: expected one of \"none\", \"selective\", or \"full\", "
        "got \"ful\"; did you mean \"full\"?");
  CHECK(error_of(kBase, "\"microbatches\": \"auto\"", "\"microbatches\": 7") ==
        "s.json: /training/microbatches: expected a divisor of global_batch_size 1536, got 7");
  CHECK(error_of(kBase, "\"microbatches\": \"auto\"", "\"microbatches\": \"many\"") ==
        "s.json: /training/microbatches: expected a positive integer or \"auto\", got the string \"many\"");
  CHECK(error_of(kBase, "\"schema_version\": 1", "\"schema_version\": 2") ==
        "s.json: /schema_version: expected 1 (scenario format v1), got 2");
  CHECK(error_of(kBase, "\"mode\": \"fixed\"", "\"mode\": \"alpa\"") ==
        "s.json: /search/megatron: only allowed with \"mode\": \"fixed\", got mode \"alpa\"");
  CHECK(error_of(kBase, "\"pp\": 12", "\"pp\": 24, \"interleave\": 1") ==
        "s.json: /search/megatron: duplicate key \"interleave\"");
}

TEST_CASE("every shipped scenario loads") {
  const std::filesystem::path dir = std::filesystem::path(ALPASIM_SOURCE_DIR) / "scenarios";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    auto s = load_scenario(entry.path());
    INFO(entry.path().string());
    CHECK_MESSAGE(s.ok(), s.status().message());
    ++count;
  }
  CHECK(count >= 1);
}

TEST_CASE("the embedded default scenario is scenarios/default.json") {
  Scenario embedded = load_default_scenario().value();
  Scenario file =
      load_scenario(std::filesystem::path(ALPASIM_SOURCE_DIR) / "scenarios/default.json").value();
  CHECK(scenario_to_json(embedded) == scenario_to_json(file));
}

}  // namespace
}  // namespace alpasim::driver
