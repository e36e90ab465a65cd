#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "exec/instruction.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "schema/plan.h"

namespace alpasim::exec {

/// Builds the forward graph of the model for a given per-device batch (samples). The
/// default builds the plan's model with ir::build_forward_graph.
using GraphBuilder = std::function<core::Result<ir::Graph>(std::int64_t microbatch_samples)>;

struct LowerOptions {
  /// Overrides the plan's model (tests use it for models ir has no builtin for, e.g. an MLP).
  GraphBuilder build_forward;
  /// Replace the plan's per-operator shardings by the data-parallel default (the run then
  /// checks the pipeline and the communication, not the plan's intra-operator choices).
  /// Unset: a stage whose shardings are not all data parallel runs each operator on its
  /// blocks (docs/executor.md, "Sharded stages").
  bool ignore_operator_shardings = false;
};

/// Lowers `plan` to one static instruction list per device (docs/executor.md):
///  - stage s runs the ops whose Op::layer is in its range; a stage without shardings (or
///    with data-parallel ones only) is data parallel over all devices of its mesh (the
///    plan's default, docs/plan.md): each device runs the graph built for batch = global /
///    (microbatches · mesh size), parameters are replicated and gradients all-reduced (sum,
///    then · 1/(microbatches · loss shards)); a stage with other shardings runs every
///    operator on its block, with all-reduces of partial sums and resharding copies
///    between operators whose layouts differ;
///  - microbatches are ordered by the plan's schedule (GPipe, 1F1B, Megatron interleaved);
///  - tensors crossing stages go by SEND/RECV: batch-split tensors by the intersection of
///    row ranges, replicated ones as 1/k slices plus an all-gather in the receiving mesh
///    (Alpa §6 local all-gather);
///  - ALLOCATE before a buffer's first write, FREE after its last use; gradient
///    accumulation buffers and optimizer states for the whole iteration.
/// Errors: kInvalidArgument when the batch does not split evenly or the plan's layers do
/// not match the graph; kUnimplemented for batch axes other than 0 and partial sums crossing
/// meshes of different sizes.
core::Result<Program> lower_plan(const schema::Plan& plan, const LowerOptions& options = {});

/// The optimizer the executor derives for a model family: SGD with momentum for
/// "wide_resnet" (Alpa's Wide-ResNet runs), Adam otherwise.
ir::OptimizerKind executor_optimizer(const ir::Graph& forward);

}  // namespace alpasim::exec
