#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace alpasim::ir {

/// Index of an operator in its Graph; every operator produces exactly one tensor, so an
/// OpId also names that tensor. Ids are dense: 0 .. graph.size()-1, in creation order.
using OpId = std::int32_t;
inline constexpr OpId kNoOp = -1;

/// What an operator computes. The set is what the Alpa paper's passes distinguish: dots
/// and convolutions carry the FLOPs; the rest is memory-bound.
enum class OpKind {
  kParameter,    ///< a trainable weight (no inputs)
  kInput,        ///< a graph input: token ids, images, labels (no inputs)
  kDot,          ///< einsum of two operands (matmul, batched matmul), optional bias 3rd input
  kConv2d,       ///< 2-D convolution, NHWC activations, HWIO filters (see ConvSpec)
  kElementwise,  ///< unary/binary pointwise op (gelu, add, mul, dropout, rotary, ...)
  kReduce,       ///< reduction over some axes (mean, sum, loss, bias gradient)
  kSoftmax,      ///< softmax over the last axis (scale and causal mask fused)
  kNorm,         ///< layer-norm, RMSNorm or batch-norm (NormType), affine params as inputs
  kEmbedding,    ///< gather rows of a table by integer ids (and its scatter-add gradient)
  kPool,         ///< 2-D max pooling
  kMoeGate,      ///< top-k gating: router probabilities -> combine weights [g, s, e, c]
  kMoeDispatch,  ///< tokens -> expert buffers (einsum "gsec,gsm->egcm"); all-to-all shaped
  kMoeCombine,   ///< expert outputs -> tokens (einsum "gsec,egcm->gsm"); all-to-all shaped
  kOptimizer,    ///< per-parameter update (Adam or SGD with momentum)
};

/// Where an operator sits in one training iteration.
enum class Phase {
  kForward,
  kRecompute,  ///< a forward op run again in the backward pass (activation recomputation)
  kBackward,
  kOptimizer,  ///< once per iteration, after all microbatches
};

enum class NormType { kLayerNorm, kRmsNorm, kBatchNorm };

/// How a softmax cross-entropy loss over a vocabulary runs (Megatron-Core's
/// cross_entropy_loss_fusion and cross_entropy_fusion_impl): the passes it makes over the
/// logits and what it keeps for the backward. Graph::add_softmax_cross_entropy builds it,
/// Graph::set_loss_kernel prices it (bytes per logit in docs/scenario.md "Loss kernel").
enum class LossKernel : std::uint8_t {
  kUnfused,      ///< Megatron-Core's default: an fp32 copy, then max, subtract, exp, sum and
                 ///< divide as separate kernels; keeps the fp32 softmax (also PyTorch's
                 ///< F.cross_entropy on .float() logits, by its passes)
  kNativeFused,  ///< cross_entropy_loss_fusion, impl "native": the same steps jit-fused into
                 ///< fewer passes (the max with the fp32 copy); keeps the fp32 softmax
  kTeFused,      ///< impl "te": Transformer Engine's kernel reads the 16-bit logits twice and
                 ///< writes their gradient in place; keeps nothing more
};
std::string_view loss_kernel_name(LossKernel kernel);

/// Which derivative an operator computes; kNone for forward ops.
enum class GradRole {
  kNone,
  kInputGrad,   ///< gradient of an activation (dX)
  kWeightGrad,  ///< gradient of a parameter (dW), or its accumulation
};

std::string_view op_kind_name(OpKind kind);
std::string_view phase_name(Phase phase);
std::string_view norm_type_name(NormType type);

/// A tensor type: shape and element type. `is_index` marks int32 ids (token ids,
/// labels), stored as 4 bytes whatever `dtype` says.
struct TensorType {
  std::vector<std::int64_t> shape;
  core::DType dtype = core::DType::kFp16;
  bool is_index = false;

  std::int64_t num_elements() const;
  std::int64_t element_bytes() const { return is_index ? 4 : core::dtype_bytes(dtype); }
  std::int64_t bytes() const { return num_elements() * element_bytes(); }
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

/// The loop dims of a dot in the form the cost model (GEMM tables) and the intra-op
/// pass (paper Table 3) use: out[batch, M, N] = sum_K lhs[batch, M, K] * rhs[batch, K, N],
/// each a product of the named dims of that class. FLOPs = 2·batch·M·N·K.
struct DotDims {
  std::int64_t batch = 1;
  std::int64_t m = 1;
  std::int64_t n = 1;
  std::int64_t k = 1;
  friend bool operator==(const DotDims&, const DotDims&) = default;
};

/// An einsum with one letter per dimension: `lhs` and `rhs` label the two operands'
/// axes, `out` the result's. A letter in lhs, rhs and out is a batch dim; in lhs and out
/// a free (M) dim; in rhs and out a free (N) dim; in lhs and rhs only a contracting (K)
/// dim. Every letter appears in at least two of the three (no lone summation).
struct DotSpec {
  std::string lhs;
  std::string rhs;
  std::string out;
};

/// Dimension classes of one letter of a DotSpec.
enum class DotDimClass { kBatch, kLhsFree, kRhsFree, kContracting };

/// 2-D convolution: input [n, h, w, ci], filter [kh, kw, ci, co], output [n, ho, wo, co]
/// with "SAME"-style padding: ho = ceil(h / stride). `variant` says whether this op is the
/// forward conv, the gradient w.r.t. the input, or w.r.t. the filter: all three have the
/// same FLOPs, 2·n·ho·wo·co·kh·kw·ci.
struct ConvSpec {
  enum class Variant { kForward, kGradInput, kGradFilter };
  Variant variant = Variant::kForward;
  std::int64_t n = 0, h = 0, w = 0, ci = 0, co = 0, kh = 0, kw = 0, stride = 1;
  std::int64_t out_h() const { return (h + stride - 1) / stride; }
  std::int64_t out_w() const { return (w + stride - 1) / stride; }
  /// The implicit-GEMM view: M = n·ho·wo, N = co, K = kh·kw·ci.
  DotDims gemm_dims() const { return {1, n * out_h() * out_w(), co, kh * kw * ci}; }
};

/// One operator and its one output tensor.
struct Op {
  OpId id = kNoOp;
  OpKind kind = OpKind::kElementwise;
  Phase phase = Phase::kForward;
  GradRole grad_role = GradRole::kNone;
  /// Hierarchical name, "block3/attn/q" (forward), "block3/attn/q/grad_lhs" (backward).
  std::string name;
  /// The elementwise/reduce function ("gelu", "add", "dropout_mask", "adam", ...).
  std::string function;
  std::vector<OpId> inputs;
  TensorType out;
  /// Model layer this op belongs to: 0 = prologue (embedding, stem), 1..N = transformer
  /// or residual blocks, N+1 = epilogue (head, loss). Backward, recompute and optimizer
  /// ops inherit the layer of the forward op they derive from.
  std::int32_t layer = 0;
  /// For derived ops (weight gradients included): the forward op they differentiate or
  /// recompute; for optimizer ops: the parameter (weight_gradient_parameters finds a
  /// weight gradient's). kNoOp otherwise.
  OpId source = kNoOp;
  /// Bit i set: input i gets no gradient (masks, ids, routing decisions).
  std::uint32_t no_grad_inputs = 0;
  /// Set by builders on ops Megatron's selective recomputation recomputes (the attention
  /// core: QK^T, softmax, dropout, attention x V).
  bool selective_recompute = false;
  /// Set by builders on the attention scores, their softmax and its dropout when the model
  /// trains with a fused (Flash) attention kernel: such a kernel keeps these s x s tensors
  /// on chip and recomputes them in the backward, so derive_training_graph recomputes
  /// these ops under every recomputation policy and nothing stores them.
  bool fused_attention = false;
  /// Sliding-window attention (Mistral, Gemma, GPT-OSS): on the attention scores and
  /// softmax (and, fused, the dropout) of a layer whose queries see only their
  /// `attention_window` latest keys (themselves included), > 0; 0 = every earlier key
  /// (causal). The executors mask the softmax with it; a fused (flash) kernel also skips
  /// the key tiles outside the band (attention_tile_fraction), while an unfused attention
  /// forms, and is priced as, the whole masked s x s product.
  std::int64_t attention_window = 0;
  /// Set by builders on the SiLU of a SwiGLU MLP (dense or expert) when the model trains
  /// with a fused SwiGLU kernel (Megatron-Core's bias_swiglu_fusion, on by default): the
  /// kernel saves the gate and up projections and recomputes the SiLU in the backward, so
  /// derive_training_graph recomputes this op under every recomputation policy and nothing
  /// stores its output.
  bool fused_swiglu = false;
  /// The softmax_cross_entropy reduce: how its kernel runs (Graph::set_loss_kernel sets its
  /// bytes from it). Unread on other ops.
  LossKernel loss_kernel = LossKernel::kUnfused;

  DotSpec dot;      ///< kDot, kMoeDispatch, kMoeCombine
  /// kDot, kMoeDispatch, kMoeCombine: the loop dims of `dot`; kConv2d: conv.gemm_dims().
  DotDims dot_dims;
  ConvSpec conv;    ///< kConv2d
  NormType norm = NormType::kLayerNorm;  ///< kNorm
  std::int64_t pool_window = 0;          ///< kPool: square window
  std::int64_t pool_stride = 0;          ///< kPool: stride

  /// Floating-point operations of one execution (a multiply-add counts 2).
  std::int64_t flops = 0;
  /// Bytes this op reads from and writes to device memory (unfused, one pass each).
  std::int64_t bytes_read = 0;
  std::int64_t bytes_written = 0;

  bool is_matmul() const {
    return kind == OpKind::kDot || kind == OpKind::kConv2d || kind == OpKind::kMoeDispatch ||
           kind == OpKind::kMoeCombine;
  }
  /// The matmuls whose FLOPs are model FLOPs (Korthikanti et al.: the model's math, the
  /// basis of MFU): dots and convolutions. MoE dispatch/combine are excluded: they are
  /// one-hot einsums that implement routing (a gather/scatter; Megatron-Core permutes
  /// tokens instead), and their FLOPs grow with the square of the token group, which is the
  /// microbatch when expert_group_size is 0, so counting them made "model FLOPs" depend on
  /// the plan's microbatch size. They stay in PhaseFlops::total_* and in the op's time.
  bool is_model_matmul() const { return kind == OpKind::kDot || kind == OpKind::kConv2d; }
  bool is_einsum() const {
    return kind == OpKind::kDot || kind == OpKind::kMoeDispatch || kind == OpKind::kMoeCombine;
  }
  bool is_source() const { return kind == OpKind::kParameter || kind == OpKind::kInput; }
  bool input_has_grad(std::size_t i) const { return ((no_grad_inputs >> i) & 1u) == 0; }
  /// Bytes of the output tensor (activation bytes of a forward op, parameter bytes of a
  /// kParameter).
  std::int64_t output_bytes() const { return out.bytes(); }
};

}  // namespace alpasim::ir
