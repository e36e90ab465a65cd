// Megatron-LM's tensor parallelism written as per-operator layouts (schema/megatron_layouts.h):
// the column- and row-parallel weights, the head-split attention, the vocabulary-parallel
// embedding and head, and sequence parallelism, checked operator by operator.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "ir/autodiff.h"
#include "ir/builders.h"
#include "schema/megatron_layouts.h"

using namespace alpasim;

namespace {

// A 2-block GPT (hidden 64, 4 heads, sequence 16, vocabulary 128) at 4 sequences per
// microbatch: dimension sizes all differ, so each rule's dimension is unambiguous.
struct Layouts {
  ir::Graph graph;
  std::map<std::string, std::string> output;  // op -> output spec
  std::map<std::string, std::string> inputs;  // op -> its listed input specs, " x "-joined
};
Layouts layouts(bool sequence_parallel, std::int64_t dp = 2, std::int64_t tp = 2) {
  Layouts l;
  const ir::ModelConfig model = ir::gpt_model_config("gpt", 2, 64, 4, 16, 128);
  ir::BuildOptions bo;
  bo.microbatch_size = 4;
  ir::TrainingOptions to;
  to.recompute = ir::RecomputePolicy::kFull;
  l.graph = ir::derive_training_graph(ir::build_forward_graph(model, bo).value(), to);
  auto sh = schema::megatron_operator_shardings(l.graph, model, 4, 0, l.graph.num_layers(), dp, tp,
                                                sequence_parallel);
  REQUIRE_MESSAGE(sh.ok(), sh.status().message());
  for (const auto& s : sh.value()) {
    // Names may repeat (two gradient sums of one block); both get the same layout.
    const auto [it, fresh] = l.output.emplace(s.op, s.output.to_string());
    if (!fresh) CHECK(it->second == s.output.to_string());
    // Input specs are listed only for the backward GEMMs that reduce-scatter onto the
    // sequence (next test).
    if (!sequence_parallel) CHECK(s.inputs.empty());
    std::string in;
    for (const auto& spec : s.inputs) in += (in.empty() ? "" : " x ") + spec.to_string();
    if (!in.empty()) l.inputs.emplace(s.op, in);
  }
  return l;
}

}  // namespace

TEST_CASE("Megatron layouts: column- then row-parallel linears, heads split, batch over the data-parallel rows") {
  const Layouts l = layouts(false);
  const auto& o = l.output;
  // Weights: whole along the data-parallel axis; QKV and fc1 split their outputs, the out
  // projection and fc2 their inputs (Shoeybi et al. 2019, fig. 3).
  CHECK(o.at("block0/attn/q_weight") == "RS1RR");  // [hidden, heads, 1, head_dim]
  CHECK(o.at("block0/attn/k_weight") == "RS1R");   // [hidden, heads, head_dim]
  CHECK(o.at("block0/attn/out_weight") == "S1RRR");
  CHECK(o.at("block0/mlp/fc1_weight") == "RS1");
  CHECK(o.at("block0/mlp/fc2_weight") == "S1R");
  CHECK(o.at("block0/mlp/fc2_bias") == "R");
  CHECK(o.at("block0/attn_norm_scale") == "R");
  CHECK(o.at("embedding/word_embeddings") == "S1R");  // vocabulary-parallel
  // Activations: the batch over axis 0; inside attention the heads, inside the MLP the
  // FFN dimension over axis 1; the residual stream whole along axis 1.
  CHECK(o.at("block0/attn_norm") == "S0RR");
  CHECK(o.at("block0/attn/q") == "S0RS1RR");
  CHECK(o.at("block0/attn/scores") == "S0S1RRR");
  CHECK(o.at("block0/attn/softmax/recompute") == "S0S1RRR");
  CHECK(o.at("block0/attn/out") == "S0RR");
  CHECK(o.at("block0/mlp/gelu") == "S0RS1");
  CHECK(o.at("block0/mlp/fc1/grad_lhs") == "S0RR");  // the backward all-reduce
  CHECK(o.at("head/logits") == "S0RS1");
  // Weight gradients and updates follow the weights; the position lookup has no batch.
  CHECK(o.count("block0/mlp/fc1/grad_rhs") == 0);
  CHECK(o.count("block0/mlp/fc1_weight/update") == 0);
  CHECK(o.count("embedding/position_lookup") == 0);
}

TEST_CASE("Megatron layouts: sequence parallelism splits the residual stream's sequence") {
  const auto& o = layouts(true).output;
  CHECK(o.at("block0/attn_norm") == "S0S1R");
  CHECK(o.at("block0/attn/out") == "S0S1R");  // reduce-scatter instead of all-reduce
  CHECK(o.at("block0/mlp/dropout") == "S0S1R");
  CHECK(o.at("block0/attn/q") == "S0RS1RR");  // unchanged inside attention
  CHECK(o.at("block0/mlp/gelu") == "S0RS1");
  // The column-parallel linears' input gradients read the split gradient and weight as
  // written and reduce-scatter onto the sequence (Megatron's one reduce-scatter for Q, K and V
  // together needs each of them to be one); nothing else lists inputs.
  const Layouts sp = layouts(true);
  CHECK(sp.output.at("block0/attn/q/grad_lhs") == "S0S1R");
  CHECK(sp.inputs.at("block0/attn/q/grad_lhs") == "S0RS1RR x RS1RR");
  CHECK(sp.inputs.at("block0/attn/k/grad_lhs") == "S0RS1R x RS1R");
  CHECK(sp.inputs.at("block0/mlp/fc1/grad_lhs") == "S0RS1 x RS1");
  CHECK(sp.inputs.count("block0/attn/out/grad_lhs") == 0);  // row-parallel: gathers first
  for (const auto& [op, in] : sp.inputs) {
    CAPTURE(op);
    CHECK(op.find("/grad_lhs") != std::string::npos);
  }
}

TEST_CASE("Megatron layouts: an axis of size 1 splits nothing, other architectures are unimplemented") {
  const auto& data_parallel = layouts(false, 4, 1).output;
  CHECK(data_parallel.at("block0/attn/q") == "S0RRRR");
  CHECK(data_parallel.at("block0/mlp/fc1_weight") == "RR");
  const auto& tensor_parallel = layouts(false, 1, 4).output;
  CHECK(tensor_parallel.at("block0/attn/q") == "RRS1RR");

  ir::ModelConfig mixtral = ir::gpt_model_config("mixtral", 1, 64, 4, 16, 128);
  std::get<ir::TransformerConfig>(mixtral.spec).builtin = "mixtral";
  std::get<ir::TransformerConfig>(mixtral.spec).num_experts = 4;
  const Layouts gpt = layouts(false);
  auto r = schema::megatron_operator_shardings(gpt.graph, mixtral, 4, 0, 1, 2, 2, false);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == core::StatusCode::kUnimplemented);
}

TEST_CASE("Megatron layouts: LLaMA splits query groups, SwiGLU's FFN dimension and the untied head") {
  // 2 blocks, hidden 64, 8 query heads in 4 groups (GQA), FFN 96, sequence 16, vocabulary
  // 128, 4 sequences per microbatch: every rule's dimension is unambiguous.
  ir::TransformerConfig t;
  t.builtin = "llama";
  t.num_layers = 2;
  t.hidden_size = 64;
  t.num_heads = 8;
  t.num_kv_heads = 4;
  t.ffn_hidden_size = 96;
  t.seq_len = 16;
  t.vocab_size = 128;
  ir::set_architecture_defaults(t);
  t.fused_swiglu = true;
  const ir::ModelConfig model{"llama", t};
  ir::BuildOptions bo;
  bo.microbatch_size = 4;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(model, bo).value(), ir::TrainingOptions{});
  auto sh = schema::megatron_operator_shardings(g, model, 4, 0, g.num_layers(), 2, 2, true);
  REQUIRE_MESSAGE(sh.ok(), sh.status().message());
  std::map<std::string, std::string> o;
  for (const auto& s : sh.value()) o.emplace(s.op, s.output.to_string());
  // Query groups: the key/value heads' dimension, their queries with them.
  CHECK(o.at("block0/attn/q_weight") == "RS1RR");  // [hidden, 4 groups, 2 queries, head_dim]
  CHECK(o.at("block0/attn/k_weight") == "RS1R");   // [hidden, 4 groups, head_dim]
  CHECK(o.at("block0/attn/q_rotary") == "S0RS1RR");
  CHECK(o.at("block0/attn/scores") == "S0S1RRR");  // [batch, groups, queries, s, t]
  CHECK(o.at("block0/attn/out_weight") == "S1RRR");
  // SwiGLU: gate and up column-parallel, down row-parallel; the (recomputed) SiLU split.
  CHECK(o.at("block0/mlp/gate_weight") == "RS1");
  CHECK(o.at("block0/mlp/up_weight") == "RS1");
  CHECK(o.at("block0/mlp/down_weight") == "S1R");
  CHECK(o.at("block0/mlp/silu/recompute") == "S0RS1");
  CHECK(o.at("block0/mlp/swiglu") == "S0RS1");
  // RMSNorm and the residual stream: sequence-parallel; the untied head: vocabulary-parallel.
  CHECK(o.at("block0/attn_norm_scale") == "R");
  CHECK(o.at("block0/attn_norm") == "S0S1R");
  CHECK(o.at("embedding/word_embeddings") == "S1R");
  CHECK(o.at("head/logits") == "S0RS1");
  // A tp that does not divide the key/value heads cannot be written (Megatron-Core refuses it).
  auto bad = schema::megatron_operator_shardings(g, model, 4, 0, g.num_layers(), 1, 8, false);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == core::StatusCode::kUnimplemented);
  CHECK(bad.status().message() == "Megatron layouts: 4 key/value heads do not split over tp = 8");
}
