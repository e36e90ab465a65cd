#pragma once

// Overflow-checked integer arithmetic for sizes computed from user input (element counts,
// bytes, FLOPs, GPU counts). Plain int64 products of user-given sizes wrap silently, and a
// product that wraps to 0 becomes a division by zero (SIGFPE) later; these return nullopt
// instead, so the caller can report the input that is too large.

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace alpasim::core {

/// a + b, or nullopt when it does not fit in int64.
constexpr std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a · b, or nullopt when it does not fit in int64.
constexpr std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// The product of `factors` (1 for none), or nullopt when any partial product overflows.
constexpr std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t r = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) return std::nullopt;
  }
  return r;
}

/// The product of `factors` when it is at most `limit` (limit >= 0), else nullopt. Factors
/// must be non-negative.
constexpr std::optional<std::int64_t> product_at_most(std::initializer_list<std::int64_t> factors,
                                                      std::int64_t limit) {
  auto p = checked_product(factors);
  if (!p || *p > limit) return std::nullopt;
  return p;
}

}  // namespace alpasim::core
