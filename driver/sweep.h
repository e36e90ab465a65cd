#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "driver/plan_point.h"
#include "driver/scenario.h"
#include "ir/model_config.h"

namespace alpasim::driver {

/// One entry of what_if.models: a model block and the label the tables use.
struct ModelVariant {
  std::string label;  ///< the block's "name", or the generated model name
  ir::ModelConfig model;
};

/// The scenario's "what_if" block (docs/whatif.md): axes whose cartesian product is swept.
/// An empty axis is absent: that property keeps the scenario's value.
struct WhatIfSpec {
  std::vector<ModelVariant> models;
  std::vector<std::string> presets;         ///< cluster presets (GPU kind + fabric)
  std::vector<std::string> gpus;            ///< GPU kinds, keeping the scenario's fabric
  std::vector<std::int64_t> num_gpus;       ///< total GPUs (part of a node below one node)
  std::vector<std::int64_t> nodes;          ///< exclusive with num_gpus
  std::vector<std::int64_t> gpus_per_node;  ///< exclusive with num_gpus
  std::vector<std::int64_t> nics_per_node;
  std::vector<double> nic_bandwidth_gbit_per_s;
  /// GPUs sharing one NVLink fabric (NVL36 vs NVL72 studies); a multiple of the node's GPUs
  /// on an NVSwitch cluster.
  std::vector<std::int64_t> nvlink_domain_gpus;
  std::vector<std::int64_t> global_batch_size;
  /// planner::search mode for every point, whatever the scenario's search block says;
  /// "" (absent): the scenario's search (its fixed plan, or "alpa").
  std::string planner;

  /// Number of points: the product of the non-empty axis sizes (1 with no axis).
  std::size_t num_points() const;
};

/// Reads and strictly validates a "what_if" block. Errors name the file, the JSON pointer,
/// what was expected and what was found. `base_dir` resolves model file paths.
core::Result<WhatIfSpec> parse_what_if(const core::JsonValue& value,
                                       const std::filesystem::path& base_dir);
/// parse_what_if on the scenario's kept block (an error when the scenario has none).
core::Result<WhatIfSpec> what_if_of(const Scenario& scenario);

/// One point of a sweep: its coordinates and the scenario to plan.
struct SweepPoint {
  std::size_t index = 0;  ///< position in the cartesian product (the output order)
  /// (axis, value) in axis order: model, preset, gpu, num_gpus, nodes, gpus_per_node,
  /// nics_per_node, nic_bandwidth_gbit_per_s, nvlink_domain_gpus, global_batch_size; only
  /// the swept axes.
  std::vector<std::pair<std::string, std::string>> coordinates;
  Scenario scenario;   ///< the base scenario with this point's values applied
  std::string error;   ///< non-empty when the values cannot be applied (e.g. 12 GPUs of 8)
};

/// Expands the product, last axis fastest. Invalid combinations become points with an
/// error (the sweep reports them) instead of failing the whole sweep.
std::vector<SweepPoint> expand_sweep(const Scenario& base, const WhatIfSpec& spec);

/// The outcome of one point.
struct PointRow {
  std::size_t index = 0;
  std::vector<std::pair<std::string, std::string>> coordinates;
  std::int64_t num_gpus = 0;  ///< of the point's cluster (0 when it could not be built)
  std::string gpu;            ///< GPU kind name ("" when it could not be built)
  bool ok = false;            ///< planned (it may still not fit: result.fits)
  std::string error;          ///< why not, when !ok
  PointResult result;         ///< valid when ok
};

/// Progress callback: points finished so far and the total this process plans.
using ProgressFn = std::function<void(std::size_t done, std::size_t total)>;

/// How a set of points is run.
struct RunOptions {
  int threads = 1;        ///< worker threads (>= 1); output does not depend on it
  int rank = 0;           ///< this process's share: points with index % world_size == rank
  int world_size = 1;     ///< processes splitting the points (mpirun ranks)
  ProgressFn progress;    ///< optional; called from worker threads under a lock
};

/// Plans `points` (those of this rank) with `fn` on `options.threads` threads. Rows come
/// back in index order whatever the thread count.
std::vector<PointRow> run_points(const std::vector<SweepPoint>& points, const PlanPointFn& fn,
                                 const RunOptions& options);

/// A finished (or, under several ranks, partial) sweep.
struct SweepResult {
  std::string scenario_name;
  std::string scenario_file;
  std::vector<std::string> axes;  ///< the swept axes, in coordinate order
  std::size_t total_points = 0;   ///< of the whole product
  std::string planner;  ///< what planned each point: "fixed plan" or the planner mode
  std::vector<PointRow> rows;     ///< index order; all points once merged
};

/// Expands and plans the scenario's what_if block.
core::Result<SweepResult> run_sweep(const Scenario& scenario, const PlanPointFn& fn,
                                    const RunOptions& options);

/// The sweep as JSON: {"scenario", "axes", "total_points", "points": [...]}, sorted keys.
core::Json sweep_to_json(const SweepResult& sweep);
/// Reads sweep_to_json's output back (a partial file or a whole sweep).
core::Result<SweepResult> sweep_from_json(const core::Json& json, const std::string& where);
/// One CSV line per point: index, the axes, cluster_gpus, gpu, status, plan, iteration_time_s,
/// model_tflops_per_gpu, hardware_tflops_per_gpu, memory_per_gpu_bytes, usable_memory_bytes,
/// fits, error. RFC 4180 quoting; '\n' line ends.
std::string sweep_to_csv(const SweepResult& sweep);

/// The index of the point a report highlights: the fitting point with the highest model
/// TFLOP/s per GPU (ties: fewer GPUs, then lower index); -1 when none fits.
int best_point(const SweepResult& sweep);

/// Name of rank `rank`'s partial file in a sweep's output folder.
std::string part_file_name(int rank, int world_size);
/// Writes a partial sweep atomically (temporary file, then rename) as part_file_name().
core::Status write_part(const SweepResult& part, const std::filesystem::path& dir, int rank,
                        int world_size);
/// Merges the parts of one sweep (`names` name each part in errors, `whole` the set): every
/// point exactly once, all from the same sweep.
core::Result<SweepResult> merge_sweep_parts(std::vector<SweepResult> parts,
                                            const std::vector<std::string>& names,
                                            const std::string& whole);
/// Merges the world_size partial files in `dir` (a sweep split across separate jobs with
/// --rank/--world-size). wait_s > 0 waits that long for missing ones; 0 looks once. Errors
/// name the missing file, a mismatch between parts, or a point no part covers.
core::Result<SweepResult> merge_parts(const std::filesystem::path& dir, int world_size,
                                      double wait_s);

/// What `alpa-sim sweep` / `alpa-sim capacity` were asked to do (apps/alpa-sim/main.cc).
struct StudyCommand {
  std::string scenario_path;
  std::filesystem::path out_dir;      ///< "" or a folder: <name>.csv, .json, .html, .md
  std::filesystem::path csv_file;     ///< "" or where to write the CSV table
  std::filesystem::path json_file;    ///< "" or where to write the JSON table
  std::filesystem::path report_html;  ///< "" or where to write the HTML report
  std::filesystem::path markdown;     ///< "" or where to write the Markdown report
  std::string print = "text";         ///< stdout: "text" (Markdown), "json", "csv" or "none"
  int threads = 1;
  /// Split across separate jobs (part files in out_dir) when either is >= 0; -1 and -1:
  /// the processes of this MPI job (dist::world(): one process when not under mpirun/srun).
  int rank = -1;
  int world_size = -1;
  bool merge_only = false;  ///< sweep: only merge the part files in out_dir
  double merge_wait_s = 0;  ///< sweep by flags, rank 0: seconds to wait for missing parts

  ProgressFn progress;
  PlanPointFn plan;  ///< empty: default_plan_point_fn()
};

/// The rank and world size given by --rank/--world-size (-1: 0 and 1). Errors name a rank
/// outside the world.
core::Result<std::pair<int, int>> resolve_rank(int rank, int world_size);

/// Writes a study's files as the command names them (out_dir gives defaults
/// <stem>.csv/.json/.html/.md); the reports are rendered only when written.
core::Status write_study_outputs(const StudyCommand& command, const std::string& stem,
                                 const std::string& csv, const std::string& json,
                                 const std::function<std::string()>& html,
                                 const std::function<std::string()>& markdown);
/// What a study command prints on stdout for `print` ("text" = the Markdown report).
std::string study_stdout(const std::string& print, const std::string& csv,
                         const std::string& json, const std::function<std::string()>& markdown);

/// Runs `alpa-sim sweep`: plans this rank's points, and on rank 0 (or alone) merges and
/// writes the outputs. Returns what to print on stdout (empty on ranks other than 0).
core::Result<std::string> sweep_command(const StudyCommand& command);

/// Writes `text` to `path` (parent folders created); errors name the path.
core::Status write_text_file(const std::filesystem::path& path, const std::string& text);
/// RFC 4180 field quoting (quotes only when needed).
std::string csv_field(const std::string& field);

}  // namespace alpasim::driver
