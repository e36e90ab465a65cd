#include "driver/search_run.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "core/text.h"
#include "driver/evaluate.h"

namespace alpasim::driver {
namespace {

using core::Json;

// "0-7" or "0-3,8-11": device ids as ranges, for the summary.
std::string device_ranges(const std::vector<std::int64_t>& ids) {
  std::vector<std::int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

// The decisions worth a line each: matmuls (two operands) that shard something, one per
// distinct (strategy, output spec), in operator order, at most `limit`.
std::vector<std::string> main_shardings(const schema::PlanStage& st, std::size_t limit) {
  std::vector<std::string> lines;
  std::vector<std::string> seen;
  for (const auto& s : st.shardings) {
    if (s.inputs.size() < 2 || s.output.is_replicated()) continue;
    std::string key = s.strategy + " -> " + s.output.to_string();
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    std::string inputs;
    for (const auto& in : s.inputs) inputs += (inputs.empty() ? "" : ", ") + in.to_string();
    lines.push_back(s.op + ": [" + inputs + "] -> " + s.output.to_string());
    if (lines.size() == limit) break;
  }
  return lines;
}

Json prediction_members(const planner::Prediction& p) {
  return Json{{"iteration_time_s", p.iteration_time_s},
              {"model_tflops_per_gpu", p.model_tflops_per_gpu},
              {"hardware_tflops_per_gpu", p.hardware_tflops_per_gpu},
              {"samples_per_s", p.samples_per_s},
              {"bubble_fraction", p.bubble_fraction},
              {"peak_memory_bytes", p.peak_memory_bytes},
              {"peak_memory_bytes_per_stage", p.peak_memory_bytes_per_stage},
              {"fits", p.fits},
              {"memory_message", p.memory_message}};
}

core::Result<SearchRun> simulate(planner::SearchResult result) {
  ALPASIM_ASSIGN_OR_RETURN(sim::PipelineSimulation simulation,
                           sim::simulate_pipeline(result.problem));
  return SearchRun{std::move(result), std::move(simulation)};
}

}  // namespace

planner::SearchInput search_input(const Scenario& scenario, const cost_model::CostModel& cost) {
  planner::SearchInput in;
  in.model = scenario.model;
  in.cluster = scenario.cluster;
  in.cost = cost;
  in.global_batch_size = scenario.training.global_batch_size;
  in.dtype = scenario.training.dtype;
  in.block_scaled = *sim::lowering::parse_block_scaled(scenario.training.block_scaled_dtype);
  in.optimizer = scenario.training.optimizer;
  in.num_microbatches = scenario.training.num_microbatches;
  in.mode = scenario.search.mode == "fixed" ? "alpa" : scenario.search.mode;
  in.options.time_limit_s = scenario.search.time_limit_s;
  in.options.max_points = static_cast<int>(scenario.search.max_points);
  in.options.compare_baselines = scenario.search.compare_baselines;
  // Intra-op solves run in parallel; the search's result does not depend on the count.
  in.options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return in;
}

core::Result<SearchRun> run_search(const Scenario& scenario, const cost_model::CostModel& cost,
                                   std::function<void(const std::string&)> progress) {
  planner::SearchInput in = search_input(scenario, cost);
  in.options.progress = std::move(progress);
  ALPASIM_ASSIGN_OR_RETURN(planner::SearchResult result, planner::search(in));
  return simulate(std::move(result));
}

core::Result<SearchRun> evaluate_plan_file(const Scenario& scenario,
                                           const cost_model::CostModel& cost) {
  ALPASIM_CHECK(scenario.search.plan_file.has_value()) << "no plan file in the scenario";
  ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, schema::read_plan_file(*scenario.search.plan_file));
  ALPASIM_ASSIGN_OR_RETURN(planner::SearchResult result,
                           planner::evaluate_plan(search_input(scenario, cost), plan));
  return simulate(std::move(result));
}

void add_search_json(const SearchRun& run, bool include_timing, Json* out) {
  const planner::SearchResult& r = run.result;
  Json& j = *out;
  j["plan"] = schema::plan_to_json(r.plan);
  // The plan's grid in Megatron-LM's terms, null when it is not a 3D grid (schema/plan.h).
  const auto shape = r.megatron_shape ? r.megatron_shape : schema::megatron_shape(r.plan);
  j["plan_megatron"] = shape ? shape->to_json() : Json(nullptr);
  if (!r.plan_file_unavailable.empty()) j["plan_file_unavailable"] = r.plan_file_unavailable;
  Json prediction = simulation_report_json(run.simulation.report);
  prediction["search_prediction"] = prediction_members(r.prediction);
  prediction["num_microbatches"] = r.plan.num_microbatches;
  j["prediction"] = prediction;
  Json baselines = Json::array();
  for (const auto& b : r.baselines) {
    Json row{{"mode", b.mode}, {"ok", b.ok}, {"description", b.description}};
    if (b.ok) {
      row["prediction"] = prediction_members(b.prediction);
      // Which model priced the row: the one evaluator (as the searched plan), the Megatron
      // lowering (a Megatron point with cp or ep), or the grid's analytic costs.
      row["priced_by"] = b.by_evaluator ? "evaluator" : b.by_megatron_lowering ? "megatron_lowering" : "analytic";
    }
    baselines.push_back(row);
  }
  j["baselines"] = baselines;
  Json search{{"intra_op_solves", r.intra_op_solves},
              {"intra_op_queries", r.intra_op_queries},
              {"candidates_simulated", r.candidates_simulated},
              {"explanation", r.explanation}};
  if (include_timing) search["wall_time_s"] = r.wall_time_s;
  if (!r.answered_by.empty()) {
    // The answer is a baseline's plan (planner::SearchResult::answered_by).
    search["answered_by"] = r.answered_by;
    search["searched_prediction"] = prediction_members(r.searched_prediction);
  }
  j["search"] = search;
}

std::string search_text(const SearchRun& run, bool include_timing) {
  const planner::SearchResult& r = run.result;
  const schema::Plan& plan = r.plan;
  std::ostringstream s;
  s << "plan (" << plan.stages.size() << " stage" << (plan.stages.size() == 1 ? "" : "s") << ", "
    << schema::schedule_name(plan.schedule);
  if (plan.interleave > 1) s << " x" << plan.interleave << " virtual stages";
  s << ", " << plan.num_microbatches << " microbatches, recompute "
    << schema::recompute_name(plan.recompute) << "):\n";
  if (const auto shape = r.megatron_shape ? r.megatron_shape : schema::megatron_shape(plan)) {
    s << "  in Megatron-LM terms: " << shape->to_string() << "\n";
  }
  if (!r.plan_file_unavailable.empty()) {
    s << "  note: no plan file (--out writes no plan.json): " << r.plan_file_unavailable << "\n";
  }
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& st = plan.stages[i];
    s << "  stage " << i << "  layers [" << st.layer_begin << ", " << st.layer_end << ")  submesh "
      << st.submesh_nodes << "x" << st.submesh_gpus_per_node << "  logical mesh "
      << st.logical_rows << "x" << st.logical_cols << "  devices " << device_ranges(st.device_ids)
      << (st.weight_update_sharding ? "  weight-update sharding" : "") << "\n";
    for (const auto& line : main_shardings(st, 4)) s << "      " << line << "\n";
  }
  s << simulation_report_text(run.simulation.report, "prediction (simulated)");
  if (!r.baselines.empty()) {
    s << "comparison under the same cost model and simulator:\n"
      << planner::format_comparison(r) << planner::faster_baseline_note(r);
  }
  s << "search: " << r.intra_op_solves << " intra-op solves for " << r.intra_op_queries
    << " layer x mesh queries, " << r.candidates_simulated << " candidates simulated";
  if (include_timing) s << ", " << core::format_fixed(r.wall_time_s, 2) << " s wall time";
  s << "\n";
  // What cut the search short, if anything: the wall clock (results may differ from run to
  // run) or the deterministic max_points budget.
  for (const std::string& line : r.explanation) {
    if (line.rfind("stopped by the wall clock: ", 0) == 0 || line.rfind("work budget: ", 0) == 0) {
      s << "search: " << line << "\n";
    }
  }
  return s.str();
}

}  // namespace alpasim::driver
