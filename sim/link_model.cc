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
  const std::size_t num = capacity_.size();
  remaining_capacity_.assign(capacity_.begin(), capacity_.end());
  unfrozen_count_.assign(num, 0);
  frozen_.assign(active_.size(), 0);
  for (FlowId f : active_) {
    for (LinkId l : flows_[static_cast<std::size_t>(f)].route) ++unfrozen_count_[static_cast<std::size_t>(l)];
  }
  std::size_t left = active_.size();
  while (left > 0) {
    // The bottleneck: smallest fair share; ties go to the lowest link id (determinism).
    double best_share = std::numeric_limits<double>::infinity();
    std::size_t best = num;
    for (std::size_t l = 0; l < num; ++l) {
      if (unfrozen_count_[l] == 0) continue;
      double share = remaining_capacity_[l] / unfrozen_count_[l];
      if (share < best_share) {
        best_share = share;
        best = l;
      }
    }
    ALPASIM_CHECK(best < num) << "unfrozen flows but no link carries them";
    best_share = std::max(best_share, 0.0);
    for (std::size_t i = 0; i < active_.size(); ++i) {
      if (frozen_[i]) continue;
      Flow& flow = flows_[static_cast<std::size_t>(active_[i])];
      if (!std::binary_search(flow.route.begin(), flow.route.end(), static_cast<LinkId>(best))) continue;
      flow.rate = best_share;
      frozen_[i] = 1;
      --left;
      for (LinkId l : flow.route) {
        remaining_capacity_[static_cast<std::size_t>(l)] -= best_share;
        --unfrozen_count_[static_cast<std::size_t>(l)];
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
