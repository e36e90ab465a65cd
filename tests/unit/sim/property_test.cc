// Randomised invariant checks (seeded, so deterministic): the engine's timelines respect
// dependencies and stream order, and the link model's rates are max-min fair.
#include <algorithm>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "sim/engine.h"
#include "sim/link_model.h"

namespace alpasim::sim {
namespace {

TEST_CASE("random graphs: dependencies, FIFO order, memory and link bytes are respected") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 30; ++round) {
    TaskGraph g;
    const int devices = 1 + static_cast<int>(rng() % 4);
    std::vector<StreamId> streams;
    std::vector<LinkId> links;
    for (int d = 0; d < devices; ++d) {
      DeviceId dev = g.add_device("d" + std::to_string(d));
      streams.push_back(g.add_stream(dev, "compute", StreamKind::kCompute));
      streams.push_back(g.add_stream(dev, "comm", StreamKind::kCommunication));
      links.push_back(g.add_link("l" + std::to_string(d), core::gbyte_per_s(1 + static_cast<double>(rng() % 4))));
    }
    const int n = 20 + static_cast<int>(rng() % 60);
    std::int64_t transfer_bytes = 0;
    for (int i = 0; i < n; ++i) {
      const StreamId s = streams[rng() % streams.size()];
      TaskId t;
      if (g.streams()[static_cast<std::size_t>(s)].kind == StreamKind::kCommunication && rng() % 2 == 0) {
        std::vector<LinkId> route{links[rng() % links.size()], links[rng() % links.size()]};
        const std::int64_t bytes = 1 + static_cast<std::int64_t>(rng() % 100'000);
        t = g.add_transfer(s, route, core::Bytes(bytes), static_cast<Time>(rng() % 50), TaskLabel{});
        route.erase(std::unique(route.begin(), route.end()), route.end());
        transfer_bytes += bytes * static_cast<std::int64_t>(route.size());
      } else {
        t = g.add_compute(s, static_cast<Time>(rng() % 1000), TaskLabel{});
      }
      // Dependencies only on earlier tasks: the graph is acyclic, and since every stream
      // lists its tasks in creation order, no stream order contradicts them.
      for (int k = 0; k < 2 && t > 0; ++k) {
        if (rng() % 2 == 0) g.add_dependency(static_cast<TaskId>(rng() % static_cast<std::uint64_t>(t)), t);
      }
      g.add_memory(t, 0, core::Bytes(100), MemoryPoint::kAtStart);
      g.add_memory(t, 0, core::Bytes(-100), MemoryPoint::kAtEnd);
    }
    auto r = simulate(g);
    REQUIRE(r.ok());
    for (auto [before, after] : g.dependencies()) {
      CHECK(r->start[static_cast<std::size_t>(after)] >= r->end[static_cast<std::size_t>(before)]);
    }
    for (const auto& stream : g.streams()) {
      for (std::size_t i = 1; i < stream.tasks.size(); ++i) {
        CHECK(r->start[static_cast<std::size_t>(stream.tasks[i])] >=
              r->end[static_cast<std::size_t>(stream.tasks[i - 1])]);
      }
    }
    for (std::size_t t = 0; t < g.tasks().size(); ++t) {
      const auto& task = g.tasks()[t];
      CHECK(r->end[t] >= r->start[t] + task.duration);  // a transfer is at least its latency
      if (!g.is_transfer(static_cast<TaskId>(t))) CHECK(r->end[t] == r->start[t] + task.duration);
    }
    // Every allocation is freed; at most one task per stream holds memory at a time.
    for (std::size_t d = 0; d < r->memory.size(); ++d) {
      CHECK(r->memory[d].series.back().bytes == 0);
      CHECK(r->memory[d].peak_bytes <= 200);
    }
    double carried = 0;
    for (double b : r->link_bytes) carried += b;
    CHECK(carried == doctest::Approx(static_cast<double>(transfer_bytes)));
  }
}

TEST_CASE("random flows: max-min fair rates") {
  // Max-min fairness: no link is over capacity, and every flow crosses a saturated link
  // on which no other flow has a higher rate (its bottleneck).
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; ++round) {
    LinkModel m;
    const int num_links = 1 + static_cast<int>(rng() % 6);
    for (int l = 0; l < num_links; ++l) {
      // Equal capacities in some rounds exercise the equal-share rounds of the filling.
      const double gb = round % 2 == 0 ? 1.0 : 1.0 + static_cast<double>(rng() % 8);
      m.add_link("l", core::gbyte_per_s(gb));
    }
    const int num_flows = 1 + static_cast<int>(rng() % 10);
    std::vector<std::vector<LinkId>> routes;
    for (int f = 0; f < num_flows; ++f) {
      std::vector<LinkId> route;
      const int len = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < len; ++k) route.push_back(static_cast<LinkId>(rng() % static_cast<std::uint64_t>(num_links)));
      std::sort(route.begin(), route.end());
      route.erase(std::unique(route.begin(), route.end()), route.end());
      m.start_flow(0, route, 1e6);
      routes.push_back(route);
    }
    m.update_rates();
    std::vector<double> load(static_cast<std::size_t>(num_links), 0.0);
    for (int f = 0; f < num_flows; ++f) {
      for (LinkId l : routes[static_cast<std::size_t>(f)]) load[static_cast<std::size_t>(l)] += m.rate(f).value();
    }
    for (int l = 0; l < num_links; ++l) {
      CHECK(load[static_cast<std::size_t>(l)] <= m.capacity(l).value() * (1 + 1e-9));
    }
    for (int f = 0; f < num_flows; ++f) {
      CHECK(m.rate(f).value() > 0);
      bool has_bottleneck = false;
      for (LinkId l : routes[static_cast<std::size_t>(f)]) {
        const bool saturated = load[static_cast<std::size_t>(l)] >= m.capacity(l).value() * (1 - 1e-9);
        bool largest = true;
        for (int g = 0; g < num_flows; ++g) {
          const auto& rg = routes[static_cast<std::size_t>(g)];
          if (std::find(rg.begin(), rg.end(), l) != rg.end() &&
              m.rate(g).value() > m.rate(f).value() * (1 + 1e-9)) {
            largest = false;
          }
        }
        has_bottleneck = has_bottleneck || (saturated && largest);
      }
      CHECK(has_bottleneck);
    }
  }
}

}  // namespace
}  // namespace alpasim::sim
