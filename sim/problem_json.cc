#include "sim/problem_json.h"

#include <array>
#include <limits>

#include <nlohmann/json.hpp>

namespace alpasim::sim {
namespace {

using Ordered = nlohmann::ordered_json;
constexpr const char* kFormat = "alpa-sim pipeline problem";
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::array<std::string, 2> kGradSyncModes = {"all_reduce", "reduce_scatter_all_gather"};
const std::array<std::string, 2> kReshardModes = {"direct", "local_all_gather"};
const std::array<std::string, 3> kSchedules = {"gpipe", "1f1b", "interleaved_1f1b"};

Ordered route_json(const Route& r) {
  Ordered j;
  j["links"] = r.links;
  j["latency_s"] = r.latency.value();
  return j;
}

core::Result<Route> parse_route(core::JsonObject obj, std::size_t num_links) {
  Route r;
  if (auto links = obj.optional("links")) {
    ALPASIM_ASSIGN_OR_RETURN(auto items, links->as_array());
    for (const auto& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t id,
                               item.as_int(0, static_cast<std::int64_t>(num_links) - 1,
                                           "a link id in [0, " + std::to_string(num_links) + ")"));
      r.links.push_back(static_cast<LinkId>(id));
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(double latency, obj.get_number_in_or("latency_s", 0, kInf, "a duration >= 0 s", 0));
  r.latency = core::Seconds(latency);
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return r;
}

core::Result<core::Seconds> seconds_or(core::JsonObject& obj, std::string_view key, double fallback) {
  ALPASIM_ASSIGN_OR_RETURN(double v, obj.get_number_in_or(key, 0, kInf, "a duration >= 0 s", fallback));
  return core::Seconds(v);
}
core::Result<std::optional<core::Seconds>> optional_seconds(core::JsonObject& obj, std::string_view key) {
  auto v = obj.optional(key);
  if (!v) return std::optional<core::Seconds>();
  ALPASIM_ASSIGN_OR_RETURN(double s, v->as_number(0, kInf, "a duration >= 0 s"));
  return std::optional<core::Seconds>(core::Seconds(s));
}
core::Result<core::Bytes> bytes_or(core::JsonObject& obj, std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t v, obj.get_non_negative_int_or(key, 0));
  return core::Bytes(v);
}
core::Result<core::Flops> flops_or(core::JsonObject& obj, std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(double v, obj.get_number_in_or(key, 0, kInf, "a FLOP count >= 0", 0));
  return core::Flops(v);
}

core::Result<StageCosts> parse_stage(core::JsonObject obj) {
  StageCosts s;
  ALPASIM_ASSIGN_OR_RETURN(s.forward_s, seconds_or(obj, "forward_s", 0));
  ALPASIM_ASSIGN_OR_RETURN(s.backward_s, seconds_or(obj, "backward_s", 0));
  ALPASIM_ASSIGN_OR_RETURN(s.recompute_s, seconds_or(obj, "recompute_s", 0));
  ALPASIM_ASSIGN_OR_RETURN(s.forward_tp_comm_s, seconds_or(obj, "forward_tp_comm_s", 0));
  ALPASIM_ASSIGN_OR_RETURN(s.backward_tp_comm_s, seconds_or(obj, "backward_tp_comm_s", 0));
  ALPASIM_ASSIGN_OR_RETURN(s.forward_flops, flops_or(obj, "forward_flops"));
  ALPASIM_ASSIGN_OR_RETURN(s.backward_flops, flops_or(obj, "backward_flops"));
  ALPASIM_ASSIGN_OR_RETURN(s.recompute_flops, flops_or(obj, "recompute_flops"));
  ALPASIM_ASSIGN_OR_RETURN(s.stored_activation_bytes, bytes_or(obj, "stored_activation_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.working_activation_bytes, bytes_or(obj, "working_activation_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.forward_working_activation_bytes,
                           bytes_or(obj, "forward_working_activation_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.backward_received_ahead_bytes, bytes_or(obj, "backward_received_ahead_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.backward_received_earlier_bytes,
                           bytes_or(obj, "backward_received_earlier_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.parameter_bytes, bytes_or(obj, "parameter_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.gradient_bytes, bytes_or(obj, "gradient_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.optimizer_state_bytes, bytes_or(obj, "optimizer_state_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.output_activation_bytes, bytes_or(obj, "output_activation_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(std::string reshard, obj.get_enum_or("output_reshard", kReshardModes, "direct"));
  s.output_reshard = reshard == "direct" ? ReshardMode::kDirect : ReshardMode::kLocalAllGather;
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t group, obj.get_positive_int_or("reshard_group", 1));
  s.reshard_group = static_cast<int>(group);
  ALPASIM_ASSIGN_OR_RETURN(s.reshard_all_gather_s, optional_seconds(obj, "reshard_all_gather_s"));
  ALPASIM_ASSIGN_OR_RETURN(s.grad_sync_bytes, bytes_or(obj, "grad_sync_bytes"));
  ALPASIM_ASSIGN_OR_RETURN(s.grad_sync_s, optional_seconds(obj, "grad_sync_s"));
  ALPASIM_ASSIGN_OR_RETURN(s.param_all_gather_s, optional_seconds(obj, "param_all_gather_s"));
  ALPASIM_ASSIGN_OR_RETURN(s.optimizer_step_s, seconds_or(obj, "optimizer_step_s", 0));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return s;
}

}  // namespace

core::Result<std::string> problem_to_json(const PipelineProblem& problem) {
  ALPASIM_RETURN_IF_ERROR(validate(problem));
  ALPASIM_ASSIGN_OR_RETURN(PipelineProblem pb, resolve_collectives(problem));
  Ordered j;
  j["format"] = kFormat;
  j["version"] = 1;
  j["schedule"] = std::string(schedule_name(pb.schedule));
  j["num_microbatches"] = pb.num_microbatches;
  j["interleave"] = pb.interleave;
  j["data_parallel"] = pb.data_parallel;
  j["grad_sync_mode"] = kGradSyncModes[static_cast<std::size_t>(pb.grad_sync_mode)];
  j["grad_sync_buckets"] = pb.grad_sync_buckets;
  j["blocking_p2p"] = pb.blocking_p2p;
  j["optimizer_barrier"] = pb.optimizer_barrier;
  Ordered links = Ordered::array();
  for (const auto& l : pb.links) {
    Ordered lj;
    lj["name"] = l.name;
    lj["capacity_bytes_per_s"] = l.capacity.value();
    links.push_back(std::move(lj));
  }
  j["links"] = std::move(links);
  Ordered meshes = Ordered::array();
  for (const auto& m : pb.meshes) {
    Ordered mj;
    mj["num_gpus"] = m.num_gpus;
    mj["memory_limit_bytes"] = m.memory_limit.value();
    mj["send_next"] = route_json(m.send_next);
    mj["send_prev"] = route_json(m.send_prev);
    mj["grad_sync"] = route_json(m.grad_sync);
    meshes.push_back(std::move(mj));
  }
  j["meshes"] = std::move(meshes);
  Ordered stages = Ordered::array();
  for (const auto& s : pb.stages) {
    Ordered sj;
    sj["forward_s"] = s.forward_s.value();
    sj["backward_s"] = s.backward_s.value();
    sj["recompute_s"] = s.recompute_s.value();
    sj["forward_tp_comm_s"] = s.forward_tp_comm_s.value();
    sj["backward_tp_comm_s"] = s.backward_tp_comm_s.value();
    sj["forward_flops"] = s.forward_flops.value();
    sj["backward_flops"] = s.backward_flops.value();
    sj["recompute_flops"] = s.recompute_flops.value();
    sj["stored_activation_bytes"] = s.stored_activation_bytes.value();
    sj["working_activation_bytes"] = s.working_activation_bytes.value();
    // Only when set, so that problems of lowerings without it dump as before.
    if (s.forward_working_activation_bytes.value() != 0) {
      sj["forward_working_activation_bytes"] = s.forward_working_activation_bytes.value();
    }
    if (s.backward_received_ahead_bytes.value() != 0) {
      sj["backward_received_ahead_bytes"] = s.backward_received_ahead_bytes.value();
    }
    if (s.backward_received_earlier_bytes.value() != 0) {
      sj["backward_received_earlier_bytes"] = s.backward_received_earlier_bytes.value();
    }
    sj["parameter_bytes"] = s.parameter_bytes.value();
    sj["gradient_bytes"] = s.gradient_bytes.value();
    sj["optimizer_state_bytes"] = s.optimizer_state_bytes.value();
    sj["output_activation_bytes"] = s.output_activation_bytes.value();
    sj["output_reshard"] = kReshardModes[static_cast<std::size_t>(s.output_reshard)];
    sj["reshard_group"] = s.reshard_group;
    if (s.reshard_all_gather_s) sj["reshard_all_gather_s"] = s.reshard_all_gather_s->value();
    sj["grad_sync_bytes"] = s.grad_sync_bytes.value();
    if (s.grad_sync_s) sj["grad_sync_s"] = s.grad_sync_s->value();
    if (s.param_all_gather_s) sj["param_all_gather_s"] = s.param_all_gather_s->value();
    sj["optimizer_step_s"] = s.optimizer_step_s.value();
    stages.push_back(std::move(sj));
  }
  j["stages"] = std::move(stages);
  return j.dump(2) + "\n";
}

core::Result<PipelineProblem> parse_problem(const core::JsonValue& root) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonObject obj, root.as_object());
  PipelineProblem pb;
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue format, obj.required("format", "\"alpa-sim pipeline problem\""));
  ALPASIM_ASSIGN_OR_RETURN(std::string format_text, format.as_string());
  if (format_text != kFormat) return format.type_error("\"alpa-sim pipeline problem\"");
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t version, obj.get_int_in("version", 1, 1, "1"));
  (void)version;
  ALPASIM_ASSIGN_OR_RETURN(std::string schedule, obj.get_enum_or("schedule", kSchedules, "1f1b"));
  ALPASIM_ASSIGN_OR_RETURN(pb.schedule, parse_schedule(schedule));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t m, obj.get_positive_int_or("num_microbatches", 1));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t v, obj.get_positive_int_or("interleave", 1));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t dp, obj.get_positive_int_or("data_parallel", 1));
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t buckets, obj.get_positive_int_or("grad_sync_buckets", 1));
  constexpr std::int64_t kMaxInt = 1 << 30;  // keeps int conversions exact
  for (auto [value, key] : {std::pair{m, "num_microbatches"}, std::pair{v, "interleave"},
                            std::pair{dp, "data_parallel"}, std::pair{buckets, "grad_sync_buckets"}}) {
    if (value > kMaxInt) {
      return root.error(std::string(key) + ": expected at most " + std::to_string(kMaxInt) +
                        ", got " + std::to_string(value));
    }
  }
  pb.num_microbatches = static_cast<int>(m);
  pb.interleave = static_cast<int>(v);
  pb.data_parallel = static_cast<int>(dp);
  pb.grad_sync_buckets = static_cast<int>(buckets);
  ALPASIM_ASSIGN_OR_RETURN(std::string mode, obj.get_enum_or("grad_sync_mode", kGradSyncModes, "all_reduce"));
  pb.grad_sync_mode = mode == "all_reduce" ? GradSyncMode::kAllReduce : GradSyncMode::kReduceScatterAllGather;
  ALPASIM_ASSIGN_OR_RETURN(pb.blocking_p2p, obj.get_bool_or("blocking_p2p", false));
  ALPASIM_ASSIGN_OR_RETURN(pb.optimizer_barrier, obj.get_bool_or("optimizer_barrier", false));
  if (auto links = obj.optional("links")) {
    ALPASIM_ASSIGN_OR_RETURN(auto items, links->as_array());
    for (const auto& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(core::JsonObject lo, item.as_object());
      LinkSpec l;
      ALPASIM_ASSIGN_OR_RETURN(l.name, lo.get_string_or("name", ""));
      ALPASIM_ASSIGN_OR_RETURN(double cap, lo.get_positive_number("capacity_bytes_per_s"));
      l.capacity = core::BytesPerSecond(cap);
      ALPASIM_RETURN_IF_ERROR(lo.finish());
      pb.links.push_back(std::move(l));
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue meshes, obj.required("meshes", "an array of meshes"));
  ALPASIM_ASSIGN_OR_RETURN(auto mesh_items, meshes.as_array());
  for (const auto& item : mesh_items) {
    ALPASIM_ASSIGN_OR_RETURN(core::JsonObject mo, item.as_object());
    MeshSpec mesh;
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t gpus, mo.get_int_in("num_gpus", 1, kMaxInt, "a positive integer"));
    mesh.num_gpus = static_cast<int>(gpus);
    ALPASIM_ASSIGN_OR_RETURN(mesh.memory_limit, bytes_or(mo, "memory_limit_bytes"));
    for (auto [key, route] : {std::pair{"send_next", &mesh.send_next}, std::pair{"send_prev", &mesh.send_prev},
                              std::pair{"grad_sync", &mesh.grad_sync}}) {
      if (auto r = mo.optional(key)) {
        ALPASIM_ASSIGN_OR_RETURN(core::JsonObject ro, r->as_object());
        ALPASIM_ASSIGN_OR_RETURN(*route, parse_route(std::move(ro), pb.links.size()));
      }
    }
    ALPASIM_RETURN_IF_ERROR(mo.finish());
    pb.meshes.push_back(std::move(mesh));
  }
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue stages, obj.required("stages", "an array of stage costs"));
  ALPASIM_ASSIGN_OR_RETURN(auto stage_items, stages.as_array());
  for (const auto& item : stage_items) {
    ALPASIM_ASSIGN_OR_RETURN(core::JsonObject so, item.as_object());
    ALPASIM_ASSIGN_OR_RETURN(StageCosts st, parse_stage(std::move(so)));
    pb.stages.push_back(std::move(st));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  core::Status valid = validate(pb);
  if (!valid.ok()) {
    // validate() names fields as "stages[1].backward_s: ..."; say it as a JSON pointer.
    const std::string& msg = valid.message();
    const std::size_t colon = msg.find(": ");
    std::string pointer = "/";
    for (char c : msg.substr(0, colon)) {
      if (c == '[' || c == '.') {
        pointer += '/';
      } else if (c != ']') {
        pointer += c;
      }
    }
    if (pointer.starts_with("//")) pointer.erase(0, 1);
    return core::invalid_argument(root.file() + ": " + pointer + msg.substr(colon));
  }
  return pb;
}

core::Result<PipelineProblem> read_problem_file(const std::filesystem::path& path) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  return parse_problem(core::JsonValue::root(doc));
}

}  // namespace alpasim::sim
