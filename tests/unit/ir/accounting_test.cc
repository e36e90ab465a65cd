// Parameter, FLOP and activation accounting against the published formulas and tables
// of validation/data (validation only: nothing here is fitted to them).
#include "ir/accounting.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "core/json_reader.h"
#include "core/text.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph_json.h"
#include "tests/unit/ir/reference_data.h"

namespace alpasim::ir {
namespace {

TransformerConfig gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                      std::int64_t seq, std::int64_t vocab) {
  TransformerConfig c;
  c.builtin = "gpt";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.seq_len = seq;
  c.vocab_size = vocab;
  c.ffn_hidden_size = 4 * hidden;
  set_architecture_defaults(c);
  return c;
}

Graph train(const TransformerConfig& c, RecomputePolicy r, std::int64_t microbatch = 1) {
  BuildOptions b;
  b.microbatch_size = microbatch;
  return derive_training_graph(build_transformer(c, b, "test"), {OptimizerKind::kAdam, r});
}

std::int64_t to_int(const std::string& s) { return std::stoll(s); }

TEST_CASE("Megatron SC'21 table 1: parameters to the printed precision, FLOPs = Eq. 3 exactly") {
  const auto rows = testing::read_csv(testing::reference_file("megatron_sc21_table1.csv"));
  REQUIRE(rows.size() == 10);
  for (const auto& row : rows) {
    CAPTURE(row.at("model"));
    const std::int64_t l = to_int(row.at("num_layers")), h = to_int(row.at("hidden_size"));
    const std::int64_t a = to_int(row.at("attention_heads")), s = to_int(row.at("seq_len"));
    const std::int64_t V = to_int(row.at("vocab_size")), B = to_int(row.at("global_batch_size"));
    const Graph g = train(gpt(l, h, a, s, V), RecomputePolicy::kFull);
    // The builder's GPT has Eq. 2's parameters plus the final layer-norm (2h), which
    // Eq. 2 omits: a difference below 1e-7 relative for every row.
    const std::int64_t params = parameter_count(g);
    CHECK(params == megatron_eq2_parameters(l, h, V, s) + 2 * h);
    // Table 1 prints billions with one decimal ("145.6"): equal after rounding.
    CHECK(core::format_fixed(static_cast<double>(params) / 1e9, 1) == row.at("params_billion"));
    // Eq. 3 counts matmul FLOPs with full recomputation (forward, recomputed forward,
    // 2x backward; the LM head is not recomputed): our graph equals it to the FLOP.
    const PhaseFlops p = phase_flops(g);
    CHECK(p.matmul_forward + p.matmul_recompute + p.matmul_backward ==
          megatron_eq3_flops_per_sequence(s, l, h, V));
    const IterationFlops f = flops_per_iteration(g, B);
    CHECK(f.hardware.value() ==
          static_cast<double>(B) * static_cast<double>(megatron_eq3_flops_per_sequence(s, l, h, V)));
    // The CSV's derived column prints 5 significant digits.
    const double printed = std::stod(row.at("derived_eq3_flops_per_iteration"));
    CHECK(std::fabs(f.hardware.value() / printed - 1) < 5e-5);
    // Model FLOPs (no recompute) are Korthikanti et al. Eq. 7 exactly.
    CHECK(p.matmul_forward + p.matmul_backward == korthikanti_eq7_model_flops_per_sequence(s, l, h, V));
  }
}

TEST_CASE("recomputation changes hardware FLOPs, never model FLOPs") {
  const std::int64_t l = 4, h = 256, a = 8, s = 128, V = 1000;
  const auto c = gpt(l, h, a, s, V);
  const PhaseFlops none = phase_flops(train(c, RecomputePolicy::kNone));
  const PhaseFlops sel = phase_flops(train(c, RecomputePolicy::kSelective));
  const PhaseFlops full = phase_flops(train(c, RecomputePolicy::kFull));
  CHECK(none.matmul_recompute == 0);
  CHECK(none.matmul_forward + none.matmul_backward ==
        korthikanti_eq7_model_flops_per_sequence(s, l, h, V));
  CHECK(sel.matmul_forward + sel.matmul_backward == none.matmul_forward + none.matmul_backward);
  // Selective recomputation re-runs QK^T and attention x V: 2·s²·h each per layer.
  CHECK(sel.matmul_recompute == 4 * s * s * h * l);
  // Korthikanti Eq. 8 (hardware FLOPs, selective) has 24·s²·L·h where re-running the
  // forward attention matmuls gives 12 + 4 = 16·s²·L·h: Eq. 8 exceeds the recomputed
  // work by exactly 8·s²·L·h (6% of this small model's FLOPs, 0.1% at GPT-3 175B shapes).
  CHECK(korthikanti_eq8_hardware_flops_per_sequence(s, l, h, V) -
            (sel.matmul_forward + sel.matmul_backward + sel.matmul_recompute) ==
        8 * s * s * l * h);
  // Full recomputation re-runs each block's forward matmuls: 24sh² + 4s²h per layer.
  CHECK(full.matmul_recompute == l * (24 * s * h * h + 4 * s * s * h));
}

TEST_CASE("activations per layer equal Korthikanti et al. (34sbh + 5as²b, 34sbh, 2sbh)") {
  const std::int64_t l = 3, h = 64, a = 4, s = 32, b = 2, V = 100;
  const auto c = gpt(l, h, a, s, V);
  for (auto r : {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    CAPTURE(recompute_policy_name(r));
    const auto bytes = activation_bytes_per_layer(train(c, r, b));
    REQUIRE(bytes.size() == static_cast<std::size_t>(l + 2));
    // Blocks are layers 1..l; fp16 activations and 1-byte dropout masks, t = 1.
    for (std::int64_t i = 1; i <= l; ++i) {
      CHECK(bytes[static_cast<std::size_t>(i)] ==
            korthikanti_activation_bytes_per_layer(s, b, h, a, 1, false, r));
    }
  }
  CHECK(korthikanti_activation_bytes_per_layer(s, b, h, a, 1, false, RecomputePolicy::kNone) ==
        34 * s * b * h + 5 * a * s * s * b);
}

TEST_CASE("fused (Flash) attention stores no s x s tensor and recomputes QK^T in the backward") {
  const std::int64_t l = 3, h = 64, a = 4, s = 32, b = 2, V = 100;
  auto c = gpt(l, h, a, s, V);
  c.fused_attention = true;
  const Graph unfused_graph = train(gpt(l, h, a, s, V), RecomputePolicy::kNone, b);
  const Graph fused_graph = train(c, RecomputePolicy::kNone, b);
  const auto fused = activation_bytes_per_layer(fused_graph);
  for (std::int64_t i = 1; i <= l; ++i) {
    // Korthikanti's 34sbh without the 5as²b of scores, softmax and its dropout mask: the
    // activations of selective recomputation, without recomputing attention x V.
    CHECK(fused[static_cast<std::size_t>(i)] == 34 * s * b * h);
  }
  // Under every policy a fused kernel stores at most what the unfused one does.
  for (auto r : {RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    CHECK(activation_bytes_per_layer(train(c, r, b)) == activation_bytes_per_layer(train(gpt(l, h, a, s, V), r, b)));
  }
  // The backward recomputes the scores (one s x s x d matmul per head) and nothing else
  // of the model's matmuls: hardware FLOPs grow by exactly 2·b·a·s²·(h/a) per layer.
  const PhaseFlops fu = phase_flops(unfused_graph);
  const PhaseFlops fs = phase_flops(fused_graph);
  CHECK(fu.matmul_recompute == 0);
  CHECK(fs.matmul_recompute == l * 2 * b * a * s * s * (h / a));
  CHECK(fs.matmul_forward == fu.matmul_forward);
  CHECK(fs.matmul_backward == fu.matmul_backward);
  // The flag travels with the graph's JSON form (graph_json) and the model config's.
  ModelConfig m{"m", c};
  CHECK(model_config_to_json(m).at("fused_attention") == true);
}

// Which tensors of a flash kernel stay on chip (no device memory), by role: a llama block
// with s = k = g = d = 2, where the context's [b, s, k, g, d] has the scores' [b, k, g, s, t]
// shape, so a test by shape would call the context and dQ on chip too.
TEST_CASE("a flash kernel keeps its s x s tensors on chip, not the context or dQ, dK, dV, whatever their shapes") {
  TransformerConfig c;
  c.builtin = "llama";
  c.num_layers = 1;
  c.hidden_size = 8;  // 4 heads of 2
  c.num_heads = 4;
  c.num_kv_heads = 2;  // 2 query heads per key/value head
  c.ffn_hidden_size = 16;
  c.seq_len = 2;
  c.vocab_size = 10;
  set_architecture_defaults(c);
  c.fused_attention = true;
  const Graph g = train(c, RecomputePolicy::kNone);
  std::map<std::string, const Op*> by_name;
  for (const Op& op : g.ops()) by_name[op.name] = &op;
  auto op = [&](const std::string& name) -> const Op& {
    const auto it = by_name.find(name);
    REQUIRE_MESSAGE(it != by_name.end(), name);
    return *it->second;
  };
  REQUIRE(op("block0/attn/context").out.shape == op("block0/attn/scores").out.shape);
  // The pricing reads the same roles: the context writes the kernel's output, the scores
  // are score-shaped.
  CHECK(flash_dot_role(g, op("block0/attn/context")).share.writes_output);
  CHECK_FALSE(flash_dot_role(g, op("block0/attn/context")).share.score_shaped);
  CHECK(flash_dot_role(g, op("block0/attn/scores")).share.score_shaped);
  for (const char* on_chip : {"block0/attn/scores", "block0/attn/softmax", "block0/attn/scores/recompute",
                              "block0/attn/softmax/recompute", "block0/attn/context/grad_lhs",
                              "block0/attn/softmax/grad_in"}) {
    CAPTURE(on_chip);
    CHECK(kept_on_chip_by_flash_attention(g, op(on_chip)));
  }
  for (const char* in_memory : {"block0/attn/context", "block0/attn/context/grad_rhs", "block0/attn/scores/grad_lhs",
                                "block0/attn/scores/grad_rhs", "block0/attn/q", "block0/attn/out"}) {
    CAPTURE(in_memory);
    CHECK_FALSE(kept_on_chip_by_flash_attention(g, op(in_memory)));
  }
  // Without a flash kernel nothing stays on chip.
  c.fused_attention = false;
  const Graph unfused = train(c, RecomputePolicy::kNone);
  for (const Op& o : unfused.ops()) CHECK_FALSE(kept_on_chip_by_flash_attention(unfused, o));
}

TEST_CASE("a fused SwiGLU stores the gate and up projections, not the SiLU, and recomputes it") {
  const std::int64_t l = 2, h = 64, a = 4, s = 32, b = 2, V = 100, ffn = 176;
  for (const char* builtin : {"llama", "mixtral"}) {
    CAPTURE(builtin);
    TransformerConfig c;
    c.builtin = builtin;
    c.num_layers = l;
    c.hidden_size = h;
    c.num_heads = a;
    c.num_kv_heads = a;
    c.seq_len = s;
    c.vocab_size = V;
    c.ffn_hidden_size = ffn;
    if (std::string(builtin) == "mixtral") {
      c.num_experts = 4;
      c.top_k = 2;
      c.moe_layer_interval = 1;
      c.capacity_factor = 1.0;
    }
    set_architecture_defaults(c);
    TransformerConfig fused = c;
    fused.fused_swiglu = true;
    for (auto r : {RecomputePolicy::kNone, RecomputePolicy::kSelective}) {
      const Graph plain = train(c, r, b);
      const Graph with = train(fused, r, b);
      const auto kept_plain = activation_bytes_per_layer(plain);
      const auto kept_fused = activation_bytes_per_layer(with);
      // Per block, exactly the SiLU's output is no longer kept: s·b·ffn fp16 values (for the
      // experts, its tokens x capacity buffer).
      std::int64_t silu_bytes = 0, recomputed = 0;
      for (const Op& o : with.ops()) {
        if (o.function != "silu" || o.layer != 1) continue;
        if (o.phase == Phase::kForward) {
          CHECK(o.fused_swiglu);
          silu_bytes += o.out.bytes();
        }
        if (o.phase == Phase::kRecompute) ++recomputed;
      }
      CHECK(recomputed == 1);
      if (std::string(builtin) == "llama") CHECK(silu_bytes == s * b * ffn * 2);
      for (std::int64_t i = 1; i <= l; ++i) {
        CHECK(kept_plain[static_cast<std::size_t>(i)] - kept_fused[static_cast<std::size_t>(i)] == silu_bytes);
      }
      // The model's matmuls are the same.
      CHECK(phase_flops(with).matmul_forward == phase_flops(plain).matmul_forward);
      CHECK(phase_flops(with).matmul_backward == phase_flops(plain).matmul_backward);
    }
    // The flag travels with the model's JSON (plan files carry it).
    CHECK(model_config_to_json(ModelConfig{"m", fused}).at("fused_swiglu") == true);
    CHECK(model_config_to_json(ModelConfig{"m", c}).at("fused_swiglu") == false);
  }
}

TEST_CASE("a sliding window: the flash kernel computes only the tiles of the band, layer by layer") {
  // Closed forms (T = 128): 8,192 keys, window 4,096: query tiles 0..31 read i + 1 key
  // tiles, tiles 32..63 read 33 (keys i·128 - 4,095 .. on): 528 + 32·33 = 1,584 of 4,096.
  CHECK(attention_tile_fraction(8192, 4096) == 1584.0 / 4096.0);
  // 1,024 keys, window 128: tile 0 reads itself, tiles 1..7 two (the previous and own).
  CHECK(attention_tile_fraction(1024, 128) == 15.0 / 64.0);
  // A window of one key (each query sees itself): the diagonal tiles only.
  CHECK(attention_tile_fraction(1024, 1) == 8.0 / 64.0);
  // No window, or one as wide as the keys: causal.
  for (const std::int64_t w : {0, 1024, 5000}) CHECK(attention_tile_fraction(1024, w) == causal_tile_fraction(1024));
  CHECK(attention_tile_fraction(0, 16) == 1.0);

  // Gemma-2 / GPT-OSS shape: every 2nd layer keeps full attention.
  const std::int64_t s = 2048, window = 512;
  auto c = gpt(4, 64, 4, s, 100);
  c.fused_attention = true;
  c.sliding_window = window;
  c.sliding_window_pattern = 2;
  const Graph g = train(c, RecomputePolicy::kNone, 1);
  const double sliding = attention_tile_fraction(s, window), causal = causal_tile_fraction(s);
  REQUIRE(sliding < causal);
  int dots_checked = 0;
  for (const Op& o : g.ops()) {
    if (!runs_in_flash_attention(g, o) || !o.is_einsum()) continue;
    // Layers 1..4 hold blocks 0..3; blocks 1 and 3 ((l + 1) % 2 == 0) attend to every key.
    const std::int64_t block = o.layer - 1;
    CAPTURE(o.name);
    CHECK(flash_attention_work_fraction(g, o) == (block % 2 == 1 ? causal : sliding));
    ++dots_checked;
  }
  CHECK(dots_checked == 4 * 7);  // forward, recomputed and backward dots of every layer
  // Written as JSON and read back: the windows come back with the ops.
  BuildOptions o;
  o.microbatch_size = 1;
  const Graph forward = build_transformer(c, o, "test");
  auto again = parse_graph_json(core::JsonValue(graph_to_json(forward), "g.json", ""), o);
  REQUIRE_MESSAGE(again.ok(), again.status().message());
  for (const Op& op : forward.ops()) CHECK(again->op(op.id).attention_window == op.attention_window);
  // Unfused attention forms the whole masked product: its scores and softmax carry the
  // window (the executors mask with it) and every tile is priced.
  c.fused_attention = false;
  const Graph unfused = train(c, RecomputePolicy::kNone, 1);
  int windowed = 0;
  for (const Op& op : unfused.ops()) {
    CHECK(flash_attention_work_fraction(unfused, op) == 1.0);
    if (op.phase == Phase::kForward && op.attention_window > 0) {
      ++windowed;
      CHECK(op.attention_window == window);
      CHECK((op.layer - 1) % 2 == 0);  // blocks 0 and 2
    }
  }
  CHECK(windowed == 2 * 2);  // scores and softmax of the two sliding blocks
  // Model FLOPs are the model's, windowed or not (Megatron's formula).
  c.fused_attention = true;
  auto full = c;
  full.sliding_window = 0;
  full.sliding_window_pattern = 0;
  std::int64_t flops = 0, flops_full = 0;
  for (const Op& op : g.ops()) flops += op.flops;
  const Graph full_graph = train(full, RecomputePolicy::kNone, 1);
  for (const Op& op : full_graph.ops()) flops_full += op.flops;
  CHECK(flops == flops_full);
}

TEST_CASE("a flash kernel moves no s x s tensor through HBM and skips the causal mask's tiles") {
  const std::int64_t l = 2, h = 64, a = 4, b = 1, V = 100;
  for (const std::int64_t s : {128, 1000, 8192}) {
    CAPTURE(s);
    auto c = gpt(l, h, a, s, V);
    c.fused_attention = true;
    const Graph fused = train(c, RecomputePolicy::kNone, b);
    const Graph unfused = train(gpt(l, h, a, s, V), RecomputePolicy::kNone, b);
    // n = ceil(s / 128) key tiles per query tile, n(n+1)/2 of n² computed.
    const double n = static_cast<double>((s + kFlashAttentionTile - 1) / kFlashAttentionTile);
    const double causal = (n + 1) / (2 * n);
    int flash_softmax = 0, flash_softmax_grad = 0, flash_dots = 0;
    int backward_dots = 0, score_shaped_dots = 0, output_dots = 0, forward_kernels = 0, backward_kernels = 0;
    for (const Op& o : fused.ops()) {
      const std::string& name = o.name;
      const bool core = name.find("/attn/scores") != std::string::npos ||
                        name.find("/attn/softmax") != std::string::npos ||
                        name.find("/attn/probs_dropout") != std::string::npos ||
                        name.find("/attn/context") != std::string::npos;
      CHECK(runs_in_flash_attention(fused, o) == core);
      if (!core) {
        CHECK(flash_attention_work_fraction(fused, o) == 1.0);
        continue;
      }
      if (o.is_einsum()) {
        ++flash_dots;
        CHECK(flash_attention_work_fraction(fused, o) == doctest::Approx(causal).epsilon(1e-12));
        const FlashDotRole role = flash_dot_role(fused, o);
        CHECK(role.in_kernel);
        CHECK(role.share.in_forward_kernel != role.share.in_backward_kernel);  // no recomputation: one kernel each
        backward_dots += role.share.in_backward_kernel ? 1 : 0;
        score_shaped_dots += role.share.score_shaped ? 1 : 0;
        output_dots += role.share.writes_output ? 1 : 0;
        CHECK_FALSE((role.share.score_shaped && role.share.writes_output));
        if (role.share.starts_kernel) {
          // One per kernel call: the scores forward and the scores recomputed in the backward.
          CHECK(name.find("/attn/scores") != std::string::npos);
          CHECK(o.phase != Phase::kBackward);
          (role.share.in_backward_kernel ? backward_kernels : forward_kernels) += 1;
        }
      } else {
        CHECK(memory_traffic_bytes(fused, o) == 0);
        CHECK(o.bytes_read + o.bytes_written > 0);  // what the unfused kernel would move
        CHECK(flash_attention_work_fraction(fused, o) == 1.0);
        if (name.find("/attn/softmax") != std::string::npos) {
          (o.phase == Phase::kBackward ? flash_softmax_grad : flash_softmax) += 1;
        }
      }
    }
    // Per layer: QK^T and attention x V forward, QK^T recomputed, dP, dV, dQ, dK; the
    // softmax forward and recomputed, its gradient.
    CHECK(flash_dots == l * 7);
    CHECK(backward_dots == l * 5);      // QK^T recomputed, dP, dV, dQ, dK
    CHECK(score_shaped_dots == l * 3);  // QK^T forward and recomputed, dP
    CHECK(output_dots == l * 4);        // P·V; dV, dQ, dK
    CHECK(forward_kernels == l);
    CHECK(backward_kernels == l);
    for (const Op& o : unfused.ops()) CHECK_FALSE(flash_dot_role(unfused, o).in_kernel);
    CHECK(flash_softmax == l * 2);
    CHECK(flash_softmax_grad == l);
    // Unfused attention streams the scores through HBM and computes every tile.
    for (const Op& o : unfused.ops()) {
      CHECK_FALSE(runs_in_flash_attention(unfused, o));
      CHECK(flash_attention_work_fraction(unfused, o) == 1.0);
      if (o.name.find("/attn/softmax") != std::string::npos && o.phase == Phase::kForward) {
        CHECK(memory_traffic_bytes(unfused, o) == 2 * b * a * s * s * 2);  // fp16 in and out
      }
    }
    // A fused graph written as JSON and read back prices as built (the rule lives in the
    // pricing, not in bytes the builder zeroed).
    const Graph forward = build_transformer(c, [&] {
      BuildOptions o;
      o.microbatch_size = b;
      return o;
    }(), "test");
    const core::Json j = graph_to_json(forward);
    BuildOptions again_options;
    again_options.microbatch_size = b;
    auto again = parse_graph_json(core::JsonValue(j, "g.json", ""), again_options);
    REQUIRE_MESSAGE(again.ok(), again.status().message());
    const Graph trained_again = derive_training_graph(*again, {OptimizerKind::kAdam, RecomputePolicy::kNone});
    std::int64_t traffic = 0, traffic_again = 0;
    for (const Op& o : fused.ops()) traffic += memory_traffic_bytes(fused, o);
    for (const Op& o : trained_again.ops()) traffic_again += memory_traffic_bytes(trained_again, o);
    CHECK(traffic_again == traffic);
  }
  CHECK(flash_attention_work_fraction(Graph{}, Op{}) == 1.0);
}

// Alpa's benchmark logs a parameter count computed by a formula (benchmark/util.py
// compute_gpt_parameter_count), not by counting the model: per layer 12H² + 11H (its
// QKV bias term is H instead of 3H, fc1's H instead of 4H, fc2's 4H instead of H: net
// -2H against the real 13H), plus V·(H + 1) for the tied embedding and an output bias,
// and no position embeddings.
std::int64_t alpa_logged_gpt_params(std::int64_t L, std::int64_t H, std::int64_t V) {
  return L * (H * (3 * H + 1) + H * (H + 1) + H * (4 * H + 1) + H * 4 * (H + 1) + H * 4) +
         V * (H + 1);
}

// benchmark/util.py compute_moe_parameter_count (mlp_factor 8, tied embedding).
std::int64_t alpa_logged_moe_params(std::int64_t L, std::int64_t H, std::int64_t V, std::int64_t E) {
  const std::int64_t f = 8;
  const std::int64_t dense = H * (3 * H + 1) + H * (H + 1) + H * (f * H + 1) + H * f * (H + 1) + H * 4;
  const std::int64_t moe = H * (3 * H + 1) + H * (H + 1) +
                           E * (H * (f * H + 1) + H * f * (H + 1)) + H * 4;
  return L / 2 * dense + L / 2 * moe + V * (H + 1);
}

core::JsonDocument alpa_models() {
  auto doc = core::read_json_file(testing::reference_file("alpa_models.json"));
  REQUIRE(doc.ok());
  return std::move(doc).value();
}

TEST_CASE("Alpa table 6 (GPT-3) builds, parameters within 0.31% of the logged counts") {
  const auto doc = alpa_models();
  for (const auto& row : doc.root.at("table6_gpt3")) {
    CAPTURE(row.at("model").get<std::string>());
    const std::int64_t L = row.at("num_layers"), H = row.at("hidden_size");
    const std::int64_t S = row.at("seq_len"), V = row.at("vocab_size");
    const double logged = row.at("param_count_billion_logged").get<double>() * 1e9;
    const Graph g = train(gpt(L, H, row.at("num_heads"), S, V), RecomputePolicy::kFull);
    const std::int64_t ours = parameter_count(g);
    // The logged number is Alpa's formula, to the printed 4 decimals of a billion...
    CHECK(std::fabs(static_cast<double>(alpa_logged_gpt_params(L, H, V)) - logged) <= 0.5e5);
    // ...and the real GPT differs from that formula by exactly: position embeddings
    // (S·H), the 2H of biases per layer the formula misses, the final layer-norm (2H),
    // minus the output bias (V) our Megatron-style head does not have.
    CHECK(ours - alpa_logged_gpt_params(L, H, V) == S * H + 2 * L * H + 2 * H - V);
    CHECK(std::fabs(static_cast<double>(ours) / logged - 1) < 0.0031);
  }
}

TEST_CASE("Alpa table 7 (GShard MoE) builds, parameters within 0.31% of the logged counts") {
  const auto doc = alpa_models();
  for (const auto& row : doc.root.at("table7_moe")) {
    CAPTURE(row.at("model").get<std::string>());
    TransformerConfig c;
    c.builtin = "moe";
    c.num_layers = row.at("num_layers");
    c.hidden_size = row.at("hidden_size");
    c.num_heads = row.at("num_heads");
    c.num_kv_heads = c.num_heads;
    c.seq_len = row.at("seq_len");
    c.vocab_size = row.at("vocab_size");
    c.ffn_hidden_size = row.at("expert_ffn_intermediate");
    c.num_experts = row.at("num_experts");
    c.top_k = 2;
    c.moe_layer_interval = 2;
    c.expert_group_size = row.at("expert_group_size");
    c.capacity_factor = 1.0;
    set_architecture_defaults(c);
    const std::int64_t L = c.num_layers, H = c.hidden_size, V = c.vocab_size, E = c.num_experts;
    const double logged = row.at("param_count_billion_logged").get<double>() * 1e9;
    const Graph g = train(c, RecomputePolicy::kNone);
    const std::int64_t ours = parameter_count(g);
    CHECK(std::fabs(static_cast<double>(alpa_logged_moe_params(L, H, V, E)) - logged) <= 0.5e5);
    // As for GPT, plus the router weights (H·E per MoE layer) the formula leaves out,
    // minus the expert biases (9H per expert) it counts but the model (Alpa's
    // FlaxPositionWiseMoELayer: wg, wi, wo) does not have.
    CHECK(ours - alpa_logged_moe_params(L, H, V, E) ==
          c.seq_len * H + 2 * L * H + (L / 2) * (H * E - 9 * H * E) + 2 * H - V);
    CHECK(std::fabs(static_cast<double>(ours) / logged - 1) < 0.0031);
  }
}

TEST_CASE("GShard MoE model FLOPs equal Alpa's compute_moe_tflops without its routing terms") {
  // GShard MoE 380M of table 7 with microbatch 2: 2·1024 tokens = one group of 2048.
  TransformerConfig c;
  c.builtin = "moe";
  c.num_layers = 8;
  c.hidden_size = 768;
  c.num_heads = 16;
  c.num_kv_heads = 16;
  c.seq_len = 1024;
  c.vocab_size = 32000;
  c.ffn_hidden_size = 8 * 768;
  c.num_experts = 8;
  c.top_k = 2;
  c.moe_layer_interval = 2;
  c.expert_group_size = 2048;
  c.capacity_factor = 1.0;
  set_architecture_defaults(c);
  const double B = 2, S = 1024, H = 768, L = 8, E = 8, V = 32000, G = 2048, f = 8;
  // benchmark/util.py compute_moe_tflops without remat (factor 3 = forward + backward).
  const double dense = B * S * H * H * (8 + 4 * f) + 4 * B * S * S * H;
  const double moe = 8 * B * S * H * H + 4 * B * S * S * H + 8 * B * S * H * H * f +
                     2 * B * S * H * E + 4 * B * S * G + 8 * B * S * H * G;
  const double alpa = 3 * (L / 2 * dense + L / 2 * moe) + 6 * B * S * H * V;
  const PhaseFlops p = phase_flops(train(c, RecomputePolicy::kNone, 2));
  // The formula also counts the routing: the dispatch/combine einsums (X = 4·B·S·G·H
  // FLOPs each way, x3) and top-2 gating (4·B·S·G, x3). Neither is a model matmul here
  // (Op::is_model_matmul): the einsums grow with the square of the token group, so
  // counting them made model FLOPs depend on the microbatch. Alpa's total is recovered by
  // adding them back.
  const double X = 4 * B * S * G * H;
  CHECK(static_cast<double>(p.matmul_forward + p.matmul_backward) ==
        alpa - L / 2 * (6 * X + 3 * 4 * B * S * G));
}

TEST_CASE("Alpa table 8 (Wide-ResNet) builds, 6 of 7 counts match to the printed digits") {
  const auto doc = alpa_models();
  for (const auto& row : doc.root.at("table8_wide_resnet")) {
    const std::string name = row.at("model");
    CAPTURE(name);
    WideResNetConfig w;
    w.num_layers = row.at("num_layers");
    w.base_channels = row.at("base_channels");
    w.width_factor = row.at("width_factor");
    w.image_size = row.at("image_size");
    w.num_classes = 1024;  // benchmark_one_case_wresnet.py: num_classes = 1024
    BuildOptions b;
    b.dtype = core::DType::kFp32;
    const Graph g = derive_training_graph(build_wide_resnet(w, b, name), {OptimizerKind::kSgd});
    const double ours = static_cast<double>(parameter_count(g));
    const double logged = row.at("param_count_billion_logged").get<double>() * 1e9;
    if (name != "Wide-ResNet 13B") {
      // Printed with 4 decimals of a billion: |difference| <= 0.5e5.
      CHECK(std::fabs(ours - logged) <= 0.5e5);
    } else {
      // The 13B row cannot match: Alpa's wide_resnet.py with 101 layers (3-4-23-3),
      // 320 channels and width 16 has 12.6334 B parameters, and no stage layout near
      // 3-4-23-3 gives 13.2671 B. The logged 13.2671 B is exactly the 50-layer model with
      // width factor 32 (13.267137984 B, checked below), so the artifact most likely
      // logged that configuration. Bound: ours is 4.8% below the logged count.
      CHECK(std::fabs(ours / logged - 1) < 0.048);
      WideResNetConfig alt = w;
      alt.num_layers = 50;
      alt.width_factor = 32;
      const double alt_params = static_cast<double>(parameter_count(build_wide_resnet(alt, b, "alt")));
      CHECK(std::fabs(alt_params - logged) <= 0.5e5);
    }
  }
}

TEST_CASE("per-layer stats of a GPT block: parameters, FLOPs, boundary bytes") {
  const std::int64_t l = 2, h = 64, a = 4, s = 32, b = 2, V = 100;
  const Graph g = train(gpt(l, h, a, s, V), RecomputePolicy::kNone, b);
  const auto stats = layer_stats(g);
  REQUIRE(stats.size() == static_cast<std::size_t>(l + 2));
  CHECK(stats[1].name == "block0");
  CHECK(stats[1].kind == "transformer");
  CHECK(stats[1].parameters == 12 * h * h + 13 * h);  // Megatron's per-layer count
  // Forward matmuls of one block: 24·b·s·h² + 4·b·s²·h; backward twice that.
  CHECK(stats[1].flops.matmul_forward == 24 * b * s * h * h + 4 * b * s * s * h);
  CHECK(stats[1].flops.matmul_backward == 2 * stats[1].flops.matmul_forward);
  // A block hands the next one its residual stream [b, s, h] in fp16.
  CHECK(stats[1].boundary_bytes == 2 * b * s * h);
  CHECK(stats[3].boundary_bytes == 0);  // the head feeds nothing
  std::int64_t params = 0;
  for (const auto& x : stats) params += x.parameters;
  CHECK(params == parameter_count(g));
}

TEST_CASE("training state bytes: Adam mixed precision is 16 bytes per parameter") {
  const StateBytes adam = training_state_bytes(1000, core::DType::kBf16, OptimizerKind::kAdam);
  CHECK(adam.parameters.value() == 2000);
  CHECK(adam.gradients.value() == 2000);
  CHECK(adam.optimizer_states.value() == 12000);  // fp32 master + m + v
  const StateBytes sgd = training_state_bytes(1000, core::DType::kFp32, OptimizerKind::kSgd);
  CHECK(sgd.optimizer_states.value() == 4000);  // one fp32 momentum, no master copy
}

}  // namespace
}  // namespace alpasim::ir
