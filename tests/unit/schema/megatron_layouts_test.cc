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
    CHECK(s.inputs.empty());
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
}

TEST_CASE("Megatron layouts: an axis of size 1 splits nothing, other architectures are unimplemented") {
  const auto& data_parallel = layouts(false, 4, 1).output;
  CHECK(data_parallel.at("block0/attn/q") == "S0RRRR");
  CHECK(data_parallel.at("block0/mlp/fc1_weight") == "RR");
  const auto& tensor_parallel = layouts(false, 1, 4).output;
  CHECK(tensor_parallel.at("block0/attn/q") == "RRS1RR");

  ir::ModelConfig llama = ir::gpt_model_config("llama", 1, 64, 4, 16, 128);
  std::get<ir::TransformerConfig>(llama.spec).builtin = "llama";
  const Layouts gpt = layouts(false);
  auto r = schema::megatron_operator_shardings(gpt.graph, llama, 4, 0, 1, 2, 2, false);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == core::StatusCode::kUnimplemented);
}
