#pragma once

#include <cstdint>

namespace alpasim::core {

/// Query and key rows of one tile of a flash-attention kernel: 128 x 128, the order of
/// FlashAttention-2's and cuDNN's tiles at head dimension 128 (their exact shapes vary by
/// kernel; the causal share (n + 1) / 2n moves by well under 1 % at thousands of keys).
inline constexpr std::int64_t kFlashAttentionTile = 128;

/// (n + 1) / 2n with n = ceil(keys / kFlashAttentionTile): the share of a causal attention's
/// tiles a flash kernel computes over `keys` keys (1 for keys <= 0).
double causal_tile_fraction(std::int64_t keys);

/// The share of the n x n tiles (n = ceil(keys / kFlashAttentionTile)) a flash kernel
/// computes when each query sees its `window` latest keys (itself included; window <= 0
/// or >= keys: causal, = causal_tile_fraction): query tile i reads key tiles
/// max(0, floor((i·T - window + 1) / T)) .. i. 8,192 keys, window 4,096: 1,584 of 4,096
/// tiles, 0.3867 (causal: 0.5078). 1 for keys <= 0.
double attention_tile_fraction(std::int64_t keys, std::int64_t window);

/// How one GEMM of a flash-attention kernel pair shares the kernels' time: the graph holds
/// the kernels as dots (forward: QK^T, P·V; backward: QK^T recomputed, dP, dV, dQ, dK), and
/// each is priced as its share of the kernel it runs in, or of both (a recomputed QK^T when
/// the forward kernel runs again before the backward one). ir::flash_dot_role derives it
/// from a graph; cost_model's flash_attention_dot prices it.
struct FlashDotShare {
  bool in_forward_kernel = true;    ///< priced in the forward kernel
  bool in_backward_kernel = false;  ///< priced in the backward kernel
  bool score_shaped = false;        ///< one of the kernel's queries x keys sets: the scores, dP
  bool writes_output = true;        ///< writes a tensor to HBM: O; dV, dQ, dK (not MLA's rope scores)
  bool starts_kernel = false;       ///< carries the kernel's fixed cost: the scores, once per call
  double work_fraction = 1.0;       ///< the share of tiles the kernel computes (causal, window), (0, 1]
};

}  // namespace alpasim::core
