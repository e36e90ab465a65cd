#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace alpasim::core {

using Json = nlohmann::json;

/// A parsed JSON file. `file` is the name errors use (the path as the user gave it).
struct JsonDocument {
  std::string file;
  Json root;
};

/// The largest JSON file read_json_file accepts: 256 MiB (plans and graphs of the largest
/// models are a few MiB); bigger files, and anything that is not a regular file
/// (directories, FIFOs, devices), are refused before anything large is read.
inline constexpr std::int64_t kMaxJsonFileBytes = std::int64_t{1} << 28;

/// Reads and parses `path`. Errors (all kInvalidArgument or kNotFound):
///   `x.json: cannot open file: No such file or directory`
///   `x.json: cannot open file: is a directory`
///   `x.json: cannot read file: expected a regular file, got a FIFO`
///   `x.json:3:17: invalid JSON: syntax error while parsing object - unexpected '}'; ...`
///   `x.json: /training: duplicate key "dtype"`
Result<JsonDocument> read_json_file(const std::filesystem::path& path);

/// Parses `text` as if it were the contents of a file called `file`.
Result<JsonDocument> parse_json_text(std::string_view text, std::string file);

/// Escapes a key for use as a JSON pointer token (RFC 6901: "~" -> "~0", "/" -> "~1").
std::string json_pointer_token(std::string_view key);

/// "-1", "2.5", "the string \"8\"", "true", "null", "an object", "an array": how error
/// messages describe a value that was found.
std::string describe_json_value(const Json& value);

class JsonObject;

/// A strict, read-only view of one JSON value: where it sits (file and JSON pointer) and
/// typed accessors that fail with `file: /pointer: expected <what>, got <found>`.
/// The document must outlive the view.
class JsonValue {
 public:
  JsonValue(const Json& value, std::string file, std::string pointer)
      : value_(&value), file_(std::make_shared<const std::string>(std::move(file))),
        pointer_(std::move(pointer)) {}

  /// The root of a document.
  static JsonValue root(const JsonDocument& doc) { return JsonValue(doc.root, doc.file, ""); }

  const Json& raw() const { return *value_; }
  const std::string& file() const { return *file_; }
  /// The JSON pointer, "" for the root.
  const std::string& pointer() const { return pointer_; }
  /// "file: /pointer" (the root prints as "file: /").
  std::string location() const;

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  bool is_number() const { return value_->is_number(); }
  bool is_integer() const { return value_->is_number_integer(); }
  bool is_bool() const { return value_->is_boolean(); }

  /// An integer in [min, max]; `what` describes it for the message ("a positive integer").
  Result<std::int64_t> as_int(std::int64_t min, std::int64_t max, std::string_view what) const;
  Result<std::int64_t> as_positive_int() const;      ///< [1, 2^62]
  Result<std::int64_t> as_non_negative_int() const;  ///< [0, 2^62]
  /// An integer in [1, max]: "expected a positive integer at most <max>, got ...".
  Result<std::int64_t> as_count(std::int64_t max) const;
  /// A finite number in [min, max] (integers are accepted).
  Result<double> as_number(double min, double max, std::string_view what) const;
  Result<double> as_positive_number() const;  ///< (0, inf), finite
  Result<std::string> as_string() const;
  /// A string that is one of `choices`, with a "did you mean" suggestion otherwise.
  Result<std::string> as_enum(std::span<const std::string> choices) const;
  Result<bool> as_bool() const;
  Result<JsonObject> as_object() const;
  Result<std::vector<JsonValue>> as_array() const;

  /// `file: /pointer: expected <expected>, got <describe_json_value(raw())>`.
  Status type_error(std::string_view expected) const;
  /// `file: /pointer: <message>`.
  Status error(std::string_view message) const;

  /// The view of a child value (no checks: the caller has the child).
  JsonValue child(std::string_view key, const Json& value) const;
  JsonValue child(std::size_t index, const Json& value) const;

 private:
  const Json* value_;
  std::shared_ptr<const std::string> file_;  // shared: views are copied often
  std::string pointer_;
};

/// A JSON object read strictly: every key must be asked for, and finish() fails on the
/// first key nobody asked for, suggesting the closest known key.
class JsonObject {
 public:
  explicit JsonObject(JsonValue value) : value_(std::move(value)) {}

  const JsonValue& value() const { return value_; }

  /// True when `key` is present. Declares `key` as known.
  bool has(std::string_view key);
  /// The value of a required key, or `file: /p/key: missing required key (expected <what>)`.
  Result<JsonValue> required(std::string_view key, std::string_view what);
  /// The value of an optional key; nullopt when absent. Declares `key` as known.
  std::optional<JsonValue> optional(std::string_view key);

  // Typed shortcuts. `*_or` return `fallback` only when the key is absent; a present value
  // of the wrong type or range is always an error.
  Result<std::int64_t> get_positive_int(std::string_view key);
  Result<std::int64_t> get_positive_int_or(std::string_view key, std::int64_t fallback);
  Result<std::int64_t> get_non_negative_int_or(std::string_view key, std::int64_t fallback);
  /// A required / optional integer in [1, max] (JsonValue::as_count).
  Result<std::int64_t> get_count(std::string_view key, std::int64_t max);
  Result<std::int64_t> get_count_or(std::string_view key, std::int64_t max, std::int64_t fallback);
  Result<std::int64_t> get_int_in(std::string_view key, std::int64_t min, std::int64_t max,
                                  std::string_view what);
  Result<double> get_positive_number(std::string_view key);
  Result<double> get_positive_number_or(std::string_view key, double fallback);
  Result<double> get_number_in_or(std::string_view key, double min, double max,
                                  std::string_view what, double fallback);
  Result<std::string> get_string(std::string_view key);
  Result<std::string> get_string_or(std::string_view key, std::string fallback);
  Result<std::string> get_enum(std::string_view key, std::span<const std::string> choices);
  Result<std::string> get_enum_or(std::string_view key, std::span<const std::string> choices,
                                  std::string fallback);
  Result<bool> get_bool_or(std::string_view key, bool fallback);
  Result<JsonObject> get_object(std::string_view key);

  /// Fails on the first key (in key order) that was never asked for:
  /// `file: /training/global_batch: unknown key; did you mean "global_batch_size"?`
  Status finish() const;

  /// Keys asked for so far, in order.
  std::vector<std::string> known_keys() const { return {known_.begin(), known_.end()}; }

 private:
  JsonValue value_;
  std::set<std::string, std::less<>> known_;
};

/// Writes `value` with 2-space indentation and a trailing newline. Keys are sorted
/// (nlohmann's std::map), so equal values give byte-identical text.
std::string dump_json(const Json& value);

}  // namespace alpasim::core
