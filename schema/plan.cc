#include "schema/plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/limits.h"
#include "core/text.h"

namespace alpasim::schema {
namespace {

using core::Json;
using core::JsonObject;
using core::JsonValue;
using core::Result;

// Layer indices count the model's layers plus prologue and epilogue; graph_json models may
// number layers freely, so the bound is wider than core::limits::kMaxLayers.
constexpr std::int64_t kMaxLayerIndex = std::int64_t{1} << 20;
const std::string kLayerIndexWhat = "a layer index in [0, " + std::to_string(kMaxLayerIndex) + "]";
const std::string kDeviceIdWhat =
    "a device id in [0, " + std::to_string(core::limits::kMaxGpus - 1) + "]";

Result<ShardingSpec> parse_spec(const JsonValue& v) {
  ALPASIM_ASSIGN_OR_RETURN(std::string text, v.as_string());
  auto spec = ShardingSpec::parse(text);
  if (!spec.ok()) return v.error(spec.status().message());
  return spec;
}

Result<OperatorSharding> parse_sharding(const JsonValue& v) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  OperatorSharding s;
  ALPASIM_ASSIGN_OR_RETURN(s.op, obj.get_string("op"));
  ALPASIM_ASSIGN_OR_RETURN(s.strategy, obj.get_string_or("strategy", ""));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue inputs, obj.required("inputs", "an array of sharding specs"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, inputs.as_array());
  for (const auto& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(ShardingSpec spec, parse_spec(item));
    s.inputs.push_back(std::move(spec));
  }
  ALPASIM_ASSIGN_OR_RETURN(JsonValue output, obj.required("output", "a sharding spec"));
  ALPASIM_ASSIGN_OR_RETURN(s.output, parse_spec(output));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return s;
}

Result<std::pair<std::int64_t, std::int64_t>> parse_pair(JsonObject& obj, std::string_view key,
                                                        std::string_view what) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, obj.required(key, what));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v.as_array());
  if (items.size() != 2) return v.type_error(what);
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t a, items[0].as_count(core::limits::kMaxGpus));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t b, items[1].as_count(core::limits::kMaxGpus));
  return std::make_pair(a, b);
}

Result<PlanStage> parse_stage(const JsonValue& v) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
  PlanStage st;
  ALPASIM_ASSIGN_OR_RETURN(JsonValue layers, obj.required("layers", "[begin, end)"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> range, layers.as_array());
  if (range.size() != 2) return layers.type_error("[begin, end) as two integers");
  ALPASIM_ASSIGN_OR_RETURN(st.layer_begin, range[0].as_int(0, kMaxLayerIndex, kLayerIndexWhat));
  ALPASIM_ASSIGN_OR_RETURN(st.layer_end, range[1].as_int(1, kMaxLayerIndex, kLayerIndexWhat));
  if (st.layer_end <= st.layer_begin) {
    return layers.error("expected begin < end, got [" + std::to_string(st.layer_begin) + ", " +
                        std::to_string(st.layer_end) + ")");
  }
  ALPASIM_ASSIGN_OR_RETURN(auto submesh, parse_pair(obj, "submesh", "[nodes, gpus_per_node]"));
  st.submesh_nodes = submesh.first;
  st.submesh_gpus_per_node = submesh.second;
  ALPASIM_ASSIGN_OR_RETURN(auto logical, parse_pair(obj, "logical_mesh", "[rows, cols]"));
  st.logical_rows = logical.first;
  st.logical_cols = logical.second;
  ALPASIM_ASSIGN_OR_RETURN(JsonValue ids, obj.required("device_ids", "an array of device ids"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> id_items, ids.as_array());
  for (const auto& item : id_items) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t id, item.as_int(0, core::limits::kMaxGpus - 1, kDeviceIdWhat));
    st.device_ids.push_back(id);
  }
  if (auto shardings = obj.optional("shardings")) {
    ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, shardings->as_array());
    for (const auto& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(OperatorSharding s, parse_sharding(item));
      st.shardings.push_back(std::move(s));
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(st.weight_update_sharding,
                           obj.get_bool_or("weight_update_sharding", false));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return st;
}

template <class E>
E enum_from_name(std::string_view name, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  ALPASIM_CHECK(false) << "unknown enum name " << name;
  return E{};
}

}  // namespace

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> k = {"gpipe", "1f1b", "interleaved_1f1b"};
  return k;
}
std::string_view schedule_name(Schedule s) { return schedule_names().at(static_cast<int>(s)); }

const std::vector<std::string>& p2p_mode_names() {
  static const std::vector<std::string> k = {"async", "blocking"};
  return k;
}

const std::vector<std::string>& recompute_names() {
  static const std::vector<std::string> k = {"none", "selective", "full"};
  return k;
}
std::string_view recompute_name(Recompute r) { return recompute_names().at(static_cast<int>(r)); }
Recompute parse_recompute(std::string_view name) {
  return enum_from_name<Recompute>(name, recompute_names());
}

bool operator==(const Plan& a, const Plan& b) { return plan_to_json(a) == plan_to_json(b); }

Result<Plan> parse_plan(const JsonValue& value, const std::filesystem::path& base_dir) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, value.as_object());
  ALPASIM_ASSIGN_OR_RETURN(JsonValue version, obj.required("schema_version", "1"));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t v, version.as_int(1, 1, "1 (plan format v1)"));
  (void)v;
  Plan plan;
  ALPASIM_ASSIGN_OR_RETURN(plan.generator, obj.get_string_or("generator", ""));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue model, obj.required("model", "a model block"));
  ALPASIM_ASSIGN_OR_RETURN(plan.model, ir::parse_model_config(model, base_dir));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue cluster, obj.required("cluster", "a cluster block"));
  ALPASIM_ASSIGN_OR_RETURN(plan.cluster, cluster::parse_cluster_spec(cluster));
  ALPASIM_ASSIGN_OR_RETURN(std::string dtype, obj.get_enum("dtype", core::dtype_names()));
  plan.dtype = *core::parse_dtype(dtype);
  ALPASIM_ASSIGN_OR_RETURN(plan.global_batch_size,
                           obj.get_count("global_batch_size", core::limits::kMaxGlobalBatchSize));
  ALPASIM_ASSIGN_OR_RETURN(plan.num_microbatches,
                           obj.get_count("num_microbatches", core::limits::kMaxGlobalBatchSize));
  ALPASIM_ASSIGN_OR_RETURN(std::string schedule, obj.get_enum("schedule", schedule_names()));
  plan.schedule = enum_from_name<Schedule>(schedule, schedule_names());
  ALPASIM_ASSIGN_OR_RETURN(plan.interleave,
                           obj.get_count_or("interleave", core::limits::kMaxInterleave, 1));
  ALPASIM_ASSIGN_OR_RETURN(std::string p2p, obj.get_enum_or("p2p", p2p_mode_names(), "async"));
  plan.p2p = enum_from_name<P2pMode>(p2p, p2p_mode_names());
  ALPASIM_ASSIGN_OR_RETURN(plan.gradient_accumulation_fusion,
                           obj.get_bool_or("gradient_accumulation_fusion", true));
  ALPASIM_ASSIGN_OR_RETURN(std::string recompute, obj.get_enum("recompute", recompute_names()));
  plan.recompute = parse_recompute(recompute);
  ALPASIM_ASSIGN_OR_RETURN(JsonValue stages, obj.required("stages", "an array of stages"));
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, stages.as_array());
  if (items.empty()) return stages.type_error("a non-empty array of stages");
  for (const auto& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(PlanStage st, parse_stage(item));
    plan.stages.push_back(std::move(st));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  // One microbatch of every data-parallel row: the largest batch one graph of the plan holds.
  const std::int64_t samples = plan.num_microbatches > 0 && plan.global_batch_size % plan.num_microbatches == 0
                                   ? plan.global_batch_size / plan.num_microbatches
                                   : plan.global_batch_size;
  if (std::string problem = ir::model_size_problem(plan.model, samples); !problem.empty()) {
    return model.error(problem + " (global_batch_size " + std::to_string(plan.global_batch_size) +
                       " / num_microbatches " + std::to_string(plan.num_microbatches) + ")");
  }
  ALPASIM_RETURN_IF_ERROR(validate_plan(plan, value));
  return plan;
}

core::Status validate_plan(const Plan& plan, const JsonValue& where) {
  const auto& stages = plan.stages;
  const auto num_stages = static_cast<std::int64_t>(stages.size());
  auto stage_error = [&](std::size_t i, const std::string& what) {
    return where.error("stages/" + std::to_string(i) + ": " + what);
  };
  if (plan.schedule != Schedule::kInterleavedOneFOneB && plan.interleave != 1) {
    return where.error("interleave " + std::to_string(plan.interleave) +
                       " needs schedule \"interleaved_1f1b\"");
  }
  if (num_stages % plan.interleave != 0) {
    return where.error("expected the number of stages (" + std::to_string(num_stages) +
                       ") to be a multiple of interleave (" + std::to_string(plan.interleave) +
                       ")");
  }
  const std::int64_t num_meshes = num_stages / plan.interleave;
  std::map<std::int64_t, std::size_t> owner;  // device id -> first stage using it
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const PlanStage& st = stages[i];
    std::int64_t expected_begin = i == 0 ? 0 : stages[i - 1].layer_end;
    if (st.layer_begin != expected_begin) {
      return stage_error(i, "layers must start at " + std::to_string(expected_begin) +
                                " (contiguous from 0), got " + std::to_string(st.layer_begin));
    }
    const std::int64_t mesh_size = st.submesh_nodes * st.submesh_gpus_per_node;
    if (st.logical_rows * st.logical_cols != mesh_size) {
      return stage_error(i, "logical mesh [" + std::to_string(st.logical_rows) + ", " +
                                std::to_string(st.logical_cols) + "] has " +
                                std::to_string(st.logical_rows * st.logical_cols) +
                                " devices, submesh has " + std::to_string(mesh_size));
    }
    if (static_cast<std::int64_t>(st.device_ids.size()) != mesh_size) {
      return stage_error(i, "expected " + std::to_string(mesh_size) + " device ids, got " +
                                std::to_string(st.device_ids.size()));
    }
    if (st.submesh_nodes > plan.cluster.nodes ||
        st.submesh_gpus_per_node > plan.cluster.gpus_per_node) {
      return stage_error(i, "submesh [" + std::to_string(st.submesh_nodes) + ", " +
                                std::to_string(st.submesh_gpus_per_node) +
                                "] is larger than the cluster");
    }
    // With interleaving, stage i runs on the mesh of stage i - num_meshes (the executor's
    // lowering and the simulator both assume it): the same devices in the same order.
    if (static_cast<std::int64_t>(i) >= num_meshes) {
      const PlanStage& first = stages[i - static_cast<std::size_t>(num_meshes)];
      if (st.device_ids != first.device_ids || st.logical_rows != first.logical_rows ||
          st.logical_cols != first.logical_cols) {
        return stage_error(i, "with interleave " + std::to_string(plan.interleave) +
                                  ", expected the devices and logical mesh of stage " +
                                  std::to_string(i - static_cast<std::size_t>(num_meshes)) +
                                  " (model chunk " +
                                  std::to_string(static_cast<std::int64_t>(i) / num_meshes) +
                                  " of the same mesh)");
      }
    }
    std::set<std::int64_t> seen;
    for (std::int64_t id : st.device_ids) {
      if (id >= plan.cluster.num_gpus()) {
        return stage_error(i, "device id " + std::to_string(id) + " is outside the cluster's " +
                                  std::to_string(plan.cluster.num_gpus()) + " GPUs");
      }
      if (!seen.insert(id).second) {
        return stage_error(i, "device id " + std::to_string(id) + " appears twice");
      }
      auto [it, inserted] = owner.emplace(id, i);
      if (!inserted) {
        // With interleaving, stage i reuses the mesh of stage i - num_meshes exactly.
        bool same_mesh = static_cast<std::int64_t>(i) >= num_meshes &&
                         stages[i - static_cast<std::size_t>(num_meshes)].device_ids ==
                             st.device_ids;
        if (!same_mesh) {
          return stage_error(i, "device id " + std::to_string(id) + " is also used by stage " +
                                    std::to_string(it->second));
        }
      }
    }
  }
  return core::Status();
}

core::Json plan_to_json(const Plan& plan) {
  Json j;
  j["schema_version"] = Plan::kSchemaVersion;
  if (!plan.generator.empty()) j["generator"] = plan.generator;
  j["model"] = ir::model_config_to_json(plan.model);
  j["cluster"] = cluster::cluster_spec_to_json(plan.cluster);
  j["dtype"] = std::string(core::dtype_name(plan.dtype));
  j["global_batch_size"] = plan.global_batch_size;
  j["num_microbatches"] = plan.num_microbatches;
  j["schedule"] = std::string(schedule_name(plan.schedule));
  j["interleave"] = plan.interleave;
  // Only when not the default, so plan files of the search (async sends) stay as they were.
  if (plan.p2p != P2pMode::kAsync) j["p2p"] = p2p_mode_names().at(static_cast<std::size_t>(plan.p2p));
  if (!plan.gradient_accumulation_fusion) j["gradient_accumulation_fusion"] = false;
  j["recompute"] = std::string(recompute_name(plan.recompute));
  Json stages = Json::array();
  for (const auto& st : plan.stages) {
    Json s;
    s["layers"] = {st.layer_begin, st.layer_end};
    s["submesh"] = {st.submesh_nodes, st.submesh_gpus_per_node};
    s["logical_mesh"] = {st.logical_rows, st.logical_cols};
    s["device_ids"] = st.device_ids;
    s["weight_update_sharding"] = st.weight_update_sharding;
    if (!st.shardings.empty()) {
      Json shardings = Json::array();
      for (const auto& op : st.shardings) {
        Json o;
        o["op"] = op.op;
        if (!op.strategy.empty()) o["strategy"] = op.strategy;
        Json inputs = Json::array();
        for (const auto& in : op.inputs) inputs.push_back(in.to_string());
        o["inputs"] = inputs;
        o["output"] = op.output.to_string();
        shardings.push_back(o);
      }
      s["shardings"] = shardings;
    }
    stages.push_back(s);
  }
  j["stages"] = stages;
  return j;
}

Result<Plan> read_plan_file(const std::filesystem::path& path) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  return parse_plan(JsonValue::root(doc), path.parent_path());
}

std::string MegatronShape::to_string() const {
  return "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
         " cp=" + std::to_string(cp) + " ep=" + std::to_string(ep) +
         (etp != 0 ? " etp=" + std::to_string(etp) : std::string()) + " mbs=" + std::to_string(mbs) +
         " vp=" + std::to_string(vp) + " recompute=" + std::string(recompute_name(recompute)) +
         (sequence_parallel ? " sequence_parallel" : "") +
         (distributed_optimizer ? " distributed_optimizer" : "") +
         (overlap_grad_reduce ? " overlap_grad_reduce" : "") +
         (overlap_param_gather ? " overlap_param_gather" : "") + (tp_comm_overlap ? " tp_comm_overlap" : "");
}

core::Json MegatronShape::to_json() const {
  core::Json j{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"cp", cp}, {"ep", ep},
               {"mbs", mbs}, {"vp", vp}, {"recompute", std::string(recompute_name(recompute))}};
  if (etp != 0) j["etp"] = etp;  // else tp, Megatron-Core's default
  if (sequence_parallel) j["sequence_parallel"] = true;
  if (distributed_optimizer) j["distributed_optimizer"] = true;
  if (overlap_grad_reduce) j["overlap_grad_reduce"] = true;
  if (overlap_param_gather) j["overlap_param_gather"] = true;
  if (tp_comm_overlap) j["tp_comm_overlap"] = true;
  return j;
}

std::optional<MegatronShape> megatron_shape(const Plan& plan) {
  if (plan.stages.empty() || plan.interleave < 1 || plan.num_microbatches < 1 ||
      plan.stages.size() % static_cast<std::size_t>(plan.interleave) != 0) {
    return std::nullopt;
  }
  const PlanStage& first = plan.stages.front();
  for (const PlanStage& st : plan.stages) {
    if (st.logical_rows != first.logical_rows || st.logical_cols != first.logical_cols ||
        st.submesh_nodes != first.submesh_nodes ||
        st.submesh_gpus_per_node != first.submesh_gpus_per_node) {
      return std::nullopt;
    }
  }
  MegatronShape m;
  m.tp = first.logical_cols;
  m.dp = first.logical_rows;
  m.vp = plan.interleave;
  m.pp = static_cast<std::int64_t>(plan.stages.size()) / plan.interleave;
  m.recompute = plan.recompute;
  // Megatron's tensor-parallel group lives inside one NVLink domain: a node, or the trays of
  // a multi-node NVLink rack (GB200 NVL72).
  const std::int64_t nvlink_gpus = plan.cluster.nvlink_domain_nodes_in_use() > 1
                                       ? plan.cluster.nvlink_domain_gpus()
                                       : std::max<std::int64_t>(1, first.submesh_gpus_per_node);
  if (m.tp < 1 || m.dp < 1 || m.tp > nvlink_gpus) return std::nullopt;
  // Wider than a node: a whole part of the domain, so no tp group straddles two domains.
  if (m.tp > first.submesh_gpus_per_node && nvlink_gpus % m.tp != 0) return std::nullopt;
  if (m.pp > 1 && plan.schedule == Schedule::kGpipe) return std::nullopt;
  const std::int64_t per_microbatch = plan.global_batch_size / plan.num_microbatches;
  if (plan.global_batch_size % plan.num_microbatches != 0 || per_microbatch % m.dp != 0) return std::nullopt;
  m.mbs = per_microbatch / m.dp;
  return m;
}

}  // namespace alpasim::schema
