#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "driver/scenario.h"
#include "ir/summary.h"
#include "schema/plan.h"
#include "sim/pipeline_sim.h"

namespace alpasim::driver {

/// What `alpa-sim run` produces for one scenario.
struct RunReport {
  core::Json json;   ///< the --json object
  std::string text;  ///< the human summary
  std::optional<schema::Plan> plan;                   ///< the plan, when one was made or read
  std::optional<sim::PipelineSimulation> simulation;  ///< its simulated iteration
  /// The simulator input of `simulation`: its tasks' nested trace events
  /// (sim::collective_trace_slices) are computed from it only when a trace is written.
  std::optional<sim::PipelineProblem> problem;
  /// What the user should know although the run succeeded (scenario_warnings); also in
  /// `json["warnings"]` when there are any. The CLI prints each on stderr.
  std::vector<std::string> warnings;
};

/// Settings that work but are probably not what the user meant: a 16-bit format the GPU
/// has no tensor cores for (bf16 on V100 runs at the fp32 peak, about 8x below fp16).
std::vector<std::string> scenario_warnings(const Scenario& scenario);

struct RunSettings {
  /// Report wall-clock measurements (search.wall_time_s). Everything else in the output
  /// depends only on the scenario, so without them the same scenario gives byte-identical
  /// output.
  bool include_timing = true;
  /// Called as a search enters each phase (a point, a baseline), for a progress display
  /// (planner::SearchOptions::progress). Empty: none.
  std::function<void(const std::string& phase)> progress;
};

/// What the model summary accounts for: the scenario's training settings (fp8 runs keep
/// bf16 tensors), and for a fixed Megatron plan its microbatch size and recomputation.
ir::SummaryOptions summary_options(const Scenario& scenario);

/// Runs the main job on a scenario: summarise the model, then plan (search modes) or
/// evaluate the given plan (mode "fixed"), and simulate the iteration.
core::Result<RunReport> run_scenario(const Scenario& scenario, const RunSettings& settings = {});

/// Writes the report's files into `dir` (created if missing): summary.json, summary.txt,
/// scenario.json (the normalised scenario) and, when a plan was made or evaluated,
/// plan.json (plan format v1) and trace.json (Chrome trace / Perfetto).
core::Status write_run_outputs(const RunReport& report, const Scenario& scenario,
                               const std::filesystem::path& dir);

}  // namespace alpasim::driver
