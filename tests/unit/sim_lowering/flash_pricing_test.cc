// A graph's flash-attention dots, priced one by one as the simulator and the plan adapter
// price them (ir::flash_dot_role + ComputeCostModel::flash_attention_dot), against the
// attention curve of the same kernels as calibration describes them (attention_terms,
// attention_time_s): the two must agree, or the held-out kernel check of
// tests/validation/cost_model_validation_test.cc says nothing about the simulator.

#include <doctest/doctest.h>

#include "cluster/gpu_spec.h"
#include "core/attention_tiles.h"
#include "cost_model/attention_fit.h"
#include "cost_model/compute_cost.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph.h"

namespace alpasim {
namespace {

using cost_model::AttentionCurve;

cost_model::ComputeParams params_with_curves() {
  cost_model::ComputeParams p;
  for (auto& g : p.gemm) g = {0.5, 0};
  p.hbm_efficiency = 0.5;
  p.attention = {AttentionCurve{0.9, 33e-6, 250, 187}, AttentionCurve{0.8, 68e-6, 309, 2749}};
  return p;
}

struct Shape {
  std::int64_t batch, heads, kv_heads, seq, head_dim, v_head_dim;
  bool mla;
};

ir::ModelConfig model_of(const Shape& s) {
  ir::ModelConfig m = ir::gpt_model_config("flash test", 1, 1024, s.heads, s.seq, 512);
  auto& t = std::get<ir::TransformerConfig>(m.spec);
  t.builtin = "llama";
  ir::set_architecture_defaults(t);
  t.num_kv_heads = s.kv_heads;
  t.head_dim = s.head_dim;
  t.ffn_hidden_size = 2048;
  t.fused_attention = true;
  if (s.mla) {
    t.kv_lora_rank = 256;
    t.q_lora_rank = 384;
    t.qk_rope_head_dim = 64;
    t.qk_nope_head_dim = s.head_dim - 64;
    t.v_head_dim = s.v_head_dim;
  }
  return m;
}

// Forward and backward seconds of the graph's flash dots (one layer), and the rope dots'
// dK elements the graph writes once per token rather than per head (MLA's shared k_rope).
struct Priced {
  double forward_s = 0, backward_s = 0;
  int dots = 0, starts = 0;
};

Priced price_graph(const Shape& s, ir::RecomputePolicy recompute, const cost_model::ComputeCostModel& model) {
  ir::BuildOptions bo;
  bo.microbatch_size = s.batch;
  bo.dtype = core::DType::kBf16;
  const ir::Graph g = ir::derive_training_graph(ir::build_forward_graph(model_of(s), bo).value(),
                                                {ir::OptimizerKind::kAdam, recompute});
  Priced p;
  for (const ir::Op& op : g.ops()) {
    const ir::FlashDotRole role = ir::flash_dot_role(g, op);
    if (!role.in_kernel) continue;
    ++p.dots;
    const core::FlashDotShare& share = role.share;
    p.starts += share.starts_kernel ? (share.in_forward_kernel ? 1 : 0) + (share.in_backward_kernel ? 1 : 0) : 0;
    const ir::DotDims& d = op.dot_dims;
    for (const bool backward : {false, true}) {
      if (!(backward ? share.in_backward_kernel : share.in_forward_kernel)) continue;
      // The dot priced in this kernel alone.
      core::FlashDotShare one = share;
      one.in_forward_kernel = !backward;
      one.in_backward_kernel = backward;
      const double t = model.flash_attention_dot({{d.m, d.n, d.k, d.batch, core::DType::kBf16}, one}).time.value();
      (backward ? p.backward_s : p.forward_s) += t;
    }
  }
  return p;
}

double curve_s(const Shape& s, bool backward, const cost_model::ComputeCostModel& model) {
  schema::AttentionEntry e;
  e.batch = s.batch;
  e.heads = s.heads;
  e.kv_heads = s.kv_heads;
  e.seq = s.seq;
  e.head_dim = s.head_dim;
  e.v_head_dim = s.v_head_dim;
  e.dtype = core::DType::kBf16;
  return cost_model::attention_time_s(model.params().attention[backward ? 1 : 0],
                                      cost_model::attention_terms(e, backward),
                                      model.gpu().peak(core::DType::kBf16).value());
}

TEST_CASE("a graph's flash dots priced one by one equal the calibrated kernels of the same shape") {
  const cost_model::ComputeCostModel model(*cluster::find_gpu_spec("h200"), params_with_curves());
  for (const Shape& s : {Shape{2, 8, 8, 2048, 128, 128, false}, Shape{1, 16, 2, 1024, 64, 64, false}}) {
    CAPTURE(s.heads);
    CAPTURE(s.kv_heads);
    // No recomputation: one forward and one backward kernel per layer, 7 dots.
    const Priced none = price_graph(s, ir::RecomputePolicy::kNone, model);
    CHECK(none.dots == 7);
    CHECK(none.starts == 2);
    CHECK(none.forward_s == doctest::Approx(curve_s(s, false, model)).epsilon(1e-9));
    CHECK(none.backward_s == doctest::Approx(curve_s(s, true, model)).epsilon(1e-9));
    // Selective recomputation: the forward kernel runs again before the backward one.
    const Priced selective = price_graph(s, ir::RecomputePolicy::kSelective, model);
    CHECK(selective.starts == 3);
    CHECK(selective.forward_s == doctest::Approx(2 * curve_s(s, false, model)).epsilon(1e-9));
    CHECK(selective.backward_s == doctest::Approx(curve_s(s, true, model)).epsilon(1e-9));
  }
}

TEST_CASE("multi-head latent attention's two score dots are one kernel: one fixed cost, one set of scores") {
  const cost_model::ComputeCostModel model(*cluster::find_gpu_spec("h200"), params_with_curves());
  const Shape s{2, 8, 8, 1024, 192, 128, true};
  const Priced p = price_graph(s, ir::RecomputePolicy::kNone, model);
  CHECK(p.starts == 2);  // the rope part starts no kernel
  CHECK(p.forward_s == doctest::Approx(curve_s(s, false, model)).epsilon(1e-9));
  // The backward differs from the kernel's by one known term: the graph's k_rope is shared
  // by the heads, so its gradient is written once per token (b·s·64 elements), where the
  // kernel writes dK per head (b·h·s·64) and the framework sums them.
  const double peak = model.gpu().peak(core::DType::kBf16).value();
  const double per_head_rope = static_cast<double>(s.batch) * (s.heads - 1) * s.seq * 64;
  CHECK(p.backward_s == doctest::Approx(curve_s(s, true, model) - per_head_rope * 2749 / peak).epsilon(1e-9));
}

}  // namespace
}  // namespace alpasim
