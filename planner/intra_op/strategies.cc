#include "planner/intra_op/strategies.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "planner/intra_op/resharding.h"

namespace alpasim::planner::intra_op {
namespace {

using schema::ShardingSpec;

core::Bytes tile_bytes(const IntraOpNode& n, const ShardingSpec& spec, const LogicalMesh& mesh) {
  return core::bytes(tile_elements(n.shape, spec, mesh) * n.element_bytes);
}

std::string strategy_name(const std::vector<ShardingSpec>& inputs, const ShardingSpec& out) {
  std::string s;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (k > 0) s += " x ";
    s += inputs[k].to_string();
  }
  return s + " -> " + out.to_string();
}

std::string axes_text(MeshAxes axes) {
  return axes == kBothAxes ? "01" : axes == kAxis0 ? "0" : "1";
}

// Spec of a tensor whose axis a carries loop loops[a], given the mesh axes of every loop.
ShardingSpec spec_from_loops(const std::vector<int>& loops,
                             const std::vector<std::vector<int>>& loop_mesh_axes) {
  std::vector<std::vector<int>> axes;
  for (int l : loops) axes.push_back(loop_mesh_axes[static_cast<std::size_t>(l)]);
  return ShardingSpec(std::move(axes));
}

void einsum_strategies(const IntraOpGraph& g, int v, const LogicalMesh& mesh,
                       const CostHooks& hooks, std::vector<Strategy>* out) {
  const IntraOpNode& n = g.nodes[static_cast<std::size_t>(v)];
  const std::vector<std::int64_t> sizes = g.loop_sizes(v);
  const int num_loops = static_cast<int>(sizes.size());
  std::vector<bool> in_output(sizes.size(), false);
  for (int l : n.output_loops) in_output[static_cast<std::size_t>(l)] = true;
  double flops = n.flops;
  if (flops <= 0.0 && !n.gather) {
    flops = 2.0;
    for (std::int64_t s : sizes) flops *= static_cast<double>(s);
  }
  auto splittable = [&](int l) {
    return n.loop_splittable.empty() || n.loop_splittable[static_cast<std::size_t>(l)];
  };
  for (int l0 = -1; l0 < num_loops; ++l0) {
    if (l0 >= 0 && (mesh.rows <= 1 || !splittable(l0))) continue;
    for (int l1 = -1; l1 < num_loops; ++l1) {
      if (l1 >= 0 && (mesh.cols <= 1 || !splittable(l1))) continue;
      std::vector<std::vector<int>> loop_axes(sizes.size());
      if (l0 >= 0) loop_axes[static_cast<std::size_t>(l0)].push_back(0);
      if (l1 >= 0) loop_axes[static_cast<std::size_t>(l1)].push_back(1);
      bool even = true;
      std::int64_t parallel = 1;
      MeshAxes reduce_axes = 0;
      for (std::size_t l = 0; l < sizes.size(); ++l) {
        std::int64_t parts = 1;
        for (int a : loop_axes[l]) {
          parts *= mesh.axis_size(a);
          if (!in_output[l]) reduce_axes |= a == 0 ? kAxis0 : kAxis1;
        }
        if (sizes[l] % parts != 0) even = false;
        parallel *= parts;
      }
      if (!even) continue;
      std::vector<ShardingSpec> inputs;
      for (const auto& loops : n.operand_loops) inputs.push_back(spec_from_loops(loops, loop_axes));
      ShardingSpec result = spec_from_loops(n.output_loops, loop_axes);
      // With loop extents an axis may be longer than its loop (a strided convolution's
      // input rows): every tensor must split evenly too.
      if (!n.loop_extents.empty()) {
        bool fits = spec_fits(n.shape, result, mesh);
        for (std::size_t k = 0; k < inputs.size() && fits; ++k) {
          fits = spec_fits(g.nodes[static_cast<std::size_t>(n.operands[k])].shape, inputs[k], mesh);
        }
        if (!fits) continue;
      }
      Strategy base;
      base.inputs = inputs;
      base.parallel_devices = parallel;
      base.compute = hooks.device_flops_per_s > 0.0
                         ? core::seconds(flops / static_cast<double>(parallel) /
                                         hooks.device_flops_per_s)
                         : core::seconds(0.0);
      if (reduce_axes == 0) {
        base.output = result;
        base.name = strategy_name(inputs, result);
        base.memory = tile_bytes(n, result, mesh);
        out->push_back(std::move(base));
        continue;
      }
      // Partial sums over reduce_axes: all-reduce them ...
      const core::Bytes partial = tile_bytes(n, result, mesh);
      Strategy ar = base;
      ar.output = result;
      ar.communication = hooks.collective(Collective::kAllReduce, partial, reduce_axes);
      ar.name = strategy_name(inputs, result) + " (all-reduce " + axes_text(reduce_axes) + ")";
      ar.memory = partial;
      ar.all_reduce_axes = reduce_axes;
      ar.all_reduce_bytes = partial;
      out->push_back(std::move(ar));
      // ... or reduce-scatter them onto an output axis that is still whole.
      const std::int64_t group = group_size(mesh, reduce_axes);
      for (int a = 0; a < result.rank(); ++a) {
        if (!result.mesh_axes(a).empty()) continue;
        if (n.shape[static_cast<std::size_t>(a)] % group != 0) continue;
        std::vector<std::vector<int>> axes;
        for (int b = 0; b < result.rank(); ++b) axes.push_back(result.mesh_axes(b));
        if ((reduce_axes & kAxis0) != 0) axes[static_cast<std::size_t>(a)].push_back(0);
        if ((reduce_axes & kAxis1) != 0) axes[static_cast<std::size_t>(a)].push_back(1);
        Strategy rs = base;
        rs.output = ShardingSpec(std::move(axes));
        rs.communication = hooks.collective(Collective::kReduceScatter, partial, reduce_axes);
        rs.reduce_scatter_axes = reduce_axes;
        rs.reduce_scatter_bytes = partial;
        rs.name = strategy_name(inputs, rs.output) + " (reduce-scatter " +
                  axes_text(reduce_axes) + ")";
        rs.memory = tile_bytes(n, rs.output, mesh);
        out->push_back(std::move(rs));
      }
    }
  }
}

// Index of a MoE combine's expert-buffer operand [e,g,c,m]: the one carrying the output's
// last loop (m); the other operand is the combine weights [g,s,e,c].
std::size_t moe_buffer_operand(const IntraOpNode& n) {
  const int m = n.output_loops.back();
  const auto& l0 = n.operand_loops[0];
  return std::find(l0.begin(), l0.end(), m) != l0.end() ? 0 : 1;
}

// Expert parallelism (GShard): dispatch computes its token group's slice for every expert,
// then one all-to-all along mesh axis m moves slices to the experts' devices; combine is the
// mirror image. On a 2D mesh the data-parallel x expert-parallel variant (DeepSpeed-MoE,
// GShard's replicated experts) splits the groups over both axes (S01; with fewer groups than
// devices, groups over axis 0 and each group's tokens over axis 1), the experts over axis 1
// and keeps the groups split over axis 0 in the expert buffers: the all-to-all stays within
// each row of axis 1 (the devices of one node when axis 1 is intra-node) and every device
// works. Each strategy is priced here: all-to-all of the exchanged tile (dispatch: its output,
// combine: its expert-output operand), compute split over the devices that work.
void moe_strategies(const IntraOpGraph& g, int v, const LogicalMesh& mesh,
                    const CostHooks& hooks, std::vector<Strategy>* out) {
  const IntraOpNode& n = g.nodes[static_cast<std::size_t>(v)];
  const std::vector<std::int64_t> sizes = g.loop_sizes(v);
  // Dispatch "gsec,gsm->egcm": e and g are its output's axes 0 and 1. Combine (operands in
  // either order, validated by moe_roles()): the expert buffer [e,g,c,m] is the operand that
  // carries the output's m; the group loop is the output's axis 0.
  const bool dispatch = n.kind == OpKind::kMoeDispatch;
  const std::size_t buffer = dispatch ? 0 : moe_buffer_operand(n);
  const int g_loop = dispatch ? n.output_loops[1] : n.output_loops[0];
  const int e_loop = dispatch ? n.output_loops[0] : n.operand_loops[buffer][0];
  const std::int64_t groups = sizes[static_cast<std::size_t>(g_loop)];
  const std::int64_t experts = sizes[static_cast<std::size_t>(e_loop)];
  double flops = n.flops;
  if (flops <= 0.0) {
    flops = 2.0;
    for (std::int64_t sz : sizes) flops *= static_cast<double>(sz);
  }
  const IntraOpNode& buffer_node = g.nodes[static_cast<std::size_t>(n.operands[buffer])];
  // Mesh axes of each loop -> spec of a tensor with loops `loops`.
  auto spec_of = [](const std::vector<int>& loops, const std::map<int, std::vector<int>>& axes) {
    std::vector<std::vector<int>> out_axes(loops.size());
    for (std::size_t a = 0; a < loops.size(); ++a) {
      auto it = axes.find(loops[a]);
      if (it != axes.end()) out_axes[a] = it->second;
    }
    return ShardingSpec(std::move(out_axes));
  };
  // `tokens`: mesh axes of g in the token-side tensors; `buffers`: of g and e in the expert
  // buffers; the all-to-all runs over `a2a`.
  auto add = [&](const std::map<int, std::vector<int>>& tokens,
                 const std::map<int, std::vector<int>>& buffers, MeshAxes a2a,
                 std::int64_t parallel) {
    Strategy s;
    s.parallel_devices = parallel;
    for (std::size_t k = 0; k < n.operands.size(); ++k) {
      const bool is_buffer = !dispatch && k == buffer;
      s.inputs.push_back(spec_of(n.operand_loops[k], is_buffer ? buffers : tokens));
    }
    s.output = spec_of(n.output_loops, dispatch ? buffers : tokens);
    s.memory = tile_bytes(n, s.output, mesh);
    const core::Bytes moved =
        dispatch ? s.memory
                 : core::bytes(tile_elements(buffer_node.shape, s.inputs[buffer], mesh) *
                               buffer_node.element_bytes);
    s.communication = hooks.collective(Collective::kAllToAll, moved, a2a);
    s.compute = hooks.device_flops_per_s > 0.0
                    ? core::seconds(flops / static_cast<double>(parallel) /
                                    hooks.device_flops_per_s)
                    : core::seconds(0.0);
    s.name = strategy_name(s.inputs, s.output) + " (expert-parallel all-to-all " +
             axes_text(a2a) + ")";
    out->push_back(std::move(s));
  };
  // The token-side tensors may also split the tokens of each group (s) on the all-to-all's
  // axis when there are fewer groups than devices: each device still sends only its own
  // tokens to the experts' devices (the buffer tile it ends up with is what it receives).
  const int s_loop = n.operand_loops[dispatch ? 0 : 1 - buffer][1];
  const std::int64_t tokens_per_group = sizes[static_cast<std::size_t>(s_loop)];
  for (int m = 0; m < 2; ++m) {
    const std::int64_t parts = mesh.axis_size(m);
    if (parts <= 1 || experts % parts != 0) continue;
    const MeshAxes a2a = m == 0 ? kAxis0 : kAxis1;
    if (groups % parts == 0) {
      add({{g_loop, {m}}}, {{e_loop, {m}}}, a2a, parts);
    } else if (tokens_per_group % parts == 0) {
      add({{s_loop, {m}}}, {{e_loop, {m}}}, a2a, parts);
    }
  }
  if (mesh.rows > 1 && mesh.cols > 1 && experts % mesh.cols == 0 && groups % mesh.rows == 0) {
    if (groups % mesh.num_devices() == 0) {
      add({{g_loop, {0, 1}}}, {{g_loop, {0}}, {e_loop, {1}}}, kAxis1, mesh.num_devices());
    } else if (tokens_per_group % mesh.cols == 0) {
      add({{g_loop, {0}}, {s_loop, {1}}}, {{g_loop, {0}}, {e_loop, {1}}}, kAxis1,
          mesh.num_devices());
    }
  }
}

void follow_strategies(const IntraOpGraph& g, int v, const LogicalMesh& mesh,
                       const CostHooks& hooks, std::vector<Strategy>* out) {
  const IntraOpNode& n = g.nodes[static_cast<std::size_t>(v)];
  for (const ShardingSpec& spec : enumerate_specs(n.shape, mesh, n.splittable)) {
    Strategy s;
    s.output = spec;
    bool ok = true;
    for (std::size_t k = 0; k < n.operands.size() && ok; ++k) {
      const auto& oshape = g.nodes[static_cast<std::size_t>(n.operands[k])].shape;
      std::vector<std::vector<int>> axes(oshape.size());
      for (std::size_t a = 0; a < oshape.size(); ++a) {
        const int o = n.operand_axis_map[k][a];
        if (o < 0 || oshape[a] != n.shape[static_cast<std::size_t>(o)]) continue;  // broadcast
        axes[a] = spec.mesh_axes(o);
      }
      ShardingSpec in(std::move(axes));
      if (!spec_fits(oshape, in, mesh)) ok = false;
      s.inputs.push_back(std::move(in));
    }
    if (!ok) continue;
    if (n.kind == OpKind::kUpdate) {
      s.memory = core::bytes(tile_elements(n.shape, spec, mesh) * n.state_bytes_per_element);
    } else {
      s.memory = tile_bytes(n, spec, mesh);
    }
    s.name = strategy_name(s.inputs, spec);
    if ((n.kind == OpKind::kSoftmax || n.kind == OpKind::kLayerNorm) &&
        !spec.mesh_axes(n.norm_axis).empty()) {
      MeshAxes axes = 0;
      for (int a : spec.mesh_axes(n.norm_axis)) axes |= a == 0 ? kAxis0 : kAxis1;
      const std::int64_t row_len =
          n.shape[static_cast<std::size_t>(n.norm_axis)] / group_size(mesh, axes);
      const std::int64_t rows = tile_elements(n.shape, spec, mesh) / row_len;
      // Two fp32 statistics per row (max and sum, or mean and variance).
      s.communication = hooks.collective(Collective::kAllReduce, core::bytes(rows * 8), axes);
      s.name += " (all-reduce " + axes_text(axes) + " of row statistics)";
    }
    out->push_back(std::move(s));
  }
}

void reduce_strategies(const IntraOpGraph& g, int v, const LogicalMesh& mesh,
                       const CostHooks& hooks, std::vector<Strategy>* out) {
  const IntraOpNode& n = g.nodes[static_cast<std::size_t>(v)];
  const auto& ishape = g.nodes[static_cast<std::size_t>(n.operands[0])].shape;
  for (const ShardingSpec& in : enumerate_specs(ishape, mesh)) {
    std::vector<std::vector<int>> axes;
    MeshAxes reduced = 0;
    for (int a = 0; a < in.rank(); ++a) {
      const bool summed =
          std::find(n.reduce_axes.begin(), n.reduce_axes.end(), a) != n.reduce_axes.end();
      if (summed) {
        for (int m : in.mesh_axes(a)) reduced |= m == 0 ? kAxis0 : kAxis1;
      } else {
        axes.push_back(in.mesh_axes(a));
      }
    }
    Strategy s;
    s.inputs = {in};
    s.output = ShardingSpec(std::move(axes));
    s.memory = tile_bytes(n, s.output, mesh);
    s.name = strategy_name(s.inputs, s.output);
    if (reduced != 0) {
      s.communication = hooks.collective(Collective::kAllReduce, s.memory, reduced);
      s.all_reduce_axes = reduced;
      s.all_reduce_bytes = s.memory;
      s.name += " (all-reduce " + axes_text(reduced) + ")";
    }
    out->push_back(std::move(s));
  }
}

// Alpa §4.2: "for heavy operators such as matmul, we do not allow replicated computation";
// that is what makes ignoring compute sound. When compute is priced (device_flops_per_s > 0)
// replicated strategies stay and pay for it. Kept when no strategy uses every device.
void keep_fully_parallel(const LogicalMesh& mesh, const CostHooks& hooks,
                         std::vector<Strategy>* out) {
  if (hooks.device_flops_per_s > 0.0) return;
  std::vector<Strategy> full;
  for (Strategy& s : *out) {
    if (s.parallel_devices == mesh.num_devices()) full.push_back(std::move(s));
  }
  if (!full.empty()) {
    *out = std::move(full);
  }
}

}  // namespace

std::vector<Strategy> enumerate_strategies(const IntraOpGraph& graph, int v,
                                           const LogicalMesh& mesh, const CostHooks& hooks) {
  ALPASIM_CHECK(hooks.collective) << "CostHooks::collective is required";
  const IntraOpNode& n = graph.nodes.at(static_cast<std::size_t>(v));
  std::vector<Strategy> out;
  switch (n.kind) {
    case OpKind::kInput:
    case OpKind::kParameter:
      for (const ShardingSpec& spec : enumerate_specs(n.shape, mesh, n.splittable)) {
        Strategy s;
        s.output = spec;
        s.memory = tile_bytes(n, spec, mesh);
        s.name = spec.to_string();
        out.push_back(std::move(s));
      }
      break;
    case OpKind::kEinsum:
      einsum_strategies(graph, v, mesh, hooks, &out);
      if (!n.gather) keep_fully_parallel(mesh, hooks, &out);
      break;
    case OpKind::kMoeDispatch:
    case OpKind::kMoeCombine:
      einsum_strategies(graph, v, mesh, hooks, &out);
      moe_strategies(graph, v, mesh, hooks, &out);
      keep_fully_parallel(mesh, hooks, &out);
      break;
    case OpKind::kElementwise:
    case OpKind::kSoftmax:
    case OpKind::kLayerNorm:
    case OpKind::kUpdate:
      follow_strategies(graph, v, mesh, hooks, &out);
      break;
    case OpKind::kReduce:
      reduce_strategies(graph, v, mesh, hooks, &out);
      break;
  }
  ALPASIM_CHECK(!out.empty()) << "node " << v << " (\"" << n.name << "\") has no strategy";
  if (n.result_unread) {
    // Nothing reads the loss: its partial sums stay where they are (IntraOpNode::result_unread).
    for (Strategy& s : out) {
      if (s.all_reduce_axes == 0) continue;
      s.communication = core::seconds(0.0);
      s.all_reduce_axes = 0;
      s.all_reduce_bytes = core::bytes(0);
      s.name += " not needed: the result is not read";
    }
  }
  if (hooks.memory_bound && n.bytes_accessed > 0 && n.kind != OpKind::kUpdate) {
    // Shards of the work: a reduce's operand tiles (its result may be replicated after the
    // all-reduce of split summed axes), every other operator's output tiles.
    const std::int64_t devices = mesh.num_devices();
    const core::Seconds even = hooks.memory_bound(core::bytes(n.bytes_accessed / devices));
    for (Strategy& s : out) {
      const schema::ShardingSpec& work =
          n.kind == OpKind::kReduce && !s.inputs.empty() ? s.inputs[0] : s.output;
      const std::int64_t shards = std::max<std::int64_t>(1, work.num_shards(mesh.rows, mesh.cols));
      if (shards >= devices) continue;
      s.compute += hooks.memory_bound(core::bytes(n.bytes_accessed / shards)) - even;
    }
  }
  return out;
}

}  // namespace alpasim::planner::intra_op
