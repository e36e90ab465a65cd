#pragma once

// Upper bounds on the sizes a user may give (scenario, plan, model files), checked when
// the input is parsed. They are far above any published model or cluster (GPT-3 175B:
// 96 layers, hidden 12288, vocab 51200, seq 2048; the largest clusters ~10^5 GPUs) and
// keep every size the tools derive from them (element counts, bytes, FLOPs, simulated
// nanoseconds) inside int64. docs/scenario.md ("Limits") lists them; change both together.

#include <cstdint>

namespace alpasim::core::limits {

inline constexpr std::int64_t kMaxLayers = 1024;              ///< transformer layers
inline constexpr std::int64_t kMaxHiddenSize = 1 << 18;       ///< 262,144
inline constexpr std::int64_t kMaxFfnHiddenSize = 1 << 20;    ///< 1,048,576
inline constexpr std::int64_t kMaxHeads = 1 << 14;            ///< attention heads, 16,384
inline constexpr std::int64_t kMaxSeqLen = 1 << 22;           ///< tokens, 4,194,304
inline constexpr std::int64_t kMaxVocabSize = 1 << 22;        ///< 4,194,304
inline constexpr std::int64_t kMaxExperts = 1 << 14;          ///< experts per MoE layer
inline constexpr std::int64_t kMaxExpertGroupSize = 1 << 30;  ///< tokens per gating group
inline constexpr std::int64_t kMaxChannels = 1 << 12;         ///< Wide-ResNet base channels
inline constexpr std::int64_t kMaxWidthFactor = 64;           ///< Wide-ResNet width factor
inline constexpr std::int64_t kMaxImageSize = 1 << 12;        ///< pixels per side
inline constexpr std::int64_t kMaxClasses = 1 << 22;          ///< classifier outputs
inline constexpr std::int64_t kMaxGlobalBatchSize = 1 << 22;  ///< samples per iteration
inline constexpr std::int64_t kMaxNodes = 1 << 14;            ///< 16,384 nodes
inline constexpr std::int64_t kMaxGpusPerNode = 64;
/// GPUs of one NVLink domain (fifth-generation NVLink switches connect up to 576 GPUs).
inline constexpr std::int64_t kMaxNvlinkDomainGpus = 576;
inline constexpr std::int64_t kMaxGpus = kMaxNodes * kMaxGpusPerNode;  ///< 2^20
inline constexpr std::int64_t kMaxInterleave = kMaxLayers;    ///< model chunks per device
/// Elements of the largest tensor of one training step (whole global batch as one
/// microbatch): 2^44 (1.8e13). Published runs come near: Llama 3.1 405B at batch 1536 x
/// 8,192 tokens has 1.3e13-element attention scores (128 heads; a Flash kernel stores none,
/// but the graph still names them) and 1.6e12-element logits. Keeps sums of tensor bytes
/// over a graph < 2^63: at most 1,024 layers x 32 tensors x 4 bytes x 2^44 = 2^61.
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 44;
/// Estimated FLOPs of one training iteration: 2^62 (4.6e18; GPT-3 175B at batch 1536 is
/// 3.3e18). Iteration FLOPs are int64 (ir/accounting.h), with up to 4/3 of this after
/// recomputation.
inline constexpr std::int64_t kMaxIterationFlops = std::int64_t{1} << 62;

}  // namespace alpasim::core::limits
