#include "cost_model/memory_cost.h"

#include <algorithm>
#include <string>

namespace alpasim::cost_model {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* state_sharding_name(StateSharding s) {
  switch (s) {
    case StateSharding::kNone: return "none";
    case StateSharding::kZero1: return "zero1";
    case StateSharding::kZero2: return "zero2";
    case StateSharding::kZero3: return "zero3";
  }
  return "?";
}

core::Result<MemoryBreakdown> memory_per_device(const MemoryRequest& r) {
  if (r.num_parameters < 0 || r.optimizer_bytes_per_param < 0 ||
      r.activation_bytes_per_microbatch.value() < 0 || r.workspace.value() < 0 ||
      r.in_flight_microbatches < 0) {
    return core::invalid_argument("memory request has a negative count");
  }
  if (r.data_parallel_degree < 1) {
    return core::invalid_argument("data_parallel_degree must be at least 1, got " +
                                  std::to_string(r.data_parallel_degree));
  }
  const std::int64_t dp = r.data_parallel_degree;
  const int level = static_cast<int>(r.sharding);  // 0 none .. 3 zero3
  auto shard = [&](std::int64_t bytes, int from_level) {
    return level >= from_level ? ceil_div(bytes, dp) : bytes;
  };
  const std::int64_t p = r.num_parameters;
  MemoryBreakdown b;
  b.parameters = core::Bytes(shard(p * core::dtype_bytes(r.param_dtype), 3));
  b.gradients = core::Bytes(shard(p * core::dtype_bytes(r.grad_dtype), 2));
  const bool master = r.fp32_master_weights && core::dtype_bytes(r.param_dtype) < 4;
  b.optimizer_states =
      core::Bytes(shard(p * (r.optimizer_bytes_per_param + (master ? 4 : 0)), 1));
  b.activations = r.activation_bytes_per_microbatch * r.in_flight_microbatches;
  b.workspace = r.workspace;
  b.total = b.parameters + b.gradients + b.optimizer_states + b.activations + b.workspace;
  return b;
}

std::int64_t in_flight_microbatches(PipelineSchedule s, std::int64_t stage,
                                    std::int64_t num_stages, std::int64_t num_microbatches) {
  if (s == PipelineSchedule::kGpipe) return num_microbatches;
  return std::max<std::int64_t>(0, std::min(num_stages - stage, num_microbatches));
}

}  // namespace alpasim::cost_model
