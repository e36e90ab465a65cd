#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace alpasim::exec::cpu {

/// Bytes held now and the most ever held, updated from any thread (each device's thread
/// allocates its own buffers; nothing else in a run touches a device's counter, but the
/// counter does not rely on that).
class MemoryCounter {
 public:
  void add(std::int64_t bytes) noexcept {
    const std::int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::int64_t seen = peak_.load(std::memory_order_relaxed);
    while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void sub(std::int64_t bytes) noexcept { current_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::int64_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  std::int64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> current_{0};
  std::atomic<std::int64_t> peak_{0};
};

/// A standard allocator that reports every allocation and deallocation to counters:
/// `host` gets the bytes really requested from the heap (n * sizeof(T)); `plan`, when set,
/// gets the same n elements counted at the plan dtype's element size
/// (`plan_bytes / plan_elements` of the buffer the vector holds, e.g. 2 for fp16 stored as
/// fp32), so the measured mark can be compared with the static count and the simulator,
/// which account at the plan dtype. Copies (and rebinds) report to the same counters.
template <class T>
class CountingAllocator {
 public:
  using value_type = T;

  CountingAllocator() = default;
  explicit CountingAllocator(MemoryCounter* host, MemoryCounter* plan = nullptr, std::int64_t plan_bytes = 0,
                             std::int64_t plan_elements = 0) noexcept
      : host_(host), plan_(plan), plan_bytes_(plan_bytes), plan_elements_(plan_elements) {}
  template <class U>
  CountingAllocator(const CountingAllocator<U>& o) noexcept  // NOLINT(google-explicit-constructor): rebind
      : host_(o.host_), plan_(o.plan_), plan_bytes_(o.plan_bytes_), plan_elements_(o.plan_elements_) {}

  T* allocate(std::size_t n) {
    T* p = std::allocator<T>().allocate(n);
    count(n, +1);
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    std::allocator<T>().deallocate(p, n);
    count(n, -1);
  }

  template <class U>
  bool operator==(const CountingAllocator<U>& o) const noexcept {
    return host_ == o.host_ && plan_ == o.plan_ && plan_bytes_ == o.plan_bytes_ &&
           plan_elements_ == o.plan_elements_;
  }

 private:
  template <class U>
  friend class CountingAllocator;

  void count(std::size_t n, int sign) noexcept {
    const auto elems = static_cast<std::int64_t>(n);
    if (host_) {
      const std::int64_t b = elems * static_cast<std::int64_t>(sizeof(T));
      sign > 0 ? host_->add(b) : host_->sub(b);
    }
    if (plan_ && plan_elements_ > 0) {
      // Exact when n is the buffer's element count (the CPU backend allocates exactly that).
      const std::int64_t b = elems * plan_bytes_ / plan_elements_;
      sign > 0 ? plan_->add(b) : plan_->sub(b);
    }
  }

  MemoryCounter* host_ = nullptr;
  MemoryCounter* plan_ = nullptr;
  std::int64_t plan_bytes_ = 0;     ///< bytes of the buffer at the plan dtype
  std::int64_t plan_elements_ = 0;  ///< its elements (0: no plan-dtype counting)
};

/// fp32 storage whose heap use is counted.
using CountedFloats = std::vector<float, CountingAllocator<float>>;

}  // namespace alpasim::exec::cpu
