#include "planner/intra_op/synthetic_graphs.h"

#include <random>
#include <string>
#include <vector>

namespace alpasim::planner::intra_op {

IntraOpGraph mlp_graph(const MlpShape& s) {
  GraphBuilder b;
  const int x = b.input("x", {s.batch, s.hidden}, s.element_bytes);
  const int w1 = b.parameter("w1", {s.hidden, s.ffn}, s.element_bytes);
  const int w2 = b.parameter("w2", {s.ffn, s.hidden}, s.element_bytes);
  const int h = b.einsum("fc1", "bh,hf->bf", {x, w1});
  const int a = b.elementwise("relu", {h});
  const int y = b.einsum("fc2", "bf,fh->bh", {a, w2});
  const int dy = b.elementwise("loss_grad", {y});
  const int dw2 = b.einsum("fc2_dw", "bf,bh->fh", {a, dy});
  const int da = b.einsum("fc2_dx", "bh,fh->bf", {dy, w2});
  const int dh = b.elementwise("relu_grad", {da, h});
  const int dw1 = b.einsum("fc1_dw", "bh,bf->hf", {x, dh});
  b.update("w1_update", w1, dw1, s.state_bytes_per_element);
  b.update("w2_update", w2, dw2, s.state_bytes_per_element);
  return b.take();
}

namespace {
struct LayerFwd {
  int x, ln1, wq, wk, wv, q, k, v, probs, ctx, wo, res1, ln2, w1, b1, ff1b, gelu, w2, b2, out;
};
}  // namespace

IntraOpGraph gpt_graph(const GptShape& s) {
  GraphBuilder b;
  const std::int64_t d = s.hidden / s.heads;
  const std::int64_t eb = s.element_bytes;
  std::vector<LayerFwd> fwd;
  int x = b.input("x", {s.batch, s.seq, s.hidden}, eb);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    LayerFwd f{};
    f.x = x;
    f.ln1 = b.layer_norm(p + "ln1", x, 2);
    f.wq = b.parameter(p + "wq", {s.hidden, s.heads, d}, eb);
    f.wk = b.parameter(p + "wk", {s.hidden, s.heads, d}, eb);
    f.wv = b.parameter(p + "wv", {s.hidden, s.heads, d}, eb);
    f.q = b.einsum(p + "q", "bsh,hnd->bsnd", {f.ln1, f.wq});
    f.k = b.einsum(p + "k", "bsh,hnd->bsnd", {f.ln1, f.wk});
    f.v = b.einsum(p + "v", "bsh,hnd->bsnd", {f.ln1, f.wv});
    const int scores = b.einsum(p + "scores", "bsnd,btnd->bnst", {f.q, f.k});
    f.probs = b.softmax(p + "probs", scores, 3);
    f.ctx = b.einsum(p + "ctx", "bnst,btnd->bsnd", {f.probs, f.v});
    f.wo = b.parameter(p + "wo", {s.heads, d, s.hidden}, eb);
    const int attn = b.einsum(p + "attn_out", "bsnd,ndh->bsh", {f.ctx, f.wo});
    f.res1 = b.elementwise(p + "res1", {x, attn});
    f.ln2 = b.layer_norm(p + "ln2", f.res1, 2);
    f.w1 = b.parameter(p + "w1", {s.hidden, s.ffn}, eb);
    f.b1 = b.parameter(p + "b1", {s.ffn}, eb);
    const int ff1 = b.einsum(p + "ff1", "bsh,hf->bsf", {f.ln2, f.w1});
    f.ff1b = b.elementwise(p + "ff1_bias", {ff1, f.b1});
    f.gelu = b.elementwise(p + "gelu", {f.ff1b});
    f.w2 = b.parameter(p + "w2", {s.ffn, s.hidden}, eb);
    f.b2 = b.parameter(p + "b2", {s.hidden}, eb);
    const int ff2 = b.einsum(p + "ff2", "bsf,fh->bsh", {f.gelu, f.w2});
    const int ff2b = b.elementwise(p + "ff2_bias", {ff2, f.b2});
    f.out = b.elementwise(p + "res2", {f.res1, ff2b});
    fwd.push_back(f);
    x = f.out;
  }
  if (!s.backward) return b.take();
  int dx = b.elementwise("loss_grad", {x});
  for (int l = s.layers - 1; l >= 0; --l) {
    const LayerFwd& f = fwd[static_cast<std::size_t>(l)];
    const std::string p = "l" + std::to_string(l) + ".grad.";
    const int dres2 = dx;
    // FFN.
    const int db2 = b.reduce(p + "b2", dres2, {0, 1});
    const int dw2 = b.einsum(p + "w2", "bsf,bsh->fh", {f.gelu, dres2});
    const int dgelu = b.einsum(p + "gelu", "bsh,fh->bsf", {dres2, f.w2});
    const int dff1 = b.elementwise(p + "ff1", {dgelu, f.ff1b});
    const int db1 = b.reduce(p + "b1", dff1, {0, 1});
    const int dw1 = b.einsum(p + "w1", "bsh,bsf->hf", {f.ln2, dff1});
    const int dln2 = b.einsum(p + "ln2_out", "bsf,hf->bsh", {dff1, f.w1});
    const int dln2_in = b.layer_norm(p + "ln2", b.elementwise(p + "ln2_pre", {dln2, f.res1}), 2);
    const int dres1 = b.elementwise(p + "res1", {dres2, dln2_in});
    // Attention.
    const int dwo = b.einsum(p + "wo", "bsnd,bsh->ndh", {f.ctx, dres1});
    const int dctx = b.einsum(p + "ctx", "bsh,ndh->bsnd", {dres1, f.wo});
    const int dprobs = b.einsum(p + "probs", "bsnd,btnd->bnst", {dctx, f.v});
    const int dv = b.einsum(p + "v", "bnst,bsnd->btnd", {f.probs, dctx});
    const int dscores =
        b.softmax(p + "scores", b.elementwise(p + "scores_pre", {dprobs, f.probs}), 3);
    const int dq = b.einsum(p + "q", "bnst,btnd->bsnd", {dscores, f.k});
    const int dk = b.einsum(p + "k", "bnst,bsnd->btnd", {dscores, f.q});
    const int dwq = b.einsum(p + "wq", "bsh,bsnd->hnd", {f.ln1, dq});
    const int dwk = b.einsum(p + "wk", "bsh,bsnd->hnd", {f.ln1, dk});
    const int dwv = b.einsum(p + "wv", "bsh,bsnd->hnd", {f.ln1, dv});
    const int dln1_q = b.einsum(p + "ln1_q", "bsnd,hnd->bsh", {dq, f.wq});
    const int dln1_k = b.einsum(p + "ln1_k", "bsnd,hnd->bsh", {dk, f.wk});
    const int dln1_v = b.einsum(p + "ln1_v", "bsnd,hnd->bsh", {dv, f.wv});
    const int dln1 = b.elementwise(p + "ln1_sum",
                                   {b.elementwise(p + "ln1_qk", {dln1_q, dln1_k}), dln1_v});
    const int dln1_in = b.layer_norm(p + "ln1", b.elementwise(p + "ln1_pre", {dln1, f.x}), 2);
    dx = b.elementwise(p + "x", {dres1, dln1_in});
    // Optimizer updates.
    const std::string u = "l" + std::to_string(l) + ".update.";
    b.update(u + "wq", f.wq, dwq, s.state_bytes_per_element);
    b.update(u + "wk", f.wk, dwk, s.state_bytes_per_element);
    b.update(u + "wv", f.wv, dwv, s.state_bytes_per_element);
    b.update(u + "wo", f.wo, dwo, s.state_bytes_per_element);
    b.update(u + "w1", f.w1, dw1, s.state_bytes_per_element);
    b.update(u + "b1", f.b1, db1, s.state_bytes_per_element);
    b.update(u + "w2", f.w2, dw2, s.state_bytes_per_element);
    b.update(u + "b2", f.b2, db2, s.state_bytes_per_element);
  }
  return b.take();
}

namespace {
// Uniform integer in [0, n) without std::uniform_int_distribution (whose output differs
// between standard libraries).
int draw(std::mt19937_64& rng, int n) {
  return static_cast<int>(rng() % static_cast<std::uint64_t>(n));
}
}  // namespace

IntraOpGraph random_small_graph(std::uint64_t seed, int ops) {
  std::mt19937_64 rng(seed);
  GraphBuilder b;
  std::vector<int> tensors;  // 2D nodes usable as operands
  auto dim = [&] { return std::int64_t{2} << draw(rng, 2); };  // 2 or 4
  tensors.push_back(b.input("x", {dim(), dim()}));
  int made = 1;
  while (made < ops) {
    const int pick = tensors[static_cast<std::size_t>(draw(rng, static_cast<int>(tensors.size())))];
    const auto shape = b.shape(pick);
    const std::string name = "op" + std::to_string(made);
    switch (draw(rng, 6)) {
      case 0: {  // matmul with a fresh weight (2 nodes)
        if (made + 2 > ops) {
          tensors.push_back(b.elementwise(name, {pick}));
          made += 1;
          break;
        }
        const int w = b.parameter(name + ".w", {shape[1], dim()});
        tensors.push_back(b.einsum(name, "ij,jk->ik", {pick, w}));
        made += 2;
        break;
      }
      case 1: {  // matmul of two existing tensors, if shapes allow
        int other = -1;
        for (int t : tensors) {
          if (b.shape(t)[0] == shape[1] && t != pick) other = t;
        }
        tensors.push_back(other >= 0 ? b.einsum(name, "ij,jk->ik", {pick, other})
                                     : b.transpose(name, pick, {1, 0}));
        made += 1;
        break;
      }
      case 2: {  // binary elementwise with a same-shape tensor, else unary
        int other = -1;
        for (int t : tensors) {
          if (b.shape(t) == shape && t != pick) other = t;
        }
        tensors.push_back(other >= 0 ? b.elementwise(name, {pick, other})
                                     : b.elementwise(name, {pick}));
        made += 1;
        break;
      }
      case 3:
        tensors.push_back(b.transpose(name, pick, {1, 0}));
        made += 1;
        break;
      case 4:
        tensors.push_back(b.softmax(name, pick, 1));
        made += 1;
        break;
      default:
        tensors.push_back(b.layer_norm(name, pick, 1));
        made += 1;
        break;
    }
  }
  return b.take();
}

}  // namespace alpasim::planner::intra_op
