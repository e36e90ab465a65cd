#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "sim/time.h"

namespace alpasim::sim {

/// One pending event: plain data, no callback, so the queue allocates nothing per event
/// once its storage has grown (the engine dispatches on `kind`).
struct Event {
  Time time = 0;           ///< when it fires, ns
  std::uint64_t seq = 0;   ///< insertion number: breaks ties in time, first pushed fires first
  std::uint32_t id = 0;    ///< what it is about (a task id, ...), meaning set by `kind`
  std::uint32_t kind = 0;  ///< the engine's event type
  std::uint64_t version = 0;  ///< lets the owner ignore an event it has superseded
};

/// A min-heap of events ordered by (time, seq). Ties in time fire in the order they were
/// pushed, so the simulation never depends on pointer values or heap internals.
/// push and pop are O(log n).
class EventQueue {
 public:
  /// Adds an event at `time` (ns) and returns the sequence number it was given.
  std::uint64_t push(Time time, std::uint32_t kind, std::uint32_t id, std::uint64_t version = 0) {
    Event e{time, next_seq_++, id, kind, version};
    heap_.push_back(e);
    sift_up(heap_.size() - 1);
    return e.seq;
  }

  /// True when no event is pending.
  bool empty() const { return heap_.empty(); }
  /// Number of pending events.
  std::size_t size() const { return heap_.size(); }

  /// The earliest event. Precondition: !empty().
  const Event& top() const {
    ALPASIM_DCHECK(!heap_.empty());
    return heap_.front();
  }

  /// Removes and returns the earliest event. Precondition: !empty().
  Event pop() {
    ALPASIM_CHECK(!heap_.empty()) << "pop() of an empty event queue";
    Event out = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    return out;
  }

  /// Pre-allocates room for `n` pending events.
  void reserve(std::size_t n) { heap_.reserve(n); }

  /// Number of events pushed so far (the next sequence number).
  std::uint64_t pushed() const { return next_seq_; }

 private:
  static bool before(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  void sift_up(std::size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      std::size_t parent = (i - 1) / 2;
      if (!before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  void sift_down(std::size_t i) {
    const std::size_t n = heap_.size();
    Event e = heap_[i];
    while (true) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
      if (!before(heap_[child], e)) break;
      heap_[i] = heap_[child];
      i = child;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace alpasim::sim
