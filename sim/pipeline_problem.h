#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sim/link_model.h"
#include "sim/schedule.h"

namespace alpasim::sim {

/// Collectives whose duration a cost model may supply.
enum class CollectiveKind : std::uint8_t { kAllReduce, kReduceScatter, kAllGather };

/// One collective the simulator needs a duration for. `bytes` is the full buffer per GPU
/// (the all-reduced gradient, the gathered tensor), `group_size` the number of GPUs.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  core::Bytes bytes{0};  ///< full buffer per GPU
  int group_size = 1;    ///< GPUs taking part
  int mesh = 0;  ///< pipeline stage (mesh) whose GPUs run it, so a topology can pick links
};

/// The hook a cost model fills: duration of a collective. Called a bounded number of
/// times while lowering (once per stage and bucket), never per event.
using CollectiveCostFn = std::function<core::Seconds(const CollectiveCall&)>;

/// A network link for transfers (see LinkModel): bytes/s shared max-min fairly.
struct LinkSpec {
  std::string name;                  ///< for reports and traces
  core::BytesPerSecond capacity{0};  ///< > 0
};

/// A path over links in PipelineProblem::links plus a fixed latency paid once per
/// transfer. An empty `links` means the network is not modelled: a transfer then takes
/// only `latency`.
struct Route {
  std::vector<LinkId> links;  ///< indices into PipelineProblem::links
  core::Seconds latency{0};   ///< paid once per transfer, before its bytes move
};

/// How gradients are synchronised across data-parallel replicas.
enum class GradSyncMode : std::uint8_t {
  kAllReduce,               ///< ring all-reduce of the gradients, then the optimizer step
  kReduceScatterAllGather,  ///< weight-update sharding (Alpa §4 / ZeRO): reduce-scatter,
                            ///< sharded optimizer step, all-gather of the parameters
};

/// How a stage's output reaches the next stage's mesh.
enum class ReshardMode : std::uint8_t {
  kDirect,          ///< every receiving GPU gets the whole tensor over the network
  kLocalAllGather,  ///< Alpa §5 "local all-gather": each of the k receiving GPUs gets 1/k
                    ///< over the network, then the mesh all-gathers over its fast links
};

/// One collective inside a task, for the trace: a blocking intra-op (tensor-parallel)
/// collective of a compute task (Megatron's all-reduces of row-parallel outputs, sequence
/// parallelism's all-gathers and reduce-scatters), or one of the collectives a gradient
/// synchronisation, parameter all-gather or stage-boundary all-gather task runs. Already
/// part of the task's duration (never re-timed).
struct BlockingCollective {
  std::string collective;     ///< cost_model::collective_name: "all_reduce", "all_gather", ...
  std::int64_t bytes = 0;     ///< the full buffer per GPU (nccl-tests' size)
  int group_size = 1;         ///< GPUs taking part (the tensor-parallel group)
  std::string algorithm;      ///< e.g. "ring/simple": what the cost model priced
  core::Seconds time{0};      ///< its exposed share of the task (after any overlap)
  std::string where;          ///< the layer it belongs to, e.g. "block3"
  /// The trace category: "tp_collective" (tensor-parallel and intra-op collectives),
  /// "ep_collective" (expert parallelism's token all-to-alls), "cp_collective" (context
  /// parallelism's K/V ring exchange, its exposed part), "grad_collective" (gradient
  /// synchronisation and the parameter all-gather after the step) or "reshard_collective"
  /// (a receiving mesh's all-gather of a stage boundary).
  std::string category = "tp_collective";
};

/// Costs of one virtual pipeline stage (a model chunk), per GPU of its mesh, per
/// microbatch. The cost model fills it from the stage's operators and shardings; times
/// include the stage's intra-op (tensor-parallel) collectives, which Megatron does not
/// overlap with compute.
struct StageCosts {
  core::Seconds forward_s{0};   ///< per microbatch, per GPU
  core::Seconds backward_s{0};  ///< per microbatch, per GPU
  core::Seconds recompute_s{0};  ///< 0 = no activation recomputation
  /// Part of forward_s (and of recompute_s, which repeats the forward) spent in blocking
  /// intra-op collectives; reported as tensor-parallel communication, not re-timed.
  core::Seconds forward_tp_comm_s{0};
  /// Part of backward_s spent in blocking intra-op collectives (reported, not re-timed).
  core::Seconds backward_tp_comm_s{0};
  /// Those collectives one by one, in execution order, and the expert-parallel all-to-alls
  /// (in forward_s / backward_s, not in the tp parts) (trace events; empty when the lowering
  /// does not list them).
  std::vector<BlockingCollective> forward_collectives;
  std::vector<BlockingCollective> backward_collectives;
  /// Those inside recompute_s (a full recomputation repeats the forward's).
  std::vector<BlockingCollective> recompute_collectives;
  core::Flops forward_flops{0};    ///< model FLOPs of the forward, per GPU
  core::Flops backward_flops{0};   ///< model FLOPs of the backward, per GPU
  core::Flops recompute_flops{0};  ///< extra hardware FLOPs of the recomputation, per GPU
  /// Activations kept from a microbatch's forward until its backward ends (with full
  /// recomputation: only the stage inputs).
  core::Bytes stored_activation_bytes{0};
  /// Transient activations of one microbatch during its recomputation and backward: the
  /// backward's peak above the memory at its start (its stored activations included
  /// there). Held from the start of the backward (its recomputation) to its end.
  core::Bytes working_activation_bytes{0};
  /// Transient activations of one microbatch during its forward: the forward's peak above
  /// the memory at its start, minus stored_activation_bytes (an operator's inputs and
  /// output, outputs until sent). Held from the start of the forward to its end; 0 = not
  /// modelled (lowerings that do not walk operators).
  core::Bytes forward_working_activation_bytes{0};
  /// Bytes this chunk's backward receives for the backward of an earlier chunk on the same
  /// mesh and microbatch (a runtime that receives each channel in send order, e.g. NCCL,
  /// must take them first): allocated with working_activation_bytes, still held when the
  /// backward ends, freed by that chunk's backward (its backward_received_earlier_bytes).
  core::Bytes backward_received_ahead_bytes{0};
  /// Bytes a later chunk's backward received ahead for this one: held when this backward
  /// starts, freed at its end. Per mesh the two fields sum to the same total.
  core::Bytes backward_received_earlier_bytes{0};
  core::Bytes parameter_bytes{0};        ///< per GPU, held all iteration
  core::Bytes gradient_bytes{0};         ///< per GPU, held all iteration
  core::Bytes optimizer_state_bytes{0};  ///< per GPU, held all iteration
  /// The output tensor each GPU of the next stage needs per microbatch; its gradient, the
  /// same size, travels back.
  core::Bytes output_activation_bytes{0};
  ReshardMode output_reshard = ReshardMode::kDirect;
  int reshard_group = 1;  ///< k of kLocalAllGather: GPUs of the receiving mesh
  /// Duration of the receiving mesh's local all-gather; unset = ask collective_cost.
  std::optional<core::Seconds> reshard_all_gather_s;
  core::Bytes grad_sync_bytes{0};  ///< gradient bytes per GPU to synchronise across dp
  /// Total duration of this chunk's gradient all-reduce (in kReduceScatterAllGather mode:
  /// of the reduce-scatter; the parameter all-gather takes as long, as in a ring). Unset =
  /// ask collective_cost, else move ring bytes over the mesh's grad_sync route. With
  /// data_parallel 1, a positive grad_sync_s is the chunk's own gradient collectives inside
  /// its mesh (a searched plan's weight-update sharding, Megatron's tied-embedding
  /// all-reduce): its own task after the chunk's last backward, before the optimizer step.
  std::optional<core::Seconds> grad_sync_s;
  /// Duration of the parameter all-gather in kReduceScatterAllGather mode. Unset = ask
  /// collective_cost, else grad_sync_s when given (a ring all-gather moves what the
  /// reduce-scatter moved), else ring bytes over the grad_sync route.
  std::optional<core::Seconds> param_all_gather_s;
  /// Trace events (never re-timed; empty when the lowering does not list them): the
  /// collectives inside grad_sync_s, once per iteration in order, with their whole bytes and
  /// times (a bucket's task shows each with its 1/buckets share); those inside
  /// param_all_gather_s; and the receiving mesh's all-gather of this chunk's output (inside
  /// reshard_all_gather_s, per microbatch; the gradient's on the way back is the same).
  std::vector<BlockingCollective> grad_sync_collectives;
  std::vector<BlockingCollective> param_all_gather_collectives;
  std::vector<BlockingCollective> reshard_collectives;
  core::Seconds optimizer_step_s{0};  ///< as run on each GPU (already divided when sharded)
};

/// One physical pipeline stage: a submesh of GPUs that behave identically.
struct MeshSpec {
  int num_gpus = 1;             ///< GPUs in the mesh (tensor-parallel degree for Megatron)
  core::Bytes memory_limit{0};  ///< per GPU; 0 = unlimited
  Route send_next;  ///< per-GPU path to the mesh of the next virtual stage
  Route send_prev;  ///< per-GPU path back to the mesh of the previous virtual stage
  Route grad_sync;  ///< per-GPU path of the data-parallel ring, when durations come from links
};

/// Everything the simulator needs to time one training iteration of a pipeline. Plain
/// data, so that a lowering of (plan, model, cost model) can fill it; the simulator
/// never looks at operators. Stage s of the p meshes hosts the virtual stages
/// s, s+p, ..., s+(v-1)·p (Megatron's interleaved assignment).
struct PipelineProblem {
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  int num_microbatches = 1;  ///< B per iteration and replica
  int interleave = 1;      ///< v, model chunks per device
  int data_parallel = 1;   ///< replicas of the whole pipeline
  GradSyncMode grad_sync_mode = GradSyncMode::kAllReduce;
  /// Gradient buckets per chunk (Megatron overlap_grad_reduce): the chunk's last
  /// backward is split into this many equal parts and bucket i is synchronised as soon
  /// as part i is done, overlapping the rest of the backward. 1 = sync after the backward.
  int grad_sync_buckets = 1;
  /// true: a device's next compute waits until its sends have arrived, as Megatron-LM's
  /// batched send/recv calls block (p2p time is exposed on the sender too); false: sends
  /// are asynchronous, as in Alpa's MPMD runtime, and only the receiver waits.
  bool blocking_p2p = false;
  /// true: every optimizer step waits for all stages' gradients (Megatron's global
  /// gradient-norm clipping all-reduces across the pipeline first); false: each stage
  /// steps as soon as its own gradients are synchronised.
  bool optimizer_barrier = false;
  std::vector<MeshSpec> meshes;    ///< p entries
  std::vector<StageCosts> stages;  ///< p·v entries, in model order
  std::vector<LinkSpec> links;     ///< referenced by the routes
  CollectiveCostFn collective_cost;  ///< optional; see StageCosts for when it is called
};

/// Checks sizes, ranges and that every needed duration has a source. Errors are
/// INVALID_ARGUMENT with the field path, e.g. "stages[3].forward_s: expected a finite
/// number >= 0, got -1".
core::Status validate(const PipelineProblem& problem);

/// Replaces every duration the lowering would ask problem.collective_cost for by the
/// hook's answer, and drops the hook. The result simulates the same and can be written
/// to JSON (dump and replay). Calls: per virtual stage that syncs gradients (dp > 1 and
/// grad_sync_bytes > 0) without grad_sync_s, one all-reduce (or reduce-scatter) of
/// grad_sync_bytes / grad_sync_buckets, whose time × buckets becomes grad_sync_s; with
/// weight-update sharding and no param_all_gather_s, one all-gather of grad_sync_bytes;
/// per stage boundary with a local all-gather and no reshard_all_gather_s, one all-gather
/// of output_activation_bytes over reshard_group GPUs of the next stage's mesh (the
/// gradient's all-gather on the way back is assumed to cost the same). INTERNAL when the
/// hook returns a negative or non-finite time. Precondition: validate(problem) is OK.
core::Result<PipelineProblem> resolve_collectives(const PipelineProblem& problem);

/// Parameters of make_uniform_problem: every virtual stage costs the same.
struct UniformPipelineSpec {
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;  ///< pipeline schedule
  int num_stages = 1;  ///< p
  int interleave = 1;  ///< v
  int num_microbatches = 1;  ///< B
  int data_parallel = 1;     ///< dp
  int gpus_per_stage = 1;    ///< GPUs per mesh
  /// Costs of one whole physical stage (all its v chunks) per microbatch; each chunk
  /// gets 1/v of times, FLOPs and memory (working_activation_bytes excepted: it is the
  /// transient of the one chunk running).
  StageCosts stage;
  core::BytesPerSecond p2p_bandwidth{0};  ///< 0 = p2p not modelled (instant)
  core::Seconds p2p_latency{0};  ///< per send
  core::Bytes memory_limit{0};   ///< per GPU, 0 = unlimited
  GradSyncMode grad_sync_mode = GradSyncMode::kAllReduce;
  int grad_sync_buckets = 1;  ///< see PipelineProblem
  bool blocking_p2p = false;  ///< see PipelineProblem
};

/// A problem with identical stages and one dedicated link per stage boundary and
/// direction. Used by the closed-form tests and benchmarks (synthetic costs).
PipelineProblem make_uniform_problem(const UniformPipelineSpec& spec);

}  // namespace alpasim::sim
