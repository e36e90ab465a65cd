#include "planner/intra_op/op_graph.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/check.h"

namespace alpasim::planner::intra_op {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kInput: return "input";
    case OpKind::kParameter: return "parameter";
    case OpKind::kEinsum: return "einsum";
    case OpKind::kElementwise: return "elementwise";
    case OpKind::kReduce: return "reduce";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kLayerNorm: return "layer_norm";
    case OpKind::kMoeDispatch: return "moe_dispatch";
    case OpKind::kMoeCombine: return "moe_combine";
    case OpKind::kUpdate: return "update";
  }
  return "unknown";
}

namespace {
bool einsum_like(OpKind k) {
  return k == OpKind::kEinsum || k == OpKind::kMoeDispatch || k == OpKind::kMoeCombine;
}
bool follows_operands(OpKind k) {
  return k == OpKind::kElementwise || k == OpKind::kSoftmax || k == OpKind::kLayerNorm ||
         k == OpKind::kUpdate;
}
std::string node_ref(const IntraOpGraph& g, std::size_t v) {
  return "node " + std::to_string(v) + " (\"" + g.nodes[v].name + "\"): ";
}
}  // namespace

bool has_moe_structure(const IntraOpNode& n) {
  if (n.operand_loops.size() != 2) return false;
  const auto& a = n.operand_loops[0];
  const auto& b = n.operand_loops[1];
  const auto& o = n.output_loops;
  if (n.kind == OpKind::kMoeDispatch) {
    // a = g s e c, b = g s m, o = e g c m.
    return a.size() == 4 && b.size() == 3 && o.size() == 4 && b[0] == a[0] && b[1] == a[1] &&
           o == std::vector<int>{a[2], a[0], a[3], b[2]};
  }
  if (n.kind == OpKind::kMoeCombine) {
    // w = g s e c, x = e g c m, o = g s m; either operand order.
    auto ok = [&](const std::vector<int>& x, const std::vector<int>& w) {
      return x.size() == 4 && w.size() == 4 && o.size() == 3 &&
             x == std::vector<int>{w[2], w[0], w[3], o[2]} && o[0] == w[0] && o[1] == w[1];
    };
    return ok(a, b) || ok(b, a);
  }
  return false;
}

core::Status IntraOpGraph::validate() const {
  for (std::size_t v = 0; v < nodes.size(); ++v) {
    const IntraOpNode& n = nodes[v];
    auto fail = [&](const std::string& what) {
      return core::invalid_argument(node_ref(*this, v) + what);
    };
    if (n.element_bytes <= 0) return fail("element_bytes must be positive");
    for (std::int64_t d : n.shape) {
      if (d <= 0) return fail("every output dim must be positive");
    }
    for (int o : n.operands) {
      if (o < 0 || static_cast<std::size_t>(o) >= v) {
        return fail("operand " + std::to_string(o) + " is not an earlier node");
      }
    }
    const std::size_t rank = n.shape.size();
    if (!n.splittable.empty() && n.splittable.size() != rank) {
      return fail("splittable has " + std::to_string(n.splittable.size()) + " entries for rank " +
                  std::to_string(rank));
    }
    if ((n.kind == OpKind::kInput || n.kind == OpKind::kParameter) && !n.operands.empty()) {
      return fail("inputs and parameters have no operands");
    }
    if (einsum_like(n.kind)) {
      if (n.operand_loops.size() != n.operands.size()) return fail("one loop list per operand");
      if (n.output_loops.size() != rank) return fail("output loops do not match the output rank");
      const bool extents = !n.loop_extents.empty();
      if (extents && n.kind != OpKind::kEinsum) return fail("loop extents on a non-einsum node");
      for (std::int64_t e : n.loop_extents) {
        if (e <= 0) return fail("every loop extent must be positive");
      }
      if (!n.loop_splittable.empty()) {
        std::size_t loops = n.loop_extents.size();
        for (const auto& l : n.operand_loops) {
          for (int id : l) loops = std::max(loops, static_cast<std::size_t>(std::max(id, 0)) + 1);
        }
        for (int id : n.output_loops) {
          loops = std::max(loops, static_cast<std::size_t>(std::max(id, 0)) + 1);
        }
        if (n.loop_splittable.size() != loops) {
          return fail("loop_splittable has " + std::to_string(n.loop_splittable.size()) +
                      " entries for " + std::to_string(loops) + " loops");
        }
      }
      if (n.kind != OpKind::kEinsum && !has_moe_structure(n)) {
        return fail("loops do not have the MoE dispatch / combine structure");
      }
      // With explicit extents, every loop id must have one; axis sizes may differ from it.
      auto known_loop = [&](int loop) {
        return loop >= 0 && static_cast<std::size_t>(loop) < n.loop_extents.size();
      };
      std::map<int, std::int64_t> size;
      for (std::size_t k = 0; k < n.operands.size(); ++k) {
        const auto& oshape = nodes[static_cast<std::size_t>(n.operands[k])].shape;
        if (n.operand_loops[k].size() != oshape.size()) {
          return fail("operand " + std::to_string(k) + " has rank " +
                      std::to_string(oshape.size()) + " but " +
                      std::to_string(n.operand_loops[k].size()) + " loops");
        }
        for (std::size_t a = 0; a < oshape.size(); ++a) {
          const int loop = n.operand_loops[k][a];
          if (loop < 0) return fail("negative loop id");
          if (extents) {
            if (!known_loop(loop)) {
              return fail("operand " + std::to_string(k) + " axis " + std::to_string(a) +
                          " has loop " + std::to_string(loop) + " without an extent");
            }
            continue;
          }
          auto [it, fresh] = size.emplace(loop, oshape[a]);
          if (!fresh && it->second != oshape[a]) {
            return fail("operand " + std::to_string(k) + " axis " + std::to_string(a) +
                        " has loop " + std::to_string(loop) + " of size " +
                        std::to_string(oshape[a]) + ", but that loop is " +
                        std::to_string(it->second));
          }
        }
      }
      for (std::size_t a = 0; a < rank; ++a) {
        if (extents) {
          if (!known_loop(n.output_loops[a])) {
            return fail("output axis " + std::to_string(a) + " has a loop without an extent");
          }
          continue;
        }
        auto it = size.find(n.output_loops[a]);
        if (it == size.end() || it->second != n.shape[a]) {
          return fail("output axis " + std::to_string(a) + " does not match its loop");
        }
      }
    }
    if (follows_operands(n.kind)) {
      if (n.operand_axis_map.size() != n.operands.size()) return fail("one axis map per operand");
      for (std::size_t k = 0; k < n.operands.size(); ++k) {
        const auto& oshape = nodes[static_cast<std::size_t>(n.operands[k])].shape;
        if (n.operand_axis_map[k].size() != oshape.size()) {
          return fail("axis map of operand " + std::to_string(k) + " does not match its rank");
        }
        for (std::size_t a = 0; a < oshape.size(); ++a) {
          const int out = n.operand_axis_map[k][a];
          if (out < -1 || out >= static_cast<int>(rank)) return fail("axis map out of range");
          if (out >= 0 && oshape[a] != n.shape[static_cast<std::size_t>(out)] && oshape[a] != 1 &&
              n.kind != OpKind::kElementwise) {
            return fail("operand " + std::to_string(k) + " axis " + std::to_string(a) +
                        " does not match output axis " + std::to_string(out));
          }
        }
      }
    }
    if ((n.kind == OpKind::kSoftmax || n.kind == OpKind::kLayerNorm) &&
        (n.norm_axis < 0 || static_cast<std::size_t>(n.norm_axis) >= rank)) {
      return fail("norm_axis out of range");
    }
    if (n.kind == OpKind::kReduce) {
      if (n.operands.size() != 1) return fail("a reduce has one operand");
      const auto& ishape = nodes[static_cast<std::size_t>(n.operands[0])].shape;
      if (ishape.size() != rank + n.reduce_axes.size()) {
        return fail("output rank must be the operand rank minus the reduced axes");
      }
    }
    if (n.kind == OpKind::kUpdate) {
      if (n.operands.size() != 2) return fail("an update has a weight and a gradient operand");
      if (n.state_bytes_per_element < 0) return fail("negative optimizer state size");
    }
  }
  return core::ok_status();
}

std::vector<std::int64_t> IntraOpGraph::loop_sizes(int v) const {
  const IntraOpNode& n = nodes[static_cast<std::size_t>(v)];
  ALPASIM_CHECK(einsum_like(n.kind)) << n.name;
  if (!n.loop_extents.empty()) return n.loop_extents;
  std::vector<std::int64_t> size;
  for (std::size_t k = 0; k < n.operands.size(); ++k) {
    const auto& oshape = nodes[static_cast<std::size_t>(n.operands[k])].shape;
    for (std::size_t a = 0; a < oshape.size(); ++a) {
      const auto loop = static_cast<std::size_t>(n.operand_loops[k][a]);
      if (size.size() <= loop) size.resize(loop + 1, 0);
      size[loop] = oshape[a];
    }
  }
  for (std::size_t a = 0; a < n.shape.size(); ++a) {
    const auto loop = static_cast<std::size_t>(n.output_loops[a]);
    if (size.size() <= loop) size.resize(loop + 1, 0);
    size[loop] = n.shape[a];
  }
  return size;
}

std::string IntraOpGraph::structural_key() const {
  std::ostringstream os;
  auto list = [&](const auto& v) {
    os << '[';
    for (const auto& x : v) os << x << ',';
    os << ']';
  };
  for (const IntraOpNode& n : nodes) {
    os << static_cast<int>(n.kind) << ':' << n.element_bytes << ':' << n.pass << ':';
    list(n.shape);
    list(n.operands);
    for (const auto& l : n.operand_loops) list(l);
    list(n.output_loops);
    list(n.loop_extents);
    list(n.loop_splittable);
    for (const auto& m : n.operand_axis_map) list(m);
    list(n.splittable);
    list(n.reduce_axes);
    os << n.norm_axis << ':' << n.state_bytes_per_element << ':' << n.flops << ':'
       << n.bytes_accessed << ':' << n.sums_operands << ':' << n.gather << ':' << n.result_unread << ':' << n.attention_window << ';';
  }
  return os.str();
}

std::uint64_t IntraOpGraph::structural_hash() const {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a 64-bit offset basis
  for (char c : structural_key()) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;  // FNV-1a 64-bit prime
  }
  return h;
}

// ---------------------------------------------------------------------------------------
// GraphBuilder

int GraphBuilder::add(IntraOpNode node) {
  graph_.nodes.push_back(std::move(node));
  return static_cast<int>(graph_.nodes.size()) - 1;
}

const std::vector<std::int64_t>& GraphBuilder::shape(int v) const {
  return graph_.nodes.at(static_cast<std::size_t>(v)).shape;
}

int GraphBuilder::input(std::string name, std::vector<std::int64_t> shape,
                        std::int64_t element_bytes) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kInput;
  n.shape = std::move(shape);
  n.element_bytes = element_bytes;
  return add(std::move(n));
}

int GraphBuilder::parameter(std::string name, std::vector<std::int64_t> shape,
                            std::int64_t element_bytes) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kParameter;
  n.shape = std::move(shape);
  n.element_bytes = element_bytes;
  return add(std::move(n));
}

namespace {
IntraOpNode einsum_node(const IntraOpGraph& g, std::string name, OpKind kind,
                        std::string_view equation, std::vector<int> operands) {
  const auto arrow = equation.find("->");
  ALPASIM_CHECK(arrow != std::string_view::npos) << "einsum needs '->': " << equation;
  std::vector<std::string_view> ins;
  std::string_view lhs = equation.substr(0, arrow);
  std::size_t start = 0;
  while (true) {
    const auto comma = lhs.find(',', start);
    ins.push_back(lhs.substr(start, comma == std::string_view::npos ? lhs.size() - start
                                                                     : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  ALPASIM_CHECK(ins.size() == operands.size()) << equation;
  std::map<char, int> loop_of;
  std::map<char, std::int64_t> size_of;
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = kind;
  n.element_bytes = g.nodes.at(static_cast<std::size_t>(operands[0])).element_bytes;
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const auto& oshape = g.nodes.at(static_cast<std::size_t>(operands[k])).shape;
    ALPASIM_CHECK(oshape.size() == ins[k].size()) << equation << " operand " << k;
    std::vector<int> loops;
    for (std::size_t a = 0; a < ins[k].size(); ++a) {
      const char c = ins[k][a];
      loop_of.emplace(c, static_cast<int>(loop_of.size()));
      size_of.emplace(c, oshape[a]);
      loops.push_back(loop_of.at(c));
    }
    n.operand_loops.push_back(std::move(loops));
  }
  for (char c : equation.substr(arrow + 2)) {
    ALPASIM_CHECK(loop_of.count(c) == 1) << "output loop '" << c << "' of " << equation;
    n.output_loops.push_back(loop_of.at(c));
    n.shape.push_back(size_of.at(c));
  }
  n.operands = std::move(operands);
  return n;
}
}  // namespace

int GraphBuilder::einsum(std::string name, std::string_view equation, std::vector<int> operands,
                         std::int64_t element_bytes) {
  IntraOpNode n =
      einsum_node(graph_, std::move(name), OpKind::kEinsum, equation, std::move(operands));
  if (element_bytes > 0) n.element_bytes = element_bytes;
  return add(std::move(n));
}

double ConvDims::flops() const {
  return 2.0 * static_cast<double>(n) * static_cast<double>(out_h()) *
         static_cast<double>(out_w()) * static_cast<double>(co) * static_cast<double>(kh) *
         static_cast<double>(kw) * static_cast<double>(ci);
}

IntraOpNode conv_node(std::string name, ConvPass pass, const ConvDims& d, int a, int b,
                      std::int64_t element_bytes) {
  const std::vector<int> x = {0, 1, 2, 3}, f = {4, 5, 3, 6}, y = {0, 1, 2, 6};
  IntraOpNode node;
  node.name = std::move(name);
  node.kind = OpKind::kEinsum;
  node.operands = {a, b};
  node.element_bytes = element_bytes;
  switch (pass) {
    case ConvPass::kForward:
      node.operand_loops = {x, f};
      node.output_loops = y;
      node.shape = {d.n, d.out_h(), d.out_w(), d.co};
      break;
    case ConvPass::kDataGradient:
      node.operand_loops = {y, f};
      node.output_loops = x;
      node.shape = {d.n, d.h, d.w, d.ci};
      break;
    case ConvPass::kFilterGradient:
      node.operand_loops = {x, y};
      node.output_loops = f;
      node.shape = {d.kh, d.kw, d.ci, d.co};
      break;
  }
  node.loop_extents = {d.n, d.out_h(), d.out_w(), d.ci, d.kh, d.kw, d.co};
  const bool pointwise = d.kh == 1 && d.kw == 1;
  node.loop_splittable = {true, pointwise, pointwise, true, false, false, true};
  node.flops = d.flops();
  return node;
}

int GraphBuilder::conv2d(std::string name, ConvPass pass, const ConvDims& dims, int a, int b) {
  const std::vector<std::int64_t> x = {dims.n, dims.h, dims.w, dims.ci};
  const std::vector<std::int64_t> f = {dims.kh, dims.kw, dims.ci, dims.co};
  const std::vector<std::int64_t> y = {dims.n, dims.out_h(), dims.out_w(), dims.co};
  const auto& sa = shape(a);
  const auto& sb = shape(b);
  switch (pass) {
    case ConvPass::kForward: ALPASIM_CHECK(sa == x && sb == f) << name; break;
    case ConvPass::kDataGradient: ALPASIM_CHECK(sa == y && sb == f) << name; break;
    case ConvPass::kFilterGradient: ALPASIM_CHECK(sa == x && sb == y) << name; break;
  }
  const std::int64_t bytes = graph_.nodes.at(static_cast<std::size_t>(a)).element_bytes;
  return add(conv_node(std::move(name), pass, dims, a, b, bytes));
}

int GraphBuilder::moe_dispatch(std::string name, int combine_weights, int tokens) {
  return add(einsum_node(graph_, std::move(name), OpKind::kMoeDispatch, "gsec,gsm->egcm",
                         {combine_weights, tokens}));
}

int GraphBuilder::moe_combine(std::string name, int expert_out, int combine_weights) {
  return add(einsum_node(graph_, std::move(name), OpKind::kMoeCombine, "egcm,gsec->gsm",
                         {expert_out, combine_weights}));
}

int GraphBuilder::elementwise(std::string name, std::vector<int> operands) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kElementwise;
  std::size_t rank = 0;
  for (int o : operands) rank = std::max(rank, shape(o).size());
  n.shape.assign(rank, 1);
  for (int o : operands) {
    const auto& s = shape(o);
    std::vector<int> map;
    for (std::size_t a = 0; a < s.size(); ++a) {
      const std::size_t out = rank - s.size() + a;
      n.shape[out] = std::max(n.shape[out], s[a]);
      map.push_back(s[a] == 1 ? -1 : static_cast<int>(out));
    }
    n.operand_axis_map.push_back(std::move(map));
  }
  n.element_bytes = graph_.nodes.at(static_cast<std::size_t>(operands[0])).element_bytes;
  n.operands = std::move(operands);
  return add(std::move(n));
}

int GraphBuilder::transpose(std::string name, int operand, std::vector<int> perm) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kElementwise;
  const auto& s = shape(operand);
  ALPASIM_CHECK(perm.size() == s.size()) << n.name;
  std::vector<int> map(s.size(), -1);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    n.shape.push_back(s.at(static_cast<std::size_t>(perm[i])));
    map[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  }
  n.operand_axis_map.push_back(std::move(map));
  n.element_bytes = graph_.nodes.at(static_cast<std::size_t>(operand)).element_bytes;
  n.operands = {operand};
  return add(std::move(n));
}

int GraphBuilder::reshape(std::string name, int operand, std::vector<std::int64_t> out_shape,
                          std::vector<int> source) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kElementwise;
  const auto& s = shape(operand);
  ALPASIM_CHECK(source.size() == out_shape.size()) << n.name;
  std::vector<int> map(s.size(), -1);
  n.splittable.assign(out_shape.size(), false);
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] < 0) continue;
    map.at(static_cast<std::size_t>(source[i])) = static_cast<int>(i);
    n.splittable[i] = true;
  }
  n.operand_axis_map.push_back(std::move(map));
  n.shape = std::move(out_shape);
  n.element_bytes = graph_.nodes.at(static_cast<std::size_t>(operand)).element_bytes;
  n.operands = {operand};
  return add(std::move(n));
}

int GraphBuilder::reduce(std::string name, int operand, std::vector<int> axes) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kReduce;
  const auto& s = shape(operand);
  for (std::size_t a = 0; a < s.size(); ++a) {
    if (std::find(axes.begin(), axes.end(), static_cast<int>(a)) == axes.end()) {
      n.shape.push_back(s[a]);
    }
  }
  n.reduce_axes = std::move(axes);
  n.element_bytes = graph_.nodes.at(static_cast<std::size_t>(operand)).element_bytes;
  n.operands = {operand};
  return add(std::move(n));
}

namespace {
IntraOpNode normalise_node(const std::vector<std::int64_t>& s, std::string name, OpKind kind,
                           int operand, int axis, std::int64_t element_bytes) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = kind;
  n.shape = s;
  n.norm_axis = axis;
  std::vector<int> map;
  for (std::size_t a = 0; a < s.size(); ++a) map.push_back(static_cast<int>(a));
  n.operand_axis_map.push_back(std::move(map));
  n.operands = {operand};
  n.element_bytes = element_bytes;
  return n;
}
}  // namespace

int GraphBuilder::softmax(std::string name, int operand, int axis) {
  return add(normalise_node(shape(operand), std::move(name), OpKind::kSoftmax, operand, axis,
                            graph_.nodes.at(static_cast<std::size_t>(operand)).element_bytes));
}

int GraphBuilder::layer_norm(std::string name, int operand, int axis) {
  return add(normalise_node(shape(operand), std::move(name), OpKind::kLayerNorm, operand, axis,
                            graph_.nodes.at(static_cast<std::size_t>(operand)).element_bytes));
}

int GraphBuilder::update(std::string name, int weight, int grad,
                         std::int64_t state_bytes_per_element) {
  IntraOpNode n;
  n.name = std::move(name);
  n.kind = OpKind::kUpdate;
  n.shape = shape(weight);
  ALPASIM_CHECK(shape(grad) == n.shape) << n.name << ": gradient shape differs from the weight";
  std::vector<int> map;
  for (std::size_t a = 0; a < n.shape.size(); ++a) map.push_back(static_cast<int>(a));
  n.operand_axis_map = {map, map};
  n.operands = {weight, grad};
  n.state_bytes_per_element = state_bytes_per_element;
  n.element_bytes = graph_.nodes.at(static_cast<std::size_t>(weight)).element_bytes;
  return add(std::move(n));
}

}  // namespace alpasim::planner::intra_op
