#include "ir/model_config.h"

#include "core/text.h"

namespace alpasim::ir {
namespace {

using core::JsonObject;
using core::Result;

const std::vector<std::string>& file_formats() {
  static const std::vector<std::string> k = {"graph_json", "hf_config", "onnx"};
  return k;
}

Result<TransformerConfig> parse_transformer(JsonObject& obj, const std::string& builtin) {
  TransformerConfig c;
  c.builtin = builtin;
  const bool llama_like = builtin == "llama" || builtin == "mixtral";
  const bool moe = builtin == "moe" || builtin == "mixtral";
  ALPASIM_ASSIGN_OR_RETURN(c.num_layers, obj.get_positive_int("num_layers"));
  ALPASIM_ASSIGN_OR_RETURN(c.hidden_size, obj.get_positive_int("hidden_size"));
  ALPASIM_ASSIGN_OR_RETURN(c.num_heads, obj.get_positive_int("num_heads"));
  ALPASIM_ASSIGN_OR_RETURN(c.seq_len, obj.get_positive_int("seq_len"));
  ALPASIM_ASSIGN_OR_RETURN(c.vocab_size, obj.get_positive_int("vocab_size"));
  if (llama_like) {
    // LLaMA-style models have no conventional FFN width (e.g. 11008 for 7B): require it.
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size, obj.get_positive_int("ffn_hidden_size"));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(c.ffn_hidden_size,
                             obj.get_positive_int_or("ffn_hidden_size", 4 * c.hidden_size));
  }
  ALPASIM_ASSIGN_OR_RETURN(c.num_kv_heads, obj.get_positive_int_or("num_kv_heads", c.num_heads));
  if (c.hidden_size % c.num_heads != 0) {
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
    ALPASIM_ASSIGN_OR_RETURN(c.num_experts, obj.get_positive_int("num_experts"));
    ALPASIM_ASSIGN_OR_RETURN(c.top_k, obj.get_positive_int_or("top_k", 2));
    ALPASIM_ASSIGN_OR_RETURN(c.moe_layer_interval,
                             obj.get_positive_int_or("moe_layer_interval", builtin == "moe" ? 2 : 1));
    ALPASIM_ASSIGN_OR_RETURN(c.expert_group_size, obj.get_non_negative_int_or("expert_group_size", 0));
    ALPASIM_ASSIGN_OR_RETURN(c.capacity_factor,
                             obj.get_number_in_or("capacity_factor", 0.1, 64,
                                                  "a capacity factor in [0.1, 64]",
                                                  1.0));
    if (c.top_k > c.num_experts) {
      return obj.value().child("top_k", obj.value().raw()["top_k"])
          .error("expected at most num_experts (" + std::to_string(c.num_experts) + "), got " +
                 std::to_string(c.top_k));
    }
  }
  set_architecture_defaults(c);
  return c;
}

Result<WideResNetConfig> parse_wide_resnet(JsonObject& obj) {
  WideResNetConfig c;
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue layers, obj.required("num_layers", "50 or 101"));
  ALPASIM_ASSIGN_OR_RETURN(c.num_layers, layers.as_int(50, 101, "50 or 101"));
  if (c.num_layers != 50 && c.num_layers != 101) return layers.type_error("50 or 101");
  ALPASIM_ASSIGN_OR_RETURN(c.base_channels, obj.get_positive_int("base_channels"));
  ALPASIM_ASSIGN_OR_RETURN(c.width_factor, obj.get_positive_int("width_factor"));
  ALPASIM_ASSIGN_OR_RETURN(c.image_size, obj.get_positive_int_or("image_size", 224));
  ALPASIM_ASSIGN_OR_RETURN(c.num_classes, obj.get_positive_int_or("num_classes", 1024));
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

void set_architecture_defaults(TransformerConfig& config) {
  const bool gpt_like = config.builtin == "gpt" || config.builtin == "moe";
  config.tied_embeddings = gpt_like;
  config.qkv_bias = gpt_like;
  config.dense_bias = gpt_like;
  config.learned_positions = gpt_like;
  config.dropout = gpt_like;
}

const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> k = {"gpt", "llama", "moe", "mixtral", "wide_resnet"};
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
    j["seq_len"] = t->seq_len;
    j["vocab_size"] = t->vocab_size;
    j["ffn_hidden_size"] = t->ffn_hidden_size;
    if (t->num_experts > 0) {
      j["num_experts"] = t->num_experts;
      j["top_k"] = t->top_k;
      j["moe_layer_interval"] = t->moe_layer_interval;
      j["expert_group_size"] = t->expert_group_size;
      j["capacity_factor"] = t->capacity_factor;
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
  }
  return j;
}

}  // namespace alpasim::ir
