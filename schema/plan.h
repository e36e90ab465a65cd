#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cluster/cluster_spec.h"
#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/status.h"
#include "ir/model_config.h"
#include "schema/sharding_spec.h"

namespace alpasim::schema {

/// The sharding the planner chose for one operator of a stage (docs/plan.md).
struct OperatorSharding {
  std::string op;        ///< operator name in the model graph
  std::string strategy;  ///< strategy name, e.g. "dot:S0R x RS1" (informational)
  std::vector<ShardingSpec> inputs;
  ShardingSpec output;
  friend bool operator==(const OperatorSharding&, const OperatorSharding&) = default;
};

/// One pipeline stage: a contiguous range of layers on one device mesh.
struct PlanStage {
  std::int64_t layer_begin = 0;  ///< first layer (after operator clustering), inclusive
  std::int64_t layer_end = 0;    ///< one past the last layer
  std::int64_t submesh_nodes = 0;          ///< physical submesh (n, m): n nodes ...
  std::int64_t submesh_gpus_per_node = 0;  ///< ... of m GPUs each
  std::int64_t logical_rows = 0;           ///< logical mesh shape rows × cols = n·m
  std::int64_t logical_cols = 0;
  /// Global device ids, row-major over the logical mesh (size rows·cols).
  std::vector<std::int64_t> device_ids;
  /// Per-operator shardings (may be empty: the executor then uses the stage's default).
  std::vector<OperatorSharding> shardings;
  /// Gradients reduce-scattered and weights all-gathered (ZeRO-like, Alpa §4.2).
  bool weight_update_sharding = false;
  friend bool operator==(const PlanStage&, const PlanStage&) = default;
};

/// Pipeline schedules.
enum class Schedule { kGpipe, kOneFOneB, kInterleavedOneFOneB };
std::string_view schedule_name(Schedule s);
const std::vector<std::string>& schedule_names();

/// How a stage's pipeline sends behave: "async" (Alpa's MPMD runtime: only the receiver
/// waits) or "blocking" (Megatron-LM's batched send/recv: the sender's next step waits for
/// its sends to complete; sim::PipelineProblem::blocking_p2p).
enum class P2pMode { kAsync, kBlocking };
const std::vector<std::string>& p2p_mode_names();  ///< "async", "blocking"

/// Activation recomputation: none, selective (attention core only, Korthikanti et al.),
/// full (every layer's forward again in the backward pass).
enum class Recompute { kNone, kSelective, kFull };
std::string_view recompute_name(Recompute r);
const std::vector<std::string>& recompute_names();
Recompute parse_recompute(std::string_view name);  ///< CHECKs that `name` is valid

/// Plan format v1: what a planner writes and the executor reads. Self-contained: it
/// carries the model, the cluster and the training settings it was made for.
struct Plan {
  static constexpr int kSchemaVersion = 1;
  ir::ModelConfig model;
  cluster::ClusterSpec cluster;
  core::DType dtype = core::DType::kFp16;
  std::int64_t global_batch_size = 0;  ///< sequences (or images) per iteration
  std::int64_t num_microbatches = 0;   ///< per iteration; microbatch = batch / (dp · this)
  Schedule schedule = Schedule::kOneFOneB;
  std::int64_t interleave = 1;  ///< virtual stages per device (interleaved 1F1B)
  P2pMode p2p = P2pMode::kAsync;  ///< "p2p" key, optional; written only when blocking
  /// "gradient_accumulation_fusion" key, optional; written only when false. True: a GEMM's
  /// or convolution's weight gradient is accumulated across microbatches inside its
  /// weight-gradient kernel (cuBLAS / cuDNN accumulate into their output; XLA's GEMM + add
  /// fusion, Megatron's --gradient-accumulation-fusion); false: by a memory-bound add per
  /// weight and microbatch (Megatron-LM of 2021). Other weights (biases, norms) are always
  /// added separately.
  bool gradient_accumulation_fusion = true;
  Recompute recompute = Recompute::kNone;
  std::vector<PlanStage> stages;
  std::string generator;  ///< who wrote it, e.g. "alpa-sim 0.1.0 search.mode=alpa"
  friend bool operator==(const Plan& a, const Plan& b);
};

/// A plan's pipeline grid in Megatron-LM's terms (its flags --tensor-model-parallel-size,
/// --pipeline-model-parallel-size, data parallelism, --context-parallel-size,
/// --expert-model-parallel-size, --micro-batch-size, virtual pipeline stages, recompute).
struct MegatronShape {
  std::int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  /// --expert-tensor-parallel-size; 0: tp, Megatron-Core's default (not written then).
  std::int64_t etp = 0;
  /// --sequence-parallel (written only when set).
  bool sequence_parallel = false;
  std::int64_t mbs = 1;  ///< sequences per microbatch per data-parallel replica
  std::int64_t vp = 1;   ///< virtual pipeline stages (model chunks) per GPU
  Recompute recompute = Recompute::kNone;
  /// Megatron-LM's runtime flags, each written only when set: --use-distributed-optimizer,
  /// --overlap-grad-reduce, --overlap-param-gather, --tp-comm-overlap. A plan file has no
  /// words for the overlaps (docs/plan.md); a shape with any of them set is a point the
  /// Megatron lowering priced.
  bool distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool tp_comm_overlap = false;
  /// "tp=8 pp=8 dp=16 cp=1 ep=1 mbs=1 vp=2 recompute=none" ("ep=8 etp=1" when etp is set,
  /// then " sequence_parallel", " distributed_optimizer", " overlap_grad_reduce",
  /// " overlap_param_gather", " tp_comm_overlap" for each flag set).
  std::string to_string() const;
  /// The same, as JSON with search.megatron's spellings for the flags (true when set,
  /// absent otherwise).
  core::Json to_json() const;
  /// True when a flag a plan file cannot say is set (the overlaps).
  bool has_runtime_overlaps() const { return overlap_grad_reduce || overlap_param_gather || tp_comm_overlap; }
};

/// The plan as a 3D grid, or nullopt when it is not one: every physical stage (stages /
/// interleave) on a logical mesh of the same rows x cols inside whole nodes or one node
/// (cols at most a node's GPUs, or an NVLink domain's when the cluster's spans nodes),
/// a 1F1B schedule when pp > 1, and each microbatch split evenly over the rows. Then
/// tp = cols (the model axis), dp = rows, mbs = global_batch_size / (num_microbatches · dp),
/// cp = ep = 1. The operator shardings are not checked: tp names the grid's model axis, not
/// a promise that the intra-op solution splits each matmul as Megatron's column/row-parallel
/// linears do.
std::optional<MegatronShape> megatron_shape(const Plan& plan);

/// True when `gpus` GPUs on nodes of `gpus_per_node` form a submesh the format can write
/// (nodes x GPUs per node, validate_plan's shape): a part of one node, or whole nodes. A
/// group of 12 GPUs on 8-GPU nodes (a node and a half) is not one.
inline bool submesh_expressible(std::int64_t gpus, std::int64_t gpus_per_node) {
  return gpus >= 1 && gpus_per_node >= 1 && (gpus <= gpus_per_node || gpus % gpus_per_node == 0);
}

/// Reads a plan file and validates it (validate_plan).
core::Result<Plan> read_plan_file(const std::filesystem::path& path);
/// Reads a plan from a JSON value (a file or a scenario's search.plan block).
core::Result<Plan> parse_plan(const core::JsonValue& value, const std::filesystem::path& base_dir);
/// Checks the invariants of docs/plan.md: stages cover the layers contiguously from 0,
/// mesh sizes agree, device ids are in the cluster and meshes are disjoint (or, with
/// interleaving, repeat with period num_stages / interleave), specs fit the mesh.
core::Status validate_plan(const Plan& plan, const core::JsonValue& where);
/// The JSON form (schema_version 1); parse_plan(plan_to_json(p)) == p.
core::Json plan_to_json(const Plan& plan);

}  // namespace alpasim::schema
