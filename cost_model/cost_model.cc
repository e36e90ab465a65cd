#include "cost_model/cost_model.h"

#include <algorithm>

namespace alpasim::cost_model {

struct CostModel::State {
  State(cluster::ClusterSpec s, cluster::Topology t, CalibratedParams p, ComputeCostModel c,
        CollectiveCostModel k)
      : spec(std::move(s)), topology(std::move(t)), params(std::move(p)), compute(std::move(c)),
        collectives(std::move(k)) {}
  cluster::ClusterSpec spec;
  cluster::Topology topology;
  CalibratedParams params;
  ComputeCostModel compute;
  CollectiveCostModel collectives;
  mutable std::mutex mu;
  mutable std::map<std::vector<std::int64_t>, cluster::GroupInfo> groups;
};

core::Result<CostModel> CostModel::create(const cluster::ClusterSpec& spec,
                                          CalibratedParams params,
                                          const std::vector<schema::GemmEntry>& gemm_table,
                                          const std::vector<schema::ConvEntry>& conv_table) {
  ALPASIM_ASSIGN_OR_RETURN(cluster::Topology topo, cluster::Topology::build(spec));
  CollectiveParams cp = params.collective;
  // Tutel's stride copies run at the streaming HBM bandwidth of this GPU.
  cp.local_copy_bytes_per_s = params.compute.hbm_efficiency * spec.gpu.hbm_bandwidth.value();
  ComputeCostModel compute(spec.gpu, params.compute, gemm_table, conv_table);
  auto state = std::make_shared<State>(spec, std::move(topo), std::move(params),
                                       std::move(compute), CollectiveCostModel(cp));
  return CostModel(std::move(state));
}

const cluster::ClusterSpec& CostModel::spec() const { return state_->spec; }
const cluster::Topology& CostModel::topology() const { return state_->topology; }
const CalibratedParams& CostModel::params() const { return state_->params; }
const ComputeCostModel& CostModel::compute() const { return state_->compute; }
const CollectiveCostModel& CostModel::collectives() const { return state_->collectives; }

core::Result<cluster::GroupInfo> CostModel::group(std::span<const std::int64_t> devices) const {
  std::vector<std::int64_t> key(devices.begin(), devices.end());
  std::sort(key.begin(), key.end());
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->groups.find(key);
    if (it != state_->groups.end()) return it->second;
  }
  ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo g, state_->topology.group(key));
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->groups.emplace(std::move(key), g);
  return g;
}

CollectiveEstimate CostModel::send_recv(core::Bytes bytes, std::int64_t src,
                                        std::int64_t dst) const {
  return collectives().send_recv(bytes, topology().point_to_point(src, dst));
}

}  // namespace alpasim::cost_model
