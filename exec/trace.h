#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "exec/backend.h"
#include "exec/instruction.h"

namespace alpasim::exec {

/// The measured trace of the last iteration in the simulator's Chrome-trace layout
/// (docs/trace.md): pid 1 + device index, tracks `compute` (run, allocate, free), `p2p`
/// (send, recv) and `collective`, names "<kind> <op> mb<m> vs<stage>", categories as the
/// simulator's (forward, backward, optimizer, send, reshard_all_gather, grad_sync, task),
/// and a `memory` counter per device keyed by buffer role. Integer nanoseconds, fixed key
/// order: the same timings give the same bytes.
std::string measured_trace_json(const Program& program, const ExecutionResult& result,
                                const std::string& generator);

/// Measured times, summed from the last iteration's instruction timings.
struct MeasuredSummary {
  double iteration_mean_s = 0;  ///< mean wall time of the measured iterations
  double iteration_min_s = 0;
  /// Per stage: the largest, over the stage's devices, of the time in RUN instructions
  /// (the simulator's compute_busy_s of that pipeline device).
  std::vector<double> stage_compute_s;
  /// Per instruction kind name: count and total seconds over all devices.
  std::map<std::string, std::int64_t> kind_count;
  std::map<std::string, double> kind_total_s;
  std::int64_t instructions = 0;  ///< per iteration, all devices
};
MeasuredSummary summarize(const Program& program, const ExecutionResult& result);

/// What a simulator report (sim::report_json: `iteration_time_s`, `devices[i].compute_busy_s`,
/// `devices[i].peak_memory_bytes`, device i = pipeline stage i) predicts.
struct Prediction {
  double iteration_s = 0;
  std::vector<double> stage_compute_s;
  std::vector<std::int64_t> stage_peak_bytes;
  /// The GPU kind the prediction is for (alpa-sim's `scenario.cluster.gpu`); "" if the file
  /// does not say (a bare simulator report).
  std::string gpu;
  /// False when the measurement ran on another kind of device than the prediction's (the CPU
  /// backend against a GPU prediction): times are then shown side by side, with no error %.
  /// Memory is in bytes on either, so it is always compared.
  bool times_comparable = true;
};
/// Reads the keys above from a simulator report (`iteration_time_s`, `devices` at the root)
/// or from alpa-sim's own output (`summary.json` of `--out`, or `--json`: the report under
/// `prediction`, the GPU under `scenario.cluster.gpu`); other keys are ignored.
core::Result<Prediction> read_prediction(const std::filesystem::path& path);

/// The table alpa-exec prints: per stage, per instruction kind, end to end; with a
/// prediction, predicted and error % ((measured − predicted) / predicted) columns.
std::string summary_to_text(const Program& program, const MeasuredSummary& s,
                            const std::vector<std::int64_t>& peak_bytes,
                            const std::optional<Prediction>& prediction);
core::Json summary_to_json(const Program& program, const MeasuredSummary& s,
                           const std::vector<std::int64_t>& peak_bytes,
                           const std::optional<Prediction>& prediction);

}  // namespace alpasim::exec
