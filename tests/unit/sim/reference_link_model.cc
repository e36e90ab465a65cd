// FROZEN COPY, for tests only: sim/link_model.{h,cc} as of commit ed65663, before the
// allocation-free rewrite. link_model_equivalence_test.cc drives it and the current
// sim::LinkModel with the same random starts/finishes and asserts bit-identical rates,
// completion times, finished flows, carried bytes and rate series. Do not edit.

#include "tests/unit/sim/reference_link_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace alpasim::sim::reference {

// A flow with less than this many bytes left is complete: it absorbs the rounding of
// rate × time (real messages are whole bytes).
constexpr double kDoneBytes = 1e-3;

LinkId LinkModel::add_link(std::string name, core::BytesPerSecond capacity) {
  ALPASIM_CHECK(capacity.value() > 0 && std::isfinite(capacity.value()))
      << "link '" << name << "' needs a positive finite capacity, got " << capacity.value();
  names_.push_back(std::move(name));
  capacity_.push_back(capacity.value() * 1e-9);
  carried_.push_back(0.0);
  link_flows_.emplace_back();
  rate_series_.emplace_back();
  link_dirty_.push_back(0);
  link_seen_.push_back(0);
  remaining_capacity_.push_back(0.0);
  unfrozen_count_.push_back(0);
  return static_cast<LinkId>(capacity_.size() - 1);
}

void LinkModel::mark_dirty(LinkId l) {
  if (!link_dirty_[static_cast<std::size_t>(l)]) {
    link_dirty_[static_cast<std::size_t>(l)] = 1;
    dirty_links_.push_back(l);
  }
}

FlowId LinkModel::start_flow(Time now, std::span<const LinkId> route, double bytes) {
  ALPASIM_CHECK(!route.empty()) << "a flow needs at least one link";
  ALPASIM_CHECK(bytes >= 0) << "negative flow size " << bytes;
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  now_ = now;
  Flow flow;
  flow.route.assign(route.begin(), route.end());
  std::sort(flow.route.begin(), flow.route.end());
  flow.route.erase(std::unique(flow.route.begin(), flow.route.end()), flow.route.end());
  for (LinkId l : flow.route) ALPASIM_CHECK(l >= 0 && l < num_links()) << "unknown link id " << l;
  flow.bytes = bytes;
  flow.remaining = bytes;
  flow.updated = now;
  flows_.push_back(std::move(flow));
  flow_seen_.push_back(0);
  frozen_.push_back(0);
  const FlowId id = static_cast<FlowId>(flows_.size() - 1);
  for (LinkId l : flows_.back().route) {
    link_flows_[static_cast<std::size_t>(l)].push_back(id);
    mark_dirty(l);
  }
  ++num_active_;
  return id;
}

std::vector<FlowId> LinkModel::advance(Time now) {
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  now_ = now;
  std::vector<FlowId> done;
  while (!heap_.empty() && heap_.front().time <= now) {
    const Completion c = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
    Flow& flow = flows_[static_cast<std::size_t>(c.flow)];
    if (!flow.active || flow.version != c.version) continue;  // superseded
    flow.active = false;
    flow.remaining = 0;
    --num_active_;
    for (LinkId l : flow.route) {
      carried_[static_cast<std::size_t>(l)] += flow.bytes;
      auto& on_link = link_flows_[static_cast<std::size_t>(l)];
      auto it = std::find(on_link.begin(), on_link.end(), c.flow);
      ALPASIM_DCHECK(it != on_link.end());
      *it = on_link.back();
      on_link.pop_back();
      mark_dirty(l);
    }
    done.push_back(c.flow);
  }
  std::sort(done.begin(), done.end());
  return done;
}

void LinkModel::update_rates() {
  if (dirty_links_.empty()) return;
  // The connected component(s) around the dirty links: flows that share a link with an
  // affected flow may change rate; nothing outside can.
  ++epoch_;
  comp_links_.clear();
  comp_flows_.clear();
  for (LinkId l : dirty_links_) {
    link_dirty_[static_cast<std::size_t>(l)] = 0;
    if (link_seen_[static_cast<std::size_t>(l)] != epoch_) {
      link_seen_[static_cast<std::size_t>(l)] = epoch_;
      comp_links_.push_back(l);
    }
  }
  dirty_links_.clear();
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {  // grows while scanning (BFS)
    for (FlowId f : link_flows_[static_cast<std::size_t>(comp_links_[i])]) {
      if (flow_seen_[static_cast<std::size_t>(f)] == epoch_) continue;
      flow_seen_[static_cast<std::size_t>(f)] = epoch_;
      comp_flows_.push_back(f);
      for (LinkId m : flows_[static_cast<std::size_t>(f)].route) {
        if (link_seen_[static_cast<std::size_t>(m)] != epoch_) {
          link_seen_[static_cast<std::size_t>(m)] = epoch_;
          comp_links_.push_back(m);
        }
      }
    }
  }
  // Sorted so the floating-point order of the filling never depends on the scan order.
  std::sort(comp_links_.begin(), comp_links_.end());
  std::sort(comp_flows_.begin(), comp_flows_.end());
  for (LinkId l : comp_links_) {
    remaining_capacity_[static_cast<std::size_t>(l)] = capacity_[static_cast<std::size_t>(l)];
    unfrozen_count_[static_cast<std::size_t>(l)] =
        static_cast<std::int32_t>(link_flows_[static_cast<std::size_t>(l)].size());
  }
  // Bring the affected flows' progress up to now at their old rates.
  std::vector<double> old_rate;
  old_rate.reserve(comp_flows_.size());
  for (FlowId f : comp_flows_) {
    Flow& flow = flows_[static_cast<std::size_t>(f)];
    flow.remaining = std::max(0.0, flow.remaining - flow.rate * static_cast<double>(now_ - flow.updated));
    flow.updated = now_;
    old_rate.push_back(flow.rate);
    frozen_[static_cast<std::size_t>(f)] = 0;
  }
  std::size_t left = comp_flows_.size();
  while (left > 0) {
    double best_share = std::numeric_limits<double>::infinity();
    for (LinkId l : comp_links_) {
      const auto n = unfrozen_count_[static_cast<std::size_t>(l)];
      if (n > 0) best_share = std::min(best_share, remaining_capacity_[static_cast<std::size_t>(l)] / n);
    }
    ALPASIM_CHECK(std::isfinite(best_share)) << "unfrozen flows but no link carries them";
    // Freeze the flows of every link at that share in one round: freezing one such
    // link's flows leaves another's share unchanged ((r - k·s)/(n - k) = s when r/n = s),
    // so symmetric networks settle in one round instead of one per link. The relative
    // 1e-12 absorbs rounding in the subtractions.
    const double threshold = best_share * (1 + 1e-12);
    const double share = std::max(best_share, 0.0);
    for (LinkId l : comp_links_) {
      const auto lu = static_cast<std::size_t>(l);
      if (unfrozen_count_[lu] == 0 || remaining_capacity_[lu] / unfrozen_count_[lu] > threshold) continue;
      for (FlowId f : link_flows_[lu]) {
        if (frozen_[static_cast<std::size_t>(f)]) continue;
        frozen_[static_cast<std::size_t>(f)] = 1;
        --left;
        Flow& flow = flows_[static_cast<std::size_t>(f)];
        flow.rate = share;
        for (LinkId m : flow.route) {
          remaining_capacity_[static_cast<std::size_t>(m)] -= share;
          --unfrozen_count_[static_cast<std::size_t>(m)];
        }
      }
    }
  }
  // Record what each link of the component now carries.
  for (LinkId l : comp_links_) {
    double total = 0;
    for (FlowId f : link_flows_[static_cast<std::size_t>(l)]) total += flows_[static_cast<std::size_t>(f)].rate;
    total *= 1e9;
    auto& series = rate_series_[static_cast<std::size_t>(l)];
    if (!series.empty() && series.back().time == now_) {
      series.back().bytes_per_s = total;
    } else if (series.empty() || series.back().bytes_per_s != total) {
      series.push_back(LinkRateSample{now_, total});
    }
  }
  // New completion times for the flows whose rate changed (or that have none yet).
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
    const FlowId f = comp_flows_[i];
    Flow& flow = flows_[static_cast<std::size_t>(f)];
    if (flow.version != 0 && flow.rate == old_rate[i]) continue;  // its entry still holds
    Time t = now_;
    if (flow.remaining >= kDoneBytes) {
      ALPASIM_CHECK(flow.rate > 0) << "an active flow got no bandwidth";
      t = now_ + std::max<Time>(1, static_cast<Time>(std::ceil(flow.remaining / flow.rate - 1e-9)));
    }
    ++flow.version;
    heap_.push_back(Completion{t, f, flow.version});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
}

void LinkModel::drop_stale() {
  while (!heap_.empty()) {
    const Completion& c = heap_.front();
    const Flow& flow = flows_[static_cast<std::size_t>(c.flow)];
    if (flow.active && flow.version == c.version) return;
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
  }
}

Time LinkModel::next_completion() {
  ALPASIM_CHECK(dirty_links_.empty()) << "next_completion() needs update_rates() first";
  drop_stale();
  return heap_.empty() ? -1 : heap_.front().time;
}

}  // namespace alpasim::sim::reference
