#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "core/json_reader.h"
#include "core/status.h"
#include "cost_model/cost_model.h"
#include "driver/scenario.h"
#include "sim/lowering/megatron_lowering.h"
#include "sim/pipeline_sim.h"

namespace alpasim::driver {

/// The cost model a scenario asks for: "profile": "auto" (or absent) = the shipped
/// profiles calibrated once per process (calibrate_shipped_profiles) and the cluster
/// preset's parameters; {"preset": X} = preset X's parameters; {"file": F} = calibrated
/// from profile F on the cluster's machine, starting from default_params(). The GEMM rows
/// of a profile file are also the compute model's lookup table.
core::Result<cost_model::CostModel> cost_model_for_scenario(const Scenario& scenario);

/// A simulated fixed plan.
struct Evaluation {
  sim::lowering::LoweredPlan lowered;
  sim::PipelineSimulation simulation;
  /// search.megatron: the plan as a plan file (sim::lowering::megatron_plan_file), which
  /// `--out` writes as plan.json for `"mode": "fixed", "plan"` and alpa-exec; unset where
  /// the format cannot express the plan yet (cp > 1, mxfp8/nvfp4, ZeRO-2/3, models other
  /// than "gpt" and "llama", a stage spanning part of a node).
  std::optional<schema::Plan> plan_file;
  /// Why plan_file is unset (the format's limit, e.g. "search.megatron.cp: context
  /// parallelism has no plan-file form yet"); empty when it is set or for plan files.
  std::string plan_file_unavailable;
};

/// Lowers the scenario's fixed plan (search.megatron or search.plan_file) and simulates one
/// iteration. Errors: FAILED_PRECONDITION when the scenario is not mode "fixed"; those of
/// the lowering (INVALID_ARGUMENT / UNIMPLEMENTED) and of the simulator.
core::Result<Evaluation> evaluate_fixed_plan(const Scenario& scenario,
                                             const cost_model::CostModel& cost_model);

/// The "prediction" object of `alpa-sim --json` (units in key names, fixed key order):
/// iteration_time_s, model/hardware_tflops_per_gpu, peak_memory_bytes, bubble_fraction,
/// communication exposed/overlapped, memory fit verdict with overflows, per-stage devices
/// and per-layer costs of the first transformer layer.
core::Json prediction_json(const Evaluation& evaluation);

/// The simulator's report as JSON (iteration_time_s, model/hardware_tflops_per_gpu,
/// peak_memory_bytes, bubble_fraction, communication, memory verdict, per device): the part
/// of a prediction shared by fixed plans and searched plans.
core::Json simulation_report_json(const sim::PipelineReport& report);
/// The same as text lines under `title`, every number with its unit.
std::string simulation_report_text(const sim::PipelineReport& report, const std::string& title);

/// The human summary of a prediction (units on every number).
std::string prediction_text(const Evaluation& evaluation);


}  // namespace alpasim::driver
