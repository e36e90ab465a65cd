#pragma once

// `alpa-sim calibrate PROFILE.json`: fits the cost model to a profile (measured by
// alpa-profile or derived) and reports fit and held-out errors per operator class.

#include <filesystem>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "cost_model/calibration.h"
#include "driver/scenario.h"

namespace alpasim::driver {

/// Options of one calibration.
struct CalibrateOptions {
  /// Cluster preset of the machine; empty = the profile's provenance.machine.
  std::string machine;
  /// Print every row (fit rows too), not only the check rows.
  bool all_rows = false;
  /// A profile calibrated first (from default_params(), on its own machine) whose parameters
  /// are the prior: what this profile does not measure (e.g. InfiniBand for a one-node
  /// profile) is inherited from it. Empty: default_params().
  std::filesystem::path prior;
};

/// Error statistics of one group of rows (|predicted - measured| / measured).
struct ErrorStats {
  std::string group;  ///< op class, plus " set=<name>" for GEMM rows that carry one
  int rows = 0;
  double median_abs_rel_error = 0;
  double max_abs_rel_error = 0;
};

/// What `alpa-sim calibrate` prints.
struct CalibrateReport {
  cost_model::Calibration calibration;
  std::vector<ErrorStats> fit;       ///< per op class, fit rows, sorted by group
  std::vector<ErrorStats> held_out;  ///< per op class (and GEMM set), check rows, sorted
  /// Every check GEMM row of every dtype together: the target is a median within 5 %
  /// and a worst case within 15 % (docs/validation.md). rows == 0 when the profile has none.
  ErrorStats held_out_gemm;
  /// The same rows predicted by cost_model::ComputeCostModel::gemm with the profile's fit GEMM
  /// rows as its table: trilinear interpolation of log(time) inside a complete measured grid
  /// (alpa-profile's fit rows form one), the curve outside it.
  ErrorStats held_out_gemm_interpolated;
  /// held_out's GEMM groups again, predicted by grid interpolation (same group names).
  std::vector<ErrorStats> held_out_interpolated;
  std::string text;  ///< the human report
  core::Json json;   ///< the --json object (sorted keys: byte-stable)
};

/// Reads `profile_path` strictly (schema/profile.h), builds the machine (options.machine or
/// the profile's preset, one node), calibrates from cost_model::default_params() (or the
/// calibration of options.prior) and summarises. Errors name the file and JSON pointer (`p.json: /gemm/0/m: ...`), an unknown
/// preset, or a GPU that differs from the machine's.
core::Result<CalibrateReport> calibrate_profile(const std::filesystem::path& profile_path,
                                                const CalibrateOptions& options);

/// Median and maximum of |rel_error| over `rows` (ErrorStats.group left empty).
ErrorStats error_stats(const std::vector<const cost_model::FitRow*>& rows);

/// The held-out GEMM table in Markdown (docs/validation.md): one line per dtype and set
/// (curve predictions), then both totals (curve, grid interpolation) with the 5 % / 15 %
/// verdict.
std::string held_out_gemm_markdown(const CalibrateReport& report);

/// `alpa-sim run --profile FILE`: makes the scenario use that profile file instead of its
/// "profile" block (the path, relative to the working directory, is kept as written for
/// messages and output). Error: `--profile: file not found: <path>`.
core::Status use_profile_file(Scenario& scenario, const std::string& path_as_written);

}  // namespace alpasim::driver
