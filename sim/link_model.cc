#include "sim/link_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace alpasim::sim {

LinkId LinkModel::add_link(std::string name, core::BytesPerSecond capacity) {
  ALPASIM_CHECK(capacity.value() > 0 && std::isfinite(capacity.value()))
      << "link '" << name << "' needs a positive finite capacity, got " << capacity.value();
  names_.push_back(std::move(name));
  capacity_.push_back(capacity.value() * 1e-9);
  carried_.push_back(0.0);
  return static_cast<LinkId>(capacity_.size() - 1);
}

FlowId LinkModel::start_flow(Time now, std::span<const LinkId> route, double bytes) {
  ALPASIM_CHECK(!route.empty()) << "a flow needs at least one link";
  ALPASIM_CHECK(bytes >= 0) << "negative flow size " << bytes;
  // Finished flows found here are reported by the caller's next advance() call, which
  // sees remaining < threshold immediately; so only move the clock.
  for (FlowId f : active_) {
    Flow& flow = flows_[static_cast<std::size_t>(f)];
    double moved = std::min(flow.remaining, flow.rate * static_cast<double>(now - now_));
    flow.remaining -= moved;
    for (LinkId l : flow.route) carried_[static_cast<std::size_t>(l)] += moved;
  }
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  now_ = now;
  Flow flow;
  flow.route.assign(route.begin(), route.end());
  std::sort(flow.route.begin(), flow.route.end());
  flow.route.erase(std::unique(flow.route.begin(), flow.route.end()), flow.route.end());
  for (LinkId l : flow.route) {
    ALPASIM_CHECK(l >= 0 && l < num_links()) << "unknown link id " << l;
  }
  flow.remaining = bytes;
  flows_.push_back(std::move(flow));
  FlowId id = static_cast<FlowId>(flows_.size() - 1);
  active_.push_back(id);  // ids only grow, so active_ stays sorted
  dirty_ = true;
  return id;
}

std::vector<FlowId> LinkModel::advance(Time now) {
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  const double dt = static_cast<double>(now - now_);
  now_ = now;
  std::vector<FlowId> done;
  std::size_t keep = 0;
  for (FlowId f : active_) {
    Flow& flow = flows_[static_cast<std::size_t>(f)];
    double moved = std::min(flow.remaining, flow.rate * dt);
    flow.remaining -= moved;
    for (LinkId l : flow.route) carried_[static_cast<std::size_t>(l)] += moved;
    // 1e-3 bytes absorbs the rounding of rate × dt; real messages are whole bytes.
    if (flow.remaining < 1e-3) {
      for (LinkId l : flow.route) carried_[static_cast<std::size_t>(l)] += flow.remaining;
      flow.remaining = 0;
      done.push_back(f);
      dirty_ = true;
    } else {
      active_[keep++] = f;
    }
  }
  active_.resize(keep);
  return done;
}

void LinkModel::update_rates() {
  if (!dirty_) return;
  dirty_ = false;
  const std::size_t num_flows = active_.size();
  if (unfrozen_count_.size() != capacity_.size()) {
    unfrozen_count_.assign(capacity_.size(), 0);
    remaining_capacity_.assign(capacity_.size(), 0.0);
    link_begin_.assign(capacity_.size(), 0);
  }
  // The links in use, and per link the active flows on it (CSR in link_flows_).
  used_links_.clear();
  for (FlowId f : active_) {
    for (LinkId l : flows_[static_cast<std::size_t>(f)].route) {
      if (unfrozen_count_[static_cast<std::size_t>(l)]++ == 0) used_links_.push_back(l);
    }
  }
  std::sort(used_links_.begin(), used_links_.end());  // determinism of the scan order
  std::int32_t pos = 0;
  for (LinkId l : used_links_) {
    link_begin_[static_cast<std::size_t>(l)] = pos;
    pos += unfrozen_count_[static_cast<std::size_t>(l)];
    remaining_capacity_[static_cast<std::size_t>(l)] = capacity_[static_cast<std::size_t>(l)];
  }
  link_flows_.resize(static_cast<std::size_t>(pos));
  for (std::size_t i = 0; i < num_flows; ++i) {
    for (LinkId l : flows_[static_cast<std::size_t>(active_[i])].route) {
      link_flows_[static_cast<std::size_t>(link_begin_[static_cast<std::size_t>(l)]++)] =
          static_cast<std::int32_t>(i);
    }
  }
  for (LinkId l : used_links_) {  // undo the ++ of the fill: back to the start offsets
    link_begin_[static_cast<std::size_t>(l)] -= unfrozen_count_[static_cast<std::size_t>(l)];
  }
  link_count_.assign(used_links_.size(), 0);
  for (std::size_t k = 0; k < used_links_.size(); ++k) {
    link_count_[k] = unfrozen_count_[static_cast<std::size_t>(used_links_[k])];
  }
  frozen_.assign(num_flows, 0);
  std::size_t left = num_flows;
  while (left > 0) {
    // The bottleneck share: the smallest remaining capacity / unfrozen flows.
    double best_share = std::numeric_limits<double>::infinity();
    for (LinkId l : used_links_) {
      const auto n = unfrozen_count_[static_cast<std::size_t>(l)];
      if (n == 0) continue;
      best_share = std::min(best_share, remaining_capacity_[static_cast<std::size_t>(l)] / n);
    }
    ALPASIM_CHECK(std::isfinite(best_share)) << "unfrozen flows but no link carries them";
    // Freeze the flows of every link at that share in one round: freezing one such
    // link's flows leaves another's share unchanged ((r - k·s)/(n - k) = s when r/n = s),
    // so symmetric networks settle in one round instead of one per link. The relative
    // 1e-12 absorbs rounding in the subtractions.
    const double threshold = best_share * (1 + 1e-12);
    const double share = std::max(best_share, 0.0);
    for (std::size_t u = 0; u < used_links_.size(); ++u) {
      const auto lu = static_cast<std::size_t>(used_links_[u]);
      if (unfrozen_count_[lu] == 0 || remaining_capacity_[lu] / unfrozen_count_[lu] > threshold) continue;
      const std::int32_t b = link_begin_[lu];
      const std::int32_t e = b + link_count_[u];
      for (std::int32_t k = b; k < e; ++k) {
        const auto i = static_cast<std::size_t>(link_flows_[static_cast<std::size_t>(k)]);
        if (frozen_[i]) continue;
        frozen_[i] = 1;
        --left;
        Flow& flow = flows_[static_cast<std::size_t>(active_[i])];
        flow.rate = share;
        for (LinkId m : flow.route) {
          remaining_capacity_[static_cast<std::size_t>(m)] -= share;
          --unfrozen_count_[static_cast<std::size_t>(m)];
        }
      }
    }
  }
}

Time LinkModel::next_completion() const {
  ALPASIM_CHECK(!dirty_) << "next_completion() needs update_rates() first";
  Time best = -1;
  for (FlowId f : active_) {
    const Flow& flow = flows_[static_cast<std::size_t>(f)];
    Time t;
    if (flow.remaining < 1e-3) {
      t = now_;
    } else {
      ALPASIM_CHECK(flow.rate > 0) << "an active flow got no bandwidth";
      // Rounded up so that at the event time the flow has really moved all its bytes.
      t = now_ + std::max<Time>(1, static_cast<Time>(std::ceil(flow.remaining / flow.rate - 1e-9)));
    }
    if (best < 0 || t < best) best = t;
  }
  return best;
}

}  // namespace alpasim::sim
