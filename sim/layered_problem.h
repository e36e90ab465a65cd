#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sim/pipeline_problem.h"
#include "sim/schedule.h"

namespace alpasim::sim {

/// Costs of one model layer (a transformer block, the embedding, the LM head...) as run
/// by one GPU of a stage mesh with that stage's intra-op sharding, per microbatch. This
/// is the granularity a cost model naturally produces; make_layered_problem sums layers
/// into pipeline chunks.
struct LayerCosts {
  std::string name;            ///< for reports ("layer 3", "embedding")
  core::Seconds forward_s{0};   ///< per microbatch
  core::Seconds backward_s{0};  ///< per microbatch
  core::Seconds forward_tp_comm_s{0};   ///< part of forward_s in blocking intra-op collectives
  core::Seconds backward_tp_comm_s{0};  ///< part of backward_s in blocking intra-op collectives
  /// Those of forward_tp_comm_s in order, and any expert-parallel all-to-alls (category
  /// "ep_collective", in forward_s but not in forward_tp_comm_s).
  std::vector<BlockingCollective> forward_collectives;
  std::vector<BlockingCollective> backward_collectives;  ///< those of backward_tp_comm_s, in order
  core::Flops forward_flops{0};         ///< model FLOPs per GPU
  core::Flops backward_flops{0};        ///< model FLOPs per GPU
  core::Bytes activation_bytes{0};  ///< kept from forward to backward without recomputation
  core::Bytes checkpoint_bytes{0};  ///< kept with full recomputation (the layer's input)
  core::Bytes output_bytes{0};      ///< output per GPU, sent on when a chunk ends here
  core::Bytes parameter_bytes{0};        ///< per GPU
  core::Bytes gradient_bytes{0};         ///< per GPU
  core::Bytes optimizer_state_bytes{0};  ///< per GPU
  core::Bytes grad_sync_bytes{0};     ///< gradient bytes per GPU synchronised across dp
  core::Seconds optimizer_step_s{0};  ///< this layer's share of the optimizer step
};

/// Activation recomputation policy.
enum class Recompute : std::uint8_t {
  kNone,  ///< keep every activation until the backward
  kFull,  ///< keep layer inputs; recompute each layer's forward before its backward
          ///< (Megatron-LM "full", one layer per checkpoint; Chen et al. 2016)
};

/// A pipeline described layer by layer (Megatron-style: tp GPUs per stage, pp stages,
/// dp replicas, v chunks per stage).
struct LayeredPipelineSpec {
  std::vector<LayerCosts> layers;  ///< model order
  /// Layers per virtual stage (p·v entries, model order, each >= 1, summing to
  /// layers.size()). Empty: as equal as possible, earlier chunks taking the remainder.
  std::vector<int> layers_per_chunk;
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  int num_stages = 1;  ///< p
  int interleave = 1;  ///< v
  int num_microbatches = 1;  ///< B per iteration (per replica)
  int data_parallel = 1;     ///< dp replicas
  int gpus_per_stage = 1;  ///< tensor-parallel degree
  /// GPUs of each mesh (p entries) when the meshes differ, as in Alpa's plans; empty =
  /// gpus_per_stage everywhere. The layer costs must then be those of each mesh's sharding.
  std::vector<int> gpus_per_mesh;
  Recompute recompute = Recompute::kNone;
  core::Bytes memory_limit{0};  ///< per GPU; 0 = unlimited
  GradSyncMode grad_sync_mode = GradSyncMode::kAllReduce;
  int grad_sync_buckets = 1;   ///< see PipelineProblem::grad_sync_buckets
  bool blocking_p2p = false;   ///< see PipelineProblem::blocking_p2p
  bool optimizer_barrier = false;  ///< see PipelineProblem::optimizer_barrier
};

/// Sums the layers into p·v StageCosts: times, FLOPs and static memory add up; stored
/// activations are Σ activation_bytes (kNone) or Σ checkpoint_bytes (kFull); working
/// activations are 0 (kNone) or the largest layer's activation_bytes (kFull: one layer is
/// recomputed at a time); recompute time and FLOPs equal the forward's (kFull); a chunk's
/// output is its last layer's. Meshes get gpus_per_stage and memory_limit and no routes:
/// the caller adds links and routes (or leaves p2p unmodelled). INVALID_ARGUMENT naming
/// the field when the chunking does not fit.
core::Result<PipelineProblem> make_layered_problem(const LayeredPipelineSpec& spec);

}  // namespace alpasim::sim
