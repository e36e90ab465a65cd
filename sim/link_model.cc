#include "sim/link_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace alpasim::sim {

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

void LinkModel::reserve_flows(std::size_t flows, std::size_t route_entries) {
  flows_.reserve(flows);
  flow_seen_.reserve(flows);
  frozen_.reserve(flows);
  routes_.reserve(route_entries);
}

FlowId LinkModel::start_flow(Time now, std::span<const LinkId> route, double bytes) {
  ALPASIM_CHECK(!route.empty()) << "a flow needs at least one link";
  ALPASIM_CHECK(bytes >= 0) << "negative flow size " << bytes;
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  now_ = now;
  Flow flow;
  flow.route_begin = static_cast<std::int32_t>(routes_.size());
  routes_.insert(routes_.end(), route.begin(), route.end());
  const auto first = routes_.begin() + flow.route_begin;
  std::sort(first, routes_.end());
  routes_.erase(std::unique(first, routes_.end()), routes_.end());
  flow.route_end = static_cast<std::int32_t>(routes_.size());
  flow.bytes = bytes;
  flow.remaining = bytes;
  flow.updated = now;
  flows_.push_back(flow);
  flow_seen_.push_back(0);
  frozen_.push_back(0);  // epoch_ starts above 0 at the first update
  const FlowId id = static_cast<FlowId>(flows_.size() - 1);
  for (LinkId l : route_of(flows_.back())) {
    ALPASIM_CHECK(l >= 0 && l < num_links()) << "unknown link id " << l;
    link_flows_[static_cast<std::size_t>(l)].push_back(id);
    mark_dirty(l);
  }
  ++num_active_;
  return id;
}

std::vector<FlowId> LinkModel::advance(Time now) {
  std::vector<FlowId> done;
  advance(now, done);
  return done;
}

void LinkModel::advance(Time now, std::vector<FlowId>& done) {
  ALPASIM_CHECK(now >= now_) << "time went backwards: " << now << " < " << now_;
  now_ = now;
  done.clear();
  while (!heap_.empty() && heap_.front().time <= now) {
    const Completion c = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
    Flow& flow = flows_[static_cast<std::size_t>(c.flow)];
    if (!flow.active || flow.version != c.version) continue;  // superseded
    flow.active = false;
    flow.remaining = 0;
    --num_active_;
    for (LinkId l : route_of(flow)) {
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
  if (done.size() > 1) std::sort(done.begin(), done.end());
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
      for (LinkId m : route_of(flows_[static_cast<std::size_t>(f)])) {
        if (link_seen_[static_cast<std::size_t>(m)] != epoch_) {
          link_seen_[static_cast<std::size_t>(m)] = epoch_;
          comp_links_.push_back(m);
        }
      }
    }
  }
  // Links sorted so the floating-point order of the filling never depends on the scan
  // order (a dense component is collected by one pass over the link ids instead). The
  // flows need no order: each flow's update below is independent of the others, and the
  // completion heap orders its entries by (time, flow) whatever the push order.
  if (comp_links_.size() * 8 >= capacity_.size()) {
    comp_links_.clear();
    for (std::size_t l = 0; l < capacity_.size(); ++l) {
      if (link_seen_[l] == epoch_) comp_links_.push_back(static_cast<LinkId>(l));
    }
  } else if (comp_links_.size() > 1) {
    std::sort(comp_links_.begin(), comp_links_.end());
  }
  // Raw pointers: the loops below are the hot path of link-heavy simulations, and plain
  // pointers spare the compiler from reloading each vector's data after every store.
  double* const remaining_capacity = remaining_capacity_.data();
  std::int32_t* const unfrozen_count = unfrozen_count_.data();
  std::uint64_t* const frozen = frozen_.data();
  Flow* const flows = flows_.data();
  const LinkId* const routes = routes_.data();
  const double* const capacity = capacity_.data();
  const std::uint64_t epoch = epoch_;
  live_links_.clear();
  for (LinkId l : comp_links_) {
    const auto lu = static_cast<std::size_t>(l);
    remaining_capacity[lu] = capacity[lu];
    unfrozen_count[lu] = static_cast<std::int32_t>(link_flows_[lu].size());
    if (unfrozen_count[lu] > 0) live_links_.push_back(l);
  }
  // Bring the affected flows' progress up to now at their old rates (frozen_ of these
  // flows is below epoch_: marks are only ever set to the epoch of an earlier update).
  old_rate_.resize(comp_flows_.size());
  double* const old_rate = old_rate_.data();
  const Time now = now_;
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
    Flow& flow = flows[comp_flows_[i]];
    flow.remaining = std::max(0.0, flow.remaining - flow.rate * static_cast<double>(now - flow.updated));
    flow.updated = now;
    old_rate[i] = flow.rate;
  }
  std::size_t left = comp_flows_.size();
  while (left > 0) {
    // live_links_ holds, in link order, the component's links that still carry unfrozen
    // flows (links reach zero only by freezing and never come back), so skipping the
    // others changes neither the minimum nor the order of the freezing pass.
    double best_share = std::numeric_limits<double>::infinity();
    for (LinkId l : live_links_) {
      const auto lu = static_cast<std::size_t>(l);
      best_share = std::min(best_share, remaining_capacity[lu] / unfrozen_count[lu]);
    }
    ALPASIM_CHECK(std::isfinite(best_share)) << "unfrozen flows but no link carries them";
    // Freeze the flows of every link at that share in one round: freezing one such
    // link's flows leaves another's share unchanged ((r - k·s)/(n - k) = s when r/n = s),
    // so symmetric networks settle in one round instead of one per link. The relative
    // 1e-12 absorbs rounding in the subtractions.
    const double threshold = best_share * (1 + 1e-12);
    const double share = std::max(best_share, 0.0);
    for (LinkId l : live_links_) {
      const auto lu = static_cast<std::size_t>(l);
      if (unfrozen_count[lu] != 0 && !(remaining_capacity[lu] / unfrozen_count[lu] > threshold)) {
        for (FlowId f : link_flows_[lu]) {
          if (frozen[f] == epoch) continue;
          frozen[f] = epoch;
          --left;
          Flow& flow = flows[f];
          flow.rate = share;
          for (std::int32_t r = flow.route_begin; r < flow.route_end; ++r) {
            const auto m = static_cast<std::size_t>(routes[r]);
            remaining_capacity[m] -= share;
            --unfrozen_count[m];
          }
        }
      }
    }
    std::erase_if(live_links_, [unfrozen_count](LinkId l) { return unfrozen_count[static_cast<std::size_t>(l)] == 0; });
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
    if (flow.version != 0 && flow.rate == old_rate_[i]) continue;  // its entry still holds
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

}  // namespace alpasim::sim
