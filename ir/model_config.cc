#include "ir/model_config.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/limits.h"
#include "core/text.h"

namespace alpasim::ir {
namespace {

using core::JsonObject;
using core::Result;
namespace L = core::limits;

// 0 (the whole batch) or a group size up to kMaxExpertGroupSize tokens.
Result<std::int64_t> expert_group_size(JsonObject& obj) {
  auto v = obj.optional("expert_group_size");
  if (!v) return 0;
  return v->as_int(0, L::kMaxExpertGroupSize,
                   "an integer in [0, " + std::to_string(L::kMaxExpertGroupSize) + "]");
}

const std::vector<std::string>& file_formats() {
  static const std::vector<std::string> k = {"graph_json", "hf_config", "onnx"};
  return k;
}

Result<TransformerConfig> parse_transformer(JsonObject& obj, const std::string& builtin) {
  TransformerConfig c;
  c.builtin = builtin;
  const bool llama_like = builtin == "llama" || builtin == "mixtral";
  const bool moe = builtin == "moe" || builtin == "mixtral";
  ALPASIM_ASSIGN_OR_RETURN(c.num_layers, obj.get_count("num_layers", L::kMaxLayers));
  ALPASIM_ASSIGN_OR_RETURN(c.hidden_size, obj.get_count("hidden_size", L::kMaxHiddenSize));
  ALPASIM_ASSIGN_OR_RETURN(c.num_heads, obj.get_count("num_heads", L::kMaxHeads));
  ALPASIM_ASSIGN_OR_RETURN(c.seq_len, obj.get_count("seq_len", L::kMaxSeqLen));
  ALPASIM_ASSIGN_OR_RETURN(c.vocab_size, obj.get_count("vocab_size", L::kMaxVocabSize));
  if (llama_like) {
    // LLaMA-style models have no conventional FFN width (e.g. 11008 for 7B): require it.
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size, obj.get_count("ffn_hidden_size", L::kMaxFfnHiddenSize));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size,
                             obj.get_count_or("ffn_hidden_size", L::kMaxFfnHiddenSize, 4 * c.hidden_size));
  }
  ALPASIM_ASSIGN_OR_RETURN(c.num_kv_heads, obj.get_count_or("num_kv_heads", L::kMaxHeads, c.num_heads));
  ALPASIM_ASSIGN_OR_RETURN(c.head_dim, obj.get_count_or("head_dim", L::kMaxHiddenSize, 0));
  if (c.head_dim == 0 && c.hidden_size % c.num_heads != 0) {
    return obj.value().child("num_heads", obj.value().raw()["num_heads"])
        .error("expected a divisor of hidden_size " + std::to_string(c.hidden_size) + ", got " +
               std::to_string(c.num_heads));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return obj.value().child("num_kv_heads", obj.value().raw()["num_kv_heads"])
        .error("expected a divisor of num_heads " + std::to_string(c.num_heads) + ", got " +
               std::to_string(c.num_kv_heads));
  }
  if (moe) {
    ALPASIM_ASSIGN_OR_RETURN(c.num_experts, obj.get_count("num_experts", L::kMaxExperts));
    ALPASIM_ASSIGN_OR_RETURN(c.top_k, obj.get_count_or("top_k", L::kMaxExperts, 2));
    ALPASIM_ASSIGN_OR_RETURN(c.moe_layer_interval,
                             obj.get_count_or("moe_layer_interval", L::kMaxLayers, builtin == "moe" ? 2 : 1));
    ALPASIM_ASSIGN_OR_RETURN(c.expert_group_size, expert_group_size(obj));
    ALPASIM_ASSIGN_OR_RETURN(c.capacity_factor,
                             obj.get_number_in_or("capacity_factor", 0.1, 64,
                                                  "a capacity factor in [0.1, 64]",
                                                  1.0));
    if (c.top_k > c.num_experts) {
      return obj.value().child("top_k", obj.value().raw()["top_k"])
          .error("expected at most num_experts (" + std::to_string(c.num_experts) + "), got " +
                 std::to_string(c.top_k));
    }
    ALPASIM_ASSIGN_OR_RETURN(c.shared_expert_ffn_hidden_size,
                             obj.get_count_or("shared_expert_ffn_hidden_size", L::kMaxFfnHiddenSize, 0));
    ALPASIM_ASSIGN_OR_RETURN(c.dense_ffn_hidden_size,
                             obj.get_count_or("dense_ffn_hidden_size", L::kMaxFfnHiddenSize, 0));
    ALPASIM_ASSIGN_OR_RETURN(c.first_dense_layers, obj.get_non_negative_int_or("first_dense_layers", 0));
    bool any_moe = false;
    for (std::int64_t l = 0; l < c.num_layers && !any_moe; ++l) any_moe = c.is_moe_layer(l);
    if (!any_moe) {
      return obj.value().child("first_dense_layers", obj.value().raw()["first_dense_layers"])
          .error("expected a count that leaves at least one MoE block (num_layers " +
                 std::to_string(c.num_layers) + ", moe_layer_interval " + std::to_string(c.moe_layer_interval) +
                 "), got " + std::to_string(c.first_dense_layers));
    }
  }
  if (llama_like) {
    ALPASIM_ASSIGN_OR_RETURN(c.kv_lora_rank, obj.get_count_or("kv_lora_rank", L::kMaxHiddenSize, 0));
    if (c.kv_lora_rank > 0) {
      ALPASIM_ASSIGN_OR_RETURN(c.q_lora_rank, obj.get_non_negative_int_or("q_lora_rank", 0));
      ALPASIM_ASSIGN_OR_RETURN(c.qk_nope_head_dim, obj.get_count("qk_nope_head_dim", L::kMaxHiddenSize));
      ALPASIM_ASSIGN_OR_RETURN(c.qk_rope_head_dim, obj.get_count("qk_rope_head_dim", L::kMaxHiddenSize));
      ALPASIM_ASSIGN_OR_RETURN(c.v_head_dim, obj.get_count("v_head_dim", L::kMaxHiddenSize));
      if (c.q_lora_rank > L::kMaxHiddenSize) {
        return obj.value().child("q_lora_rank", obj.value().raw()["q_lora_rank"])
            .error("expected at most " + std::to_string(L::kMaxHiddenSize) + ", got " + std::to_string(c.q_lora_rank));
      }
      if (c.qk_rope_head_dim % 2 != 0) {
        return obj.value().child("qk_rope_head_dim", obj.value().raw()["qk_rope_head_dim"])
            .error("expected an even width (rotary pairs), got " + std::to_string(c.qk_rope_head_dim));
      }
      if (c.num_kv_heads != c.num_heads) {
        return obj.value().child("num_kv_heads", obj.value().raw()["num_kv_heads"])
            .error("expected num_heads (" + std::to_string(c.num_heads) +
                   ") with multi-head latent attention (kv_lora_rank), got " + std::to_string(c.num_kv_heads));
      }
    }
  }
  set_architecture_defaults(c);
  ALPASIM_ASSIGN_OR_RETURN(c.fused_attention, obj.get_bool_or("fused_attention", true));
  ALPASIM_ASSIGN_OR_RETURN(c.fused_swiglu, obj.get_bool_or("fused_swiglu", true));
  ALPASIM_ASSIGN_OR_RETURN(c.loss_kernel, parse_loss_kernel(obj));
  ALPASIM_ASSIGN_OR_RETURN(c.sliding_window, obj.get_count_or("sliding_window", L::kMaxSeqLen, 0));
  ALPASIM_ASSIGN_OR_RETURN(c.sliding_window_pattern,
                           obj.get_count_or("sliding_window_pattern", L::kMaxLayers, 0));
  if (c.sliding_window_pattern == 1) {
    return obj.value().child("sliding_window_pattern", obj.value().raw()["sliding_window_pattern"])
        .error("expected k >= 2 (every k-th layer keeps full attention; omit the key for every layer), got 1");
  }
  if (c.sliding_window_pattern > 0 && c.sliding_window == 0) {
    return obj.value().child("sliding_window_pattern", obj.value().raw()["sliding_window_pattern"])
        .error("expected only with \"sliding_window\", which is absent or 0");
  }
  return c;
}

Result<WideResNetConfig> parse_wide_resnet(JsonObject& obj) {
  WideResNetConfig c;
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue layers, obj.required("num_layers", "50 or 101"));
  ALPASIM_ASSIGN_OR_RETURN(c.num_layers, layers.as_int(50, 101, "50 or 101"));
  if (c.num_layers != 50 && c.num_layers != 101) return layers.type_error("50 or 101");
  ALPASIM_ASSIGN_OR_RETURN(c.base_channels, obj.get_count("base_channels", L::kMaxChannels));
  ALPASIM_ASSIGN_OR_RETURN(c.width_factor, obj.get_count("width_factor", L::kMaxWidthFactor));
  ALPASIM_ASSIGN_OR_RETURN(c.image_size, obj.get_count_or("image_size", L::kMaxImageSize, 224));
  ALPASIM_ASSIGN_OR_RETURN(c.num_classes, obj.get_count_or("num_classes", L::kMaxClasses, 1024));
  return c;
}

std::string default_name(const ModelConfig& config) {
  if (const auto* t = std::get_if<TransformerConfig>(&config.spec)) {
    return t->builtin + " L" + std::to_string(t->num_layers) + " H" +
           std::to_string(t->hidden_size);
  }
  if (const auto* w = std::get_if<WideResNetConfig>(&config.spec)) {
    return "wide_resnet" + std::to_string(w->num_layers) + " C" +
           std::to_string(w->base_channels) + " W" + std::to_string(w->width_factor);
  }
  return std::get<ModelFileConfig>(config.spec).path_as_written;
}

}  // namespace

// Megatron-Core's cross_entropy_loss_fusion and cross_entropy_fusion_impl, with its
// defaults (unfused; "native" once fused). The impl is read only with the fusion, as
// Megatron-Core reads it; written without it, it is refused rather than silently unused.
Result<LossKernel> parse_loss_kernel(JsonObject& obj) {
  ALPASIM_ASSIGN_OR_RETURN(bool fusion, obj.get_bool_or("cross_entropy_loss_fusion", false));
  static const std::vector<std::string> kImpls = {"native", "te"};
  if (!fusion) {
    if (auto impl = obj.optional("cross_entropy_fusion_impl")) {
      return impl->error("expected only with \"cross_entropy_loss_fusion\": true (Megatron-Core reads the "
                         "implementation only for the fused loss)");
    }
    return LossKernel::kUnfused;
  }
  ALPASIM_ASSIGN_OR_RETURN(std::string impl, obj.get_enum_or("cross_entropy_fusion_impl", kImpls, "native"));
  return impl == "te" ? LossKernel::kTeFused : LossKernel::kNativeFused;
}

void write_loss_kernel(LossKernel kernel, core::Json& j) {
  j["cross_entropy_loss_fusion"] = kernel != LossKernel::kUnfused;
  if (kernel != LossKernel::kUnfused) j["cross_entropy_fusion_impl"] = std::string(loss_kernel_name(kernel));
}

ModelConfig gpt_model_config(std::string name, std::int64_t layers, std::int64_t hidden,
                             std::int64_t heads, std::int64_t seq_len, std::int64_t vocab) {
  TransformerConfig t;
  t.builtin = "gpt";
  t.num_layers = layers;
  t.hidden_size = hidden;
  t.num_heads = heads;
  t.num_kv_heads = heads;
  t.seq_len = seq_len;
  t.vocab_size = vocab;
  t.ffn_hidden_size = 4 * hidden;
  set_architecture_defaults(t);
  return ModelConfig{std::move(name), t};
}

void set_architecture_defaults(TransformerConfig& config) {
  const bool gpt_like = config.builtin == "gpt" || config.builtin == "moe";
  config.tied_embeddings = gpt_like;
  config.qkv_bias = gpt_like;
  config.dense_bias = gpt_like;
  config.learned_positions = gpt_like;
  config.dropout = gpt_like;
}

std::string model_size_problem(const ModelConfig& config, std::int64_t samples) {
  const auto sci = [](double x) {  // "1.10e+12": locale-independent, 3 significant digits
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2e", x);
    return std::string(buffer);
  };
  using F = long double;  // exact enough for an estimate, and cannot overflow here
  const F b = static_cast<F>(samples);
  F largest_tensor = 0;
  F iteration_flops = 0;
  if (const auto* t = std::get_if<TransformerConfig>(&config.spec)) {
    const F h = static_cast<F>(t->hidden_size), s = static_cast<F>(t->seq_len);
    const F tokens = b * s;
    // MoE: each token reaches top_k experts, each padded by the capacity factor.
    const F experts_per_token =
        t->num_experts > 0 ? static_cast<F>(t->top_k) * static_cast<F>(t->capacity_factor) : 1;
    // With shared experts and wider dense blocks (an upper bound: their sum).
    const F ffn = static_cast<F>(t->ffn_hidden_size) * std::max<F>(1, experts_per_token) +
                  static_cast<F>(t->shared_expert_ffn_hidden_size) + static_cast<F>(t->dense_ffn_hidden_size);
    const F ffn_matrices = t->builtin == "llama" || t->builtin == "mixtral" ? 3 : 2;  // SwiGLU
    // Q, K and V together: 3·h wide, or (heads + 2·kv heads) x head_dim where head_dim is set.
    const F qkv = std::max<F>(3 * h, static_cast<F>(t->num_heads + 2 * t->num_kv_heads) *
                                         static_cast<F>(t->head_width()));
    largest_tensor = std::max({tokens * std::max({qkv, ffn, static_cast<F>(t->vocab_size)}),
                               b * static_cast<F>(t->num_heads) * s * s});
    // Forward 2 FLOPs per weight per token (+ attention scores and values, 4·s·h per
    // token); backward twice the forward.
    const F weights_per_token = static_cast<F>(t->num_layers) * (4 * h * h + ffn_matrices * h * ffn) +
                                static_cast<F>(t->vocab_size) * h;
    iteration_flops = 3 * (2 * tokens * weights_per_token +
                           4 * static_cast<F>(t->num_layers) * tokens * s * h);
  } else if (const auto* w = std::get_if<WideResNetConfig>(&config.spec)) {
    // The widest activation: the first stage's bottleneck output (4·width·base channels)
    // at a quarter of the image side. (FLOPs are bounded by the per-key limits: base
    // channels, width factor and image size.)
    const F side = static_cast<F>(w->image_size);
    const F channels = 4 * static_cast<F>(w->base_channels) * static_cast<F>(w->width_factor);
    largest_tensor = std::max(b * side * side / 16 * channels, b * static_cast<F>(w->num_classes));
  } else {
    return "";
  }
  if (largest_tensor > static_cast<F>(core::limits::kMaxTensorElements)) {
    return "the largest tensor of a training step of " + std::to_string(samples) +
           " samples as one microbatch would have " + sci(static_cast<double>(largest_tensor)) +
           " elements, at most 2^44 (" + sci(static_cast<double>(
               core::limits::kMaxTensorElements)) + ") are supported";
  }
  if (iteration_flops > static_cast<F>(core::limits::kMaxIterationFlops)) {
    return "a training step of " + std::to_string(samples) + " samples would take about " +
           sci(static_cast<double>(iteration_flops)) + " FLOPs, at most 2^62 (" +
           sci(static_cast<double>(core::limits::kMaxIterationFlops)) +
           ") are supported";
  }
  return "";
}

const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> k = {"gpt", "llama", "moe", "mixtral", "nemotron", "wide_resnet"};
  return k;
}

Result<ModelConfig> parse_model_config(const core::JsonValue& value,
                                       const std::filesystem::path& base_dir) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, value.as_object());
  ModelConfig config;
  ALPASIM_ASSIGN_OR_RETURN(config.name, obj.get_string_or("name", ""));
  if (auto file = obj.optional("file")) {
    if (obj.has("builtin")) {
      return obj.value().error("expected either \"builtin\" or \"file\", got both");
    }
    ModelFileConfig f;
    ALPASIM_ASSIGN_OR_RETURN(f.path_as_written, file->as_string());
    ALPASIM_ASSIGN_OR_RETURN(f.format, obj.get_enum("format", file_formats()));
    if (f.format == "hf_config") {
      ALPASIM_ASSIGN_OR_RETURN(f.fused_attention, obj.get_bool_or("fused_attention", true));
      ALPASIM_ASSIGN_OR_RETURN(f.fused_swiglu, obj.get_bool_or("fused_swiglu", true));
      ALPASIM_ASSIGN_OR_RETURN(f.loss_kernel, parse_loss_kernel(obj));
      if (obj.has("seq_len")) {
        ALPASIM_ASSIGN_OR_RETURN(f.seq_len, obj.get_count("seq_len", L::kMaxSeqLen));
      }
    }
    std::filesystem::path p(f.path_as_written);
    f.path = p.is_absolute() ? p : base_dir / p;
    if (!std::filesystem::exists(f.path)) {
      return file->error("file not found: " + f.path.string());
    }
    config.spec = std::move(f);
  } else {
    ALPASIM_ASSIGN_OR_RETURN(core::JsonValue builtin_value,
                             obj.required("builtin", "one of " +
                                                         core::quoted_list(builtin_model_names())));
    ALPASIM_ASSIGN_OR_RETURN(std::string builtin, builtin_value.as_enum(builtin_model_names()));
    if (builtin == "wide_resnet") {
      ALPASIM_ASSIGN_OR_RETURN(config.spec, parse_wide_resnet(obj));
    } else {
      ALPASIM_ASSIGN_OR_RETURN(config.spec, parse_transformer(obj, builtin));
    }
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  if (config.name.empty()) config.name = default_name(config);
  return config;
}

core::Json model_config_to_json(const ModelConfig& config) {
  core::Json j;
  j["name"] = config.name;
  if (const auto* t = std::get_if<TransformerConfig>(&config.spec)) {
    j["builtin"] = t->builtin;
    j["num_layers"] = t->num_layers;
    j["hidden_size"] = t->hidden_size;
    j["num_heads"] = t->num_heads;
    j["num_kv_heads"] = t->num_kv_heads;
    if (t->head_dim > 0) j["head_dim"] = t->head_dim;
    if (t->kv_lora_rank > 0) {
      j["kv_lora_rank"] = t->kv_lora_rank;
      j["q_lora_rank"] = t->q_lora_rank;
      j["qk_nope_head_dim"] = t->qk_nope_head_dim;
      j["qk_rope_head_dim"] = t->qk_rope_head_dim;
      j["v_head_dim"] = t->v_head_dim;
    }
    j["seq_len"] = t->seq_len;
    j["vocab_size"] = t->vocab_size;
    j["ffn_hidden_size"] = t->ffn_hidden_size;
    j["fused_attention"] = t->fused_attention;
    j["fused_swiglu"] = t->fused_swiglu;
    write_loss_kernel(t->loss_kernel, j);
    if (t->sliding_window > 0) {
      j["sliding_window"] = t->sliding_window;
      if (t->sliding_window_pattern > 0) j["sliding_window_pattern"] = t->sliding_window_pattern;
    }
    if (t->num_experts > 0) {
      j["num_experts"] = t->num_experts;
      j["top_k"] = t->top_k;
      j["moe_layer_interval"] = t->moe_layer_interval;
      j["expert_group_size"] = t->expert_group_size;
      j["capacity_factor"] = t->capacity_factor;
      if (t->shared_expert_ffn_hidden_size > 0) j["shared_expert_ffn_hidden_size"] = t->shared_expert_ffn_hidden_size;
      if (t->first_dense_layers > 0) j["first_dense_layers"] = t->first_dense_layers;
      if (t->dense_ffn_hidden_size > 0) j["dense_ffn_hidden_size"] = t->dense_ffn_hidden_size;
    }
  } else if (const auto* w = std::get_if<WideResNetConfig>(&config.spec)) {
    j["builtin"] = "wide_resnet";
    j["num_layers"] = w->num_layers;
    j["base_channels"] = w->base_channels;
    j["width_factor"] = w->width_factor;
    j["image_size"] = w->image_size;
    j["num_classes"] = w->num_classes;
  } else {
    const auto& f = std::get<ModelFileConfig>(config.spec);
    j["file"] = f.path_as_written;
    j["format"] = f.format;
    if (f.format == "hf_config") j["fused_attention"] = f.fused_attention;
    if (f.format == "hf_config") j["fused_swiglu"] = f.fused_swiglu;
    if (f.format == "hf_config") write_loss_kernel(f.loss_kernel, j);
    if (f.format == "hf_config" && f.seq_len > 0) j["seq_len"] = f.seq_len;
  }
  return j;
}

}  // namespace alpasim::ir
