#include "sim/event_queue.h"

#include <vector>

#include <doctest/doctest.h>

namespace alpasim::sim {
namespace {

TEST_CASE("events pop by time, ties in insertion order") {
  EventQueue q;
  q.push(5, 0, 1);
  q.push(3, 0, 2);
  q.push(5, 0, 3);
  q.push(3, 0, 4);
  q.push(0, 0, 5);
  std::vector<std::uint32_t> order;
  std::vector<Time> times;
  while (!q.empty()) {
    Event e = q.pop();
    order.push_back(e.id);
    times.push_back(e.time);
  }
  // Time first, then sequence: (0,#4) (3,#1) (3,#3) (5,#0) (5,#2).
  CHECK(order == std::vector<std::uint32_t>{5, 2, 4, 1, 3});
  CHECK(times == std::vector<Time>{0, 3, 3, 5, 5});
  CHECK(q.pushed() == 5);
}

TEST_CASE("many equal-time events keep FIFO order through heap reshuffles") {
  EventQueue q;
  for (std::uint32_t i = 0; i < 1000; ++i) q.push(static_cast<Time>(i % 7), 0, i);
  Time last_time = -1;
  std::uint64_t last_seq = 0;
  while (!q.empty()) {
    Event e = q.pop();
    if (e.time == last_time) CHECK(e.seq > last_seq);
    CHECK(e.time >= last_time);
    last_time = e.time;
    last_seq = e.seq;
  }
}

}  // namespace
}  // namespace alpasim::sim
