#include "planner/intra_op/mesh.h"

#include <algorithm>

#include "core/check.h"

namespace alpasim::planner::intra_op {

std::string LogicalMesh::to_string() const {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

std::int64_t group_size(const LogicalMesh& mesh, MeshAxes axes) {
  std::int64_t n = 1;
  if ((axes & kAxis0) != 0) n *= mesh.rows;
  if ((axes & kAxis1) != 0) n *= mesh.cols;
  return n;
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllGather: return "all-gather";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllToAll: return "all-to-all";
  }
  return "unknown";
}

core::Seconds AlphaBetaCollectives::operator()(Collective c, core::Bytes bytes_per_device,
                                               MeshAxes axes) const {
  ALPASIM_CHECK(axes >= 1 && axes <= 3) << "mesh axes mask " << axes;
  const std::int64_t n = group_size(mesh, axes);
  if (n <= 1 || bytes_per_device.value() == 0) return core::seconds(0.0);
  double bw = 0.0;
  double alpha = 0.0;
  if (axes == kBothAxes) {
    bw = std::min(bandwidth[0].value(), bandwidth[1].value());
    alpha = std::max(latency[0].value(), latency[1].value());
  } else {
    const int a = axes == kAxis0 ? 0 : 1;
    bw = bandwidth[static_cast<std::size_t>(a)].value();
    alpha = latency[static_cast<std::size_t>(a)].value();
  }
  const double frac = static_cast<double>(n - 1) / static_cast<double>(n);
  const double factor = c == Collective::kAllReduce ? 2.0 * frac : frac;
  return core::seconds(alpha + factor * static_cast<double>(bytes_per_device.value()) / bw);
}

}  // namespace alpasim::planner::intra_op
