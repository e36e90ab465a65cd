#include "ir/hf_config.h"

#include <algorithm>
#include <set>
#include <vector>

#include "core/limits.h"
#include "core/text.h"

namespace alpasim::ir {
namespace {

// Experts routed per token against the experts there are, the error naming the config's own
// key for the experts (num_local_experts, num_experts, n_routed_experts).
core::Status check_top_k(const core::JsonValue& at, const TransformerConfig& c, std::string_view experts_key) {
  if (c.top_k <= c.num_experts) return core::ok_status();
  return at.error("expected num_experts_per_tok <= " + std::string(experts_key) + ", got " +
                  std::to_string(c.top_k) + " > " + std::to_string(c.num_experts));
}

using core::JsonObject;
using core::JsonValue;
using core::Result;

// Keys of real config.json files that do not change the graph's shapes: accepted so
// that unmodified files load. Anything else must be understood or is an error.
const std::vector<std::string>& ignored_keys() {
  static const std::vector<std::string> k = {
      "_name_or_path", "architectures", "auto_map", "bos_token_id", "eos_token_id",
      "pad_token_id", "torch_dtype", "transformers_version", "use_cache", "rms_norm_eps",
      "layer_norm_epsilon", "layer_norm_eps", "initializer_range", "hidden_act",
      "activation_function", "rope_theta", "rope_scaling", "pretraining_tp",
      "attention_dropout",
      "router_aux_loss_coef", "norm_topk_prob", "output_router_logits", "routed_scaling_factor",
      "scoring_func", "topk_method", "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "ep_size",
      "qk_head_dim", "rope_interleave", "router_jitter_noise", "resid_pdrop",
      "embd_pdrop", "attn_pdrop", "summary_activation", "summary_first_dropout",
      "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
      "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
      "n_ctx", "gradient_checkpointing", "use_return_dict", "return_dict", "id2label",
      "label2id", "quantization_config"};
  return k;
}

const std::vector<std::string>& model_types() {
  static const std::vector<std::string> k = {"gpt2",      "llama",     "mistral",     "mixtral", "nemotron",
                                             "qwen2",     "qwen2_moe", "qwen3_moe",   "deepseek_v3", "kimi_k2"};
  return k;
}

Result<bool> get_bool(JsonObject& obj, std::string_view key, bool fallback) {
  return obj.get_bool_or(key, fallback);
}

// Sliding-window attention as transformers reads it: `sliding_window` on every layer of
// mistral (absent: MistralConfig's default 4,096; null: none) and mixtral (absent or null:
// none); Qwen2's and its MoE siblings' only with `use_sliding_window` (default false) and on
// layers from `max_window_layers` (default 28) on; `layer_types` ("sliding_attention" /
// "full_attention" per layer) where present. LlamaConfig has no window: the keys are
// accepted and ignored there, as transformers does. Patterns TransformerConfig cannot say
// (a full-attention prefix, an irregular list) are errors naming the key.
core::Status parse_sliding_window(JsonObject& obj, const std::string& type, TransformerConfig& c) {
  const bool qwen = type.rfind("qwen", 0) == 0;
  std::optional<JsonValue> window_key = obj.optional("sliding_window");
  std::optional<JsonValue> use_key = obj.optional("use_sliding_window");
  std::optional<JsonValue> layers_key = obj.optional("max_window_layers");
  c.sliding_window = 0;
  c.sliding_window_pattern = 0;
  if (type == "llama") {
    obj.optional("layer_types");
    return core::ok_status();
  }
  bool use = !qwen;
  if (use_key && !use_key->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(use, use_key->as_bool());
  }
  std::int64_t window = 0;
  std::string off_reason = "absent or null";
  if (!use) {
    off_reason = "off (use_sliding_window)";  // the window's value is not read
  } else if (window_key && !window_key->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(window, window_key->as_count(core::limits::kMaxSeqLen));
  } else if (!window_key && type == "mistral") {
    window = 4096;  // MistralConfig(sliding_window=4096)
  }
  if (qwen && window > 0) {
    std::int64_t full_first = 28;  // Qwen2Config(max_window_layers=28)
    if (layers_key && !layers_key->raw().is_null()) {
      ALPASIM_ASSIGN_OR_RETURN(full_first, layers_key->as_non_negative_int());
    }
    if (full_first > 0 && full_first < c.num_layers) {
      const std::string what = "full attention on the first " + std::to_string(full_first) +
                               " layers and a sliding window after them is not a pattern this version models "
                               "(sliding_window_pattern: every k-th layer full)";
      if (!layers_key || layers_key->raw().is_null()) {
        return obj.value().error("max_window_layers absent (transformers' default 28 < num_hidden_layers " +
                                 std::to_string(c.num_layers) + "): " + what);
      }
      return layers_key->error("expected 0 or at least num_hidden_layers (" + std::to_string(c.num_layers) +
                               "): " + what);
    }
    if (full_first >= c.num_layers) {
      window = 0;  // no layer slides
      off_reason = "off (max_window_layers >= num_hidden_layers)";
    }
  }
  c.sliding_window = window;
  c.sliding_window_pattern = 0;
  auto types_key = obj.optional("layer_types");
  if (!types_key || types_key->raw().is_null()) return core::ok_status();
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> types, types_key->as_array());
  if (static_cast<std::int64_t>(types.size()) != c.num_layers) {
    return types_key->error("expected one entry per layer (" + std::to_string(c.num_layers) + "), got " +
                            std::to_string(types.size()));
  }
  static const std::vector<std::string> kinds = {"sliding_attention", "full_attention"};
  std::vector<bool> full(types.size());
  for (std::size_t l = 0; l < types.size(); ++l) {
    ALPASIM_ASSIGN_OR_RETURN(std::string kind, types[l].as_enum(kinds));
    full[l] = kind == "full_attention";
  }
  const auto first_full = std::find(full.begin(), full.end(), true);
  if (first_full == full.begin() && std::all_of(full.begin(), full.end(), [](bool f) { return f; })) {
    c.sliding_window = 0;
    return core::ok_status();
  }
  if (window == 0) {
    return types_key->error("expected \"sliding_attention\" layers only with a sliding_window, which is " +
                            off_reason);
  }
  // Every k-th layer full: (l + 1) % k == 0, with k the first full layer's index + 1.
  const std::int64_t k = first_full == full.end() ? 0 : (first_full - full.begin()) + 1;
  for (std::size_t l = 0; l < full.size(); ++l) {
    const bool expected = k >= 2 && (static_cast<std::int64_t>(l) + 1) % k == 0;
    if (full[l] != expected) {
      return types[l].error("expected " + std::string(expected ? "\"full_attention\"" : "\"sliding_attention\"") +
                            ": layer types must repeat one pattern, every k-th layer full (k = " +
                            std::to_string(k) + " from the first full layer)");
    }
  }
  c.sliding_window_pattern = k;
  return core::ok_status();
}

// Qwen2-MoE / Qwen3-MoE (transformers' Qwen2MoeConfig, Qwen3MoeConfig): routed experts of
// moe_intermediate_size, Qwen2-MoE's shared expert, dense blocks of intermediate_size where
// mlp_only_layers names them. A block is sparse when (l + 1) % decoder_sparse_step == 0 and
// it is not in mlp_only_layers: only step 1 with a prefix of dense blocks is a pattern
// TransformerConfig says (first_dense_layers); others are errors naming the key. Left out:
// Qwen2-MoE's sigmoid gate on the shared expert and Qwen3's per-head q/k RMS norms (one
// h-wide elementwise pass each; not priced).
core::Status parse_qwen_moe(JsonObject& obj, const std::string& type, TransformerConfig& c) {
  c.dense_ffn_hidden_size = c.ffn_hidden_size;  // intermediate_size: the dense blocks'
  ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size,
                           obj.get_count("moe_intermediate_size", core::limits::kMaxFfnHiddenSize));
  ALPASIM_ASSIGN_OR_RETURN(c.num_experts, obj.get_count("num_experts", core::limits::kMaxExperts));
  // Qwen2MoeConfig's default is 4 experts per token, Qwen3MoeConfig's 8.
  ALPASIM_ASSIGN_OR_RETURN(c.top_k, obj.get_count_or("num_experts_per_tok", core::limits::kMaxExperts,
                                                     type == "qwen3_moe" ? 8 : 4));
  if (type == "qwen2_moe") {
    if (auto shared = obj.optional("shared_expert_intermediate_size"); shared && !shared->raw().is_null()) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t width, shared->as_non_negative_int());
      if (width > core::limits::kMaxFfnHiddenSize) {
        return shared->error("expected at most " + std::to_string(core::limits::kMaxFfnHiddenSize) + ", got " +
                             std::to_string(width));
      }
      c.shared_expert_ffn_hidden_size = width;
    }
  }
  if (auto step = obj.optional("decoder_sparse_step"); step && !step->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t k, step->as_count(core::limits::kMaxLayers));
    if (k != 1) {
      return step->error("expected 1 (every block sparse but those mlp_only_layers names), got " +
                         std::to_string(k) + ": blocks l with (l + 1) % k == 0 is not a pattern this version models");
    }
  }
  c.moe_layer_interval = 1;
  c.expert_group_size = 0;
  c.capacity_factor = 1.0;
  c.first_dense_layers = 0;
  if (auto dense = obj.optional("mlp_only_layers"); dense && !dense->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> layers, dense->as_array());
    std::set<std::int64_t> blocks;  // transformers reads the list as a set
    for (const JsonValue& layer : layers) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t l, layer.as_int(0, c.num_layers - 1, "a block index"));
      blocks.insert(l);
    }
    std::int64_t expected = 0;
    for (const std::int64_t l : blocks) {
      if (l != expected) {
        return dense->error("expected the first blocks (0, 1, ...: first_dense_layers), got block " +
                            std::to_string(l) + " without block " + std::to_string(expected));
      }
      ++expected;
    }
    c.first_dense_layers = static_cast<std::int64_t>(blocks.size());
    if (c.first_dense_layers >= c.num_layers) return dense->error("expected at least one sparse block");
  }
  return check_top_k(obj.value(), c, "num_experts");
}

// DeepSeek-V3 and Kimi K2 (transformers' DeepseekV3Config): multi-head latent attention,
// n_routed_experts of moe_intermediate_size with n_shared_experts beside them (one shared
// expert of their summed width), the first first_k_dense_replace blocks dense of
// intermediate_size. moe_layer_freq must be 1. Left out: the multi-token-prediction module
// (num_nextn_predict_layers: DeepSeek's training used one, Megatron's runs may not; not
// priced, the key is accepted), the router's score bias and grouped top-k (selection only).
core::Status parse_deepseek_v3(JsonObject& obj, TransformerConfig& c) {
  const std::int64_t max_width = core::limits::kMaxHiddenSize;
  c.dense_ffn_hidden_size = c.ffn_hidden_size;  // intermediate_size: the dense blocks'
  ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size,
                           obj.get_count("moe_intermediate_size", core::limits::kMaxFfnHiddenSize));
  ALPASIM_ASSIGN_OR_RETURN(c.num_experts, obj.get_count("n_routed_experts", core::limits::kMaxExperts));
  ALPASIM_ASSIGN_OR_RETURN(c.top_k, obj.get_count_or("num_experts_per_tok", core::limits::kMaxExperts, 8));
  // Absent keys take DeepseekV3Config's defaults (1 shared expert, 3 dense blocks, q_lora_rank
  // 1536); q_lora_rank null means no query compression.
  ALPASIM_ASSIGN_OR_RETURN(std::int64_t shared, obj.get_non_negative_int_or("n_shared_experts", 1));
  c.shared_expert_ffn_hidden_size = shared * c.ffn_hidden_size;
  ALPASIM_ASSIGN_OR_RETURN(c.first_dense_layers, obj.get_non_negative_int_or("first_k_dense_replace", 3));
  if (auto freq = obj.optional("moe_layer_freq"); freq && !freq->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t k, freq->as_count(core::limits::kMaxLayers));
    if (k != 1) return freq->error("expected 1 (every block after the dense ones is MoE), got " + std::to_string(k));
  }
  obj.optional("num_nextn_predict_layers");
  ALPASIM_ASSIGN_OR_RETURN(c.kv_lora_rank, obj.get_count("kv_lora_rank", max_width));
  c.q_lora_rank = 1536;
  if (auto q = obj.optional("q_lora_rank")) {
    c.q_lora_rank = 0;
    if (!q->raw().is_null()) {
      ALPASIM_ASSIGN_OR_RETURN(c.q_lora_rank, q->as_count(max_width));
    }
  }
  if (c.qkv_bias) {
    return obj.value().error("expected attention_bias false: biases on MLA's projections are not modelled");
  }
  ALPASIM_ASSIGN_OR_RETURN(c.qk_nope_head_dim, obj.get_count("qk_nope_head_dim", max_width));
  ALPASIM_ASSIGN_OR_RETURN(c.qk_rope_head_dim, obj.get_count("qk_rope_head_dim", max_width));
  ALPASIM_ASSIGN_OR_RETURN(c.v_head_dim, obj.get_count("v_head_dim", max_width));
  if (c.qk_rope_head_dim % 2 != 0) {
    return obj.value().error("expected an even qk_rope_head_dim (rotary pairs), got " +
                             std::to_string(c.qk_rope_head_dim));
  }
  c.num_kv_heads = c.num_heads;  // MLA: every head has its own keys and values
  c.head_dim = 0;
  c.moe_layer_interval = 1;
  c.expert_group_size = 0;
  c.capacity_factor = 1.0;
  if (c.first_dense_layers >= c.num_layers) {
    return obj.value().error("expected first_k_dense_replace < num_hidden_layers, got " +
                             std::to_string(c.first_dense_layers));
  }
  return check_top_k(obj.value(), c, "n_routed_experts");
}

}  // namespace

Result<TransformerConfig> parse_hf_config(const JsonValue& root, std::int64_t seq_len_override) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, root.as_object());
  ALPASIM_ASSIGN_OR_RETURN(std::string type, obj.get_enum("model_type", model_types()));
  TransformerConfig c;
  if (type == "gpt2") {
    c.builtin = "gpt";
    set_architecture_defaults(c);
    ALPASIM_ASSIGN_OR_RETURN(c.num_layers, obj.get_count("n_layer", core::limits::kMaxLayers));
    ALPASIM_ASSIGN_OR_RETURN(c.hidden_size, obj.get_count("n_embd", core::limits::kMaxHiddenSize));
    ALPASIM_ASSIGN_OR_RETURN(c.num_heads, obj.get_count("n_head", core::limits::kMaxHeads));
    ALPASIM_ASSIGN_OR_RETURN(c.seq_len, obj.get_count("n_positions", core::limits::kMaxSeqLen));
    ALPASIM_ASSIGN_OR_RETURN(c.vocab_size, obj.get_count("vocab_size", core::limits::kMaxVocabSize));
    c.ffn_hidden_size = 4 * c.hidden_size;
    if (auto inner = obj.optional("n_inner"); inner && !inner->raw().is_null()) {
      ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size, inner->as_count(core::limits::kMaxFfnHiddenSize));
    }
    ALPASIM_ASSIGN_OR_RETURN(c.tied_embeddings, get_bool(obj, "tie_word_embeddings", true));
    c.num_kv_heads = c.num_heads;
  } else {
    const bool qwen_moe = type == "qwen2_moe" || type == "qwen3_moe";
    const bool deepseek = type == "deepseek_v3" || type == "kimi_k2";  // Kimi K2: DeepSeek-V3's
    c.builtin = type == "mixtral" || qwen_moe || deepseek ? "mixtral" : type == "nemotron" ? "nemotron" : "llama";
    set_architecture_defaults(c);
    if (type == "nemotron") {
      // Nemotron-4 (transformers' NemotronConfig): relu(x)^2 in a non-gated MLP. Its
      // partial_rotary_factor (0.5) is read as full rotation (docs/scenario.md); norm_eps
      // changes no shape. (Other model types have neither key.)
      obj.has("norm_eps");
      obj.has("partial_rotary_factor");
      if (auto act = obj.optional("hidden_act")) {
        ALPASIM_ASSIGN_OR_RETURN(std::string f, act->as_string());
        if (f != "relu2") return act->error("expected \"relu2\" (Nemotron's squared ReLU), got \"" + f + "\"");
      }
    }
    ALPASIM_ASSIGN_OR_RETURN(c.num_layers, obj.get_count("num_hidden_layers", core::limits::kMaxLayers));
    ALPASIM_ASSIGN_OR_RETURN(c.hidden_size, obj.get_count("hidden_size", core::limits::kMaxHiddenSize));
    ALPASIM_ASSIGN_OR_RETURN(c.num_heads, obj.get_count("num_attention_heads", core::limits::kMaxHeads));
    ALPASIM_ASSIGN_OR_RETURN(c.num_kv_heads,
                             obj.get_count_or("num_key_value_heads", core::limits::kMaxHeads, c.num_heads));
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size, obj.get_count("intermediate_size", core::limits::kMaxFfnHiddenSize));
    ALPASIM_ASSIGN_OR_RETURN(c.vocab_size, obj.get_count("vocab_size", core::limits::kMaxVocabSize));
    ALPASIM_ASSIGN_OR_RETURN(c.seq_len, obj.get_count("max_position_embeddings", core::limits::kMaxSeqLen));
    ALPASIM_ASSIGN_OR_RETURN(c.tied_embeddings, get_bool(obj, "tie_word_embeddings", false));
    ALPASIM_ASSIGN_OR_RETURN(c.qkv_bias,
                             get_bool(obj, "attention_bias", type == "qwen2" || type == "qwen2_moe"));
    if (auto mlp_bias = obj.optional("mlp_bias")) {
      ALPASIM_ASSIGN_OR_RETURN(bool b, mlp_bias->as_bool());
      if (b) return mlp_bias->error("expected false (biases on MLP linears are not supported)");
    }
    if (auto head_dim = obj.optional("head_dim"); head_dim && !head_dim->raw().is_null()) {
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t d, head_dim->as_count(core::limits::kMaxHiddenSize));
      // Kept only where it differs from hidden_size / heads (Qwen3), so other configs read
      // as before.
      if (c.hidden_size % c.num_heads != 0 || d != c.hidden_size / c.num_heads) c.head_dim = d;
    }
    if (type == "mixtral") {
      ALPASIM_ASSIGN_OR_RETURN(c.num_experts, obj.get_count("num_local_experts", core::limits::kMaxExperts));
      ALPASIM_ASSIGN_OR_RETURN(c.top_k, obj.get_count_or("num_experts_per_tok", core::limits::kMaxExperts, 2));
      c.moe_layer_interval = 1;
      c.expert_group_size = 0;
      c.capacity_factor = 1.0;
    }
    if (qwen_moe) ALPASIM_RETURN_IF_ERROR(parse_qwen_moe(obj, type, c));
    if (deepseek) ALPASIM_RETURN_IF_ERROR(parse_deepseek_v3(obj, c));
  }
  if (type != "gpt2") ALPASIM_RETURN_IF_ERROR(parse_sliding_window(obj, type, c));
  for (const std::string& k : ignored_keys()) obj.has(k);
  // Not JsonObject::finish(): its message lists every known key, ~60 here.
  const std::vector<std::string> known = obj.known_keys();
  for (const auto& [key, value] : root.raw().items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string message = "unknown key (neither mapped to the model nor known to be irrelevant)";
    if (auto m = core::closest_match(key, known)) message += "; did you mean \"" + *m + "\"?";
    return root.child(key, value).error(message);
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_heads != 0) {
    return root.error("expected a hidden size divisible by the number of heads, got " +
                      std::to_string(c.hidden_size) + " and " + std::to_string(c.num_heads));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return root.error("expected a key/value head count dividing the head count, got " +
                      std::to_string(c.num_kv_heads) + " and " + std::to_string(c.num_heads));
  }
  if (c.num_experts > 0) ALPASIM_RETURN_IF_ERROR(check_top_k(root, c, "num_local_experts"));
  if (seq_len_override > 0) c.seq_len = seq_len_override;
  return c;
}

Result<TransformerConfig> read_hf_config(const std::filesystem::path& path,
                                         const std::string& path_as_written,
                                         std::int64_t seq_len_override) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  doc.file = path_as_written;
  return parse_hf_config(JsonValue::root(doc), seq_len_override);
}

}  // namespace alpasim::ir
