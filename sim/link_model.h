#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/time.h"

namespace alpasim::sim {

/// Index of a network link in a LinkModel (0-based, dense).
using LinkId = std::int32_t;
/// Index of a flow in a LinkModel (0-based, never reused within one model).
using FlowId = std::int32_t;

/// Network links shared by concurrent flows with max-min fairness.
///
/// A link is a capacity in bytes/s; a flow moves `bytes` across a route (a list of link
/// ids, all traversed at the same rate, as in a fluid model of a wormhole-routed path).
/// Whenever the set of active flows changes, rates are recomputed by progressive filling
/// (Bertsekas & Gallager, "Data Networks", §6.5.2): repeatedly find the link whose
/// remaining capacity divided by its number of unfrozen flows is smallest, give every
/// unfrozen flow on it that share, freeze them, subtract. A link carrying k flows and
/// nothing else therefore gives each capacity/k. The model is generic (ids and
/// capacities) so the cluster topology can describe NVLink, PCIe, NIC and switch links
/// with it. Cost per recomputation: O(R + r·L) for R = Σ route lengths of the active
/// flows, L links in use and r distinct bottleneck shares (1 on a symmetric network).
class LinkModel {
 public:
  /// Adds a link of `capacity` (> 0 bytes/s) and returns its id. `name` is for reports.
  LinkId add_link(std::string name, core::BytesPerSecond capacity);

  /// Number of links.
  std::int32_t num_links() const { return static_cast<std::int32_t>(capacity_.size()); }
  /// The name given to add_link.
  const std::string& link_name(LinkId link) const { return names_[static_cast<std::size_t>(link)]; }
  /// Capacity of `link`, bytes/s.
  core::BytesPerSecond capacity(LinkId link) const {
    return core::BytesPerSecond(capacity_[static_cast<std::size_t>(link)] * 1e9);
  }

  /// Starts a flow of `bytes` (>= 0) over `route` (non-empty, valid link ids; a link
  /// listed twice is counted once) at time `now`. Advances all flows to `now` first.
  FlowId start_flow(Time now, std::span<const LinkId> route, double bytes);

  /// Moves every active flow forward to `now` at its current rate and returns, in
  /// increasing flow id, the flows that have finished (remaining < 1e-3 bytes). Finished
  /// flows leave the model. Precondition: `now` is not before the last call.
  std::vector<FlowId> advance(Time now);

  /// Recomputes max-min fair rates if flows started or finished since the last call.
  void update_rates();

  /// Earliest time a flow finishes at the current rates (rounded up to whole ns), or -1
  /// when no flow is active. Call update_rates() first.
  Time next_completion() const;

  /// Current rate of an active flow, bytes/s (after update_rates()).
  core::BytesPerSecond rate(FlowId flow) const {
    return core::BytesPerSecond(flows_[static_cast<std::size_t>(flow)].rate * 1e9);
  }
  /// Number of flows not yet finished.
  std::size_t num_active() const { return active_.size(); }
  /// Bytes carried by each link so far (for utilisation reports), index = LinkId.
  const std::vector<double>& bytes_carried() const { return carried_; }

 private:
  struct Flow {
    std::vector<LinkId> route;
    double remaining = 0;  // bytes
    double rate = 0;       // bytes per ns
  };
  std::vector<std::string> names_;
  std::vector<double> capacity_;  // bytes per ns
  std::vector<double> carried_;   // bytes
  std::vector<Flow> flows_;
  std::vector<FlowId> active_;  // ascending flow ids
  Time now_ = 0;
  bool dirty_ = false;
  // Scratch for update_rates, kept to avoid reallocation.
  std::vector<double> remaining_capacity_;
  std::vector<std::int32_t> unfrozen_count_;  // per link; all 0 between calls
  std::vector<std::int32_t> link_begin_;      // per link: start in link_flows_
  std::vector<std::int32_t> link_flows_;      // indices into active_, grouped by link
  std::vector<LinkId> used_links_;            // links with active flows, ascending
  std::vector<std::int32_t> link_count_;      // flows per used link (parallel to used_links_)
  std::vector<char> frozen_;
};

}  // namespace alpasim::sim
