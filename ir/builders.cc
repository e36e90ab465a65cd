#include "ir/builders.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "ir/graph_json.h"
#include "ir/hf_config.h"
#include "ir/onnx_import.h"

namespace alpasim::ir {
namespace {

// Per-element FLOP estimates of pointwise functions (only "total FLOPs" uses them; the
// matmul FLOPs of the published formulas never do).
constexpr std::int64_t kGeluFlops = 8;     // tanh approximation: ~8 mul/add + tanh
constexpr std::int64_t kSiluFlops = 4;     // x·sigmoid(x)
constexpr std::int64_t kReluFlops = 1;
constexpr std::int64_t kSquaredReluFlops = 2;  // max(x, 0), then its square
constexpr std::int64_t kRotaryFlops = 3;   // x·cos + rotate(x)·sin
constexpr std::int64_t kDropoutMaskFlops = 1;  // one RNG draw compared with p

using Shape = std::vector<std::int64_t>;

struct Builder {
  Graph& g;
  std::int32_t layer = 0;
  std::string prefix;

  std::string n(const std::string& leaf) const { return prefix + leaf; }
  OpId param(const std::string& leaf, Shape shape) {
    return g.add_parameter(n(leaf), std::move(shape), layer);
  }
  OpId dot(const std::string& leaf, std::string_view spec, OpId a, OpId b, OpId bias = kNoOp) {
    return g.add_dot(n(leaf), spec, a, b, layer, bias);
  }
  OpId ew(const std::string& leaf, const std::string& fn, std::vector<OpId> in,
          std::int64_t flops_per_element) {
    return g.add_elementwise(n(leaf), fn, std::move(in), flops_per_element, layer);
  }
  OpId add(const std::string& leaf, OpId a, OpId b) { return ew(leaf, "add", {a, b}, 1); }
  /// x * mask with a fresh 1-byte mask (Korthikanti et al. count masks as 1 byte/element).
  OpId dropout(const std::string& leaf, OpId x, bool selective) {
    OpId mask = g.add_elementwise(n(leaf + "_mask"), "dropout_mask", {}, kDropoutMaskFlops, layer,
                                  g.op(x).out.shape, core::DType::kFp8);
    OpId y = ew(leaf, "mul", {x, mask}, 1);
    g.mutable_op(y).no_grad_inputs = 1u << 1;
    g.mutable_op(mask).selective_recompute = selective;
    g.mutable_op(y).selective_recompute = selective;
    return y;
  }
  OpId reshape(const std::string& leaf, OpId x, Shape shape) {
    OpId y = g.add_elementwise(n(leaf), "reshape", {x}, 0, layer, std::move(shape));
    Op& o = g.mutable_op(y);
    ALPASIM_CHECK(o.out.num_elements() == g.op(x).out.num_elements()) << o.name;
    o.bytes_read = 0;  // a view: no data moves
    o.bytes_written = 0;
    return y;
  }
};

// relu(x)^2 as Megatron-Core runs it (megatron/core/activations.py: torch.pow(F.relu(x),
// 2), two unfused kernels): the forward reads x and writes relu(x), reads that and writes
// the square. Its gradient (ir/autodiff.cc) is priced the same way.
OpId squared_relu_op(Builder& b, const std::string& leaf, OpId x) {
  OpId y = b.ew(leaf, "squared_relu", {x}, kSquaredReluFlops);
  Op& op = b.g.mutable_op(y);
  const std::int64_t bytes = b.g.op(x).out.bytes();
  op.bytes_read = 2 * bytes;
  op.bytes_written = 2 * bytes;
  return y;
}

OpId loss_head(Builder& b, OpId logits, OpId labels, LossKernel kernel) {
  OpId ce = b.g.add_softmax_cross_entropy(b.n("cross_entropy"), logits, labels, kernel, b.layer);
  OpId loss = b.g.add_reduce(b.n("loss"), "mean", {ce}, {1}, 1, b.layer);
  b.g.meta.loss = loss;
  return loss;
}

}  // namespace

Graph build_transformer(const TransformerConfig& c, const BuildOptions& options,
                        const std::string& name) {
  ALPASIM_CHECK(c.num_heads > 0 && (c.head_dim > 0 || c.hidden_size % c.num_heads == 0) &&
                c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0)
      << "transformer config not validated";
  Graph g;
  g.meta.model_name = name;
  g.meta.family = c.builtin;
  g.meta.dtype = options.dtype;
  g.meta.samples_per_microbatch = options.microbatch_size;
  g.meta.seq_len = c.seq_len;
  const bool llama = c.builtin == "llama" || c.builtin == "mixtral";
  // Nemotron-4 (Megatron's GPT with --squared-relu): a non-gated MLP with relu(x)^2.
  const bool squared_relu = c.builtin == "nemotron";
  const std::int64_t B = options.microbatch_size, S = c.seq_len, H = c.hidden_size;
  const std::int64_t V = c.vocab_size, F = c.ffn_hidden_size;
  const std::int64_t K = c.num_kv_heads, G = c.num_heads / c.num_kv_heads;
  const std::int64_t D = c.head_width();
  const NormType norm = llama ? NormType::kRmsNorm : NormType::kLayerNorm;

  Builder b{g, 0, "embedding/"};
  g.layers.push_back({"embedding", "prologue"});
  OpId ids = g.add_input("embedding/token_ids", {B, S}, true, 0);
  OpId wte = b.param("word_embeddings", {V, H});
  OpId x = g.add_embedding(b.n("lookup"), wte, ids, 0);
  if (c.learned_positions) {
    OpId pos = g.add_input("embedding/position_ids", {S}, true, 0);
    OpId wpe = b.param("position_embeddings", {S, H});
    OpId p = g.add_embedding(b.n("position_lookup"), wpe, pos, 0);
    x = b.add("add_positions", x, p);
  }
  if (c.dropout) x = b.dropout("dropout", x, false);

  auto norm_op = [&](const std::string& leaf, OpId in) {
    OpId gamma = b.param(leaf + "_scale", {H});
    OpId beta = norm == NormType::kLayerNorm ? b.param(leaf + "_bias", {H}) : kNoOp;
    return g.add_norm(b.n(leaf), norm, in, gamma, beta, b.layer);
  };

  // Token groups for MoE gating (GShard): groups of expert_group_size tokens, or all
  // tokens of the microbatch when that is fewer or the size is 0.
  const std::int64_t tokens = B * S;
  std::int64_t group = c.expert_group_size > 0 ? std::gcd(tokens, c.expert_group_size) : tokens;
  const std::int64_t num_groups = tokens / group;
  std::int64_t capacity = 0;
  if (c.num_experts > 0) {
    capacity = static_cast<std::int64_t>(
        std::ceil(c.capacity_factor * static_cast<double>(group * c.top_k) /
                  static_cast<double>(c.num_experts)));
    capacity = std::max<std::int64_t>(capacity, 1);
  }

  // A dense MLP of width `width` on `in` ([B, S, H]), its ops named `prefix` + gate / up /
  // silu / swiglu / down (SwiGLU, llama-style) or fc1 / gelu / fc2 (GPT): a dense block's
  // MLP ("mlp/") or a MoE block's shared expert ("moe/shared_").
  auto dense_mlp = [&](const std::string& prefix, OpId in, std::int64_t width, bool bias) {
    if (llama) {
      OpId gate = b.dot(prefix + "gate", "bsh,hf->bsf", in, b.param(prefix + "gate_weight", {H, width}));
      OpId up = b.dot(prefix + "up", "bsh,hf->bsf", in, b.param(prefix + "up_weight", {H, width}));
      OpId act = b.ew(prefix + "silu", "silu", {gate}, kSiluFlops);
      g.mutable_op(act).fused_swiglu = c.fused_swiglu;
      OpId prod = b.ew(prefix + "swiglu", "mul", {act, up}, 1);
      return b.dot(prefix + "down", "bsf,fh->bsh", prod, b.param(prefix + "down_weight", {width, H}));
    }
    OpId b1 = bias ? b.param(prefix + "fc1_bias", {width}) : kNoOp;
    OpId b2 = bias ? b.param(prefix + "fc2_bias", {H}) : kNoOp;
    OpId f1 = b.dot(prefix + "fc1", "bsh,hf->bsf", in, b.param(prefix + "fc1_weight", {H, width}), b1);
    OpId act = squared_relu ? squared_relu_op(b, prefix + "squared_relu", f1)
                            : b.ew(prefix + "gelu", "gelu", {f1}, kGeluFlops);
    return b.dot(prefix + "fc2", "bsf,fh->bsh", act, b.param(prefix + "fc2_weight", {width, H}), b2);
  };

  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    // Alpa's GShard model (alpa/model/moe.py) puts the experts in layers 0, 2, 4, ...
    const bool moe = c.is_moe_layer(l);
    b.layer = static_cast<std::int32_t>(l + 1);
    b.prefix = "block" + std::to_string(l) + "/";
    g.layers.push_back({"block" + std::to_string(l), moe ? "moe_transformer" : "transformer"});
    const OpId block_in = x;

    // Attention (pre-norm). Q is laid out [b, s, kv_heads, group, head_dim] so that
    // grouped-query attention is one batched dot per kv head (group = 1 for MHA).
    OpId ln1 = norm_op("attn_norm", block_in);
    OpId v = kNoOp, scores = kNoOp, first_core = kNoOp;
    std::int64_t out_dim = D;  // the head width attn/out contracts
    if (c.kv_lora_rank > 0) {
      // Multi-head latent attention (DeepSeek-V2/V3): queries from a q_lora_rank latent
      // (RMS-normed; straight from the input when q_lora_rank is 0), keys' and values'
      // per-head parts from one kv_lora_rank latent, and a rotary key part shared by every
      // head. The scores are the no-position part plus the rotary part (one GEMM of head
      // dim qk_nope + qk_rope in a fused kernel: the same multiply-adds). Megatron-Core
      // replicates the down projections over tp and splits the up projections by head.
      const std::int64_t N = c.num_heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim;
      const std::int64_t Rq = c.q_lora_rank, Rkv = c.kv_lora_rank;
      out_dim = c.v_head_dim;
      OpId q_in = ln1;
      std::string q_spec = "bsh,hkgd->bskgd", q_rope_spec = "bsh,hkgr->bskgr";
      std::int64_t q_from = H;
      if (Rq > 0) {
        q_in = b.dot("attn/q_down", "bsh,hr->bsr", ln1, b.param("attn/q_down_weight", {H, Rq}));
        q_in = g.add_norm(b.n("attn/q_norm"), NormType::kRmsNorm, q_in, b.param("attn/q_norm_scale", {Rq}),
                          kNoOp, b.layer);
        q_spec = "bsr,rkgd->bskgd";
        q_rope_spec = "bsq,qkgr->bskgr";
        q_from = Rq;
      }
      OpId q_nope = b.dot("attn/q_nope", q_spec, q_in, b.param("attn/q_nope_weight", {q_from, N, 1, Dn}));
      OpId q_rope = b.dot("attn/q_rope", q_rope_spec, q_in, b.param("attn/q_rope_weight", {q_from, N, 1, Dr}));
      OpId ckv = b.dot("attn/kv_down", "bsh,hc->bsc", ln1, b.param("attn/kv_down_weight", {H, Rkv}));
      OpId k_rope = b.dot("attn/k_rope", "bsh,hr->bsr", ln1, b.param("attn/k_rope_weight", {H, Dr}));
      ckv = g.add_norm(b.n("attn/kv_norm"), NormType::kRmsNorm, ckv, b.param("attn/kv_norm_scale", {Rkv}),
                       kNoOp, b.layer);
      OpId k_nope = b.dot("attn/k_nope", "bsc,ckd->bskd", ckv, b.param("attn/k_nope_weight", {Rkv, N, Dn}));
      v = b.dot("attn/v", "bsc,ckd->bskd", ckv, b.param("attn/v_weight", {Rkv, N, out_dim}));
      q_rope = b.ew("attn/q_rotary", "rotary", {q_rope}, kRotaryFlops);
      k_rope = b.ew("attn/k_rotary", "rotary", {k_rope}, kRotaryFlops);
      first_core = b.dot("attn/scores", "bskgd,btkd->bkgst", q_nope, k_nope);
      OpId rope_scores = b.dot("attn/scores_rope", "bskgr,btr->bkgst", q_rope, k_rope);
      g.mutable_op(first_core).selective_recompute = true;
      g.mutable_op(rope_scores).selective_recompute = true;
      scores = b.add("attn/scores_sum", first_core, rope_scores);
    } else {
      OpId bq = c.qkv_bias ? b.param("attn/q_bias", {K, G, D}) : kNoOp;
      OpId bk = c.qkv_bias ? b.param("attn/k_bias", {K, D}) : kNoOp;
      OpId bv = c.qkv_bias ? b.param("attn/v_bias", {K, D}) : kNoOp;
      OpId q = b.dot("attn/q", "bsh,hkgd->bskgd", ln1, b.param("attn/q_weight", {H, K, G, D}), bq);
      OpId k = b.dot("attn/k", "bsh,hkd->bskd", ln1, b.param("attn/k_weight", {H, K, D}), bk);
      v = b.dot("attn/v", "bsh,hkd->bskd", ln1, b.param("attn/v_weight", {H, K, D}), bv);
      if (!c.learned_positions) {
        q = b.ew("attn/q_rotary", "rotary", {q}, kRotaryFlops);
        k = b.ew("attn/k_rotary", "rotary", {k}, kRotaryFlops);
      }
      // The attention core: what Megatron's selective recomputation recomputes.
      scores = b.dot("attn/scores", "bskgd,btkd->bkgst", q, k);
      first_core = scores;
    }
    OpId probs = g.add_softmax(b.n("attn/softmax"), scores, b.layer);
    g.mutable_op(scores).selective_recompute = true;
    g.mutable_op(probs).selective_recompute = true;
    // The window masks the softmax in either kernel (the executors read it); only a fused
    // kernel skips the tiles outside it (flash_attention_work_fraction).
    g.mutable_op(scores).attention_window = c.attention_window_of(l);
    g.mutable_op(probs).attention_window = c.attention_window_of(l);
    if (c.dropout) probs = b.dropout("attn/probs_dropout", probs, true);
    if (c.fused_attention) {
      // scores -> softmax [-> mask, dropout], the ops created since the first score GEMM
      // and marked for selective recomputation: what a Flash kernel fuses (its output,
      // attn/context, is stored as usual: attn/out reads it).
      for (OpId id = first_core; id <= probs; ++id) {
        if (g.op(id).layer == b.layer && g.op(id).selective_recompute) {
          g.mutable_op(id).fused_attention = true;
          g.mutable_op(id).attention_window = c.attention_window_of(l);  // its dropout too
        }
      }
    }
    OpId ctx = b.dot("attn/context", "bkgst,btkd->bskgd", probs, v);
    g.mutable_op(ctx).selective_recompute = true;
    OpId bo = c.dense_bias ? b.param("attn/out_bias", {H}) : kNoOp;
    OpId attn = b.dot("attn/out", "bskgd,kgdh->bsh", ctx,
                      b.param("attn/out_weight", {c.kv_lora_rank > 0 ? c.num_heads : K,
                                                  c.kv_lora_rank > 0 ? 1 : G, out_dim, H}), bo);
    if (c.dropout) attn = b.dropout("attn/out_dropout", attn, false);
    OpId x1 = b.add("attn_residual", block_in, attn);

    OpId ln2 = norm_op("mlp_norm", x1);
    OpId mlp;
    if (!moe) {
      mlp = dense_mlp("mlp/", ln2, c.dense_width(), c.dense_bias);
    } else {
      // GShard MoE: x = groups, y = tokens per group, e = experts, c = capacity.
      const std::int64_t E = c.num_experts;
      OpId xs = b.reshape("moe/group_tokens", ln2, {num_groups, group, H});
      OpId logits = b.dot("moe/router", "xyh,he->xye", xs, b.param("moe/router_weight", {H, E}));
      OpId router_probs = g.add_softmax(b.n("moe/router_softmax"), logits, b.layer);
      OpId combine = g.add_moe_gate(b.n("moe/gate"), router_probs, c.top_k, capacity, b.layer);
      OpId dispatched = g.add_einsum(b.n("moe/dispatch"), OpKind::kMoeDispatch, "xyec,xyh->exch",
                                     combine, xs, kNoOp, b.layer);
      g.mutable_op(dispatched).no_grad_inputs = 1u << 0;  // routing decisions get no gradient
      OpId expert_out;
      if (llama) {
        OpId gate = b.dot("moe/expert_gate", "exch,ehf->excf", dispatched,
                          b.param("moe/expert_gate_weight", {E, H, F}));
        OpId up = b.dot("moe/expert_up", "exch,ehf->excf", dispatched,
                        b.param("moe/expert_up_weight", {E, H, F}));
        OpId act = b.ew("moe/expert_silu", "silu", {gate}, kSiluFlops);
        g.mutable_op(act).fused_swiglu = c.fused_swiglu;
        OpId prod = b.ew("moe/expert_swiglu", "mul", {act, up}, 1);
        expert_out = b.dot("moe/expert_down", "excf,efh->exch", prod,
                           b.param("moe/expert_down_weight", {E, F, H}));
      } else {
        // GShard experts (Alpa's FlaxPositionWiseMoELayer: wi, wo) have no biases.
        OpId f1 = b.dot("moe/expert_fc1", "exch,ehf->excf", dispatched,
                        b.param("moe/expert_fc1_weight", {E, H, F}));
        OpId act = b.ew("moe/expert_gelu", "gelu", {f1}, kGeluFlops);
        expert_out = b.dot("moe/expert_fc2", "excf,efh->exch", act,
                           b.param("moe/expert_fc2_weight", {E, F, H}));
      }
      OpId combined = g.add_einsum(b.n("moe/combine"), OpKind::kMoeCombine, "xyec,exch->xyh",
                                   combine, expert_out, kNoOp, b.layer);
      mlp = b.reshape("moe/ungroup_tokens", combined, {B, S, H});
      if (c.shared_expert_ffn_hidden_size > 0) {
        // Every token also passes the shared expert (no biases: DeepSeek, Qwen2-MoE);
        // Qwen2-MoE's sigmoid gate on its output (one h-vector per token) is left out.
        OpId shared = dense_mlp("moe/shared_", ln2, c.shared_expert_ffn_hidden_size, false);
        mlp = b.add("moe/add_shared", mlp, shared);
      }
    }
    if (c.dropout) mlp = b.dropout("mlp/dropout", mlp, false);
    x = b.add("mlp_residual", x1, mlp);
  }

  b.layer = static_cast<std::int32_t>(c.num_layers + 1);
  b.prefix = "head/";
  g.layers.push_back({"head", "epilogue"});
  OpId lnf = norm_op("final_norm", x);
  OpId logits = c.tied_embeddings
                    ? b.dot("logits", "bsh,vh->bsv", lnf, wte)
                    : b.dot("logits", "bsh,hv->bsv", lnf, b.param("lm_head_weight", {H, V}));
  OpId labels = g.add_input("head/labels", {B, S}, true, b.layer);
  loss_head(b, logits, labels, c.loss_kernel);
  return g;
}

Graph build_wide_resnet(const WideResNetConfig& c, const BuildOptions& options,
                        const std::string& name) {
  Graph g;
  g.meta.model_name = name;
  g.meta.family = "wide_resnet";
  g.meta.dtype = options.dtype;
  g.meta.samples_per_microbatch = options.microbatch_size;
  const std::vector<std::int64_t> stages =
      c.num_layers == 50 ? std::vector<std::int64_t>{3, 4, 6, 3}
                         : std::vector<std::int64_t>{3, 4, 23, 3};
  ALPASIM_CHECK(c.num_layers == 50 || c.num_layers == 101) << "wide_resnet layers not validated";
  const std::int64_t N = options.microbatch_size;
  Builder b{g, 0, "stem/"};
  g.layers.push_back({"stem", "prologue"});
  OpId x = g.add_input("stem/images", {N, c.image_size, c.image_size, 3}, false, 0);
  auto conv_bn = [&](const std::string& leaf, OpId in, std::int64_t out_ch, std::int64_t kernel,
                     std::int64_t stride, bool relu) {
    const std::int64_t in_ch = g.op(in).out.shape[3];
    OpId w = b.param(leaf + "_kernel", {kernel, kernel, in_ch, out_ch});
    OpId y = g.add_conv2d(b.n(leaf), in, w, stride, b.layer);
    y = g.add_norm(b.n(leaf + "_bn"), NormType::kBatchNorm, y, b.param(leaf + "_bn_scale", {out_ch}),
                   b.param(leaf + "_bn_bias", {out_ch}), b.layer);
    if (relu) y = b.ew(leaf + "_relu", "relu", {y}, kReluFlops);
    return y;
  };
  x = conv_bn("conv_init", x, c.base_channels, 7, 2, true);
  x = g.add_max_pool("stem/max_pool", x, 3, 2, 0);
  std::int32_t block = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::int64_t filters = c.base_channels << i;
    for (std::int64_t j = 0; j < stages[i]; ++j) {
      const std::int64_t stride = (i > 0 && j == 0) ? 2 : 1;
      b.layer = block + 1;
      b.prefix = "block" + std::to_string(block) + "/";
      g.layers.push_back({"block" + std::to_string(block), "resnet_block"});
      OpId residual = x;
      OpId y = conv_bn("conv1", x, filters, 1, 1, true);
      y = conv_bn("conv2", y, filters * c.width_factor, 3, stride, true);
      y = conv_bn("conv3", y, filters * 4, 1, 1, false);
      if (g.op(residual).out.shape != g.op(y).out.shape) {
        residual = conv_bn("conv_proj", residual, filters * 4, 1, stride, false);
      }
      x = b.ew("relu_out", "relu", {b.add("residual", residual, y)}, kReluFlops);
      ++block;
    }
  }
  b.layer = block + 1;
  b.prefix = "head/";
  g.layers.push_back({"head", "epilogue"});
  const std::int64_t channels = g.op(x).out.shape[3];
  OpId pooled = g.add_reduce("head/global_mean", "mean", {x}, {N, channels}, 1, b.layer);
  OpId logits = b.dot("dense", "nc,ck->nk", pooled, b.param("dense_kernel", {channels, c.num_classes}),
                      b.param("dense_bias", {c.num_classes}));
  OpId labels = g.add_input("head/labels", {N}, true, b.layer);
  // A classifier's loss over its classes (1,000 in the Alpa paper's runs, against a
  // language model's vocabulary of 50,000 or more per position): one fused kernel, as XLA
  // runs it; its cost is negligible either way.
  loss_head(b, logits, labels, LossKernel::kTeFused);
  return g;
}

core::Result<Graph> build_forward_graph(const ModelConfig& config, const BuildOptions& options) {
  if (const auto* t = std::get_if<TransformerConfig>(&config.spec)) {
    return build_transformer(*t, options, config.name);
  }
  if (const auto* w = std::get_if<WideResNetConfig>(&config.spec)) {
    return build_wide_resnet(*w, options, config.name);
  }
  const auto& f = std::get<ModelFileConfig>(config.spec);
  if (f.format == "hf_config") {
    ALPASIM_ASSIGN_OR_RETURN(TransformerConfig t, read_hf_config(f.path, f.path_as_written, f.seq_len));
    t.fused_attention = f.fused_attention;
    t.fused_swiglu = f.fused_swiglu;
    t.loss_kernel = f.loss_kernel;
    // The same size limits as a builtin model (core/limits.h), for this microbatch.
    if (std::string problem = model_size_problem(ModelConfig{config.name, t}, options.microbatch_size);
        !problem.empty()) {
      return core::invalid_argument(f.path_as_written + ": " + problem);
    }
    return build_transformer(t, options, config.name);
  }
  if (f.format == "graph_json") return read_graph_json(f.path, f.path_as_written, options);
  if (f.format == "onnx") return import_onnx(f.path, f.path_as_written, options);
  return core::invalid_argument(f.path_as_written + ": unknown model file format \"" + f.format + "\"");
}

}  // namespace alpasim::ir
