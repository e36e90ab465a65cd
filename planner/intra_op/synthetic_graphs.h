#pragma once

#include <cstdint>

#include "planner/intra_op/op_graph.h"

namespace alpasim::planner::intra_op {

/// A 2-layer MLP y = relu(x W1) W2 with backward and optimizer update (for tests and the
/// Megatron-vs-data-parallel check): x [batch, hidden], W1 [hidden, ffn], W2 [ffn, hidden].
/// Backward: dy = loss'(y); dW2 = a^T dy; da = dy W2^T; dh = relu'(da); dW1 = x^T dh; updates.
struct MlpShape {
  std::int64_t batch = 512;
  std::int64_t hidden = 256;
  std::int64_t ffn = 1024;
  std::int64_t element_bytes = 2;       ///< fp16
  std::int64_t state_bytes_per_element = 12;  ///< mixed-precision Adam
};
IntraOpGraph mlp_graph(const MlpShape& shape);

/// GPT-style decoder layers (pre-LN attention + FFN with biases), forward, backward and
/// optimizer update, in the operator granularity of an XLA/HLO trace without fusion of the
/// matmuls: per layer about 70 operators (attention weights Wq/Wk/Wv [h, heads, d_head] and
/// Wo [heads, d_head, h] so heads split without reshapes). Embedding and loss are left out;
/// the loss gradient is one elementwise operator on the last output.
struct GptShape {
  std::int64_t batch = 8;      ///< micro-batch, sequences
  std::int64_t seq = 1024;
  std::int64_t hidden = 2560;
  std::int64_t heads = 32;
  std::int64_t ffn = 4 * 2560;
  int layers = 1;
  bool backward = true;        ///< with backward and update
  std::int64_t element_bytes = 2;
  std::int64_t state_bytes_per_element = 12;
};
IntraOpGraph gpt_graph(const GptShape& shape);

/// A random small graph of `ops` operators (matmuls with fresh weights, elementwise,
/// transposes, softmax, layer-norm, updates) on 2D tensors with dims in {2, 4}: every
/// seed gives the same graph (std::mt19937_64 with our own draws).
IntraOpGraph random_small_graph(std::uint64_t seed, int ops);

}  // namespace alpasim::planner::intra_op
