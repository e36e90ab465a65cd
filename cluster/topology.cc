#include "cluster/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <set>

#include <boost/graph/adjacency_list.hpp>

#include "core/check.h"

namespace alpasim::cluster {
namespace {

enum class VertexKind : std::int8_t { kGpu, kNvswitch, kPcieSwitch, kCpu, kNic, kLeaf, kSpine };

const char* vertex_kind_name(VertexKind k) {
  switch (k) {
    case VertexKind::kGpu: return "gpu";
    case VertexKind::kNvswitch: return "nvswitch";
    case VertexKind::kPcieSwitch: return "pcie_switch";
    case VertexKind::kCpu: return "cpu";
    case VertexKind::kNic: return "nic";
    case VertexKind::kLeaf: return "leaf_switch";
    case VertexKind::kSpine: return "spine_switch";
  }
  return "?";
}

struct VertexProps {
  VertexKind kind = VertexKind::kGpu;
  /// The NVLink domain (a node unless the cluster's NVLink spans nodes); -1 for network
  /// switches. The graph repeats one domain's vertices and links per domain.
  std::int32_t domain = -1;
  /// The node (for a GPU, NIC, PCIe switch or CPU); -1 for network switches and for an
  /// NVSwitch shared by the nodes of a multi-node NVLink domain.
  std::int32_t node = -1;
  std::int32_t index = 0;   ///< local index within its kind and domain (GPU, NIC, leaf id)
};

struct EdgeProps {
  std::int32_t id = 0;  ///< index into Impl::links; the reverse direction is id ^ 1
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexProps,
                                    EdgeProps>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

struct Link {
  std::int64_t from = 0, to = 0;
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  LinkClass cls = LinkClass::kPcie;
};

// Leaf switches of a fat tree or of one rail: 32 node-facing ports (a 64-port switch with
// half its ports up, e.g. NVIDIA QM9700; the 40-port HDR QM8700 runs 20 down / 20 up).
constexpr std::int64_t kLeafDownlinkPorts = 32;
// Port-to-port latency of one InfiniBand/Ethernet switch hop (~0.1-0.3 us in datasheets);
// added on leaf <-> spine links. NIC-to-NIC latency through one leaf is the spec's latency_us.
constexpr double kSwitchHopLatencyS = 0.3e-6;
// A residual capacity at or below this is treated as exhausted (bytes/s), so rounding in the
// ring packing never creates phantom rings.
constexpr double kExhaustedBytesPerS = 1.0;

// NVLink bundles of the 8-GPU V100 hybrid cube-mesh (DGX-1V, AWS p3.16xlarge): links per GPU
// pair as printed by `nvidia-smi topo -m` (NV1/NV2); 0 = no NVLink (the pair uses PCIe).
// Every row sums to 6 links (validation/data/alpa_models.json hardware notes).
constexpr int kCubeMesh[8][8] = {
    {0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0}, {1, 2, 0, 2, 0, 0, 1, 0},
    {2, 1, 2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1},
    {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0},
};

// The widest-path label: larger bottleneck bandwidth first, then lower latency, then fewer
// hops (a deterministic total order together with the vertex id).
struct Label {
  double bw = 0;
  double lat = std::numeric_limits<double>::infinity();
  std::int32_t hops = 0;
};
bool better(const Label& a, const Label& b) {
  if (a.bw != b.bw) return a.bw > b.bw;
  if (a.lat != b.lat) return a.lat < b.lat;
  return a.hops < b.hops;
}

int class_rank(LinkClass c) {
  if (c == LinkClass::kNvswitch || c == LinkClass::kNvlink) return 0;
  if (c == LinkClass::kPcie) return 1;
  return 2;
}

struct RingResult {
  double bandwidth = 0;  ///< bytes/s summed over packed rings
  LinkClass cls = LinkClass::kNvswitch;
  double hop_latency_s = 0;
};

}  // namespace

// The graph is built per NVLink domain (a node, or the nodes of a multi-node NVLink domain
// such as a GB200 NVL72 rack): "local" GPU and NIC indices below are within a domain, and
// collectives see a domain as what NCCL calls a node (NVLink inside, NICs between).
struct Topology::Impl {
  ClusterSpec spec;
  Graph graph;
  std::vector<Link> links;
  std::int64_t domain_nodes = 1;      ///< nodes per NVLink domain (spec.nvlink_domain_nodes_in_use())
  std::int64_t vertices_per_domain = 0;
  std::int64_t links_per_domain = 0;
  std::int64_t switches_per_node = 0;  ///< PCIe switches of one node
  std::int64_t num_pcie_switches = 0;  ///< per domain
  std::int64_t nics_per_domain = 0;
  // Vertex ids in domain 0 (domain n adds n * vertices_per_domain).
  std::vector<std::int64_t> gpu0, nic0;
  // Network tree (network vertices only; -1 elsewhere).
  std::vector<std::int64_t> parent, up_link, depth;
  std::vector<std::int64_t> nic_leaf;  ///< per (domain * nics + local NIC): the leaf vertex
  std::int64_t spine = -1;
  // Tables of domain 0.
  std::vector<PathInfo> intra;               ///< [a * gpn + b]
  std::vector<std::int64_t> nearest_nic;     ///< per local GPU: rail index
  std::vector<PathInfo> gpu_nic;             ///< per local GPU: path to its nearest NIC
  std::vector<std::vector<std::int64_t>> gpu_nic_links;  ///< node-0 link ids, GPU -> NIC
  std::vector<std::vector<std::int64_t>> gpu_nic_paths;  ///< [gpu * nics + nic], node 0
  bool nvls = false;

  mutable std::mutex mu;
  mutable std::map<std::vector<std::int64_t>, RingResult> ring_cache;  ///< by sorted locals

  /// GPUs of one domain.
  std::int64_t domain_gpus() const { return spec.gpus_per_node * domain_nodes; }
  std::int64_t num_domains() const { return spec.nodes / domain_nodes; }
  /// PCIe switch (index within its domain) of local GPU `l`: one per two GPUs of a node.
  std::int64_t switch_of_gpu(std::int64_t l) const {
    const std::int64_t g = spec.gpus_per_node;
    return (l / g) * switches_per_node + (l % g) / 2;
  }
  /// PCIe switch of local NIC `j`: a node's NICs spread evenly over its switches.
  std::int64_t switch_of_nic(std::int64_t j) const {
    const std::int64_t n = spec.inter_node.nics_per_node;
    return (j / n) * switches_per_node + (j % n) * switches_per_node / n;
  }
  std::int64_t add_vertex(VertexKind kind, std::int64_t domain, std::int64_t node,
                          std::int64_t index) {
    return static_cast<std::int64_t>(boost::add_vertex(
        VertexProps{kind, static_cast<std::int32_t>(domain), static_cast<std::int32_t>(node),
                    static_cast<std::int32_t>(index)},
        graph));
  }
  void add_link(std::int64_t a, std::int64_t b, double bw, double lat, LinkClass cls) {
    for (int dir = 0; dir < 2; ++dir) {
      const std::int64_t from = dir == 0 ? a : b;
      const std::int64_t to = dir == 0 ? b : a;
      const auto id = static_cast<std::int32_t>(links.size());
      links.push_back({from, to, bw, lat, cls});
      boost::add_edge(static_cast<Vertex>(from), static_cast<Vertex>(to), EdgeProps{id}, graph);
    }
  }
  VertexKind kind(std::int64_t v) const { return graph[static_cast<Vertex>(v)].kind; }
  std::int64_t vertex_domain(std::int64_t v) const { return graph[static_cast<Vertex>(v)].domain; }

  void build_domain(std::int64_t domain);
  void build_network();
  // Widest paths from `src` over vertices with allowed(v), with capacities `cap`. A GPU
  // other than src is never a transit vertex.
  template <class Allowed>
  void widest_from(std::int64_t src, const std::vector<double>& cap, Allowed allowed,
                   std::vector<Label>& label, std::vector<std::int64_t>& pred) const;
  std::vector<std::int64_t> path_links(std::int64_t dst, const std::vector<std::int64_t>& pred)
      const {
    std::vector<std::int64_t> out;
    for (std::int64_t v = dst; pred[static_cast<std::size_t>(v)] >= 0;
         v = links[static_cast<std::size_t>(pred[static_cast<std::size_t>(v)])].from) {
      out.push_back(pred[static_cast<std::size_t>(v)]);
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  PathInfo summarize(const std::vector<std::int64_t>& path, bool inter) const {
    PathInfo p;
    double bw = std::numeric_limits<double>::infinity();
    double lat = 0;
    for (std::int64_t id : path) {
      const Link& l = links[static_cast<std::size_t>(id)];
      if (l.bandwidth_bytes_per_s < bw) {
        bw = l.bandwidth_bytes_per_s;
        p.bottleneck_class = l.cls;
      }
      lat += l.latency_s;
    }
    p.bandwidth = core::BytesPerSecond(path.empty() ? 0 : bw);
    p.latency = core::Seconds(lat);
    p.hops = static_cast<std::int32_t>(path.size());
    p.inter_node = inter;
    return p;
  }
  // Directed network links from NIC vertex a to NIC vertex b through the tree.
  std::vector<std::int64_t> tree_path(std::int64_t a, std::int64_t b) const;
  std::int64_t shift_link(std::int64_t domain0_link, std::int64_t domain) const {
    return domain0_link + domain * links_per_domain;
  }
  RingResult pack_rings(const std::vector<std::int64_t>& locals) const;
};

template <class Allowed>
void Topology::Impl::widest_from(std::int64_t src, const std::vector<double>& cap,
                                 Allowed allowed, std::vector<Label>& label,
                                 std::vector<std::int64_t>& pred) const {
  const auto n = boost::num_vertices(graph);
  label.assign(n, Label{});
  pred.assign(n, -1);
  std::vector<char> done(n, 0);
  label[static_cast<std::size_t>(src)] = Label{std::numeric_limits<double>::infinity(), 0, 0};
  using Item = std::pair<Label, std::int64_t>;
  auto worse = [](const Item& x, const Item& y) {
    if (better(y.first, x.first)) return true;
    if (better(x.first, y.first)) return false;
    return x.second > y.second;
  };
  std::priority_queue<Item, std::vector<Item>, decltype(worse)> heap(worse);
  heap.push({label[static_cast<std::size_t>(src)], src});
  while (!heap.empty()) {
    auto [lab, u] = heap.top();
    heap.pop();
    const auto uu = static_cast<std::size_t>(u);
    if (done[uu]) continue;
    done[uu] = 1;
    if (u != src && kind(u) == VertexKind::kGpu) continue;  // GPUs never forward
    for (auto [e, end] = boost::out_edges(static_cast<Vertex>(u), graph); e != end; ++e) {
      const std::int64_t id = graph[*e].id;
      const auto v = static_cast<std::int64_t>(boost::target(*e, graph));
      if (!allowed(v)) continue;
      const double c = cap[static_cast<std::size_t>(id)];
      if (c <= kExhaustedBytesPerS) continue;
      Label cand{std::min(lab.bw, c), lab.lat + links[static_cast<std::size_t>(id)].latency_s,
                 lab.hops + 1};
      if (better(cand, label[static_cast<std::size_t>(v)])) {
        label[static_cast<std::size_t>(v)] = cand;
        pred[static_cast<std::size_t>(v)] = id;
        heap.push({cand, v});
      }
    }
  }
}

void Topology::Impl::build_domain(std::int64_t domain) {
  const auto& ispec = spec.intra_node;
  const double lat = ispec.latency_us * 1e-6 / 2;  // a GPU-switch-GPU hop costs latency_us
  const double pcie = ispec.pcie_bandwidth_gbyte_per_s * 1e9;
  const std::int64_t node_gpus = spec.gpus_per_node;
  const std::int64_t first_node = domain * domain_nodes;
  const bool shared_nvswitch = domain_nodes > 1;
  std::vector<std::int64_t> gpus;
  for (std::int64_t g = 0; g < domain_gpus(); ++g) {
    gpus.push_back(add_vertex(VertexKind::kGpu, domain, first_node + g / node_gpus, g));
  }
  if (ispec.fabric == "nvswitch") {
    // The NVSwitch baseboard (or, for a multi-node domain, the rack's NVLink switch trays)
    // as one non-blocking crossbar: each GPU reaches it over all its NVLinks
    // (gpu_bandwidth_gbyte_per_s per direction).
    const std::int64_t sw =
        add_vertex(VertexKind::kNvswitch, domain, shared_nvswitch ? -1 : first_node, 0);
    for (std::int64_t g : gpus) {
      add_link(g, sw, ispec.gpu_bandwidth_gbyte_per_s * 1e9, lat, LinkClass::kNvswitch);
    }
  } else if (ispec.fabric == "nvlink_hybrid_cube_mesh") {
    for (std::int64_t a = 0; a < domain_gpus(); ++a) {
      for (std::int64_t b = a + 1; b < domain_gpus(); ++b) {
        const int n = kCubeMesh[a][b];
        if (n > 0) {
          add_link(gpus[static_cast<std::size_t>(a)], gpus[static_cast<std::size_t>(b)],
                   n * ispec.link_bandwidth_gbyte_per_s * 1e9, 2 * lat, LinkClass::kNvlink);
        }
      }
    }
  } else if (ispec.fabric == "infinity_fabric") {
    // AMD Infinity Fabric (xGMI): a full mesh, one link of link_bandwidth_gbyte_per_s per
    // direction between every GPU pair, so a pair alone gets one link and a collective over
    // all the node's GPUs packs rings over all of them (ml-engineering measured 2-GPU and
    // 8-GPU all-reduce busbw 6.5x apart on MI300X). Direct GPU-to-GPU links: class kNvlink.
    for (std::int64_t a = 0; a < domain_gpus(); ++a) {
      for (std::int64_t b = a + 1; b < domain_gpus(); ++b) {
        add_link(gpus[static_cast<std::size_t>(a)], gpus[static_cast<std::size_t>(b)],
                 ispec.link_bandwidth_gbyte_per_s * 1e9, 2 * lat, LinkClass::kNvlink);
      }
    }
  }
  // Per node, a PCIe tree: one switch per two GPUs (DGX/HGX baseboards and p3 both pair
  // GPUs on a switch), switches split over up to two CPU sockets joined by a socket link
  // (modelled at the PCIe bandwidth: the x16 uplinks, not UPI, are the narrow part).
  std::vector<std::int64_t> switches;
  for (std::int64_t s = 0; s < num_pcie_switches; ++s) {
    switches.push_back(add_vertex(VertexKind::kPcieSwitch, domain, first_node + s / switches_per_node, s));
  }
  const std::int64_t sockets = switches_per_node >= 2 ? 2 : 1;
  for (std::int64_t n = 0; n < domain_nodes; ++n) {
    std::vector<std::int64_t> cpus;
    for (std::int64_t c = 0; c < sockets; ++c) {
      cpus.push_back(add_vertex(VertexKind::kCpu, domain, first_node + n, n * sockets + c));
    }
    if (n == 0) {
      // GPUs first, in domain order, so a one-node domain builds exactly as before.
      for (std::int64_t g = 0; g < domain_gpus(); ++g) {
        add_link(gpus[static_cast<std::size_t>(g)], switches[static_cast<std::size_t>(switch_of_gpu(g))],
                 pcie, lat, LinkClass::kPcie);
      }
    }
    for (std::int64_t s = 0; s < switches_per_node; ++s) {
      add_link(switches[static_cast<std::size_t>(n * switches_per_node + s)],
               cpus[static_cast<std::size_t>(s * sockets / switches_per_node)], pcie, lat,
               LinkClass::kPcie);
    }
    if (sockets == 2) add_link(cpus[0], cpus[1], pcie, lat, LinkClass::kPcie);
  }
  // NICs sit on the PCIe switches, spread evenly (DGX A100/H100: one NIC per GPU, next to it).
  const std::int64_t node_nics = spec.inter_node.nics_per_node;
  for (std::int64_t j = 0; j < nics_per_domain; ++j) {
    const std::int64_t nic = add_vertex(VertexKind::kNic, domain, first_node + j / node_nics, j);
    add_link(nic, switches[static_cast<std::size_t>(switch_of_nic(j))], pcie, lat, LinkClass::kPcie);
  }
  if (domain == 0) {
    gpu0 = gpus;
    for (std::int64_t v = 0; v < static_cast<std::int64_t>(boost::num_vertices(graph)); ++v) {
      if (kind(v) == VertexKind::kNic) nic0.push_back(v);
    }
  }
}

void Topology::Impl::build_network() {
  const auto& ispec = spec.inter_node;
  const LinkClass cls = ispec.fabric == "ethernet" ? LinkClass::kEthernet
                        : ispec.fabric == "efa"    ? LinkClass::kEfa
                                                   : LinkClass::kInfiniband;
  const double nic_bw = ispec.nic_bandwidth_gbit_per_s * 1e9 / 8;
  const double half_lat = ispec.latency_us * 1e-6 / 2;
  // The network is wired per node and rail (NIC index within the node), whatever the
  // NVLink domains: node n's rail r is NIC (n % domain_nodes) * nics + r of its domain.
  const std::int64_t nodes = spec.nodes;
  const std::int64_t nics = spec.inter_node.nics_per_node;
  auto local_nic = [&](std::int64_t node, std::int64_t rail) {
    return (node / domain_nodes) * nics_per_domain + (node % domain_nodes) * nics + rail;
  };
  auto nic_vertex = [&](std::int64_t node, std::int64_t rail) {
    return nic0[static_cast<std::size_t>((node % domain_nodes) * nics + rail)] +
           (node / domain_nodes) * vertices_per_domain;
  };
  nic_leaf.assign(static_cast<std::size_t>(nodes * nics), -1);
  std::vector<std::int64_t> leaves;
  std::vector<double> leaf_down_bw;
  auto new_leaf = [&]() {
    const std::int64_t v =
        add_vertex(VertexKind::kLeaf, -1, -1, static_cast<std::int64_t>(leaves.size()));
    leaves.push_back(v);
    leaf_down_bw.push_back(0);
    return v;
  };
  auto attach = [&](std::int64_t node, std::int64_t rail, std::int64_t leaf_idx) {
    const std::int64_t leaf = leaves[static_cast<std::size_t>(leaf_idx)];
    add_link(nic_vertex(node, rail), leaf, nic_bw, half_lat, cls);
    nic_leaf[static_cast<std::size_t>(local_nic(node, rail))] = leaf;
    leaf_down_bw[static_cast<std::size_t>(leaf_idx)] += nic_bw;
  };
  if (ispec.topology == "single_switch") {
    new_leaf();
    for (std::int64_t n = 0; n < nodes; ++n) {
      for (std::int64_t r = 0; r < nics; ++r) attach(n, r, 0);
    }
  } else if (ispec.topology == "rail_optimized") {
    // Rail r of every node goes to the rail-r leaf of its group of kLeafDownlinkPorts nodes.
    const std::int64_t groups = (nodes + kLeafDownlinkPorts - 1) / kLeafDownlinkPorts;
    for (std::int64_t g = 0; g < groups; ++g) {
      for (std::int64_t r = 0; r < nics; ++r) {
        const auto idx = static_cast<std::int64_t>(leaves.size());
        new_leaf();
        for (std::int64_t n = g * kLeafDownlinkPorts;
             n < std::min(nodes, (g + 1) * kLeafDownlinkPorts); ++n) {
          attach(n, r, idx);
        }
      }
    }
  } else {  // fat_tree: whole nodes per leaf
    const std::int64_t per_leaf = std::max<std::int64_t>(1, kLeafDownlinkPorts / nics);
    for (std::int64_t n = 0; n < nodes; ++n) {
      if (n % per_leaf == 0) new_leaf();
      for (std::int64_t r = 0; r < nics; ++r) {
        attach(n, r, static_cast<std::int64_t>(leaves.size()) - 1);
      }
    }
  }
  if (leaves.size() > 1) {
    // One aggregated spine: each leaf's uplinks carry its downlink bandwidth divided by the
    // oversubscription (1 = full bisection).
    spine = add_vertex(VertexKind::kSpine, -1, -1, 0);
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      add_link(leaves[i], spine, leaf_down_bw[i] / ispec.oversubscription, kSwitchHopLatencyS,
               cls);
    }
  }
  // The tree: BFS from the root over network vertices.
  const auto nv = static_cast<std::size_t>(boost::num_vertices(graph));
  parent.assign(nv, -1);
  up_link.assign(nv, -1);
  depth.assign(nv, -1);
  const std::int64_t root = spine >= 0 ? spine : leaves.front();
  depth[static_cast<std::size_t>(root)] = 0;
  std::queue<std::int64_t> q;
  q.push(root);
  while (!q.empty()) {
    const std::int64_t u = q.front();
    q.pop();
    for (auto [e, end] = boost::out_edges(static_cast<Vertex>(u), graph); e != end; ++e) {
      const auto v = static_cast<std::int64_t>(boost::target(*e, graph));
      const VertexKind k = kind(v);
      if (k != VertexKind::kNic && k != VertexKind::kLeaf && k != VertexKind::kSpine) continue;
      if (depth[static_cast<std::size_t>(v)] >= 0) continue;
      depth[static_cast<std::size_t>(v)] = depth[static_cast<std::size_t>(u)] + 1;
      parent[static_cast<std::size_t>(v)] = u;
      up_link[static_cast<std::size_t>(v)] = graph[*e].id ^ 1;  // v -> u
      if (k != VertexKind::kNic) q.push(v);
    }
  }
}

std::vector<std::int64_t> Topology::Impl::tree_path(std::int64_t a, std::int64_t b) const {
  std::vector<std::int64_t> up, down;
  while (a != b) {
    if (depth[static_cast<std::size_t>(a)] >= depth[static_cast<std::size_t>(b)]) {
      up.push_back(up_link[static_cast<std::size_t>(a)]);
      a = parent[static_cast<std::size_t>(a)];
    } else {
      down.push_back(up_link[static_cast<std::size_t>(b)] ^ 1);  // parent -> b
      b = parent[static_cast<std::size_t>(b)];
    }
  }
  up.insert(up.end(), down.rbegin(), down.rend());
  return up;
}

RingResult Topology::Impl::pack_rings(const std::vector<std::int64_t>& locals) const {
  // Greedy ring packing (the way NCCL's search fills channels): repeatedly take the ring
  // ordering whose weakest neighbour pair has the widest path in the residual graph, give it
  // the bandwidth its most-shared link allows, and subtract that from every link it uses.
  // Stop when the next ring would need a slower link class than the first ring (NCCL
  // prefers an all-NVLink graph and does not mix in PCIe rings) or nothing is left.
  RingResult result;
  const auto k = static_cast<std::int64_t>(locals.size());
  std::vector<double> cap(links.size());
  for (std::size_t i = 0; i < links.size(); ++i) cap[i] = links[i].bandwidth_bytes_per_s;
  auto in_node0 = [&](std::int64_t v) { return vertex_domain(v) == 0; };
  int first_rank = -1;
  std::vector<Label> label;
  std::vector<std::int64_t> pred;
  for (int ring = 0; ring < 16; ++ring) {
    std::vector<std::vector<double>> w(static_cast<std::size_t>(k),
                                       std::vector<double>(static_cast<std::size_t>(k), 0));
    // The slowest link class on each pair's path (class_rank): among orders of equal
    // bottleneck the one on faster classes wins (on MI300X a used xGMI link's PCIe detour
    // has the same 64 GB/s as the links still free).
    std::vector<std::vector<int>> rank(static_cast<std::size_t>(k),
                                       std::vector<int>(static_cast<std::size_t>(k), 0));
    std::vector<std::vector<std::vector<std::int64_t>>> paths(
        static_cast<std::size_t>(k), std::vector<std::vector<std::int64_t>>(
                                         static_cast<std::size_t>(k)));
    for (std::int64_t i = 0; i < k; ++i) {
      widest_from(gpu0[static_cast<std::size_t>(locals[static_cast<std::size_t>(i)])], cap,
                  in_node0, label, pred);
      for (std::int64_t j = 0; j < k; ++j) {
        if (i == j) continue;
        const std::int64_t dst = gpu0[static_cast<std::size_t>(locals[static_cast<std::size_t>(j)])];
        const Label& l = label[static_cast<std::size_t>(dst)];
        w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = l.bw;
        paths[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = path_links(dst, pred);
        for (std::int64_t id : paths[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]) {
          rank[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] =
              std::max(rank[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)],
                       class_rank(links[static_cast<std::size_t>(id)].cls));
        }
      }
    }
    // Best ordering: exhaustive over (k-1)! orders for k <= 8, greedy beyond.
    std::vector<std::int64_t> order(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i) order[static_cast<std::size_t>(i)] = i;
    auto bottleneck = [&](const std::vector<std::int64_t>& o) {
      double m = std::numeric_limits<double>::infinity();
      for (std::int64_t i = 0; i < k; ++i) {
        m = std::min(m, w[static_cast<std::size_t>(o[static_cast<std::size_t>(i)])]
                         [static_cast<std::size_t>(o[static_cast<std::size_t>((i + 1) % k)])]);
      }
      return m;
    };
    auto slowest_class = [&](const std::vector<std::int64_t>& o) {
      int r = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        r = std::max(r, rank[static_cast<std::size_t>(o[static_cast<std::size_t>(i)])]
                            [static_cast<std::size_t>(o[static_cast<std::size_t>((i + 1) % k)])]);
      }
      return r;
    };
    std::vector<std::int64_t> best = order;
    double best_bw = bottleneck(order);
    int best_rank = slowest_class(order);
    if (k <= 8) {
      while (std::next_permutation(order.begin() + 1, order.end())) {
        const double b = bottleneck(order);
        if (b < best_bw) continue;
        const int r = slowest_class(order);
        if (b > best_bw || r < best_rank) {
          best_bw = b;
          best_rank = r;
          best = order;
        }
      }
    } else {
      std::vector<char> used(static_cast<std::size_t>(k), 0);
      used[0] = 1;
      for (std::int64_t i = 1; i < k; ++i) {
        const std::int64_t prev = best[static_cast<std::size_t>(i - 1)];
        std::int64_t pick = -1;
        for (std::int64_t j = 0; j < k; ++j) {
          if (used[static_cast<std::size_t>(j)]) continue;
          if (pick < 0 || w[static_cast<std::size_t>(prev)][static_cast<std::size_t>(j)] >
                              w[static_cast<std::size_t>(prev)][static_cast<std::size_t>(pick)]) {
            pick = j;
          }
        }
        used[static_cast<std::size_t>(pick)] = 1;
        best[static_cast<std::size_t>(i)] = pick;
      }
      best_bw = bottleneck(best);
    }
    if (!(best_bw > kExhaustedBytesPerS)) break;
    // Exact ring bandwidth with shared links.
    std::map<std::int64_t, int> load;
    double hop_lat = 0;
    int worst_rank = 0;
    LinkClass worst_cls = LinkClass::kNvswitch;
    double worst_bw = std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < k; ++i) {
      const auto& p = paths[static_cast<std::size_t>(best[static_cast<std::size_t>(i)])]
                           [static_cast<std::size_t>(best[static_cast<std::size_t>((i + 1) % k)])];
      double lat = 0;
      for (std::int64_t id : p) {
        ++load[id];
        const Link& l = links[static_cast<std::size_t>(id)];
        lat += l.latency_s;
        worst_rank = std::max(worst_rank, class_rank(l.cls));
      }
      hop_lat = std::max(hop_lat, lat);
    }
    double ring_bw = std::numeric_limits<double>::infinity();
    for (const auto& [id, n] : load) {
      const double share = cap[static_cast<std::size_t>(id)] / n;
      if (share < worst_bw) {
        worst_bw = share;
        worst_cls = links[static_cast<std::size_t>(id)].cls;
      }
      ring_bw = std::min(ring_bw, share);
    }
    if (first_rank >= 0 && worst_rank > first_rank) break;
    if (first_rank < 0) {
      first_rank = worst_rank;
      result.cls = worst_cls;
      result.hop_latency_s = hop_lat;
    }
    for (const auto& [id, n] : load) cap[static_cast<std::size_t>(id)] -= ring_bw * n;
    result.bandwidth += ring_bw;
  }
  return result;
}

const char* link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::kNvswitch: return "nvswitch";
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
    case LinkClass::kInfiniband: return "infiniband";
    case LinkClass::kEthernet: return "ethernet";
    case LinkClass::kEfa: return "efa";
  }
  return "?";
}

core::Result<Topology> Topology::build(const ClusterSpec& spec) {
  if (spec.nodes < 1 || spec.gpus_per_node < 1) {
    return core::invalid_argument("cluster needs at least one node of at least one GPU, got " +
                                  std::to_string(spec.nodes) + " x " +
                                  std::to_string(spec.gpus_per_node));
  }
  if (spec.intra_node.fabric == "nvlink_hybrid_cube_mesh" && spec.gpus_per_node > 8) {
    return core::invalid_argument(
        "an NVLink hybrid cube-mesh node has at most 8 GPUs, got gpus_per_node = " +
        std::to_string(spec.gpus_per_node));
  }
  if (spec.intra_node.fabric == "infinity_fabric" && spec.gpus_per_node > 8) {
    // Each MI300X-class GPU has 7 xGMI links: a full mesh of at most 8.
    return core::invalid_argument(
        "an Infinity Fabric node has at most 8 GPUs (7 links per GPU), got gpus_per_node = " +
        std::to_string(spec.gpus_per_node));
  }
  if (spec.nodes > 1 && (spec.inter_node.fabric.empty() || spec.inter_node.nics_per_node < 1)) {
    return core::invalid_argument("a cluster of " + std::to_string(spec.nodes) +
                                  " nodes needs an inter-node network with at least one NIC");
  }
  if (spec.nvlink_domain_nodes < 1) {
    return core::invalid_argument("an NVLink domain holds at least one node, got " +
                                  std::to_string(spec.nvlink_domain_nodes));
  }
  if (spec.nvlink_domain_nodes > 1 && spec.intra_node.fabric != "nvswitch") {
    return core::invalid_argument("an NVLink domain of " + std::to_string(spec.nvlink_domain_nodes) +
                                  " nodes needs the \"nvswitch\" intra-node fabric, got \"" +
                                  spec.intra_node.fabric + "\"");
  }
  auto impl = std::make_shared<Impl>();
  impl->spec = spec;
  impl->domain_nodes = spec.nvlink_domain_nodes_in_use();
  impl->switches_per_node = std::max<std::int64_t>(1, (spec.gpus_per_node + 1) / 2);
  impl->num_pcie_switches = impl->switches_per_node * impl->domain_nodes;
  impl->nics_per_domain = spec.inter_node.fabric.empty()
                            ? 0
                            : spec.inter_node.nics_per_node * impl->domain_nodes;
  for (std::int64_t n = 0; n < impl->num_domains(); ++n) {
    const auto v0 = static_cast<std::int64_t>(boost::num_vertices(impl->graph));
    const auto l0 = static_cast<std::int64_t>(impl->links.size());
    impl->build_domain(n);
    if (n == 0) {
      impl->vertices_per_domain = static_cast<std::int64_t>(boost::num_vertices(impl->graph)) - v0;
      impl->links_per_domain = static_cast<std::int64_t>(impl->links.size()) - l0;
    }
  }
  if (impl->nics_per_domain > 0) impl->build_network();
  // NVLink SHARP needs third-generation NVSwitch (Hopper and later). The H800 has it too: a
  // user's 8-GPU all-reduce reaches 215 GB/s bus bandwidth over 200 GB/s links
  // (collectives.csv line 105), which only in-switch reduction allows. Blackwell's NVLink 5
  // switches (HGX B200 baseboards, NVL72 switch trays) keep it, across a whole multi-node
  // NVLink domain on NVL72.
  const std::string& gpu = spec.gpu.name;
  impl->nvls = spec.intra_node.fabric == "nvswitch" &&
               (gpu.rfind("h100", 0) == 0 || gpu.rfind("h200", 0) == 0 || gpu.rfind("h800", 0) == 0 ||
                gpu.rfind("b200", 0) == 0 || gpu.rfind("b300", 0) == 0 || gpu.rfind("gb200", 0) == 0 ||
                gpu.rfind("gb300", 0) == 0);
  // Tables of domain 0.
  const std::int64_t g = impl->domain_gpus();
  std::vector<double> cap(impl->links.size());
  for (std::size_t i = 0; i < impl->links.size(); ++i) cap[i] = impl->links[i].bandwidth_bytes_per_s;
  impl->intra.assign(static_cast<std::size_t>(g * g), PathInfo{});
  impl->nearest_nic.assign(static_cast<std::size_t>(g), -1);
  impl->gpu_nic.assign(static_cast<std::size_t>(g), PathInfo{});
  impl->gpu_nic_links.assign(static_cast<std::size_t>(g), {});
  impl->gpu_nic_paths.assign(static_cast<std::size_t>(g * impl->nics_per_domain), {});
  std::vector<Label> label;
  std::vector<std::int64_t> pred;
  const Impl& im = *impl;
  auto in_node0 = [&im](std::int64_t v) { return im.vertex_domain(v) == 0; };
  std::vector<std::int64_t> nic_users(static_cast<std::size_t>(impl->nics_per_domain), 0);
  for (std::int64_t a = 0; a < g; ++a) {
    impl->widest_from(impl->gpu0[static_cast<std::size_t>(a)], cap, in_node0, label, pred);
    for (std::int64_t b = 0; b < g; ++b) {
      if (a == b) continue;
      impl->intra[static_cast<std::size_t>(a * g + b)] =
          impl->summarize(impl->path_links(impl->gpu0[static_cast<std::size_t>(b)], pred), false);
    }
    for (std::int64_t j = 0; j < impl->nics_per_domain; ++j) {
      impl->gpu_nic_paths[static_cast<std::size_t>(a * impl->nics_per_domain + j)] =
          impl->path_links(impl->nic0[static_cast<std::size_t>(j)], pred);
    }
    // The nearest NIC; among equally near NICs the one fewest GPUs use so far, so two GPUs on
    // a PCIe switch with two NICs get one each (DGX A100/H100 pair every GPU with a NIC).
    std::int64_t best = -1;
    for (std::int64_t j = 0; j < impl->nics_per_domain; ++j) {
      const Label& l = label[static_cast<std::size_t>(impl->nic0[static_cast<std::size_t>(j)])];
      if (best < 0) {
        best = j;
        continue;
      }
      const Label& b = label[static_cast<std::size_t>(impl->nic0[static_cast<std::size_t>(best)])];
      if (better(l, b) || (!better(b, l) && nic_users[static_cast<std::size_t>(j)] <
                                                nic_users[static_cast<std::size_t>(best)])) {
        best = j;
      }
    }
    if (best >= 0) {
      ++nic_users[static_cast<std::size_t>(best)];
      impl->nearest_nic[static_cast<std::size_t>(a)] = best;
      impl->gpu_nic_links[static_cast<std::size_t>(a)] =
          impl->path_links(impl->nic0[static_cast<std::size_t>(best)], pred);
      impl->gpu_nic[static_cast<std::size_t>(a)] =
          impl->summarize(impl->gpu_nic_links[static_cast<std::size_t>(a)], false);
    }
  }
  return Topology(std::move(impl));
}

const ClusterSpec& Topology::spec() const { return impl_->spec; }
std::int64_t Topology::num_devices() const { return impl_->spec.num_gpus(); }
std::int64_t Topology::node_of(std::int64_t device) const {
  return device / impl_->spec.gpus_per_node;
}
std::int64_t Topology::domain_of(std::int64_t device) const { return device / impl_->domain_gpus(); }
std::int64_t Topology::num_vertices() const {
  return static_cast<std::int64_t>(boost::num_vertices(impl_->graph));
}
std::int64_t Topology::num_links() const { return static_cast<std::int64_t>(impl_->links.size()); }

PathInfo Topology::point_to_point(std::int64_t src, std::int64_t dst) const {
  const Impl& im = *impl_;
  const std::int64_t g = im.domain_gpus();
  ALPASIM_CHECK(src >= 0 && dst >= 0 && src < num_devices() && dst < num_devices() && src != dst)
      << "point_to_point(" << src << ", " << dst << ") on " << num_devices() << " devices";
  const std::int64_t na = src / g, nb = dst / g, la = src % g, lb = dst % g;
  if (na == nb) return im.intra[static_cast<std::size_t>(la * g + lb)];
  // GPU -> nearest NIC -> network tree -> nearest NIC -> GPU.
  std::vector<std::int64_t> path;
  for (std::int64_t id : im.gpu_nic_links[static_cast<std::size_t>(la)]) {
    path.push_back(im.shift_link(id, na));
  }
  const std::int64_t nic_a = im.nic0[static_cast<std::size_t>(im.nearest_nic[static_cast<std::size_t>(la)])] +
                             na * im.vertices_per_domain;
  const std::int64_t nic_b = im.nic0[static_cast<std::size_t>(im.nearest_nic[static_cast<std::size_t>(lb)])] +
                             nb * im.vertices_per_domain;
  for (std::int64_t id : im.tree_path(nic_a, nic_b)) path.push_back(id);
  const auto& back = im.gpu_nic_links[static_cast<std::size_t>(lb)];
  for (auto it = back.rbegin(); it != back.rend(); ++it) path.push_back(im.shift_link(*it ^ 1, nb));
  return im.summarize(path, true);
}

core::Result<GroupInfo> Topology::group(std::span<const std::int64_t> devices) const {
  const std::vector<std::vector<std::int64_t>> one = {{devices.begin(), devices.end()}};
  ALPASIM_ASSIGN_OR_RETURN(std::vector<GroupInfo> infos, concurrent_groups(one));
  return infos.front();
}

core::Result<std::vector<GroupInfo>> Topology::concurrent_groups(
    std::span<const std::vector<std::int64_t>> groups) const {
  const Impl& im = *impl_;
  const std::int64_t g = im.domain_gpus();
  struct Work {
    std::map<std::int64_t, std::vector<std::int64_t>> by_node;  // node -> sorted locals
    std::vector<std::vector<std::int64_t>> channel_links;
    double hop_lat = 0;
  };
  std::vector<GroupInfo> infos(groups.size());
  std::vector<Work> work(groups.size());
  std::set<std::int64_t> in_some_group;
  std::vector<int> load;  // shared by every channel of every group (sized on first use)
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& devices = groups[gi];
    if (devices.empty()) return core::invalid_argument("a device group needs at least one device");
    std::set<std::int64_t> seen;
    auto& by_node = work[gi].by_node;
    for (std::int64_t d : devices) {
      if (d < 0 || d >= num_devices()) {
        return core::invalid_argument("device id " + std::to_string(d) + " is outside [0, " +
                                      std::to_string(num_devices()) + ")");
      }
      if (!seen.insert(d).second) {
        return core::invalid_argument("device id " + std::to_string(d) +
                                      " appears twice in a group");
      }
      if (!in_some_group.insert(d).second) {
        return core::invalid_argument("device id " + std::to_string(d) +
                                      " is in two concurrent groups");
      }
      by_node[d / g].push_back(d % g);
    }
    GroupInfo& info = infos[gi];
    info.num_ranks = static_cast<std::int64_t>(devices.size());
    info.num_nodes = static_cast<std::int64_t>(by_node.size());
    std::int64_t min_per_node = std::numeric_limits<std::int64_t>::max();
    for (auto& [node, locals] : by_node) {
      std::sort(locals.begin(), locals.end());
      info.ranks_per_node = std::max<std::int64_t>(info.ranks_per_node,
                                                   static_cast<std::int64_t>(locals.size()));
      min_per_node = std::min<std::int64_t>(min_per_node, static_cast<std::int64_t>(locals.size()));
    }
    info.uniform = min_per_node == info.ranks_per_node;
    info.nvls_capable = im.nvls && info.num_nodes == 1 && info.num_ranks > 1;
    // Intra-node rings: the slowest node's packing. Concurrent groups inside one node are
    // assumed to use disjoint links (true on NVSwitch; on a cube-mesh or PCIe tree they may
    // share, which this does not count).
    double intra_bw = std::numeric_limits<double>::infinity();
    bool any_intra = false;
    for (const auto& [node, locals] : by_node) {
      if (locals.size() < 2) continue;
      RingResult r;
      {
        std::lock_guard<std::mutex> lock(im.mu);
        auto it = im.ring_cache.find(locals);
        if (it != im.ring_cache.end()) {
          r = it->second;
        } else {
          r = im.pack_rings(locals);
          im.ring_cache.emplace(locals, r);
        }
      }
      if (!any_intra || r.bandwidth < intra_bw) {
        intra_bw = r.bandwidth;
        info.intra_class = r.cls;
      }
      info.intra_hop_latency =
          core::Seconds(std::max(info.intra_hop_latency.value(), r.hop_latency_s));
      any_intra = true;
    }
    if (any_intra) info.intra_ring_bandwidth = core::BytesPerSecond(intra_bw);
    if (info.num_nodes < 2) continue;

    // Inter-node rings. Channels: every NIC on a PCIe switch that hosts one of the group's
    // GPUs (NCCL uses all NICs local to its GPUs), each paired round-robin with a group GPU
    // on that switch; when no group GPU shares a switch with a NIC, each GPU's nearest NIC.
    // Channel c crosses every node boundary GPU -> PCIe -> NIC c -> network -> NIC c -> PCIe
    // -> GPU. Loads are counted over all channels of all concurrent groups.
    const auto& first_locals = by_node.begin()->second;
    std::map<std::int64_t, std::int64_t> rail_gpu;  // rail -> local GPU it serves
    {
      std::map<std::int64_t, std::vector<std::int64_t>> on_switch;  // switch -> group GPUs
      for (std::int64_t l : first_locals) on_switch[im.switch_of_gpu(l)].push_back(l);
      std::map<std::int64_t, std::size_t> next;
      for (std::int64_t j = 0; j < im.nics_per_domain; ++j) {
        const std::int64_t sw = im.switch_of_nic(j);
        auto it = on_switch.find(sw);
        if (it == on_switch.end()) continue;
        rail_gpu.emplace(j, it->second[next[sw]++ % it->second.size()]);
      }
      if (rail_gpu.empty()) {
        for (std::int64_t l : first_locals) {
          rail_gpu.emplace(im.nearest_nic[static_cast<std::size_t>(l)], l);
        }
      }
    }
    std::vector<std::int64_t> nodes;
    for (const auto& [node, locals] : by_node) nodes.push_back(node);
    const auto m = static_cast<std::int64_t>(nodes.size());
    if (load.empty()) load.assign(im.links.size(), 0);
    for (const auto& [rail, local] : rail_gpu) {
      std::vector<std::int64_t> used;
      const auto& gpu_nic =
          im.gpu_nic_paths[static_cast<std::size_t>(local * im.nics_per_domain + rail)];
      for (std::int64_t i = 0; i < m; ++i) {
        const std::int64_t a = nodes[static_cast<std::size_t>(i)];
        const std::int64_t b = nodes[static_cast<std::size_t>((i + 1) % m)];
        std::vector<std::int64_t> hop;
        for (std::int64_t id : gpu_nic) hop.push_back(im.shift_link(id, a));
        const std::int64_t va = im.nic0[static_cast<std::size_t>(rail)] + a * im.vertices_per_domain;
        const std::int64_t vb = im.nic0[static_cast<std::size_t>(rail)] + b * im.vertices_per_domain;
        for (std::int64_t id : im.tree_path(va, vb)) hop.push_back(id);
        for (auto it = gpu_nic.rbegin(); it != gpu_nic.rend(); ++it) {
          hop.push_back(im.shift_link(*it ^ 1, b));
        }
        double lat = 0;
        for (std::int64_t id : hop) {
          ++load[static_cast<std::size_t>(id)];
          lat += im.links[static_cast<std::size_t>(id)].latency_s;
          used.push_back(id);
        }
        work[gi].hop_lat = std::max(work[gi].hop_lat, lat);
      }
      work[gi].channel_links.push_back(std::move(used));
    }
  }

  // Ring bandwidths from the shared loads; all-to-all shares (every rank of every group
  // spanning nodes sends through its nearest NIC at once: ranks behind one NIC split it, and
  // ranks behind one leaf split its uplink when their group spans leaves).
  const double nic_bw = im.nics_per_domain > 0 ? im.spec.inter_node.nic_bandwidth_gbit_per_s * 1e9 / 8
                                             : 0.0;
  std::map<std::int64_t, std::int64_t> ranks_per_nic, ranks_per_leaf;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    if (infos[gi].num_nodes < 2) continue;
    for (const auto& [node, locals] : work[gi].by_node) {
      for (std::int64_t l : locals) {
        const std::int64_t key = node * im.nics_per_domain + im.nearest_nic[static_cast<std::size_t>(l)];
        ++ranks_per_nic[key];
        ++ranks_per_leaf[im.nic_leaf[static_cast<std::size_t>(key)]];
      }
    }
  }
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    GroupInfo& info = infos[gi];
    if (info.num_nodes < 2) continue;
    double total = 0;
    double worst = std::numeric_limits<double>::infinity();
    for (const auto& used : work[gi].channel_links) {
      double bw = std::numeric_limits<double>::infinity();
      LinkClass cls = LinkClass::kInfiniband;
      for (std::int64_t id : used) {
        const Link& l = im.links[static_cast<std::size_t>(id)];
        const double share = l.bandwidth_bytes_per_s / load[static_cast<std::size_t>(id)];
        if (share < bw) {
          bw = share;
          cls = l.cls;
        }
      }
      total += bw;
      if (bw < worst) {
        worst = bw;
        info.inter_class = cls;
      }
    }
    info.inter_ring_bandwidth = core::BytesPerSecond(total);
    info.inter_channels = static_cast<std::int64_t>(work[gi].channel_links.size());
    info.inter_hop_latency = core::Seconds(work[gi].hop_lat);

    double per_rank = std::numeric_limits<double>::infinity();
    std::set<std::int64_t> leaves;
    for (const auto& [node, locals] : work[gi].by_node) {
      for (std::int64_t l : locals) {
        const std::int64_t key = node * im.nics_per_domain + im.nearest_nic[static_cast<std::size_t>(l)];
        per_rank = std::min(per_rank, nic_bw / static_cast<double>(ranks_per_nic[key]));
        per_rank = std::min(per_rank, im.gpu_nic[static_cast<std::size_t>(l)].bandwidth.value());
        leaves.insert(im.nic_leaf[static_cast<std::size_t>(key)]);
      }
    }
    if (leaves.size() > 1 && im.spine >= 0) {
      for (std::int64_t leaf : leaves) {
        // The leaf's single up link in the tree (leaf -> spine).
        const double up =
            im.links[static_cast<std::size_t>(im.up_link[static_cast<std::size_t>(leaf)])]
                .bandwidth_bytes_per_s;
        per_rank = std::min(per_rank, up / static_cast<double>(ranks_per_leaf[leaf]));
      }
    }
    info.inter_rank_bandwidth = core::BytesPerSecond(per_rank);
  }
  return infos;
}

core::Result<GroupInfo> Topology::submesh_group(std::int64_t nodes, std::int64_t gpus_per_node) const {
  if (nodes < 1 || nodes > impl_->spec.nodes || gpus_per_node < 1 ||
      gpus_per_node > impl_->spec.gpus_per_node) {
    return core::invalid_argument("submesh " + std::to_string(nodes) + " x " +
                                  std::to_string(gpus_per_node) + " does not fit a cluster of " +
                                  std::to_string(impl_->spec.nodes) + " x " +
                                  std::to_string(impl_->spec.gpus_per_node));
  }
  std::vector<std::int64_t> ids;
  for (std::int64_t n = 0; n < nodes; ++n) {
    for (std::int64_t l = 0; l < gpus_per_node; ++l) ids.push_back(n * impl_->spec.gpus_per_node + l);
  }
  return group(ids);
}

core::Json Topology::to_json() const {
  const Impl& im = *impl_;
  core::Json vertices = core::Json::array();
  for (std::int64_t v = 0; v < num_vertices(); ++v) {
    const VertexProps& p = im.graph[static_cast<Vertex>(v)];
    core::Json vertex = {{"id", v}, {"kind", vertex_kind_name(p.kind)}, {"node", p.node},
                         {"index", p.index}};
    // Only where NVLink spans nodes (else it is the node), so those dumps read as before.
    if (im.domain_nodes > 1) vertex["nvlink_domain"] = p.domain;
    vertices.push_back(std::move(vertex));
  }
  core::Json links = core::Json::array();
  for (const Link& l : im.links) {
    links.push_back({{"from", l.from},
                     {"to", l.to},
                     {"class", link_class_name(l.cls)},
                     {"bandwidth_gbyte_per_s", l.bandwidth_bytes_per_s / 1e9},
                     {"latency_us", l.latency_s * 1e6}});
  }
  return core::Json{{"vertices", vertices}, {"links", links}};
}

}  // namespace alpasim::cluster
