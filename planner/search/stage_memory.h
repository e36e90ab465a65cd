#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "schema/block_layout.h"
#include "schema/plan.h"

namespace alpasim::planner {

/// Memory of one virtual pipeline stage on one device of its mesh, by the executor's
/// ALLOCATE/FREE rules for a data-parallel stage (exec/lower.h, docs/executor.md "Memory"):
/// every tensor is held at its size in the training graph built for the stage's per-device
/// batch, allocated right before the operator writing it runs (remote inputs: at the start
/// of the task that first reads them) and freed right after its last reader on the device.
/// All fields are bytes at the graph's dtype, per device.
struct StageMemory {
  /// Held all iteration: the stage's weights, their accumulated gradients, the optimizer
  /// states (1/d of a weight's with weight-update sharding when d divides it) and the
  /// copies of other meshes' weights this stage reads (GPT's tied embedding on the head
  /// stage; counted on the first stage of the mesh that reads them).
  std::int64_t parameter_bytes = 0;
  std::int64_t received_parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  /// A microbatch's tensors still held when its forward ends (read by its backward:
  /// stashed activations and received stage inputs).
  std::int64_t stored_bytes = 0;
  /// Peak of the forward above the memory at its start, minus stored_bytes (>= 0): what
  /// the forward holds only while it runs (an operator's inputs and output, sent outputs).
  std::int64_t forward_working_bytes = 0;
  /// Peak of the backward (with its recomputation) above the memory at its start, where
  /// the microbatch's stored_bytes are already held; its stored tensors are freed one by
  /// one as their last reader runs, all of them by its end.
  std::int64_t backward_working_bytes = 0;
  /// Tensors this backward receives for the backward of an earlier chunk on the same mesh
  /// and microbatch (the executor's per-channel receive order, see stage_memory.cc); held
  /// after it ends, freed by that chunk's backward (its backward_received_earlier_bytes).
  std::int64_t backward_received_ahead_bytes = 0;
  /// Tensors this backward reads that a later chunk's backward received ahead: held at its
  /// start, freed by its end (not part of backward_working_bytes).
  std::int64_t backward_received_earlier_bytes = 0;
};

/// What stage_memory needs to know about a plan.
struct StageMemoryInput {
  /// The training graph at the stage's per-device batch (global / (microbatches · mesh
  /// size)), with the executor's optimizer and recomputation.
  const ir::Graph* graph = nullptr;
  /// Virtual stage s covers layers [stage_starts[s], stage_starts[s+1]); the last entry is
  /// the number of layers.
  std::vector<std::int64_t> stage_starts;
  int meshes = 1;  ///< p: virtual stage s runs on mesh s % p (Megatron's interleaving)
  int stage = 0;   ///< the virtual stage
  std::int64_t mesh_size = 1;          ///< devices of the stage's mesh
  bool weight_update_sharding = false;  ///< the plan stage's flag
};

/// Liveness walk over the stage's operators in the executor's order (forward ops, then
/// backward and recomputation ops, by id). Cost O(operators of the graph).
/// Errors: kInvalidArgument when the stage ranges do not cover the graph's layers;
/// kUnimplemented when a per-microbatch tensor is shared by two chunks of one mesh (its
/// lifetime would span tasks of different stages, which this per-task summary cannot hold).
core::Result<StageMemory> stage_memory(const StageMemoryInput& input);

/// What sharded_stage_memory needs: a plan as written (with its per-operator shardings)
/// and the executor's training graphs (its optimizer and recomputation) at the samples of
/// one microbatch and at 1 and 2 samples (the batch axes, schema::classify_batch_layouts).
struct ShardedStageMemoryInput {
  const schema::Plan* plan = nullptr;
  const ir::Graph* microbatch_graph = nullptr;  ///< at global batch / microbatches samples
  const ir::Graph* one_sample_graph = nullptr;
  const ir::Graph* two_sample_graph = nullptr;
  int stage = 0;  ///< the plan stage
};

/// Memory of a stage the executor lowers operator by operator (a stage whose shardings are
/// not all data parallel, schema::match_operator_shardings), per device (every device of
/// the mesh holds blocks of the same sizes), by the executor's rules (exec/lower.cc,
/// docs/executor.md "Sharded stages"): the layouts come from schema::BlockLayouts, the
/// single implementation both use; every operand not held in the layout an operator reads
/// is made so first (an in-place all-reduce of partial axes, then a resharding copy kept
/// for later readers of the microbatch; a copy of a weight only for later readers in the
/// same forward or backward task); a tensor sent to another mesh leaves in the
/// data-parallel layout (another copy when needed); received tensors arrive in it; each
/// buffer is freed after the last instruction touching it. Weights are stored in their
/// own spec's layout, else as their first reader reads them; accumulated gradients as
/// their producer writes them plus, when the optimizer reads them in another layout, a
/// copy in the weight's layout (both held all iteration). Exact: the executor's high-water
/// mark, its components and each task's levels (tests/unit/exec/memory_test.cc).
/// Returns nullopt when the executor lowers the stage data parallel (stage_memory then).
/// Errors: kInvalidArgument as schema::match_operator_shardings, or when the plan's stages
/// do not cover the graph's layers; kUnimplemented for interleaved schedules, meshes that
/// share devices, an operator whose spec is not data parallel but which the executor runs
/// data parallel (BlockLayouts::data_parallel_fallbacks: convolutions split over channels,
/// pooling, batch norm), and the batch-layout cases schema::classify_batch_layouts rejects.
core::Result<std::optional<StageMemory>> sharded_stage_memory(const ShardedStageMemoryInput& input);

/// sharded_stage_memory of the stages of one plan, the work that concerns the whole plan
/// (each operator's stage and consumers' stages, the batch layouts, matching the plan's
/// shardings to the graph: O(operators + shardings)) done once rather than once per stage:
/// the evaluator prices a 32-stage plan written with Megatron's layouts in one pass of it.
/// stage(s) == sharded_stage_memory with input.stage = s, errors included (those of the
/// whole plan come from prepare). Keeps pointers to the input's plan and microbatch graph.
class ShardedPlanMemory {
 public:
  /// `input.stage` is not read.
  static core::Result<ShardedPlanMemory> prepare(const ShardedStageMemoryInput& input);
  core::Result<std::optional<StageMemory>> stage(int stage) const;

 private:
  const schema::Plan* plan_ = nullptr;
  const ir::Graph* graph_ = nullptr;
  // Per operator of the microbatch graph: its stage, whether it is held all iteration
  // (weights, optimizer outputs, accumulated gradients), whether it is a final gradient,
  // and the stages of its consumers.
  std::vector<std::int32_t> op_stage_;
  std::vector<char> per_iter_, final_grad_;
  std::vector<std::set<std::int32_t>> consumer_stages_;
  std::vector<schema::BatchLayout> batch_;
  schema::OperatorShardings match_;
};

}  // namespace alpasim::planner
