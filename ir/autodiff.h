#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace alpasim::ir {

/// Activation recomputation (Korthikanti et al. 2022): none; selective (the attention
/// core ops marked Op::selective_recompute run again in the backward pass); full (every
/// block is recomputed from its input, Megatron's "full" checkpointing).
enum class RecomputePolicy { kNone, kSelective, kFull };

/// Optimizer of the update phase. kAdam: mixed precision when the graph dtype is 16-bit
/// (fp32 master weights + 2 fp32 moments = 12 bytes/parameter of state), plain fp32 Adam
/// otherwise (8 bytes/parameter). kSgd: SGD with momentum (Alpa's Wide-ResNet runs): one
/// fp32 momentum, plus an fp32 master copy when the dtype is 16-bit.
enum class OptimizerKind { kAdam, kSgd };

std::string_view recompute_policy_name(RecomputePolicy r);
std::string_view optimizer_kind_name(OptimizerKind o);
/// "none"/"selective"/"full" and "adam"/"sgd"; false when unknown.
bool parse_recompute_policy(std::string_view name, RecomputePolicy* out);
bool parse_optimizer_kind(std::string_view name, OptimizerKind* out);

struct TrainingOptions {
  OptimizerKind optimizer = OptimizerKind::kAdam;
  RecomputePolicy recompute = RecomputePolicy::kNone;
};

/// Bytes of optimizer state per parameter (see OptimizerKind) for `dtype` parameters.
std::int64_t optimizer_state_bytes_per_parameter(OptimizerKind o, core::DType dtype);

/// Bytes per parameter a mixed-precision optimizer step moves besides its update kernel,
/// for `dtype` (fp16 / bf16) parameters; 0 otherwise. Megatron's mixed-precision optimizer
/// (megatron/optimizer/optimizer.py, Float16OptimizerWithFloat16Params), per parameter:
/// zero main_grad at the start (write m), copy main_grad to the fp32 grad (fp16: read 2 +
/// write 4; bf16 main_grad is already fp32: none), unscale + inf check (fp16 loss scaling:
/// read 4 + write 4), the gradient norm for clipping (read 4), and copying the fp32 master
/// weights back (read 4 + write 2): fp16 26, bf16 14. Both evaluators price it.
std::int64_t mixed_precision_step_bytes_per_parameter(core::DType dtype);

/// Bytes per parameter of one microbatch's gradient accumulation (Megatron-LM's
/// param.main_grad.add_(param.grad) after each backward; any runtime that accumulates
/// microbatch gradients into a buffer): reads the fresh `dtype` gradient and the buffer,
/// writes the buffer. The buffer is fp32 for bf16 (Megatron accumulates bf16 gradients in
/// fp32), `dtype` otherwise.
std::int64_t gradient_accumulation_bytes_per_parameter(core::DType dtype);

/// Returns `forward` extended with the whole training step: recompute ops (Phase
/// kRecompute) that re-run forward ops in the backward pass, backward ops (Phase
/// kBackward: for every dot an input-gradient dot and a weight-gradient dot, etc.), and
/// one optimizer update per parameter (Phase kOptimizer). Gradients of a tensor read by
/// several ops are summed by "add" ops; a parameter's gradient is the sum over all its
/// uses (e.g. tied embeddings). Backward ops of a recomputed op read the recomputed
/// tensors; everything else reads the stashed forward tensors, so a forward tensor is
/// "saved" exactly when a backward or recompute op reads it (activation_bytes_per_layer).
/// Precondition: forward.meta.loss is set and the graph has no backward yet.
Graph derive_training_graph(const Graph& forward, const TrainingOptions& options);

}  // namespace alpasim::ir
