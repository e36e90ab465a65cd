// The CUDA backend's copy-free GEMM path (exec/gemm_layout.h): every einsum the model
// builders emit (forward and the backward autodiff derives) is either computed exactly by
// the planned strided GEMM, run here on the host with BLAS's column-major semantics, or
// left to the packing path (no plan). The reference is a direct evaluation of the einsum
// letter by letter, independent of the planner's class grouping.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "exec/gemm_layout.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec {
namespace {

using i64 = std::int64_t;

/// out[...] = sum over the letters not in out of lhs[...] * rhs[...], by odometer over every letter.
std::vector<float> direct_einsum(const ir::DotSpec& s, const std::vector<i64>& ls, const std::vector<i64>& rs,
                                 const std::vector<i64>& os, const std::vector<float>& a,
                                 const std::vector<float>& b) {
  std::map<char, i64> extent;
  for (std::size_t i = 0; i < s.lhs.size(); ++i) extent[s.lhs[i]] = ls[i];
  for (std::size_t i = 0; i < s.rhs.size(); ++i) extent[s.rhs[i]] = rs[i];
  for (std::size_t i = 0; i < s.out.size(); ++i) extent[s.out[i]] = os[i];
  std::vector<char> letters;
  for (const auto& [c, n] : extent) letters.push_back(c);
  auto offset = [&](const std::string& term, const std::vector<i64>& shape, const std::map<char, i64>& at) {
    i64 o = 0;
    for (std::size_t i = 0; i < term.size(); ++i) o = o * shape[i] + at.at(term[i]);
    return o;
  };
  i64 out_n = 1;
  for (i64 e : os) out_n *= e;
  std::vector<double> acc(static_cast<std::size_t>(out_n), 0.0);
  std::map<char, i64> at;
  for (char c : letters) at[c] = 0;
  while (true) {
    acc[static_cast<std::size_t>(offset(s.out, os, at))] +=
        static_cast<double>(a[static_cast<std::size_t>(offset(s.lhs, ls, at))]) *
        b[static_cast<std::size_t>(offset(s.rhs, rs, at))];
    std::size_t i = 0;
    for (; i < letters.size(); ++i) {
      if (++at[letters[i]] < extent[letters[i]]) break;
      at[letters[i]] = 0;
    }
    if (i == letters.size()) break;
  }
  return {acc.begin(), acc.end()};
}

std::vector<float> random_values(i64 n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

i64 elements(const std::vector<i64>& shape) {
  i64 n = 1;
  for (i64 e : shape) n *= e;
  return n;
}

/// Checks one einsum; returns whether it had a plan.
bool check_einsum(const ir::DotSpec& s, const std::vector<i64>& ls, const std::vector<i64>& rs,
                  const std::vector<i64>& os, std::mt19937& rng) {
  const auto plan = plan_strided_gemm(s, ls, rs, os);
  if (!plan) return false;
  const auto a = random_values(elements(ls), rng), b = random_values(elements(rs), rng);
  const auto want = direct_einsum(s, ls, rs, os, a, b);
  std::vector<float> got(want.size(), std::nanf(""));
  run_strided_gemm_on_host(*plan, a, b, got);
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;  // a skipped element stays NaN
  }
  CHECK_MESSAGE(worst <= 1e-4, ir::dot_spec_string(s) << ": max |diff| " << worst);
  return true;
}

TEST_CASE("gemm layout: hand-picked einsums, transposed operands and batches") {
  std::mt19937 rng(7);
  struct Case {
    const char* spec;
    std::vector<i64> l, r, o;
    bool planned;
  };
  const std::vector<Case> cases = {
      {"bsh,hf->bsf", {2, 3, 4}, {4, 5}, {2, 3, 5}, true},         // a linear layer
      {"bsf,hf->bsh", {2, 3, 5}, {4, 5}, {2, 3, 4}, true},         // its input gradient (rhs transposed)
      {"bsh,bsf->hf", {2, 3, 4}, {2, 3, 5}, {4, 5}, true},         // its weight gradient (lhs transposed)
      {"bqd,bkd->bqk", {2, 3, 4}, {2, 5, 4}, {2, 3, 5}, true},     // batched, rhs transposed
      {"bqk,bkd->bqd", {2, 3, 5}, {2, 5, 4}, {2, 3, 4}, true},
      {"mk,kn->nm", {3, 4}, {4, 5}, {5, 3}, true},                 // output transposed: P = lhs
      {"bsh,hkd->bskd", {2, 3, 4}, {4, 2, 3}, {2, 3, 2, 3}, true},  // two rhs-free letters in order
      {"bsh,hkd->bsdk", {2, 3, 4}, {4, 2, 3}, {2, 3, 3, 2}, false},  // out of order in the output
      {"bqnd,bknd->bnqk", {2, 3, 2, 4}, {2, 5, 2, 4}, {2, 2, 3, 5}, false},  // batch letters not adjacent
      {"ab,b->a", {1, 4}, {4}, {1}, true},                         // extent-1 axes
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    const auto spec = ir::parse_dot_spec(c.spec);
    REQUIRE(spec.has_value());
    CHECK(check_einsum(*spec, c.l, c.r, c.o, rng) == c.planned);
  }
}

TEST_CASE("gemm layout: every einsum of the tiny GPT, LLaMA, MoE, Mixtral and Wide-ResNet training graphs") {
  std::mt19937 rng(11);
  std::vector<ir::ModelConfig> models;
  for (const std::string b : {"gpt", "llama", "moe", "mixtral"}) {
    models.push_back({"tiny " + b, ::alpasim::testing::tiny_transformer(b)});
  }
  models.push_back(::alpasim::testing::tiny_wide_resnet());
  std::set<std::string> planned_specs;
  for (const auto& m : models) {
    CAPTURE(m.name);
    ir::BuildOptions o;
    o.microbatch_size = 2;
    o.dtype = core::DType::kFp32;
    auto fwd = ir::build_forward_graph(m, o);
    REQUIRE_MESSAGE(fwd.ok(), fwd.status().message());
    const ir::Graph g = ir::derive_training_graph(*fwd, {});
    int dots = 0, planned = 0;
    for (ir::OpId id = 0; id < static_cast<ir::OpId>(g.size()); ++id) {
      const ir::Op& op = g.op(id);
      if (op.kind != ir::OpKind::kDot) continue;
      ++dots;
      CAPTURE(op.name);
      if (check_einsum(op.dot, g.op(op.inputs[0]).out.shape, g.op(op.inputs[1]).out.shape, op.out.shape, rng)) {
        ++planned;
        planned_specs.insert(ir::dot_spec_string(op.dot));
      }
    }
    MESSAGE(m.name << ": " << planned << " of " << dots << " einsums run as one strided GEMM");
    CHECK(dots > 0);
    CHECK(planned > 0);
  }
  // A GPT layer's linear layers and their two gradients (input: rhs transposed; weight:
  // lhs transposed), the attention projections and the LM head take the copy-free path.
  for (const char* s : {"bsh,hf->bsf", "bsf,hf->bsh", "bsh,bsf->hf", "bsf,fh->bsh", "bsh,fh->bsf", "bsf,bsh->fh",
                        "bsh,hkd->bskd", "bskd,hkd->bsh", "bsh,bskd->hkd", "bsh,vh->bsv"}) {
    CAPTURE(s);
    CHECK(planned_specs.count(s) == 1);
  }
}

}  // namespace
}  // namespace alpasim::exec
