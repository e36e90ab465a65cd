#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "driver/scenario.h"

namespace alpasim::driver {

/// One task of the chosen plan's simulated iteration, for the pipeline timeline chart.
struct TimelineTask {
  int stage = 0;               ///< pipeline stage (the representative device of its mesh)
  std::string kind;            ///< sim::task_kind_name(): "forward", "backward", "send", ...
  int microbatch = -1;         ///< -1 when not tied to a microbatch (optimizer, grad sync)
  double start_s = 0;          ///< from the start of the iteration
  double end_s = 0;            ///< >= start_s
};

/// Time one pipeline stage's compute stream spent on one kind of task over the iteration.
struct StageBusy {
  int stage = 0;
  std::string kind;   ///< sim::task_kind_name()
  double busy_s = 0;  ///< summed task durations
};

/// What planning one scenario predicts: the best plan and how it runs.
struct PointResult {
  std::string plan_summary;  ///< one line, e.g. "pp 4 × (dp 2, tp 8), 32 microbatches, 1F1B"
  double iteration_time_s = 0;
  double model_tflops_per_gpu = 0;     ///< Megatron definition: no recomputation counted
  double hardware_tflops_per_gpu = 0;  ///< recomputation counted
  std::int64_t peak_memory_bytes = 0;  ///< per GPU, max over devices
  std::int64_t usable_memory_bytes = 0;  ///< of one GPU: capacity - reserve (the fit limit)
  bool fits = true;                    ///< every device within its memory
  std::vector<std::int64_t> stage_memory_bytes;  ///< peak per GPU of each pipeline stage
  /// Per stage, the peak's bytes by component in sim::MemoryComponent order (parameters,
  /// gradients, optimizer states, stored and working activations); empty when unknown.
  std::vector<std::vector<std::int64_t>> stage_memory_components_bytes;
  std::vector<TimelineTask> timeline;            ///< may be empty (no chart then)
  /// 0: the timeline has every microbatch; k > 0: only the first k and the last k of
  /// timeline_microbatches (and the tasks of no microbatch), so long iterations stay readable.
  int timeline_edge_microbatches = 0;
  int timeline_microbatches = 0;  ///< microbatch-chunk indices in the iteration (max + 1)
  std::vector<StageBusy> stage_busy;  ///< every compute task counted, elided or not
};

/// Plans one scenario (one point of a sweep or of a capacity study). Must be safe to call
/// from several threads at once on different scenarios, and deterministic. A plan that
/// does not fit is a successful result with fits = false; an error is a point that cannot
/// be planned at all (e.g. a batch that does not divide), reported in that point's row.
using PlanPointFn = std::function<core::Result<PointResult>(const Scenario&)>;

/// The JSON object of a point result (sorted keys, units in names). Round-trips through
/// point_result_from_json exactly (doubles are written shortest-round-trip).
core::Json point_result_to_json(const PointResult& result);
/// Reads point_result_to_json's output back; errors name `where` and the key.
core::Result<PointResult> point_result_from_json(const core::Json& json, const std::string& where);

/// The plan-point function the alpa-sim commands use: search.mode "fixed" evaluates the
/// scenario's plan (driver::evaluate_fixed_plan, sim::lowering); "alpa" runs
/// planner::search (no baselines) and simulates the chosen plan once more for its
/// timeline. The cost model is cost_model_for_scenario's. `search_threads` is the threads
/// one point's planner may use (1 inside a threaded sweep).
/// A non-empty `planner_mode` (a planner::search mode, e.g. "megatron" for the faster
/// Megatron-LM grid baseline) searches every scenario with it, fixed plan or not.
PlanPointFn default_plan_point_fn(int search_threads, const std::string& planner_mode = "");

}  // namespace alpasim::driver
