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

/// The total rate a link carries from `time` on (until its next sample).
struct LinkRateSample {
  Time time = 0;             ///< ns
  double bytes_per_s = 0;    ///< sum of the rates of the flows on the link
};

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
/// with it.
///
/// Cost: only the connected component (flows linked through shared links) around the
/// links whose flows changed is recomputed, in O(R + r·L) for its R route entries, L links
/// and r distinct bottleneck shares (1 on a symmetric network); flow progress is updated
/// lazily and completions sit in a heap, so untouched flows cost nothing per change.
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

  /// Pre-allocates room for `flows` flows with `route_entries` route entries in all, so
  /// start_flow does not reallocate (an optimisation only; results do not depend on it).
  void reserve_flows(std::size_t flows, std::size_t route_entries);

  /// Starts a flow of `bytes` (>= 0) over `route` (non-empty, valid link ids; a link
  /// listed twice is counted once) at time `now` (not before the last call's time).
  FlowId start_flow(Time now, std::span<const LinkId> route, double bytes);

  /// Moves the clock to `now` and returns, in increasing flow id, the flows that have
  /// finished by then. Finished flows leave the model. Precondition: `now` is not before
  /// the last call's time.
  std::vector<FlowId> advance(Time now);
  /// As advance(now), but writes the finished flows into `done` (cleared first), so a
  /// caller that reuses `done` allocates nothing per call.
  void advance(Time now, std::vector<FlowId>& done);

  /// Recomputes the max-min fair rates of the flows affected by starts and finishes since
  /// the last call (no-op when there were none).
  void update_rates();

  /// Earliest time a flow finishes at the current rates (rounded up to whole ns, so the
  /// flow has really moved all its bytes then), or -1 when no flow is active. Call
  /// update_rates() first.
  Time next_completion();

  /// Current rate of an active flow, bytes/s (after update_rates()).
  core::BytesPerSecond rate(FlowId flow) const {
    return core::BytesPerSecond(flows_[static_cast<std::size_t>(flow)].rate * 1e9);
  }
  /// Number of flows not yet finished.
  std::size_t num_active() const { return num_active_; }
  /// Bytes of the finished flows that crossed each link, index = LinkId.
  const std::vector<double>& bytes_carried() const { return carried_; }
  /// Per link (index = LinkId), the carried rate after every change, one sample per
  /// instant, starting when the link first carries a flow.
  const std::vector<std::vector<LinkRateSample>>& rate_series() const { return rate_series_; }
  /// Moves rate_series() out (the model keeps empty series).
  std::vector<std::vector<LinkRateSample>> take_rate_series() { return std::move(rate_series_); }

 private:
  // Plain data: the route lives in routes_ (no allocation per flow).
  struct Flow {
    std::int32_t route_begin = 0;  // [route_begin, route_end) in routes_, sorted, unique
    std::int32_t route_end = 0;
    double bytes = 0;
    double remaining = 0;  // bytes, as of `updated`
    double rate = 0;       // bytes per ns
    Time updated = 0;
    std::uint64_t version = 0;  // of its entry in the completion heap; 0 = none yet
    bool active = true;
  };
  struct Completion {
    Time time;
    FlowId flow;
    std::uint64_t version;
  };
  static bool later(const Completion& a, const Completion& b) {
    return a.time > b.time || (a.time == b.time && a.flow > b.flow);
  }
  void mark_dirty(LinkId l);
  std::span<const LinkId> route_of(const Flow& f) const {
    return {routes_.data() + f.route_begin, static_cast<std::size_t>(f.route_end - f.route_begin)};
  }
  void drop_stale();

  std::vector<std::string> names_;
  std::vector<double> capacity_;                  // bytes per ns
  std::vector<double> carried_;                   // bytes
  std::vector<std::vector<FlowId>> link_flows_;   // active flows per link
  std::vector<std::vector<LinkRateSample>> rate_series_;
  std::vector<Flow> flows_;
  std::vector<LinkId> routes_;  // every flow's route, appended at start_flow
  std::vector<Completion> heap_;  // min-heap by (time, flow) via `later`
  std::vector<LinkId> dirty_links_;
  std::vector<char> link_dirty_;
  std::size_t num_active_ = 0;
  Time now_ = 0;
  // Scratch for update_rates, kept to avoid reallocation. Epoch marks avoid clearing.
  std::uint64_t epoch_ = 0;
  std::vector<std::uint64_t> link_seen_, flow_seen_;
  std::vector<LinkId> comp_links_;
  std::vector<FlowId> comp_flows_;
  std::vector<double> remaining_capacity_;
  std::vector<std::int32_t> unfrozen_count_;
  // Per flow id: == epoch_ when frozen in the current update_rates (an integer, not a
  // char, so stores to it do not alias every other array for the optimiser).
  std::vector<std::uint64_t> frozen_;
  std::vector<double> old_rate_;       // per comp_flows_ entry
  std::vector<LinkId> live_links_;     // comp_links_ with unfrozen flows, in order
};

}  // namespace alpasim::sim
