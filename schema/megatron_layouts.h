#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "ir/model_config.h"
#include "schema/plan.h"

namespace alpasim::schema {

/// Megatron-LM's tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022 for
/// sequence parallelism) written as per-operator layouts, so that a Megatron plan is also a
/// plan file that any evaluator or executor of plan files can read.
///
/// The stage's logical mesh has data-parallel rows (mesh axis 0) and tensor-parallel columns
/// (mesh axis 1). For every operator of layers [layer_begin, layer_end) of `graph` except
/// weight gradients and optimizer updates (their layouts follow the weights'), and for the
/// layers' weights:
/// - mesh axis 0 splits the batch dimension (dimension 0 of a tensor whose dimension 0 is
///   the graph's `batch` and whose rank is at least 2); weights stay whole along it;
/// - mesh axis 1 splits the attention heads (the first dimension equal to the key/value head count,
///   after the batch dimension, of the tensors under ".../attn/": Q, K, V, scores,
///   probabilities, context, the QKV weights' output columns and the out projection's input
///   rows), the FFN dimension under ".../mlp/" (fc1's output columns, fc2's input rows) and
///   the vocabulary of the word embedding and the head's logits (vocabulary-parallel
///   embedding and cross entropy); everything else stays whole along it, so the out
///   projection, fc2 and the embedding all-reduce their partial sums (two all-reduces per
///   block in each direction);
/// - with `sequence_parallel`, the [batch, sequence, hidden] activations that would be whole
///   along axis 1 (norms, dropouts, residuals, the embedding's and out projection's outputs)
///   split the sequence over it instead, so those all-reduces become reduce-scatters and
///   all-gathers.
/// Activations without a batch dimension (GPT's position lookup) get no layout: Megatron
/// replicates that small work, which an evaluator of plan files may choose how to price.
/// A mesh axis of size 1 splits nothing (its layouts are replicated along it, as the
/// intra-op pass enumerates them). "llama" (RMSNorm, rotary, SwiGLU, untied head, grouped-
/// query attention) follows the same rules: its gate and up projections split their output
/// columns and the down projection its input rows (the FFN dimension under ".../mlp/"), the
/// attention splits its key/value heads (their queries with them: Megatron's query groups),
/// the untied head its vocabulary. UNIMPLEMENTED for other models (their blocks are not
/// named this way, or MoE) and for a tp that does not divide the key/value heads;
/// INVALID_ARGUMENT when a layer is out of the graph's range.
core::Result<std::vector<OperatorSharding>> megatron_operator_shardings(
    const ir::Graph& graph, const ir::ModelConfig& model, std::int64_t batch,
    std::int64_t layer_begin, std::int64_t layer_end, std::int64_t data_parallel,
    std::int64_t tensor_parallel, bool sequence_parallel);

}  // namespace alpasim::schema
