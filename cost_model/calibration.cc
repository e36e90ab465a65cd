#include "cost_model/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "cluster/topology.h"
#include "cost_model/attention_fit.h"
#include "core/check.h"
#include "core/text.h"

namespace alpasim::cost_model {
namespace {

using cluster::LinkClass;
using schema::ProfileRole;

// "Large-message" rows (no size given) are predicted at 1 TiB, where every latency term is
// below 0.01 % of the transfer time.
constexpr std::int64_t kAsymptoteBytes = std::int64_t{1} << 40;
// Rows at or below this size are latency rows for the alpha fit (bandwidth term < 1 %).
constexpr std::int64_t kLatencyRowMaxBytes = 4096;
// The Simple-protocol line t = simple_latency + S/(eff B) is fitted on rows of at least
// 32 MiB. NCCL switches to Simple around 1-2 MiB on NVLink (collectives.csv H200 row "RING/LL
// up to 1MiB") but keeps adding channels up to tens of MiB, a ramp a straight line does not
// describe (the A100 curve even dips from 8 to 16 MiB). Rows below are predicted and
// reported, never fitted. Ordinary least squares on time: the large rows, where the line
// applies best, carry the most weight.
constexpr std::int64_t kSimpleRowMinBytes = std::int64_t{32} << 20;
// The size-dependent Simple latency (the residual of that line) is tabulated from fit rows
// of at least this size, where NCCL runs the Simple protocol, and interpolated in log2(S)
// between them: it carries the channel ramp the line cannot.
constexpr std::int64_t kCurveRowMinBytes = std::int64_t{2} << 20;

// (log2 S, residual seconds) points from rows, averaged per size, clamped at 0.
std::vector<std::pair<double, double>> residual_curve(const std::vector<double>& sizes,
                                                      const std::vector<double>& x,
                                                      const std::vector<double>& y, double eff) {
  std::map<double, std::pair<double, int>> acc;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto& a = acc[std::log2(sizes[i])];
    a.first += std::max(0.0, y[i] - x[i] / eff);
    ++a.second;
  }
  std::vector<std::pair<double, double>> out;
  for (const auto& [lx, a] : acc) out.push_back({lx, a.first / a.second});
  return out;
}
// The LL fit uses rows between these sizes (below, latency dominates; above, Simple).
constexpr std::int64_t kLlRowMinBytes = std::int64_t{1} << 16;
constexpr std::int64_t kLlRowMaxBytes = std::int64_t{1} << 20;

std::size_t idx(LinkClass c) { return static_cast<std::size_t>(c); }
std::size_t didx(core::DType d) { return static_cast<std::size_t>(d); }

bool nvlink_family(LinkClass c) { return c == LinkClass::kNvswitch || c == LinkClass::kNvlink; }

// Weighted least squares y = a + b x; returns false with fewer than two distinct x.
bool fit_line(const std::vector<double>& x, const std::vector<double>& y,
              const std::vector<double>& w, double& a, double& b) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sw += w[i];
    sx += w[i] * x[i];
    sy += w[i] * y[i];
    sxx += w[i] * x[i] * x[i];
    sxy += w[i] * x[i] * y[i];
  }
  const double det = sw * sxx - sx * sx;
  if (x.size() < 2 || std::abs(det) <= 1e-30 * std::max(1.0, sw * sxx)) return false;
  b = (sw * sxy - sx * sy) / det;
  a = (sy - b * sx) / sw;
  return true;
}

// y = b x through the origin (used when the intercept would be negative).
double fit_slope(const std::vector<double>& x, const std::vector<double>& y,
                 const std::vector<double>& w) {
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += w[i] * x[i] * x[i];
    sxy += w[i] * x[i] * y[i];
  }
  return sxx > 0 ? sxy / sxx : 0;
}

struct RowContext {
  const schema::CollectiveEntry* row = nullptr;
  cluster::GroupInfo group;
  Collective collective = Collective::kAllReduce;
  double bytes = 0;        // message size used for prediction
  double published_s = 0;  // published time (derived from busbw when only that is given)
};

std::string describe_row(const schema::CollectiveEntry& r) {
  std::ostringstream os;
  os << r.num_gpus << " GPUs x " << r.num_nodes << " node" << (r.num_nodes > 1 ? "s" : "")
     << ", " << (r.message_bytes > 0 ? std::to_string(r.message_bytes) + " B" : "large") << ", "
     << r.algorithm;
  if (r.protocol != "default") os << "/" << r.protocol;
  if (r.channels > 0) os << ", " << r.channels << " channel(s)";
  return os.str();
}

core::Result<cluster::GroupInfo> row_group(const schema::CollectiveEntry& row,
                                           const cluster::ClusterSpec& machine) {
  if (row.num_gpus % row.num_nodes != 0) {
    return core::invalid_argument(std::to_string(row.num_gpus) + " GPUs do not split evenly over " +
                                  std::to_string(row.num_nodes) + " nodes");
  }
  const std::int64_t gpn = row.num_gpus / row.num_nodes;
  if (gpn > machine.gpus_per_node) {
    return core::invalid_argument(std::to_string(gpn) + " GPUs per node exceed the " +
                                  std::to_string(machine.gpus_per_node) + " of a " +
                                  (machine.preset.empty() ? "machine" : machine.preset) + " node");
  }
  cluster::ClusterSpec spec = machine;
  spec.nodes = row.num_nodes;
  ALPASIM_ASSIGN_OR_RETURN(cluster::Topology topo, cluster::Topology::build(spec));
  return topo.submesh_group(row.num_nodes, gpn);
}

// The path of a send/recv row: GPU 0 to GPU 1 on one node, or to the first GPU of node 1.
core::Result<cluster::PathInfo> row_path(const schema::CollectiveEntry& row,
                                         const cluster::ClusterSpec& machine) {
  if (row.num_gpus != 2 || row.num_nodes > 2) {
    return core::invalid_argument("a send_recv row needs num_gpus 2 on 1 or 2 nodes, got " +
                                  std::to_string(row.num_gpus) + " GPUs on " +
                                  std::to_string(row.num_nodes) + " nodes");
  }
  cluster::ClusterSpec spec = machine;
  spec.nodes = row.num_nodes;
  ALPASIM_ASSIGN_OR_RETURN(cluster::Topology topo, cluster::Topology::build(spec));
  return topo.point_to_point(0, row.num_nodes > 1 ? machine.gpus_per_node : 1);
}

double data_factor(Collective c, double n) {
  switch (c) {
    case Collective::kAllReduce: return 2 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (n - 1) / n;
    default: return 1;
  }
}
double ring_hops(Collective c, double n) {
  return c == Collective::kAllReduce ? 2 * (n - 1) : (n - 1);
}

std::string fitted(const std::string& machine, std::size_t rows) {
  return "fitted: " + machine + " (" + std::to_string(rows) + " row" + (rows == 1 ? "" : "s") + ")";
}

}  // namespace

std::optional<Collective> parse_collective(std::string_view name) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kBroadcast, Collective::kSendRecv}) {
    if (name == collective_name(c)) return c;
  }
  return std::nullopt;
}

std::optional<cluster::LinkClass> parse_link_class(std::string_view name) {
  for (int i = 0; i < cluster::kNumLinkClasses; ++i) {
    const auto c = static_cast<LinkClass>(i);
    if (name == cluster::link_class_name(c)) return c;
  }
  return std::nullopt;
}

CalibratedParams default_params() {
  CalibratedParams p;
  // GEMM: a typical large-GEMM cuBLAS efficiency; replaced by the first profile with GEMM rows.
  p.compute.gemm[didx(core::DType::kFp32)] = {0.9, 1e9};
  p.compute.gemm[didx(core::DType::kTf32)] = {0.8, 5e9};
  p.compute.gemm[didx(core::DType::kFp16)] = {0.8, 5e9};
  p.compute.gemm[didx(core::DType::kBf16)] = {0.8, 5e9};
  p.compute.gemm[didx(core::DType::kFp8)] = {0.7, 1e10};
  // No shipped profile measures HBM streaming or kernel launch gaps: documented typical values
  // (STREAM-like kernels reach 80-90 % of HBM peak; a launch plus tail costs a few us).
  p.compute.hbm_efficiency = 0.85;
  p.compute.kernel_overhead_s = 3e-6;
  p.compute.conv_slowdown = 1.0;
  // NCCL design constants (src/graph/tuning.cc orders of magnitude): base latency a few us,
  // ~1 us per hop, LL carries 4 data bytes per 8-byte line.
  p.collective.base_latency_s = 6e-6;
  p.collective.hop_latency_s = 1e-6;
  p.collective.simple_latency_s = 10e-6;
  p.collective.ll_bandwidth_fraction = 0.5;
  p.collective.nvls_efficiency = 0.6;
  for (auto& l : p.collective.link) l = {0.8, 0.0};
  const std::string d = "default: uncalibrated design value";
  for (const char* name :
       {"gemm/fp32", "gemm/tf32", "gemm/fp16", "gemm/bf16", "gemm/fp8", "hbm_efficiency",
        "kernel_overhead_s", "conv_slowdown", "base_latency_s", "hop_latency_s",
        "simple_latency_s", "simple_latency_curve", "ll_bandwidth_fraction", "nvls_efficiency"}) {
    p.origin[name] = d;
  }
  for (int i = 0; i < cluster::kNumLinkClasses; ++i) {
    const std::string cls = cluster::link_class_name(static_cast<LinkClass>(i));
    p.origin["efficiency/" + cls] = d;
    p.origin["p2p_efficiency/" + cls] = "default: same as efficiency/" + cls;
  }
  // Fused attention: no curve until a profile has attention rows; flash GEMMs are then
  // priced as GEMMs (ComputeCostModel::flash_attention_dot).
  p.origin["attention/forward"] = "default: not fitted (flash GEMMs priced as GEMMs)";
  p.origin["attention/backward"] = "default: not fitted (flash GEMMs priced as GEMMs)";
  return p;
}

core::Result<CollectiveEstimate> predict_collective_row(const schema::CollectiveEntry& row,
                                                        const cluster::ClusterSpec& machine,
                                                        const CalibratedParams& params) {
  auto coll = parse_collective(row.collective);
  if (!coll) return core::invalid_argument("unknown collective \"" + row.collective + "\"");
  CollectiveParams cp = params.collective;
  cp.local_copy_bytes_per_s = params.compute.hbm_efficiency * machine.gpu.hbm_bandwidth.value();
  CollectiveCostModel model(cp);
  const core::Bytes bytes(row.message_bytes > 0 ? row.message_bytes : kAsymptoteBytes);
  if (*coll == Collective::kSendRecv) {
    ALPASIM_ASSIGN_OR_RETURN(cluster::PathInfo path, row_path(row, machine));
    return model.send_recv(bytes, path);
  }
  ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo g, row_group(row, machine));
  std::optional<Protocol> protocol;
  if (row.protocol == "ll") protocol = Protocol::kLowLatency;
  if (row.protocol == "simple" || row.protocol == "ll128") protocol = Protocol::kSimple;
  if (row.algorithm == "default") {
    if (!protocol) return model.estimate(*coll, bytes, g);
    CollectiveEstimate best;
    best.time = core::Seconds(std::numeric_limits<double>::infinity());
    for (CollectiveAlgorithm a :
         {CollectiveAlgorithm::kRing, CollectiveAlgorithm::kTree, CollectiveAlgorithm::kHierarchical,
          CollectiveAlgorithm::kNvls, CollectiveAlgorithm::kDirect,
          CollectiveAlgorithm::kTwoDimHierarchical}) {
      CollectiveEstimate e = model.estimate_with(*coll, a, bytes, g, protocol);
      if (e.time < best.time) best = e;
    }
    return best;
  }
  const CollectiveAlgorithm a = row.algorithm == "ring"   ? CollectiveAlgorithm::kRing
                                : row.algorithm == "tree" ? CollectiveAlgorithm::kTree
                                                          : CollectiveAlgorithm::kNvls;
  return model.estimate_with(*coll, a, bytes, g, protocol);
}

double predict_link_row_gbyte_per_s(const schema::LinkEntry& row, const CalibratedParams& params) {
  const auto cls = parse_link_class(row.link_class);
  if (!cls) return 0;
  const LinkClassParams& l = params.collective.link[idx(*cls)];
  const double eff = row.measurement == "p2p" && l.p2p_efficiency > 0 ? l.p2p_efficiency
                                                                      : l.bandwidth_efficiency;
  return eff * row.spec_gbyte_per_s;
}

core::Result<Calibration> calibrate(const schema::Profile& profile,
                                    const cluster::ClusterSpec& machine,
                                    const CalibratedParams& prior) {
  if (profile.provenance.gpu != machine.gpu.name) {
    return core::invalid_argument("profile of GPU \"" + profile.provenance.gpu +
                                  "\" cannot calibrate a machine of \"" + machine.gpu.name + "\"");
  }
  const std::string& who = profile.provenance.machine;
  Calibration out;
  CalibratedParams& P = out.params;
  P = prior;
  for (auto& [name, origin] : P.origin) {
    if (origin.rfind("fitted: ", 0) == 0) origin = "inherited: " + origin.substr(8);
  }
  auto& C = P.collective;

  // Resolve every collective row's group once.
  std::vector<RowContext> rows;
  for (const auto& r : profile.collectives) {
    RowContext ctx;
    ctx.row = &r;
    auto coll = parse_collective(r.collective);
    ALPASIM_CHECK(coll.has_value()) << "the profile loader admitted collective " << r.collective;
    ctx.collective = *coll;
    ALPASIM_ASSIGN_OR_RETURN(ctx.group, row_group(r, machine));
    ctx.bytes = static_cast<double>(r.message_bytes > 0 ? r.message_bytes : kAsymptoteBytes);
    const double f = data_factor(ctx.collective, static_cast<double>(r.num_gpus));
    if (r.time_us) {
      ctx.published_s = *r.time_us * 1e-6;
    } else if (r.message_bytes > 0) {
      ctx.published_s = static_cast<double>(r.message_bytes) * f / (*r.busbw_gbyte_per_s * 1e9);
    }
    rows.push_back(ctx);
  }
  auto is_fit = [](const RowContext& c) { return c.row->meta.role == ProfileRole::kFit; };

  // 1. Latency: t = base + 2(n-1)(hop + wire) on tiny single-node all-reduce rows.
  {
    std::vector<double> x, y, w;
    std::set<double> distinct;
    for (const auto& c : rows) {
      const auto& r = *c.row;
      if (!is_fit(c) || c.collective != Collective::kAllReduce || r.num_nodes != 1 ||
          !r.time_us || r.message_bytes <= 0 || r.message_bytes > kLatencyRowMaxBytes ||
          (r.algorithm != "ring" && r.algorithm != "default")) {
        continue;
      }
      const double hops = 2.0 * static_cast<double>(r.num_gpus - 1);
      x.push_back(hops);
      y.push_back(c.published_s - hops * c.group.intra_hop_latency.value());
      w.push_back(1.0 / (c.published_s * c.published_s));
      distinct.insert(hops);
    }
    double a = 0, b = 0;
    if (distinct.size() >= 2 && fit_line(x, y, w, a, b)) {
      if (a < 0) {
        a = 0;
        b = fit_slope(x, y, w);
      }
      C.base_latency_s = a;
      C.hop_latency_s = std::max(0.0, b);
      P.origin["base_latency_s"] = fitted(who, x.size());
      P.origin["hop_latency_s"] = fitted(who, x.size());
    }
  }

  // 2. Ring bandwidth efficiency of the intra-node class and the Simple latency:
  //    t - base - hops*(hop + wire) = simple_latency + (f S / B_graph) / efficiency.
  bool simple_fitted = false;
  {
    std::vector<double> x, y, w, asym, cs, cx, cy;
    std::optional<LinkClass> cls;
    for (const auto& c : rows) {
      const auto& r = *c.row;
      const bool ring_like =
          r.algorithm == "ring" || (r.algorithm == "default" && (c.collective != Collective::kAllReduce ||
                                                                 !c.group.nvls_capable));
      if (!is_fit(c) || r.num_nodes != 1 || !ring_like || r.protocol == "ll" ||
          (c.collective != Collective::kAllReduce && c.collective != Collective::kAllGather &&
           c.collective != Collective::kReduceScatter) ||
          (r.message_bytes > 0 && r.message_bytes < kCurveRowMinBytes)) {
        continue;
      }
      const double n = static_cast<double>(r.num_gpus);
      const double bw = c.group.intra_ring_bandwidth.value();
      cls = c.group.intra_class;
      if (r.message_bytes == 0) {
        asym.push_back(*r.busbw_gbyte_per_s * 1e9 / bw);
        continue;
      }
      const double base = C.base_latency_s + ring_hops(c.collective, n) *
                                                 (C.hop_latency_s + c.group.intra_hop_latency.value());
      cs.push_back(c.bytes);
      cx.push_back(data_factor(c.collective, n) * c.bytes / bw);
      cy.push_back(c.published_s - base);
      if (r.message_bytes < kSimpleRowMinBytes) continue;  // curve only
      x.push_back(cx.back());
      y.push_back(cy.back());
      w.push_back(1.0);
    }
    double eff = 0;
    std::size_t used = 0;
    double a = 0, b = 0;
    if (x.size() >= 2 && fit_line(x, y, w, a, b) && b > 0) {
      if (a < 0) {
        a = 0;
        b = fit_slope(x, y, w);
      }
      C.simple_latency_s = a;
      simple_fitted = true;
      P.origin["simple_latency_s"] = fitted(who, x.size());
      eff = 1.0 / b;
      used = x.size();
      C.simple_latency_curve = residual_curve(cs, cx, cy, eff);
      P.origin["simple_latency_curve"] = fitted(who, cs.size());
    } else if (!asym.empty()) {
      for (double e : asym) eff += e / static_cast<double>(asym.size());
      used = asym.size();
    } else if (!x.empty()) {
      // Too few sizes for a line: keep the prior simple_latency, solve for the efficiency.
      double inv = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        inv += (y[i] - C.simple_latency_s) / x[i] / static_cast<double>(x.size());
      }
      if (inv > 0) {
        eff = 1.0 / inv;
        used = x.size();
      }
    }
    if (used > 0 && cls) {
      C.link[idx(*cls)].bandwidth_efficiency = eff;
      P.origin[std::string("efficiency/") + cluster::link_class_name(*cls)] = fitted(who, used);
      if (nvlink_family(*cls)) {  // NVSwitch ports are NVLinks: share the figure
        const LinkClass sib = *cls == LinkClass::kNvswitch ? LinkClass::kNvlink : LinkClass::kNvswitch;
        C.link[idx(sib)].bandwidth_efficiency = eff;
        P.origin[std::string("efficiency/") + cluster::link_class_name(sib)] =
            std::string("inherited: efficiency/") + cluster::link_class_name(*cls) + " of " + who;
      }
    }
  }

  // 3. NVLS: t - base - 2(hop + wire) = simple_latency + S (1 + 1/n) / (nvls_eff * B_gpu).
  {
    std::vector<double> x, y, w, asym, cs, cx, cy;
    for (const auto& c : rows) {
      const auto& r = *c.row;
      if (!is_fit(c) || r.num_nodes != 1 || c.collective != Collective::kAllReduce ||
          !c.group.nvls_capable || r.protocol == "ll" ||
          !(r.algorithm == "nvls" ||
            (r.algorithm == "default" && (r.message_bytes == 0 || r.message_bytes >= kCurveRowMinBytes)))) {
        continue;
      }
      const double n = static_cast<double>(r.num_gpus);
      const double bw = c.group.intra_ring_bandwidth.value();
      if (r.message_bytes == 0) {
        // busbw = 2(n-1)/n S / t with t = S (1 + 1/n) / (eff B).
        asym.push_back(*r.busbw_gbyte_per_s * 1e9 / bw * (1 + 1 / n) / (2 * (n - 1) / n));
        continue;
      }
      const double base = C.base_latency_s + 2 * (C.hop_latency_s + c.group.intra_hop_latency.value());
      cs.push_back(c.bytes);
      cx.push_back(c.bytes * (1 + 1 / n) / bw);
      cy.push_back(c.published_s - base);
      if (r.message_bytes < kSimpleRowMinBytes) continue;  // curve only
      x.push_back(cx.back());
      y.push_back(cy.back());
      w.push_back(1.0);
    }
    double a = 0, b = 0;
    if (x.size() >= 2 && fit_line(x, y, w, a, b) && b > 0) {
      if (a < 0) {
        a = 0;
        b = fit_slope(x, y, w);
      }
      if (!simple_fitted) {
        C.simple_latency_s = a;
        P.origin["simple_latency_s"] = fitted(who, x.size());
        C.simple_latency_curve = residual_curve(cs, cx, cy, 1.0 / b);
        P.origin["simple_latency_curve"] = fitted(who, cs.size());
      }
      C.nvls_efficiency = 1.0 / b;
      P.origin["nvls_efficiency"] = fitted(who, x.size());
    } else if (!asym.empty()) {
      double eff = 0;
      for (double e : asym) eff += e / static_cast<double>(asym.size());
      C.nvls_efficiency = eff;
      P.origin["nvls_efficiency"] = fitted(who, asym.size());
    }
  }

  // 4. LL bandwidth fraction from mid-size single-node all-reduce rows:
  //    fraction = f S / (eff B (t - base - hops (hop + wire))), geometric mean.
  {
    double log_sum = 0;
    std::size_t used = 0;
    for (const auto& c : rows) {
      const auto& r = *c.row;
      if (!is_fit(c) || r.num_nodes != 1 || c.collective != Collective::kAllReduce ||
          r.protocol == "simple" || (r.algorithm != "default" && r.algorithm != "ring") ||
          r.message_bytes < kLlRowMinBytes || r.message_bytes > kLlRowMaxBytes) {
        continue;
      }
      const double n = static_cast<double>(r.num_gpus);
      const double lat = C.base_latency_s +
                         2 * (n - 1) * (C.hop_latency_s + c.group.intra_hop_latency.value());
      const double rest = c.published_s - lat;
      if (rest <= 0.05 * c.published_s) continue;  // latency-bound: says nothing about bandwidth
      const double eff = C.link[idx(c.group.intra_class)].bandwidth_efficiency;
      const double frac = data_factor(c.collective, n) * c.bytes /
                          (eff * c.group.intra_ring_bandwidth.value() * rest);
      log_sum += std::log(frac);
      ++used;
    }
    if (used > 0) {
      C.ll_bandwidth_fraction = std::min(1.0, std::exp(log_sum / static_cast<double>(used)));
      P.origin["ll_bandwidth_fraction"] = fitted(who, used);
    }
  }

  // 5. Link rows: per-class efficiencies (collective busbw per NIC, or p2p copies).
  {
    std::map<LinkClass, std::pair<double, std::size_t>> coll, p2p;
    for (const auto& l : profile.links) {
      if (l.meta.role != ProfileRole::kFit) continue;
      const auto cls = parse_link_class(l.link_class);
      ALPASIM_CHECK(cls.has_value()) << "the profile loader admitted link class " << l.link_class;
      auto& acc = l.measurement == "p2p" ? p2p[*cls] : coll[*cls];
      acc.first += l.achieved_gbyte_per_s / l.spec_gbyte_per_s;
      ++acc.second;
    }
    for (const auto& [cls, acc] : coll) {
      C.link[idx(cls)].bandwidth_efficiency = acc.first / static_cast<double>(acc.second);
      P.origin[std::string("efficiency/") + cluster::link_class_name(cls)] = fitted(who, acc.second);
      if (cluster::is_network(cls)) {  // other network classes without their own rows follow
        for (LinkClass sib : {LinkClass::kInfiniband, LinkClass::kEthernet, LinkClass::kEfa}) {
          if (sib == cls || coll.contains(sib)) continue;
          C.link[idx(sib)].bandwidth_efficiency = C.link[idx(cls)].bandwidth_efficiency;
          P.origin[std::string("efficiency/") + cluster::link_class_name(sib)] =
              std::string("inherited: efficiency/") + cluster::link_class_name(cls) + " of " + who;
        }
      }
    }
    for (const auto& [cls, acc] : p2p) {
      C.link[idx(cls)].p2p_efficiency = acc.first / static_cast<double>(acc.second);
      P.origin[std::string("p2p_efficiency/") + cluster::link_class_name(cls)] =
          fitted(who, acc.second);
    }
  }

  // 5b. send/recv rows >= 32 MiB: p2p efficiency of the path's bottleneck class,
  //     eff = S / ((t - base - hop - path latency) * path bandwidth), averaged per class.
  {
    std::map<LinkClass, std::pair<double, std::size_t>> acc;
    for (const auto& c : rows) {
      const auto& r = *c.row;
      if (!is_fit(c) || c.collective != Collective::kSendRecv || r.message_bytes < kSimpleRowMinBytes ||
          c.published_s <= 0) {
        continue;
      }
      ALPASIM_ASSIGN_OR_RETURN(cluster::PathInfo path, row_path(r, machine));
      const double rest =
          c.published_s - C.base_latency_s - C.hop_latency_s - path.latency.value();
      if (rest <= 0) continue;
      auto& a = acc[path.bottleneck_class];
      a.first += c.bytes / (rest * path.bandwidth.value());
      ++a.second;
    }
    for (const auto& [cls, a] : acc) {
      C.link[idx(cls)].p2p_efficiency = a.first / static_cast<double>(a.second);
      P.origin[std::string("p2p_efficiency/") + cluster::link_class_name(cls)] = fitted(who, a.second);
    }
  }

  // 6. GEMM curves: 1/efficiency = 1/max + (half/max) / x, per dtype; fp16 and bf16 share
  //    tensor-core datapaths, so a curve fitted for one serves the other if it has no rows.
  //    Least squares on relative residuals (weight 1/y²): a profile's GEMMs span five and a
  //    half decades of FLOPs, and unweighted residuals in 1/efficiency let the smallest ones decide the
  //    fit (a measured H200 --quick profile: tf32 max_efficiency 0.24 unweighted, 0.71
  //    weighted; held-out median error 17.0 % -> 10.7 %, docs/validation.md).
  {
    std::map<core::DType, std::vector<std::pair<double, double>>> pts;  // (flops, efficiency)
    for (const auto& e : profile.gemm) {
      if (e.meta.role != ProfileRole::kFit) continue;
      const double peak = machine.gpu.peak(e.dtype).value();
      if (peak <= 0) continue;
      const double x = 2.0 * static_cast<double>(e.m) * static_cast<double>(e.n) *
                       static_cast<double>(e.k) * static_cast<double>(e.batch);
      pts[e.dtype].push_back({x, e.tflops_per_s * 1e12 / peak});
    }
    std::set<core::DType> done;
    for (const auto& [dtype, list] : pts) {
      GemmCurve& curve = P.compute.gemm[didx(dtype)];
      std::vector<double> x, y, w;
      std::set<double> distinct;
      for (const auto& [flops, eff] : list) {
        x.push_back(1.0 / flops);
        y.push_back(1.0 / eff);
        w.push_back(eff * eff);
        distinct.insert(flops);
      }
      double a = 0, b = 0;
      if (distinct.size() >= 2 && fit_line(x, y, w, a, b) && a > 0 && b >= 0) {
        curve = {1.0 / a, b / a};
      } else {
        // One size: keep the prior's size dependence (half_size_flops; the 16-bit curve's when
        // this dtype's prior is only a default), refit the maximum.
        const bool prior_is_default =
            P.origin[std::string("gemm/") + std::string(core::dtype_name(dtype))].rfind("default", 0) == 0;
        const double h = prior_is_default ? P.compute.gemm[didx(core::DType::kFp16)].half_size_flops
                                          : curve.half_size_flops;
        curve.half_size_flops = h;
        double emax = 0;
        for (const auto& [flops, eff] : list) {
          emax += eff * (flops + h) / flops / static_cast<double>(list.size());
        }
        curve.max_efficiency = emax;
      }
      // Never above the best measured efficiency: a row like MAMF (the best shape of a
      // brute-force search, sustained over 100 iterations) is the achievable maximum, while
      // the fitted form keeps rising towards max_efficiency beyond the largest measurement.
      curve.ceiling_efficiency = 0;
      for (const auto& [flops, eff] : list) curve.ceiling_efficiency = std::max(curve.ceiling_efficiency, eff);
      P.origin[std::string("gemm/") + std::string(core::dtype_name(dtype))] = fitted(who, list.size());
      done.insert(dtype);
    }
    for (auto [a, b] : {std::pair{core::DType::kFp16, core::DType::kBf16},
                        std::pair{core::DType::kBf16, core::DType::kFp16}}) {
      if (done.contains(a) && !done.contains(b)) {
        P.compute.gemm[didx(b)] = P.compute.gemm[didx(a)];
        P.origin[std::string("gemm/") + std::string(core::dtype_name(b))] =
            std::string("inherited: gemm/") + std::string(core::dtype_name(a)) + " of " + who;
      }
    }
  }

  // 7. Convolutions: time / implicit-GEMM model time, geometric mean.
  {
    ComputeCostModel model(machine.gpu, P.compute);
    double log_sum = 0;
    std::size_t used = 0;
    for (const auto& e : profile.conv) {
      if (e.meta.role != ProfileRole::kFit) continue;
      ConvShape s{e.batch, e.in_channels, e.out_channels, e.height, e.width,
                  e.kernel_h, e.kernel_w, e.stride, e.padding, e.dtype};
      log_sum += std::log(e.time_us * 1e-6 / model.gemm_model(conv_as_gemm(s)).time.value());
      ++used;
    }
    if (used > 0) {
      P.compute.conv_slowdown = std::exp(log_sum / static_cast<double>(used));
      P.origin["conv_slowdown"] = fitted(who, used);
    }
  }

  // 8. Fused attention, per direction: AttentionCurve by least squares on relative residuals
  //    (attention_fit.h). Backward rows at the harness's floor do not fit.
  const bool attention_fit_rows =
      std::any_of(profile.attention.begin(), profile.attention.end(),
                  [](const schema::AttentionEntry& e) { return e.meta.role == ProfileRole::kFit; });
  for (std::size_t direction = 0; attention_fit_rows && direction < 2; ++direction) {
    const bool backward = direction == 1;
    std::vector<AttentionTerms> all_terms;
    std::vector<double> row_peaks;
    for (const auto& e : profile.attention) {
      const double peak = machine.gpu.peak(e.dtype).value();
      if (e.meta.role != ProfileRole::kFit || peak <= 0) continue;
      all_terms.push_back(attention_terms(e, backward));
      row_peaks.push_back(peak);
    }
    std::vector<AttentionTerms> terms;
    std::vector<double> peaks;
    const std::vector<char> keep =
        backward ? backward_rows_above_host_floor(all_terms) : std::vector<char>(all_terms.size(), 1);
    for (std::size_t i = 0; i < all_terms.size(); ++i) {
      if (keep[i] == 0) continue;
      terms.push_back(all_terms[i]);
      peaks.push_back(row_peaks[i]);
    }
    const std::string name = backward ? "attention/backward" : "attention/forward";
    auto curve = fit_attention_curve(terms, peaks);
    if (curve.ok()) {
      P.compute.attention[direction] = curve.value();
      P.origin[name] = fitted(who, terms.size());
    } else {
      // Said where the parameters are printed; the prior's curve (or none) stays.
      const std::string why = "not fitted from " + who + "'s attention rows: " + curve.status().message();
      P.origin[name] =
          P.compute.attention[direction].max_efficiency > 0 ? P.origin[name] + "; " + why : "default: " + why;
    }
  }

  // Report: every row predicted by the fitted model (never by a table lookup).
  CalibrationReport& rep = out.report;
  rep.machine = who;
  ComputeCostModel compute(machine.gpu, P.compute);
  auto add = [&](std::string op_class, std::string what, ProfileRole role, std::string quantity,
                 double published, double predicted, const std::string& citation) {
    FitRow row{std::move(op_class), std::move(what), role, std::move(quantity), published,
               predicted, (predicted - published) / published, citation};
    rep.rows.push_back(std::move(row));
  };
  for (const auto& e : profile.gemm) {
    GemmShape s{e.m, e.n, e.k, e.batch, e.dtype};
    add(std::string("gemm/") + std::string(core::dtype_name(e.dtype)),
        std::to_string(e.m) + "x" + std::to_string(e.n) + "x" + std::to_string(e.k) +
            (e.batch > 1 ? " x" + std::to_string(e.batch) : ""),
        e.meta.role, "tflops_per_s", e.tflops_per_s,
        core::to_tflops_per_s(compute.gemm_model(s).achieved), e.meta.citation);
  }
  for (const auto& e : profile.conv) {
    ConvShape s{e.batch, e.in_channels, e.out_channels, e.height, e.width,
                e.kernel_h, e.kernel_w, e.stride, e.padding, e.dtype};
    ComputeCostModel no_table(machine.gpu, P.compute);
    add("conv", "conv " + std::to_string(e.in_channels) + "->" + std::to_string(e.out_channels),
        e.meta.role, "time_us", e.time_us, core::to_us(no_table.conv(s).time), e.meta.citation);
  }
  for (const auto& e : profile.attention) {
    const double peak = machine.gpu.peak(e.dtype).value();
    for (const bool backward : {false, true}) {
      const AttentionCurve& curve = P.compute.attention[backward ? 1 : 0];
      if (curve.max_efficiency <= 0 || peak <= 0) continue;
      const AttentionTerms t = attention_terms(e, backward);
      add(std::string("attention/") + (backward ? "backward/" : "forward/") + std::string(core::dtype_name(e.dtype)),
          std::to_string(e.batch) + "x" + std::to_string(e.heads) + " heads (" + std::to_string(e.kv_heads) +
              " kv), seq " + std::to_string(e.seq) + ", d " + std::to_string(e.head_dim) +
              (e.v_head_dim != e.head_dim ? "/" + std::to_string(e.v_head_dim) : "") +
              (e.causal ? ", causal" : ""),
          e.meta.role, "time_us", t.measured_s * 1e6, attention_time_s(curve, t, peak) * 1e6, e.meta.citation);
    }
  }
  for (const auto& c : rows) {
    const auto& r = *c.row;
    ALPASIM_ASSIGN_OR_RETURN(CollectiveEstimate est, predict_collective_row(r, machine, P));
    const std::string cls = r.collective + (r.num_nodes > 1 ? "/multi_node" : "");
    if (r.busbw_gbyte_per_s) {
      add(cls, describe_row(r), r.meta.role, "busbw_gbyte_per_s", *r.busbw_gbyte_per_s,
          core::to_gbyte_per_s(est.bus_bandwidth), r.meta.citation);
    } else {
      add(cls + "/time", describe_row(r), r.meta.role, "time_us", *r.time_us,
          core::to_us(est.time), r.meta.citation);
    }
  }
  for (const auto& l : profile.links) {
    add("link/" + l.link_class + "/" + l.measurement, l.link_class + " " + l.measurement,
        l.meta.role, "gbyte_per_s", l.achieved_gbyte_per_s, predict_link_row_gbyte_per_s(l, P),
        l.meta.citation);
  }
  // A fit that produced a non-finite parameter shows as a non-finite prediction of the rows
  // it governs; name them instead of letting NaN reach a plan's price.
  std::string bad;
  int num_bad = 0;
  for (const FitRow& row : rep.rows) {
    if (std::isfinite(row.predicted) && std::isfinite(row.rel_error)) continue;
    if (++num_bad <= 3) {
      bad += std::string(bad.empty() ? "" : "; ") + row.op_class + " " + row.what + " (" +
             row.quantity + " published " + core::format_fixed(row.published, 3) +
             ", cited \"" + row.citation + "\")";
    }
  }
  if (num_bad > 0) {
    return core::invalid_argument(
        "profile of " + who + ": the fit gives a non-finite prediction for " +
        std::to_string(num_bad) + " row" + (num_bad == 1 ? "" : "s") + ": " + bad +
        (num_bad > 3 ? "; ..." : "") + "; check these rows' values");
  }
  return out;
}

std::vector<ClassSummary> CalibrationReport::summary() const {
  std::map<std::string, ClassSummary> by;
  for (const auto& r : rows) {
    ClassSummary& s = by[r.op_class];
    s.op_class = r.op_class;
    if (r.role == ProfileRole::kFit) {
      ++s.fit_rows;
      s.fit_max_abs_rel_error = std::max(s.fit_max_abs_rel_error, std::abs(r.rel_error));
    } else {
      ++s.check_rows;
      s.check_max_abs_rel_error = std::max(s.check_max_abs_rel_error, std::abs(r.rel_error));
    }
  }
  std::vector<ClassSummary> out;
  for (auto& [name, s] : by) out.push_back(s);
  return out;
}

std::string CalibrationReport::to_text(const CalibratedParams& params) const {
  std::ostringstream os;
  os << "calibration of " << machine << "\n";
  os << "role   class                          quantity            published   predicted   error%  what\n";
  for (const auto& r : rows) {
    std::string cls = r.op_class;
    cls.resize(std::max<std::size_t>(cls.size(), 30), ' ');
    std::string q = r.quantity;
    q.resize(std::max<std::size_t>(q.size(), 18), ' ');
    std::string pub = core::format_fixed(r.published, 2);
    std::string pre = core::format_fixed(r.predicted, 2);
    std::string err = core::format_fixed(100 * r.rel_error, 1);
    os << schema::profile_role_name(r.role) << (r.role == ProfileRole::kFit ? "    " : "  ") << " "
       << cls << " " << q << " " << std::string(10 - std::min<std::size_t>(10, pub.size()), ' ')
       << pub << "  " << std::string(10 - std::min<std::size_t>(10, pre.size()), ' ') << pre
       << "  " << std::string(7 - std::min<std::size_t>(7, err.size()), ' ') << err << "  "
       << r.what << "\n";
  }
  os << "summary (max |error| %): class, fit rows, fit, check rows, check\n";
  for (const auto& s : summary()) {
    os << "  " << s.op_class << ": " << s.fit_rows << " fit "
       << core::format_fixed(100 * s.fit_max_abs_rel_error, 1) << "%, " << s.check_rows
       << " check " << core::format_fixed(100 * s.check_max_abs_rel_error, 1) << "%\n";
  }
  os << "parameters:\n";
  const auto& C = params.collective;
  auto line = [&](const std::string& name, const std::string& value) {
    auto it = params.origin.find(name);
    os << "  " << name << " = " << value << "  [" << (it == params.origin.end() ? "?" : it->second)
       << "]\n";
  };
  for (int d = 0; d < 5; ++d) {
    const auto dt = static_cast<core::DType>(d);
    const GemmCurve& g = params.compute.gemm[static_cast<std::size_t>(d)];
    line("gemm/" + std::string(core::dtype_name(dt)),
         "max_efficiency " + core::format_fixed(g.max_efficiency, 4) + ", half_size_flops " +
             core::format_fixed(g.half_size_flops / 1e9, 3) + "e9" +
             (g.ceiling_efficiency > 0 ? ", ceiling_efficiency " + core::format_fixed(g.ceiling_efficiency, 4)
                                       : std::string()));
  }
  line("hbm_efficiency", core::format_fixed(params.compute.hbm_efficiency, 3));
  line("kernel_overhead_s", core::format_fixed(params.compute.kernel_overhead_s * 1e6, 2) + "e-6");
  line("conv_slowdown", core::format_fixed(params.compute.conv_slowdown, 3));
  for (const bool backward : {false, true}) {
    const AttentionCurve& a = params.compute.attention[backward ? 1 : 0];
    line(backward ? "attention/backward" : "attention/forward",
         a.max_efficiency <= 0 ? std::string("(none)")
                               : "max_efficiency " + core::format_fixed(a.max_efficiency, 4) + ", fixed_s " +
                                     core::format_fixed(a.fixed_s * 1e6, 2) + "e-6, score_element_flops " +
                                     core::format_fixed(a.score_element_flops, 1) + ", output_element_flops " +
                                     core::format_fixed(a.output_element_flops, 1));
  }
  line("base_latency_s", core::format_fixed(C.base_latency_s * 1e6, 3) + "e-6");
  line("hop_latency_s", core::format_fixed(C.hop_latency_s * 1e6, 3) + "e-6");
  line("simple_latency_s", core::format_fixed(C.simple_latency_s * 1e6, 3) + "e-6");
  {
    std::string pts;
    for (const auto& [lx, v] : C.simple_latency_curve) {
      pts += (pts.empty() ? "" : ", ") + std::string("2^") + core::format_fixed(lx, 1) + " B: " +
             core::format_fixed(v * 1e6, 1) + " us";
    }
    line("simple_latency_curve", pts.empty() ? "(none)" : pts);
  }
  line("ll_bandwidth_fraction", core::format_fixed(C.ll_bandwidth_fraction, 4));
  line("nvls_efficiency", core::format_fixed(C.nvls_efficiency, 4));
  for (int i = 0; i < cluster::kNumLinkClasses; ++i) {
    const std::string cls = cluster::link_class_name(static_cast<LinkClass>(i));
    line("efficiency/" + cls, core::format_fixed(C.link[static_cast<std::size_t>(i)].bandwidth_efficiency, 4));
    line("p2p_efficiency/" + cls, core::format_fixed(C.link[static_cast<std::size_t>(i)].p2p_efficiency, 4));
  }
  return os.str();
}

}  // namespace alpasim::cost_model

namespace alpasim::cost_model {

void inherit_attention_where_default(CalibratedParams& params, const CalibratedParams& source,
                                     const std::string& source_name) {
  for (std::size_t direction = 0; direction < 2; ++direction) {
    const std::string name = direction == 1 ? "attention/backward" : "attention/forward";
    std::string& origin = params.origin[name];
    if (origin.rfind("default", 0) != 0 || source.compute.attention[direction].max_efficiency <= 0) continue;
    params.compute.attention[direction] = source.compute.attention[direction];
    origin = "inherited: " + name + " of " + source_name + " (fractions of this GPU's peak)";
  }
}

core::Result<std::map<std::string, Calibration>> calibrate_shipped_profiles(
    const std::filesystem::path& profiles_dir) {
  // (machine, prior machine or "" for defaults, a measured profile in the machine's folder
  // whose GEMM rows join the derived ones or ""), in dependency order.
  struct Link {
    const char* machine;
    const char* prior;
    const char* measured_gemm;
    const char* measured_attention;  // a measured profile whose attention rows join, or ""
  };
  static const Link kChain[] = {
      {"dgx-a100-80gb", "", "", ""},
      // H200: the GEMM grid alpa-profile measured on one H200 (2,560 fit and 430 check
      // rows, five dtypes, validation/gpu/README.md "second loan"), so Hopper's GEMM curves
      // are Hopper's own; before 2026-11-27 its 16-bit curves were the A100's, inherited.
      // Its fused attention: cuDNN's kernel measured on the same H200 (third loan,
      // validation/gpu/README.md): the only attention rows shipped.
      {"hgx-h200", "dgx-a100-80gb", "2026-11-26-measured-full.json", "2026-11-27-measured-attention.json"},
      {"aws-p3.16xlarge", "dgx-a100-80gb", "", ""},
      // H100 SXM: the H200's GH100 die at the same clocks and tensor-core peaks, so it
      // inherits the H200's curves; its own published rows are check rows.
      {"dgx-h100", "hgx-h200", "", ""},
      // B200 keeps the NDR InfiniBand of dgx-h100 and fits its own GEMM and NVLink5 rows.
      {"dgx-b200", "dgx-h100", "", ""},
      // MI300X fits its GEMM and xGMI all-reduce rows; latencies and the network are
      // dgx-h100's (no published RCCL size curve or multi-node row).
      {"mi300x", "dgx-h100", "", ""},
  };
  std::map<std::string, Calibration> out;
  for (const auto& [machine, prior, measured_gemm, measured_attention] : kChain) {
    const auto path = profiles_dir / machine / "2026-08-22-derived.json";
    ALPASIM_ASSIGN_OR_RETURN(schema::Profile profile, schema::read_profile_file(path));
    if (!std::string(measured_gemm).empty()) {
      ALPASIM_ASSIGN_OR_RETURN(schema::Profile measured,
                               schema::read_profile_file(profiles_dir / machine / measured_gemm));
      profile.gemm.insert(profile.gemm.end(), measured.gemm.begin(), measured.gemm.end());
    }
    if (!std::string(measured_attention).empty()) {
      ALPASIM_ASSIGN_OR_RETURN(schema::Profile measured,
                               schema::read_profile_file(profiles_dir / machine / measured_attention));
      profile.attention.insert(profile.attention.end(), measured.attention.begin(), measured.attention.end());
    }
    ALPASIM_ASSIGN_OR_RETURN(cluster::ClusterSpec spec, cluster::make_preset_cluster(machine, 1));
    const CalibratedParams base =
        std::string(prior).empty() ? default_params() : out.at(prior).params;
    ALPASIM_ASSIGN_OR_RETURN(Calibration cal, calibrate(profile, spec, base));
    out.emplace(machine, std::move(cal));
  }
  // Machines calibrated before (or without) an attention measurement take the H200's curve
  // as fractions of their own peak: the A100 and V100 chain starts from the defaults.
  for (auto& [machine, cal] : out) inherit_attention_where_default(cal.params, out.at("hgx-h200").params, "hgx-h200");
  return out;
}

core::Result<CalibratedParams> params_for_preset(
    const std::map<std::string, Calibration>& shipped, const std::string& preset) {
  // Presets without a profile of their own take the calibration of the same GPU die and
  // fabric generation: dgx-a100-40gb (A100 with less memory), dgx-b300 (Blackwell Ultra on
  // the same NVLink 5 switches), dgx-h800 (H100's GH100 at the
  // same clocks on the same NVSwitch generation; its lower NVLink bandwidth comes from the
  // cluster spec, which the collective model reads), gb200-nvl72 and gb300-nvl72 (Blackwell
  // dies on NVLink 5 switches and NDR/XDR InfiniBand, as dgx-b200: efficiencies are fractions
  // of each GPU's own peaks, and the rack-wide NVLink domain comes from the cluster spec).
  // No published GB200/GB300 GEMM or nccl-tests curve is in validation/data to fit.
  const std::string key = preset == "dgx-a100-40gb"                            ? "dgx-a100-80gb"
                          : preset == "dgx-h800"                               ? "dgx-h100"
                          : preset == "gb200-nvl72" || preset == "gb300-nvl72" ||
                                    preset == "dgx-b300"
                              ? "dgx-b200"
                                                                               : preset;
  auto it = shipped.find(key);
  if (it == shipped.end()) {
    return core::not_found("no calibrated profile for cluster preset \"" + preset + "\"");
  }
  return it->second.params;
}

}  // namespace alpasim::cost_model
