#pragma once

#include <string>
#include <vector>

#include "cluster/gpu_spec.h"
#include "core/json_reader.h"
#include "core/status.h"

namespace alpasim::cluster {

/// How the GPUs inside one node are connected.
struct IntraNodeSpec {
  /// "nvswitch" (every GPU pair at full NVLink speed), "nvlink_hybrid_cube_mesh" (V100
  /// DGX-1/p3: 6 NVLinks per GPU, some pairs over PCIe), "infinity_fabric" (AMD xGMI full
  /// mesh: one link per GPU pair, at most 8 GPUs), or "pcie".
  std::string fabric;
  /// Unidirectional NVLink (or PCIe) bandwidth out of one GPU, summed over its links.
  double gpu_bandwidth_gbyte_per_s = 0;
  /// One NVLink's unidirectional bandwidth (cube-mesh: a GPU pair has 1 or 2 links;
  /// Infinity Fabric: the one xGMI link of a pair).
  double link_bandwidth_gbyte_per_s = 0;
  /// PCIe bandwidth per GPU (host bridge, also the path of cube-mesh pairs without NVLink).
  double pcie_bandwidth_gbyte_per_s = 0;
  double latency_us = 0;  ///< one hop, software + wire
};

/// How nodes are connected.
struct InterNodeSpec {
  std::string fabric;       ///< "infiniband", "ethernet" or "efa"
  std::int64_t nics_per_node = 0;
  double nic_bandwidth_gbit_per_s = 0;  ///< per NIC, per direction (bits: as NICs are sold)
  double latency_us = 0;                ///< one way, NIC to NIC
  std::string topology;                 ///< "rail_optimized", "fat_tree" or "single_switch"
  /// Fat-tree oversubscription (1 = full bisection; 2 = half the uplink bandwidth).
  double oversubscription = 1;
};

/// The cluster of a scenario: identical nodes of identical GPUs.
struct ClusterSpec {
  std::string preset;  ///< the preset it came from, "" for an explicit description
  std::int64_t nodes = 0;
  std::int64_t gpus_per_node = 0;
  GpuSpec gpu;
  IntraNodeSpec intra_node;
  InterNodeSpec inter_node;
  /// Memory of each GPU that a training process cannot give to its tensors (CUDA context,
  /// NCCL buffers, allocator fragmentation, library workspaces). In [0, gpu.memory).
  /// Presets and parsed scenarios set default_reserved_memory(gpu) unless the scenario's
  /// "reserved_memory_gib" says otherwise; a spec built field by field reserves nothing.
  core::Bytes reserved_memory{0};
  /// Nodes whose GPUs share one NVLink switch fabric (the NVLink domain): 1 where NVLink
  /// ends at the node (DGX, HGX); 18 on GB200/GB300 NVL72, whose 18 four-GPU compute trays
  /// reach each other through the rack's NVLink switch trays at full NVLink bandwidth.
  /// Needs the "nvswitch" intra-node fabric when above 1.
  std::int64_t nvlink_domain_nodes = 1;

  std::int64_t num_gpus() const { return nodes * gpus_per_node; }
  /// The nodes of one NVLink domain as this cluster uses them: the largest divisor of
  /// `nodes` not above nvlink_domain_nodes, so every domain holds the same number of nodes
  /// (a job placed over whole segments of its racks, as Slurm's block topology does: 64
  /// GB200 trays run as 4 domains of 16). 1 when NVLink ends at the node.
  std::int64_t nvlink_domain_nodes_in_use() const;
  /// GPUs of one NVLink domain in use (nvlink_domain_nodes_in_use() * gpus_per_node).
  std::int64_t nvlink_domain_gpus() const { return nvlink_domain_nodes_in_use() * gpus_per_node; }
  /// What a plan may use per GPU: the fit limit of the planner and the simulator.
  core::Bytes usable_memory() const { return gpu.memory - reserved_memory; }
};

/// The default reserve of one GPU (docs/scenario.md, "Reserved memory"):
///   0.5 GiB  CUDA context and loaded kernel modules
/// + 0.5 GiB  NCCL communicators' buffers (tensor-, data- and pipeline-parallel groups)
/// + 5 %      of the capacity for the caching allocator's fragmentation and the cuBLAS,
///            cuDNN and framework workspaces
/// rounded down to a MiB. V100-16GB: 1.80 GiB; A100/H100-80GB: 5.00 GiB; H200: 7.57 GiB.
core::Bytes default_reserved_memory(const GpuSpec& gpu);

/// The reserve of `from`'s scenario on another GPU kind (what-if and capacity studies):
/// the new GPU's default where `from` used its own default, else `from`'s chosen reserve.
core::Bytes reserve_on_gpu(const ClusterSpec& from, const GpuSpec& gpu);

/// `spec` on `gpu`, its reserve carried over by reserve_on_gpu; "" when that leaves memory
/// for a plan, else why not ("the scenario's reserved memory (X) is not less than the G's Y").
std::string move_to_gpu(ClusterSpec& spec, const ClusterSpec& from, const GpuSpec& gpu);

/// Names of the cluster presets ("aws-p3.16xlarge", "dgx-a100-80gb", "dgx-h100", ...).
std::vector<std::string> cluster_preset_names();

/// The preset `name` with `nodes` nodes (full nodes).
core::Result<ClusterSpec> make_preset_cluster(const std::string& name, std::int64_t nodes);

/// Reads the scenario's "cluster" block: `{"preset": NAME, "nodes": N}` (plus optional
/// "gpus_per_node" to use part of each node), or an explicit description (docs/scenario.md).
core::Result<ClusterSpec> parse_cluster_spec(const core::JsonValue& value);

/// The JSON form parse_cluster_spec reads back to an equal spec (always explicit, with
/// "preset" kept for reference).
core::Json cluster_spec_to_json(const ClusterSpec& spec);

}  // namespace alpasim::cluster
