#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "core/units.h"

namespace alpasim::cost_model {

/// How the optimizer's state is partitioned over the data-parallel ranks.
enum class StateSharding : std::int8_t {
  kNone,   ///< every data-parallel rank holds everything
  kZero1,  ///< optimizer states (and fp32 master weights) sharded
  kZero2,  ///< ... and gradients (reduce-scatter instead of all-reduce); also Alpa's
           ///< weight-update sharding (Alpa §4.2 / Xu et al. 2020): same memory
  kZero3,  ///< ... and the parameters themselves (all-gathered before use)
};
/// "none", "zero1", "zero2", "zero3".
const char* state_sharding_name(StateSharding s);

/// What one device holds for one pipeline stage. Activation sizes come from the model graph
/// (ir/) and are inputs here, as byte counts.
struct MemoryRequest {
  /// Parameters this device computes with, after tensor/pipeline partitioning and before
  /// any ZeRO sharding.
  std::int64_t num_parameters = 0;
  core::DType param_dtype = core::DType::kFp16;  ///< weights used by the forward/backward
  core::DType grad_dtype = core::DType::kFp16;
  /// Keep an fp32 master copy of the weights (mixed precision) when param_dtype is not fp32.
  bool fp32_master_weights = true;
  /// Optimizer state per parameter: 8 for Adam (fp32 m and v), 4 for SGD momentum, 0 none.
  std::int64_t optimizer_bytes_per_param = 8;
  StateSharding sharding = StateSharding::kNone;
  std::int64_t data_parallel_degree = 1;  ///< ranks the states are sharded over
  /// Activations one microbatch keeps alive on this stage until its backward pass
  /// (after recomputation choices).
  core::Bytes activation_bytes_per_microbatch{0};
  /// Microbatches whose activations are alive at once (in_flight_microbatches()).
  std::int64_t in_flight_microbatches = 1;
  /// Transient buffers: the largest temporary of any operator, cuBLAS/NCCL workspaces.
  core::Bytes workspace{0};
};

/// Bytes per device, by kind. total = the sum of the others.
struct MemoryBreakdown {
  core::Bytes parameters{0};
  core::Bytes gradients{0};
  core::Bytes optimizer_states{0};  ///< includes fp32 master weights
  core::Bytes activations{0};
  core::Bytes workspace{0};
  core::Bytes total{0};
};

/// Memory of one device (sharded parts round up: ceil(x / dp)). Fails on a negative count
/// or a data-parallel degree below 1.
core::Result<MemoryBreakdown> memory_per_device(const MemoryRequest& r);

/// Pipeline schedules whose activation lifetime differs.
enum class PipelineSchedule : std::int8_t { kGpipe, kOneFOneB };

/// Microbatches alive on stage `stage` (0-based) of `num_stages`: GPipe keeps all
/// `num_microbatches`; 1F1B keeps min(num_stages - stage, num_microbatches)
/// (Narayanan et al. 2021; Alpa §5 memory check).
std::int64_t in_flight_microbatches(PipelineSchedule s, std::int64_t stage,
                                    std::int64_t num_stages, std::int64_t num_microbatches);

}  // namespace alpasim::cost_model
