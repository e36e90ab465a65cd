#include "sim/layered_problem.h"

#include <doctest/doctest.h>

#include "sim/pipeline_sim.h"

namespace alpasim::sim {
namespace {

// Layer i (0-based) costs (i+1) ms forward, 2(i+1) ms backward, (i+1)·1e12 FLOP forward,
// activations (i+1) MiB, checkpoint 1 MiB, parameters (i+1)·10 MiB, output 4 MiB.
LayeredPipelineSpec six_layers() {
  LayeredPipelineSpec spec;
  for (int i = 0; i < 6; ++i) {
    LayerCosts l;
    l.name = "layer" + std::to_string(i);
    l.forward_s = core::milliseconds(i + 1);
    l.backward_s = core::milliseconds(2 * (i + 1));
    l.forward_flops = core::Flops((i + 1) * 1e12);
    l.backward_flops = core::Flops((i + 1) * 2e12);
    l.activation_bytes = core::mib(i + 1);
    l.checkpoint_bytes = core::mib(1);
    l.output_bytes = core::mib(4);
    l.parameter_bytes = core::mib(10 * (i + 1));
    spec.layers.push_back(l);
  }
  spec.num_stages = 2;
  spec.num_microbatches = 4;
  return spec;
}

TEST_CASE("layers are summed into chunks") {
  auto pb = make_layered_problem(six_layers());
  REQUIRE(pb.ok());
  REQUIRE(pb->stages.size() == 2);
  // Chunk 0 = layers 0-2: forward 1+2+3 = 6 ms, parameters 60 MiB, stored 6 MiB.
  CHECK(pb->stages[0].forward_s.value() == doctest::Approx(0.006));
  CHECK(pb->stages[0].backward_s.value() == doctest::Approx(0.012));
  CHECK(pb->stages[0].parameter_bytes == core::mib(60));
  CHECK(pb->stages[0].stored_activation_bytes == core::mib(6));
  CHECK(pb->stages[0].working_activation_bytes == core::Bytes(0));
  CHECK(pb->stages[0].recompute_s.value() == 0.0);
  // Chunk 1 = layers 3-5: forward 4+5+6 = 15 ms, FLOPs 15e12.
  CHECK(pb->stages[1].forward_s.value() == doctest::Approx(0.015));
  CHECK(pb->stages[1].forward_flops.value() == doctest::Approx(15e12));
  CHECK(pb->stages[0].output_activation_bytes == core::mib(4));
  auto sim = simulate_pipeline(*pb);
  REQUIRE(sim.ok());
  // 1F1B, B = 4. Stage 1 is the bottleneck (15 + 30 = 45 ms per microbatch) and, fed in
  // time by stage 0, runs without a gap from 6 ms: T = 6 + 4·45 + 12 = 198 ms (stage 0's
  // first forward, stage 1's B microbatches, stage 0's last backward).
  CHECK(sim->timeline.makespan == 198'000'000);
}

TEST_CASE("full recomputation keeps checkpoints and recomputes the forward") {
  auto spec = six_layers();
  spec.recompute = Recompute::kFull;
  auto pb = make_layered_problem(spec);
  REQUIRE(pb.ok());
  // Chunk 1: 3 checkpoints of 1 MiB; working set = the largest layer's 6 MiB.
  CHECK(pb->stages[1].stored_activation_bytes == core::mib(3));
  CHECK(pb->stages[1].working_activation_bytes == core::mib(6));
  CHECK(pb->stages[1].recompute_s.value() == doctest::Approx(0.015));
  CHECK(pb->stages[1].recompute_flops.value() == doctest::Approx(15e12));
}

TEST_CASE("chunking: default split, explicit split, errors") {
  auto spec = six_layers();
  spec.schedule = PipelineSchedule::kInterleaved1F1B;
  spec.interleave = 2;
  auto pb = make_layered_problem(spec);
  REQUIRE(pb.ok());
  // 6 layers over 4 chunks: 2, 2, 1, 1 -> chunk 2 is layer 4 alone (5 ms).
  CHECK(pb->stages[2].forward_s.value() == doctest::Approx(0.005));
  spec.layers_per_chunk = {1, 1, 1, 3};
  pb = make_layered_problem(spec);
  REQUIRE(pb.ok());
  CHECK(pb->stages[3].forward_s.value() == doctest::Approx(0.015));
  spec.layers_per_chunk = {1, 1, 1, 2};
  CHECK(make_layered_problem(spec).status().message() ==
        "layers_per_chunk: expected a sum of 6 (the number of layers), got 5");
  spec.layers_per_chunk = {6};
  CHECK(make_layered_problem(spec).status().message() ==
        "layers_per_chunk: expected 4 entries (stages × interleave), got 1");
  spec.layers_per_chunk = {0, 2, 2, 2};
  CHECK(make_layered_problem(spec).status().message() == "layers_per_chunk[0]: expected >= 1, got 0");
  spec.layers_per_chunk.clear();
  spec.gpus_per_mesh = {4, 2};
  pb = make_layered_problem(spec);
  REQUIRE(pb.ok());
  CHECK(pb->meshes[0].num_gpus == 4);
  CHECK(pb->meshes[1].num_gpus == 2);
  spec.gpus_per_mesh = {4};
  CHECK(make_layered_problem(spec).status().message() ==
        "gpus_per_mesh: expected 2 entries (one per stage), got 1");
  spec.gpus_per_mesh.clear();
  spec.num_stages = 4;
  CHECK(make_layered_problem(spec).status().message() ==
        "layers: expected at least 8 layers for 4 stages × 2 chunks, got 6");
}

}  // namespace
}  // namespace alpasim::sim
