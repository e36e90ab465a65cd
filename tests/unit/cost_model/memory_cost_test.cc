#include "cost_model/memory_cost.h"

#include <doctest/doctest.h>

namespace alpasim::cost_model {
namespace {

TEST_CASE("parameters, gradients and Adam states under each ZeRO stage") {
  // 1e9 parameters in fp16 with an fp32 master copy and Adam (m, v in fp32): 2 + 2 + (8 + 4)
  // bytes per parameter, i.e. 16 GB, sharded over 8 data-parallel ranks stage by stage.
  MemoryRequest r;
  r.num_parameters = 1'000'000'000;
  r.data_parallel_degree = 8;
  r.activation_bytes_per_microbatch = core::Bytes(100);
  r.in_flight_microbatches = 3;
  r.workspace = core::Bytes(7);
  MemoryBreakdown none = memory_per_device(r).value();
  CHECK(none.parameters.value() == 2'000'000'000);
  CHECK(none.gradients.value() == 2'000'000'000);
  CHECK(none.optimizer_states.value() == 12'000'000'000);
  CHECK(none.activations.value() == 300);
  CHECK(none.total.value() == 16'000'000'307);
  r.sharding = StateSharding::kZero1;
  CHECK(memory_per_device(r)->optimizer_states.value() == 1'500'000'000);
  CHECK(memory_per_device(r)->gradients.value() == 2'000'000'000);
  r.sharding = StateSharding::kZero2;
  CHECK(memory_per_device(r)->gradients.value() == 250'000'000);
  CHECK(memory_per_device(r)->parameters.value() == 2'000'000'000);
  r.sharding = StateSharding::kZero3;
  CHECK(memory_per_device(r)->parameters.value() == 250'000'000);
  // fp32 training keeps no separate master copy: 4 + 4 + 8 bytes.
  r.sharding = StateSharding::kNone;
  r.param_dtype = core::DType::kFp32;
  r.grad_dtype = core::DType::kFp32;
  CHECK(memory_per_device(r)->optimizer_states.value() == 8'000'000'000);
}

TEST_CASE("sharded sizes round up and bad requests fail") {
  MemoryRequest r;
  r.num_parameters = 3;  // 3 x 12 optimizer bytes over 8 ranks = 4.5 -> 5
  r.data_parallel_degree = 8;
  r.sharding = StateSharding::kZero1;
  CHECK(memory_per_device(r)->optimizer_states.value() == 5);
  r.data_parallel_degree = 0;
  CHECK(memory_per_device(r).status().message() ==
        "data_parallel_degree must be at least 1, got 0");
}

TEST_CASE("activations in flight: GPipe keeps all microbatches, 1F1B the pipeline depth") {
  CHECK(in_flight_microbatches(PipelineSchedule::kGpipe, 0, 4, 16) == 16);
  CHECK(in_flight_microbatches(PipelineSchedule::kOneFOneB, 0, 4, 16) == 4);
  CHECK(in_flight_microbatches(PipelineSchedule::kOneFOneB, 3, 4, 16) == 1);
  CHECK(in_flight_microbatches(PipelineSchedule::kOneFOneB, 0, 4, 2) == 2);
  CHECK(std::string(state_sharding_name(StateSharding::kZero2)) == "zero2");
}

}  // namespace
}  // namespace alpasim::cost_model
