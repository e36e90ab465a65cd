#include "core/status.h"

#include <doctest/doctest.h>

namespace alpasim::core {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  ALPASIM_ASSIGN_OR_RETURN(int h, half(x));
  ALPASIM_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  ALPASIM_RETURN_IF_ERROR_CTX(half(x), "checking " + std::to_string(x));
  return Status();
}

TEST_CASE("Result carries a value or an error and the macros propagate it") {
  CHECK(quarter(8).value() == 2);
  Result<int> r = quarter(6);  // 6 -> 3 -> odd
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK(r.status().message() == "odd: 3");
  CHECK(check_even(5).to_string() == "INVALID_ARGUMENT: checking 5: odd: 5");
  CHECK(check_even(4).ok());
}

TEST_CASE("Status names its code") {
  CHECK(Status().to_string() == "OK");
  CHECK(resource_exhausted("short by 1.30 GiB").to_string() ==
        "RESOURCE_EXHAUSTED: short by 1.30 GiB");
  CHECK(status_code_name(StatusCode::kUnavailable) == "UNAVAILABLE");
}

}  // namespace
}  // namespace alpasim::core
