#pragma once

// Internal: the four benchmark families. Each returns profile rows (or HBM results) and
// draws its own progress bar.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/cuda/microbench/cuda_util.h"
#include "exec/cuda/microbench/sweep.h"
#include "schema/profile.h"

namespace alpasim::exec::microbench {

/// Shared settings of one family's run.
struct BenchContext {
  int device = 0;        ///< CUDA device
  TimingPolicy policy;   ///< how long to time each case
  bool progress = true;  ///< draw the bar (terminal only)
  std::string citation;  ///< "alpa-profile <flags> (<versions>)"; each row appends its own part
};

/// Times every case with cuBLASLt (TN layout, fp32 accumulation; fp8 = e4m3 inputs, bf16
/// output) and returns one row per case with time_us and tflops_per_s.
core::Result<std::vector<schema::GemmEntry>> run_gemm_cases(const std::vector<GemmCase>& cases,
                                                            const BenchContext& ctx);

/// Times every case with cuDNN (the fastest algorithm cudnnFind reports, as autotuning
/// frameworks choose); cases that do not fit in a third of free memory are skipped and
/// counted in `skipped`.
core::Result<std::vector<schema::ConvEntry>> run_conv_cases(const std::vector<ConvCase>& cases,
                                                            const BenchContext& ctx, int& skipped);

/// One HBM streaming measurement.
struct HbmResult {
  std::string kernel;             ///< "copy" or "triad"
  std::int64_t array_bytes = 0;   ///< bytes per array
  std::int64_t moved_bytes = 0;   ///< bytes read + written per launch
  double time_us = 0;             ///< median per launch
  double gbyte_per_s = 0;         ///< moved_bytes / time
};
/// Copy and triad over arrays of `array_bytes`.
core::Result<std::vector<HbmResult>> run_hbm(std::int64_t array_bytes, const BenchContext& ctx);

}  // namespace alpasim::exec::microbench
