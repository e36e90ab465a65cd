#include "core/attention_tiles.h"

namespace alpasim::core {

double causal_tile_fraction(std::int64_t keys) {
  if (keys <= 0) return 1.0;
  const std::int64_t tiles = (keys + kFlashAttentionTile - 1) / kFlashAttentionTile;
  return static_cast<double>(tiles + 1) / static_cast<double>(2 * tiles);
}

double attention_tile_fraction(std::int64_t keys, std::int64_t window) {
  if (window <= 0 || window >= keys) return causal_tile_fraction(keys);
  const std::int64_t tiles = (keys + kFlashAttentionTile - 1) / kFlashAttentionTile;
  std::int64_t computed = 0;
  for (std::int64_t i = 0; i < tiles; ++i) {
    // The earliest key of the tile's first query, i·T - window + 1; floor division.
    const std::int64_t first_key = i * kFlashAttentionTile - window + 1;
    const std::int64_t lo = first_key <= 0 ? 0 : first_key / kFlashAttentionTile;
    computed += i - lo + 1;
  }
  return static_cast<double>(computed) / static_cast<double>(tiles * tiles);
}

}  // namespace alpasim::core
