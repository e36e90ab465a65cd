#include "driver/evaluate.h"

#include <map>
#include <mutex>
#include <sstream>

#include "core/text.h"
#include "cost_model/calibration.h"
#include "schema/profile.h"
#include "sim/trace_writer.h"

namespace alpasim::driver {
namespace {

using core::Json;

// The shipped profiles are calibrated once per process: every scenario with profile
// "auto" or {"preset": X} reuses the result (deterministic, so caching changes nothing).
const core::Result<std::map<std::string, cost_model::Calibration>>& shipped_calibrations() {
  static const auto* const cached =
      new core::Result<std::map<std::string, cost_model::Calibration>>(
          cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles"));
  return *cached;
}

ir::RecomputePolicy to_ir(schema::Recompute r) {
  switch (r) {
    case schema::Recompute::kNone: return ir::RecomputePolicy::kNone;
    case schema::Recompute::kSelective: return ir::RecomputePolicy::kSelective;
    case schema::Recompute::kFull: return ir::RecomputePolicy::kFull;
  }
  return ir::RecomputePolicy::kNone;
}

double tflops(core::FlopsPerSecond f) { return core::to_tflops_per_s(f); }

}  // namespace

core::Result<cost_model::CostModel> cost_model_for_scenario(const Scenario& scenario) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const auto& profile = scenario.profile;
  if (!profile.file.empty()) {
    ALPASIM_ASSIGN_OR_RETURN(schema::Profile p, schema::read_profile_file(profile.file));
    ALPASIM_ASSIGN_OR_RETURN(cost_model::Calibration cal,
                             cost_model::calibrate(p, scenario.cluster, cost_model::default_params()));
    // A profile without attention rows prices flash kernels with the shipped H200 curve
    // (as fractions of its GPU's peak), as every shipped machine without rows does.
    const auto& shipped = shipped_calibrations();
    if (!shipped.ok()) return shipped.status();
    cost_model::inherit_attention_where_default(cal.params, shipped->at("hgx-h200").params, "hgx-h200");
    return cost_model::CostModel::create(scenario.cluster, cal.params, p.gemm, p.conv);
  }
  const auto& shipped = shipped_calibrations();
  if (!shipped.ok()) return shipped.status();
  const std::string preset =
      profile.preset.empty() || profile.preset == "auto" ? scenario.cluster.preset : profile.preset;
  if (preset.empty()) {
    return core::invalid_argument(scenario.file +
                                  ": /profile: \"auto\" needs a cluster preset; give "
                                  "{\"file\": ...} for an explicit cluster");
  }
  ALPASIM_ASSIGN_OR_RETURN(cost_model::CalibratedParams params,
                           cost_model::params_for_preset(*shipped, preset));
  return cost_model::CostModel::create(scenario.cluster, params);
}

core::Result<Evaluation> evaluate_fixed_plan(const Scenario& scenario,
                                             const cost_model::CostModel& cost_model) {
  if (scenario.search.mode != "fixed") {
    return core::failed_precondition(scenario.file + ": /search/mode: expected \"fixed\", got \"" +
                                     scenario.search.mode + "\"");
  }
  Evaluation e;
  if (const auto& m = scenario.search.megatron) {
    sim::lowering::MegatronPlan plan;
    plan.tp = m->tp;
    plan.pp = m->pp;
    plan.dp = m->dp;
    plan.microbatch_size = m->microbatch_size;
    plan.interleave = m->interleave;
    plan.recompute = to_ir(m->recompute);
    plan.sequence_parallel = m->sequence_parallel;
    plan.zero_stage = m->zero_stage;
    plan.tp_comm_overlap = m->tp_comm_overlap;
    if (m->tp_comm_overlap_cfg) plan.tp_comm_overlap_cfg = *m->tp_comm_overlap_cfg;
    plan.overlap_grad_reduce = m->overlap_grad_reduce;
    plan.overlap_param_gather = m->overlap_param_gather;
    plan.overlap_p2p_comm = m->overlap_p2p_comm;
    plan.gradient_accumulation_fusion = m->gradient_accumulation_fusion;
    plan.ep = m->ep;
    plan.etp = m->etp;
    plan.ddp_bucket_size_params = m->ddp_bucket_size;
    plan.first_stage_layers = m->first_stage_layers;
    plan.cp = m->cp;
    plan.account_for_embedding = m->account_for_embedding;
    plan.account_for_loss = m->account_for_loss;
    plan.last_stage_layers = m->last_stage_layers;
    plan.pipeline_layout = m->pipeline_layout;
    sim::lowering::TrainingSetup training;
    training.global_batch_size = scenario.training.global_batch_size;
    training.dtype = scenario.training.dtype;
    training.block_scaled = *sim::lowering::parse_block_scaled(scenario.training.block_scaled_dtype);
    if (!ir::parse_optimizer_kind(scenario.training.optimizer, &training.optimizer)) {
      return core::invalid_argument(scenario.file + ": /training/optimizer: unknown optimizer \"" +
                                    scenario.training.optimizer + "\"");
    }
    auto lowered = sim::lowering::lower_megatron_plan(scenario.model, training, plan, cost_model);
    if (!lowered.ok()) return lowered.status().with_context(scenario.file);
    e.lowered = std::move(*lowered);
    auto file = sim::lowering::megatron_plan_file(scenario.model, training, plan, scenario.cluster);
    if (file.ok()) {
      e.plan_file = std::move(file).value();
    } else {
      e.plan_file_unavailable = file.status().message();
    }
  } else if (scenario.search.plan_file) {
    ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, schema::read_plan_file(*scenario.search.plan_file));
    auto lowered = sim::lowering::lower_plan_file(plan, cost_model);
    if (!lowered.ok()) return lowered.status().with_context(scenario.search.plan_file_as_written);
    e.lowered = std::move(*lowered);
  } else {
    return core::invalid_argument(scenario.file +
                                  ": /search: mode \"fixed\" needs \"megatron\" or \"plan_file\"");
  }
  ALPASIM_ASSIGN_OR_RETURN(e.simulation, sim::simulate_pipeline(e.lowered.problem));
  return e;
}

core::Json simulation_report_json(const sim::PipelineReport& r) {
  Json j;
  j["iteration_time_s"] = r.iteration_time.value();
  j["model_tflops_per_gpu"] = tflops(r.model_flops_per_gpu);
  j["hardware_tflops_per_gpu"] = tflops(r.hardware_flops_per_gpu);
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["bubble_fraction"] = r.bubble_fraction;
  j["bubble_to_compute_ratio"] = r.bubble_to_compute_ratio;
  j["num_gpus"] = r.num_gpus;
  j["communication_exposed_s"] = r.communication_exposed.value();
  j["communication_overlapped_s"] = r.communication_overlapped.value();
  Json memory;
  memory["fits"] = r.overflows.empty();
  Json overflows = Json::array();
  for (const auto& o : r.overflows) {
    overflows.push_back({{"device", o.device},
                         {"limit_bytes", o.limit_bytes},
                         {"peak_bytes", o.peak_bytes},
                         {"excess_bytes", o.excess_bytes},
                         {"largest_component", sim::memory_component_name(o.largest)},
                         {"message", o.message}});
  }
  memory["overflows"] = overflows;
  j["memory"] = memory;
  Json devices = Json::array();
  for (const auto& d : r.devices) {
    Json components;
    for (int c = 0; c < sim::kNumMemoryComponents; ++c) {
      components[sim::memory_component_name(static_cast<sim::MemoryComponent>(c))] =
          d.peak_memory_by_component[static_cast<std::size_t>(c)];
    }
    devices.push_back({{"stage", d.device},
                       {"compute_busy_s", d.compute_busy.value()},
                       {"compute_idle_s", d.compute_idle.value()},
                       {"communication_busy_s", d.communication_busy.value()},
                       {"communication_overlapped_s", d.communication_overlapped.value()},
                       {"communication_exposed_s", d.communication_exposed.value()},
                       {"p2p_exposed_s", d.p2p_exposed.value()},
                       {"reshard_exposed_s", d.reshard_exposed.value()},
                       {"grad_sync_exposed_s", d.grad_sync_exposed.value()},
                       {"tensor_parallel_communication_s", d.tensor_parallel_communication.value()},
                       {"peak_memory_bytes", d.peak_memory_bytes},
                       {"peak_memory_by_component_bytes", components},
                       {"max_in_flight", d.max_in_flight}});
  }
  j["devices"] = devices;
  return j;
}

core::Json prediction_json(const Evaluation& evaluation) {
  const auto& lowered = evaluation.lowered;
  Json j = simulation_report_json(evaluation.simulation.report);
  j["num_microbatches"] = lowered.num_microbatches;
  j["p2p_send_s"] = lowered.p2p_send_s.value();
  j["p2p_bytes_per_gpu"] = lowered.p2p_bytes.value();
  Json layers = Json::array();
  // The distinct layer kinds once each (prologue, first block, epilogue): all blocks of a
  // uniform transformer cost the same.
  std::map<std::string, bool> seen;
  for (const auto& l : lowered.layers) {
    if (seen[l.kind]) continue;
    seen[l.kind] = true;
    const auto& c = l.costs;
    layers.push_back({{"name", c.name},
                      {"kind", l.kind},
                      {"forward_s", c.forward_s.value()},
                      {"backward_s", c.backward_s.value()},
                      {"recompute_s", l.recompute_s.value()},
                      {"gemm_forward_s", l.gemm_forward_s.value()},
                      {"gemm_backward_s", l.gemm_backward_s.value()},
                      {"memory_bound_forward_s", l.memory_bound_forward_s.value()},
                      {"memory_bound_backward_s", l.memory_bound_backward_s.value()},
                      {"tp_forward_s", c.forward_tp_comm_s.value()},
                      {"tp_backward_s", c.backward_tp_comm_s.value()},
                      {"tp_all_reduces_forward", l.tp_collectives.forward_all_reduce},
                      {"tp_all_reduces_backward", l.tp_collectives.backward_all_reduce},
                      {"parameter_bytes", c.parameter_bytes.value()},
                      {"activation_bytes", c.activation_bytes.value()}});
  }
  j["layer_costs"] = layers;
  Json notes = Json::array();
  for (const auto& n : lowered.notes) notes.push_back(n);
  j["notes"] = notes;
  if (!evaluation.plan_file_unavailable.empty()) j["plan_file_unavailable"] = evaluation.plan_file_unavailable;
  return j;
}

std::string simulation_report_text(const sim::PipelineReport& r, const std::string& title) {
  std::ostringstream s;
  s << title << ":\n"
    << "  iteration time        " << core::format_fixed(r.iteration_time.value(), 3) << " s\n"
    << "  model TFLOP/s/GPU     " << core::format_fixed(tflops(r.model_flops_per_gpu), 1) << "\n"
    << "  hardware TFLOP/s/GPU  " << core::format_fixed(tflops(r.hardware_flops_per_gpu), 1)
    << "\n"
    << "  bubble fraction       " << core::format_fixed(r.bubble_fraction * 100.0, 1) << " %\n"
    << "  peak memory per GPU   " << core::format_bytes(r.peak_memory_bytes) << "\n"
    << "  exposed communication " << core::format_fixed(r.communication_exposed.value() * 1e3, 1)
    << " ms (overlapped " << core::format_fixed(r.communication_overlapped.value() * 1e3, 1)
    << " ms)\n";
  if (!r.devices.empty()) {
    // The collectives inside a stage's compute tasks: tensor parallelism's, any resharding
    // between operators of a searched plan (a data-parallel mesh has some too), and a ZeRO
    // baseline's per-microbatch gradient reduce-scatters and weight all-gathers.
    s << "  intra-stage comm      "
      << core::format_fixed(r.devices.front().tensor_parallel_communication.value(), 3)
      << " s per iteration on stage 0 (tensor-parallel, resharding and ZeRO collectives inside its"
         " compute; exposed: not behind a GEMM, counted as compute)\n";
  }
  if (r.overflows.empty()) {
    s << "  memory                fits on every device\n";
  } else {
    s << "  memory                DOES NOT FIT:\n";
    for (const auto& o : r.overflows) s << "    " << o.message << "\n";
  }
  return s.str();
}

std::string prediction_text(const Evaluation& evaluation) {
  const sim::PipelineReport& r = evaluation.simulation.report;
  const auto& lowered = evaluation.lowered;
  std::ostringstream s;
  s << simulation_report_text(r, "prediction (simulated fixed plan, " +
                                     std::to_string(r.num_gpus) + " GPUs, " +
                                     std::to_string(lowered.num_microbatches) +
                                     " microbatches per replica)");
  for (const auto& l : lowered.layers) {
    if (l.kind != "transformer" && l.kind != "moe_transformer") continue;
    s << "  one " << l.kind << " layer per GPU per microbatch: forward "
      << core::format_fixed(l.costs.forward_s.value() * 1e3, 2) << " ms, backward "
      << core::format_fixed(l.costs.backward_s.value() * 1e3, 2) << " ms, recompute "
      << core::format_fixed(l.recompute_s.value() * 1e3, 2) << " ms (tensor-parallel comm "
      << core::format_fixed((l.costs.forward_tp_comm_s + l.costs.backward_tp_comm_s).value() * 1e3,
                            2)
      << " ms)\n";
    break;
  }
  for (const auto& n : lowered.notes) s << "  note: " << n << "\n";
  if (!evaluation.plan_file_unavailable.empty()) {
    s << "  note: no plan file (--out writes no plan.json): " << evaluation.plan_file_unavailable << "\n";
  }
  return s.str();
}


}  // namespace alpasim::driver
