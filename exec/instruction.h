#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace alpasim::exec {

/// Index of a buffer in Program::buffers. A buffer lives on exactly one device.
using BufferId = std::int32_t;
inline constexpr BufferId kNoBuffer = -1;

/// The instruction kinds of Alpa's MPMD runtime (paper §6), one static list per device.
enum class InstrKind {
  kAllocate,       ///< reserve `buffer` (zero-filled)
  kFree,           ///< release `buffer`
  kRun,            ///< run one operator's shard: inputs -> buffer (or += with accumulate)
  kAllReduce,      ///< in place over `group`, then multiply by `scale`
  /// in place: rank r contributes elements [r·n/k, (r+1)·n/k) of `buffer`. With one entry
  /// in `inputs` it is a resharding copy instead: `buffer`'s block (Buffer::block_offset,
  /// shape) is filled from the members' `inputs[0]` blocks of the same global tensor, times
  /// `scale` (an all-gather along any axis, an all-to-all, or a local slice when the group
  /// is the device alone).
  kAllGather,
  kReduceScatter,  ///< in place: rank r ends with the sum of its 1/k slice
  kAllToAll,       ///< in place: slice j of rank r goes to slice r of rank j
  kSend,           ///< elements [offset, offset+count) of `buffer` to device `peer`
  kRecv,           ///< elements [offset, offset+count) of `buffer` from device `peer`
};

/// "allocate", "run", "all_reduce", ... (stable: used in traces and tables).
std::string_view instr_kind_name(InstrKind kind);
/// All kinds in enum order.
const std::vector<InstrKind>& all_instr_kinds();

/// Which part of an iteration an instruction belongs to (trace categories, docs/trace.md).
enum class TaskKind { kInit, kForward, kBackward, kOptimizer };
/// "init", "forward", "backward", "optimizer".
std::string_view task_kind_name(TaskKind kind);

/// How a kRun of a softmax cross entropy, or of its gradient, treats logits whose class
/// axis is split over devices (the head's vocabulary-split logits: Megatron-LM's
/// vocab_parallel_cross_entropy). Each device holds a block of classes; per row, it writes
/// two statistics of its block (the log-sum-exp, and the label's logit where the label
/// falls in the block, else 0) into its part of a [parts, rows, 2] fp32 buffer, which an
/// in-place all-gather completes; the loss is then log Σ_p exp(lse_p) − Σ_p label_p, and
/// the gradient of the block exp(x − lse) − [label], times dy. Neither gathers the logits.
enum class LossStep : std::int8_t {
  kWhole,        ///< the class axis is whole on the device (or not a cross entropy)
  kStatistics,   ///< cross entropy: logits block, labels -> part `loss_part` of the statistics
  kCombine,      ///< cross entropy: the gathered statistics (its one input) -> the loss
  kGradient,     ///< its gradient: dy, logits block, labels, the gathered statistics -> dx block
};

/// One instruction of one device's program.
struct Instruction {
  InstrKind kind = InstrKind::kRun;
  TaskKind task = TaskKind::kInit;
  BufferId buffer = kNoBuffer;  ///< the buffer written, sent, received, allocated or freed
  /// kRun: buffers of the operator's inputs, in operand order; for an optimizer op one more
  /// at the end, its state buffer.
  std::vector<BufferId> inputs;
  ir::OpId op = ir::kNoOp;      ///< kRun: the operator (in the stage's graph)
  std::int32_t stage = -1;      ///< pipeline stage (virtual stage with interleaving)
  std::int32_t microbatch = -1; ///< -1: once per iteration
  bool accumulate = false;      ///< kRun: add into `buffer` (gradient accumulation)
  /// kRun of an input op: global index of the first sample of this shard.
  std::int64_t sample_offset = 0;
  std::int32_t peer = -1;         ///< kSend/kRecv: device index (Program::devices)
  std::int64_t tag = -1;          ///< kSend/kRecv: transfer id, equal on both sides
  /// kSend/kRecv: the element range sent or received; kRun of an optimizer op with
  /// count_elements > 0: the slice of the parameter and gradient it updates (weight-update
  /// sharding), its state buffer holding that slice only.
  std::int64_t offset_elements = 0;
  std::int64_t count_elements = 0;
  std::vector<std::int32_t> group;   ///< collectives: device indices in rank order
  std::int64_t collective_id = -1;   ///< collectives: equal on every member
  double scale = 1.0;                ///< kAllReduce: factor applied after the sum
  /// kRun of a dot whose output is a partial sum (a split contracted dimension): this
  /// device leaves out the bias operand (the last input) so the sum over the group adds the
  /// bias once; the device with coordinate 0 on the partial mesh axes keeps it.
  bool drop_bias = false;
  /// kRun of a softmax cross entropy or its gradient on a block of classes (LossStep).
  LossStep loss_step = LossStep::kWhole;
  /// kRun with loss_step kStatistics: this device's part (its rank in the all-gather).
  std::int32_t loss_part = -1;
};

/// What a buffer holds (memory breakdown and what the backends report back).
enum class BufferRole {
  kParameter,       ///< weights (updated in place by the optimizer)
  kGradient,        ///< a parameter's accumulated gradient (the optimizer's input)
  kOptimizerState,  ///< Adam moments or SGD momentum
  kActivation,      ///< any per-microbatch tensor, stashed or working
  kLoss,            ///< the scalar loss of one microbatch shard
};
/// "parameters", "gradients", "optimizer_states", "activations", "loss" (memory counter keys).
std::string_view buffer_role_name(BufferRole role);

/// A tensor instance on one device.
struct Buffer {
  BufferId id = kNoBuffer;
  std::int32_t device = -1;     ///< index into Program::devices
  ir::OpId tensor = ir::kNoOp;  ///< the operator whose output it holds
  std::int32_t stage = -1;      ///< stage whose graph gives the local shape
  std::int32_t microbatch = -1;
  BufferRole role = BufferRole::kActivation;
  std::vector<std::int64_t> shape;  ///< local (per-device) shape
  std::int64_t elements = 0;        ///< fp32 elements the CPU backend stores
  std::int64_t bytes = 0;           ///< bytes at the plan's dtype (memory accounting)
  /// Bytes of one element at the plan's dtype: what a transfer of it moves. Not bytes /
  /// elements: a flash kernel's on-chip tile has 0 bytes of memory (ir::kept_on_chip_by_
  /// flash_attention) but elements a transfer would still carry.
  std::int64_t element_bytes = 0;
  /// True for a copy received from another stage; false for the instance its producer
  /// (or, for parameters, its owning stage) writes.
  bool received = false;
  /// A gradient reduce-scattered for weight-update sharding: after the sync each device
  /// holds only its slice summed, so backends do not report it as the gradient.
  bool reduce_scattered = false;
  /// Stages with per-operator shardings: the global shape of the tensor (of the stage's
  /// microbatch) and where this buffer's block starts in it, per axis; empty elsewhere (the
  /// buffer then holds the device's data-parallel share, docs/executor.md).
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> block_offset;
  /// True when every element of the block is only part of a sum over the devices of some
  /// mesh axes (not reported as a gradient until reduced).
  bool partial = false;
  /// A gradient buffer whose reduced value was resharded into another buffer (the
  /// optimizer's input): backends report that one instead.
  bool superseded = false;
};

/// A lowered plan: the static instruction list of every device for one training iteration.
struct Program {
  /// Global device ids (cluster numbering) in increasing order; instructions and buffers
  /// refer to positions in this list.
  std::vector<std::int64_t> devices;
  /// One training graph per distinct per-device batch size; `stage_graph[s]` indexes it.
  std::vector<ir::Graph> graphs;
  std::vector<std::int32_t> stage_graph;
  /// Devices (indices) of each stage, row-major over its logical mesh.
  std::vector<std::vector<std::int32_t>> stage_devices;
  std::int64_t num_microbatches = 0;
  std::int64_t global_batch_size = 0;
  std::string optimizer;  ///< "adam" or "sgd" (the optimizer ops' function)
  /// Per op id: for index inputs, the exclusive upper bound of the ids (table rows or
  /// classes); 0 otherwise.
  std::vector<std::int64_t> index_range;
  /// Per op id: the parameter whose accumulated gradient the op produces (the optimizer's
  /// gradient input), kNoOp for other ops.
  std::vector<ir::OpId> gradient_of;
  std::vector<Buffer> buffers;
  /// Per device (same order as `devices`): its instructions in execution order.
  std::vector<std::vector<Instruction>> code;

  /// The training graph whose local shapes stage `stage` uses.
  const ir::Graph& graph_of_stage(std::int32_t stage) const {
    return graphs[static_cast<std::size_t>(stage_graph[static_cast<std::size_t>(stage)])];
  }
};

/// The rows of an embedding table that a kRun of an embedding lookup ("gather") or of its
/// gradient ("scatter_add") holds on its device: rows [first_row, first_row + rows) of the
/// whole table. A vocabulary-split table (Megatron's VocabParallelEmbedding) holds a block:
/// ids outside it give zero rows (the lookup's output is then a partial sum over the
/// devices of the split) and add nothing to the gradient. An unsplit table: first_row 0,
/// every row.
struct TableRowBlock {
  std::int64_t first_row = 0;
  std::int64_t rows = 0;
};
/// `in` must run a kEmbedding op: the table is its first input (lookup) or its output
/// (gradient), as exec/lower.cc laid it out.
TableRowBlock embedding_table_rows(const Program& program, const Instruction& in);

/// The first class of the block of logits a kRun with loss_step kStatistics or kGradient
/// reads (its logits operand's offset along the class axis; 0 for a whole axis).
std::int64_t first_class_of_block(const Program& program, const Instruction& in);

/// One line per instruction, "dev0 #3 run block0/attn/q mb1 stage0 -> b12 (b3, b7)".
std::string program_to_text(const Program& program);

}  // namespace alpasim::exec
