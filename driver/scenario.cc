#include "driver/scenario.h"

#include <fstream>
#include <sstream>

#include "core/limits.h"
#include "core/text.h"
#include "driver/capacity.h"
#include "driver/sweep.h"
#include "planner/search/search.h"

namespace alpasim::driver {
namespace {

using core::Json;
using core::JsonObject;
using core::JsonValue;
using core::Result;
namespace L = core::limits;

// "fixed" (evaluate the given plan) and the planner's modes: "alpa" and the baselines.
const std::vector<std::string>& search_modes() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> modes = planner::search_mode_names();
    modes.insert(modes.begin() + 1, "fixed");
    return modes;
  }();
  return k;
}
const std::vector<std::string>& optimizers() {
  static const std::vector<std::string> k = {"adam", "sgd"};
  return k;
}
// Training dtypes: the formats a whole model trains in; fp8 and the Blackwell block-scaled
// mxfp8 / nvfp4 are the GEMM formats of a bf16 run (Transformer Engine's recipes).
const std::vector<std::string>& training_dtypes() {
  static const std::vector<std::string> k = {"fp32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4"};
  return k;
}

Result<TrainingConfig> parse_training(JsonObject obj) {
  TrainingConfig t;
  ALPASIM_ASSIGN_OR_RETURN(t.global_batch_size, obj.get_count("global_batch_size", L::kMaxGlobalBatchSize));
  ALPASIM_ASSIGN_OR_RETURN(std::string dtype, obj.get_enum("dtype", training_dtypes()));
  if (dtype == "mxfp8" || dtype == "nvfp4") {
    t.block_scaled_dtype = dtype;
    t.dtype = core::DType::kBf16;
  } else {
    t.dtype = *core::parse_dtype(dtype);
  }
  ALPASIM_ASSIGN_OR_RETURN(t.optimizer, obj.get_enum_or("optimizer", optimizers(), "adam"));
  if (auto mb = obj.optional("microbatches")) {
    if (!(mb->is_string() && mb->raw() == "auto")) {
      if (!mb->is_integer()) return mb->type_error("a positive integer or \"auto\"");
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, mb->as_count(L::kMaxGlobalBatchSize));
      if (t.global_batch_size % n != 0) {
        return mb->error("expected a divisor of global_batch_size " +
                         std::to_string(t.global_batch_size) + ", got " + std::to_string(n));
      }
      t.num_microbatches = n;
    }
  }
  if (obj.has("seq_len")) {
    ALPASIM_ASSIGN_OR_RETURN(t.seq_len, obj.get_count("seq_len", L::kMaxSeqLen));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return t;
}

// search.megatron.tp_comm_overlap_cfg: Megatron's --tp-comm-overlap-cfg (TE's ub_cfgs) as
// JSON: {"proj_fprop": {"method": "pipeline", "num_sm": 24, ...}, ...}. As in Transformer
// Engine, each given role's keys replace that role's defaults.
Result<sim::lowering::TpOverlapConfig> parse_tp_overlap_config(const JsonValue& value) {
  using namespace sim::lowering;
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, value.as_object());
  TpOverlapConfig config;
  for (int i = 0; i < kNumTpOverlapGemmRoles; ++i) {
    const auto role = static_cast<TpOverlapGemmRole>(i);
    auto entry = obj.optional(tp_overlap_gemm_role_name(role));
    if (!entry) continue;
    ALPASIM_ASSIGN_OR_RETURN(JsonObject e, entry->as_object());
    TpOverlapGemm& g = config[role];
    if (auto method = e.optional("method")) {
      static const std::vector<std::string> kMethods = {
          tp_overlap_method_name(TpOverlapMethod::kRingExchange),
          tp_overlap_method_name(TpOverlapMethod::kPipeline), tp_overlap_method_name(TpOverlapMethod::kBulk)};
      ALPASIM_ASSIGN_OR_RETURN(std::string name, method->as_enum(kMethods));
      g.method = *parse_tp_overlap_method(name);
    }
    if (auto sm = e.optional("num_sm")) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, sm->as_int(0, 1024, "an SM count (0 .. the GPU's SMs - 1)"));
      g.num_sm = static_cast<int>(n);
    }
    ALPASIM_ASSIGN_OR_RETURN(g.set_sm_margin, e.get_bool_or("set_sm_margin", g.set_sm_margin));
    if (auto splits = e.optional("num_splits")) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t n, splits->as_int(1, 1024, "a chunk count >= 1"));
      g.num_splits = static_cast<int>(n);
    }
    ALPASIM_ASSIGN_OR_RETURN(g.aggregate, e.get_bool_or("aggregate", g.aggregate));
    ALPASIM_ASSIGN_OR_RETURN(g.fp8_buf, e.get_bool_or("fp8_buf", g.fp8_buf));
    // Accepted so that NeMo's and Megatron's configurations read as written; it changes
    // kernel scheduling, which the model does not price.
    if (auto cga = e.optional("cga_size")) ALPASIM_RETURN_IF_ERROR(cga->as_int(1, 16, "1 .. 16").status());
    if (auto atomic = e.optional("atomic_gemm")) {
      ALPASIM_ASSIGN_OR_RETURN(bool on, atomic->as_bool());
      if (on) return atomic->error("atomic GEMM overlap is not modelled; expected false");
    }
    ALPASIM_RETURN_IF_ERROR(e.finish());
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return config;
}

// The settings as parse_tp_overlap_config reads them back (every role, every modelled key).
Json tp_overlap_config_json(const sim::lowering::TpOverlapConfig& config) {
  using namespace sim::lowering;
  Json j = Json::object();
  for (int i = 0; i < kNumTpOverlapGemmRoles; ++i) {
    const auto role = static_cast<TpOverlapGemmRole>(i);
    const TpOverlapGemm& g = config[role];
    Json e = {{"method", tp_overlap_method_name(g.method)},
              {"num_sm", g.num_sm},
              {"set_sm_margin", g.set_sm_margin},
              {"aggregate", g.aggregate},
              {"fp8_buf", g.fp8_buf}};
    if (g.num_splits > 0) e["num_splits"] = g.num_splits;
    j[tp_overlap_gemm_role_name(role)] = e;
  }
  return j;
}

Result<MegatronPlanConfig> parse_megatron(JsonObject obj) {
  MegatronPlanConfig m;
  ALPASIM_ASSIGN_OR_RETURN(m.tp, obj.get_count("tp", L::kMaxGpus));
  ALPASIM_ASSIGN_OR_RETURN(m.pp, obj.get_count("pp", L::kMaxGpus));
  ALPASIM_ASSIGN_OR_RETURN(m.dp, obj.get_count("dp", L::kMaxGpus));
  ALPASIM_ASSIGN_OR_RETURN(m.cp, obj.get_count_or("cp", L::kMaxGpus, 1));
  ALPASIM_ASSIGN_OR_RETURN(m.microbatch_size, obj.get_count("microbatch_size", L::kMaxGlobalBatchSize));
  ALPASIM_ASSIGN_OR_RETURN(m.interleave, obj.get_count_or("interleave", L::kMaxInterleave, 1));
  ALPASIM_ASSIGN_OR_RETURN(std::string recompute,
                           obj.get_enum("recompute", schema::recompute_names()));
  m.recompute = schema::parse_recompute(recompute);
  ALPASIM_ASSIGN_OR_RETURN(m.sequence_parallel, obj.get_bool_or("sequence_parallel", false));
  auto zero = obj.optional("zero_stage");
  if (zero) {
    ALPASIM_ASSIGN_OR_RETURN(m.zero_stage, zero->as_int(0, 3, "0, 1, 2 or 3"));
  }
  // Megatron-LM's --use-distributed-optimizer is ZeRO stage 1.
  if (auto dist = obj.optional("distributed_optimizer")) {
    ALPASIM_ASSIGN_OR_RETURN(bool on, dist->as_bool());
    if (zero && (m.zero_stage >= 1) != on) {
      return dist->error("contradicts zero_stage " + std::to_string(m.zero_stage) +
                         " (the distributed optimizer is zero_stage 1)");
    }
    if (on && !zero) m.zero_stage = 1;
  }
  ALPASIM_ASSIGN_OR_RETURN(m.tp_comm_overlap, obj.get_bool_or("tp_comm_overlap", false));
  if (auto cfg = obj.optional("tp_comm_overlap_cfg")) {
    ALPASIM_ASSIGN_OR_RETURN(m.tp_comm_overlap_cfg, parse_tp_overlap_config(*cfg));
    if (!m.tp_comm_overlap) return cfg->error("needs \"tp_comm_overlap\": true");
  }
  ALPASIM_ASSIGN_OR_RETURN(m.overlap_grad_reduce, obj.get_bool_or("overlap_grad_reduce", false));
  ALPASIM_ASSIGN_OR_RETURN(m.overlap_param_gather, obj.get_bool_or("overlap_param_gather", false));
  ALPASIM_ASSIGN_OR_RETURN(m.overlap_p2p_comm, obj.get_bool_or("overlap_p2p_comm", true));
  ALPASIM_ASSIGN_OR_RETURN(m.gradient_accumulation_fusion,
                           obj.get_bool_or("gradient_accumulation_fusion", false));
  ALPASIM_ASSIGN_OR_RETURN(m.ep, obj.get_count_or("ep", L::kMaxExperts, 1));
  ALPASIM_ASSIGN_OR_RETURN(m.etp, obj.get_count_or("etp", L::kMaxGpus, 0));
  ALPASIM_ASSIGN_OR_RETURN(m.first_stage_layers, obj.get_count_or("first_stage_layers", 1024, 0));
  ALPASIM_ASSIGN_OR_RETURN(m.last_stage_layers, obj.get_count_or("last_stage_layers", 1024, 0));
  ALPASIM_ASSIGN_OR_RETURN(m.account_for_embedding,
                           obj.get_bool_or("account_for_embedding_in_pipeline_split", false));
  ALPASIM_ASSIGN_OR_RETURN(m.account_for_loss, obj.get_bool_or("account_for_loss_in_pipeline_split", false));
  if (auto layout = obj.optional("pipeline_model_parallel_layout")) {
    ALPASIM_ASSIGN_OR_RETURN(m.pipeline_layout, layout->as_string());
    if (m.pipeline_layout.empty() || m.pipeline_layout.size() > 4096) {
      return layout->error("expected a layout of 1 to 4,096 characters, got " +
                           std::to_string(m.pipeline_layout.size()));
    }
  }
  if (auto bucket = obj.optional("ddp_bucket_size")) {
    ALPASIM_ASSIGN_OR_RETURN(m.ddp_bucket_size, bucket->as_int(1, std::int64_t{1} << 50, "a parameter count >= 1"));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return m;
}

Result<SearchConfig> parse_search(JsonObject obj, const std::filesystem::path& base_dir) {
  SearchConfig s;
  ALPASIM_ASSIGN_OR_RETURN(s.mode, obj.get_enum_or("mode", search_modes(), "alpa"));
  auto megatron = obj.optional("megatron");
  auto plan = obj.optional("plan");
  if (s.mode == "fixed") {
    if (megatron.has_value() == plan.has_value()) {
      return obj.value().error(
          "mode \"fixed\" needs exactly one of \"megatron\" (a Megatron-style plan) or \"plan\" "
          "(a plan file), got " + std::string(megatron ? "both" : "neither"));
    }
  } else if (megatron || plan) {
    const JsonValue& extra = megatron ? *megatron : *plan;
    return extra.error("only allowed with \"mode\": \"fixed\", got mode \"" + s.mode + "\"");
  }
  if (megatron) {
    ALPASIM_ASSIGN_OR_RETURN(JsonObject m, megatron->as_object());
    ALPASIM_ASSIGN_OR_RETURN(s.megatron, parse_megatron(std::move(m)));
  }
  if (plan) {
    ALPASIM_ASSIGN_OR_RETURN(s.plan_file_as_written, plan->as_string());
    std::filesystem::path p(s.plan_file_as_written);
    s.plan_file = p.is_absolute() ? p : base_dir / p;
    if (!std::filesystem::exists(*s.plan_file)) {
      return plan->error("file not found: " + s.plan_file->string());
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(s.time_limit_s,
                           obj.get_number_in_or("time_limit_s", 0.001, 86400,
                                                "a time in (0, 86400] seconds", 600));
  ALPASIM_ASSIGN_OR_RETURN(s.max_points, obj.get_count_or("max_points", 1000000, 0));
  ALPASIM_ASSIGN_OR_RETURN(s.compare_baselines, obj.get_bool_or("baselines", true));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return s;
}

Result<ProfileRef> parse_profile(const JsonValue& v, const std::filesystem::path& base_dir) {
  ProfileRef p;
  if (v.is_string()) {
    if (v.raw() != "auto") return v.type_error("\"auto\" or an object {\"preset\": ...} / {\"file\": ...}");
    p.preset = "auto";
    return p;
  }
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  auto preset = obj.optional("preset");
  auto file = obj.optional("file");
  if (preset.has_value() == file.has_value()) {
    return v.error("expected exactly one of \"preset\" or \"file\", got " +
                   std::string(preset ? "both" : "neither"));
  }
  if (preset) {
    ALPASIM_ASSIGN_OR_RETURN(p.preset, preset->as_enum(cluster::cluster_preset_names()));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(p.file_as_written, file->as_string());
    std::filesystem::path path(p.file_as_written);
    p.file = path.is_absolute() ? path : base_dir / path;
    if (!std::filesystem::exists(p.file)) return file->error("file not found: " + p.file.string());
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return p;
}

// fp8, mxfp8 and nvfp4 have a price in the Megatron lowering only
// (sim::lowering::priced_by_lowering_only; planner/search/search.h).
constexpr const char* kLoweringOnlyPrecision =
    " is priced by the Megatron lowering only: fixed Megatron plans (\"search\": {\"mode\": "
    "\"fixed\", \"megatron\": ...}) and the Megatron grid (\"search\": {\"mode\": \"megatron\"}); "
    "the alpa search, its other baselines and plan files price fp32, fp16 or bf16";

// Cross-block checks that no single block can make.
core::Status check_consistency(const Scenario& s, const JsonValue& root) {
  const JsonValue dtype_at =
      root.child("training", root.raw()["training"]).child("dtype", root.raw()["training"]["dtype"]);
  const auto format = *sim::lowering::parse_block_scaled(s.training.block_scaled_dtype);
  if (auto st = sim::lowering::check_precision_on_gpu(s.training.dtype, format, s.cluster.gpu); !st.ok()) {
    return dtype_at.error(st.message());
  }
  if (sim::lowering::priced_by_lowering_only(s.training.dtype, format) && !s.search.megatron &&
      s.search.mode != "megatron") {
    return dtype_at.error(sim::lowering::precision_name(s.training.dtype, format) + kLoweringOnlyPrecision);
  }
  if (!s.search.megatron) return core::Status();
  const MegatronPlanConfig& m = *s.search.megatron;
  const JsonValue where = root.child("search", root.raw()["search"]).child("megatron",
      root.raw()["search"]["megatron"]);
  // Every factor is bounded at parse time (tp, pp, dp <= 2^20, microbatch_size and
  // microbatches <= 2^22, interleave <= 2^10), so these products stay below 2^63 and
  // none of them is 0 (microbatches·dp·microbatch_size is formed only once dp·microbatch_size
  // is known to divide global_batch_size).
  // cp <= 2^20 too, so tp·pp·cp·dp < 2^80 could overflow: check it in steps.
  if (m.cp > 1 && m.tp * m.pp * m.dp > s.cluster.num_gpus()) {
    return where.error("tp·pp·cp·dp exceeds the cluster's " + std::to_string(s.cluster.num_gpus()) + " GPUs");
  }
  const std::int64_t gpus = m.tp * m.pp * m.cp * m.dp;
  if (gpus != s.cluster.num_gpus()) {
    // cp is named only when the plan uses it, as the scenario most likely does not.
    const std::string cp_name = m.cp > 1 ? "cp·" : "";
    const std::string cp_value = m.cp > 1 ? std::to_string(m.cp) + "·" : "";
    return where.error("tp·pp·" + cp_name + "dp = " + std::to_string(m.tp) + "·" +
                       std::to_string(m.pp) + "·" + cp_value + std::to_string(m.dp) + " = " +
                       std::to_string(gpus) + " GPUs, but the cluster has " +
                       std::to_string(s.cluster.num_gpus()));
  }
  // Tensor parallelism stays on NVLink: one node, or one multi-node NVLink domain (NVL72).
  if (m.tp > s.cluster.nvlink_domain_gpus()) {
    const bool one_node = s.cluster.nvlink_domain_nodes_in_use() == 1;
    return where.error("tp " + std::to_string(m.tp) + " spans " +
                       (one_node ? "nodes" : "NVLink domains") + "; expected at most " +
                       std::to_string(s.cluster.nvlink_domain_gpus()) +
                       (one_node ? " (GPUs per node)" : " (GPUs of one NVLink domain)"));
  }
  if (s.training.global_batch_size % (m.dp * m.microbatch_size) != 0) {
    return where.error("global_batch_size " + std::to_string(s.training.global_batch_size) +
                       " is not a multiple of dp·microbatch_size = " +
                       std::to_string(m.dp * m.microbatch_size));
  }
  if (s.training.num_microbatches &&
      *s.training.num_microbatches * m.dp * m.microbatch_size != s.training.global_batch_size) {
    return where.error("dp·microbatch_size·microbatches = " +
                       std::to_string(m.dp * m.microbatch_size * *s.training.num_microbatches) +
                       " differs from global_batch_size " +
                       std::to_string(s.training.global_batch_size));
  }
  if (m.interleave > 1 && m.pp == 1) {
    return where.error("interleave " + std::to_string(m.interleave) + " needs pp > 1");
  }
  if (const auto* t = std::get_if<ir::TransformerConfig>(&s.model.spec)) {
    if (m.first_stage_layers == 0 && m.last_stage_layers == 0 && !m.account_for_embedding &&
        !m.account_for_loss && m.pipeline_layout.empty() && t->num_layers % (m.pp * m.interleave) != 0) {
      return where.error("num_layers " + std::to_string(t->num_layers) +
                         " is not a multiple of pp·interleave = " +
                         std::to_string(m.pp * m.interleave));
    }
    if (t->num_heads % m.tp != 0) {
      return where.error("num_heads " + std::to_string(t->num_heads) +
                         " is not a multiple of tp " + std::to_string(m.tp));
    }
  }
  return core::Status();
}

// A fixed plan file must have been made for this scenario: the same model, GPU kind and
// count, global batch and dtype (issue 18: a 16-sample plan in a 64-sample scenario was
// evaluated for 16 and reported as 64). The error names the first key that differs.
core::Status check_plan_matches(const Scenario& s, const JsonValue& plan_value) {
  ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, schema::read_plan_file(*s.search.plan_file));
  auto differs = [&](const std::string& what, const std::string& in_scenario,
                     const std::string& in_plan) {
    return plan_value.error("the plan was made for " + what + " " + in_plan +
                            ", the scenario has " + in_scenario);
  };
  Json scenario_model = ir::model_config_to_json(s.model);
  Json plan_model = ir::model_config_to_json(plan.model);
  scenario_model.erase("name");  // a display name only
  plan_model.erase("name");
  if (scenario_model != plan_model) {
    for (const auto& [key, value] : scenario_model.items()) {
      auto it = plan_model.find(key);
      if (it == plan_model.end() || *it != value) {
        return differs("model." + key, value.dump(), it == plan_model.end() ? "(none)" : it->dump());
      }
    }
    for (const auto& [key, value] : plan_model.items()) {
      if (!scenario_model.contains(key)) return differs("model." + key, "(none)", value.dump());
    }
  }
  if (plan.cluster.gpu.name != s.cluster.gpu.name) {
    return differs("cluster GPU", s.cluster.gpu.name, plan.cluster.gpu.name);
  }
  if (plan.cluster.num_gpus() != s.cluster.num_gpus() ||
      plan.cluster.gpus_per_node != s.cluster.gpus_per_node) {
    auto shape = [](const cluster::ClusterSpec& c) {
      return std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node) + " GPUs";
    };
    return differs("cluster", shape(s.cluster), shape(plan.cluster));
  }
  if (plan.global_batch_size != s.training.global_batch_size) {
    return differs("global_batch_size", std::to_string(s.training.global_batch_size),
                   std::to_string(plan.global_batch_size));
  }
  if (plan.dtype != s.training.dtype) {
    return differs("dtype", std::string(core::dtype_name(s.training.dtype)),
                   std::string(core::dtype_name(plan.dtype)));
  }
  return core::Status();
}

Result<Scenario> parse_document(const core::JsonDocument& doc,
                                const std::filesystem::path& base_dir) {
  JsonValue root = JsonValue::root(doc);
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, root.as_object());
  Scenario s;
  s.file = doc.file;
  ALPASIM_ASSIGN_OR_RETURN(JsonValue version, obj.required("schema_version", "1"));
  ALPASIM_RETURN_IF_ERROR(version.as_int(1, 1, "1 (scenario format v1)"));
  ALPASIM_ASSIGN_OR_RETURN(s.name, obj.get_string_or("name", ""));
  ALPASIM_ASSIGN_OR_RETURN(s.description, obj.get_string_or("description", ""));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue model, obj.required("model", "a model block"));
  ALPASIM_ASSIGN_OR_RETURN(s.model, ir::parse_model_config(model, base_dir));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue cluster, obj.required("cluster", "a cluster block"));
  ALPASIM_ASSIGN_OR_RETURN(s.cluster, cluster::parse_cluster_spec(cluster));
  ALPASIM_ASSIGN_OR_RETURN(JsonObject training, obj.get_object("training"));
  ALPASIM_ASSIGN_OR_RETURN(s.training, parse_training(std::move(training)));
  if (s.training.seq_len) {
    // The training length wins over the model's (an HF config's max_position_embeddings
    // is the longest context the model supports, not what a run trains on).
    if (auto* t = std::get_if<ir::TransformerConfig>(&s.model.spec)) {
      t->seq_len = *s.training.seq_len;
    } else if (auto* f = std::get_if<ir::ModelFileConfig>(&s.model.spec); f != nullptr && f->format == "hf_config") {
      f->seq_len = *s.training.seq_len;
    } else {
      return root.child("training", root.raw()["training"])
          .child("seq_len", root.raw()["training"]["seq_len"])
          .error("expected no seq_len for this model (it applies to transformers: a builtin "
                 "transformer or an hf_config file), got " + std::to_string(*s.training.seq_len));
    }
  }
  if (auto profile = obj.optional("profile")) {
    ALPASIM_ASSIGN_OR_RETURN(s.profile, parse_profile(*profile, base_dir));
  } else {
    s.profile.preset = "auto";
  }
  if (auto search = obj.optional("search")) {
    ALPASIM_ASSIGN_OR_RETURN(JsonObject search_obj, search->as_object());
    ALPASIM_ASSIGN_OR_RETURN(s.search, parse_search(std::move(search_obj), base_dir));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(s.search, parse_search(JsonObject(root.child("search", Json::object())),
                                                    base_dir));
  }
  // what_if and capacity belong to `alpa-sim sweep` / `alpa-sim capacity`; they are kept
  // whole here and validated by those commands.
  for (const char* key : {"what_if", "capacity"}) {
    if (auto block = obj.optional(key)) {
      ALPASIM_RETURN_IF_ERROR(block->as_object());
      (std::string(key) == "what_if" ? s.what_if : s.capacity) = block->raw();
    }
  }
  // Validated strictly at load (driver/sweep.h, driver/capacity.h); the commands re-read the
  // kept blocks into their typed form.
  if (auto block = obj.optional("what_if")) {
    ALPASIM_RETURN_IF_ERROR(parse_what_if(*block, base_dir).status());
  }
  if (auto block = obj.optional("capacity")) {
    ALPASIM_RETURN_IF_ERROR(parse_capacity(*block).status());
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  // The largest microbatch the run builds: a fixed Megatron plan's (each data-parallel
  // replica's graph), else the global batch, which a search may run as one microbatch.
  const bool fixed_microbatch = s.search.megatron.has_value();
  const std::int64_t samples =
      fixed_microbatch ? s.search.megatron->microbatch_size : s.training.global_batch_size;
  if (std::string problem = ir::model_size_problem(s.model, samples); !problem.empty()) {
    return model.error(problem + (fixed_microbatch ? " (search.megatron.microbatch_size "
                                                   : " (global_batch_size ") +
                       std::to_string(samples) + ")");
  }
  ALPASIM_RETURN_IF_ERROR(check_consistency(s, root));
  if (s.search.plan_file) {
    const Json& search = root.raw()["search"];
    ALPASIM_RETURN_IF_ERROR(check_plan_matches(
        s, root.child("search", search).child("plan", search["plan"])));
  }
  if (s.name.empty()) s.name = s.model.name;
  return s;
}

}  // namespace

Result<Scenario> parse_scenario(std::string_view text, const std::string& file,
                                const std::filesystem::path& base_dir) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::parse_json_text(text, file));
  return parse_document(doc, base_dir);
}

Result<Scenario> load_scenario(const std::filesystem::path& path) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  return parse_document(doc, path.parent_path());
}

Result<Scenario> load_default_scenario() {
  return parse_scenario(default_scenario_text(), "(built-in default scenario)",
                        std::filesystem::path(ALPASIM_SOURCE_DIR) / "scenarios");
}

core::Json scenario_to_json(const Scenario& s) {
  Json j;
  j["schema_version"] = Scenario::kSchemaVersion;
  j["name"] = s.name;
  if (!s.description.empty()) j["description"] = s.description;
  j["model"] = ir::model_config_to_json(s.model);
  j["cluster"] = cluster::cluster_spec_to_json(s.cluster);
  Json training;
  training["global_batch_size"] = s.training.global_batch_size;
  training["dtype"] = s.training.block_scaled_dtype.empty()
                          ? std::string(core::dtype_name(s.training.dtype))
                          : s.training.block_scaled_dtype;
  training["optimizer"] = s.training.optimizer;
  if (s.training.seq_len) training["seq_len"] = *s.training.seq_len;
  training["microbatches"] =
      s.training.num_microbatches ? Json(*s.training.num_microbatches) : Json("auto");
  j["training"] = training;
  j["profile"] = s.profile.file_as_written.empty() ? Json(s.profile.preset)
                                                   : Json{{"file", s.profile.file_as_written}};
  if (s.profile.preset != "auto" && s.profile.file_as_written.empty()) {
    j["profile"] = Json{{"preset", s.profile.preset}};
  }
  Json search;
  search["mode"] = s.search.mode;
  search["time_limit_s"] = s.search.time_limit_s;
  if (s.search.max_points > 0) search["max_points"] = s.search.max_points;
  search["baselines"] = s.search.compare_baselines;
  if (const auto& m = s.search.megatron) {
    search["megatron"] = {{"tp", m->tp},
                          {"pp", m->pp},
                          {"dp", m->dp},
                          {"microbatch_size", m->microbatch_size},
                          {"interleave", m->interleave},
                          {"recompute", std::string(schema::recompute_name(m->recompute))},
                          {"sequence_parallel", m->sequence_parallel},
                          {"zero_stage", m->zero_stage},
                          {"tp_comm_overlap", m->tp_comm_overlap},
                          {"overlap_grad_reduce", m->overlap_grad_reduce},
                          {"overlap_param_gather", m->overlap_param_gather},
                          {"overlap_p2p_comm", m->overlap_p2p_comm}};
    if (m->tp_comm_overlap_cfg) search["megatron"]["tp_comm_overlap_cfg"] = tp_overlap_config_json(*m->tp_comm_overlap_cfg);
    if (m->ddp_bucket_size > 0) search["megatron"]["ddp_bucket_size"] = m->ddp_bucket_size;
    if (m->gradient_accumulation_fusion) search["megatron"]["gradient_accumulation_fusion"] = true;
    if (m->ep > 1) search["megatron"]["ep"] = m->ep;
    if (m->etp > 0) search["megatron"]["etp"] = m->etp;
    if (m->first_stage_layers > 0) search["megatron"]["first_stage_layers"] = m->first_stage_layers;
    if (m->cp > 1) search["megatron"]["cp"] = m->cp;
    if (m->account_for_embedding) search["megatron"]["account_for_embedding_in_pipeline_split"] = true;
    if (m->account_for_loss) search["megatron"]["account_for_loss_in_pipeline_split"] = true;
    if (m->last_stage_layers > 0) search["megatron"]["last_stage_layers"] = m->last_stage_layers;
    if (!m->pipeline_layout.empty()) search["megatron"]["pipeline_model_parallel_layout"] = m->pipeline_layout;
  }
  if (s.search.plan_file) search["plan"] = s.search.plan_file_as_written;
  j["search"] = search;
  if (!s.what_if.is_null()) j["what_if"] = s.what_if;
  if (!s.capacity.is_null()) j["capacity"] = s.capacity;
  return j;
}

}  // namespace alpasim::driver
