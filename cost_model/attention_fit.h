#pragma once

#include <vector>

#include "core/status.h"
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
/// `peaks[i]` is row i's tensor peak. An error saying why when there are fewer than 5 rows,
/// when the rows cannot separate the terms (one head dimension: the FLOPs are proportional
/// to the score elements), or when the tensor-core term is not positive.
core::Result<AttentionCurve> fit_attention_curve(const std::vector<AttentionTerms>& rows,
                                                 const std::vector<double>& peaks);

/// Which backward rows fit: a backward no longer than twice the fastest one of the profile's
/// fit rows is taken to be at a floor (on the H200 run the backward of twice the work took no
/// longer, 0.58 vs 0.55 ms: host-side launches or an under-filled grid) and measures that,
/// not the kernel; the fastest row is always dropped. A rule chosen after seeing the H200
/// rows (docs/cost_model.md "Fused attention"). Forward rows all fit (their fastest, 0.09 ms,
/// still grows with the work). Returns one flag per row.
std::vector<char> backward_rows_above_host_floor(const std::vector<AttentionTerms>& backward_rows);

}  // namespace alpasim::cost_model
