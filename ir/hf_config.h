#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/json_reader.h"
#include "core/status.h"
#include "ir/model_config.h"

namespace alpasim::ir {

/// Maps a Hugging Face `config.json` of a decoder-only LLM to a TransformerConfig:
///  - "gpt2": n_layer, n_embd, n_head, n_positions (or n_ctx), vocab_size, n_inner
///    (null = 4·n_embd) -> builtin "gpt" (tied embeddings, biases, learned positions);
///  - "llama", "mistral", "qwen2": hidden_size, num_hidden_layers, num_attention_heads,
///    num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings,
///    tie_word_embeddings, attention_bias (Qwen2: biases on q, k, v) -> builtin "llama";
///  - "mixtral": the LLaMA keys + num_local_experts, num_experts_per_tok -> "mixtral";
///  - "nemotron": the LLaMA keys, hidden_act "relu2" (else an error) -> builtin
///    "nemotron" (partial_rotary_factor read as full rotation).
/// seq_len is max_position_embeddings (n_positions) unless `seq_len_override` > 0.
/// Keys that do not change parameter or FLOP counts (token ids, eps, dropout rates,
/// rope settings, ...) are accepted and ignored; any other key is an error naming it,
/// and so is a setting the builder cannot represent (mlp_bias). A head_dim other than
/// hidden_size / heads (Qwen3) is kept as TransformerConfig::head_dim. `file` names the
/// document in messages.
core::Result<TransformerConfig> parse_hf_config(const core::JsonValue& root,
                                                std::int64_t seq_len_override = 0);

/// Reads `path` and parses it; errors name `path_as_written`.
core::Result<TransformerConfig> read_hf_config(const std::filesystem::path& path,
                                               const std::string& path_as_written,
                                               std::int64_t seq_len_override = 0);

}  // namespace alpasim::ir
