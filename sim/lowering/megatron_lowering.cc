#include "sim/lowering/megatron_lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <variant>

#include "cluster/topology.h"
#include "core/check.h"
#include "ir/accounting.h"
#include "ir/builders.h"
#include "schema/megatron_layouts.h"

namespace alpasim::sim::lowering {
namespace {

using core::Bytes;
using core::Flops;
using core::Seconds;
using ir::Op;
using ir::OpKind;
using ir::Phase;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Einsum letters Megatron's tensor parallelism splits: attention heads ('k', the kv heads
// the builders index q/k/v/scores/context by), the FFN hidden ('f') and the vocabulary
// ('v', vocab-parallel embedding and LM head). ir/builders.cc names them so.
bool is_sharded_letter(char c) { return c == 'k' || c == 'f' || c == 'v'; }

bool has_sharded_letter(const std::string& letters) {
  return std::any_of(letters.begin(), letters.end(), is_sharded_letter);
}

// Per-element traffic of a low-precision recipe's casts and weight copies (bytes), for the
// transformer blocks' linears. Each quantized copy of an element costs its element plus its
// share of the block scale: fp8 1 B; MXFP8 1 + 1/32 B (an E8M0 scale per 32); NVFP4 0.5 +
// 1/16 B (an E4M3 scale per 16). Block scales run along the contraction dimension, so a
// tensor that feeds GEMMs along both of its dimensions (a weight, a forward input reused by
// the weight-gradient GEMM, an output gradient) is quantized twice (rowwise and columnwise),
// as per-tensor fp8 on Hopper needs a transposed copy (cuBLAS runs Hopper's fp8 GEMMs in
// the TN layout only). Blackwell (compute capability 10.x) runs fp8 GEMMs in every layout:
// Transformer Engine then keeps one fp8 copy per tensor and no transpose
// (`nvte_is_non_tn_fp8_gemm_supported`; its memory test expects one cached byte per weight
// element there, two on Hopper).
struct RecipeBytes {
  double input_cast = 0;      ///< forward input of a linear: written by its producer (fused)
  double grad_cast = 0;       ///< output gradient: read bf16, write the two quantized copies
  double weight_copies = 0;   ///< per weight: the quantized copies kept beside the bf16 one
  double weight_cast = 0;     ///< per weight per iteration: read bf16, write the copies
};
// Bytes per element of the copy Transformer Engine saves for a block linear's weight-
// gradient GEMM instead of the bf16 input (its columnwise / transposed quantized copy).
double saved_input_bytes(bool fp8, BlockScaled block_scaled) {
  if (block_scaled == BlockScaled::kMxfp8) return 1.0 + 1.0 / 32;
  if (block_scaled == BlockScaled::kNvfp4) return 0.5 + 1.0 / 16;
  return fp8 ? 1.0 : 0.0;
}

RecipeBytes recipe_bytes(bool fp8, BlockScaled block_scaled, bool fp8_any_layout) {
  if (block_scaled == BlockScaled::kMxfp8) {
    const double copy = 1.0 + 1.0 / 32;
    return {2 * copy, 2 + 2 * copy, 2 * copy, 2 + 2 * copy};
  }
  if (block_scaled == BlockScaled::kNvfp4) {
    // NVIDIA's NVFP4 recipe applies a 16-point random Hadamard transform to the weight-
    // gradient GEMM's operands: the columnwise copies of inputs and gradients are computed
    // from a second read of the bf16 tensor (assumed unfused with the producer).
    const double copy = 0.5 + 1.0 / 16;
    return {copy + 2 + copy, 2 + 2 * copy, 2 * copy, 2 + 2 * copy};
  }
  if (fp8 && fp8_any_layout) return {1, 2 + 1, 1, 2 + 1};  // one fp8 copy of each tensor
  // Hopper: the input's fp8 copy comes from its producer (1 byte; its transposed copy for the
  // weight gradient is saved_input_bytes), the gradient and the weight are written twice.
  if (fp8) return {1, 2 + 2, 2, 2 + 2};
  return {};
}

}  // namespace

std::optional<BlockScaled> parse_block_scaled(std::string_view name) {
  if (name.empty() || name == "none") return BlockScaled::kNone;
  if (name == "mxfp8") return BlockScaled::kMxfp8;
  if (name == "nvfp4") return BlockScaled::kNvfp4;
  return std::nullopt;
}

std::string precision_name(core::DType dtype, BlockScaled format) {
  if (format == BlockScaled::kMxfp8) return "mxfp8";
  if (format == BlockScaled::kNvfp4) return "nvfp4";
  return std::string(core::dtype_name(dtype));
}

bool priced_by_lowering_only(core::DType dtype, BlockScaled format) {
  return dtype == core::DType::kFp8 || format != BlockScaled::kNone;
}

core::Status check_precision_on_gpu(core::DType dtype, BlockScaled format, const cluster::GpuSpec& gpu) {
  if (dtype == core::DType::kFp8 && gpu.peak(core::DType::kFp8).value() <= 0) {
    return core::invalid_argument("fp8 needs fp8 tensor cores (Hopper or later); the " + gpu.display_name +
                                  " has none");
  }
  if (format != BlockScaled::kNone && !gpu.has_block_scaled_formats()) {
    return core::invalid_argument(precision_name(dtype, format) +
                                  " needs Blackwell tensor cores (block-scaled formats: B200, B300, GB200, "
                                  "GB300); the " + gpu.display_name +
                                  " has none");
  }
  return core::ok_status();
}

namespace {

// A transformer block's linear layer GEMM (forward, input gradient or weight gradient): an
// einsum with a parameter operand, or derived from one. Attention-core GEMMs (no
// parameter) and the embedding / LM head layers (0 and N+1) are not: Transformer Engine's
// fp8 recipe runs those in bf16.
bool is_block_linear(const ir::Graph& g, const Op& op, std::size_t num_layers) {
  if (op.kind != OpKind::kDot || op.layer <= 0 ||
      static_cast<std::size_t>(op.layer) + 1 >= num_layers) {
    return false;
  }
  auto has_param = [&](const Op& o) {
    for (ir::OpId x : o.inputs) {
      if (g.op(x).kind == OpKind::kParameter) return true;
    }
    return false;
  };
  if (op.phase == Phase::kForward || op.phase == Phase::kRecompute) {
    if (has_param(op)) return true;
    return op.phase == Phase::kRecompute && op.source != ir::kNoOp && has_param(g.op(op.source));
  }
  if (op.source == ir::kNoOp) return false;
  const Op& src = g.op(op.source);
  return src.kind == OpKind::kParameter || (src.kind == OpKind::kDot && has_param(src));
}

// The GEMM one GPU runs for einsum `op` when the sharded letters are split tp ways.
// The GEMM of einsum `op` on one GPU, each letter's extent replaced by local(letter, extent).
template <class Local>
cost_model::GemmShape local_gemm(const ir::Graph& g, const Op& op, Local local_extent) {
  std::map<char, std::int64_t> extent;
  auto read = [&](const std::string& letters, ir::OpId input) {
    const auto& shape = g.op(input).out.shape;
    ALPASIM_CHECK(shape.size() == letters.size()) << op.name << ": einsum rank mismatch";
    for (std::size_t i = 0; i < letters.size(); ++i) extent[letters[i]] = shape[i];
  };
  read(op.dot.lhs, op.inputs[0]);
  read(op.dot.rhs, op.inputs[1]);
  cost_model::GemmShape s;
  s.m = s.n = s.k = s.batch = 1;
  s.dtype = op.out.dtype;
  for (const auto& [letter, size] : extent) {
    const std::int64_t local = local_extent(letter, size);
    const bool in_l = op.dot.lhs.find(letter) != std::string::npos;
    const bool in_r = op.dot.rhs.find(letter) != std::string::npos;
    const bool in_o = op.dot.out.find(letter) != std::string::npos;
    if (in_l && in_r && in_o) s.batch *= local;
    else if (in_l && in_o) s.m *= local;
    else if (in_r && in_o) s.n *= local;
    else s.k *= local;
  }
  return s;
}

// Megatron's tensor-parallel split: the sharded letters over tp.
cost_model::GemmShape sharded_gemm(const ir::Graph& g, const Op& op, std::int64_t tp) {
  return local_gemm(g, op, [&](char letter, std::int64_t size) {
    return is_sharded_letter(letter) ? ceil_div(size, tp) : size;
  });
}

// An op of a MoE layer's experts (their weights, GEMMs and activations, and the backward of
// those): the builders name them ".../moe/expert_...".
bool is_expert_op(const Op& op) { return op.name.find("/moe/expert_") != std::string::npos; }

// An expert GEMM on one GPU under expert parallelism: num_experts / ep local experts ('e'),
// each expert's FFN width over etp GPUs ('f'), and each local expert's token slots ('c',
// the capacity) gathered from the ep·etp GPUs that share it, each of which held 1/tp of the
// layer's tokens (sequence parallelism): c·ep·etp/tp. Per GPU the FLOPs equal those of the
// experts split tp ways; the shapes (fewer, longer expert GEMMs) do not.
cost_model::GemmShape expert_gemm(const ir::Graph& g, const Op& op, std::int64_t tp, std::int64_t ep,
                                  std::int64_t etp) {
  return local_gemm(g, op, [&](char letter, std::int64_t size) {
    if (letter == 'e') return ceil_div(size, ep);
    if (letter == 'f') return ceil_div(size, etp);
    if (letter == 'c') return ceil_div(size * ep * etp, tp);
    return size;
  });
}

bool contracts_sharded(const Op& op) {
  for (char c : op.dot.lhs) {
    if (is_sharded_letter(c) && op.dot.rhs.find(c) != std::string::npos &&
        op.dot.out.find(c) == std::string::npos) {
      return true;
    }
  }
  return false;
}

// Forward dots whose weight carries the split letter into the output while the activation
// input is replicated: Megatron's column-parallel linears (QKV, fc1, LM head).
bool is_column_parallel(const Op& op) {
  for (char c : op.dot.rhs) {
    if (is_sharded_letter(c) && op.dot.out.find(c) != std::string::npos &&
        op.dot.lhs.find(c) == std::string::npos) {
      return true;
    }
  }
  return false;
}

struct OpTimes {
  Seconds gemm{0};
  Seconds memory_bound{0};
  Flops flops{0};
};

// Parameter elements of each layer held per GPU under tensor parallelism, and in total.
struct LayerParams {
  std::int64_t total = 0;
  std::int64_t per_gpu = 0;
  std::int64_t experts_per_gpu = 0;  ///< of per_gpu: MoE expert weights (split ep·etp ways)
  std::int64_t word_embedding_per_gpu = 0;  // the vocab-split table (tied with the head)
};

// A linear of a transformer block as priced, for the userbuffers overlap.
struct UserbufferGemm {
  ir::OpId op = ir::kNoOp;
  cost_model::GemmShape shape;  ///< on one GPU, dtype as run (fp8 for fp8 GEMMs)
  double time_scale = 1.0;      ///< the recipe's factor on the curve's time
  Seconds time{0};              ///< as priced: cost_model.gemm(shape) x time_scale
};

// One block's tensor-parallel communication under userbuffers, per GPU per microbatch.
struct UserbufferPricing {
  Seconds forward_comm{0}, backward_comm{0};        ///< the collectives alone
  Seconds forward_exposed{0}, backward_exposed{0};  ///< not hidden by their GEMMs
  Seconds forward_gemm_delta{0}, backward_gemm_delta{0};  ///< chunking and SMs given away
  /// The column-parallel inputs the backward re-gathers (beside their input-gradient GEMMs).
  std::vector<ir::OpId> regathered;
  /// The paired collectives as the layer's blocking total counts them (the activation
  /// dtype's bytes, without the re-gathers): what pairing removes from that total.
  Seconds forward_paired_as_counted{0}, backward_paired_as_counted{0};
};

// Scales the traced collectives so that they sum to `shown` (their own sum may differ from
// the priced total: an fp8 userbuffer moves fewer bytes than the call shows).
void scale_calls(std::vector<sim::BlockingCollective>& calls, Seconds shown) {
  Seconds total{0};
  for (const auto& call : calls) total += call.time;
  if (total.value() <= 0) return;
  for (auto& call : calls) call.time = call.time * (shown / total);
}

// The roles of TE's ub_cfgs for a block's linears: the column-parallel linears reading the
// block's first distinct input are QKV, the second fc1; the first row-parallel linear is
// proj, the second fc2 (later ones, if a block has any, take fc1's and fc2's settings).
// Each collective is paired with the GEMMs of its role (tp_overlap.h). attention_only: only
// QKV and proj are userbuffers layers (a MoE block, whose expert-side collectives are the
// token dispatcher's, blocking). An fp8 buffer moves quantized_bytes per element (fp8 1,
// MXFP8 1 + 1/32; 0 when the run has no fp8 buffers).
template <class TpTime>
UserbufferPricing price_userbuffers(const ir::Graph& g, const std::vector<UserbufferGemm>& gemms,
                                    const std::set<ir::OpId>& column_inputs, const MegatronPlan& plan,
                                    std::int64_t tp, int sms, const cost_model::CostModel& cost_model,
                                    TpTime tp_time, bool attention_only, double quantized_bytes) {
  using R = TpOverlapGemmRole;
  using cost_model::Collective;
  std::map<ir::OpId, int> row_index;  // forward row-parallel dot -> 0 (proj), 1 (fc2), ...
  for (const UserbufferGemm& u : gemms) {
    const Op& op = g.op(u.op);
    if (op.phase == Phase::kForward && contracts_sharded(op)) {
      row_index.emplace(u.op, static_cast<int>(row_index.size()));
    }
  }
  auto column_index = [&](const Op& forward) {
    const auto it = column_inputs.find(forward.inputs[0]);
    ALPASIM_CHECK(it != column_inputs.end()) << forward.name << ": column input not recorded";
    return static_cast<int>(std::distance(column_inputs.begin(), it));
  };
  // One collective and the GEMMs beside it.
  struct Pair {
    R role;
    bool backward = false;
    Collective collective = Collective::kAllGather;
    std::int64_t bytes = 0;
    int splits = 1;
    std::int64_t counted_bytes = 0;  ///< in the activation dtype, as the blocking total has it
    Seconds gemm{0}, gemm_chunked{0};
  };
  std::map<std::pair<int, int>, Pair> pairs;  // (role, index of its input / output) -> pair
  UserbufferPricing out;
  for (const UserbufferGemm& u : gemms) {
    const Op& op = g.op(u.op);
    const bool forward = op.phase == Phase::kForward;
    const Op& linear = forward ? op : g.op(op.source);
    if (linear.kind != OpKind::kDot || linear.phase != Phase::kForward) continue;
    std::optional<R> role;
    int index = 0;
    Collective collective = Collective::kAllGather;
    std::int64_t bytes = 0, elements = 0;
    if (is_column_parallel(linear)) {
      index = column_index(linear);
      const bool qkv = index == 0;
      bytes = g.op(linear.inputs[0]).out.bytes();
      elements = g.op(linear.inputs[0]).out.num_elements();
      if (forward) {
        role = qkv ? R::kQkvFprop : R::kFc1Fprop;
      } else if (op.grad_role == ir::GradRole::kInputGrad) {
        role = qkv ? R::kQkvDgrad : R::kFc1Dgrad;  // beside the input's re-gather
      } else {
        role = qkv ? R::kQkvWgrad : R::kFc1Wgrad;  // beside the input gradient's scatter
        collective = Collective::kReduceScatter;
      }
    } else if (const auto it = row_index.find(linear.id); it != row_index.end()) {
      index = it->second;
      const bool proj = index == 0;
      bytes = linear.out.bytes();
      elements = linear.out.num_elements();
      if (forward) {
        role = proj ? R::kProjFprop : R::kFc2Fprop;
        collective = Collective::kReduceScatter;
      } else if (op.grad_role == ir::GradRole::kInputGrad) {
        role = proj ? R::kProjDgrad : R::kFc2Dgrad;  // after the output gradient's gather
      }
    }
    if (!role || (attention_only && index > 0)) continue;
    const TpOverlapGemm& setting = plan.tp_comm_overlap_cfg[*role];
    const int splits = tp_overlap_splits(setting, tp);
    cost_model::GemmShape chunk = u.shape;
    chunk.m = std::max<std::int64_t>(1, (chunk.m + splits - 1) / splits);  // m: the tokens
    const Seconds chunked = cost_model.gemm(chunk).time * (u.time_scale * static_cast<double>(splits));
    const auto [it, first] = pairs.try_emplace({static_cast<int>(*role), index});
    Pair& p = it->second;
    if (first && (*role == R::kQkvDgrad || *role == R::kFc1Dgrad)) {
      out.regathered.push_back(linear.inputs[0]);
    }
    p.role = *role;
    p.splits = splits;
    p.counted_bytes = bytes;
    // Transformer Engine's buffer precision in an fp8 run: every all-gather buffer holds the
    // quantized tensor, and a pipelined reduce-scatter's when its fp8_buf says so; the
    // others the activation dtype (quantized_bytes per element; 0: no fp8 buffers).
    const bool fp8_buffer = collective == Collective::kAllGather ||
                            (setting.fp8_buf && setting.method == TpOverlapMethod::kPipeline);
    if (fp8_buffer && quantized_bytes > 0) {
      bytes = static_cast<std::int64_t>(std::ceil(static_cast<double>(elements) * quantized_bytes));
    }
    p.backward = !forward;
    p.collective = collective;
    p.bytes = bytes;
    p.gemm += u.time;
    p.gemm_chunked += chunked;
  }
  for (const auto& [key, p] : pairs) {
    const TpOverlapGemm& setting = plan.tp_comm_overlap_cfg[p.role];
    TpOverlapInput in;
    in.gemm_chunked = p.gemm_chunked;
    in.comm = tp_time(p.collective, p.bytes);
    in.reduce_scatter = p.collective == Collective::kReduceScatter;
    in.tp = tp;
    in.splits = p.splits;
    in.sms = sms;
    if (setting.method == TpOverlapMethod::kRingExchange && in.reduce_scatter) {
      // The summing kernel reads the tp partials of this rank's share and writes the share.
      in.final_reduce = cost_model.memory_bound(Bytes(p.bytes + p.bytes / tp));
    }
    const TpOverlapResult r = overlap_with_userbuffers(setting, in);
    (p.backward ? out.backward_comm : out.forward_comm) += in.comm;
    (p.backward ? out.backward_exposed : out.forward_exposed) += r.exposed;
    (p.backward ? out.backward_gemm_delta : out.forward_gemm_delta) += r.gemm - p.gemm;
    // The re-gathers are not in the blocking totals (the pairing adds them).
    if (p.role != R::kQkvDgrad && p.role != R::kFc1Dgrad) {
      (p.backward ? out.backward_paired_as_counted : out.forward_paired_as_counted) +=
          tp_time(p.collective, p.counted_bytes);
    }
  }
  return out;
}

}  // namespace

core::Result<std::vector<int>> parse_pipeline_layout(std::string_view layout, std::int64_t chunks,
                                                     std::int64_t blocks) {
  auto bad = [&](const std::string& what) {
    return core::invalid_argument("/search/megatron/pipeline_model_parallel_layout: " + what + " (in \"" +
                                  std::string(layout) + "\")");
  };
  // Expand repetitions: a recursive descent over atoms (a token or a parenthesised group),
  // each optionally followed by '*' and a count. The expansion is bounded (a layout names
  // at most every block and two more layers per chunk).
  const std::size_t limit = static_cast<std::size_t>(blocks + 3 * chunks + 16);
  std::size_t at = 0;
  int depth = 0;
  std::string error;
  auto fail = [&](std::string what) {
    error = std::move(what);
    return false;
  };
  std::function<bool(std::string*, bool)> sequence = [&](std::string* out, bool in_group) -> bool {
    while (at < layout.size()) {
      const char c = layout[at];
      if (c == ')') {
        if (!in_group) return fail("')' without '('");
        return true;
      }
      std::string atom;
      if (c == '(') {
        if (++depth > 16) return fail("groups nested deeper than 16");
        ++at;
        if (!sequence(&atom, true)) return false;
        --depth;
        if (at >= layout.size() || layout[at] != ')') return fail("'(' without ')'");
        ++at;
      } else if (c == 'E' || c == 't' || c == 'L' || c == '|') {
        atom = std::string(1, c);
        ++at;
      } else if (c == 'm') {
        return fail("multi-token-prediction layers ('m') are not modelled");
      } else if (c == ' ' || c == ',' || c == '\t' || c == '\n') {
        ++at;  // cosmetic, as in Megatron-Core ("Et*3|(tt|)*29,m|L")
        continue;
      } else {
        return fail(std::string("unexpected '") + c + "' (expected E, t, L, |, (, ) or *n)");
      }
      std::int64_t repeat = 1;
      if (at < layout.size() && layout[at] == '*') {
        ++at;
        std::int64_t n = 0;
        const std::size_t digits = at;
        while (at < layout.size() && layout[at] >= '0' && layout[at] <= '9') {
          n = std::min<std::int64_t>(10 * n + (layout[at] - '0'), 1000000000);  // saturates
          ++at;
        }
        if (at == digits || n < 1) return fail("'*' needs a positive count");
        repeat = n;
      }
      if (atom.empty()) continue;  // "()*n" adds nothing, however large n
      for (std::int64_t r = 0; r < repeat; ++r) {
        if (out->size() + atom.size() > limit) return fail("longer than the model's layers");
        *out += atom;
      }
    }
    if (in_group) return fail("'(' without ')'");
    return true;
  };
  std::string flat;
  if (!sequence(&flat, false)) return bad(error);
  std::vector<std::string> stages(1);
  for (const char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  if (static_cast<std::int64_t>(stages.size()) != chunks) {
    return bad(std::to_string(stages.size()) + " stages, expected pp·interleave = " + std::to_string(chunks));
  }
  std::vector<int> layers(stages.size(), 0);
  std::int64_t total_blocks = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string& st = stages[i];
    const auto count = [&](char c) { return std::count(st.begin(), st.end(), c); };
    if (count('E') > 0 && (i != 0 || st.front() != 'E' || count('E') != 1)) {
      return bad("the embedding 'E' must open the first stage, once");
    }
    if (count('L') > 0 && (i + 1 != stages.size() || st.back() != 'L' || count('L') != 1)) {
      return bad("the loss 'L' must close the last stage, once");
    }
    if (st.empty()) {
      return bad("stage " + std::to_string(i) + " holds no layer (legal in Megatron-Core, not modelled here)");
    }
    total_blocks += count('t');
    layers[i] = static_cast<int>(st.size());
  }
  if (stages.front().front() != 'E') return bad("the first stage must open with the embedding 'E'");
  if (stages.back().back() != 'L') return bad("the last stage must close with the loss 'L'");
  if (total_blocks != blocks) {
    return bad(std::to_string(total_blocks) + " transformer blocks 't', the model has " + std::to_string(blocks));
  }
  return layers;
}

// Transformer blocks (plus the embedding on the first and the head on the last) of each of
// the p·v model chunks: equal, as Megatron-LM's uneven-split flags say, or as the layout.
core::Result<std::vector<int>> chunk_layers(const MegatronPlan& plan, std::int64_t blocks) {
  auto bad = [](const std::string& field, const std::string& what) {
    return core::invalid_argument("/search/megatron/" + field + ": " + what);
  };
  const std::int64_t chunks = plan.pp * plan.interleave;
  if (!plan.pipeline_layout.empty()) {
    if (plan.first_stage_layers > 0 || plan.last_stage_layers > 0 || plan.account_for_embedding ||
        plan.account_for_loss) {
      return bad("pipeline_model_parallel_layout",
                 "cannot be combined with first_stage_layers, last_stage_layers or the account_for_* splits");
    }
    return parse_pipeline_layout(plan.pipeline_layout, chunks, blocks);
  }
  const bool uneven = plan.first_stage_layers > 0 || plan.last_stage_layers > 0;
  if (uneven && (plan.interleave > 1 || plan.pp < 2)) {
    return bad(plan.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers",
               "needs pp > 1 and interleave 1 (as Megatron-LM's uneven pipeline split)");
  }
  // Megatron-LM's --decoder-first/last-pipeline-num-layers: those stages get the given
  // blocks, the others split the rest evenly.
  const std::int64_t first_blocks = uneven && plan.first_stage_layers > 0 ? plan.first_stage_layers : -1;
  const std::int64_t last_blocks = uneven && plan.last_stage_layers > 0 ? plan.last_stage_layers : -1;
  const std::int64_t middle_chunks = chunks - (first_blocks >= 0) - (last_blocks >= 0);
  const std::int64_t middle_blocks =
      blocks - std::max<std::int64_t>(first_blocks, 0) - std::max<std::int64_t>(last_blocks, 0);
  // Megatron-LM's --account-for-embedding-in-pipeline-split / --account-for-loss-in-
  // pipeline-split: the embedding (loss) counts as one block of the first (last) chunk, and
  // blocks + those split evenly into the p·v chunks (NeMo's Llama 3.1 405B: 126 + 2 = 64 x 2).
  const std::int64_t accounted = (plan.account_for_embedding ? 1 : 0) + (plan.account_for_loss ? 1 : 0);
  if (accounted > 0) {
    if (uneven) {
      return bad("account_for_embedding_in_pipeline_split",
                 "cannot be combined with first_stage_layers / last_stage_layers");
    }
    const std::int64_t per_chunk = (blocks + accounted) / chunks;
    // A chunk may end up with the embedding or the head alone, not with less than nothing.
    if ((blocks + accounted) % chunks != 0 || per_chunk < (chunks == 1 ? accounted : 1)) {
      return bad(plan.account_for_embedding ? "account_for_embedding_in_pipeline_split"
                                            : "account_for_loss_in_pipeline_split",
                 std::to_string(blocks) + " layers + " + std::to_string(accounted) +
                     " do not split evenly into pp·interleave = " + std::to_string(chunks) +
                     " model chunks");
    }
    std::vector<int> accounted_chunks(static_cast<std::size_t>(chunks), static_cast<int>(per_chunk));
    if (plan.account_for_embedding) accounted_chunks.front() -= 1;
    if (plan.account_for_loss) accounted_chunks.back() -= 1;
    accounted_chunks.front() += 1;
    accounted_chunks.back() += 1;
    return accounted_chunks;
  }
  if (middle_blocks < middle_chunks || (middle_chunks > 0 && middle_blocks % middle_chunks != 0) ||
      (middle_chunks == 0 && middle_blocks != 0)) {
    if (!uneven) {
      return bad("interleave", std::to_string(blocks) + " layers do not split evenly into pp·" +
                                   "interleave = " + std::to_string(chunks) + " model chunks");
    }
    return bad(plan.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers",
               "the other " + std::to_string(middle_chunks) + " stages cannot split the remaining " +
                   std::to_string(middle_blocks) + " layers evenly");
  }
  std::vector<int> layers_per_chunk(static_cast<std::size_t>(chunks),
                                    static_cast<int>(middle_chunks > 0 ? middle_blocks / middle_chunks : 0));
  if (first_blocks >= 0) layers_per_chunk.front() = static_cast<int>(first_blocks);
  if (last_blocks >= 0) layers_per_chunk.back() = static_cast<int>(last_blocks);
  layers_per_chunk.front() += 1;
  layers_per_chunk.back() += 1;

  return layers_per_chunk;
}

core::Result<LoweredPlan> lower_megatron_plan(const ir::ModelConfig& model,
                                              const TrainingSetup& training,
                                              const MegatronPlan& plan,
                                              const cost_model::CostModel& cost_model) {
  const auto& cluster = cost_model.spec();
  auto bad = [](const std::string& field, const std::string& what) {
    return core::invalid_argument("/search/megatron/" + field + ": " + what);
  };
  for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"tp", plan.tp},
                                {"pp", plan.pp}, {"dp", plan.dp}, {"cp", plan.cp},
                                {"microbatch_size", plan.microbatch_size},
                                {"interleave", plan.interleave}}) {
    if (v < 1) return bad(name, "expected an integer >= 1, got " + std::to_string(v));
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    return bad("zero_stage", "expected 0..3, got " + std::to_string(plan.zero_stage));
  }
  const std::int64_t cp = plan.cp;
  const std::int64_t num_gpus = plan.tp * plan.pp * cp * plan.dp;
  if (num_gpus != cluster.num_gpus()) {
    return bad("tp", std::string(cp > 1 ? "tp·pp·cp·dp" : "tp·pp·dp") + " = " +
                         std::to_string(num_gpus) + " GPUs but the cluster has " +
                         std::to_string(cluster.num_gpus()));
  }
  const std::int64_t per_step = plan.dp * plan.microbatch_size;
  if (training.global_batch_size <= 0 || training.global_batch_size % per_step != 0) {
    return bad("microbatch_size", "global batch " + std::to_string(training.global_batch_size) +
                                      " is not a multiple of dp·microbatch_size = " +
                                      std::to_string(per_step));
  }
  const std::int64_t num_microbatches = training.global_batch_size / per_step;
  if (const auto* w = std::get_if<ir::WideResNetConfig>(&model.spec); w && plan.tp > 1) {
    return core::unimplemented(
        "/search/megatron/tp: tensor parallelism of wide_resnet convolutions is not modelled; "
        "use tp = 1");
  }
  if (plan.sequence_parallel && plan.tp == 1) {
    return bad("sequence_parallel", "needs tp > 1");
  }
  // Expert parallelism (Megatron-Core's parallel folding of the MoE layers).
  const auto* moe_config = std::get_if<ir::TransformerConfig>(&model.spec);
  if (moe_config != nullptr && moe_config->kv_lora_rank > 0 && plan.tp > 1) {
    // Megatron-Core runs MLA's duplicated down projections on each rank's s/tp tokens
    // (sequence parallelism) and gathers the small latents; the per-layer tp collectives
    // here assume h-wide column-parallel inputs. Not modelled, so refused.
    return bad("tp", "tensor parallelism with multi-head latent attention (model.kv_lora_rank) is not modelled");
  }
  const std::int64_t num_experts = moe_config != nullptr ? moe_config->num_experts : 0;
  const std::int64_t ep = plan.ep;
  const std::int64_t etp = plan.etp > 0 ? plan.etp : plan.tp;
  if (ep < 1) return bad("ep", "expected an integer >= 1, got " + std::to_string(ep));
  if (plan.etp < 0) return bad("etp", "expected an integer >= 1, got " + std::to_string(plan.etp));
  if (num_experts == 0 && (ep > 1 || plan.etp > 0)) {
    return bad(ep > 1 ? "ep" : "etp", "needs a mixture-of-experts model (num_experts > 0)");
  }
  if (num_experts > 0) {
    if (num_experts % ep != 0) {
      return bad("ep", "expected a divisor of num_experts " + std::to_string(num_experts) + ", got " +
                           std::to_string(ep));
    }
    const std::int64_t folded = plan.tp * cp * plan.dp;
    if (folded % (ep * etp) != 0) {
      return bad("ep", "ep·etp = " + std::to_string(ep) + "·" + std::to_string(etp) + " = " +
                           std::to_string(ep * etp) + " does not divide tp·cp·dp = " +
                           std::to_string(folded) +
                           " (Megatron-Core folds the expert ranks into those GPUs)");
    }
    if (moe_config->ffn_hidden_size % etp != 0) {
      return bad("etp", "expected a divisor of the experts' ffn_hidden_size " +
                            std::to_string(moe_config->ffn_hidden_size) + ", got " + std::to_string(etp));
    }
  }
  if (auto st = check_precision_on_gpu(training.dtype, training.block_scaled, cluster.gpu); !st.ok()) {
    return core::invalid_argument("/training/dtype: " + st.message());
  }
  if (training.block_scaled != BlockScaled::kNone) {
    const std::string name = precision_name(training.dtype, training.block_scaled);
    if (training.dtype != core::DType::kBf16) {
      return core::invalid_argument(std::string("/training/dtype: ") + name +
                                    " is a GEMM format of a bf16 run, not of " +
                                    std::string(core::dtype_name(training.dtype)));
    }
  }
  // Megatron-LM's own argument checks (megatron/training/arguments.py).
  if (plan.tp_comm_overlap && plan.tp > 1 && !plan.sequence_parallel) {
    return bad("tp_comm_overlap", "needs sequence_parallel (Megatron-LM requires it)");
  }
  if (plan.tp_comm_overlap && plan.tp > 1) {
    if (cluster.gpu.streaming_multiprocessors <= 0) {
      return bad("tp_comm_overlap", "the " + cluster.gpu.display_name +
                                        "'s SM count is unknown (cluster::GpuSpec)");
    }
    ALPASIM_RETURN_IF_ERROR(validate_tp_overlap_config(plan.tp_comm_overlap_cfg,
                                                       cluster.gpu.streaming_multiprocessors, plan.tp,
                                                       "/search/megatron/tp_comm_overlap_cfg"));
  }
  if (plan.overlap_param_gather && plan.zero_stage < 1) {
    return bad("overlap_param_gather",
               "needs the distributed optimizer (\"distributed_optimizer\": true or zero_stage >= 1)");
  }
  if (plan.overlap_param_gather && !plan.overlap_grad_reduce) {
    return bad("overlap_param_gather", "needs overlap_grad_reduce (Megatron-LM requires it)");
  }
  if (plan.ddp_bucket_size_params < 0) {
    return bad("ddp_bucket_size", "expected a parameter count >= 1, got " +
                                      std::to_string(plan.ddp_bucket_size_params));
  }

  // fp8 and the block-scaled formats (Transformer Engine's recipes): tensors, communication
  // and master weights stay bf16; only the transformer blocks' linear GEMMs run in the low
  // precision (below), with the casts and weight copies of recipe_bytes.
  const bool fp8 = training.dtype == core::DType::kFp8;
  const bool low_precision = fp8 || training.block_scaled != BlockScaled::kNone;
  const RecipeBytes recipe = recipe_bytes(fp8, training.block_scaled, cluster.gpu.fp8_gemm_any_layout);
  // NVFP4 GEMMs: the fp8 GEMM of the same shape at the fp4 peak (the same fraction of peak
  // at every size: no published fp4 GEMM curve is in validation/data).
  const double gemm_time_scale =
      training.block_scaled == BlockScaled::kNvfp4
          ? cluster.gpu.peak(core::DType::kFp8).value() / cluster.gpu.peak_fp4.value()
          : 1.0;
  const core::DType storage = core::storage_dtype(training.dtype);
  // Context parallelism: each GPU of a cp group holds s/cp tokens of every sequence (the
  // load-balanced causal split), so the graph is built at s/cp; its attention core, which
  // meets the keys of the whole sequence, is scaled by cp below.
  ir::ModelConfig local_model = model;
  if (cp > 1) {
    auto* t = std::get_if<ir::TransformerConfig>(&local_model.spec);
    if (t == nullptr) return bad("cp", "context parallelism needs a transformer");
    if (t->seq_len % (2 * cp) != 0) {
      return bad("cp", "sequence length " + std::to_string(t->seq_len) +
                           " is not a multiple of 2·cp = " + std::to_string(2 * cp) +
                           " (Megatron-Core splits each sequence into 2·cp chunks)");
    }
    if (t->learned_positions) {
      return bad("cp", "a learned position table with context parallelism is not modelled (the "
                       "graph at s/cp tokens would hold s/cp positions); rotary models only");
    }
    if (!t->fused_attention) {
      return bad("cp", "needs fused attention (Megatron-Core's context parallelism runs inside "
                       "Transformer Engine's flash attention)");
    }
    if (t->kv_lora_rank > 0) {
      // The ring's K/V chunks would be MLA's per-head keys and values (or its latent): not
      // modelled, so refused.
      return bad("cp", "context parallelism with multi-head latent attention (model.kv_lora_rank) is not modelled");
    }
    if (t->sliding_window > 0 && t->sliding_window < t->seq_len) {
      // The ring would skip the chunks outside every query's window (fewer exchanges and
      // tiles than the causal split this lowering prices): not modelled, so refused.
      return bad("cp", "context parallelism with sliding-window attention is not modelled "
                       "(model.sliding_window " + std::to_string(t->sliding_window) + " < seq_len " +
                       std::to_string(t->seq_len) + ")");
    }
    t->seq_len /= cp;
  }
  ir::BuildOptions build;
  build.microbatch_size = plan.microbatch_size;
  build.dtype = storage;
  ALPASIM_ASSIGN_OR_RETURN(ir::Graph forward, ir::build_forward_graph(local_model, build));
  const ir::Graph g = ir::derive_training_graph(forward, {training.optimizer, plan.recompute});
  const std::vector<ir::LayerStats> stats = ir::layer_stats(g);
  // Stored activations per forward op (bytes, before the tp split; summed per layer with
  // each op's split below). In low precision a forward tensor that only block linears'
  // backward GEMMs read is saved as their quantized copy (Transformer Engine keeps the fp8 /
  // block-scaled input for the weight gradient); one that other backward ops read too (a
  // flash-attention output O, which the kernel's backward needs in bf16) is saved in bf16
  // and quantized. Full precision: what ir::layer_stats counts.
  std::vector<double> saved_op_bytes(g.size(), 0.0);
  // The layer whose stored activations hold each saved tensor: its own, except a closed-form
  // block's tensor that only another layer's backward reads (the last block's output, the
  // head's layer-norm input: Megatron stores it for the final layer norm's backward, and the
  // block's closed form does not hold its own output), which that layer stores.
  std::vector<std::int32_t> saved_in_layer(g.size(), -1);
  {
    const double quantized = low_precision ? saved_input_bytes(fp8, training.block_scaled) : 0.0;
    // A flash-attention kernel's backward reads its output O (the graph's fused attention
    // recomputes the core from Q, K, V and needs no O, but the kernel does).
    const auto* transformer = std::get_if<ir::TransformerConfig>(&local_model.spec);
    const bool flash = low_precision && transformer != nullptr && transformer->fused_attention;
    // A GPT block's memory is Korthikanti's closed form (below), which holds its input: a
    // tensor of another layer that only such a block's backward reads is counted there.
    const bool gpt_blocks = transformer != nullptr && transformer->builtin == "gpt";
    auto formula_layer = [&](std::int32_t l) {
      const std::string& kind = g.layers[static_cast<std::size_t>(l)].kind;
      return gpt_blocks && kind != "prologue" && kind != "epilogue";
    };
    for (const Op& o : g.ops()) {
      if (o.phase != Phase::kForward || o.kind == OpKind::kParameter) continue;
      bool linear = false;
      bool other = flash && o.kind == OpKind::kDot && o.selective_recompute && !o.fused_attention;
      bool saved = false;
      bool read_by_own_layer = false;
      std::int32_t reader_layer = o.layer;
      for (ir::OpId c : g.consumers(o.id)) {
        const Op& consumer = g.op(c);
        if (consumer.phase != Phase::kBackward && consumer.phase != Phase::kRecompute) continue;
        if (consumer.layer != o.layer && formula_layer(consumer.layer)) continue;
        saved = true;
        if (consumer.layer == o.layer) read_by_own_layer = true;
        else reader_layer = consumer.layer;
        if (low_precision) (is_block_linear(g, consumer, g.layers.size()) ? linear : other) = true;
      }
      saved_in_layer[static_cast<std::size_t>(o.id)] =
          formula_layer(o.layer) && !read_by_own_layer ? reader_layer : o.layer;
      const double elements = static_cast<double>(o.out.num_elements());
      saved_op_bytes[static_cast<std::size_t>(o.id)] =
          !low_precision ? (saved ? static_cast<double>(o.out.bytes()) : 0.0)
                         : (other ? static_cast<double>(o.out.bytes()) : 0.0) + (linear ? quantized * elements : 0.0);
    }
  }
  const std::size_t num_layers = g.layers.size();
  const std::int64_t tp = plan.tp;
  const std::int64_t dtype_bytes = core::dtype_bytes(storage);

  // ---- Which tensors are split across the tp group. Forward: dots by their output
  // letters, other ops when an activation input is split; shapes seen split / replicated
  // then classify backward and input-less ops.
  std::vector<char> sharded(g.size(), 0);
  std::map<std::vector<std::int64_t>, std::pair<bool, bool>> shape_seen;  // split, replicated
  auto classify_by_shape = [&](const Op& op, bool fallback) {
    auto it = shape_seen.find(op.out.shape);
    if (it == shape_seen.end()) return fallback;
    if (it->second.first && it->second.second) return fallback;
    return it->second.first;
  };
  if (tp > 1) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Op& op = g.op(static_cast<ir::OpId>(i));
      if (op.phase != Phase::kForward || op.is_source()) continue;
      bool split = false;
      bool has_activation_input = false;
      if (op.is_einsum()) {
        split = has_sharded_letter(op.dot.out);
      } else if (op.kind != OpKind::kEmbedding) {
        for (ir::OpId in : op.inputs) {
          has_activation_input |= !g.op(in).is_source();
          if (!g.op(in).is_source() && sharded[static_cast<std::size_t>(in)]) split = true;
        }
      }
      sharded[i] = split ? 1 : 0;
      // An operator that reads no activation (a dropout mask drawn for the attention
      // probabilities) is classified below by the shapes its neighbours have; recording it
      // as replicated here would make its own shape look replicated too.
      if (!op.is_einsum() && op.kind != OpKind::kEmbedding && !has_activation_input) continue;
      auto& seen = shape_seen[op.out.shape];
      (split ? seen.first : seen.second) = true;
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Op& op = g.op(static_cast<ir::OpId>(i));
      if (op.phase == Phase::kForward) {
        bool has_activation_input = false;
        for (ir::OpId in : op.inputs) has_activation_input |= !g.op(in).is_source();
        if (!op.is_source() && !op.is_einsum() && !has_activation_input &&
            op.kind != OpKind::kEmbedding) {
          sharded[i] = classify_by_shape(op, false) ? 1 : 0;
        }
        continue;
      }
      const bool from_source =
          op.source != ir::kNoOp && sharded[static_cast<std::size_t>(op.source)];
      if (op.is_einsum()) {
        sharded[i] = has_sharded_letter(op.dot.out) ? 1 : 0;
      } else if (op.phase == Phase::kRecompute) {
        sharded[i] = from_source ? 1 : 0;
      } else {
        sharded[i] = classify_by_shape(op, from_source) ? 1 : 0;
      }
    }
  }

  // ---- Parameters per layer and per GPU.
  std::vector<char> param_split(g.size(), 0);
  std::int64_t vocab = 0;
  if (const auto* t = std::get_if<ir::TransformerConfig>(&model.spec)) vocab = t->vocab_size;
  if (tp > 1) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Op& op = g.op(static_cast<ir::OpId>(i));
      if (op.phase != Phase::kForward) continue;
      if (op.is_einsum() && op.inputs.size() >= 2) {
        const ir::OpId rhs = op.inputs[1];
        if (g.op(rhs).kind == OpKind::kParameter && has_sharded_letter(op.dot.rhs)) {
          param_split[static_cast<std::size_t>(rhs)] = 1;
        }
        if (op.inputs.size() >= 3 && g.op(op.inputs[2]).kind == OpKind::kParameter &&
            has_sharded_letter(op.dot.out)) {
          param_split[static_cast<std::size_t>(op.inputs[2])] = 1;
        }
      }
      if (op.kind == OpKind::kEmbedding && !op.inputs.empty()) {
        const Op& table = g.op(op.inputs[0]);
        if (table.kind == OpKind::kParameter && !table.out.shape.empty() &&
            table.out.shape[0] == vocab) {
          param_split[static_cast<std::size_t>(op.inputs[0])] = 1;
        }
      }
    }
  }
  // Stored activations per layer and GPU: a tensor split across the tp group (every one
  // under sequence parallelism) takes 1/t of its bytes, a replicated one (without sequence
  // parallelism: the embedding's dropout mask, the head's layer-norm input and output) all
  // of them on every GPU. Each is counted in the layer that stores it (saved_in_layer).
  std::vector<std::int64_t> saved_activation(g.layers.size(), 0);
  {
    std::vector<double> bytes(g.layers.size(), 0.0);
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (saved_op_bytes[i] <= 0.0) continue;
      const bool split = tp > 1 && (sharded[i] != 0 || plan.sequence_parallel);
      bytes[static_cast<std::size_t>(saved_in_layer[i])] += saved_op_bytes[i] / static_cast<double>(split ? tp : 1);
    }
    for (std::size_t l = 0; l < bytes.size(); ++l) saved_activation[l] = static_cast<std::int64_t>(std::ceil(bytes[l]));
  }
  // A backward operator producing (part of) the gradient of a parameter split across the
  // tp group.
  const std::vector<ir::OpId> gradient_param = ir::weight_gradient_parameters(g);
  auto split_param_gradient = [&](const Op& op) {
    const ir::OpId param = gradient_param[static_cast<std::size_t>(op.id)];
    return op.phase == Phase::kBackward && param != ir::kNoOp && param_split[static_cast<std::size_t>(param)] != 0;
  };
  // Gradient accumulation across microbatches (Megatron-LM's DistributedDataParallel of
  // 2021, megatron/model/distributed.py): after each microbatch's backward a hook runs
  // param.main_grad.add_(param.grad) per parameter tensor: reads the fresh gradient and
  // main_grad, writes main_grad. main_grad has the parameters' dtype for fp16 training and
  // is fp32 for bf16 (Megatron forces accumulate_allreduce_grads_in_fp32 with bf16). With
  // --gradient-accumulation-fusion the linear weights accumulate inside the wgrad GEMM.
  const std::int64_t main_grad_bytes = storage == core::DType::kBf16 ? 4 : dtype_bytes;
  const std::int64_t accumulate_bytes_per_param = ir::gradient_accumulation_bytes_per_parameter(storage);
  // (A Megatron model has no convolution: its kernel weights are its GEMMs'.)
  const std::vector<char> gemm_weight = ir::kernel_weight_parameters(g);
  std::vector<Seconds> grad_accumulation(num_layers, Seconds{0});
  std::vector<LayerParams> params(num_layers);
  // Low precision: block linear weights per GPU, kept as quantized copies (recipe_bytes:
  // fp8 the weight and, on Hopper, its transpose, 1 byte each) beside the bf16 ones; cast once per
  // iteration after the optimizer step (Transformer Engine caches them across microbatches).
  std::vector<std::int64_t> quantized_weights(num_layers, 0);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const Op& op = g.op(static_cast<ir::OpId>(i));
    if (op.kind != OpKind::kParameter) continue;
    auto& p = params[static_cast<std::size_t>(op.layer)];
    const std::int64_t n = op.out.num_elements();
    const bool expert = num_experts > 0 && is_expert_op(op);
    const std::int64_t local = expert ? ceil_div(n, ep * etp) : param_split[i] ? ceil_div(n, tp) : n;
    p.total += n;
    p.per_gpu += local;
    if (expert) p.experts_per_gpu += local;
    if (!op.out.shape.empty() && op.out.shape[0] == vocab && op.layer == 0) {
      p.word_embedding_per_gpu += local;
    }
    if (!(plan.gradient_accumulation_fusion && gemm_weight[i])) {
      grad_accumulation[static_cast<std::size_t>(op.layer)] +=
          cost_model.memory_bound(Bytes(local * accumulate_bytes_per_param));
    }
    if (low_precision && gemm_weight[i] && op.layer > 0 &&
        static_cast<std::size_t>(op.layer) + 1 < num_layers) {
      quantized_weights[static_cast<std::size_t>(op.layer)] += local;
    }
  }

  // ---- Tensor-parallel collectives (priced on the first stage's tp group).
  std::vector<std::int64_t> tp_ids;
  for (std::int64_t r = 0; r < tp; ++r) tp_ids.push_back(r);
  std::optional<cluster::GroupInfo> tp_group;
  if (tp > 1) {
    ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo info, cost_model.group(tp_ids));
    tp_group = info;
  }
  auto tp_time = [&](cost_model::Collective c, std::int64_t bytes) {
    return cost_model.collective(c, Bytes(bytes), *tp_group).time;
  };
  // A priced collective as the trace shows it: `bytes` the buffer per GPU, `e` its estimate.
  auto traced = [](cost_model::Collective c, std::int64_t bytes, std::int64_t group,
                   const cost_model::CollectiveEstimate& e, const std::string& where,
                   const char* category) {
    return sim::BlockingCollective{cost_model::collective_name(c), bytes, static_cast<int>(group),
                                   cost_model::algorithm_text(e), e.time, where, category};
  };
  // One tensor-parallel collective as the trace shows it (its time is tp_time's).
  auto tp_call = [&](cost_model::Collective c, std::int64_t bytes, const std::string& where) {
    return traced(c, bytes, tp, cost_model.collective(c, Bytes(bytes), *tp_group), where, "tp_collective");
  };

  // ---- Per-layer costs.
  std::vector<LoweredLayer> layers(num_layers);
  std::vector<Seconds> attention_forward_s(num_layers, Seconds{0});   // cp > 1: the core's
  std::vector<Seconds> attention_backward_s(num_layers, Seconds{0});  // time per phase
  std::vector<std::int64_t> optimizer_bytes(num_layers, 0);
  for (std::size_t l = 0; l < num_layers; ++l) {
    layers[l].kind = g.layers[l].kind;
    layers[l].costs.name = g.layers[l].name;
  }
  // Transformer Engine's userbuffers (tp_comm_overlap) pair each tensor-parallel
  // collective of a transformer block with its own GEMM: the block's linears as priced.
  const bool userbuffers = plan.tp_comm_overlap && tp > 1;
  // Bytes per element of an fp8 userbuffer: per-tensor fp8 and MXFP8 (its E8M0 scale per 32)
  // as Transformer Engine quantizes them; NVFP4 runs' buffers are left in the activation
  // dtype (not modelled).
  const double userbuffer_quantized_bytes =
      training.block_scaled == BlockScaled::kMxfp8 ? 1.0 + 1.0 / 32 : fp8 ? 1.0 : 0.0;
  std::vector<std::vector<UserbufferGemm>> userbuffer_gemms(num_layers);
  std::vector<std::set<ir::OpId>> column_inputs(num_layers);
  std::vector<std::vector<std::int64_t>> row_outputs(num_layers);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const Op& op = g.op(static_cast<ir::OpId>(i));
    if (op.is_source()) continue;
    const auto l = static_cast<std::size_t>(op.layer);
    LoweredLayer& L = layers[l];
    if (op.phase == Phase::kOptimizer) {
      optimizer_bytes[l] += op.bytes_read + op.bytes_written;
      continue;
    }
    OpTimes t;
    if (num_experts > 0 && (op.kind == OpKind::kMoeDispatch || op.kind == OpKind::kMoeCombine)) {
      // Token routing: the graph writes GShard's one-hot einsums (tokens x experts x capacity
      // x hidden multiply-adds, as Alpa's model runs them); Megatron-Core permutes tokens by
      // index instead: a memory-bound gather / scatter that reads and writes the token-side
      // tensors (those with the hidden letter 'h': the tokens and their dispatched copies),
      // split over tp by sequence parallelism. The routing masks (no 'h') are indices.
      std::int64_t bytes = 0;
      const std::string* letters[] = {&op.dot.lhs, &op.dot.rhs, &op.dot.out};
      const std::int64_t sizes[] = {g.op(op.inputs[0]).out.bytes(), g.op(op.inputs[1]).out.bytes(),
                                    op.out.bytes()};
      for (int k = 0; k < 3; ++k) {
        if (letters[k]->find('h') != std::string::npos) bytes += sizes[k];
      }
      t.memory_bound = cost_model.memory_bound(Bytes(ceil_div(bytes, tp)));
    } else if (op.is_einsum()) {
      auto shape = num_experts > 0 && is_expert_op(op) ? expert_gemm(g, op, tp, ep, etp)
                                                       : sharded_gemm(g, op, tp);
      // The non-parameter operand of a forward linear, and the incoming gradient of its
      // input-gradient GEMM: what Transformer Engine casts to fp8 (per GPU, elements).
      std::int64_t cast_in_fwd = 0, cast_grad = 0;
      double time_scale = 1.0;
      if (low_precision && is_block_linear(g, op, num_layers)) {
        time_scale = gemm_time_scale;
        shape.dtype = core::DType::kFp8;
        const auto local = [&](ir::OpId x) {
          const std::int64_t n = g.op(x).out.num_elements();
          return tp > 1 && (sharded[static_cast<std::size_t>(x)] || plan.sequence_parallel) ? ceil_div(n, tp) : n;
        };
        if (op.phase == Phase::kForward) {
          for (ir::OpId x : op.inputs) {
            if (g.op(x).kind != OpKind::kParameter) cast_in_fwd += local(x);
          }
        } else if (op.phase == Phase::kBackward && op.source != ir::kNoOp &&
                   g.op(op.source).kind != OpKind::kParameter) {
          for (ir::OpId x : op.inputs) {  // the output gradient (the other is the weight)
            if (g.op(x).kind == OpKind::kParameter) continue;
            cast_grad += local(x);
            break;
          }
        }
      }
      // A causal flash kernel computes only the tiles on or below the diagonal. With cp the
      // graph holds s/cp keys and the time is scaled by cp below: the share is that of all
      // s keys (the load-balanced chunks see the whole causal triangle between them).
      ir::FlashDotRole flash = ir::flash_dot_role(g, op);
      if (cp > 1 && flash.share.work_fraction < 1.0) {
        if (const auto* whole = std::get_if<ir::TransformerConfig>(&model.spec)) {
          flash.share.work_fraction = ir::causal_tile_fraction(whole->seq_len);
        }
      }
      // A dot of a flash kernel: its share of the fused kernel's time (the attention curve
      // calibrated from measured kernels), the work fraction included.
      const auto est = flash.in_kernel ? cost_model.compute().flash_attention_dot({shape, flash.share})
                                       : cost_model.gemm(shape);
      t.gemm = Seconds(est.time.value() * time_scale);
      t.flops = cost_model::gemm_flops(shape);
      if (userbuffers && (layers[l].kind == "transformer" || layers[l].kind == "moe_transformer") &&
          !flash.in_kernel && !(num_experts > 0 && is_expert_op(op)) &&
          (op.phase == Phase::kForward || op.phase == Phase::kBackward)) {
        userbuffer_gemms[l].push_back({static_cast<ir::OpId>(i), shape, time_scale, t.gemm});
      }
      // Forward: the fp8 copy of the input is written by the kernel that produces it (a
      // fused cast: +1 byte per element). Backward: the output gradient is cast to fp8
      // and, on Hopper, transposed for the two GEMMs (read 2 bytes, write 2 x 1 byte per
      // element; one on Blackwell).
      // The amax reductions ride in the same kernels. Block-scaled formats: recipe_bytes.
      if (cast_in_fwd + cast_grad > 0) {
        t.memory_bound = cost_model.memory_bound(Bytes(static_cast<std::int64_t>(
            std::ceil(static_cast<double>(cast_in_fwd) * recipe.input_cast +
                      static_cast<double>(cast_grad) * recipe.grad_cast))));
      }
      // Experts without expert tensor parallelism (etp 1) are whole on each GPU: Megatron-
      // Core's token dispatcher gathers and scatters over the expert-tensor-parallel group
      // only, so their linears need no tensor-parallel collective.
      const bool whole_experts = num_experts > 0 && is_expert_op(op) && etp == 1;
      if (tp > 1 && op.phase == Phase::kForward && !whole_experts) {
        if (contracts_sharded(op)) row_outputs[l].push_back(op.out.bytes());
        if (is_column_parallel(op)) column_inputs[l].insert(op.inputs[0]);
      }
    } else if (op.kind == OpKind::kConv2d) {
      cost_model::ConvShape c;
      c.batch = op.conv.n;
      c.in_channels = op.conv.ci;
      c.out_channels = op.conv.co;
      c.height = op.conv.h;
      c.width = op.conv.w;
      c.kernel_h = op.conv.kh;
      c.kernel_w = op.conv.kw;
      c.stride = op.conv.stride;
      c.padding = op.conv.kh / 2;
      c.dtype = op.out.dtype;
      const auto est = cost_model.conv(c);
      t.gemm = est.time;
      t.flops = Flops(static_cast<double>(op.flops));
    } else {
      if (op.function == "reshape") continue;  // a view: no kernel
      // Inside a flash-attention kernel (softmax, dropout, their gradients): on chip, no
      // kernel of its own.
      if (ir::runs_in_flash_attention(g, op)) continue;
      std::int64_t bytes = ir::memory_traffic_bytes(g, op);
      if (tp > 1 && (sharded[i] || plan.sequence_parallel)) {
        bytes = ceil_div(bytes, tp);
      } else if (tp > 1 && split_param_gradient(op)) {
        // The gradient of a split parameter (the vocabulary-parallel embedding table) is
        // written as its split; it reads the whole input gradient unless an input is split
        // (the tied table's two gradients, summed).
        bool split_input = false;
        for (ir::OpId in : op.inputs) {
          split_input |= sharded[static_cast<std::size_t>(in)] != 0 || split_param_gradient(g.op(in));
        }
        bytes = ir::split_memory_traffic_bytes(g, op, split_input ? tp : 1, tp);
      }
      t.memory_bound = cost_model.memory_bound(Bytes(bytes));
      if (op.kind == OpKind::kEmbedding && tp > 1 && op.phase == Phase::kForward &&
          op.inputs.size() >= 1 && param_split[static_cast<std::size_t>(op.inputs[0])]) {
        row_outputs[l].push_back(op.out.bytes());  // vocab-parallel lookup all-reduces
      }
    }
    // Context parallelism: the attention core of a GPU's s/cp queries meets all s keys
    // (cp ring steps of the local block's size); everything else is per token.
    const bool attention_core =
        op.selective_recompute || (op.source != ir::kNoOp && g.op(op.source).selective_recompute);
    if (cp > 1 && attention_core) {
      t.gemm = t.gemm * static_cast<double>(cp);
      t.memory_bound = t.memory_bound * static_cast<double>(cp);
      t.flops = Flops(t.flops.value() * static_cast<double>(cp));
      const Seconds both = t.gemm + t.memory_bound;
      if (op.phase == Phase::kForward) attention_forward_s[l] += both;
      if (op.phase == Phase::kBackward) attention_backward_s[l] += both;
    }
    switch (op.phase) {
      case Phase::kForward:
        L.gemm_forward_s += t.gemm;
        L.memory_bound_forward_s += t.memory_bound;
        if (op.is_model_matmul()) L.costs.forward_flops += t.flops;
        break;
      case Phase::kRecompute:
        L.recompute_s += t.gemm + t.memory_bound;
        if (op.is_model_matmul()) L.recompute_flops += t.flops;
        break;
      case Phase::kBackward:
        L.gemm_backward_s += t.gemm;
        L.memory_bound_backward_s += t.memory_bound;
        if (op.is_model_matmul()) L.costs.backward_flops += t.flops;
        break;
      case Phase::kOptimizer:
        break;
    }
  }

  // Collectives: forward all-reduce per row-parallel output, backward all-reduce per
  // distinct input of the column-parallel linears (QKV share one, Megatron's fused GEMM);
  // with sequence parallelism each all-reduce becomes reduce-scatter + all-gather
  // (Korthikanti et al. 2022 §4.2.2) at the same positions.
  for (std::size_t l = 0; l < num_layers && tp > 1; ++l) {
    LoweredLayer& L = layers[l];
    TpCollectives& c = L.tp_collectives;
    Seconds fwd{0};
    Seconds bwd{0};
    const int rows = static_cast<int>(row_outputs[l].size());
    const int cols = static_cast<int>(column_inputs[l].size());
    std::vector<std::int64_t> col_bytes;  // each column-parallel input's, in graph order
    for (const ir::OpId input : column_inputs[l]) col_bytes.push_back(g.op(input).out.bytes());
    if (!plan.sequence_parallel) {
      c.forward_all_reduce = rows;
      c.backward_all_reduce = cols;
      for (std::int64_t b : row_outputs[l]) fwd += tp_time(cost_model::Collective::kAllReduce, b);
      for (std::int64_t b : col_bytes) bwd += tp_time(cost_model::Collective::kAllReduce, b);
    } else {
      c.forward_reduce_scatter = rows;
      c.backward_all_gather = rows;
      c.forward_all_gather = cols;
      c.backward_reduce_scatter = cols;
      for (std::int64_t b : row_outputs[l]) {
        fwd += tp_time(cost_model::Collective::kReduceScatter, b);
        bwd += tp_time(cost_model::Collective::kAllGather, b);
      }
      for (std::int64_t b : col_bytes) {
        fwd += tp_time(cost_model::Collective::kAllGather, b);
        bwd += tp_time(cost_model::Collective::kReduceScatter, b);
      }
    }
    c.bytes_each = Bytes(rows > 0 ? row_outputs[l].front() : cols > 0 ? col_bytes.front() : 0);
    // The same collectives one by one, in Megatron's order: each column-parallel linear's
    // input (SP: all-gathered) then each row-parallel output (all-reduced, SP: reduce-
    // scattered); the backward mirrors it.
    {
      using cost_model::Collective;
      const std::string& where = L.costs.name;
      std::vector<sim::BlockingCollective> fwd_calls, bwd_calls;
      for (int i = 0; i < std::max(rows, cols); ++i) {
        if (i < cols && plan.sequence_parallel) {
          fwd_calls.push_back(tp_call(Collective::kAllGather, col_bytes[static_cast<std::size_t>(i)], where));
        }
        if (i < rows) {
          const std::int64_t b = row_outputs[l][static_cast<std::size_t>(i)];
          fwd_calls.push_back(tp_call(plan.sequence_parallel ? Collective::kReduceScatter
                                                             : Collective::kAllReduce,
                                      b, where));
        }
      }
      for (int i = std::max(rows, cols) - 1; i >= 0; --i) {
        if (i < rows && plan.sequence_parallel) {
          bwd_calls.push_back(tp_call(Collective::kAllGather,
                                      row_outputs[l][static_cast<std::size_t>(i)], where));
        }
        if (i < cols) {
          bwd_calls.push_back(tp_call(plan.sequence_parallel ? Collective::kReduceScatter
                                                             : Collective::kAllReduce,
                                      col_bytes[static_cast<std::size_t>(i)], where));
        }
      }
      L.costs.forward_collectives = std::move(fwd_calls);
      L.costs.backward_collectives = std::move(bwd_calls);
    }
    Seconds recomputed_gemm_delta{0};  // userbuffers' GEMM cost, paid again by a recompute
    if (userbuffers && !userbuffer_gemms[l].empty()) {
      // A transformer block: each collective beside its own GEMM (tp_overlap.h), the
      // backward's re-gather of each column-parallel input (for its weight gradient) too.
      // A MoE block: the attention's linears so; the token dispatcher's gathers and
      // scatters around the experts stay blocking (Megatron-Core's MoE layers do not use
      // userbuffers).
      const bool moe_block = L.kind != "transformer";
      const UserbufferPricing ub =
          price_userbuffers(g, userbuffer_gemms[l], column_inputs[l], plan, tp,
                            cluster.gpu.streaming_multiprocessors, cost_model, tp_time, moe_block,
                            userbuffer_quantized_bytes);
      c.backward_all_gather += static_cast<int>(ub.regathered.size());
      for (const ir::OpId input : ub.regathered) {
        L.costs.backward_collectives.push_back(
            tp_call(cost_model::Collective::kAllGather, g.op(input).out.bytes(), L.costs.name));
      }
      // Collectives no userbuffers GEMM is paired with: a MoE block's expert side; none in a
      // dense block, whose every collective has its GEMM (the sums differ by rounding only).
      Seconds fwd_blocking = fwd - ub.forward_paired_as_counted;
      Seconds bwd_blocking = bwd - ub.backward_paired_as_counted;
      for (Seconds* unpaired : {&fwd_blocking, &bwd_blocking}) {
        ALPASIM_CHECK(unpaired->value() >= -1e-9 * (fwd + bwd).value())
            << L.costs.name << ": userbuffers paired more communication than the layer has";
        ALPASIM_CHECK(moe_block || std::abs(unpaired->value()) <= 1e-9 * (fwd + bwd).value())
            << L.costs.name << ": a collective of a dense block has no GEMM beside it";
        *unpaired = moe_block ? std::max(Seconds{0}, *unpaired) : Seconds{0};
      }
      fwd = ub.forward_comm + fwd_blocking;
      bwd = ub.backward_comm + bwd_blocking;
      const Seconds fwd_exposed = ub.forward_exposed + fwd_blocking;
      const Seconds bwd_exposed = ub.backward_exposed + bwd_blocking;
      L.gemm_forward_s += ub.forward_gemm_delta;
      L.gemm_backward_s += ub.backward_gemm_delta;
      recomputed_gemm_delta = ub.forward_gemm_delta;  // the recomputed forward runs the same way
      L.tp_comm_hidden_forward_s = fwd - fwd_exposed;
      L.tp_comm_hidden_backward_s = bwd - bwd_exposed;
      scale_calls(L.costs.forward_collectives, fwd_exposed);
      scale_calls(L.costs.backward_collectives, bwd_exposed);
      fwd = fwd_exposed;
      bwd = bwd_exposed;
    }
    L.costs.forward_tp_comm_s = fwd;
    L.costs.backward_tp_comm_s = bwd;
    // Full recomputation re-runs the forward, its collectives included (selective
    // recomputes only the attention core, which has none), its GEMMs beside userbuffers too.
    if (plan.recompute == ir::RecomputePolicy::kFull && L.recompute_s.value() > 0) {
      L.recompute_s += fwd + recomputed_gemm_delta;
    }
  }

  // ---- Context parallelism's K/V ring (Megatron-Core, Transformer Engine's ring attention):
  // in the forward each GPU passes its K and V chunks (b · s/cp tokens, the tp-local KV heads)
  // cp - 1 times around the cp group, each step overlapped with the attention of the chunk
  // in hand (1/cp of the core); the backward passes K, V and their gradients (twice the
  // bytes) behind the backward's core. Exposed: what a step's transfer takes beyond its
  // step of attention, on the slowest hop of the first stage's ring. A recomputed forward
  // repeats its exchange.
  if (cp > 1) {
    const auto& local = std::get<ir::TransformerConfig>(local_model.spec);  // checked above
    const std::int64_t head_dim = local.head_width();
    const std::int64_t kv_heads_local = ceil_div(local.num_kv_heads, tp);
    const std::int64_t step_bytes =
        2 * plan.microbatch_size * local.seq_len * kv_heads_local * head_dim * dtype_bytes;
    Seconds hop_fwd{0}, hop_bwd{0};
    for (std::int64_t c = 0; c < cp; ++c) {
      const std::int64_t src = c * tp, dst = ((c + 1) % cp) * tp;
      hop_fwd = std::max(hop_fwd, cost_model.send_recv(Bytes(step_bytes), src, dst).time);
      hop_bwd = std::max(hop_bwd, cost_model.send_recv(Bytes(2 * step_bytes), src, dst).time);
    }
    const double steps = static_cast<double>(cp - 1);
    for (std::size_t l = 0; l < num_layers; ++l) {
      if (attention_forward_s[l].value() <= 0) continue;
      LoweredLayer& L = layers[l];
      const Seconds per_fwd = attention_forward_s[l] / static_cast<double>(cp);
      const Seconds per_bwd = attention_backward_s[l] / static_cast<double>(cp);
      L.cp_kv_bytes_per_step = Bytes(step_bytes);
      L.cp_comm_forward_s = std::max(Seconds{0}, hop_fwd - per_fwd) * steps;
      L.cp_comm_backward_s = std::max(Seconds{0}, hop_bwd - per_bwd) * steps;
      if (L.recompute_s.value() > 0 && plan.recompute == ir::RecomputePolicy::kFull) {
        L.recompute_s += L.cp_comm_forward_s;
      }
      // Trace events: the ring exchange's exposed part, one event per phase (its cp - 1
      // steps), after the layer's other collectives; none where attention hides it all.
      auto ring_call = [&](Seconds exposed, std::int64_t bytes_per_step) {
        sim::BlockingCollective call;
        call.collective = "send_recv";
        call.bytes = bytes_per_step * (cp - 1);
        call.group_size = static_cast<int>(cp);
        call.algorithm = "ring/p2p";
        call.time = exposed;
        call.where = L.costs.name;
        call.category = "cp_collective";
        return call;
      };
      if (L.cp_comm_forward_s.value() > 0) {
        L.costs.forward_collectives.push_back(ring_call(L.cp_comm_forward_s, step_bytes));
      }
      if (L.cp_comm_backward_s.value() > 0) {
        L.costs.backward_collectives.push_back(ring_call(L.cp_comm_backward_s, 2 * step_bytes));
      }
    }
  }

  // ---- Expert parallelism: every MoE layer sends each GPU's routed tokens to the GPUs of
  // their experts and back (Megatron-Core's all-to-all token dispatcher): dispatch and
  // combine in the forward, their mirrors in the backward, each an all-to-all of the GPU's
  // dispatched slots (the graph's dispatch output, tokens x top_k x capacity factor x hidden,
  // split over tp by sequence parallelism) over the ep group of the first stage (expert
  // ranks etp apart, Megatron-Core's expert rank order). Blocking (no all-to-all overlap).
  if (num_experts > 0 && ep > 1) {
    std::vector<std::int64_t> ep_ids;
    for (std::int64_t k = 0; k < ep; ++k) ep_ids.push_back(k * etp);
    ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo ep_group, cost_model.group(ep_ids));
    for (const Op& op : g.ops()) {
      if (op.kind != OpKind::kMoeDispatch || op.phase != Phase::kForward) continue;
      LoweredLayer& L = layers[static_cast<std::size_t>(op.layer)];
      L.ep_all_to_all_bytes = Bytes(ceil_div(op.out.bytes(), tp));
      const cost_model::CollectiveEstimate e =
          cost_model.collective(cost_model::Collective::kAllToAll, L.ep_all_to_all_bytes, ep_group);
      L.ep_comm_forward_s = Seconds(2 * e.time.value());
      L.ep_comm_backward_s = Seconds(2 * e.time.value());
      if (L.recompute_s.value() > 0 && plan.recompute == ir::RecomputePolicy::kFull) {
        L.recompute_s += L.ep_comm_forward_s;
      }
      // Trace events: dispatch and combine after the layer's tensor-parallel collectives in
      // the forward, their mirrors first in the backward.
      const sim::BlockingCollective call = traced(cost_model::Collective::kAllToAll,
                                                  L.ep_all_to_all_bytes.value(), ep, e, L.costs.name,
                                                  "ep_collective");
      L.costs.forward_collectives.insert(L.costs.forward_collectives.end(), 2, call);
      L.costs.backward_collectives.insert(L.costs.backward_collectives.begin(), 2, call);
    }
  }

  // ---- Memory and the rest of LayerCosts.
  const std::int64_t opt_bytes_per_param =
      ir::optimizer_state_bytes_per_parameter(training.optimizer, storage);
  const auto* tcfg = std::get_if<ir::TransformerConfig>(&local_model.spec);
  const bool gpt_formula = tcfg != nullptr && tcfg->builtin == "gpt";
  std::vector<std::int64_t> working(num_layers, 0);
  for (std::size_t l = 0; l < num_layers; ++l) {
    LoweredLayer& L = layers[l];
    LayerCosts& c = L.costs;
    std::int64_t full_activation = 0;
    std::int64_t kept = 0;
    const bool block = L.kind != "prologue" && L.kind != "epilogue";
    const bool recomputed = L.recompute_s.value() > 0;
    if (gpt_formula && block) {
      auto korthikanti = [&](ir::RecomputePolicy p) {
        return ir::korthikanti_activation_bytes_per_layer(
            tcfg->seq_len, plan.microbatch_size, tcfg->hidden_size, tcfg->num_heads, tp,
            plan.sequence_parallel, p);
      };
      full_activation = korthikanti(ir::RecomputePolicy::kNone);
      // A fused attention kernel stores what selective recomputation stores: no s x s terms.
      const ir::RecomputePolicy stored_policy =
          plan.recompute == ir::RecomputePolicy::kNone && tcfg->fused_attention
              ? ir::RecomputePolicy::kSelective
              : plan.recompute;
      kept = recomputed ? korthikanti(stored_policy) : full_activation;
    } else {
      full_activation = saved_activation[l];
      kept = full_activation;
      if (recomputed && plan.recompute == ir::RecomputePolicy::kFull && l > 0) {
        kept = stats[l - 1].boundary_bytes;
      }
    }
    if (recomputed) working[l] = full_activation - kept;
    c.activation_bytes = Bytes(kept);
    c.checkpoint_bytes = Bytes(kept);
    c.output_bytes = Bytes(stats[l].boundary_bytes);
    std::int64_t local_params = params[l].per_gpu;
    // Megatron keeps a copy of the tied word embedding on the last stage when pp > 1.
    if (plan.pp > 1 && L.kind == "epilogue" && tcfg != nullptr && tcfg->tied_embeddings) {
      local_params += params[0].word_embedding_per_gpu;
    }
    const std::int64_t param_bytes = local_params * dtype_bytes;
    const std::int64_t dp = plan.dp * cp;  // the distributed optimizer shards over dp·cp
    c.parameter_bytes = Bytes((plan.zero_stage >= 3 ? ceil_div(param_bytes, dp) : param_bytes) +
                              static_cast<std::int64_t>(std::ceil(
                                  recipe.weight_copies * static_cast<double>(quantized_weights[l]))));
    c.gradient_bytes = Bytes(plan.zero_stage >= 2 ? ceil_div(param_bytes, dp) : param_bytes);
    // The distributed optimizer shards the dense weights' states over dp·cp and the expert
    // weights' over the expert-data-parallel group, tp·cp·dp / (ep·etp) GPUs.
    const std::int64_t expert_dp = num_experts > 0 ? plan.tp * cp * plan.dp / (ep * etp) : dp;
    const std::int64_t dense_opt = (local_params - params[l].experts_per_gpu) * opt_bytes_per_param;
    const std::int64_t expert_opt = params[l].experts_per_gpu * opt_bytes_per_param;
    c.optimizer_state_bytes =
        Bytes(plan.zero_stage < 1      ? dense_opt + expert_opt
              : expert_dp == dp        ? ceil_div(dense_opt + expert_opt, dp)
                                       : ceil_div(dense_opt, dp) + ceil_div(expert_opt, expert_dp));
    c.grad_sync_bytes = Bytes(param_bytes);
    // The optimizer update streams the layer's state once (multi-tensor apply: one kernel).
    if (optimizer_bytes[l] > 0 && params[l].total > 0) {
      const double share = static_cast<double>(local_params) / static_cast<double>(params[l].total);
      double bytes = static_cast<double>(optimizer_bytes[l]) * share;
      // Megatron's mixed-precision optimizer adds passes around the Adam kernel.
      bytes += static_cast<double>(local_params) *
               static_cast<double>(ir::mixed_precision_step_bytes_per_parameter(storage));
      if (plan.zero_stage >= 1) bytes /= static_cast<double>(dp);
      // Low-precision weight copies: read the bf16 weight, write its quantized copies.
      bytes += static_cast<double>(quantized_weights[l]) * recipe.weight_cast;
      c.optimizer_step_s = cost_model.memory_bound(Bytes(static_cast<std::int64_t>(bytes)));
    }
    L.grad_accumulation_s = grad_accumulation[l];
    if (plan.pp > 1 && L.kind == "epilogue" && tcfg != nullptr && tcfg->tied_embeddings &&
        params[0].word_embedding_per_gpu > 0) {
      // The last stage's copy of the tied embedding accumulates its gradient too (it is
      // the LM head's weight: fused into the wgrad GEMM under gradient_accumulation_fusion).
      if (!plan.gradient_accumulation_fusion) {
        L.grad_accumulation_s += cost_model.memory_bound(
            Bytes(params[0].word_embedding_per_gpu * accumulate_bytes_per_param));
      }
    }
    L.memory_bound_backward_s += L.grad_accumulation_s;
    c.forward_s = L.gemm_forward_s + L.memory_bound_forward_s + c.forward_tp_comm_s +
                  L.cp_comm_forward_s + L.ep_comm_forward_s;
    c.backward_s = L.gemm_backward_s + L.memory_bound_backward_s + c.backward_tp_comm_s +
                   L.cp_comm_backward_s + L.ep_comm_backward_s;
  }

  // ---- Chunking: transformer layers per virtual stage (chunk_layers), embedding on the
  // first, head on the last (Megatron-LM).
  const std::int64_t blocks = static_cast<std::int64_t>(num_layers) - 2;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<int> layers_per_chunk, chunk_layers(plan, blocks));

  LayeredPipelineSpec spec;
  for (const auto& L : layers) spec.layers.push_back(L.costs);
  spec.layers_per_chunk = layers_per_chunk;
  spec.schedule = plan.interleave > 1 ? PipelineSchedule::kInterleaved1F1B
                                      : PipelineSchedule::kOneFOneB;
  spec.num_stages = static_cast<int>(plan.pp);
  spec.interleave = static_cast<int>(plan.interleave);
  spec.num_microbatches = static_cast<int>(num_microbatches);
  spec.data_parallel = static_cast<int>(plan.dp * cp);  // replicas of each weight
  spec.gpus_per_stage = static_cast<int>(tp);
  spec.recompute = Recompute::kNone;  // recomputation patched in below, per layer
  spec.memory_limit = cluster.usable_memory();
  spec.grad_sync_mode = plan.zero_stage >= 1 ? GradSyncMode::kReduceScatterAllGather
                                             : GradSyncMode::kAllReduce;
  // Without overlap_grad_reduce Megatron syncs after the backward (one bucket). With it,
  // the buckets of Megatron-Core's DDP: the chunk with the most parameters sets the count.
  int buckets = 1;
  if (plan.overlap_grad_reduce && plan.dp * cp > 1) {
    const std::int64_t bucket_params =
        plan.ddp_bucket_size_params > 0
            ? plan.ddp_bucket_size_params
            : std::max<std::int64_t>(40'000'000, 1'000'000 * plan.dp * cp);
    std::size_t l = 0;
    for (int count : layers_per_chunk) {
      std::int64_t chunk_params = 0;
      for (int k = 0; k < count; ++k, ++l) {
        chunk_params += layers[l].costs.grad_sync_bytes.value() / dtype_bytes;
      }
      buckets = std::max<int>(buckets, static_cast<int>(ceil_div(chunk_params, bucket_params)));
    }
  }
  spec.grad_sync_buckets = buckets;
  // Batched isend/irecv + wait, unless overlapped (Megatron-Core does that for the
  // interleaved schedule only).
  spec.blocking_p2p = !(plan.overlap_p2p_comm && plan.interleave > 1);
  spec.optimizer_barrier = true;  // global gradient-norm clipping
  ALPASIM_ASSIGN_OR_RETURN(PipelineProblem problem, make_layered_problem(spec));

  // ---- Patch recomputation, reshards, gradient sync and routes.
  // Megatron's rank order: tp fastest, then cp, then dp, then pp. Gradients are
  // synchronised over the dp·cp GPUs of a stage that share a tp rank.
  const std::int64_t stage_stride = tp * cp * plan.dp;  // GPUs per pipeline stage
  std::optional<sim::BlockingCollective> reshard_call;  // the receiving mesh's all-gather
  const std::int64_t boundary = stats.front().boundary_bytes;
  if (tp > 1 && !plan.sequence_parallel) {
    reshard_call = tp_call(cost_model::Collective::kAllGather, boundary, "stage boundary");
    reshard_call->category = "reshard_collective";
  }
  std::vector<std::vector<std::int64_t>> dp_groups;
  if (plan.dp * cp > 1) {
    for (std::int64_t s = 0; s < plan.pp; ++s) {
      for (std::int64_t r = 0; r < tp; ++r) {
        std::vector<std::int64_t> ids;
        for (std::int64_t d = 0; d < plan.dp; ++d) {
          for (std::int64_t c = 0; c < cp; ++c) ids.push_back(s * stage_stride + (d * cp + c) * tp + r);
        }
        dp_groups.push_back(std::move(ids));
      }
    }
  }
  std::vector<cluster::GroupInfo> dp_infos;
  if (!dp_groups.empty()) {
    ALPASIM_ASSIGN_OR_RETURN(dp_infos, cost_model.concurrent_groups(dp_groups));
  }
  // Expert weights' gradients are synchronised over the expert-data-parallel group (the
  // tp·cp·dp / (ep·etp) GPUs of a stage with the same expert shard; Megatron-Core's expert
  // rank order: etp fastest, then ep, then expert-data-parallel), the dense ones over dp·cp.
  // The two groups are the same GPUs when ep·etp = tp (no expert parallelism): one sync.
  const std::int64_t expert_dp = num_experts > 0 ? tp * cp * plan.dp / (ep * etp) : 0;
  const bool expert_split = num_experts > 0 && ep * etp != tp;
  std::vector<cluster::GroupInfo> edp_infos;  // per stage, ep·etp concurrent groups each
  if (expert_split && expert_dp > 1) {
    std::vector<std::vector<std::int64_t>> edp_groups;
    for (std::int64_t s = 0; s < plan.pp; ++s) {
      for (std::int64_t e = 0; e < ep * etp; ++e) {
        std::vector<std::int64_t> ids;
        for (std::int64_t k = 0; k < expert_dp; ++k) ids.push_back(s * stage_stride + k * ep * etp + e);
        edp_groups.push_back(std::move(ids));
      }
    }
    ALPASIM_ASSIGN_OR_RETURN(edp_infos, cost_model.concurrent_groups(edp_groups));
  }
  // Megatron's embedding-gradient all-reduce (megatron/training.py, "All-reduce
  // word_embeddings' grad across first and last stages"): with pp > 1 the first and last
  // stage hold the tied word embedding; after the backward each tp rank all-reduces its
  // vocab shard's main_grad with its peer on the other end (all tp ranks at once), before
  // the optimizer. Added to the gradient sync of the first and last model chunk.
  std::optional<sim::BlockingCollective> embedding_all_reduce;
  if (plan.pp > 1 && plan.dp * cp > 1 && tcfg != nullptr && tcfg->tied_embeddings &&
      params[0].word_embedding_per_gpu > 0) {
    std::vector<std::vector<std::int64_t>> pairs;
    for (std::int64_t r = 0; r < tp * cp; ++r) pairs.push_back({r, (plan.pp - 1) * stage_stride + r});
    ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> pair_infos, cost_model.concurrent_groups(pairs));
    const std::int64_t bytes = params[0].word_embedding_per_gpu * main_grad_bytes;
    embedding_all_reduce =
        traced(cost_model::Collective::kAllReduce, bytes, 2,
               cost_model.collective(cost_model::Collective::kAllReduce, Bytes(bytes), pair_infos.front()),
               "tied embedding", "grad_collective");
  }
  std::size_t first = 0;
  for (std::size_t j = 0; j < problem.stages.size(); ++j) {
    StageCosts& st = problem.stages[j];
    const std::size_t count = static_cast<std::size_t>(layers_per_chunk[j]);
    Seconds recompute{0};
    Flops recompute_flops{0};
    std::int64_t work = 0;
    st.recompute_collectives.clear();
    for (std::size_t l = first; l < first + count; ++l) {
      recompute += layers[l].recompute_s;
      recompute_flops += layers[l].recompute_flops;
      work = std::max(work, working[l]);
      // A fully recomputed layer re-runs its forward collectives (see recompute_s above).
      if (plan.recompute == ir::RecomputePolicy::kFull && layers[l].recompute_s.value() > 0) {
        const auto& calls = layers[l].costs.forward_collectives;
        st.recompute_collectives.insert(st.recompute_collectives.end(), calls.begin(), calls.end());
      }
    }
    first += count;
    st.recompute_s = recompute;
    st.recompute_flops = recompute_flops;
    st.working_activation_bytes = Bytes(work);
    if (tp > 1 && !plan.sequence_parallel) {
      st.output_reshard = ReshardMode::kLocalAllGather;
      st.reshard_group = static_cast<int>(tp);
      st.reshard_all_gather_s = reshard_call->time;
      st.reshard_collectives = {*reshard_call};
    } else if (tp > 1) {
      st.output_activation_bytes = Bytes(ceil_div(st.output_activation_bytes.value(), tp));
    }
    // The chunk's expert gradient bytes (per GPU): synchronised over their own group, not
    // with the dense ones, when it differs (expert_split); not at all when each expert
    // shard is on one GPU of the stage (expert_dp 1).
    std::int64_t expert_bytes = 0;
    if (expert_split) {
      for (std::size_t l = first - count; l < first; ++l) expert_bytes += params[l].experts_per_gpu * dtype_bytes;
    }
    const std::int64_t dense_bytes = st.grad_sync_bytes.value() - expert_bytes;
    const bool dense_sync = plan.dp * cp > 1 && dense_bytes > 0;
    const bool expert_sync = expert_dp > 1 && expert_bytes > 0;
    if (dense_sync || expert_sync) {
      const std::size_t mesh = j % static_cast<std::size_t>(plan.pp);
      const auto kind = plan.zero_stage >= 1 ? cost_model::Collective::kReduceScatter
                                             : cost_model::Collective::kAllReduce;
      // One collective per bucket (the simulator runs grad_sync_s / buckets per bucket); the
      // trace lists the buckets' collectives as one whole (a bucket's task shows 1/buckets).
      // `group` priced with `info`; `where` names it in the trace.
      struct Sync {
        std::int64_t bytes;
        std::int64_t group;
        cluster::GroupInfo info;
        const char* where;
        const char* gather_where;
      };
      std::vector<Sync> syncs;
      if (dense_sync) {
        syncs.push_back({dense_bytes, plan.dp * cp, dp_infos[mesh * static_cast<std::size_t>(tp)], "gradients",
                         "parameters"});
      }
      if (expert_sync) {
        syncs.push_back({expert_bytes, expert_dp, edp_infos[mesh * static_cast<std::size_t>(ep * etp)],
                         "expert gradients", "expert parameters"});
      }
      st.grad_sync_s = Seconds{0};
      st.grad_sync_collectives.clear();
      for (const Sync& y : syncs) {
        sim::BlockingCollective call =
            traced(kind, y.bytes, y.group, cost_model.collective(kind, Bytes(ceil_div(y.bytes, buckets)), y.info),
                   y.where, "grad_collective");
        call.time = call.time * static_cast<double>(buckets);
        *st.grad_sync_s += call.time;
        st.grad_sync_collectives.push_back(std::move(call));
      }
      if (embedding_all_reduce && (j == 0 || j + 1 == problem.stages.size())) {
        *st.grad_sync_s += embedding_all_reduce->time;
        st.grad_sync_collectives.push_back(*embedding_all_reduce);
      }
      if (plan.zero_stage >= 1) {
        std::vector<sim::BlockingCollective> gathers;
        Seconds bucket_ag{0};  // one bucket of every group's all-gather, one after the other
        for (const Sync& y : syncs) {
          gathers.push_back(traced(cost_model::Collective::kAllGather, y.bytes, y.group,
                                   cost_model.collective(cost_model::Collective::kAllGather,
                                                         Bytes(ceil_div(y.bytes, buckets)), y.info),
                                   y.gather_where, "grad_collective"));
          bucket_ag += gathers.back().time;
        }
        const Seconds whole = bucket_ag * static_cast<double>(buckets);
        Seconds all_gather = whole;
        if (plan.overlap_param_gather) {
          // Behind the next iteration's forward: the first bucket is waited for, the rest
          // hides behind the chunk's first microbatch forward as far as it lasts.
          all_gather = bucket_ag + std::max(Seconds{0}, all_gather - bucket_ag - st.forward_s);
        }
        st.param_all_gather_s = all_gather;
        // The trace shows each group's share of the exposed part.
        const double exposed = whole.value() > 0 ? all_gather.value() / whole.value() : 0.0;
        for (sim::BlockingCollective& gather : gathers) gather.time = gather.time * (static_cast<double>(buckets) * exposed);
        st.param_all_gather_collectives = std::move(gathers);
      }
    }
  }

  LoweredPlan out;
  const std::int64_t wire_bytes =
      tp > 1 ? ceil_div(boundary, tp) : boundary;  // scatter/gather or sequence-parallel shard
  out.p2p_bytes = Bytes(wire_bytes);
  if (plan.pp > 1) {
    const cluster::Topology& topology = cost_model.topology();
    for (std::int64_t s = 0; s < plan.pp; ++s) {
      const std::int64_t next = (s + 1) % plan.pp;
      const std::int64_t prev = (s + plan.pp - 1) % plan.pp;
      // Every GPU of the stage sends its shard to its counterpart at once: the flows that
      // leave a node share its NICs (one 25 Gb/s NIC for eight V100s of a p3.16xlarge; a
      // DGX gives each GPU its own). A flow's bytes grow by its point-to-point bandwidth
      // over its share, so the calibrated transfer time prices the slower wire.
      auto send = [&](std::int64_t to) -> core::Result<Seconds> {
        const std::int64_t src = s * stage_stride, dst = to * stage_stride;
        std::vector<std::vector<std::int64_t>> pairs;
        for (std::int64_t i = 0; i < stage_stride; ++i) {
          if (topology.domain_of(src + i) != topology.domain_of(dst + i)) pairs.push_back({src + i, dst + i});
        }
        double slowdown = 1;
        if (!pairs.empty()) {
          ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> groups, topology.concurrent_groups(pairs));
          for (std::size_t k = 0; k < pairs.size(); ++k) {
            const double p2p = topology.point_to_point(pairs[k][0], pairs[k][1]).bandwidth.value();
            slowdown = std::max(slowdown, p2p / groups[k].inter_rank_bandwidth.value());
          }
        }
        const auto bytes = static_cast<std::int64_t>(std::ceil(static_cast<double>(wire_bytes) * slowdown));
        return cost_model.send_recv(Bytes(bytes), src, dst).time;
      };
      // The calibrated transfer time of the fixed-size boundary tensor, as a route with no
      // modelled links (p2p does not share a NIC with the gradient sync in this lowering).
      ALPASIM_ASSIGN_OR_RETURN(Seconds to_next, send(next));
      ALPASIM_ASSIGN_OR_RETURN(Seconds to_prev, send(prev));
      problem.meshes[static_cast<std::size_t>(s)].send_next = Route{{}, to_next};
      problem.meshes[static_cast<std::size_t>(s)].send_prev = Route{{}, to_prev};
      if (s == 0) out.p2p_send_s = to_next;
    }
  }
  ALPASIM_RETURN_IF_ERROR(validate(problem));

  out.problem = std::move(problem);
  out.layers = std::move(layers);
  out.layers_per_chunk = std::move(layers_per_chunk);
  out.num_microbatches = num_microbatches;
  out.num_gpus = num_gpus;
  out.grad_sync_buckets = buckets;
  if (plan.pp > 1 && plan.dp * cp == 1 && tcfg != nullptr && tcfg->tied_embeddings) {
    out.notes.push_back(
        "the last stage holds a copy of the tied word embedding; with dp = 1 its gradient "
        "all-reduce with the first stage is not modelled");
  }
  if (plan.zero_stage >= 3) {
    out.notes.push_back("ZeRO-3 parameter all-gathers before each forward are not modelled");
  }
  return out;
}

core::Result<LoweredPlan> lower_plan_file(const schema::Plan& plan,
                                          const cost_model::CostModel& cost_model) {
  if (plan.stages.empty()) return core::invalid_argument("plan: /stages: expected at least one stage");
  const auto& s0 = plan.stages.front();
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& s = plan.stages[i];
    const std::string where = "plan: /stages/" + std::to_string(i);
    if (!s.shardings.empty()) {
      return core::unimplemented(where +
                                 "/shardings: per-operator shardings are not lowered to the "
                                 "simulator yet; only stages with the default (Megatron-like) "
                                 "sharding are supported");
    }
    if (s.logical_rows != s0.logical_rows || s.logical_cols != s0.logical_cols) {
      return core::unimplemented(where +
                                 ": stages with different mesh shapes are not lowered yet; "
                                 "all stages must have stage 0's logical mesh");
    }
    const std::int64_t per_stage = s0.logical_rows * s0.logical_cols;
    for (std::size_t k = 0; k < s.device_ids.size(); ++k) {
      // Megatron's order: stage-major, then data-parallel row, then tensor-parallel column.
      const auto expected = static_cast<std::int64_t>(i) * per_stage + static_cast<std::int64_t>(k);
      if (s.device_ids[k] != expected) {
        return core::unimplemented(where + "/device_ids/" + std::to_string(k) + ": device " +
                                   std::to_string(s.device_ids[k]) +
                                   " is not in Megatron's order (expected " +
                                   std::to_string(expected) + "); other placements are not lowered yet");
      }
    }
    if (s.weight_update_sharding != s0.weight_update_sharding) {
      return core::unimplemented(where + "/weight_update_sharding: must be the same on every stage");
    }
  }
  const std::int64_t pp = static_cast<std::int64_t>(plan.stages.size());
  if (plan.interleave < 1) {
    return core::invalid_argument("plan: /interleave: expected an integer >= 1");
  }
  MegatronPlan m;
  m.tp = s0.logical_cols;
  m.dp = s0.logical_rows;
  m.interleave = plan.interleave;
  m.pp = pp / plan.interleave;
  if (m.pp * plan.interleave != pp) {
    return core::invalid_argument("plan: /stages: " + std::to_string(pp) +
                                  " stages are not a multiple of interleave " +
                                  std::to_string(plan.interleave));
  }
  if (plan.num_microbatches <= 0 ||
      plan.global_batch_size % (m.dp * plan.num_microbatches) != 0) {
    return core::invalid_argument("plan: /num_microbatches: the global batch " +
                                  std::to_string(plan.global_batch_size) +
                                  " does not split into dp·num_microbatches");
  }
  m.microbatch_size = plan.global_batch_size / (m.dp * plan.num_microbatches);
  m.recompute = plan.recompute == schema::Recompute::kFull        ? ir::RecomputePolicy::kFull
                : plan.recompute == schema::Recompute::kSelective ? ir::RecomputePolicy::kSelective
                                                                  : ir::RecomputePolicy::kNone;
  m.zero_stage = s0.weight_update_sharding ? 1 : 0;
  TrainingSetup t;
  t.global_batch_size = plan.global_batch_size;
  t.dtype = plan.dtype;
  ALPASIM_ASSIGN_OR_RETURN(LoweredPlan lowered, lower_megatron_plan(plan.model, t, m, cost_model));
  if (plan.schedule == schema::Schedule::kGpipe) {
    if (plan.interleave != 1) {
      return core::invalid_argument("plan: /schedule: gpipe needs interleave 1");
    }
    lowered.problem.schedule = PipelineSchedule::kGPipe;
  }
  // The stage layer ranges must be the equal split the Megatron lowering uses.
  std::size_t first = 0;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto count = static_cast<std::int64_t>(lowered.layers_per_chunk[i]);
    const auto& s = plan.stages[i];
    if (s.layer_begin != static_cast<std::int64_t>(first) || s.layer_end - s.layer_begin != count) {
      return core::unimplemented("plan: /stages/" + std::to_string(i) +
                                 ": layer range [" + std::to_string(s.layer_begin) + ", " +
                                 std::to_string(s.layer_end) +
                                 ") is not the equal Megatron split; expected [" +
                                 std::to_string(first) + ", " +
                                 std::to_string(first + static_cast<std::size_t>(count)) + ")");
    }
    first += static_cast<std::size_t>(count);
  }
  return lowered;
}

core::Result<schema::Plan> megatron_plan_file(const ir::ModelConfig& model,
                                              const TrainingSetup& training,
                                              const MegatronPlan& plan,
                                              const cluster::ClusterSpec& cluster) {
  if (plan.cp > 1) {
    return core::unimplemented("search.megatron.cp: context parallelism has no plan-file form yet");
  }
  if (training.block_scaled != BlockScaled::kNone) {
    return core::unimplemented("training.dtype: mxfp8 and nvfp4 have no plan-file form yet");
  }
  if (plan.zero_stage >= 2) {
    return core::unimplemented("search.megatron.zero_stage: ZeRO-2/3 have no plan-file form yet");
  }
  if (!schema::submesh_expressible(plan.tp * plan.dp, cluster.gpus_per_node)) {
    return core::unimplemented("search.megatron: a stage of tp·dp = " + std::to_string(plan.tp * plan.dp) +
                               " GPUs spans part of a node, which a plan file's submesh (nodes x GPUs "
                               "per node) cannot describe");
  }
  const std::int64_t replicas = plan.dp * plan.microbatch_size;
  if (plan.tp < 1 || plan.pp < 1 || plan.dp < 1 || plan.microbatch_size < 1 || plan.interleave < 1 ||
      training.global_batch_size % replicas != 0) {
    return core::invalid_argument("search.megatron: the global batch " +
                                  std::to_string(training.global_batch_size) +
                                  " does not split into dp·microbatch_size = " + std::to_string(replicas));
  }
  // The graph the plan's stages index: one microbatch of every replica of a stage.
  ir::BuildOptions bo;
  bo.microbatch_size = replicas;
  bo.dtype = training.dtype;
  ALPASIM_ASSIGN_OR_RETURN(ir::Graph forward, ir::build_forward_graph(model, bo));
  ir::TrainingOptions to;
  to.optimizer = training.optimizer;
  to.recompute = plan.recompute;
  const ir::Graph graph = ir::derive_training_graph(forward, to);
  const std::int64_t blocks = graph.num_layers() - 2;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<int> layers_per_chunk, chunk_layers(plan, blocks));
  schema::Plan out = megatron_plan_stages(model, training, plan, cluster, layers_per_chunk);
  if (plan.tp * plan.dp > 1) {
    for (schema::PlanStage& st : out.stages) {
      ALPASIM_ASSIGN_OR_RETURN(st.shardings,
                               schema::megatron_operator_shardings(graph, model, replicas, st.layer_begin,
                                                                   st.layer_end, plan.dp, plan.tp,
                                                                   plan.sequence_parallel));
    }
  }
  return out;
}

schema::Plan megatron_plan_stages(const ir::ModelConfig& model, const TrainingSetup& training,
                                  const MegatronPlan& plan, const cluster::ClusterSpec& cluster,
                                  const std::vector<int>& layers_per_chunk) {
  const std::int64_t replicas = plan.cp * plan.dp;  // the GPUs of a stage, over tp
  const std::int64_t mesh_gpus = plan.tp * replicas;
  schema::Plan out;
  out.model = model;
  out.cluster = cluster;
  out.dtype = training.dtype;
  out.global_batch_size = training.global_batch_size;
  // Megatron's microbatches per replica: the cp GPUs of a replica share its sequences.
  out.num_microbatches = training.global_batch_size / (plan.dp * plan.microbatch_size);
  out.schedule = plan.interleave > 1 ? schema::Schedule::kInterleavedOneFOneB : schema::Schedule::kOneFOneB;
  out.interleave = plan.interleave;
  // Megatron's p2p blocks unless overlapped (lower_megatron_plan's blocking_p2p).
  out.p2p = plan.overlap_p2p_comm && plan.interleave > 1 ? schema::P2pMode::kAsync : schema::P2pMode::kBlocking;
  out.gradient_accumulation_fusion = plan.gradient_accumulation_fusion;
  out.recompute = plan.recompute == ir::RecomputePolicy::kFull        ? schema::Recompute::kFull
                  : plan.recompute == ir::RecomputePolicy::kSelective ? schema::Recompute::kSelective
                                                                      : schema::Recompute::kNone;
  out.generator = "alpa-sim megatron " + std::to_string(plan.tp) + "x" + std::to_string(plan.pp) + "x" +
                  std::to_string(plan.dp);
  std::int64_t begin = 0;
  for (std::size_t c = 0; c < layers_per_chunk.size(); ++c) {
    schema::PlanStage st;
    st.layer_begin = begin;
    st.layer_end = begin + layers_per_chunk[c];
    begin = st.layer_end;
    st.submesh_nodes = std::max<std::int64_t>(1, mesh_gpus / cluster.gpus_per_node);
    st.submesh_gpus_per_node = std::min(mesh_gpus, cluster.gpus_per_node);
    st.logical_rows = replicas;
    st.logical_cols = plan.tp;
    const std::int64_t stage = static_cast<std::int64_t>(c) % plan.pp;
    for (std::int64_t d = 0; d < mesh_gpus; ++d) st.device_ids.push_back(stage * mesh_gpus + d);
    st.weight_update_sharding = plan.zero_stage >= 1;
    out.stages.push_back(std::move(st));
  }
  return out;
}

}  // namespace alpasim::sim::lowering
