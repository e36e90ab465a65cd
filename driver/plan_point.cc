#include "driver/plan_point.h"

#include <algorithm>
#include <exception>
#include <map>
#include <string>

#include "core/units.h"
#include "driver/evaluate.h"
#include "driver/search_run.h"
#include "planner/search/search.h"
#include "schema/plan.h"
#include "sim/pipeline_sim.h"
#include "sim/task_graph.h"

namespace alpasim::driver {

namespace {

using core::Json;

// Above this many compute tasks the timeline chart is unreadable and the report heavy;
// the chart then shows the first kMaxTimelineTasks tasks by start time.
constexpr std::size_t kMaxTimelineTasks = 4000;
// With more microbatches than 3 × this, the chart keeps the first and the last this many
// (the pipeline's fill and drain, where its bubbles are); the steady state between repeats.
constexpr int kEdgeMicrobatches = 4;

std::string megatron_summary(const MegatronPlanConfig& m) {
  schema::MegatronShape shape;
  shape.tp = m.tp;
  shape.pp = m.pp;
  shape.dp = m.dp;
  shape.cp = m.cp;
  shape.ep = m.ep;
  shape.etp = m.etp;
  shape.mbs = m.microbatch_size;
  shape.vp = m.interleave;
  shape.recompute = m.recompute;
  shape.sequence_parallel = m.sequence_parallel;
  std::string s = shape.to_string();
  if (m.zero_stage > 0) s += " zero_stage=" + std::to_string(m.zero_stage);
  if (m.tp_comm_overlap) s += " tp_comm_overlap";
  if (m.overlap_grad_reduce) s += " overlap_grad_reduce";
  if (m.overlap_param_gather) s += " overlap_param_gather";
  return s;
}

// The compute-stream tasks of a simulation: the timeline chart's bars (first and last
// microbatches only when there are many) and every stage's busy time per task kind.
void fill_timeline(const sim::PipelineSimulation& sim, PointResult& p) {
  const auto& graph = sim.graph;
  int microbatches = 0;
  std::map<std::pair<int, std::string>, double> busy;
  for (std::size_t t = 0; t < graph.tasks().size(); ++t) {
    const auto& task = graph.tasks()[t];
    const auto& stream = graph.streams()[static_cast<std::size_t>(task.stream)];
    if (stream.kind != sim::StreamKind::kCompute) continue;
    microbatches = std::max(microbatches, task.label.microbatch + 1);
    // Engine time is integer nanoseconds.
    busy[{static_cast<int>(stream.device), sim::task_kind_name(task.label.kind)}] +=
        static_cast<double>(sim.timeline.end[t] - sim.timeline.start[t]) * 1e-9;
  }
  p.timeline_microbatches = microbatches;
  p.timeline_edge_microbatches = microbatches > 3 * kEdgeMicrobatches ? kEdgeMicrobatches : 0;
  const int edge = p.timeline_edge_microbatches;
  for (std::size_t t = 0; t < graph.tasks().size() && p.timeline.size() < kMaxTimelineTasks; ++t) {
    const auto& task = graph.tasks()[t];
    const auto& stream = graph.streams()[static_cast<std::size_t>(task.stream)];
    if (stream.kind != sim::StreamKind::kCompute) continue;
    const int mb = task.label.microbatch;
    if (edge > 0 && mb >= edge && mb < microbatches - edge) continue;
    TimelineTask tt;
    tt.stage = static_cast<int>(stream.device);
    tt.kind = sim::task_kind_name(task.label.kind);
    tt.microbatch = mb;
    tt.start_s = static_cast<double>(sim.timeline.start[t]) * 1e-9;
    tt.end_s = static_cast<double>(sim.timeline.end[t]) * 1e-9;
    p.timeline.push_back(std::move(tt));
  }
  for (const auto& [key, seconds] : busy) p.stage_busy.push_back({key.first, key.second, seconds});
}

core::Result<PointResult> evaluate_point(const Scenario& scenario) {
  ALPASIM_ASSIGN_OR_RETURN(cost_model::CostModel cost, cost_model_for_scenario(scenario));
  ALPASIM_ASSIGN_OR_RETURN(Evaluation e, evaluate_fixed_plan(scenario, cost));
  const sim::PipelineReport& r = e.simulation.report;
  PointResult p;
  p.plan_summary = scenario.search.megatron ? megatron_summary(*scenario.search.megatron)
                                            : "plan file " + scenario.search.plan_file_as_written;
  p.iteration_time_s = r.iteration_time.value();
  p.model_tflops_per_gpu = core::to_tflops_per_s(r.model_flops_per_gpu);
  p.hardware_tflops_per_gpu = core::to_tflops_per_s(r.hardware_flops_per_gpu);
  p.peak_memory_bytes = r.peak_memory_bytes;
  p.usable_memory_bytes = scenario.cluster.usable_memory().value();
  p.fits = r.overflows.empty();
  for (const sim::PipelineDeviceReport& d : r.devices) {
    p.stage_memory_bytes.push_back(d.peak_memory_bytes);
    p.stage_memory_components_bytes.push_back(d.peak_memory_by_component);
  }
  fill_timeline(e.simulation, p);
  return p;
}

// A 3D grid in Megatron-LM's terms ("tp=8 pp=4 dp=2 cp=1 ep=1 mbs=1 vp=1 recompute=full",
// schema::megatron_shape); any other plan as "pp 4: 2×(1×8), 2×(2×4) meshes, 32
// microbatches, 1F1B, recompute full", consecutive stages with the same logical mesh
// counted, not repeated.
std::string plan_summary(const schema::Plan& plan) {
  if (const auto shape = schema::megatron_shape(plan)) return shape->to_string();
  std::string meshes;
  for (std::size_t i = 0; i < plan.stages.size();) {
    std::size_t j = i;
    const auto& a = plan.stages[i];
    while (j < plan.stages.size() && plan.stages[j].logical_rows == a.logical_rows &&
           plan.stages[j].logical_cols == a.logical_cols) {
      ++j;
    }
    if (!meshes.empty()) meshes += ", ";
    const std::string shape = std::to_string(a.logical_rows) + "×" + std::to_string(a.logical_cols);
    meshes += j - i > 1 ? std::to_string(j - i) + "×(" + shape + ")" : shape;
    i = j;
  }
  std::string s = "pp " + std::to_string(plan.stages.size()) + ": " + meshes + " meshes, " +
                  std::to_string(plan.num_microbatches) + " microbatches, " +
                  std::string(schema::schedule_name(plan.schedule));
  if (plan.interleave > 1) s += " ×" + std::to_string(plan.interleave);
  if (plan.recompute != schema::Recompute::kNone) {
    s += ", recompute " + std::string(schema::recompute_name(plan.recompute));
  }
  return s;
}

core::Result<PointResult> search_point(const Scenario& scenario, int threads,
                                       const std::string& mode) {
  ALPASIM_ASSIGN_OR_RETURN(cost_model::CostModel cost, cost_model_for_scenario(scenario));
  planner::SearchInput in = search_input(scenario, cost);
  // The what_if/capacity "planner" key, else the scenario's own search mode when it names a
  // planner mode, else Alpa's search.
  in.mode = !mode.empty()                                ? mode
            : planner::is_search_mode(scenario.search.mode) ? scenario.search.mode
                                                          : "alpa";
  in.options.threads = threads;
  in.options.compare_baselines = false;  // one plan per point; baselines are `alpa-sim run`'s
  ALPASIM_ASSIGN_OR_RETURN(planner::SearchResult r, planner::search(in));
  PointResult p;
  // A Megatron point with context or expert parallelism says so in its shape, not its plan.
  p.plan_summary = r.megatron_shape ? r.megatron_shape->to_string() : plan_summary(r.plan);
  p.iteration_time_s = r.prediction.iteration_time_s;
  p.model_tflops_per_gpu = r.prediction.model_tflops_per_gpu;
  p.hardware_tflops_per_gpu = r.prediction.hardware_tflops_per_gpu;
  p.peak_memory_bytes = r.prediction.peak_memory_bytes;
  p.usable_memory_bytes = scenario.cluster.usable_memory().value();
  p.fits = r.prediction.fits;
  p.stage_memory_bytes = r.prediction.peak_memory_bytes_per_stage;
  // The timeline chart: the chosen plan's problem simulated once more (deterministic, so
  // the same numbers as the search's verdict).
  ALPASIM_ASSIGN_OR_RETURN(sim::PipelineSimulation simulation, sim::simulate_pipeline(r.problem));
  fill_timeline(simulation, p);
  // The components at each stage's peak; the totals are the search's (equal: same problem).
  for (const sim::PipelineDeviceReport& d : simulation.report.devices) {
    p.stage_memory_components_bytes.push_back(d.peak_memory_by_component);
  }
  return p;
}

}  // namespace

Json point_result_to_json(const PointResult& r) {
  Json timeline = Json::array();
  for (const TimelineTask& t : r.timeline) {
    timeline.push_back({{"stage", t.stage},
                        {"kind", t.kind},
                        {"microbatch", t.microbatch},
                        {"start_s", t.start_s},
                        {"end_s", t.end_s}});
  }
  Json busy = Json::array();
  for (const StageBusy& b : r.stage_busy) {
    busy.push_back({{"stage", b.stage}, {"kind", b.kind}, {"busy_s", b.busy_s}});
  }
  return Json{{"plan", r.plan_summary},
              {"iteration_time_s", r.iteration_time_s},
              {"model_tflops_per_gpu", r.model_tflops_per_gpu},
              {"hardware_tflops_per_gpu", r.hardware_tflops_per_gpu},
              {"peak_memory_bytes", r.peak_memory_bytes},
              {"usable_memory_bytes", r.usable_memory_bytes},
              {"fits", r.fits},
              {"stage_memory_bytes", r.stage_memory_bytes},
              {"stage_memory_components_bytes", r.stage_memory_components_bytes},
              {"stage_busy", busy},
              {"timeline", timeline},
              {"timeline_edge_microbatches", r.timeline_edge_microbatches},
              {"timeline_microbatches", r.timeline_microbatches}};
}

core::Result<PointResult> point_result_from_json(const Json& j, const std::string& where) {
  PointResult r;
  try {
    r.plan_summary = j.at("plan").get<std::string>();
    r.iteration_time_s = j.at("iteration_time_s").get<double>();
    r.model_tflops_per_gpu = j.at("model_tflops_per_gpu").get<double>();
    r.hardware_tflops_per_gpu = j.at("hardware_tflops_per_gpu").get<double>();
    r.peak_memory_bytes = j.at("peak_memory_bytes").get<std::int64_t>();
    r.usable_memory_bytes = j.at("usable_memory_bytes").get<std::int64_t>();
    r.fits = j.at("fits").get<bool>();
    r.stage_memory_bytes = j.at("stage_memory_bytes").get<std::vector<std::int64_t>>();
    r.stage_memory_components_bytes =
        j.at("stage_memory_components_bytes").get<std::vector<std::vector<std::int64_t>>>();
    for (const Json& t : j.at("timeline")) {
      r.timeline.push_back({t.at("stage").get<int>(), t.at("kind").get<std::string>(),
                            t.at("microbatch").get<int>(), t.at("start_s").get<double>(),
                            t.at("end_s").get<double>()});
    }
    r.timeline_edge_microbatches = j.at("timeline_edge_microbatches").get<int>();
    r.timeline_microbatches = j.at("timeline_microbatches").get<int>();
    for (const Json& b : j.at("stage_busy")) {
      r.stage_busy.push_back({b.at("stage").get<int>(), b.at("kind").get<std::string>(),
                              b.at("busy_s").get<double>()});
    }
  } catch (const std::exception& e) {
    return core::invalid_argument(where + ": not a point result: " + e.what());
  }
  return r;
}

PlanPointFn default_plan_point_fn(int search_threads, const std::string& planner_mode) {
  return [search_threads, planner_mode](const Scenario& scenario) -> core::Result<PointResult> {
    if (planner_mode.empty() && scenario.search.mode == "fixed") return evaluate_point(scenario);
    return search_point(scenario, search_threads, planner_mode);
  };
}

}  // namespace alpasim::driver
