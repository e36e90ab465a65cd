#include "ir/hf_config.h"

#include <algorithm>
#include <vector>

#include "core/limits.h"
#include "core/text.h"

namespace alpasim::ir {
namespace {

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
      "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "resid_pdrop",
      "embd_pdrop", "attn_pdrop", "summary_activation", "summary_first_dropout",
      "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
      "scale_attn_weights", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
      "n_ctx", "gradient_checkpointing", "use_return_dict", "return_dict", "id2label",
      "label2id", "quantization_config"};
  return k;
}

const std::vector<std::string>& model_types() {
  static const std::vector<std::string> k = {"gpt2", "llama", "mistral", "mixtral", "qwen2"};
  return k;
}

Result<bool> get_bool(JsonObject& obj, std::string_view key, bool fallback) {
  return obj.get_bool_or(key, fallback);
}

// Sliding-window attention as transformers reads it: `sliding_window` (null: none) on
// every layer (mistral, mixtral), Qwen2's only with `use_sliding_window` and on layers from
// `max_window_layers` on, and `layer_types` ("sliding_attention" / "full_attention" per
// layer) where present. Patterns TransformerConfig cannot say (a full-attention prefix, an
// irregular list) are errors naming the key.
core::Status parse_sliding_window(JsonObject& obj, const std::string& type, TransformerConfig& c) {
  std::int64_t window = 0;
  std::optional<JsonValue> window_key = obj.optional("sliding_window");
  if (window_key && !window_key->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(window, window_key->as_count(core::limits::kMaxSeqLen));
  }
  bool use = type != "qwen2";  // Qwen2Config: use_sliding_window defaults to false
  if (auto u = obj.optional("use_sliding_window"); u && !u->raw().is_null()) {
    ALPASIM_ASSIGN_OR_RETURN(use, u->as_bool());
  }
  if (!use) window = 0;
  if (auto m = obj.optional("max_window_layers"); m && !m->raw().is_null() && type == "qwen2" && window > 0) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t full_first, m->as_non_negative_int());
    if (full_first > 0 && full_first < c.num_layers) {
      return m->error("expected 0 or at least num_hidden_layers (" + std::to_string(c.num_layers) +
                      "): full attention on the first " + std::to_string(full_first) +
                      " layers and a sliding window after them is not a pattern this version models "
                      "(sliding_window_pattern: every k-th layer full)");
    }
    if (full_first >= c.num_layers) window = 0;  // no layer slides
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
                            std::string(window_key && !window_key->raw().is_null() ? "off (use_sliding_window)" : "absent or null"));
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
    c.builtin = type == "mixtral" ? "mixtral" : "llama";
    set_architecture_defaults(c);
    ALPASIM_ASSIGN_OR_RETURN(c.num_layers, obj.get_count("num_hidden_layers", core::limits::kMaxLayers));
    ALPASIM_ASSIGN_OR_RETURN(c.hidden_size, obj.get_count("hidden_size", core::limits::kMaxHiddenSize));
    ALPASIM_ASSIGN_OR_RETURN(c.num_heads, obj.get_count("num_attention_heads", core::limits::kMaxHeads));
    ALPASIM_ASSIGN_OR_RETURN(c.num_kv_heads,
                             obj.get_count_or("num_key_value_heads", core::limits::kMaxHeads, c.num_heads));
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size, obj.get_count("intermediate_size", core::limits::kMaxFfnHiddenSize));
    ALPASIM_ASSIGN_OR_RETURN(c.vocab_size, obj.get_count("vocab_size", core::limits::kMaxVocabSize));
    ALPASIM_ASSIGN_OR_RETURN(c.seq_len, obj.get_count("max_position_embeddings", core::limits::kMaxSeqLen));
    ALPASIM_ASSIGN_OR_RETURN(c.tied_embeddings, get_bool(obj, "tie_word_embeddings", false));
    ALPASIM_ASSIGN_OR_RETURN(c.qkv_bias, get_bool(obj, "attention_bias", type == "qwen2"));
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
  if (c.num_experts > 0 && c.top_k > c.num_experts) {
    return root.error("expected num_experts_per_tok <= num_local_experts, got " +
                      std::to_string(c.top_k) + " > " + std::to_string(c.num_experts));
  }
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
