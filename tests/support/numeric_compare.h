#pragma once
// The one comparison of computed numbers with a reference, for every numerics test (CPU
// doctest suites and the plain-main GPU tests alike, so no doctest here).
//
// Why a helper: the obvious `std::abs(got - ref) > tol` is false for NaN, and
// `std::max(diff, NaN)` returns `diff`, so such code passes an all-NaN result; an Inf in the
// reference makes `max|ref|`, and with it a relative tolerance, infinite. Here any NaN or
// ±Inf in either operand fails the comparison, whatever the tolerance, and so does a size
// mismatch.
//
// Criterion (per tensor): max_i |got_i − ref_i| <= rel · max_i |ref_i| + abs. A scalar is a
// tensor of one element: |got − ref| <= rel · |ref| + abs.

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace alpasim::testing {

/// Allowed difference: `rel` times the reference's largest magnitude, plus `abs` (both >= 0;
/// dimensionless for a relative part, the values' unit for the absolute part).
struct Tolerance {
  double rel = 0;
  double abs = 0;
};

struct Comparison {
  bool ok = false;
  std::size_t elements = 0;      ///< elements compared (0 on a size mismatch)
  double max_abs_diff = 0;       ///< largest |got − ref| over the pairs where both are finite
  double max_abs_ref = 0;        ///< largest finite |ref|
  std::size_t worst_index = 0;   ///< where max_abs_diff occurs
  std::size_t nonfinite_got = 0; ///< NaN or ±Inf elements of got
  std::size_t nonfinite_ref = 0; ///< ... of ref
  double allowed = 0;            ///< rel · max_abs_ref + abs
  /// Why it failed (first non-finite value, sizes, or the worst element against the bound);
  /// on success the same figures, for a log line.
  std::string message;
  explicit operator bool() const { return ok; }
};

namespace detail {
inline std::string format_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace detail

/// Compares `got` with `ref` element by element (see the criterion above).
template <typename T, typename U>
Comparison compare_values(std::span<const T> got, std::span<const U> ref, Tolerance tol) {
  Comparison c;
  if (got.size() != ref.size()) {
    c.message = "size mismatch: got " + std::to_string(got.size()) + " elements, reference " +
                std::to_string(ref.size());
    return c;
  }
  c.elements = got.size();
  std::string first_nonfinite;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto g = static_cast<double>(got[i]);
    const auto r = static_cast<double>(ref[i]);
    const bool gf = std::isfinite(g), rf = std::isfinite(r);
    c.nonfinite_got += gf ? 0 : 1;
    c.nonfinite_ref += rf ? 0 : 1;
    if (!gf || !rf) {
      if (first_nonfinite.empty()) {
        first_nonfinite = "element " + std::to_string(i) + ": got " + detail::format_g(g) + ", reference " +
                          detail::format_g(r);
      }
      continue;
    }
    if (std::abs(r) > c.max_abs_ref) c.max_abs_ref = std::abs(r);
    if (std::abs(g - r) > c.max_abs_diff) {
      c.max_abs_diff = std::abs(g - r);
      c.worst_index = i;
    }
  }
  c.allowed = tol.rel * c.max_abs_ref + tol.abs;
  if (c.nonfinite_got + c.nonfinite_ref > 0) {
    c.message = "non-finite values (" + std::to_string(c.nonfinite_got) + " in got, " +
                std::to_string(c.nonfinite_ref) + " in reference), first at " + first_nonfinite;
    return c;
  }
  c.ok = c.max_abs_diff <= c.allowed;
  c.message = "max |diff| " + detail::format_g(c.max_abs_diff) + " at element " + std::to_string(c.worst_index) +
              (c.ok ? " <= " : " > ") + "allowed " + detail::format_g(c.allowed) + " (max |ref| " +
              detail::format_g(c.max_abs_ref) + ", " + std::to_string(c.elements) + " elements)";
  return c;
}

template <typename T, typename U>
Comparison compare_values(const std::vector<T>& got, const std::vector<U>& ref, Tolerance tol) {
  return compare_values(std::span<const T>(got), std::span<const U>(ref), tol);
}

/// A scalar (a loss): |got − ref| <= rel · |ref| + abs, and both finite.
inline Comparison compare_scalar(double got, double ref, Tolerance tol) {
  return compare_values(std::span<const double>(&got, 1), std::span<const double>(&ref, 1), tol);
}

}  // namespace alpasim::testing
