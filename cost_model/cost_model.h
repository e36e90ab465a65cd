#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "cluster/cluster_spec.h"
#include "cluster/topology.h"
#include "core/status.h"
#include "cost_model/calibration.h"
#include "cost_model/collective_cost.h"
#include "cost_model/compute_cost.h"

namespace alpasim::cost_model {

/// One calibrated cost model of one cluster: its topology graph, compute model and
/// collective model together, with device groups derived once and cached. The entry point
/// for the planner and the simulator. Thread-safe; copies share state.
class CostModel {
 public:
  /// Builds the topology of `spec` and the models from `params` (e.g. params_for_preset()).
  /// `gemm_table` / `conv_table`: measured rows of this GPU to look up and interpolate.
  static core::Result<CostModel> create(const cluster::ClusterSpec& spec, CalibratedParams params,
                                        const std::vector<schema::GemmEntry>& gemm_table = {},
                                        const std::vector<schema::ConvEntry>& conv_table = {});

  const cluster::ClusterSpec& spec() const;
  const cluster::Topology& topology() const;
  const CalibratedParams& params() const;
  const ComputeCostModel& compute() const;
  const CollectiveCostModel& collectives() const;

  /// GEMM / conv / memory-bound kernel time on one GPU of the cluster.
  ComputeEstimate gemm(const GemmShape& s) const { return compute().gemm(s); }
  ComputeEstimate conv(const ConvShape& c) const { return compute().conv(c); }
  core::Seconds memory_bound(core::Bytes bytes) const { return compute().memory_bound(bytes); }

  /// The GroupInfo of `devices` (global ids), derived from the graph on first use and cached
  /// by the sorted id list.
  core::Result<cluster::GroupInfo> group(std::span<const std::int64_t> devices) const;
  /// GroupInfos of disjoint groups that communicate at the same time (sharing NICs and
  /// network links), e.g. all rows of a logical mesh; not cached.
  core::Result<std::vector<cluster::GroupInfo>> concurrent_groups(
      std::span<const std::vector<std::int64_t>> groups) const {
    return topology().concurrent_groups(groups);
  }
  /// The fastest algorithm for collective `c` of `bytes` on `group`.
  CollectiveEstimate collective(Collective c, core::Bytes bytes,
                                const cluster::GroupInfo& group) const {
    return collectives().estimate(c, bytes, group);
  }
  /// A point-to-point transfer of `bytes` from device `src` to device `dst` (distinct).
  CollectiveEstimate send_recv(core::Bytes bytes, std::int64_t src, std::int64_t dst) const;

 private:
  struct State;
  explicit CostModel(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace alpasim::cost_model
