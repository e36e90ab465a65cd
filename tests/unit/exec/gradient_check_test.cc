// Gradients of the CPU backend's kernels against central finite differences of its forward
// kernels, in double precision (run_cpu_kernel_f64: the same kernel source as the fp32
// backend, a template). The backward graph comes from ir::derive_training_graph, so a wrong
// rule in ir/autodiff or in exec/cpu/cpu_kernels fails here; the sharded-vs-unsharded and
// CUDA-vs-CPU tests compare the kernels only with themselves.
//
// Check: for each parameter, the analytic gradient (the training graph's backward ops) and
// (L(p + h·e_i) − L(p − h·e_i)) / 2h at up to kMaxElements elements i, for h = 1e-6 and
// h/8 (the nearer one counts, see check_gradients). h = 1e-6 (values are
// O(0.1-1)): truncation error ~h²·|L'''| ≈ 1e-12 and rounding ~1e-16·|L|/h ≈ 1e-10, so
// 1e-6 · max|gradient| + 1e-8 leaves a margin of ~100 while a wrong sign, factor or
// transpose moves a gradient by O(1) relative. Piecewise ops (relu, max-pool, MoE routing)
// are checked where no kink lies within h of the tiny inputs (deterministic values).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exec/cpu/cpu_kernels.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "tests/support/numeric_compare.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec {
namespace {

using ir::Graph;
using ir::OpId;
using ir::OpKind;

constexpr double kStep = 1e-6;
constexpr ::alpasim::testing::Tolerance kTol{1e-6, 1e-8};
constexpr std::size_t kMaxElements = 6;

/// Replaces the kernel of ops whose function it names (the "broken rule" test); returns
/// false to use the backend's kernel.
using KernelOverride = std::function<bool(const ir::Op&, const std::vector<cpu::TensorViewF64>&, cpu::TensorViewF64)>;

/// Runs a training graph (forward and backward ops; not the optimizer) in fp64 with the CPU
/// kernels. Parameters and inputs come from the kernels' own deterministic initialisation,
/// except parameter values set in `params`.
class Interpreter {
 public:
  explicit Interpreter(Graph g) : g_(std::move(g)) {
    index_range_ = cpu::index_ranges(g_);  // as exec/lower.cc
    values_.resize(g_.size());
    run(false);  // initial parameter values
    for (OpId p : g_.parameters()) params_[p] = values_[static_cast<std::size_t>(p)];
  }

  const Graph& graph() const { return g_; }
  std::map<OpId, std::vector<double>>& params() { return params_; }
  /// The values of op `id` after the last run().
  const std::vector<double>& values(OpId id) const { return values_[static_cast<std::size_t>(id)]; }
  void set_override(KernelOverride o) { override_ = std::move(o); }

  /// Evaluates the forward ops (and the backward ops when `backward`); returns the loss.
  double run(bool backward) {
    for (const ir::Op& o : g_.ops()) {
      if (o.kind == OpKind::kOptimizer) continue;
      if (!backward && o.phase != ir::Phase::kForward) continue;
      auto& out = values_[static_cast<std::size_t>(o.id)];
      out.assign(static_cast<std::size_t>(o.out.num_elements()), 0.0);
      if (o.kind == OpKind::kParameter && params_.count(o.id)) {
        out = params_.at(o.id);
        continue;
      }
      std::vector<cpu::TensorViewF64> in;
      for (OpId i : o.inputs) {
        auto& v = values_[static_cast<std::size_t>(i)];
        in.push_back({v.data(), &g_.op(i).out.shape, static_cast<std::int64_t>(v.size())});
      }
      const cpu::TensorViewF64 view{out.data(), &o.out.shape, static_cast<std::int64_t>(out.size())};
      if (override_ && override_(o, in, view)) continue;
      cpu::KernelContext ctx;
      ctx.index_range = index_range_[static_cast<std::size_t>(o.id)];
      const core::Status st = cpu::run_cpu_kernel_f64(g_, o, in, view, ctx);
      REQUIRE_MESSAGE(st.ok(), st.message());
    }
    return values_[static_cast<std::size_t>(g_.meta.loss)][0];
  }

  /// Parameter -> its gradient after run(true) (the optimizer op's second input).
  std::map<OpId, std::vector<double>> gradients() const {
    std::map<OpId, std::vector<double>> out;
    for (const ir::Op& o : g_.ops()) {
      if (o.kind == OpKind::kOptimizer) out[o.inputs[0]] = values_[static_cast<std::size_t>(o.inputs[1])];
    }
    return out;
  }

 private:
  Graph g_;
  std::vector<std::int64_t> index_range_;
  std::vector<std::vector<double>> values_;
  std::map<OpId, std::vector<double>> params_;
  KernelOverride override_;
};

struct CheckResult {
  int parameters = 0;     ///< parameters checked
  int mismatches = 0;     ///< of them, gradients that differ from the finite differences
  std::string first_failure;
};

/// The analytic gradients of every parameter against central differences of the loss.
CheckResult check_gradients(const Graph& forward, const KernelOverride& override_rule = nullptr) {
  ir::TrainingOptions t;
  Interpreter it(ir::derive_training_graph(forward, t));
  if (override_rule) it.set_override(override_rule);
  const double loss = it.run(true);
  REQUIRE(std::isfinite(loss));
  const auto grads = it.gradients();
  // The quotients' rounding noise is ~ (the loss's rounding error) / h, the same for every
  // parameter of a model: the absolute part of the tolerance scales with the model's
  // largest gradient, so tensors with tiny gradients (Wide-ResNet's, behind batch-norms of 2
  // samples) are held to the noise floor, not below it.
  double max_grad = 0;
  for (const auto& [p, g] : grads) {
    for (double v : g) max_grad = std::max(max_grad, std::abs(v));
  }
  const ::alpasim::testing::Tolerance tol{kTol.rel, std::max(kTol.abs, kTol.rel * max_grad)};
  CheckResult r;
  for (OpId p : it.graph().parameters()) {
    REQUIRE_MESSAGE(grads.count(p), it.graph().op(p).name << " has no gradient");
    const std::vector<double>& g = grads.at(p);
    std::vector<double>& w = it.params().at(p);
    REQUIRE(g.size() == w.size());
    // Evenly spaced elements, first and last included.
    const std::size_t n = std::min(kMaxElements, w.size());
    std::vector<double> analytic, numeric;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = n == 1 ? 0 : k * (w.size() - 1) / (n - 1);
      const double saved = w[i];
      auto central = [&](double h) {
        w[i] = saved + h;
        const double up = it.run(false);
        w[i] = saved - h;
        const double down = it.run(false);
        w[i] = saved;
        return (up - down) / (2 * h);
      };
      // Two steps; the one nearer the analytic value counts: a kink (relu, max-pool) within
      // reach of the larger step spoils only that quotient, while a wrong rule is off for both.
      const double d1 = central(kStep), d2 = central(kStep / 8);
      analytic.push_back(g[i]);
      numeric.push_back(std::abs(d1 - g[i]) <= std::abs(d2 - g[i]) ? d1 : d2);
    }
    ++r.parameters;
    const auto c = ::alpasim::testing::compare_values(analytic, numeric, tol);
    if (!c.ok) {
      ++r.mismatches;
      if (r.first_failure.empty()) r.first_failure = it.graph().op(p).name + ": " + c.message;
    }
  }
  return r;
}

void expect_gradients_match(const Graph& forward) {
  const CheckResult r = check_gradients(forward);
  CHECK(r.parameters > 0);
  CHECK_MESSAGE(r.mismatches == 0, r.first_failure);
  MESSAGE(forward.meta.model_name << ": " << r.parameters << " parameters checked");
}

// ---- tiny graphs, one operator kind each ----

/// A graph under construction: parameters are the operands (so they get gradients), and
/// the loss is sum(y · probe) with a fixed random probe of y's shape, so dL/dy is a
/// non-uniform tensor (a transposed or permuted gradient does not cancel out).
struct Tiny {
  Graph g;
  explicit Tiny(const std::string& name) {
    g.meta.model_name = name;
    g.meta.dtype = core::DType::kFp32;
    g.layers.push_back({"layer", "block"});
  }
  OpId param(const std::string& name, std::vector<std::int64_t> shape) { return g.add_parameter(name, std::move(shape), 0); }
  /// The attention core on parameters q, k, v of [batch 2, seq 4, heads 2, dim 3]: scores
  /// -> softmax (causal: cpu_kernels.cc reads the name) -> context. {scores, softmax, context}.
  std::array<OpId, 3> attention_core() {
    OpId q = param("q", {2, 4, 2, 3});
    OpId k = param("k", {2, 4, 2, 3});
    OpId v = param("v", {2, 4, 2, 3});
    OpId s = g.add_dot("attn/scores", "bskd,btkd->bkst", q, k, 0);
    OpId p = g.add_softmax("attn/softmax", s, 0);
    return {s, p, g.add_dot("attn/context", "bkst,btkd->bskd", p, v, 0)};
  }
  Graph finish(OpId y) {
    const auto& shape = g.op(y).out.shape;
    const OpId probe = g.add_input("probe", shape, false, 0);
    const OpId prod = g.add_elementwise("probe_mul", "mul", {y, probe}, 1, 0);
    g.meta.loss = g.add_reduce("loss", "sum", {prod}, {1}, 1, 0);
    return std::move(g);
  }
};

TEST_CASE("gradient check: dot with bias, and einsums with batch and two contracting dims") {
  {
    Tiny t("dot");
    OpId x = t.param("x", {3, 4});
    OpId y = t.g.add_dot("dot", "bh,hf->bf", x, t.param("w", {4, 5}), 0, t.param("bias", {5}));
    expect_gradients_match(t.finish(y));
  }
  {
    Tiny t("einsum");
    OpId a = t.param("a", {2, 3, 2, 4});
    OpId y = t.g.add_dot("einsum", "bskd,kdh->bsh", a, t.param("w", {2, 4, 3}), 0);
    expect_gradients_match(t.finish(y));
  }
  {
    Tiny t("batched einsum");
    OpId q = t.param("q", {2, 3, 2, 4});
    OpId y = t.g.add_dot("scores", "bskd,btkd->bkst", q, t.param("k", {2, 3, 2, 4}), 0);
    expect_gradients_match(t.finish(y));
  }
}

TEST_CASE("gradient check: convolutions (3x3 stride 1, 3x3 stride 2, 1x1)") {
  for (const auto& [k, stride] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 1}, {3, 2}, {1, 1}}) {
    Tiny t("conv k" + std::to_string(k) + " s" + std::to_string(stride));
    OpId x = t.param("x", {2, 5, 5, 3});
    OpId y = t.g.add_conv2d("conv", x, t.param("filter", {k, k, 3, 2}), stride, 0);
    expect_gradients_match(t.finish(y));
  }
}

TEST_CASE("gradient check: layer norm, RMS norm, batch norm") {
  {
    Tiny t("layer norm");
    OpId x = t.param("x", {3, 6});
    expect_gradients_match(t.finish(t.g.add_norm("ln", ir::NormType::kLayerNorm, x, t.param("ln_scale", {6}), t.param("ln_bias", {6}), 0)));
  }
  {
    Tiny t("rms norm");
    OpId x = t.param("x", {3, 6});
    expect_gradients_match(t.finish(t.g.add_norm("rms", ir::NormType::kRmsNorm, x, t.param("rms_scale", {6}), ir::kNoOp, 0)));
  }
  {
    Tiny t("batch norm");
    OpId x = t.param("x", {2, 3, 3, 4});
    expect_gradients_match(t.finish(t.g.add_norm("bn", ir::NormType::kBatchNorm, x, t.param("bn_scale", {4}), t.param("bn_bias", {4}), 0)));
  }
}

TEST_CASE("gradient check: softmax, causal attention core, GELU, ReLU, squared ReLU, max-pool, reshape") {
  {
    Tiny t("softmax");
    expect_gradients_match(t.finish(t.g.add_softmax("softmax", t.param("x", {3, 5}), 0)));
  }
  {
    // scores -> causal softmax (the name makes it causal: cpu_kernels.cc) -> context.
    Tiny t("attention");
    expect_gradients_match(t.finish(t.attention_core()[2]));
  }
  {
    // The same core with a sliding window of 2 keys (ir::Op::attention_window on the fused
    // scores and softmax): the forward masks every key but the query's latest two, and the
    // gradients still match the finite differences.
    Tiny t("sliding-window attention");
    const auto [s, p, context] = t.attention_core();
    for (OpId id : {s, p}) {
      t.g.mutable_op(id).fused_attention = true;
      t.g.mutable_op(id).attention_window = 2;
    }
    const Graph g = t.finish(context);
    Interpreter forward(ir::derive_training_graph(g, {}));
    forward.run(false);
    const auto& probs = forward.values(p);  // [b, k, s, t]: rows of 4 keys
    REQUIRE(probs.size() == 2 * 2 * 4 * 4);
    for (std::size_t row = 0; row < probs.size() / 4; ++row) {
      const std::size_t query = row % 4;
      double sum = 0;
      for (std::size_t key = 0; key < 4; ++key) {
        const double x = probs[row * 4 + key];
        CAPTURE(row);
        CAPTURE(key);
        if (key > query || key + 2 <= query) {
          CHECK(x == 0.0);  // in the future, or older than the window
        } else {
          CHECK(x > 0.0);
        }
        sum += x;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    }
    expect_gradients_match(g);
  }
  {
    Tiny t("gelu");
    expect_gradients_match(t.finish(t.g.add_elementwise("gelu", "gelu", {t.param("x", {4, 5})}, 8, 0)));
  }
  {
    Tiny t("relu");
    expect_gradients_match(t.finish(t.g.add_elementwise("relu", "relu", {t.param("x", {4, 5})}, 1, 0)));
  }
  {
    // Nemotron-4's MLP activation, relu(x)^2: its kernel's gradient 2·relu(x)·dy.
    Tiny t("squared_relu");
    expect_gradients_match(
        t.finish(t.g.add_elementwise("squared_relu", "squared_relu", {t.param("x", {4, 5})}, 2, 0)));
  }
  {
    Tiny t("max-pool");
    expect_gradients_match(t.finish(t.g.add_max_pool("pool", t.param("x", {2, 4, 4, 2}), 3, 2, 0)));
  }
  {
    Tiny t("reshape, add with broadcast");
    OpId r = t.g.add_elementwise("reshape", "reshape", {t.param("x", {2, 6})}, 0, 0, {2, 3, 2});
    expect_gradients_match(t.finish(t.g.add_elementwise("add", "add", {r, t.param("b", {3, 2})}, 1, 0)));
  }
}

TEST_CASE("gradient check: embedding (gather / scatter-add) and the cross-entropy loss") {
  Graph g;
  g.meta.model_name = "embedding + loss";
  g.meta.dtype = core::DType::kFp32;
  g.layers.push_back({"layer", "block"});
  OpId ids = g.add_input("ids", {2, 3}, true, 0);
  OpId emb = g.add_embedding("embed", g.add_parameter("table", {5, 4}, 0), ids, 0);
  OpId logits = g.add_dot("logits", "bsh,hv->bsv", emb, g.add_parameter("head", {4, 7}, 0), 0);
  OpId flat = g.add_elementwise("flatten", "reshape", {logits}, 0, 0, {6, 7});
  OpId labels = g.add_input("labels", {6}, true, 0);
  OpId ce = g.add_reduce("cross_entropy", "softmax_cross_entropy", {flat, labels}, {6}, 5, 0);
  g.mutable_op(ce).no_grad_inputs = 1u << 1;
  g.meta.loss = g.add_reduce("loss", "mean", {ce}, {1}, 1, 0);
  expect_gradients_match(g);
}

TEST_CASE("gradient check: rotary embedding and SwiGLU (LLaMA)") {
  {
    Tiny t("rotary");
    expect_gradients_match(t.finish(t.g.add_elementwise("rotary", "rotary", {t.param("q", {2, 4, 2, 6})}, 3, 0)));
  }
  {
    Tiny t("swiglu");
    OpId x = t.param("x", {3, 4});
    OpId gate = t.g.add_dot("gate", "bh,hf->bf", x, t.param("w_gate", {4, 5}), 0);
    OpId up = t.g.add_dot("up", "bh,hf->bf", x, t.param("w_up", {4, 5}), 0);
    OpId act = t.g.add_elementwise("silu", "silu", {gate}, 4, 0);
    expect_gradients_match(t.finish(t.g.add_elementwise("swiglu", "mul", {act, up}, 1, 0)));
  }
}

TEST_CASE("gradient check: MoE router softmax, top-2 gate, dispatch and combine") {
  // 1 group of 6 tokens, 3 experts, capacity 3 (so the second choices overflow).
  Tiny t("moe");
  OpId x = t.param("x", {1, 6, 4});
  OpId logits = t.g.add_dot("router", "xyh,he->xye", x, t.param("router_weight", {4, 3}), 0);
  OpId probs = t.g.add_softmax("router_softmax", logits, 0);
  OpId combine = t.g.add_moe_gate("gate", probs, 2, 3, 0);
  OpId dispatched = t.g.add_einsum("dispatch", OpKind::kMoeDispatch, "xyec,xyh->exch", combine, x, ir::kNoOp, 0);
  t.g.mutable_op(dispatched).no_grad_inputs = 1u << 0;  // GShard's dispatch mask, as ir/builders.cc
  OpId expert = t.g.add_dot("expert", "exch,ehf->excf", dispatched, t.param("expert_weight", {3, 4, 4}), 0);
  OpId out = t.g.add_einsum("combine", OpKind::kMoeCombine, "xyec,excf->xyf", combine, expert, ir::kNoOp, 0);
  expect_gradients_match(t.finish(out));
}

// ---- the checker catches a wrong backward rule ----

/// gelu_grad as cpu_kernels.cc computes it, with the sign of the second term flipped when
/// `broken`: dy · (0.5 (1 + t) ± 0.5 x (1 − t²) k (1 + 3c x²)).
KernelOverride gelu_grad_rule(bool broken) {
  return [broken](const ir::Op& op, const std::vector<cpu::TensorViewF64>& in, cpu::TensorViewF64 out) {
    if (op.function != "gelu_grad") return false;
    const double k = static_cast<double>(0.7978845608f), c = static_cast<double>(0.044715f);
    for (std::int64_t j = 0; j < out.size; ++j) {
      const double x = in[1].data[j];
      const double t = std::tanh(k * (x + c * x * x * x));
      const double second = 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
      out.data[j] = in[0].data[j] * (0.5 * (1 + t) + (broken ? -second : second));
    }
    return true;
  };
}

TEST_CASE("gradient check: a backward rule with a flipped sign is caught") {
  Tiny t("gelu mlp");
  OpId x = t.param("x", {3, 4});
  OpId h = t.g.add_dot("fc", "bh,hf->bf", x, t.param("w", {4, 5}), 0);
  const Graph g = t.finish(t.g.add_elementwise("gelu", "gelu", {h}, 8, 0));
  // The copy of the rule as written passes (so the failure below is the sign's) ...
  const CheckResult copy = check_gradients(g, gelu_grad_rule(false));
  CHECK(copy.parameters == 2);
  CHECK_MESSAGE(copy.mismatches == 0, copy.first_failure);
  // ... and with the sign flipped every parameter behind the GELU is wrong.
  const CheckResult broken = check_gradients(g, gelu_grad_rule(true));
  CHECK(broken.parameters == 2);
  CHECK(broken.mismatches == 2);
  MESSAGE("flipped sign: " << broken.first_failure);
}

// ---- whole tiny models of each family ----

Graph tiny_model(ir::TransformerConfig t, const std::string& name) {
  ir::BuildOptions o;
  o.microbatch_size = 2;
  o.dtype = core::DType::kFp32;
  return ir::build_transformer(t, o, name);
}

using ::alpasim::testing::tiny_transformer;

TEST_CASE("gradient check: whole tiny models (GPT, LLaMA, GShard MoE, Mixtral)") {
  for (const std::string builtin : {"gpt", "llama", "moe", "mixtral"}) {
    CAPTURE(builtin);
    expect_gradients_match(tiny_model(tiny_transformer(builtin), "tiny " + builtin));
  }
}

TEST_CASE("gradient check: a tiny DeepSeek-style model (MLA, shared expert, dense first block, sliding window)") {
  // Multi-head latent attention (q and kv latents with their RMSNorms, a rotary key part
  // shared by the heads, scores as the sum of two GEMMs), a shared expert beside the routed
  // ones, a dense first block of its own width, and (second pass) a sliding window of 2
  // keys on the fused attention: every parameter's gradient against finite differences.
  for (const bool fused : {false, true}) {
    CAPTURE(fused);
    ir::TransformerConfig t = tiny_transformer("mixtral");
    t.num_layers = 3;
    t.kv_lora_rank = 4;
    t.q_lora_rank = 6;
    t.qk_nope_head_dim = 3;
    t.qk_rope_head_dim = 2;
    t.v_head_dim = 5;
    t.shared_expert_ffn_hidden_size = 7;
    t.first_dense_layers = 1;
    t.dense_ffn_hidden_size = 10;
    t.fused_attention = fused;
    if (fused) t.sliding_window = 2;
    const Graph forward = tiny_model(t, "tiny deepseek");
    // Not vacuous: the latent projections, the shared rotary key, the two score GEMMs and
    // the shared expert are in every block, the routed experts only in blocks 1 and 2.
    int rope_scores = 0, shared = 0, experts = 0;
    for (const ir::Op& op : forward.ops()) {
      rope_scores += op.name.find("attn/scores_rope") != std::string::npos ? 1 : 0;
      shared += op.name.find("moe/shared_down") != std::string::npos && op.is_einsum() ? 1 : 0;
      experts += op.name.find("moe/expert_down") != std::string::npos && op.is_einsum() ? 1 : 0;
    }
    CHECK(rope_scores == 3);
    CHECK(shared == 2);
    CHECK(experts == 2);
    expect_gradients_match(forward);
  }
}

TEST_CASE("gradient check: fused (Flash) attention recomputes the scores in the backward") {
  for (const std::string builtin : {"gpt", "llama"}) {
    CAPTURE(builtin);
    ir::TransformerConfig t = tiny_transformer(builtin);
    t.fused_attention = true;
    const Graph forward = tiny_model(t, "tiny fused " + builtin);
    // Not vacuous: the training graph recomputes the scores and softmax of every block
    // with no recomputation policy, and attention x V's backward reads the recomputed copy.
    const Graph training = ir::derive_training_graph(forward, ir::TrainingOptions{});
    int recomputed_scores = 0;
    for (const ir::Op& op : training.ops()) {
      if (op.phase == ir::Phase::kRecompute && op.name.find("attn/scores") != std::string::npos) {
        ++recomputed_scores;
      }
    }
    CHECK(recomputed_scores == t.num_layers);
    expect_gradients_match(forward);
  }
}

TEST_CASE("gradient check: a fused SwiGLU recomputes the SiLU in the backward") {
  for (const std::string builtin : {"llama", "mixtral"}) {
    CAPTURE(builtin);
    ir::TransformerConfig t = tiny_transformer(builtin);
    t.fused_swiglu = true;
    t.fused_attention = true;  // both recompute regions in one block
    const Graph forward = tiny_model(t, "tiny fused-SwiGLU " + builtin);
    // Not vacuous: every block's SiLU is recomputed and its consumer's backward reads the copy.
    const Graph training = ir::derive_training_graph(forward, ir::TrainingOptions{});
    int recomputed_silu = 0;
    for (const ir::Op& op : training.ops()) {
      if (op.phase == ir::Phase::kRecompute && op.function == "silu") ++recomputed_silu;
    }
    CHECK(recomputed_silu == t.num_layers);
    expect_gradients_match(forward);
  }
}

TEST_CASE("gradient check: whole tiny Wide-ResNet") {
  ir::BuildOptions o;
  o.microbatch_size = 2;
  o.dtype = core::DType::kFp32;
  auto g = ir::build_forward_graph(::alpasim::testing::tiny_wide_resnet(), o);
  REQUIRE_MESSAGE(g.ok(), g.status().message());
  expect_gradients_match(*g);
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

/// The training graph's gradients computed with the CPU backend's fp32 kernels (the same
/// kernel source as `it`'s fp64 ones) from `it`'s parameter values rounded to fp32.
std::map<OpId, std::vector<double>> fp32_gradients(Interpreter& it) {
  const Graph& g = it.graph();
  std::vector<std::vector<float>> values(g.size());
  const std::vector<std::int64_t> index_range = cpu::index_ranges(g);
  std::map<OpId, std::vector<double>> out;
  for (const ir::Op& o : g.ops()) {
    auto& v = values[static_cast<std::size_t>(o.id)];
    v.assign(static_cast<std::size_t>(o.out.num_elements()), 0.0f);
    if (o.kind == OpKind::kOptimizer) {
      const auto& grad = values[static_cast<std::size_t>(o.inputs[1])];
      out[o.inputs[0]] = {grad.begin(), grad.end()};
      continue;
    }
    if (o.kind == OpKind::kParameter && it.params().count(o.id)) {
      const auto& p = it.params().at(o.id);
      v.assign(p.begin(), p.end());
      continue;
    }
    std::vector<cpu::TensorView> in;
    for (OpId i : o.inputs) {
      auto& x = values[static_cast<std::size_t>(i)];
      in.push_back({x.data(), &g.op(i).out.shape, static_cast<std::int64_t>(x.size())});
    }
    cpu::KernelContext ctx;
    ctx.index_range = index_range[static_cast<std::size_t>(o.id)];
    const core::Status st =
        cpu::run_cpu_kernel(g, o, in, {v.data(), &o.out.shape, static_cast<std::int64_t>(v.size())}, ctx);
    REQUIRE_MESSAGE(st.ok(), st.message());
  }
  return out;
}

/// How far a correct fp32 run of `model` lands from exact arithmetic, against the GPU tests'
/// tolerance: the largest |fp32 − fp64| over a parameter's gradient divided by
/// 1e-3 · max|fp64| + 1e-5 (tests/gpu), over all parameters. Both runs use the CPU backend's
/// kernels from the same parameter values; only the rounding differs, as between the CUDA
/// and CPU backends.
double fp32_error_over_gpu_tolerance(const ir::ModelConfig& model, std::int64_t microbatch, std::string* worst_name) {
  ir::BuildOptions o;
  o.microbatch_size = microbatch;
  o.dtype = core::DType::kFp32;
  auto g = ir::build_forward_graph(model, o);
  REQUIRE_MESSAGE(g.ok(), g.status().message());
  Interpreter it(ir::derive_training_graph(*g, {}));
  for (auto& [p, v] : it.params()) {
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));  // the values fp32 holds
  }
  it.run(true);
  const auto exact = it.gradients();
  const auto rounded = fp32_gradients(it);
  double worst = 0;
  for (const auto& [p, a] : exact) {
    const auto& b = rounded.at(p);
    REQUIRE(a.size() == b.size());
    double largest = 0, diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, std::fabs(a[i]));
      diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    REQUIRE(std::isfinite(diff));
    const double allowed = 1e-3 * largest + 1e-5;
    if (diff / allowed > worst) {
      worst = diff / allowed;
      *worst_name = it.graph().op(p).name;
    }
  }
  return worst;
}

// The GPU tests compare CUDA with CPU gradients within 1e-3 · max|cpu| + 1e-5 (tests/gpu).
// That separates a wrong kernel from rounding only where rounding alone stays well inside
// it. Measured here with the CPU backend's own kernels, fp32 against fp64 from the same
// parameters: the tiny GPT (microbatch 4, as exec_cuda_test runs it) and the wide-row GPT
// (microbatch 2 per device, as exec_cuda_test runs it), with and without its sliding window,
// stay far inside; the
// tiny Wide-ResNet (16 bottleneck blocks, batch norm over 4 rows) lands far outside, which is
// why its CUDA-vs-CPU gradients differed on an H200 with the losses equal to 6e-6
// (docs/validation.md "First GPU run") and why tests/gpu/exec_nccl_test.cc compares only its
// loss. If the second check starts failing, that model has become a meaningful gradient
// check at 1e-3 again.
TEST_CASE("conditioning: fp32 rounding alone keeps the tiny GPT's gradients far inside the GPU tolerance and the tiny Wide-ResNet's far outside") {
  std::string name;
  const double gpt = fp32_error_over_gpu_tolerance(::alpasim::testing::tiny_gpt_hidden16(), 4, &name);
  MESSAGE("tiny GPT: fp32 vs fp64 gradients at " << gpt << " of the GPU tolerance (" << name << ")");
  CHECK(gpt < 1e-2);
  const double wide = fp32_error_over_gpu_tolerance(::alpasim::testing::wide_row_gpt(), 2, &name);
  MESSAGE("wide-row GPT: fp32 vs fp64 gradients at " << wide << " of the GPU tolerance (" << name << ")");
  CHECK(wide < 1e-2);
  const double window =
      fp32_error_over_gpu_tolerance(::alpasim::testing::sliding_window_wide_row_gpt(), 2, &name);
  MESSAGE("sliding-window wide-row GPT: fp32 vs fp64 gradients at " << window << " of the GPU tolerance (" << name
                                                                    << ")");
  CHECK(window < 1e-2);
  const double wrn = fp32_error_over_gpu_tolerance(::alpasim::testing::tiny_wide_resnet(), 4, &name);
  MESSAGE("tiny Wide-ResNet: fp32 vs fp64 gradients at " << wrn << " times the GPU tolerance (" << name << ")");
  CHECK(wrn > 10.0);
}

}  // namespace
}  // namespace alpasim::exec
