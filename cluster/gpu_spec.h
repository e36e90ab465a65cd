#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"

namespace alpasim::cluster {

/// Datasheet numbers of one GPU kind. These are spec-sheet peaks (dense, no sparsity),
/// not achieved figures: achieved throughput comes from profiles (cost_model/).
struct GpuSpec {
  std::string name;          ///< scenario spelling, e.g. "a100-80gb"
  std::string display_name;  ///< e.g. "NVIDIA A100-SXM4-80GB"
  core::Bytes memory{0};        ///< device memory usable by tensors and the runtime
  core::BytesPerSecond hbm_bandwidth{0};
  core::FlopsPerSecond peak_fp32{0};
  core::FlopsPerSecond peak_tf32{0};  ///< equals peak_fp32 where the GPU has no tf32 tensor cores
  core::FlopsPerSecond peak_fp16{0};  ///< fp16 and bf16 tensor cores (dense)
  core::FlopsPerSecond peak_bf16{0};  ///< zero where the GPU has no bf16 (V100)
  core::FlopsPerSecond peak_fp8{0};   ///< zero where the GPU has no fp8 (before Hopper)
  /// Dense NVFP4 / MXFP4 tensor-core peak; zero before Blackwell. A GPU with it also has
  /// the block-scaled MXFP8 format (at the fp8 peak).
  core::FlopsPerSecond peak_fp4{0};
  /// cuBLAS runs this GPU's fp8 GEMMs in every operand layout (compute capability 10.x: the
  /// Blackwell data-centre parts), so Transformer Engine keeps no transposed fp8 copies
  /// (`nvte_is_non_tn_fp8_gemm_supported`). False on Hopper (TN only) and on GPUs without fp8.
  bool fp8_gemm_any_layout = false;
  /// Streaming multiprocessors (AMD: compute units): what Transformer Engine's overlapped
  /// communication kernels take SMs from (tp_comm_overlap). 0 = unknown.
  int streaming_multiprocessors = 0;

  /// Blackwell's block-scaled formats (mxfp8, nvfp4) run on this GPU's tensor cores.
  bool has_block_scaled_formats() const { return peak_fp4.value() > 0; }

  /// Peak for arithmetic in `dtype`; zero when the GPU does not support it.
  core::FlopsPerSecond peak(core::DType dtype) const;
};

/// The GPU kinds alpa-sim knows, in a fixed order.
const std::vector<GpuSpec>& gpu_specs();
/// The spec named `name`, or nullopt.
std::optional<GpuSpec> find_gpu_spec(std::string_view name);
/// Every known GPU name, for error messages.
std::vector<std::string> gpu_spec_names();

}  // namespace alpasim::cluster
