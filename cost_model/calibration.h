#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cluster/cluster_spec.h"
#include "core/status.h"
#include "cost_model/collective_cost.h"
#include "cost_model/compute_cost.h"
#include "schema/profile.h"

namespace alpasim::cost_model {

/// All parameters of the cost model, with where each came from.
struct CalibratedParams {
  ComputeParams compute;
  CollectiveParams collective;
  /// Parameter name -> "fitted: <machine> (<n> rows)", "inherited: <origin>" or
  /// "default: <reason>". Ordered, so printing it is deterministic.
  std::map<std::string, std::string> origin;
};

/// The documented starting point when no profile has fitted anything (docs/cost_model.md:
/// NCCL design constants and typical kernel figures, all marked "default").
CalibratedParams default_params();

/// One profile entry: what was published and what the calibrated model predicts.
struct FitRow {
  std::string op_class;  ///< "gemm/bf16", "all_reduce", "link/infiniband", ...
  std::string what;      ///< e.g. "8 GPUs x 1 node, 67108864 B, default"
  schema::ProfileRole role = schema::ProfileRole::kFit;
  std::string quantity;  ///< "tflops_per_s", "busbw_gbyte_per_s", "time_us", "gbyte_per_s"
  double published = 0;
  double predicted = 0;
  double rel_error = 0;  ///< (predicted - published) / published
  std::string citation;
};

/// Fit and check errors of one operator class.
struct ClassSummary {
  std::string op_class;
  int fit_rows = 0;
  int check_rows = 0;
  double fit_max_abs_rel_error = 0;
  double check_max_abs_rel_error = 0;
};

/// The per-row table and per-class summary of a calibration.
struct CalibrationReport {
  std::string machine;
  std::vector<FitRow> rows;  ///< in profile order: gemm, conv, attention, collectives, links
  /// One summary per op_class, sorted by name.
  std::vector<ClassSummary> summary() const;
  /// A fixed-format text table (rows, then summary, then parameter origins).
  std::string to_text(const CalibratedParams& params) const;
};

/// The outcome of calibrate().
struct Calibration {
  CalibratedParams params;
  CalibrationReport report;
};

/// Fits the cost model to the "fit" rows of `profile` and predicts every row with the
/// result, so "check" rows measure prediction. `machine` is the profile's machine (its
/// node count is replaced per row by the row's num_nodes); `prior` supplies every parameter
/// the profile has no fit rows for (default_params() or another machine's calibration:
/// the origin map records which). Fails when a row does not fit the machine (e.g. 16 GPUs
/// per node on an 8-GPU node) or `profile.provenance.gpu` differs from machine.gpu.
core::Result<Calibration> calibrate(const schema::Profile& profile,
                                    const cluster::ClusterSpec& machine,
                                    const CalibratedParams& prior);

/// Predicts one collective profile row on `machine` (rows of a profile, and validation).
core::Result<CollectiveEstimate> predict_collective_row(const schema::CollectiveEntry& row,
                                                        const cluster::ClusterSpec& machine,
                                                        const CalibratedParams& params);

/// Predicts the achieved bandwidth (GB/s) of a profile link row under `params`.
double predict_link_row_gbyte_per_s(const schema::LinkEntry& row, const CalibratedParams& params);

/// "all_reduce" etc. -> Collective; nullopt for unknown names.
std::optional<Collective> parse_collective(std::string_view name);
/// "nvswitch" etc. -> cluster::LinkClass; nullopt for unknown names.
std::optional<cluster::LinkClass> parse_link_class(std::string_view name);

}  // namespace alpasim::cost_model

namespace alpasim::cost_model {

/// The profiles shipped in profiles/, calibrated in dependency order: dgx-a100-80gb from
/// default_params(); hgx-h200 (its derived rows and the GEMM rows measured on an H200,
/// profiles/hgx-h200/2026-11-26-measured-full.json) and aws-p3.16xlarge from dgx-a100-80gb;
/// dgx-h100 from hgx-h200 (same GH100 die and NVLink4/NVSwitch fabric); dgx-b200 from
/// dgx-h100 (same NDR network). Keyed by machine (preset) name.
core::Result<std::map<std::string, Calibration>> calibrate_shipped_profiles(
    const std::filesystem::path& profiles_dir);

/// Gives `params` the fused-attention curves of `source` (named `source_name` in the origin
/// map) for each direction whose curve is still the default (no attention rows fitted it):
/// the curves are fractions of the GPU's own peak, so they carry over as an assumption
/// (docs/cost_model.md "Fused attention"). The shipped chain and a scenario's own profile
/// both take the H200's measured curve this way.
void inherit_attention_where_default(CalibratedParams& params, const CalibratedParams& source,
                                     const std::string& source_name);

/// The calibrated parameters to use for cluster preset `preset` (dgx-a100-40gb shares the
/// dgx-a100-80gb calibration: same SM and NVLink3 fabric); not-found for presets without one.
core::Result<CalibratedParams> params_for_preset(
    const std::map<std::string, Calibration>& shipped, const std::string& preset);

}  // namespace alpasim::cost_model
