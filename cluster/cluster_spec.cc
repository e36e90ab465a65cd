#include "cluster/cluster_spec.h"

#include "core/limits.h"
#include "core/text.h"

namespace alpasim::cluster {
namespace {

struct Preset {
  const char* name;
  const char* gpu;
  std::int64_t gpus_per_node;
  IntraNodeSpec intra;
  InterNodeSpec inter;
  std::int64_t nvlink_domain_nodes = 1;  ///< ClusterSpec::nvlink_domain_nodes
};

// Sources: validation/data/alpa_models.json "hardware" (p3.16xlarge: 8x V100 NVLink
// hybrid cube-mesh, 6 NVLinks x 25 GB/s per direction, 25 Gb/s network) and
// validation/data/collectives.csv link-spec rows (A100: NVLink3 300 GB/s unidirectional
// per GPU through NVSwitch, 8x200 Gb/s HDR; H100/H200: NVLink4 450 GB/s, 8x400 Gb/s NDR).
// Latencies are typical one-hop figures; calibrated values come from profiles.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"aws-p3.16xlarge", "v100-16gb", 8,
       {"nvlink_hybrid_cube_mesh", 150, 25, 16, 2.0},
       {"ethernet", 1, 25, 15.0, "single_switch", 1}},
      {"dgx-a100-40gb", "a100-40gb", 8,
       {"nvswitch", 300, 25, 32, 2.0},
       {"infiniband", 8, 200, 5.0, "rail_optimized", 1}},
      {"dgx-a100-80gb", "a100-80gb", 8,
       {"nvswitch", 300, 25, 32, 2.0},
       {"infiniband", 8, 200, 5.0, "rail_optimized", 1}},
      // DGX B200: NVLink 5, 18 links x 50 GB/s = 900 GB/s per GPU and direction through
      // NVSwitch (collectives.csv lines 51-90: "NVLink 5, 900 GB/s unidirectional"); PCIe
      // Gen5; 8 x 400 Gb/s NDR ConnectX-7, one per GPU, as on DGX H100.
      {"dgx-b200", "b200", 8,
       {"nvswitch", 900, 50, 64, 2.0},
       {"infiniband", 8, 400, 5.0, "rail_optimized", 1}},
      // DGX B300: as DGX B200 with Blackwell Ultra GPUs and 8 single-port ConnectX-8 at
      // 800 Gb/s (XDR InfiniBand; ml-engineering network README, NVIDIA's DGX B300 page).
      {"dgx-b300", "b300", 8,
       {"nvswitch", 900, 50, 64, 2.0},
       {"infiniband", 8, 800, 5.0, "rail_optimized", 1}},
      {"dgx-h100", "h100-sxm", 8,
       {"nvswitch", 450, 25, 64, 2.0},
       {"infiniband", 8, 400, 5.0, "rail_optimized", 1}},
      // DGX/HGX H800: as DGX H100 with NVLink limited to 400 GB/s per GPU (both directions),
      // i.e. 200 GB/s per direction (8 of 18 NVLink4 links); collectives.csv line 105 (a
      // user's nccl-tests, NCCL issue #1374) states 200 GB/s unidirectional. The network is
      // assumed to be DGX H100's (8 x 400 Gb/s NDR); an explicit cluster block can differ.
      {"dgx-h800", "h800-sxm", 8,
       {"nvswitch", 200, 25, 64, 2.0},
       {"infiniband", 8, 400, 5.0, "rail_optimized", 1}},
      // GB200 NVL72: a node is one compute tray of 4 B200 GPUs (2 Grace-Blackwell superchips);
      // the rack's 18 trays share one NVLink domain through 9 NVLink switch trays, each GPU
      // at NVLink 5's 1.8 TB/s both ways (900 GB/s per direction, 18 links x 50 GB/s). Per
      // tray 4 ConnectX-7 400 Gb/s NICs (one per GPU) on a rail-optimised InfiniBand compute
      // fabric; PCIe Gen5 x16 to each NIC. docs/cluster.md gives the sources.
      {"gb200-nvl72", "gb200", 4,
       {"nvswitch", 900, 50, 64, 2.0},
       {"infiniband", 4, 400, 5.0, "rail_optimized", 1},
       18},
      // GB300 NVL72: as GB200 NVL72 with Blackwell Ultra GPUs and ConnectX-8 SuperNICs at
      // 800 Gb/s, one per GPU.
      {"gb300-nvl72", "gb300", 4,
       {"nvswitch", 900, 50, 64, 2.0},
       {"infiniband", 4, 800, 5.0, "rail_optimized", 1},
       18},
      {"hgx-h200", "h200", 8,
       {"nvswitch", 450, 25, 64, 2.0},
       {"infiniband", 8, 400, 5.0, "rail_optimized", 1}},
      // AMD Instinct MI300X platform (8 OAM GPUs): Infinity Fabric (xGMI) as a full mesh,
      // every GPU pair one link of 64 GB/s per direction, 7 per GPU = 448 GB/s per direction
      // (ml-engineering network README; collectives.csv line 138); PCIe Gen5 x16 (64 GB/s)
      // to the host and one 400 Gb/s NIC per GPU, as the platform and the common
      // MI300X cloud nodes (8 x 400 Gb/s); the InfiniBand/RoCE fabric is modelled as
      // InfiniBand with DGX H100's calibration (no published MI300X multi-node curve).
      {"mi300x", "mi300x", 8,
       {"infinity_fabric", 448, 64, 64, 2.0},
       {"infiniband", 8, 400, 5.0, "rail_optimized", 1}},
  };
  return kPresets;
}

const std::vector<std::string>& intra_fabrics() {
  static const std::vector<std::string> k = {"nvswitch", "nvlink_hybrid_cube_mesh", "infinity_fabric",
                                             "pcie"};
  return k;
}
const std::vector<std::string>& inter_fabrics() {
  static const std::vector<std::string> k = {"infiniband", "ethernet", "efa"};
  return k;
}
const std::vector<std::string>& inter_topologies() {
  static const std::vector<std::string> k = {"rail_optimized", "fat_tree", "single_switch"};
  return k;
}

core::Result<IntraNodeSpec> parse_intra(core::JsonObject obj) {
  IntraNodeSpec s;
  ALPASIM_ASSIGN_OR_RETURN(s.fabric, obj.get_enum("fabric", intra_fabrics()));
  ALPASIM_ASSIGN_OR_RETURN(s.gpu_bandwidth_gbyte_per_s,
                           obj.get_positive_number("gpu_bandwidth_gbyte_per_s"));
  ALPASIM_ASSIGN_OR_RETURN(s.link_bandwidth_gbyte_per_s,
                           obj.get_positive_number_or("link_bandwidth_gbyte_per_s",
                                                      s.gpu_bandwidth_gbyte_per_s));
  ALPASIM_ASSIGN_OR_RETURN(s.pcie_bandwidth_gbyte_per_s,
                           obj.get_positive_number_or("pcie_bandwidth_gbyte_per_s", 16));
  ALPASIM_ASSIGN_OR_RETURN(s.latency_us, obj.get_number_in_or("latency_us", 0, 1e6,
                                                              "a latency in [0, 1e6] us", 2.0));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return s;
}

core::Result<InterNodeSpec> parse_inter(core::JsonObject obj) {
  InterNodeSpec s;
  ALPASIM_ASSIGN_OR_RETURN(s.fabric, obj.get_enum("fabric", inter_fabrics()));
  ALPASIM_ASSIGN_OR_RETURN(s.nics_per_node, obj.get_count("nics_per_node", core::limits::kMaxGpusPerNode));
  ALPASIM_ASSIGN_OR_RETURN(s.nic_bandwidth_gbit_per_s,
                           obj.get_positive_number("nic_bandwidth_gbit_per_s"));
  ALPASIM_ASSIGN_OR_RETURN(s.latency_us, obj.get_number_in_or("latency_us", 0, 1e6,
                                                              "a latency in [0, 1e6] us", 5.0));
  ALPASIM_ASSIGN_OR_RETURN(s.topology,
                           obj.get_enum_or("topology", inter_topologies(), "fat_tree"));
  ALPASIM_ASSIGN_OR_RETURN(s.oversubscription,
                           obj.get_number_in_or("oversubscription", 1, 1024,
                                                "a ratio in [1, 1024]", 1));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return s;
}

}  // namespace

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

core::Result<ClusterSpec> make_preset_cluster(const std::string& name, std::int64_t nodes) {
  for (const auto& p : presets()) {
    if (name != p.name) continue;
    auto gpu = find_gpu_spec(p.gpu);
    ALPASIM_CHECK(gpu.has_value()) << "preset " << name << " names unknown GPU " << p.gpu;
    return ClusterSpec{p.name, nodes,   p.gpus_per_node,
                       *gpu,   p.intra, p.inter,
                       default_reserved_memory(*gpu), p.nvlink_domain_nodes};
  }
  return core::invalid_argument("unknown cluster preset \"" + name + "\"");
}

std::int64_t ClusterSpec::nvlink_domain_nodes_in_use() const {
  for (std::int64_t d = std::min(nvlink_domain_nodes, nodes); d > 1; --d) {
    if (nodes % d == 0) return d;
  }
  return 1;
}

core::Bytes default_reserved_memory(const GpuSpec& gpu) {
  const std::int64_t fixed_bytes = core::mib(512).value() + core::mib(512).value();
  const std::int64_t fragmentation_bytes = gpu.memory.value() / 20;  // 5 %
  const std::int64_t mib = core::mib(1).value();
  return core::bytes((fixed_bytes + fragmentation_bytes) / mib * mib);
}

core::Bytes reserve_on_gpu(const ClusterSpec& from, const GpuSpec& gpu) {
  return from.reserved_memory == default_reserved_memory(from.gpu) ? default_reserved_memory(gpu)
                                                                   : from.reserved_memory;
}

std::string move_to_gpu(ClusterSpec& spec, const ClusterSpec& from, const GpuSpec& gpu) {
  spec.gpu = gpu;
  spec.reserved_memory = reserve_on_gpu(from, gpu);
  if (spec.reserved_memory < gpu.memory) return "";
  return "the scenario's reserved memory (" + core::format_bytes(spec.reserved_memory.value()) +
         ") is not less than the " + gpu.name + "'s " + core::format_bytes(gpu.memory.value());
}

namespace {

// The optional "reserved_memory_gib" of either cluster form: GiB in [0, capacity - 1 MiB],
// so at least a MiB is left for the plan.
core::Result<core::Bytes> parse_reserved_memory(core::JsonObject& obj, const GpuSpec& gpu) {
  auto value = obj.optional("reserved_memory_gib");
  if (!value) return default_reserved_memory(gpu);
  const double max_gib = core::to_gib(gpu.memory - core::mib(1));
  ALPASIM_ASSIGN_OR_RETURN(
      double gib, value->as_number(0, max_gib,
                                   "GiB in [0, " + core::format_fixed(max_gib, 3) + "] (less than the " +
                                       gpu.name + "'s memory)"));
  return core::bytes(static_cast<std::int64_t>(gib * static_cast<double>(core::gib(1).value())));
}

// The optional "nvlink_domain_gpus" of either cluster form: GPUs sharing one NVLink switch
// fabric, a multiple of the node's GPUs, on an NVSwitch fabric when it spans nodes. Absent:
// `fallback` nodes (the preset's domain, or 1).
core::Result<std::int64_t> parse_nvlink_domain_nodes(core::JsonObject& obj, const ClusterSpec& spec,
                                                     std::int64_t fallback) {
  auto value = obj.optional("nvlink_domain_gpus");
  if (!value) return fallback;
  const std::int64_t gpn = spec.gpus_per_node;
  ALPASIM_ASSIGN_OR_RETURN(
      std::int64_t gpus,
      value->as_int(gpn, core::limits::kMaxNvlinkDomainGpus,
                    "an integer in [" + std::to_string(gpn) + ", " +
                        std::to_string(core::limits::kMaxNvlinkDomainGpus) +
                        "] (GPUs sharing one NVLink fabric, a multiple of gpus_per_node " +
                        std::to_string(gpn) + ")"));
  if (gpus % gpn != 0) {
    return value->error("expected a multiple of gpus_per_node " + std::to_string(gpn) +
                        " (an NVLink domain holds whole nodes), got " + std::to_string(gpus));
  }
  if (gpus > gpn && spec.intra_node.fabric != "nvswitch") {
    return value->error("an NVLink domain spanning nodes needs the \"nvswitch\" intra-node fabric, "
                        "got \"" + spec.intra_node.fabric + "\"");
  }
  return gpus / gpn;
}

}  // namespace

core::Result<ClusterSpec> parse_cluster_spec(const core::JsonValue& value) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonObject obj, value.as_object());
  ClusterSpec spec;
  if (auto preset = obj.optional("preset")) {
    ALPASIM_ASSIGN_OR_RETURN(std::string name, preset->as_enum(cluster_preset_names()));
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t nodes, obj.get_count("nodes", core::limits::kMaxNodes));
    spec = make_preset_cluster(name, nodes).value();
    if (auto gpn = obj.optional("gpus_per_node")) {
      ALPASIM_ASSIGN_OR_RETURN(spec.gpus_per_node,
                               gpn->as_int(1, spec.gpus_per_node,
                                           "an integer in [1, " +
                                               std::to_string(spec.gpus_per_node) +
                                               "] (the GPUs of a " + name + " node)"));
      if (spec.nodes > 1 && spec.gpus_per_node != make_preset_cluster(name, 1)->gpus_per_node) {
        return gpn->error("a partial node (gpus_per_node < " +
                          std::to_string(make_preset_cluster(name, 1)->gpus_per_node) +
                          ") needs \"nodes\": 1");
      }
    }
    ALPASIM_ASSIGN_OR_RETURN(spec.reserved_memory, parse_reserved_memory(obj, spec.gpu));
    if (spec.gpus_per_node == make_preset_cluster(name, 1)->gpus_per_node) {
      ALPASIM_ASSIGN_OR_RETURN(spec.nvlink_domain_nodes,
                               parse_nvlink_domain_nodes(obj, spec, spec.nvlink_domain_nodes));
    } else {
      spec.nvlink_domain_nodes = 1;  // part of one node
    }
    ALPASIM_RETURN_IF_ERROR(obj.finish());
    return spec;
  }
  // Explicit description.
  ALPASIM_ASSIGN_OR_RETURN(spec.nodes, obj.get_count("nodes", core::limits::kMaxNodes));
  ALPASIM_ASSIGN_OR_RETURN(spec.gpus_per_node,
                           obj.get_count("gpus_per_node", core::limits::kMaxGpusPerNode));
  ALPASIM_ASSIGN_OR_RETURN(core::JsonValue gpu_value, obj.required("gpu", "a GPU kind name"));
  ALPASIM_ASSIGN_OR_RETURN(std::string gpu_name, gpu_value.as_enum(gpu_spec_names()));
  spec.gpu = *find_gpu_spec(gpu_name);
  ALPASIM_ASSIGN_OR_RETURN(spec.reserved_memory, parse_reserved_memory(obj, spec.gpu));
  ALPASIM_ASSIGN_OR_RETURN(core::JsonObject intra, obj.get_object("intra_node"));
  ALPASIM_ASSIGN_OR_RETURN(spec.intra_node, parse_intra(std::move(intra)));
  if (spec.nodes > 1 || obj.has("inter_node")) {
    ALPASIM_ASSIGN_OR_RETURN(core::JsonObject inter, obj.get_object("inter_node"));
    ALPASIM_ASSIGN_OR_RETURN(spec.inter_node, parse_inter(std::move(inter)));
  }
  ALPASIM_ASSIGN_OR_RETURN(spec.nvlink_domain_nodes, parse_nvlink_domain_nodes(obj, spec, 1));
  if (obj.has("preset_name")) {  // written by cluster_spec_to_json; informational only
    ALPASIM_ASSIGN_OR_RETURN(spec.preset, obj.get_string("preset_name"));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return spec;
}

core::Json cluster_spec_to_json(const ClusterSpec& spec) {
  core::Json j;
  if (!spec.preset.empty()) j["preset_name"] = spec.preset;
  j["nodes"] = spec.nodes;
  j["gpus_per_node"] = spec.gpus_per_node;
  j["gpu"] = spec.gpu.name;
  j["reserved_memory_gib"] = core::to_gib(spec.reserved_memory);
  j["intra_node"] = {{"fabric", spec.intra_node.fabric},
                     {"gpu_bandwidth_gbyte_per_s", spec.intra_node.gpu_bandwidth_gbyte_per_s},
                     {"link_bandwidth_gbyte_per_s", spec.intra_node.link_bandwidth_gbyte_per_s},
                     {"pcie_bandwidth_gbyte_per_s", spec.intra_node.pcie_bandwidth_gbyte_per_s},
                     {"latency_us", spec.intra_node.latency_us}};
  // Written only where the domain spans nodes, so single-node-NVLink clusters print as before.
  if (spec.nvlink_domain_nodes > 1) j["nvlink_domain_gpus"] = spec.nvlink_domain_nodes * spec.gpus_per_node;
  if (!spec.inter_node.fabric.empty()) {
    j["inter_node"] = {{"fabric", spec.inter_node.fabric},
                       {"nics_per_node", spec.inter_node.nics_per_node},
                       {"nic_bandwidth_gbit_per_s", spec.inter_node.nic_bandwidth_gbit_per_s},
                       {"latency_us", spec.inter_node.latency_us},
                       {"topology", spec.inter_node.topology},
                       {"oversubscription", spec.inter_node.oversubscription}};
  }
  return j;
}

}  // namespace alpasim::cluster
