#include "ir/model_config.h"

#include <doctest/doctest.h>

#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph_json.h"

namespace alpasim::ir {
namespace {

core::Result<ModelConfig> parse_text(std::string_view text) {
  auto doc = core::parse_json_text(text, "m.json");
  REQUIRE(doc.ok());
  return parse_model_config(core::JsonValue::root(*doc), ".");
}

TEST_CASE("the fixed GPT spelling parses with documented defaults") {
  ModelConfig m = parse_text(R"({"builtin": "gpt", "num_layers": 96, "hidden_size": 12288,
      "num_heads": 96, "seq_len": 2048, "vocab_size": 51200})").value();
  const auto& t = std::get<TransformerConfig>(m.spec);
  CHECK(t.ffn_hidden_size == 4 * 12288);
  CHECK(t.num_kv_heads == 96);
  CHECK(t.num_experts == 0);
  CHECK(m.name == "gpt L96 H12288");
  // Fused kernels unless the scenario says otherwise (docs/scenario.md).
  CHECK(t.fused_attention);
  CHECK(t.fused_swiglu);
  ModelConfig plain = parse_text(R"({"builtin": "llama", "num_layers": 2, "hidden_size": 64,
      "num_heads": 4, "seq_len": 8, "vocab_size": 10, "ffn_hidden_size": 96,
      "fused_swiglu": false})").value();
  CHECK_FALSE(std::get<TransformerConfig>(plain.spec).fused_swiglu);
}

TEST_CASE("model configs round-trip") {
  for (const char* text :
       {R"({"builtin": "moe", "num_layers": 16, "hidden_size": 1024, "num_heads": 16,
            "seq_len": 1024, "vocab_size": 32000, "num_experts": 16, "expert_group_size": 2048,
            "ffn_hidden_size": 8192})",
        R"({"builtin": "wide_resnet", "num_layers": 50, "base_channels": 320, "width_factor": 2})",
        R"({"builtin": "nemotron", "name": "Nemotron-4 15B", "num_layers": 32, "hidden_size": 6144,
            "num_heads": 48, "num_kv_heads": 8, "seq_len": 4096, "vocab_size": 256000})",
        R"({"builtin": "llama", "name": "7B", "num_layers": 32, "hidden_size": 4096,
            "num_heads": 32, "seq_len": 4096, "vocab_size": 32000, "ffn_hidden_size": 11008})",
        R"({"builtin": "mixtral", "name": "deepseek-moe-like", "num_layers": 4, "hidden_size": 256,
            "num_heads": 4, "seq_len": 128, "vocab_size": 1000, "ffn_hidden_size": 64,
            "num_experts": 16, "top_k": 4, "shared_expert_ffn_hidden_size": 128,
            "first_dense_layers": 1, "dense_ffn_hidden_size": 512})",
        R"({"builtin": "mixtral", "name": "mla", "num_layers": 2, "hidden_size": 256, "num_heads": 4,
            "seq_len": 128, "vocab_size": 1000, "ffn_hidden_size": 64, "num_experts": 4,
            "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16})",
        R"({"builtin": "llama", "name": "local-global", "num_layers": 6, "hidden_size": 512,
            "num_heads": 8, "seq_len": 8192, "vocab_size": 1000, "ffn_hidden_size": 1024,
            "sliding_window": 1024, "sliding_window_pattern": 3})"}) {
    ModelConfig m = parse_text(text).value();
    auto doc = core::parse_json_text(model_config_to_json(m).dump(), "again.json").value();
    ModelConfig again = parse_model_config(core::JsonValue::root(doc), ".").value();
    CHECK(model_config_to_json(again) == model_config_to_json(m));
  }
}

// The loss's bytes per logit as Megatron-Core's and Transformer Engine's kernels move them
// (docs/scenario.md "Loss kernel"), in the graph and after a graph-file round trip.
TEST_CASE("the loss kernel keys set the cross entropy's bytes per logit, forward and backward") {
  const std::string base = R"({"builtin": "llama", "num_layers": 1, "hidden_size": 64, "num_heads": 4,
      "seq_len": 16, "vocab_size": 1000, "ffn_hidden_size": 96)";
  struct Case {
    std::string keys;
    LossKernel kernel;
    core::DType dtype;
    // bytes per logit: forward read, written; backward read, written
    std::int64_t forward_read, forward_written, backward_read, backward_written;
  };
  const std::string native = R"(, "cross_entropy_loss_fusion": true)";
  const std::string te = R"(, "cross_entropy_loss_fusion": true, "cross_entropy_fusion_impl": "te")";
  const Case cases[] = {
      // copy r2 w4, max r4, subtract/exp/divide r4 w4 each, sum r4 | scale r4 w4, cast r4 w2
      {"", LossKernel::kUnfused, core::DType::kBf16, 22, 16, 8, 6},
      // copy+max r2 w4, subtract+exp r4 w4, sum r4, divide r4 w4 | as unfused
      {native, LossKernel::kNativeFused, core::DType::kBf16, 14, 12, 8, 6},
      // two reads, the gradient written in place | scaled in place
      {te, LossKernel::kTeFused, core::DType::kBf16, 4, 2, 2, 2},
      // fp32 logits: no copy, no cast back
      {"", LossKernel::kUnfused, core::DType::kFp32, 20, 12, 4, 4},
      {native, LossKernel::kNativeFused, core::DType::kFp32, 16, 8, 4, 4},
      {te, LossKernel::kTeFused, core::DType::kFp32, 8, 4, 4, 4},
  };
  for (const Case& c : cases) {
    CAPTURE(c.keys);
    CAPTURE(core::dtype_name(c.dtype));
    const ModelConfig m = parse_text(base + c.keys + "}").value();
    CHECK(std::get<TransformerConfig>(m.spec).loss_kernel == c.kernel);
    // The keys survive a plan file's model block.
    auto doc = core::parse_json_text(model_config_to_json(m).dump(), "again.json").value();
    CHECK(std::get<TransformerConfig>(parse_model_config(core::JsonValue::root(doc), ".").value().spec).loss_kernel ==
          c.kernel);
    BuildOptions options;
    options.microbatch_size = 2;
    options.dtype = c.dtype;
    const Graph forward = build_forward_graph(m, options).value();
    const auto again = parse_graph_json(core::JsonValue(graph_to_json(forward), "g.json", ""), options);
    REQUIRE(again.ok());
    for (const Graph* f : {&forward, &again.value()}) {
      const Graph g = derive_training_graph(*f, {});
      const Op* ce = nullptr;
      const Op* grad = nullptr;
      for (const Op& o : g.ops()) {
        if (o.function == "softmax_cross_entropy") ce = &o;
        if (o.function == "softmax_cross_entropy_grad") grad = &o;
      }
      REQUIRE(ce != nullptr);
      REQUIRE(grad != nullptr);
      CHECK(ce->loss_kernel == c.kernel);
      const std::int64_t logits = 2 * 16 * 1000;
      const std::int64_t positions = 2 * 16;
      const std::int64_t per_position = positions * core::dtype_bytes(c.dtype);  // a loss or its dy
      // + the labels read (4-byte ids); + the per-position loss written
      CHECK(ce->bytes_read == c.forward_read * logits + 4 * positions);
      CHECK(ce->bytes_written == c.forward_written * logits + per_position);
      // + dy and the labels read
      CHECK(grad->bytes_read == c.backward_read * logits + per_position + 4 * positions);
      CHECK(grad->bytes_written == c.backward_written * logits);
    }
  }
  // A graph file's cross_entropy op takes the same keys.
  const auto graph_file = [](const std::string& keys) {
    const std::string text = R"({"format": "alpa-sim-graph", "version": 1, "name": "head", "dtype": "bf16",
        "batch_size": 2, "layers": [{"name": "head", "kind": "epilogue"}], "ops": [
        {"name": "x", "op": "input", "shape": [2, 8, 16]},
        {"name": "w", "op": "parameter", "shape": [16, 100]},
        {"name": "logits", "op": "dot", "einsum": "bsh,hv->bsv", "inputs": ["x", "w"]},
        {"name": "labels", "op": "input", "shape": [2, 8], "index": true},
        {"name": "loss", "op": "cross_entropy", "inputs": ["logits", "labels"])" + keys + "}]}";
    auto doc = core::parse_json_text(text, "g.json");
    REQUIRE(doc.ok());
    BuildOptions options;
    options.microbatch_size = 2;
    options.dtype = core::DType::kBf16;
    return parse_graph_json(core::JsonValue::root(*doc), options);
  };
  for (const auto& [keys, kernel] : {std::pair<std::string, LossKernel>{"", LossKernel::kUnfused},
                                     {native, LossKernel::kNativeFused}, {te, LossKernel::kTeFused}}) {
    CAPTURE(keys);
    const auto g = graph_file(keys);
    REQUIRE(g.ok());
    bool found = false;
    for (const Op& o : g.value().ops()) {
      if (o.function != "softmax_cross_entropy") continue;
      found = true;
      CHECK(o.loss_kernel == kernel);
    }
    CHECK(found);
  }
  const auto alone = graph_file(R"(, "cross_entropy_fusion_impl": "te")");
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().message().find("cross_entropy_loss_fusion") != std::string::npos);
  // The implementation is Megatron-Core's only with the fusion: alone it is an error.
  auto bad = parse_text(base + R"(, "cross_entropy_fusion_impl": "te"})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("/cross_entropy_fusion_impl") != std::string::npos);
  CHECK(bad.status().message().find("cross_entropy_loss_fusion") != std::string::npos);
}

TEST_CASE("a sliding window reaches the layers its pattern names") {
  ModelConfig m = parse_text(R"({"builtin": "llama", "num_layers": 6, "hidden_size": 512,
      "num_heads": 8, "seq_len": 8192, "vocab_size": 1000, "ffn_hidden_size": 1024,
      "sliding_window": 1024, "sliding_window_pattern": 3})").value();
  const auto& t = std::get<TransformerConfig>(m.spec);
  // Every 3rd layer (2 and 5, 0-based) keeps full attention: Gemma 3's five-to-one with k = 6.
  const std::vector<std::int64_t> expected = {1024, 1024, 0, 1024, 1024, 0};
  for (std::int64_t l = 0; l < 6; ++l) CHECK(t.attention_window_of(l) == expected[static_cast<std::size_t>(l)]);
  // Written and read back, the keys survive (not only equal JSON on both sides).
  auto doc = core::parse_json_text(model_config_to_json(m).dump(), "again.json").value();
  const ModelConfig again = parse_model_config(core::JsonValue::root(doc), ".").value();
  const auto& ta = std::get<TransformerConfig>(again.spec);
  CHECK(ta.sliding_window == 1024);
  CHECK(ta.sliding_window_pattern == 3);
  TransformerConfig every = t;
  every.sliding_window_pattern = 0;
  for (std::int64_t l = 0; l < 6; ++l) CHECK(every.attention_window_of(l) == 1024);
  every.sliding_window = 0;
  for (std::int64_t l = 0; l < 6; ++l) CHECK(every.attention_window_of(l) == 0);
}

TEST_CASE("shared experts and a dense prefix: DeepSeek-MoE's block shapes, parameters in closed form") {
  // 4 blocks of hidden 256: block 0 dense (SwiGLU 3·256·512), blocks 1-3 MoE: 16 experts x
  // 3·256·64, a shared expert 3·256·128, the router 256·16. Attention 4·256², two RMSNorm
  // scales per block; untied embedding and head 2·1000·256, the final norm.
  ModelConfig m = parse_text(R"({"builtin": "mixtral", "num_layers": 4, "hidden_size": 256,
      "num_heads": 4, "seq_len": 128, "vocab_size": 1000, "ffn_hidden_size": 64,
      "num_experts": 16, "top_k": 4, "shared_expert_ffn_hidden_size": 128,
      "first_dense_layers": 1, "dense_ffn_hidden_size": 512})").value();
  const auto& t = std::get<TransformerConfig>(m.spec);
  CHECK_FALSE(t.is_moe_layer(0));
  CHECK(t.is_moe_layer(1));
  CHECK(t.is_moe_layer(3));
  const std::int64_t h = 256, attention = 4 * h * h, norms = 2 * h;
  const std::int64_t dense = attention + 3 * h * 512 + norms;
  const std::int64_t moe = attention + 16 * 3 * h * 64 + 3 * h * 128 + h * 16 + norms;
  BuildOptions o;
  const Graph g = build_transformer(t, o, "m");
  CHECK(parameter_count(g) == dense + 3 * moe + 2 * 1000 * h + h);
  auto doc = core::parse_json_text(model_config_to_json(m).dump(), "again.json").value();
  const auto again = std::get<TransformerConfig>(parse_model_config(core::JsonValue::root(doc), ".").value().spec);
  CHECK(again.shared_expert_ffn_hidden_size == 128);
  CHECK(again.first_dense_layers == 1);
  CHECK(again.dense_ffn_hidden_size == 512);
  // The shared expert is a dense MLP of each MoE block, in none of the dense one.
  std::vector<int> shared(5, 0);
  for (const Op& op : g.ops()) {
    if (op.name.find("/moe/shared_") != std::string::npos) ++shared[static_cast<std::size_t>(op.layer)];
  }
  CHECK(shared == std::vector<int>{0, 0, 8, 8, 8});  // per MoE block: 3 weights, 3 GEMMs, SiLU and product
  // GShard's alternation with a dense prefix: blocks l >= 2 with l % 2 == 0.
  TransformerConfig gshard = t;
  gshard.moe_layer_interval = 2;
  gshard.first_dense_layers = 2;
  CHECK_FALSE(gshard.is_moe_layer(0));
  CHECK_FALSE(gshard.is_moe_layer(1));
  CHECK(gshard.is_moe_layer(2));
  CHECK_FALSE(gshard.is_moe_layer(3));
}

TEST_CASE("bad model blocks give exact errors") {
  CHECK(parse_text(R"({"builtin": "gtp"})").status().message() ==
        "m.json: /builtin: expected one of \"gpt\", \"llama\", \"moe\", \"mixtral\", \"nemotron\", or "
        "\"wide_resnet\", got \"gtp\"; did you mean \"gpt\"?");
  CHECK(parse_text(R"({"builtin": "gpt", "num_layers": 2, "hidden_size": 100, "num_heads": 3,
      "seq_len": 8, "vocab_size": 10})").status().message() ==
        "m.json: /num_heads: expected a divisor of hidden_size 100, got 3");
  CHECK(parse_text(R"({"builtin": "llama", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "seq_len": 8, "vocab_size": 10})").status().message() ==
        "m.json: /ffn_hidden_size: missing required key (expected a positive integer at most 1048576)");
  CHECK(parse_text(R"({"builtin": "wide_resnet", "num_layers": 51, "base_channels": 1,
      "width_factor": 1})").status().message() ==
        "m.json: /num_layers: expected 50 or 101, got 51");
  CHECK(parse_text(R"({"builtin": "gpt", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "seq_len": 8, "vocab_size": 10, "sliding_window": 4, "sliding_window_pattern": 1})").status().message() ==
        "m.json: /sliding_window_pattern: expected k >= 2 (every k-th layer keeps full attention; omit "
        "the key for every layer), got 1");
  CHECK(parse_text(R"({"builtin": "gpt", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "seq_len": 8, "vocab_size": 10, "sliding_window_pattern": 2})").status().message() ==
        "m.json: /sliding_window_pattern: expected only with \"sliding_window\", which is absent or 0");
  CHECK(parse_text(R"({"builtin": "mixtral", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "seq_len": 8, "vocab_size": 10, "ffn_hidden_size": 32, "num_experts": 4,
      "first_dense_layers": 2})").status().message() ==
        "m.json: /first_dense_layers: expected a count that leaves at least one MoE block (num_layers 2, "
        "moe_layer_interval 1), got 2");
  CHECK(parse_text(R"({"builtin": "llama", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "num_kv_heads": 2, "seq_len": 8, "vocab_size": 10, "ffn_hidden_size": 32, "kv_lora_rank": 8,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4})").status().message() ==
        "m.json: /num_kv_heads: expected num_heads (4) with multi-head latent attention (kv_lora_rank), got 2");
  CHECK(parse_text(R"({"builtin": "llama", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
      "seq_len": 8, "vocab_size": 10, "ffn_hidden_size": 32, "kv_lora_rank": 8,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 3, "v_head_dim": 4})").status().message() ==
        "m.json: /qk_rope_head_dim: expected an even width (rotary pairs), got 3");
  CHECK(parse_text(R"({"file": "nope.onnx", "format": "onnx"})").status().message() ==
        "m.json: /file: file not found: ./nope.onnx");
}

}  // namespace
}  // namespace alpasim::ir
