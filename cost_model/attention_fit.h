#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cluster/gpu_spec.h"
#include "cost_model/compute_cost.h"
#include "schema/profile.h"

namespace alpasim::cost_model {

/// The AttentionCurve terms of one direction of a profile attention row (the kernel as a whole:
/// the sum over its GEMMs of what ComputeCostModel::flash_attention_dot prices separately).
struct AttentionTerms {
  double flops = 0;            ///< tensor-core work of the computed tiles
  double score_elements = 0;   ///< queries x keys elements formed (x2 backward: S and dP)
  double output_elements = 0;  ///< O forward; dV + dQ + dK backward
  double measured_s = 0;       ///< the row's forward_us or backward_us, in seconds
};
AttentionTerms attention_terms(const schema::AttentionEntry& row, bool backward);

/// The curve's time for `terms` on a GPU with tensor peak `peak_flops_per_s` (seconds).
double attention_time_s(const AttentionCurve& curve, const AttentionTerms& terms, double peak_flops_per_s);

/// Least squares on relative residuals, sum ((predicted - measured) / measured)^2, of the four
/// AttentionCurve parameters, each >= 0 (a negative one is fixed at 0 and the rest refitted).
/// `peaks[i]` is row i's tensor peak. Nullopt when fewer than 5 rows or the flops term is
/// not positive (no efficiency to speak of).
std::optional<AttentionCurve> fit_attention_curve(const std::vector<AttentionTerms>& rows,
                                                  const std::vector<double>& peaks);

/// Which backward rows fit: a backward no longer than twice the fastest one measured is at the
/// harness's host-side floor (autograd launches: on the H200 run the backward of twice the
/// work took no longer, 0.58 vs 0.55 ms) and measures the host, not the kernel. Forward
/// rows all fit (their fastest, 0.09 ms, still grows with the work). Returns one flag per row.
std::vector<char> backward_rows_above_host_floor(const std::vector<AttentionTerms>& backward_rows);

}  // namespace alpasim::cost_model
