#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "schema/plan.h"

namespace alpasim::schema {

/// How a tensor lies on a data-parallel mesh (the executor's default lowering, and the
/// layout at stage boundaries).
enum class BatchLayout {
  kBatch,       ///< axis 0 is the batch: device r holds rows [r·b, (r+1)·b)
  kReplicated,  ///< every device holds the whole tensor
  kPartial,     ///< every device holds a partial sum (a reduction over its batch rows)
};

/// The batch layout of every tensor of training graph `g`: the axis that doubles from `one`
/// (the same graph built for 1 sample per device) to `two` (2 samples) is the batch; a
/// tensor computed from batch or partial tensors without a batch axis is a partial sum;
/// parameters and optimizer outputs are replicated.
/// Errors: kUnimplemented when the graphs differ in operators, when a batch axis is not
/// axis 0, or when no tensor has one. With `inner_batch` a tensor whose batch is another
/// axis (MoE's token groups and expert buffers) is no error: it is listed there (op id)
/// and marked kBatch, for a caller that never splits it (a one-device stage).
core::Result<std::vector<BatchLayout>> classify_batch_layouts(const ir::Graph& g, const ir::Graph& one,
                                                              const ir::Graph& two,
                                                              std::vector<ir::OpId>* inner_batch = nullptr);

/// How a tensor lies on a stage's 2-D mesh (exec/lower.cc, docs/executor.md "Sharded
/// stages"): per tensor axis the mesh axes splitting it (only axes longer than 1, major
/// first), and the mesh axes over which the blocks are partial sums (bit m).
struct BlockLayout {
  std::vector<std::vector<int>> axes;
  unsigned partial = 0;
  /// Same splits and partial axes.
  bool operator==(const BlockLayout&) const = default;
};

/// A short text key ("S0RP0": axis 0 split over mesh axis 0, axis 1 whole, no partial
/// axes), unique per layout of a given rank.
std::string block_layout_key(const BlockLayout& l);

/// Layouts one operator reads and writes on a sharded stage.
struct OpLayouts {
  std::vector<BlockLayout> in;  ///< per operand
  BlockLayout out;              ///< its output
  unsigned bias_partial = 0;    ///< dot with bias and a partial output: its partial axes
  /// A softmax cross entropy, or its gradient, on logits split over their class axis (the
  /// head's vocabulary-split logits, Megatron's vocab_parallel_cross_entropy): the mesh axes
  /// splitting it; 0 when the class axis is whole. The lowering then runs it in steps
  /// (exec/instruction.h, LossStep) with per-row statistics gathered between, never the
  /// logits.
  unsigned class_split = 0;
};

/// Bytes of one element of a vocabulary-split cross entropy's statistics: fp32, as
/// Megatron-LM computes them whatever the logits' dtype.
inline constexpr std::int64_t kLossStatisticsElementBytes = 4;
/// Statistics per row of a vocabulary-split cross entropy: the log-sum-exp of the device's
/// class block and the label's logit where the label falls in it (0 elsewhere).
inline constexpr std::int64_t kLossStatisticsPerRow = 2;

/// Each operator's entry in its own stage's `shardings` (matched by name: the k-th entry
/// of a name is the k-th operator of that name) and which stages are sharded: a stage is
/// lowered data parallel when every entry is (a tensor with a batch axis splits axis 0
/// over every mesh axis longer than 1 and nothing else over them; any other tensor is
/// replicated over those axes), operator by operator otherwise.
struct OperatorShardings {
  std::vector<const OperatorSharding*> hint;  ///< per op; nullptr: no entry (pointers into the plan)
  std::vector<char> sharded;                  ///< per stage
  std::vector<char> op_sharded;               ///< per op: its entry is not data parallel
};

/// Matches `plan`'s per-operator shardings to the operators of `g` (op_stage: each op's
/// stage). Error: kInvalidArgument "plan: /stages/S/shardings/K/op: expected an operator of
/// the model graph, got \"NAME\"".
core::Result<OperatorShardings> match_operator_shardings(const Plan& plan, const ir::Graph& g,
                                                         const std::vector<BatchLayout>& batch_layout,
                                                         const std::vector<std::int32_t>& op_stage);

/// The layout rules of sharded stages, one implementation for the executor's lowering
/// (exec/lower.cc) and the planner's memory walk (planner/search/stage_memory.h). Every
/// rule is a function of the plan, the graph and the layouts of the operands as they are
/// held, never of the device: each device of a mesh holds its block of the same layout.
class BlockLayouts {
 public:
  /// The layout of an operand instance as currently held (partial axes cleared by the
  /// callee): the layout its producer wrote, or the one it was received or stored in.
  using CurrentLayout = std::function<BlockLayout(ir::OpId)>;

  /// `full`: the training graph at the samples of one microbatch (global block shapes);
  /// per op: its batch layout, whether it is per-iteration (weights, optimizer outputs,
  /// accumulated gradients), its stage and its sharding entry. Keeps references to `plan`
  /// and `full`.
  BlockLayouts(const Plan& plan, const ir::Graph& full, std::vector<BatchLayout> batch_layout,
               std::vector<char> per_iteration, std::vector<std::int32_t> op_stage,
               std::vector<const OperatorSharding*> hint);

  /// Length of mesh axis m (0: rows, 1: columns) of `stage`'s logical mesh.
  std::int64_t mesh_axis_size(std::int32_t stage, int m) const;
  /// Bit m set when mesh axis m of `stage` is longer than 1.
  unsigned live_axes(std::int32_t stage) const;
  /// Global (per-microbatch) shape of tensor t.
  const std::vector<std::int64_t>& global_shape(ir::OpId t) const;

  /// Drops what cannot apply: mesh axes of length 1, repeated mesh axes, splits that do
  /// not divide the dimension, partial sums over an axis that also splits.
  BlockLayout normalize(BlockLayout l, ir::OpId t, std::int32_t stage) const;
  /// The layout a spec names (normalized), or `fallback` without a spec of t's rank.
  BlockLayout from_spec(const ShardingSpec* spec, ir::OpId t, std::int32_t stage, const BlockLayout& fallback) const;
  /// The data-parallel layout (the lowering's default, and the layout at stage boundaries).
  BlockLayout def_layout(ir::OpId t, std::int32_t stage) const;
  /// The layout of the loss's input on the loss stage (its spec, no partial axes).
  BlockLayout loss_input_layout(std::int32_t stage) const;
  /// Offsets and local shape of the block of t in layout l held by the device at mesh
  /// coordinates `coords` (row, column).
  void block_of(ir::OpId t, const BlockLayout& l, std::int32_t stage, std::array<std::int64_t, 2> coords,
                std::vector<std::int64_t>& off, std::vector<std::int64_t>& local) const;
  /// Bytes (graph dtype) of one block of t in layout l (all blocks have the same size).
  std::int64_t block_bytes(ir::OpId t, const BlockLayout& l, std::int32_t stage) const;
  /// Elements of the statistics buffer of cross entropy `ce` (its forward) laid out as `lay`
  /// (class_split set) on each device: [parts, rows, kLossStatisticsPerRow], parts the
  /// devices splitting the class axis, rows those of the device's block of the per-row loss.
  std::int64_t loss_statistics_elements(ir::OpId ce, const OpLayouts& lay, std::int32_t stage) const;
  /// True when `grad`, the gradient of a cross entropy on blocks of classes laid out as
  /// `lay`, is written over the logits block it reads: no operator but the cross entropy and
  /// this gradient reads the logits, so nothing reads them after it (Megatron's
  /// vocab_parallel_cross_entropy writes the gradient in place of its saved softmax).
  bool gradient_over_logits(const ir::Op& grad, const OpLayouts& lay) const;
  /// True when a copy of per-microbatch tensor t in layout `want`, made from its block in
  /// `held` by a forward task, is that forward's alone and the backward makes it again: a
  /// gather (the copy is larger) of a tensor the backward reads only in weight gradients
  /// (Megatron's sequence-parallel input of a column-parallel GEMM: the forward gathers it
  /// and keeps the shard, the backward gathers it again for the weight gradient, overlapped
  /// with the input-gradient GEMM). The executor's lowering and the memory walk both ask.
  bool copy_scoped_to_forward(ir::OpId t, const BlockLayout& held, const BlockLayout& want,
                              std::int32_t stage) const;

  /// The layouts operator o of `stage` reads and writes. Call in the lowering's order (a
  /// broadcast reads the layouts its source operator was last given: recorded here).
  OpLayouts layouts_of(const ir::Op& o, std::int32_t stage, const CurrentLayout& current);
  /// A parameter of a sharded stage is stored in the layout of its own spec when the plan
  /// gives one (Megatron plan files), else as its first consumer in the stage reads it
  /// (the spec of that operand), whole when no spec says otherwise. Cached.
  BlockLayout param_layout(ir::OpId p, std::int32_t stage);
  /// Operators layouts_of gave the data-parallel layouts because no rule here follows
  /// their spec (inputs, convolutions, pooling, batch norm, shapes the rules cannot map),
  /// in the order it met them.
  const std::vector<ir::OpId>& data_parallel_fallbacks() const { return fallbacks_; }

 private:
  OpLayouts compute(const ir::Op& o, std::int32_t stage, const CurrentLayout& current);
  OpLayouts fallback_layouts(const ir::Op& o, std::int32_t stage);

  const Plan& plan_;
  const ir::Graph& full_;
  std::vector<BatchLayout> batch_layout_;
  std::vector<char> per_iter_;
  std::vector<std::int32_t> op_stage_;
  std::vector<const OperatorSharding*> hint_;
  std::map<ir::OpId, BlockLayout> param_layout_;
  std::map<ir::OpId, std::vector<BlockLayout>> used_in_;  // layouts an op read (last call)
  std::map<ir::OpId, unsigned> class_split_;  // a cross entropy's forward: its class_split (last call)
  std::vector<ir::OpId> fallbacks_;
};

}  // namespace alpasim::schema
