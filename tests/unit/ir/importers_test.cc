// Hugging Face config.json and JSON graph importers.
#include <doctest/doctest.h>

#include "core/text.h"
#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph_json.h"
#include "ir/hf_config.h"
#include "tests/unit/ir/reference_data.h"

namespace alpasim::ir {
namespace {

std::int64_t hf_params(const std::string& file) {
  auto c = read_hf_config(testing::data_file(file), file);
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  return parameter_count(build_transformer(*c, {}, file));
}

TEST_CASE("LLaMA-2-7B config.json imports to 6.74 B parameters") {
  // 32·(4·4096² + 3·4096·11008 + 2·4096) + 2·32000·4096 + 4096 = 6,738,415,616 (untied
  // embedding and LM head, RMSNorm scales only, no biases).
  const std::int64_t p = hf_params("llama2_7b_config.json");
  CHECK(p == 6738415616);
  CHECK(core::format_fixed(static_cast<double>(p) / 1e9, 2) == "6.74");
}

TEST_CASE("Mixtral-8x7B config.json imports to 46.7 B parameters") {
  // Per layer: q, o 4096² each, k, v 4096·1024 each (8 kv heads), router 4096·8,
  // 8 experts x 3·4096·14336, 2 norms: 32 layers + 2·32000·4096 + 4096 = 46,702,792,704.
  const std::int64_t p = hf_params("mixtral_8x7b_config.json");
  CHECK(p == 46702792704);
  CHECK(core::format_fixed(static_cast<double>(p) / 1e9, 1) == "46.7");
}

TEST_CASE("GPT-2 and Qwen2 configs import with their published sizes") {
  // GPT-2 small: 124,439,808 parameters (tied wte, wpe 1024x768, biases, final LN).
  CHECK(hf_params("gpt2_config.json") == 124439808);
  // Qwen2-0.5B: tied embeddings, GQA (2 kv heads), q/k/v biases: 494,032,768.
  CHECK(hf_params("qwen2_0_5b_config.json") == 494032768);
  auto c = read_hf_config(testing::data_file("qwen2_0_5b_config.json"), "q.json", 2048);
  REQUIRE(c.ok());
  CHECK(c->seq_len == 2048);
  CHECK(c->num_kv_heads == 2);
  CHECK(c->qkv_bias);
  CHECK_FALSE(c->dense_bias);
}

TEST_CASE("head_dim: attention wider than the residual stream (Qwen3's 128 x 32 on 2048)") {
  // A Qwen3-style llama layer: q 2048 x (32·128), k and v 2048 x (4·128), o (32·128) x 2048,
  // SwiGLU 3·2048·6144, two RMSNorm scales: 4096·2048·2 + 512·2048·2 + 3·2048·6144 + 2·2048.
  auto doc = core::parse_json_text(R"({"model_type": "qwen2", "num_hidden_layers": 1,
      "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
      "intermediate_size": 6144, "vocab_size": 16, "max_position_embeddings": 64,
      "attention_bias": false, "tie_word_embeddings": true})", "q.json");
  REQUIRE(doc.ok());
  auto c = parse_hf_config(core::JsonValue::root(*doc));
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  CHECK(c->head_dim == 128);
  CHECK(c->head_width() == 128);
  const std::int64_t layer = 2 * 2048 * 4096 + 2 * 2048 * 512 + 3 * 2048 * 6144 + 2 * 2048;
  CHECK(parameter_count(build_transformer(*c, {}, "q")) == layer + 16 * 2048 + 2048);
  // Without head_dim (or with hidden / heads) the attention is 2048 wide and nothing is kept.
  TransformerConfig plain = *c;
  plain.head_dim = 0;
  CHECK(plain.head_width() == 64);
  CHECK(parameter_count(build_transformer(plain, {}, "p")) ==
        2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 6144 + 2 * 2048 + 16 * 2048 + 2048);
}

core::Status hf_error(std::string_view text) {
  auto doc = core::parse_json_text(text, "c.json");
  REQUIRE(doc.ok());
  return parse_hf_config(core::JsonValue::root(*doc)).status();
}

TEST_CASE("config.json errors name the key") {
  CHECK(hf_error(R"({"model_type": "bert"})").message() ==
        "c.json: /model_type: expected one of \"gpt2\", \"llama\", \"mistral\", \"mixtral\", \"nemotron\", "
        "\"qwen2\", \"qwen2_moe\", \"qwen3_moe\", \"deepseek_v3\", or \"kimi_k2\", got \"bert\"");
  CHECK(hf_error(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10,
      "max_position_embeddings": 8, "num_key_value_head": 2})").message() ==
        "c.json: /num_key_value_head: unknown key (neither mapped to the model nor known to be "
        "irrelevant); did you mean \"num_key_value_heads\"?");
  CHECK(hf_error(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10,
      "max_position_embeddings": 8, "mlp_bias": true})").message() ==
        "c.json: /mlp_bias: expected false (biases on MLP linears are not supported)");
  CHECK(hf_error(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
      "vocab_size": 10})").message() ==
        "c.json: /n_positions: missing required key (expected a positive integer at most 4194304)");
}

core::Result<TransformerConfig> hf_text(const std::string& extra, const std::string& type = "mistral") {
  auto doc = core::parse_json_text(R"({"model_type": ")" + type + R"(", "num_hidden_layers": 4,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10,
      "max_position_embeddings": 8192)" + extra + "}", "c.json");
  REQUIRE(doc.ok());
  return parse_hf_config(core::JsonValue::root(*doc));
}

TEST_CASE("config.json sliding windows: Mistral, Qwen2's switch, layer_types") {
  // Mistral-7B-v0.1: 4,096 on every layer; v0.2 on: null.
  auto c = hf_text(R"(, "sliding_window": 4096)");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->sliding_window == 4096);
  CHECK(c->sliding_window_pattern == 0);
  c = hf_text(R"(, "sliding_window": null)");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);
  // Absent from a Mistral config: MistralConfig's default, 4,096. Llama has no window: the
  // key is ignored, as transformers does.
  c = hf_text("");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 4096);
  c = hf_text(R"(, "sliding_window": 4096)", "llama");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);
  // Qwen2 with the switch off: the window's value is not read (0 is what some configs write).
  c = hf_text(R"(, "sliding_window": 0, "use_sliding_window": false)", "qwen2");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->sliding_window == 0);
  // On, without max_window_layers: Qwen2Config's default 28 keeps these 4 layers full...
  c = hf_text(R"(, "sliding_window": 4096, "use_sliding_window": true)", "qwen2");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);
  // ... and on a 40-layer model makes layers 28..39 slide: not a pattern modelled.
  auto doc40 = core::parse_json_text(R"({"model_type": "qwen2", "num_hidden_layers": 40,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10,
      "max_position_embeddings": 8192, "sliding_window": 4096, "use_sliding_window": true})", "c.json");
  REQUIRE(doc40.ok());
  CHECK(parse_hf_config(core::JsonValue::root(*doc40)).status().message() ==
        "c.json: /: max_window_layers absent (transformers' default 28 < num_hidden_layers 40): full attention "
        "on the first 28 layers and a sliding window after them is not a pattern this version models "
        "(sliding_window_pattern: every k-th layer full)");
  // Qwen2 slides only with use_sliding_window (false by default), from max_window_layers on.
  c = hf_text(R"(, "sliding_window": 4096, "max_window_layers": 28)", "qwen2");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);
  c = hf_text(R"(, "sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 4)", "qwen2");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);  // layers from 4 on slide: none of the 4
  c = hf_text(R"(, "sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 0)", "qwen2");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 4096);
  CHECK(hf_text(R"(, "sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 2)", "qwen2")
            .status().message() ==
        "c.json: /max_window_layers: expected 0 or at least num_hidden_layers (4): full attention on the "
        "first 2 layers and a sliding window after them is not a pattern this version models "
        "(sliding_window_pattern: every k-th layer full)");
  // layer_types (GPT-OSS, Gemma): alternating -> every 2nd layer full.
  c = hf_text(R"(, "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention", "full_attention"])");
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->sliding_window == 128);
  CHECK(c->sliding_window_pattern == 2);
  c = hf_text(R"(, "sliding_window": 128, "layer_types": ["full_attention", "full_attention",
      "full_attention", "full_attention"])");
  REQUIRE(c.ok());
  CHECK(c->sliding_window == 0);
  CHECK(hf_text(R"(, "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention",
      "full_attention", "full_attention"])").status().message() ==
        "c.json: /layer_types/2: expected \"sliding_attention\": layer types must repeat one pattern, "
        "every k-th layer full (k = 2 from the first full layer)");
  CHECK(hf_text(R"(, "sliding_window": null, "layer_types": ["sliding_attention", "sliding_attention",
      "sliding_attention", "sliding_attention"])").status().message() ==
        "c.json: /layer_types: expected \"sliding_attention\" layers only with a sliding_window, which "
        "is absent or null");
  CHECK(hf_text(R"(, "sliding_window": 128, "layer_types": ["sliding_attention"])").status().message() ==
        "c.json: /layer_types: expected one entry per layer (4), got 1");
}

TEST_CASE("Nemotron-4 15B config.json: squared-ReLU MLP, LayerNorm, untied, 15.6 B (3.1 B embedding, 12.5 B other)") {
  // transformers' NemotronConfig with Nemotron-4 15B's shape (Parmar et al. 2024, Table 1:
  // 32 layers, hidden 6,144, 48 heads, 8 KV heads, vocabulary 256,000, sequence 4,096; the
  // paper reports 3.2 B embedding and 12.5 B non-embedding parameters).
  auto doc = core::parse_json_text(R"({"model_type": "nemotron", "architectures": ["NemotronForCausalLM"],
      "vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
      "num_attention_heads": 48, "num_key_value_heads": 8, "hidden_act": "relu2",
      "max_position_embeddings": 4096, "initializer_range": 0.0134, "norm_eps": 1e-05,
      "tie_word_embeddings": false, "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
      "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false})", "nemotron4_15b.json");
  REQUIRE(doc.ok());
  auto c = parse_hf_config(core::JsonValue::root(*doc));
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->builtin == "nemotron");
  CHECK_FALSE(c->tied_embeddings);
  CHECK_FALSE(c->qkv_bias);
  CHECK_FALSE(c->dense_bias);
  CHECK_FALSE(c->learned_positions);
  const Graph g = build_transformer(*c, {}, "nemotron-4 15b");
  // Per block: Q and O 6144², K and V 6144·(8·128), fc1 and fc2 6144·24576 (no gate), two
  // LayerNorms (scale and bias); the untied embedding and head, the final LayerNorm.
  const std::int64_t h = 6144, kv = 8 * 128, f = 24576, v = 256000;
  const std::int64_t block = 2 * h * h + 2 * h * kv + 2 * h * f + 4 * h;
  const std::int64_t p = parameter_count(g);
  CHECK(p == 32 * block + 2 * v * h + 2 * h);
  CHECK(p == 15628775424);
  CHECK(core::format_fixed(static_cast<double>(2 * v * h) / 1e9, 1) == "3.1");
  CHECK(core::format_fixed(static_cast<double>(p - 2 * v * h) / 1e9, 1) == "12.5");
  int squared_relus = 0, gates = 0, layer_norms = 0;
  for (const Op& o : g.ops()) {
    if (o.function == "squared_relu") ++squared_relus;
    if (o.name.find("mlp/gate") != std::string::npos) ++gates;
    if (o.kind == OpKind::kNorm && o.norm == NormType::kLayerNorm) ++layer_norms;
  }
  CHECK(squared_relus == 32);
  CHECK(gates == 0);
  CHECK(layer_norms == 2 * 32 + 1);
  // Another activation is refused by name.
  auto silu = core::parse_json_text(R"({"model_type": "nemotron", "vocab_size": 10, "hidden_size": 64,
      "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_act": "silu",
      "max_position_embeddings": 16})", "n.json");
  REQUIRE(silu.ok());
  auto refused = parse_hf_config(core::JsonValue::root(*silu));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "n.json: /hidden_act: expected \"relu2\" (Nemotron's squared ReLU), got \"silu\"");
}

TEST_CASE("Qwen MoE config.json: shared expert and dense prefix, Qwen1.5-MoE-A2.7B 14.3 B, Qwen3-30B-A3B 30.5 B") {
  // Qwen1.5-MoE-A2.7B (qwen2_moe): per block q/k/v/o 4·2048² with q/k/v biases, 60 experts
  // x 3·2048·1408, a shared expert 3·2048·5632, the router 2048·60, two RMSNorm scales; the
  // untied embedding and head 2·151,936·2048 and the final norm. Published: 14.3 B.
  auto doc = core::parse_json_text(R"({"model_type": "qwen2_moe", "num_hidden_layers": 24,
      "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
      "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [],
      "norm_topk_prob": false, "vocab_size": 151936, "max_position_embeddings": 8192,
      "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": 32768,
      "max_window_layers": 21, "router_aux_loss_coef": 0.001})", "qwen15moe.json");
  REQUIRE(doc.ok());
  auto c = parse_hf_config(core::JsonValue::root(*doc), 4096);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->builtin == "mixtral");
  CHECK(c->num_experts == 60);
  CHECK(c->top_k == 4);
  CHECK(c->ffn_hidden_size == 1408);
  CHECK(c->shared_expert_ffn_hidden_size == 5632);
  CHECK(c->first_dense_layers == 0);
  CHECK(c->sliding_window == 0);
  CHECK(c->qkv_bias);
  const std::int64_t h = 2048;
  const std::int64_t block = 4 * h * h + 3 * h + 60 * 3 * h * 1408 + 3 * h * 5632 + h * 60 + 2 * h;
  const std::int64_t qwen15 = parameter_count(build_transformer(*c, {}, "q"));
  CHECK(qwen15 == 24 * block + 2 * 151936 * h + h);
  CHECK(core::format_fixed(static_cast<double>(qwen15) / 1e9, 1) == "14.3");

  // Qwen3-30B-A3B (qwen3_moe): q 2048 x 32·128, k and v 2048 x 4·128, o 32·128 x 2048, 128
  // experts x 3·2048·768, the router, two norms; no shared expert. Published: 30.5 B.
  doc = core::parse_json_text(R"({"model_type": "qwen3_moe", "num_hidden_layers": 48,
      "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
      "norm_topk_prob": true, "vocab_size": 151936, "max_position_embeddings": 40960,
      "tie_word_embeddings": false, "attention_bias": false})", "qwen3moe.json");
  REQUIRE(doc.ok());
  c = parse_hf_config(core::JsonValue::root(*doc), 4096);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->shared_expert_ffn_hidden_size == 0);
  CHECK_FALSE(c->qkv_bias);
  const std::int64_t block3 = h * 4096 * 2 + h * 512 * 2 + 128 * 3 * h * 768 + h * 128 + 2 * h;
  const std::int64_t qwen3 = parameter_count(build_transformer(*c, {}, "q3"));
  CHECK(qwen3 == 48 * block3 + 2 * 151936 * h + h);
  CHECK(core::format_fixed(static_cast<double>(qwen3) / 1e9, 1) == "30.5");

  // A dense prefix: mlp_only_layers [0, 1] -> two dense blocks of intermediate_size.
  auto prefixed = [](const std::string& layers, const std::string& step = "1") {
    auto d = core::parse_json_text(R"({"model_type": "qwen2_moe", "num_hidden_layers": 4,
        "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256,
        "moe_intermediate_size": 32, "num_experts": 8, "vocab_size": 10,
        "max_position_embeddings": 16, "decoder_sparse_step": )" + step + R"(, "mlp_only_layers": )" +
                                   layers + "}", "p.json");
    REQUIRE(d.ok());
    return parse_hf_config(core::JsonValue::root(*d));
  };
  auto p = prefixed("[0, 1]");
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  CHECK(p->first_dense_layers == 2);
  CHECK(p->dense_width() == 256);
  CHECK_FALSE(p->is_moe_layer(1));
  CHECK(p->is_moe_layer(2));
  CHECK(prefixed("[1]").status().message() ==
        "p.json: /mlp_only_layers: expected the first blocks (0, 1, ...: first_dense_layers), got block 1 "
        "without block 0");
  auto unordered = prefixed("[1, 0]");  // a set, as transformers reads it
  REQUIRE_MESSAGE(unordered.ok(), unordered.status().message());
  CHECK(unordered->first_dense_layers == 2);
  CHECK(prefixed("[]", "2").status().message() ==
        "p.json: /decoder_sparse_step: expected 1 (every block sparse but those mlp_only_layers names), got 2: "
        "blocks l with (l + 1) % k == 0 is not a pattern this version models");
}

TEST_CASE("DeepSeek-V3 config.json: multi-head latent attention, 256 experts, 3 dense blocks, 671.0 B") {
  // Per block, MLA: q_down 7168·1536, its RMSNorm 1536, q up (nope 128 + rope 64 per head)
  // 1536·128·192, kv_down 7168·512, the shared rotary key 7168·64, its norm 512, k up
  // 512·128·128, v up 512·128·128, out 128·128·7168. Dense blocks 0-2: SwiGLU 3·7168·18432;
  // MoE blocks 3-60: 256 experts x 3·7168·2048, one shared expert 3·7168·2048, the router
  // 7168·256. Two RMSNorm scales per block; untied embedding and head 2·129,280·7168; the
  // final norm. DeepSeek's published 671 B main-model parameters (the MTP module's 14 B are
  // left out, as here).
  auto doc = core::parse_json_text(R"({"model_type": "deepseek_v3", "num_hidden_layers": 61,
      "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
      "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
      "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
      "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
      "tie_word_embeddings": false, "num_nextn_predict_layers": 1, "routed_scaling_factor": 2.5,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
      "norm_topk_prob": true, "aux_loss_alpha": 0.001, "seq_aux": true, "ep_size": 1,
      "attention_bias": false})", "dsv3.json");
  REQUIRE(doc.ok());
  auto c = parse_hf_config(core::JsonValue::root(*doc), 4096);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK(c->kv_lora_rank == 512);
  CHECK(c->q_lora_rank == 1536);
  CHECK(c->shared_expert_ffn_hidden_size == 2048);
  CHECK(c->first_dense_layers == 3);
  CHECK(c->dense_width() == 18432);
  const std::int64_t H = 7168, Rq = 1536, Rkv = 512, N = 128, Dn = 128, Dr = 64, Dv = 128, V = 129280;
  const std::int64_t attention = H * Rq + Rq + Rq * N * (Dn + Dr) + H * Rkv + H * Dr + Rkv + Rkv * N * Dn +
                                 Rkv * N * Dv + N * Dv * H;
  CHECK(attention == 187107328);
  const std::int64_t dense = 3 * H * 18432, moe = 256 * 3 * H * 2048 + 3 * H * 2048 + H * 256;
  BuildOptions o;
  o.microbatch_size = 1;
  const Graph g = build_transformer(*c, o, "dsv3");
  const std::int64_t params = parameter_count(g);
  CHECK(params == 3 * (attention + dense + 2 * H) + 58 * (attention + moe + 2 * H) + 2 * V * H + H);
  CHECK(core::format_fixed(static_cast<double>(params) / 1e9, 1) == "671.0");
  // The score GEMMs' multiply-adds: per head, 4,096 x 4,096 over qk_nope + qk_rope = 192.
  std::int64_t score_flops = 0;
  for (const Op& op : g.ops()) {
    if (op.layer == 1 && (op.name.find("/attn/scores") != std::string::npos) && op.is_einsum()) score_flops += op.flops;
  }
  CHECK(score_flops == 2 * N * 4096 * 4096 * (Dn + Dr));
  // Errors name the key.
  auto bad = core::parse_json_text(R"({"model_type": "deepseek_v3", "num_hidden_layers": 4,
      "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_attention_heads": 4,
      "n_routed_experts": 8, "moe_layer_freq": 2, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
      "qk_rope_head_dim": 4, "v_head_dim": 8, "vocab_size": 10, "max_position_embeddings": 16})", "b.json");
  REQUIRE(bad.ok());
  CHECK(parse_hf_config(core::JsonValue::root(*bad)).status().message() ==
        "b.json: /moe_layer_freq: expected 1 (every block after the dense ones is MoE), got 2");
  // Absent keys take DeepseekV3Config's defaults; a null q_lora_rank means queries straight
  // from the input (H x N x (Dn + Dr) weights, no latent); "kimi_k2" reads the same way.
  auto small = [](const std::string& extra, const std::string& type = "deepseek_v3") {
    auto d = core::parse_json_text(R"({"model_type": ")" + type + R"(", "num_hidden_layers": 4,
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_attention_heads": 4,
        "n_routed_experts": 8, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
        "v_head_dim": 8, "vocab_size": 10, "max_position_embeddings": 16)" + extra + "}", "s.json");
    REQUIRE(d.ok());
    return parse_hf_config(core::JsonValue::root(*d));
  };
  auto defaults = small("");
  REQUIRE_MESSAGE(defaults.ok(), defaults.status().message());
  CHECK(defaults->q_lora_rank == 1536);
  CHECK(defaults->first_dense_layers == 3);
  CHECK(defaults->shared_expert_ffn_hidden_size == 32);
  auto direct = small(R"(, "q_lora_rank": null, "first_k_dense_replace": 0, "n_shared_experts": 0)", "kimi_k2");
  REQUIRE_MESSAGE(direct.ok(), direct.status().message());
  // Routing a token to more experts than there are: an error naming the config's own key.
  CHECK(small(R"(, "num_experts_per_tok": 16)").status().message() ==
        "s.json: /: expected num_experts_per_tok <= n_routed_experts, got 16 > 8");
  CHECK(direct->q_lora_rank == 0);
  std::int64_t q_weights = 0;
  const Graph direct_graph = build_transformer(*direct, {}, "d");
  for (const Op& op : direct_graph.ops()) {
    if (op.kind == OpKind::kParameter && op.layer == 1 && op.name.find("/attn/q_") != std::string::npos) {
      q_weights += op.out.num_elements();
    }
  }
  CHECK(q_weights == 64 * 4 * (8 + 4));
  CHECK(small(R"(, "attention_bias": true)").status().message() ==
        "s.json: /: expected attention_bias false: biases on MLA's projections are not modelled");
}

TEST_CASE("a builtin graph written as JSON reads back to the same graph") {
  TransformerConfig c;
  c.builtin = "mixtral";
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.seq_len = 16;
  c.vocab_size = 50;
  c.ffn_hidden_size = 96;
  c.num_experts = 4;
  c.top_k = 2;
  c.moe_layer_interval = 1;
  c.capacity_factor = 1.0;
  set_architecture_defaults(c);
  const Graph g = build_transformer(c, {}, "tiny");
  const std::string text = core::dump_json(graph_to_json(g));
  auto doc = core::parse_json_text(text, "tiny.json");
  REQUIRE(doc.ok());
  auto back = parse_graph_json(core::JsonValue::root(*doc), {});
  REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  REQUIRE(back->size() == g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const Op& a = g.op(static_cast<OpId>(i));
    const Op& b = back->op(static_cast<OpId>(i));
    CAPTURE(a.name);
    CHECK(a.kind == b.kind);
    CHECK(a.inputs == b.inputs);
    CHECK(a.out == b.out);
    CHECK(a.flops == b.flops);
    CHECK(a.layer == b.layer);
    CHECK(a.no_grad_inputs == b.no_grad_inputs);
    CHECK(a.selective_recompute == b.selective_recompute);
  }
  CHECK(back->meta.loss == g.meta.loss);
  // Text is stable: writing the read-back graph gives the same bytes.
  CHECK(core::dump_json(graph_to_json(*back)) == text);
  const Graph t1 = derive_training_graph(g, {OptimizerKind::kAdam, RecomputePolicy::kSelective});
  const Graph t2 = derive_training_graph(*back, {OptimizerKind::kAdam, RecomputePolicy::kSelective});
  CHECK(phase_flops(t1).matmul_recompute == phase_flops(t2).matmul_recompute);
  CHECK(activation_bytes_per_layer(t1) == activation_bytes_per_layer(t2));
}

core::Status graph_error(std::string_view text) {
  auto doc = core::parse_json_text(text, "g.json");
  REQUIRE(doc.ok());
  return parse_graph_json(core::JsonValue::root(*doc), {}).status();
}

TEST_CASE("JSON graph errors name the file, the pointer, what was expected and found") {
  const std::string head = R"({"format": "alpa-sim-graph", "version": 1, "ops": [
      {"name": "x", "op": "input", "shape": [4, 8]},
      {"name": "w", "op": "parameter", "shape": [8, 16]},)";
  CHECK(graph_error(head + R"({"name": "h", "op": "dot", "einsum": "bh,hf->bf", "inputs": ["x", "w2"]}]})")
            .message() == "g.json: /ops/2/inputs/1: expected the name of an earlier op, got the string \"w2\"");
  CHECK(graph_error(head + R"({"name": "h", "op": "dot", "einsum": "bh,kf->bf", "inputs": ["x", "w"]}]})")
            .message() ==
        "g.json: /ops/2/einsum: expected an einsum of two operands with one letter per "
        "dimension, each letter in at least two terms, got the string \"bh,kf->bf\"");
  CHECK(graph_error(head + R"({"name": "h", "op": "dot", "einsum": "bh,fh->bf", "inputs": ["x", "w"]}]})")
            .message() == "g.json: /ops/2/einsum: expected dimension 'h' to agree, got 8 and 16");
  CHECK(graph_error(head + R"({"name": "h", "op": "matmul", "inputs": ["x", "w"]}]})").message() ==
        "g.json: /ops/2/op: expected one of \"parameter\", \"input\", \"dot\", \"moe_dispatch\", "
        "\"moe_combine\", \"conv2d\", \"elementwise\", \"reduce\", \"softmax\", \"layer_norm\", "
        "\"rms_norm\", \"batch_norm\", \"embedding\", \"max_pool\", \"moe_gate\", \"reshape\", or "
        "\"cross_entropy\", got \"matmul\"");
  CHECK(graph_error(head + R"({"name": "h", "op": "dot", "einsum": "bh,hf->bf", "inputs": ["x", "w"]}]})")
            .message() == "g.json: /: expected a \"cross_entropy\" op or a top-level \"loss\" naming "
                          "a scalar op (training needs a loss), got neither");
  CHECK(graph_error(head + R"({"name": "x", "op": "softmax", "inputs": ["x"]}]})").message() ==
        "g.json: /ops/2/name: duplicate op name \"x\"");
}

}  // namespace
}  // namespace alpasim::ir

namespace alpasim::ir {
namespace {

TEST_CASE("the example of docs/model_graph.md loads through a scenario model block") {
  ModelConfig m;
  m.name = "mlp";
  m.spec = ModelFileConfig{"graph_json", testing::data_file("mlp_graph.json"), "mlp_graph.json"};
  auto g = build_forward_graph(m, {});
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  CHECK(parameter_count(*g) == 1024 * 4096 + 4096 + 4096 * 10);
  CHECK(g->meta.samples_per_microbatch == 8);
  CHECK(g->layers.size() == 2);
  const Graph t = derive_training_graph(*g, {OptimizerKind::kAdam, RecomputePolicy::kFull});
  // Full recompute re-runs both "block" layers' forward dots (2·8·1024·4096 + 2·8·4096·10).
  CHECK(phase_flops(t).matmul_recompute == 2 * 8 * 1024 * 4096 + 2 * 8 * 4096 * 10);
}

}  // namespace
}  // namespace alpasim::ir
