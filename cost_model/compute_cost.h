#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "cluster/gpu_spec.h"
#include "core/attention_tiles.h"
#include "core/dtype.h"
#include "core/units.h"
#include "schema/profile.h"

namespace alpasim::cost_model {

/// Size-dependent GEMM efficiency for one dtype:
///   efficiency(x) = max_efficiency * x / (x + half_size_flops),   x = 2*m*n*k*batch FLOPs,
/// i.e. 1/efficiency is linear in 1/x (a fixed per-GEMM cost amortised over the work).
/// Fitted by calibration from profile GEMM rows (docs/cost_model.md).
struct GemmCurve {
  double max_efficiency = 0.0;   ///< achieved / datasheet peak for very large GEMMs, (0, 1]
  double half_size_flops = 0.0;  ///< problem size at which efficiency is half the maximum
  /// Upper bound of the efficiency: the best efficiency the fit rows measured (calibration
  /// sets it), so the 1/x form is never extrapolated above a sustained measurement (e.g.
  /// A100 bf16: MAMF, the best shape of a brute-force search, 271.2 of 312 TFLOP/s).
  /// 0 = no bound.
  double ceiling_efficiency = 0.0;
};

/// Time model of one direction (forward or backward) of a fused (flash) attention kernel:
///   time = performed_flops / (max_efficiency * peak) + fixed_s
///        + (score_elements * score_element_flops + output_elements * output_element_flops) / peak
/// performed_flops: the tensor-core work of the tiles the kernel computes (the causal or
/// window share); score_elements: the queries x keys tiles it forms on chip (the scores
/// forward; the recomputed scores and dP backward), whose exponentials and softmax gradient
/// run outside the tensor cores; output_elements: what its other GEMMs write to HBM (O
/// forward; dV, dQ, dK backward, dQ accumulated in fp32). The per-element costs are in
/// FLOP-equivalents of the dtype's peak, so a GPU without attention rows can take another
/// GPU's curve as fractions of its own peak (calibration records where each came from).
/// Fitted by calibration from profile attention rows (docs/cost_model.md "Fused attention").
struct AttentionCurve {
  double max_efficiency = 0.0;        ///< (0, 1]; 0 = not fitted: flash GEMMs priced as GEMMs
  double fixed_s = 0.0;               ///< per kernel call (launch, tail, small side kernels), s
  double score_element_flops = 0.0;   ///< per score-shaped element formed, FLOP-equivalents
  double output_element_flops = 0.0;  ///< per output element written, FLOP-equivalents
};

/// Parameters of the compute cost model (calibration.h fills them from profiles).
struct ComputeParams {
  /// Per core::DType (index = enum value). A curve with max_efficiency 0 is "not fitted":
  /// queries in that dtype then use the fp16 curve scaled to the dtype's peak.
  std::array<GemmCurve, 5> gemm{};
  /// Achieved / datasheet HBM bandwidth of streaming (memory-bound) kernels.
  double hbm_efficiency = 0.0;
  /// Fixed cost of one memory-bound kernel (launch and tail), seconds.
  double kernel_overhead_s = 0.0;
  /// Convolution time / time of its implicit GEMM under the GEMM model (1 = same speed).
  double conv_slowdown = 1.0;
  /// Fused attention kernels: [0] forward, [1] backward (any dtype; the peak is the dtype's).
  std::array<AttentionCurve, 2> attention{};
};

/// C[batch, m, n] = A[batch, m, k] * B[batch, k, n] in `dtype`.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  core::DType dtype = core::DType::kFp16;
};

/// One GEMM of a fused (flash) attention kernel on one device: its whole shape (every tile)
/// and its share of the kernels (core::FlashDotShare).
struct FlashDot {
  GemmShape gemm;
  core::FlashDotShare share;
};

/// A 2-D convolution, NCHW input, OIHW filter.
struct ConvShape {
  std::int64_t batch = 0, in_channels = 0, out_channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0, stride = 1, padding = 0;
  core::DType dtype = core::DType::kFp16;
};

/// Where a compute estimate came from.
enum class ComputeSource : std::int8_t {
  kTable,         ///< an exact profile row
  kInterpolated,  ///< inside the profile's (m, n, k) grid: log-space trilinear
  kModel,         ///< outside the table: calibrated efficiency curve with a roofline bound
};

/// An operator time and the throughput it implies.
struct ComputeEstimate {
  core::Seconds time{0};
  core::Flops flops{0};
  core::FlopsPerSecond achieved{0};  ///< flops / time
  ComputeSource source = ComputeSource::kModel;
};

/// FLOPs of a GEMM (2 per multiply-add).
core::Flops gemm_flops(const GemmShape& s);
/// Bytes a GEMM must move at least once: A, B and C.
core::Bytes gemm_min_bytes(const GemmShape& s);
/// The implicit-GEMM view of a convolution: m = batch*out_h*out_w, n = out_channels,
/// k = in_channels*kernel_h*kernel_w.
GemmShape conv_as_gemm(const ConvShape& c);

/// Operator time on one GPU. Queries are O(1) (hash lookup, a grid search over at most a
/// few dozen sorted values, and a handful of flops). Immutable and thread-safe.
class ComputeCostModel {
 public:
  /// `gemm_table` and `conv_table` are profile rows measured on `gpu` (may be empty).
  ComputeCostModel(cluster::GpuSpec gpu, ComputeParams params,
                   const std::vector<schema::GemmEntry>& gemm_table = {},
                   const std::vector<schema::ConvEntry>& conv_table = {});

  /// GEMM time: an exact table row, else trilinear interpolation of log(time) in
  /// (log m, log n, log k) when the table holds a complete grid around the query, else
  /// the model: max(flops / (efficiency(flops) * peak), bytes / (hbm_eff * hbm)).
  ComputeEstimate gemm(const GemmShape& s) const;
  /// Convolution time: an exact conv row, else the GEMM model of its implicit GEMM times
  /// conv_slowdown.
  ComputeEstimate conv(const ConvShape& c) const;
  /// A memory-bound kernel moving `bytes` (read + written) through HBM:
  /// bytes / (hbm_efficiency * hbm_bandwidth) + kernel_overhead_s.
  core::Seconds memory_bound(core::Bytes bytes) const;
  /// One GEMM of a fused attention kernel: its share of the AttentionCurve time of each
  /// kernel it runs in (the flops term for every dot; the score term for a score-shaped dot,
  /// the output term for one that writes its output; the fixed cost on the dot that starts
  /// the kernel).
  /// Unless both directions' curves are fitted: the GEMM time of the dot times work_fraction,
  /// once (the pricing before attention rows existed, whose roofline counts the on-chip
  /// scores as HBM traffic).
  ComputeEstimate flash_attention_dot(const FlashDot& dot) const;
  /// The model part alone (no table), for calibration and tests.
  ComputeEstimate gemm_model(const GemmShape& s) const;

  const cluster::GpuSpec& gpu() const { return gpu_; }
  const ComputeParams& params() const { return params_; }

 private:
  struct Grid {
    std::vector<double> log_m, log_n, log_k;  // sorted distinct values
    std::vector<double> log_time;             // [(i * nn + j) * nk + l]
  };
  cluster::GpuSpec gpu_;
  ComputeParams params_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, double> exact_s_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                      std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>, double>
      conv_exact_s_;
  std::array<Grid, 5> grids_{};
};

}  // namespace alpasim::cost_model
