// Small models shared by the planner, executor and GPU tests: small enough for exhaustive
// checks and real fp32 arithmetic on the CPU backend.
#pragma once

#include <string>
#include <variant>

#include "ir/model_config.h"

namespace alpasim::testing {

/// Wide-ResNet-50 structure (stem, 16 bottleneck blocks, head: 18 layers) at 8×8 images,
/// 2 base channels and 4 classes: every convolution kind (strided, 1×1, 3×3) in a few KiB.
inline ir::ModelConfig tiny_wide_resnet() {
  ir::WideResNetConfig w;
  w.num_layers = 50;
  w.base_channels = 2;
  w.width_factor = 1;
  w.image_size = 8;
  w.num_classes = 4;
  return {"tiny wide-resnet", w};
}

/// A GPT with `layers` blocks of hidden 8 (2 heads, 4 tokens, vocabulary 16, FFN 16) for the
/// executor's sharded-plan tests (CPU backend, and the same plans on the CUDA backend).
inline ir::ModelConfig tiny_gpt_hidden8(std::int64_t layers = 2) {
  ir::TransformerConfig t;
  t.builtin = "gpt";
  t.num_layers = layers;
  t.hidden_size = 8;
  t.num_heads = 2;
  t.num_kv_heads = 2;
  t.seq_len = 4;
  t.vocab_size = 16;
  t.ffn_hidden_size = 16;
  ir::set_architecture_defaults(t);
  return {"tiny gpt", t};
}

/// A 2-block transformer of `builtin` ("gpt", "llama", "moe", "mixtral"): hidden 8, 2 heads
/// (LLaMA: one KV head, grouped-query attention), 4 tokens, vocabulary 11, FFN 12; MoE: 3
/// experts, top-2, groups of 4 tokens, capacity factor 1, every second block (GShard "moe")
/// or every block ("mixtral"). The fp64 gradient checks and the GEMM-layout test use it.
inline ir::TransformerConfig tiny_transformer(const std::string& builtin) {
  ir::TransformerConfig t;
  t.builtin = builtin;
  t.num_layers = 2;
  t.hidden_size = 8;
  t.num_heads = 2;
  t.num_kv_heads = builtin == "llama" ? 1 : 2;
  t.seq_len = 4;
  t.vocab_size = 11;
  t.ffn_hidden_size = 12;
  if (builtin == "moe" || builtin == "mixtral") {
    t.num_experts = 3;
    t.top_k = 2;
    t.moe_layer_interval = builtin == "moe" ? 2 : 1;
    t.expert_group_size = 4;
    t.capacity_factor = 1.0;
  }
  ir::set_architecture_defaults(t);
  return t;
}

/// A 2-block GPT (hidden 16, 2 heads, 8 tokens, vocabulary 32, FFN 64; 4 model layers:
/// embedding, 2 blocks, head) for the launcher, NCCL and CUDA-vs-CPU tests.
inline ir::ModelConfig tiny_gpt_hidden16() { return ir::gpt_model_config("tiny gpt", 2, 16, 2, 8, 32); }

/// A small GPT whose rows are wider than one 256-thread CUDA block (hidden 272, 264 tokens,
/// vocabulary 300), so the CUDA backend's row kernels (layer norm, softmax, cross-entropy)
/// take several passes per row (tests/gpu/exec_cuda_test.cc).
inline ir::ModelConfig wide_row_gpt() { return ir::gpt_model_config("wide-row gpt", 2, 272, 4, 264, 300); }

/// The wide-row GPT with a sliding window of 100 keys (ir::TransformerConfig::sliding_window
/// in every block): the softmax rows of 264 keys loop over several blocks and mask every key
/// but the query's latest 100 (tests/gpu/exec_cuda_test.cc).
inline ir::ModelConfig sliding_window_wide_row_gpt() {
  ir::ModelConfig model = wide_row_gpt();
  model.name = "sliding-window wide-row gpt";
  std::get<ir::TransformerConfig>(model.spec).sliding_window = 100;
  return model;
}

/// A GPT with `layers` blocks of hidden 256 (4 heads, 128 tokens, vocabulary 1,024, FFN
/// 1,024) for the search tests: large enough that the intra-op pass has real choices.
inline ir::ModelConfig tiny_gpt_hidden256(std::int64_t layers = 2) {
  return ir::gpt_model_config("tiny GPT", layers, 256, 4, 128, 1024);
}

}  // namespace alpasim::testing
