#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "driver/plan_point.h"
#include "driver/scenario.h"
#include "driver/sweep.h"

namespace alpasim::driver {

/// One hardware option of a capacity study.
struct CapacityCandidate {
  std::string preset;                   ///< cluster preset (GPU kind + fabric)
  double price_usd_per_gpu_hour = 0;    ///< what one GPU of this kind costs per hour
  std::vector<std::int64_t> nodes;      ///< node counts to try, ascending
};

/// The scenario's "capacity" block (docs/capacity.md).
struct CapacitySpec {
  /// Exactly one of the two: tokens (transformers: iterations = ceil(tokens / (global
  /// batch × seq_len))) or iterations.
  std::optional<double> tokens_to_train;
  std::optional<std::int64_t> iterations;
  double deadline_days = 0;  ///< wall-clock days the training must finish in
  std::vector<CapacityCandidate> candidates;
  /// planner::search mode for every option, whatever the scenario's search block says;
  /// "" (absent): the scenario's search (its fixed plan, or "alpa").
  std::string planner;
};

/// Reads and strictly validates a "capacity" block.
core::Result<CapacitySpec> parse_capacity(const core::JsonValue& value);
/// parse_capacity on the scenario's kept block (an error when the scenario has none).
core::Result<CapacitySpec> capacity_of(const Scenario& scenario);

/// One (candidate, node count) option.
struct CapacityOption {
  std::size_t candidate = 0;   ///< index into CapacitySpec::candidates
  PointRow row;                ///< the planned point (plan, iteration time, memory)
  double time_to_train_s = 0;  ///< iterations × iteration time (valid when row.ok)
  double cost_usd = 0;         ///< hours × GPUs × price (valid when row.ok)
  bool meets_deadline = false; ///< planned, fits memory and finishes by the deadline
};

/// The answer of a capacity study.
struct CapacityResult {
  std::string scenario_name;
  std::string scenario_file;
  CapacitySpec spec;
  std::int64_t iterations = 0;       ///< iterations to train
  double tokens_per_iteration = 0;   ///< 0 for models without tokens
  std::vector<CapacityOption> options;  ///< candidate order, then node order
  /// Per candidate: index into options of its smallest cluster meeting the deadline.
  std::vector<std::optional<std::size_t>> smallest;
  /// Index into options of the cheapest option meeting the deadline (ties: fewer GPUs,
  /// then earlier candidate); nullopt when none meets it.
  std::optional<std::size_t> cost_optimal;
};

/// Plans every (candidate, nodes) option with `fn` and answers the study.
core::Result<CapacityResult> run_capacity(const Scenario& scenario, const PlanPointFn& fn,
                                          const RunOptions& options);

/// The study as JSON (sorted keys, units in names).
core::Json capacity_to_json(const CapacityResult& result);
/// One CSV line per option.
std::string capacity_to_csv(const CapacityResult& result);

/// Runs `alpa-sim capacity`: plans every option, writes the outputs the command names and
/// returns what to print on stdout.
core::Result<std::string> capacity_command(const StudyCommand& command);

}  // namespace alpasim::driver
