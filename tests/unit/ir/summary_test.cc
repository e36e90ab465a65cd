#include "ir/summary.h"

#include <doctest/doctest.h>

#include "ir/accounting.h"

namespace alpasim::ir {
namespace {

ModelConfig gpt_2_6b() {
  auto doc = core::parse_json_text(R"({"builtin": "gpt", "name": "GPT-3 2.6B", "num_layers": 32,
      "hidden_size": 2560, "num_heads": 32, "seq_len": 1024, "vocab_size": 51200})", "m.json");
  REQUIRE(doc.ok());
  return parse_model_config(core::JsonValue::root(*doc), ".").value();
}

TEST_CASE("the model summary of GPT-3 2.6B (Alpa table 6) with Adam and full recompute") {
  SummaryOptions o;
  o.global_batch_size = 1024;
  o.microbatch_size = 4;
  o.recompute = RecomputePolicy::kFull;
  auto s = summarize_model(gpt_2_6b(), o);
  REQUIRE_MESSAGE(s.ok(), s.status().to_string());
  const std::int64_t P = megatron_eq2_parameters(32, 2560, 51200, 1024) + 2 * 2560;
  CHECK(s->parameters == P);
  CHECK(s->num_microbatches == 256);
  // Eq. 3 with B = 1024 (full recompute), and Korthikanti Eq. 7 for model FLOPs.
  CHECK(s->hardware_flops_per_iteration.value() ==
        1024.0 * static_cast<double>(megatron_eq3_flops_per_sequence(1024, 32, 2560, 51200)));
  CHECK(s->model_flops_per_iteration.value() ==
        1024.0 * static_cast<double>(korthikanti_eq7_model_flops_per_sequence(1024, 32, 2560, 51200)));
  CHECK(s->all_ops_flops_per_iteration > s->hardware_flops_per_iteration);
  // fp16 weights and gradients, 12 bytes of fp32 Adam state per parameter.
  CHECK(s->parameter_bytes.value() == 2 * P);
  CHECK(s->gradient_bytes.value() == 2 * P);
  CHECK(s->optimizer_state_bytes.value() == 12 * P);
  // Full recompute keeps 2sbh per block (Korthikanti): 2·1024·4·2560 bytes.
  CHECK(s->activation_bytes_per_layer.at(1) == 2 * 1024 * 4 * 2560);
  const core::Json j = summary_to_json(*s);
  CHECK(j.at("parameters") == P);
  CHECK(j.at("recompute") == "full");
  const std::string text = summary_to_text(*s);
  CHECK(text.find("parameters                        2.65 B (" + std::to_string(P) + ")") !=
        std::string::npos);
  CHECK(text.find("FLOP (matmuls, forward + backward)") != std::string::npos);
  // Same input, same bytes.
  CHECK(core::dump_json(summary_to_json(*summarize_model(gpt_2_6b(), o))) == core::dump_json(j));
}

TEST_CASE("a global batch that is not a multiple of the microbatch is an error") {
  SummaryOptions o;
  o.global_batch_size = 10;
  o.microbatch_size = 4;
  CHECK(summarize_model(gpt_2_6b(), o).status().message() ==
        "model summary: global batch size 10 is not a positive multiple of the microbatch size 4");
}

}  // namespace
}  // namespace alpasim::ir
