#include "core/json_reader.h"

#include <doctest/doctest.h>

namespace alpasim::core {
namespace {

JsonDocument parse(std::string_view text) { return parse_json_text(text, "s.json").value(); }

std::string error_of(std::string_view text) {
  auto r = parse_json_text(text, "s.json");
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

TEST_CASE("parse errors name the file, line and column") {
  CHECK(error_of("{\n  \"a\": 1,\n}") ==
        "s.json:3:1: invalid JSON: syntax error while parsing object key - unexpected '}'; "
        "expected string literal");
  CHECK(error_of("") ==
        "s.json:1:1: invalid JSON: syntax error while parsing value - unexpected end of input; "
        "expected '[', '{', or a literal");
}

TEST_CASE("duplicate keys are errors, with the object's pointer") {
  CHECK(error_of(R"({"a": {"b": 1, "b": 2}})") == "s.json: /a: duplicate key \"b\"");
  CHECK(error_of(R"({"x": [1, {"k": 0}, {"k": 1, "k": 2}]})") ==
        "s.json: /x/2: duplicate key \"k\"");
  CHECK(error_of(R"({"k": 1, "k": 2})") == "s.json: /: duplicate key \"k\"");
}

// Found by fuzz_scenario: a key holding a newline ("a\nb" is valid JSON) made a two-line
// error; control characters are now escaped in the pointer and the duplicate key.
TEST_CASE("keys with control characters keep every error on one line") {
  CHECK(error_of("{\"a\\nb\": 1, \"a\\nb\": 2}") == "s.json: /: duplicate key \"a\\nb\"");
  JsonDocument doc = parse("{\"x\\ty\\u0001\": {}}");
  JsonObject root = JsonValue::root(doc).as_object().value();
  auto inner = root.get_object("x\ty\x01");
  REQUIRE(inner.ok());
  JsonObject o = inner.value();
  CHECK(o.get_positive_int("missing").status().message().rfind(
            "s.json: /x\\ty\\u0001/missing: missing required key", 0) == 0);
}

TEST_CASE("missing files say why") {
  auto r = read_json_file("/nonexistent/alpa.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK(r.status().message() == "/nonexistent/alpa.json: cannot open file: No such file or directory");
}

TEST_CASE("typed accessors reject wrong types and ranges with the exact text") {
  JsonDocument doc = parse(R"({"n": -1, "f": 2.5, "s": "8", "b": true, "o": {}, "a": [], "big": 18446744073709551615})");
  JsonObject obj = JsonValue::root(doc).as_object().value();
  CHECK(obj.get_positive_int("n").status().message() ==
        "s.json: /n: expected a positive integer, got -1");
  CHECK(obj.get_positive_int("f").status().message() ==
        "s.json: /f: expected a positive integer, got 2.5");
  CHECK(obj.get_positive_int("s").status().message() ==
        "s.json: /s: expected a positive integer, got the string \"8\"");
  CHECK(obj.get_positive_int("o").status().message() ==
        "s.json: /o: expected a positive integer, got an object");
  CHECK(obj.get_positive_int("big").status().message() ==
        "s.json: /big: expected a positive integer, got 18446744073709551615");
  CHECK(obj.get_string("b").status().message() == "s.json: /b: expected a string, got true");
  CHECK(obj.get_object("a").status().message() == "s.json: /a: expected an object, got an array");
  CHECK(obj.get_positive_number("n").status().message() ==
        "s.json: /n: expected a positive number, got -1");
  CHECK(obj.get_positive_number("f").value() == 2.5);
  CHECK(obj.get_positive_int("missing").status().message() ==
        "s.json: /missing: missing required key (expected a positive integer)");
}

TEST_CASE("optional keys default only when absent") {
  JsonDocument doc = parse(R"({"x": 0})");
  JsonObject obj = JsonValue::root(doc).as_object().value();
  CHECK(obj.get_positive_int_or("y", 7).value() == 7);
  // Present but invalid is an error, never the fallback.
  CHECK(obj.get_positive_int_or("x", 7).status().message() ==
        "s.json: /x: expected a positive integer, got 0");
}

TEST_CASE("enums list the choices and suggest the closest") {
  JsonDocument doc = parse(R"({"mode": "alpha", "other": "zzz"})");
  JsonObject obj = JsonValue::root(doc).as_object().value();
  std::vector<std::string> modes = {"alpa", "fixed"};
  CHECK(obj.get_enum("mode", modes).status().message() ==
        "s.json: /mode: expected one of \"alpa\" or \"fixed\", got \"alpha\"; did you mean \"alpa\"?");
  CHECK(obj.get_enum("other", modes).status().message() ==
        "s.json: /other: expected one of \"alpa\" or \"fixed\", got \"zzz\"");
}

TEST_CASE("unknown keys fail finish() with a suggestion") {
  JsonDocument doc = parse(R"({"training": {"global_batch": 8, "dtype": "fp16"}})");
  JsonObject root = JsonValue::root(doc).as_object().value();
  JsonObject training = root.get_object("training").value();
  CHECK(training.get_positive_int_or("global_batch_size", 1).value() == 1);
  CHECK(training.get_string("dtype").value() == "fp16");
  CHECK(training.finish().message() ==
        "s.json: /training/global_batch: unknown key; did you mean \"global_batch_size\"?");
  CHECK(root.finish().ok());

  JsonDocument doc2 = parse(R"({"zzz": 1})");
  JsonObject obj2 = JsonValue::root(doc2).as_object().value();
  (void)obj2.has("alpha");
  (void)obj2.has("beta");
  CHECK(obj2.finish().message() == "s.json: /zzz: unknown key; expected one of \"alpha\" or \"beta\"");
}

TEST_CASE("pointers escape ~ and /") {
  CHECK(json_pointer_token("a/b~c") == "a~1b~0c");
  JsonDocument doc = parse(R"({"a/b": -2})");
  JsonObject obj = JsonValue::root(doc).as_object().value();
  CHECK(obj.get_positive_int("a/b").status().message() ==
        "s.json: /a~1b: expected a positive integer, got -2");
}

TEST_CASE("arrays give indexed pointers") {
  JsonDocument doc = parse(R"({"ids": [0, 1, "x"]})");
  JsonObject obj = JsonValue::root(doc).as_object().value();
  auto items = obj.required("ids", "an array").value().as_array().value();
  REQUIRE(items.size() == 3);
  CHECK(items[2].as_non_negative_int().status().message() ==
        "s.json: /ids/2: expected a non-negative integer, got the string \"x\"");
}

TEST_CASE("dump_json is sorted and stable") {
  JsonDocument doc = parse(R"({"b": 1, "a": [true, null]})");
  CHECK(dump_json(doc.root) == "{\n  \"a\": [\n    true,\n    null\n  ],\n  \"b\": 1\n}\n");
}

}  // namespace
}  // namespace alpasim::core
