#include "core/text.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace alpasim::core {
namespace {

TEST_CASE("edit distance is Levenshtein") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("global_batch", "global_batch_size") == 5);
  CHECK(edit_distance("abc", "") == 3);
}

TEST_CASE("closest match suggests likely typos only") {
  std::vector<std::string> keys = {"global_batch_size", "dtype", "optimizer", "microbatches"};
  CHECK(closest_match("global_batch", keys) == "global_batch_size");  // prefix
  CHECK(closest_match("dtpye", keys) == "dtype");                    // swap = 2 edits
  CHECK(closest_match("optimiser", keys) == "optimizer");
  CHECK_FALSE(closest_match("learning_rate", keys).has_value());
}

TEST_CASE("formatting is fixed and locale-independent") {
  CHECK(quoted_list(std::vector<std::string>{"a"}) == "\"a\"");
  CHECK(quoted_list(std::vector<std::string>{"a", "b"}) == "\"a\" or \"b\"");
  CHECK(quoted_list(std::vector<std::string>{"a", "b", "c"}) == "\"a\", \"b\", or \"c\"");
  CHECK(format_fixed(-0.0001, 2) == "0.00");
  CHECK(format_fixed(2.345, 1) == "2.3");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(std::int64_t{3} << 29) == "1.50 GiB");
  CHECK(format_count(6.6537e9) == "6.65 B");
}

TEST_CASE("control characters are escaped for one-line messages") {
  CHECK(escape_control_chars("a\nb\tc\rd\x01" "e\x7f") == "a\\nb\\tc\\rd\\u0001e\\u007f");
  CHECK(escape_control_chars("plain \"text\" / ok") == "plain \"text\" / ok");
}

TEST_CASE("thousands separators group the integer part only") {
  CHECK(format_grouped(720311.4, 0) == "720,311");
  CHECK(format_grouped(1234567.891, 2) == "1,234,567.89");
  CHECK(format_grouped(-1234.5, 1) == "-1,234.5");
  CHECK(format_grouped(999, 0) == "999");
  CHECK(format_grouped(1000, 0) == "1,000");
  CHECK(format_grouped(0.5, 2) == "0.50");
}

}  // namespace
}  // namespace alpasim::core
