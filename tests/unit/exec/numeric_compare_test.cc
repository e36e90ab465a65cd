// tests/support/numeric_compare.h, the comparison every numerics test uses (CPU and GPU):
// within tolerance it passes, beyond it fails, and any NaN or ±Inf in either operand fails
// whatever the tolerance. The comparison it replaced (max of |got − ref| by std::max, and
// `std::abs(got − ref) > tol` on the loss) passed every non-finite case below.
#include "tests/support/numeric_compare.h"

#include <doctest/doctest.h>

#include <limits>
#include <vector>

namespace alpasim::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// The GPU tests' tolerance; the CPU tests use {1e-4, 1e-6}.
constexpr Tolerance kTol{1e-3, 1e-5};

TEST_CASE("numeric_compare: finite tensors pass within the tolerance and fail beyond it") {
  const std::vector<float> ref{1.0f, -2.0f, 0.5f};
  const Comparison same = compare_values(ref, ref, kTol);
  CHECK_MESSAGE(same.ok, same.message);
  CHECK(same.elements == 3);
  CHECK(same.max_abs_diff == 0);
  CHECK(same.max_abs_ref == 2.0);
  // Allowed: 1e-3 · 2 + 1e-5 = 2.01e-3.
  const Comparison near = compare_values(std::vector<float>{1.0f, -2.0f, 0.502f}, ref, kTol);
  CHECK_MESSAGE(near.ok, near.message);
  const Comparison far = compare_values(std::vector<float>{1.0f, -2.0f, 0.503f}, ref, kTol);
  CHECK_FALSE(far.ok);
  CHECK(far.worst_index == 2);
  CHECK(far.max_abs_diff == doctest::Approx(0.003).epsilon(1e-4));
  CHECK(far.message.find("at element 2") != std::string::npos);
  // A size mismatch fails (a missing or truncated gradient).
  CHECK_FALSE(compare_values(std::vector<float>{1.0f, -2.0f}, ref, kTol).ok);
  CHECK_FALSE(compare_values(std::vector<float>{}, ref, kTol).ok);
}

TEST_CASE("numeric_compare: NaN in either tensor fails, whatever the tolerance") {
  const std::vector<float> ref{1.0f, -2.0f, 0.5f};
  const std::vector<float> all_nan{kNaN, kNaN, kNaN};
  const Tolerance huge{1e30, 1e30};
  const Comparison got_nan = compare_values(all_nan, ref, huge);
  CHECK_FALSE(got_nan.ok);
  CHECK(got_nan.nonfinite_got == 3);
  CHECK(got_nan.nonfinite_ref == 0);
  CHECK(got_nan.message.find("element 0: got nan") != std::string::npos);
  const Comparison one_nan = compare_values(std::vector<float>{1.0f, kNaN, 0.5f}, ref, kTol);
  CHECK_FALSE(one_nan.ok);
  CHECK(one_nan.message.find("element 1") != std::string::npos);
  const Comparison ref_nan = compare_values(ref, std::vector<float>{1.0f, -2.0f, kNaN}, huge);
  CHECK_FALSE(ref_nan.ok);
  CHECK(ref_nan.nonfinite_ref == 1);
  CHECK_FALSE(compare_values(all_nan, all_nan, huge).ok);
}

TEST_CASE("numeric_compare: +Inf or -Inf in either tensor fails, also when both agree") {
  const std::vector<float> ref{1.0f, -2.0f, 0.5f};
  const Tolerance huge{1e30, 1e30};
  CHECK_FALSE(compare_values(std::vector<float>{1.0f, kInf, 0.5f}, ref, huge).ok);
  CHECK_FALSE(compare_values(std::vector<float>{-kInf, -2.0f, 0.5f}, ref, huge).ok);
  // An Inf in the reference once made max|ref|, and so the relative bound, infinite.
  const Comparison ref_inf = compare_values(std::vector<float>{7.0f, 8.0f, 9.0f}, std::vector<float>{1.0f, kInf, 0.5f}, kTol);
  CHECK_FALSE(ref_inf.ok);
  CHECK(ref_inf.nonfinite_ref == 1);
  const std::vector<float> infs{kInf, -kInf, 0.0f};
  CHECK_FALSE(compare_values(infs, infs, huge).ok);
  // Double-precision operands (the finite-difference checks) take the same path.
  CHECK_FALSE(compare_values(std::vector<double>{1.0, std::numeric_limits<double>::infinity()},
                             std::vector<double>{1.0, 2.0}, huge).ok);
}

TEST_CASE("numeric_compare: a NaN or Inf loss fails the scalar comparison") {
  CHECK(compare_scalar(2.0, 2.001, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(2.0, 2.01, {1e-3, 0}).ok);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_FALSE(compare_scalar(nan, 2.0, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(2.0, nan, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(nan, nan, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(inf, 2.0, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(inf, inf, {1e-3, 0}).ok);
  CHECK_FALSE(compare_scalar(-inf, 2.0, {1e30, 1e30}).ok);
}

}  // namespace
}  // namespace alpasim::testing
