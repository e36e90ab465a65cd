#pragma once

#include <functional>
#include <string>

#include "core/json_reader.h"
#include "core/status.h"
#include "cost_model/cost_model.h"
#include "driver/scenario.h"
#include "planner/search/search.h"
#include "sim/pipeline_sim.h"

namespace alpasim::driver {

/// A plan chosen by the search (or a plan file evaluated as the search scores plans), with
/// its simulated iteration.
struct SearchRun {
  planner::SearchResult result;
  sim::PipelineSimulation simulation;  ///< result.problem simulated (timeline for trace.json)
};

/// The search input of a scenario: model, cluster, training settings, mode and time limit.
planner::SearchInput search_input(const Scenario& scenario, const cost_model::CostModel& cost);

/// Runs the scenario's search mode ("alpa" or a baseline mode). kResourceExhausted when no
/// plan fits, naming the smallest memory per device any considered plan needs.
/// `progress`, when set, is called as the search enters each phase (SearchOptions::progress).
core::Result<SearchRun> run_search(const Scenario& scenario, const cost_model::CostModel& cost,
                                   std::function<void(const std::string&)> progress = {});

/// Evaluates the scenario's search.plan file exactly as the search scores plans, so a plan
/// written by `alpa-sim --out` comes back with the same prediction.
core::Result<SearchRun> evaluate_plan_file(const Scenario& scenario,
                                           const cost_model::CostModel& cost);

/// The --json members of a searched plan: "plan", "prediction", "baselines" and "search"
/// (statistics; "wall_time_s" only when `include_timing`, since it differs run to run).
void add_search_json(const SearchRun& run, bool include_timing, core::Json* out);

/// The human summary: the plan (stages, meshes, devices, main shardings), the prediction and
/// the comparison table against the baselines.
std::string search_text(const SearchRun& run, bool include_timing);

}  // namespace alpasim::driver
