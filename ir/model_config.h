#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "ir/op.h"

namespace alpasim::ir {

/// A decoder-only transformer: GPT-2/3 ("gpt"), LLaMA-style ("llama": RMSNorm, SwiGLU,
/// rotary positions, grouped-query attention), Nemotron-4 ("nemotron": LayerNorm, a
/// non-gated squared-ReLU MLP, rotary positions, grouped-query attention), and the
/// mixture-of-experts variants ("moe": GShard, experts in every other layer; "mixtral":
/// experts in every layer).
struct TransformerConfig {
  std::string builtin;  ///< "gpt", "llama", "moe", "mixtral" or "nemotron"
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;     ///< = num_heads unless grouped-query attention
  /// Width of one attention head; 0 = hidden_size / num_heads. Set where the attention is
  /// wider or narrower than the residual stream (Qwen3: 128 x 32 heads on hidden 2048).
  std::int64_t head_dim = 0;
  /// The head width in use: head_dim, or hidden_size / num_heads when it is 0.
  std::int64_t head_width() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  /// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) when kv_lora_rank > 0: keys and
  /// values from a kv_lora_rank latent (qk_nope_head_dim and v_head_dim per head), a
  /// rotary key part of qk_rope_head_dim shared by the heads, queries from a q_lora_rank
  /// latent (0: from the input). num_kv_heads is then num_heads. Scenario keys of the same
  /// names (Hugging Face's).
  std::int64_t kv_lora_rank = 0;
  std::int64_t q_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t seq_len = 0;          ///< tokens per sequence
  std::int64_t vocab_size = 0;
  std::int64_t ffn_hidden_size = 0;  ///< 4·hidden for GPT; per expert for MoE
  // Mixture of experts (num_experts == 0: dense).
  std::int64_t num_experts = 0;
  std::int64_t top_k = 0;              ///< experts per token
  std::int64_t moe_layer_interval = 0; ///< every k-th layer is MoE (GShard 2, Mixtral 1)
  std::int64_t expert_group_size = 0;  ///< tokens per gating group (GShard); 0 = whole batch
  /// Expert capacity C = ceil(factor · group tokens · top_k / experts). The default 1.0
  /// gives GShard's and Alpa's C = 2·S/E for top-2 (alpa/model/moe.py top2_gating).
  double capacity_factor = 0;
  /// Shared experts (DeepSeek-MoE/V3, Qwen2-MoE, Llama 4): a dense MLP of this width that
  /// every token passes through beside its routed experts, its output added to theirs;
  /// 0 = none. Several shared experts of one width are one of their summed width
  /// (Megatron-Core's --moe-shared-expert-intermediate-size). Scenario key
  /// "shared_expert_ffn_hidden_size".
  std::int64_t shared_expert_ffn_hidden_size = 0;
  /// The first `first_dense_layers` blocks are dense (DeepSeek-V3's first_k_dense_replace: 3);
  /// MoE layers are the blocks l >= first_dense_layers with l % moe_layer_interval == 0.
  /// Scenario key "first_dense_layers".
  std::int64_t first_dense_layers = 0;
  /// MLP width of the dense blocks of a mixture-of-experts model (DeepSeek-V3: 18,432 where
  /// its experts are 2,048 wide); 0 = ffn_hidden_size. Scenario key "dense_ffn_hidden_size".
  std::int64_t dense_ffn_hidden_size = 0;
  /// True when block l (0-based) is a mixture-of-experts layer.
  bool is_moe_layer(std::int64_t l) const {
    return num_experts > 0 && moe_layer_interval > 0 && l >= first_dense_layers && l % moe_layer_interval == 0;
  }
  /// The MLP width of block l when it is dense.
  std::int64_t dense_width() const {
    return num_experts > 0 && dense_ffn_hidden_size > 0 ? dense_ffn_hidden_size : ffn_hidden_size;
  }

  // Architecture details that the scenario JSON does not spell: set from `builtin` by
  // set_architecture_defaults() (which parse_model_config calls), or by the Hugging Face
  // importer from a config.json. They are not written by model_config_to_json.
  bool tied_embeddings = true;    ///< the LM head reuses the token embedding (GPT, GShard)
  bool qkv_bias = true;           ///< biases on the Q, K, V projections (GPT; Qwen2)
  bool dense_bias = true;         ///< biases on the attention output and FFN/expert linears
  bool learned_positions = true;  ///< a learned position table (GPT); false: rotary (LLaMA)
  bool dropout = true;            ///< dropout after attention probs, attention out, FFN out
  /// Attention runs as one fused (Flash) kernel: the s x s scores and probabilities are
  /// neither stored for the backward nor, in the forward, kept beyond their layer (see
  /// Op::fused_attention). The scenario key "fused_attention" defaults to true (every
  /// current training stack); a config built in code defaults to false (the unfused
  /// attention of Megatron-LM 2021 and Alpa 2022, the published runs validated against).
  /// Written by model_config_to_json, so plan files carry it.
  bool fused_attention = false;
  /// SwiGLU MLPs ("llama", "mixtral") run as one fused kernel that saves the gate and up
  /// projections and recomputes the SiLU in the backward (Op::fused_swiglu); without it the
  /// SiLU's output is stored as well (s·b·ffn values per layer). The scenario key
  /// "fused_swiglu" defaults to true (Megatron-Core's bias_swiglu_fusion); a config built in
  /// code defaults to false. Written by model_config_to_json.
  bool fused_swiglu = false;
  /// How the language-model loss runs (Op::loss_kernel): the scenario keys
  /// "cross_entropy_loss_fusion" (default false) and "cross_entropy_fusion_impl" ("native"
  /// or "te", default "native"; read only with the fusion), Megatron-Core's flags and
  /// defaults. Written by model_config_to_json.
  LossKernel loss_kernel = LossKernel::kUnfused;
  /// Sliding-window attention: each query sees its `sliding_window` latest keys (itself
  /// included; Hugging Face's `sliding_window`); 0 = full causal attention. Scenario key
  /// "sliding_window", Hugging Face configs' `sliding_window` (mistral, mixtral; qwen2 with
  /// `use_sliding_window`) and `layer_types`. Written by model_config_to_json when set.
  std::int64_t sliding_window = 0;
  /// Which layers slide: 0 = every layer; k >= 2 = every k-th layer keeps full attention
  /// (layers l with (l + 1) % k == 0, 0-based: Gemma 2 and GPT-OSS alternate, k = 2; Gemma
  /// 3 has five local layers per global one, k = 6). Scenario key "sliding_window_pattern".
  std::int64_t sliding_window_pattern = 0;
  /// The window of block l (0-based): sliding_window, or 0 when the layer attends to every
  /// earlier key.
  std::int64_t attention_window_of(std::int64_t l) const {
    if (sliding_window <= 0) return 0;
    if (sliding_window_pattern >= 2 && (l + 1) % sliding_window_pattern == 0) return 0;
    return sliding_window;
  }
};

/// The loss kernel an object's "cross_entropy_loss_fusion" (bool, default false) and
/// "cross_entropy_fusion_impl" ("native" or "te", default "native"; an error without the
/// fusion) name: Megatron-Core's flags and defaults. Used by the model keys and graph JSON.
core::Result<LossKernel> parse_loss_kernel(core::JsonObject& obj);
/// Writes those keys for `kernel` into `j` (the impl only when fused).
void write_loss_kernel(LossKernel kernel, core::Json& j);

/// Sets the architecture details of `config` from config.builtin: "gpt"/"moe": tied
/// embeddings, biases everywhere, learned positions, dropout (Megatron GPT, GShard);
/// "llama"/"mixtral"/"nemotron": untied, no biases, rotary, no dropout (Nemotron-4's
/// published configs: share_embeddings_and_output_weights, bias and dropout off).
void set_architecture_defaults(TransformerConfig& config);

/// Wide-ResNet (Zagoruyko & Komodakis) as configured in the Alpa paper, table 8.
struct WideResNetConfig {
  std::int64_t num_layers = 0;     ///< 50 or 101 (bottleneck blocks 3-4-6-3 / 3-4-23-3)
  std::int64_t base_channels = 0;  ///< channels of the first stage
  std::int64_t width_factor = 0;   ///< bottleneck width multiplier
  std::int64_t image_size = 0;     ///< input height = width, pixels
  std::int64_t num_classes = 0;
};

/// A model read from a file: a JSON graph, a Hugging Face config.json, or ONNX.
struct ModelFileConfig {
  std::string format;          ///< "graph_json", "hf_config" or "onnx"
  std::filesystem::path path;  ///< resolved (absolute or relative to the working directory)
  std::string path_as_written; ///< as it appeared in the scenario, for messages and output
  /// "hf_config" only: TransformerConfig::fused_attention of the imported model (the
  /// scenario key "fused_attention", default true).
  bool fused_attention = true;
  /// "hf_config" only: TransformerConfig::fused_swiglu (the scenario key "fused_swiglu",
  /// default true).
  bool fused_swiglu = true;
  /// "hf_config" only: TransformerConfig::loss_kernel (the same scenario keys).
  LossKernel loss_kernel = LossKernel::kUnfused;
  /// "hf_config" only: tokens per sequence (the model key "seq_len", or the scenario's
  /// training.seq_len); 0 = the config's max_position_embeddings (n_positions), the
  /// longest context the model supports, which is rarely the training length.
  std::int64_t seq_len = 0;
};

/// The scenario's "model" block.
struct ModelConfig {
  std::string name;  ///< a display name ("GPT-3 39B"); generated when not given
  std::variant<TransformerConfig, WideResNetConfig, ModelFileConfig> spec;
};

/// A builtin "gpt" (Megatron/Alpa GPT: 4·hidden MLP, multi-head attention, the "gpt"
/// architecture defaults) of the given shape, named `name`.
ModelConfig gpt_model_config(std::string name, std::int64_t layers, std::int64_t hidden,
                             std::int64_t heads, std::int64_t seq_len, std::int64_t vocab);

/// The builtin names parse_model_config accepts.
const std::vector<std::string>& builtin_model_names();

/// Reads a "model" block (docs/scenario.md). Relative file paths resolve against
/// `base_dir` (the scenario's folder).
core::Result<ModelConfig> parse_model_config(const core::JsonValue& value,
                                             const std::filesystem::path& base_dir);

/// Why a training step of `samples` samples as one microbatch (one graph) would exceed the
/// size limits of core/limits.h, or "" when it stays within them. Estimates (long double,
/// cheap, before any graph is built) its largest tensor and its FLOPs (a graph's FLOP
/// counts are int64; an iteration's are doubles). Callers pass the largest microbatch the
/// run can build: a fixed plan's, else the whole global batch (a search may run it as one
/// microbatch). File models are checked when imported. The sentence reads "the largest
/// tensor of a training step of N samples as one microbatch would have ... elements, ...".
std::string model_size_problem(const ModelConfig& config, std::int64_t samples);

/// The JSON form parse_model_config reads back to an equal config.
core::Json model_config_to_json(const ModelConfig& config);

}  // namespace alpasim::ir
