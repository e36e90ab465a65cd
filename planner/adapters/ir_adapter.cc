#include "planner/adapters/ir_adapter.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cluster/cluster_spec.h"
#include "ir/autodiff.h"

namespace alpasim::planner::adapters {
namespace {

using intra_op::IntraOpGraph;
using intra_op::IntraOpNode;

// Operand axis -> output axis: aligned from the trailing end (numpy broadcasting), or from
// the leading end when that matches more axes (a reduction of the last axis, a gather of
// labels); -1 where sizes differ (that axis must stay replicated).
std::vector<int> aligned_map(const std::vector<std::int64_t>& in,
                             const std::vector<std::int64_t>& out) {
  std::vector<int> trailing(in.size(), -1), leading(in.size(), -1);
  int nt = 0, nl = 0;
  const std::size_t n = std::min(in.size(), out.size());
  for (std::size_t t = 1; t <= n; ++t) {
    const std::size_t a = in.size() - t;
    const std::size_t o = out.size() - t;
    if (in[a] == out[o]) {
      trailing[a] = static_cast<int>(o);
      ++nt;
    }
  }
  for (std::size_t a = 0; a < n; ++a) {
    if (in[a] != out[a]) break;
    leading[a] = static_cast<int>(a);
    ++nl;
  }
  return nl > nt ? leading : trailing;
}

// Axes of `in` whose removal leaves `out` (trailing or leading match), or nullopt.
bool removed_axes(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out,
                  std::vector<int>* axes) {
  axes->clear();
  if (out.size() >= in.size()) return false;
  const std::size_t drop = in.size() - out.size();
  if (std::equal(out.begin(), out.end(), in.begin() + static_cast<std::ptrdiff_t>(drop))) {
    for (std::size_t a = 0; a < drop; ++a) axes->push_back(static_cast<int>(a));
    return true;
  }
  if (std::equal(out.begin(), out.end(), in.begin())) {
    for (std::size_t a = out.size(); a < in.size(); ++a) axes->push_back(static_cast<int>(a));
    return true;
  }
  return false;
}

class Converter {
 public:
  Converter(const ir::Graph& g, std::int32_t begin, std::int32_t end, bool weight_gradients)
      : g_(g), begin_(begin), end_(end), weight_gradients_(weight_gradients) {}

  core::Result<IntraOpGraph> run() {
    for (const ir::Op& op : g_.ops()) {
      if (op.layer < begin_ || op.layer >= end_) continue;
      if (!weight_gradients_ &&
          (op.grad_role == ir::GradRole::kWeightGrad || op.phase == ir::Phase::kOptimizer)) {
        continue;
      }
      std::vector<int> operands;
      for (ir::OpId in : op.inputs) operands.push_back(node_of(in));
      IntraOpNode n = convert(op, operands);
      n.pass = op.phase == ir::Phase::kForward ? 0 : op.phase == ir::Phase::kOptimizer ? 2 : 1;
      const bool memory_bound = n.kind == intra_op::OpKind::kElementwise ||
                                n.kind == intra_op::OpKind::kSoftmax ||
                                n.kind == intra_op::OpKind::kLayerNorm ||
                                n.kind == intra_op::OpKind::kReduce || n.gather;
      // The same bytes op_compute splits evenly: a strategy pays for what its tile adds.
      if (memory_bound && !op.is_source()) n.bytes_accessed = ir::memory_traffic_bytes(g_, op);
      n.sums_operands = n.kind == intra_op::OpKind::kElementwise && op.function == "add" && n.operands.size() >= 2;
      n.result_unread = op.id == g_.meta.loss && g_.consumers(op.id).empty();
      index_[op.id] = push(std::move(n), op.id);
    }
    ALPASIM_RETURN_IF_ERROR(graph_.validate());
    return std::move(graph_);
  }
  const std::vector<ir::OpId>& node_ops() const { return node_ops_; }

 private:
  int push(IntraOpNode n, ir::OpId source) {
    graph_.nodes.push_back(std::move(n));
    node_ops_.push_back(source);
    return static_cast<int>(graph_.nodes.size()) - 1;
  }
  const std::vector<std::int64_t>& shape(int v) const {
    return graph_.nodes[static_cast<std::size_t>(v)].shape;
  }
  int node_of(ir::OpId id) {
    auto it = index_.find(id);
    if (it != index_.end()) return it->second;
    // A tensor of another layer: an input of this range (its producer is elsewhere).
    const ir::Op& op = g_.op(id);
    IntraOpNode n;
    n.name = op.name;
    n.kind = intra_op::OpKind::kInput;
    n.shape = op.out.shape;
    n.element_bytes = op.out.element_bytes();
    const int v = push(std::move(n), id);
    index_[id] = v;
    return v;
  }

  IntraOpNode base(const ir::Op& op, intra_op::OpKind kind) const {
    IntraOpNode n;
    n.name = op.name;
    n.kind = kind;
    n.shape = op.out.shape;
    n.element_bytes = op.out.element_bytes();
    n.attention_window = op.attention_window;
    return n;
  }

  IntraOpNode elementwise(const ir::Op& op, const std::vector<int>& operands) const {
    IntraOpNode n = base(op, intra_op::OpKind::kElementwise);
    n.operands = operands;
    for (int v : operands) n.operand_axis_map.push_back(aligned_map(shape(v), n.shape));
    n.flops = static_cast<double>(op.flops);
    return n;
  }

  IntraOpNode einsum(const ir::Op& op, const std::vector<int>& operands) const {
    IntraOpNode n = base(op, op.kind == ir::OpKind::kMoeDispatch   ? intra_op::OpKind::kMoeDispatch
                             : op.kind == ir::OpKind::kMoeCombine ? intra_op::OpKind::kMoeCombine
                                                                   : intra_op::OpKind::kEinsum);
    std::map<char, int> loop;
    auto loops_of = [&](const std::string& letters) {
      std::vector<int> ids;
      for (char c : letters) {
        auto [it, inserted] = loop.emplace(c, static_cast<int>(loop.size()));
        ids.push_back(it->second);
      }
      return ids;
    };
    n.operands = {operands[0], operands[1]};
    n.operand_loops = {loops_of(op.dot.lhs), loops_of(op.dot.rhs)};
    n.output_loops = loops_of(op.dot.out);
    if (operands.size() > 2) {  // bias: the trailing output loops
      const auto& bs = shape(operands[2]);
      std::vector<int> ids(n.output_loops.end() - static_cast<std::ptrdiff_t>(bs.size()),
                           n.output_loops.end());
      n.operands.push_back(operands[2]);
      n.operand_loops.push_back(std::move(ids));
    }
    n.flops = static_cast<double>(op.flops);
    // The MoE kinds need GShard's loop structure (the builders spell dispatch
    // "xyec,xyh->exch" and combine "xyec,exch->xyh"); other spellings are plain einsums.
    if (n.kind != intra_op::OpKind::kEinsum &&
        (n.operands.size() != 2 || !intra_op::has_moe_structure(n))) {
      n.kind = intra_op::OpKind::kEinsum;
    }
    return n;
  }

  // A convolution pass as its loop nest (intra_op::conv_node); shape and FLOPs of the op.
  IntraOpNode conv(const ir::Op& op, const std::vector<int>& operands) const {
    const ir::ConvSpec& c = op.conv;
    intra_op::ConvDims d;
    d.n = c.n;
    d.h = c.h;
    d.w = c.w;
    d.ci = c.ci;
    d.co = c.co;
    d.kh = c.kh;
    d.kw = c.kw;
    d.stride = c.stride;
    const intra_op::ConvPass pass = c.variant == ir::ConvSpec::Variant::kForward
                                        ? intra_op::ConvPass::kForward
                                    : c.variant == ir::ConvSpec::Variant::kGradInput
                                        ? intra_op::ConvPass::kDataGradient
                                        : intra_op::ConvPass::kFilterGradient;
    IntraOpNode n = intra_op::conv_node(op.name, pass, d, operands[0], operands[1],
                                        op.out.element_bytes());
    n.shape = op.out.shape;  // the IR's shape, equal to conv_node's for its ConvSpec
    n.flops = static_cast<double>(op.flops);
    return n;
  }

  IntraOpNode convert(const ir::Op& op, const std::vector<int>& operands) const {
    switch (op.kind) {
      case ir::OpKind::kParameter: return base(op, intra_op::OpKind::kParameter);
      case ir::OpKind::kInput: return base(op, intra_op::OpKind::kInput);
      case ir::OpKind::kDot:
      case ir::OpKind::kMoeDispatch:
      case ir::OpKind::kMoeCombine:
        if (operands.size() >= 2) return einsum(op, operands);
        break;
      case ir::OpKind::kConv2d:
        if (operands.size() == 2) return conv(op, operands);
        break;
      case ir::OpKind::kEmbedding:
        if (op.phase != ir::Phase::kBackward && operands.size() == 2) {
          // table [V, h], ids [...]: a one-hot contraction over V (vocabulary-parallel).
          IntraOpNode n = base(op, intra_op::OpKind::kEinsum);
          const int r = static_cast<int>(shape(operands[1]).size());
          std::vector<int> ids, out;
          for (int a = 0; a < r; ++a) ids.push_back(a);
          out = ids;
          out.push_back(r + 1);
          n.operands = operands;
          n.operand_loops = {{r, r + 1}, ids};
          n.output_loops = out;
          n.flops = static_cast<double>(op.flops);
          n.gather = true;
          return n;
        }
        break;
      case ir::OpKind::kSoftmax:
        if (operands.size() == 1 && !op.out.shape.empty()) {
          IntraOpNode n = elementwise(op, operands);
          n.kind = intra_op::OpKind::kSoftmax;
          n.norm_axis = static_cast<int>(op.out.shape.size()) - 1;
          return n;
        }
        break;
      case ir::OpKind::kNorm:
        if (op.phase != ir::Phase::kBackward && !op.out.shape.empty() &&
            shape(operands[0]) == op.out.shape) {
          // Scale and shift stay operands only through their gradients and updates.
          IntraOpNode n = elementwise(op, {operands[0]});
          n.kind = intra_op::OpKind::kLayerNorm;
          // Batch-norm normalises over everything but channels: keep it elementwise.
          if (op.norm == ir::NormType::kBatchNorm) n.kind = intra_op::OpKind::kElementwise;
          n.norm_axis = static_cast<int>(op.out.shape.size()) - 1;
          if (n.kind == intra_op::OpKind::kElementwise) n.norm_axis = -1;
          return n;
        }
        break;
      case ir::OpKind::kReduce: {
        std::vector<int> axes;
        if (operands.size() == 1 && removed_axes(shape(operands[0]), op.out.shape, &axes)) {
          IntraOpNode n = base(op, intra_op::OpKind::kReduce);
          n.operands = operands;
          n.reduce_axes = axes;
          return n;
        }
        if (op.function == "softmax_cross_entropy" && operands.size() == 2 &&
            removed_axes(shape(operands[0]), op.out.shape, &axes)) {
          // logits [..., V], labels [...] -> per-token loss [...]: a reduction over the
          // vocabulary. With V split, each device reduces its slice and per-token values
          // are all-reduced, never the logits gathered (Megatron's vocabulary-parallel
          // cross entropy all-reduces three, of fp32 max, sum of exponentials and the
          // label's logit; this prices one of the output's size: latency-bound either
          // way). The labels (ids, not split over V) are left out of the layouts; a plan
          // that lists their spec is still read (intra_op_pass.cc required_strategies).
          // alpa-exec runs it on blocks of classes too, gathering per-row statistics
          // (exec::LossStep, docs/executor.md).
          IntraOpNode n = base(op, intra_op::OpKind::kReduce);
          n.operands = {operands[0]};
          n.reduce_axes = axes;
          return n;
        }
        if (operands.size() == 2 && shape(operands[0]) == shape(operands[1]) &&
            removed_axes(shape(operands[0]), op.out.shape, &axes)) {
          // Σ over `axes` of a product: an einsum contracting them.
          IntraOpNode n = base(op, intra_op::OpKind::kEinsum);
          const int r = static_cast<int>(shape(operands[0]).size());
          std::vector<int> all, out;
          for (int a = 0; a < r; ++a) {
            all.push_back(a);
            if (std::find(axes.begin(), axes.end(), a) == axes.end()) out.push_back(a);
          }
          n.operands = operands;
          n.operand_loops = {all, all};
          n.output_loops = out;
          return n;
        }
        break;
      }
      case ir::OpKind::kOptimizer:
        if (operands.size() >= 2 && shape(operands[0]) == op.out.shape &&
            shape(operands[1]) == op.out.shape) {
          IntraOpNode n = base(op, intra_op::OpKind::kUpdate);
          n.operands = {operands[0], operands[1]};
          std::vector<int> id;
          for (std::size_t a = 0; a < op.out.shape.size(); ++a) id.push_back(static_cast<int>(a));
          n.operand_axis_map = {id, id};
          n.state_bytes_per_element = std::max<std::int64_t>(
              1, ir::optimizer_state_bytes_per_parameter(
                     g_.meta.optimizer == "sgd" ? ir::OptimizerKind::kSgd : ir::OptimizerKind::kAdam,
                     g_.meta.dtype));
          return n;
        }
        break;
      default:
        break;
    }
    return elementwise(op, operands);
  }

  const ir::Graph& g_;
  std::int32_t begin_;
  std::int32_t end_;
  bool weight_gradients_;
  IntraOpGraph graph_;
  std::map<ir::OpId, int> index_;
  std::vector<ir::OpId> node_ops_;  // per node, in push order
};

cost_model::Collective to_cost_model(intra_op::Collective c) {
  switch (c) {
    case intra_op::Collective::kAllReduce: return cost_model::Collective::kAllReduce;
    case intra_op::Collective::kAllGather: return cost_model::Collective::kAllGather;
    case intra_op::Collective::kReduceScatter: return cost_model::Collective::kReduceScatter;
    case intra_op::Collective::kAllToAll: return cost_model::Collective::kAllToAll;
  }
  return cost_model::Collective::kAllReduce;
}

}  // namespace

core::Result<intra_op::IntraOpGraph> layer_range_graph(const ir::Graph& training,
                                                       std::int32_t layer_begin,
                                                       std::int32_t layer_end,
                                                       std::vector<ir::OpId>* node_ops,
                                                       bool weight_gradients) {
  Converter c(training, layer_begin, layer_end, weight_gradients);
  ALPASIM_ASSIGN_OR_RETURN(intra_op::IntraOpGraph g, c.run());
  if (node_ops != nullptr) *node_ops = c.node_ops();
  return g;
}

std::vector<std::int64_t> mesh_device_ids(const SubmeshShape& submesh,
                                          const intra_op::LogicalMesh& mesh,
                                          std::int64_t cluster_gpus_per_node,
                                          std::int64_t first_node, std::int64_t first_local) {
  ALPASIM_CHECK(mesh.num_devices() == submesh.size()) << "logical mesh does not fit the submesh";
  std::vector<std::int64_t> ids;
  ids.reserve(static_cast<std::size_t>(submesh.size()));
  for (std::int64_t i = 0; i < submesh.size(); ++i) {
    const std::int64_t node = first_node + i / submesh.gpus_per_node;
    const std::int64_t local = first_local + i % submesh.gpus_per_node;
    ids.push_back(node * cluster_gpus_per_node + local);
  }
  return ids;
}

core::Result<intra_op::CollectiveCostFn> make_collective_hook(const cost_model::CostModel& cost,
                                                              const SubmeshShape& submesh,
                                                              const intra_op::LogicalMesh& mesh) {
  const std::vector<std::int64_t> ids =
      mesh_device_ids(submesh, mesh, cost.spec().gpus_per_node, 0, 0);
  auto at = [&](std::int64_t r, std::int64_t c) {
    return ids[static_cast<std::size_t>(r * mesh.cols + c)];
  };
  // infos[axes]: the group seen by one member while every group of that axis runs at once.
  std::array<std::optional<cluster::GroupInfo>, 4> infos;
  for (intra_op::MeshAxes axes : {intra_op::kAxis0, intra_op::kAxis1, intra_op::kBothAxes}) {
    std::vector<std::vector<std::int64_t>> groups;
    if (axes == intra_op::kAxis0) {
      for (std::int64_t c = 0; c < mesh.cols; ++c) {
        std::vector<std::int64_t> g;
        for (std::int64_t r = 0; r < mesh.rows; ++r) g.push_back(at(r, c));
        groups.push_back(std::move(g));
      }
    } else if (axes == intra_op::kAxis1) {
      for (std::int64_t r = 0; r < mesh.rows; ++r) {
        std::vector<std::int64_t> g;
        for (std::int64_t c = 0; c < mesh.cols; ++c) g.push_back(at(r, c));
        groups.push_back(std::move(g));
      }
    } else {
      groups.push_back(ids);
    }
    if (groups.front().size() < 2) continue;
    ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> g, cost.concurrent_groups(groups));
    infos[axes] = g.front();
  }
  return intra_op::CollectiveCostFn(
      [cost, infos](intra_op::Collective c, core::Bytes bytes, intra_op::MeshAxes axes) {
        const auto& info = infos[axes & 3u];
        if (!info || bytes.value() <= 0) return core::seconds(0.0);
        return cost.collective(to_cost_model(c), bytes, *info).time;
      });
}

std::string cost_fingerprint(const cost_model::CostModel& cost, const SubmeshShape& submesh) {
  return cluster::cluster_spec_to_json(cost.spec()).dump() + "|submesh " +
         std::to_string(submesh.nodes) + "x" + std::to_string(submesh.gpus_per_node);
}

core::Seconds op_compute(const ir::Graph& training, const ir::Op& op, std::int64_t d,
                         const cost_model::CostModel& cost) {
  core::Seconds time{0};
  if (op.kind == ir::OpKind::kConv2d) {
    cost_model::GemmShape s;
    const ir::DotDims g = op.conv.gemm_dims();
    s.m = std::max<std::int64_t>(1, (g.m + d - 1) / d);  // images x pixels split d ways
    s.n = g.n;
    s.k = g.k;
    s.dtype = training.meta.dtype;
    time = cost.gemm(s).time * cost.params().compute.conv_slowdown;
  } else if (op.is_matmul()) {
    // Split the work over the batch-like dims first (batch·M), then N. A weight gradient
    // (dW = X^T·dY, K = the tokens of the graph's samples) splits its contraction over the
    // samples first, then N, then M: a layout that splits the batch over devices (data
    // parallelism, Megatron's data-parallel rows, Alpa's batch axes) has each device reduce
    // its own samples' tokens into a partial dW of full size, so with d = dp·tp its GEMM is
    // (M, N/tp, K/dp) as Megatron runs it, not the thin (M/d, N, K) of the batch-first
    // order. The samples bound the K split: tensor parallelism never splits a sequence.
    cost_model::GemmShape s;
    const ir::DotDims& g = op.dot_dims;
    auto split = [](std::int64_t* size, std::int64_t* left) {
      const std::int64_t parts = std::max<std::int64_t>(1, std::min(*left, *size));
      *size = (*size + parts - 1) / parts;
      *left = (*left + parts - 1) / parts;
    };
    std::int64_t bm = g.batch * g.m;
    std::int64_t n = g.n;
    std::int64_t k = g.k;
    std::int64_t left = d;
    const std::int64_t samples = training.meta.samples_per_microbatch;
    if (op.grad_role == ir::GradRole::kWeightGrad && g.batch == 1 && samples > 1 && k % samples == 0) {
      std::int64_t sample_parts = std::min(left, samples);
      while (samples % sample_parts != 0) --sample_parts;  // whole samples per device
      k /= sample_parts;
      left = (left + sample_parts - 1) / sample_parts;
      split(&n, &left);
      split(&bm, &left);
    } else {
      split(&bm, &left);
      n = std::max<std::int64_t>(1, (n + left - 1) / left);
    }
    s.m = bm;
    s.n = n;
    s.k = k;
    s.dtype = training.meta.dtype;
    const ir::FlashDotRole flash = ir::flash_dot_role(training, op);
    time = flash.in_kernel ? cost.compute().flash_attention_dot({s, flash.share}).time : cost.gemm(s).time;
  } else if (!ir::runs_in_flash_attention(training, op)) {
    // A flash kernel's softmax and dropout run on chip (ir::memory_traffic_bytes): no time.
    time = cost.memory_bound(core::bytes(ir::memory_traffic_bytes(training, op) / d));
  }
  return time;
}

core::Seconds op_compute_split(const ir::Graph& training, const ir::Op& op, std::int64_t work_shards,
                               std::int64_t read_shards, std::int64_t write_shards,
                               const cost_model::CostModel& cost) {
  if (op.is_matmul()) return op_compute(training, op, work_shards, cost);
  return cost.memory_bound(core::bytes(ir::split_memory_traffic_bytes(training, op, read_shards, write_shards)));
}

namespace {

void add_by_phase(const ir::Op& op, core::Seconds time, ComputeTimes* t) {
  switch (op.phase) {
    case ir::Phase::kForward: t->forward += time; break;
    case ir::Phase::kRecompute: t->recompute += time; break;
    case ir::Phase::kBackward: t->backward += time; break;
    case ir::Phase::kOptimizer: t->optimizer += time; break;
  }
}

}  // namespace

ComputeTimes layer_range_compute(const ir::Graph& training, std::int32_t layer_begin,
                                 std::int32_t layer_end, std::int64_t devices,
                                 const cost_model::CostModel& cost) {
  ComputeTimes t;
  const std::int64_t d = std::max<std::int64_t>(1, devices);
  for (const ir::Op& op : training.ops()) {
    if (op.layer < layer_begin || op.layer >= layer_end || op.is_source()) continue;
    add_by_phase(op, op_compute(training, op, d, cost), &t);
  }
  return t;
}

std::vector<ComputeTimes> per_layer_compute(const ir::Graph& training, std::int64_t devices,
                                            const cost_model::CostModel& cost) {
  // num_layers() scans every op: once, not once per op.
  const std::int32_t layers = std::max(0, training.num_layers());
  std::vector<ComputeTimes> out(static_cast<std::size_t>(layers));
  const std::int64_t d = std::max<std::int64_t>(1, devices);
  for (const ir::Op& op : training.ops()) {
    if (op.layer < 0 || op.layer >= layers || op.is_source()) continue;
    add_by_phase(op, op_compute(training, op, d, cost), &out[static_cast<std::size_t>(op.layer)]);
  }
  return out;
}

}  // namespace alpasim::planner::adapters
