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

}  // namespace alpasim::core
