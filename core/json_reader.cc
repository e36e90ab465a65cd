#include "core/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/text.h"

namespace alpasim::core {
namespace {

constexpr std::int64_t kMaxCount = std::int64_t{1} << 62;

// Tracks the path while nlohmann's callback parser walks the text, to find duplicate
// keys (nlohmann keeps the last one silently, which would hide a user's mistake).
class DuplicateKeyFinder {
 public:
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start: frames_.push_back(Frame{true, {}, {}, 0}); break;
      case E::array_start: frames_.push_back(Frame{false, {}, {}, 0}); break;
      case E::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && !duplicate_) {
          std::string pointer;
          for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
            pointer += '/';
            pointer += frames_[i].is_object ? json_pointer_token(frames_[i].key)
                                            : std::to_string(frames_[i].index);
          }
          duplicate_ = std::make_pair(pointer, top.key);
        }
        break;
      }
      case E::value:
        if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
        break;
    }
    return true;
  }
  // (pointer of the object, key) of the first duplicate key.
  const std::optional<std::pair<std::string, std::string>>& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string key;    // current key (objects)
    std::size_t index;  // index of the element being read (arrays)
  };
  std::vector<Frame> frames_;
  std::optional<std::pair<std::string, std::string>> duplicate_;
};

// "x.json:3:17" from the byte offset nlohmann reports (1-based line and column).
std::string text_position(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 3, column 17:
// syntax error ..."; keep only the part after the position, which we print ourselves.
std::string parse_error_detail(const std::string& what) {
  std::size_t column = what.find("column ");
  if (column != std::string::npos) {
    std::size_t colon = what.find(": ", column);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  std::size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

std::string pointer_for_display(const std::string& pointer) { return pointer.empty() ? "/" : pointer; }

}  // namespace

Result<JsonDocument> parse_json_text(std::string_view text, std::string file) {
  DuplicateKeyFinder finder;
  JsonDocument doc{std::move(file), Json()};
  try {
    doc.root = Json::parse(
        text.begin(), text.end(),
        [&finder](int /*depth*/, Json::parse_event_t event, Json& parsed) {
          return finder.on_event(event, parsed);
        });
  } catch (const Json::parse_error& e) {
    return invalid_argument(doc.file + ":" + text_position(text, e.byte) +
                            ": invalid JSON: " + parse_error_detail(e.what()));
  }
  if (const auto& dup = finder.duplicate()) {
    return invalid_argument(doc.file + ": " + pointer_for_display(dup->first) +
                            ": duplicate key \"" + dup->second + "\"");
  }
  return doc;
}

Result<JsonDocument> read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string reason = err != 0 ? std::strerror(err) : "unreadable";
    if (std::filesystem::is_directory(path)) reason = "is a directory";
    return (err == ENOENT ? not_found : invalid_argument)(path.string() +
                                                          ": cannot open file: " + reason);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return parse_json_text(contents.str(), path.string());
}

std::string json_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string describe_json_value(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "the string " + value.dump();
    case Json::value_t::null: return "null";
    default: return value.dump();
  }
}

std::string JsonValue::location() const { return file() + ": " + pointer_for_display(pointer_); }

Status JsonValue::error(std::string_view message) const {
  return invalid_argument(location() + ": " + std::string(message));
}

Status JsonValue::type_error(std::string_view expected) const {
  return error("expected " + std::string(expected) + ", got " + describe_json_value(*value_));
}

JsonValue JsonValue::child(std::string_view key, const Json& value) const {
  JsonValue v = *this;
  v.value_ = &value;
  v.pointer_ = pointer_ + "/" + json_pointer_token(key);
  return v;
}

JsonValue JsonValue::child(std::size_t index, const Json& value) const {
  JsonValue v = *this;
  v.value_ = &value;
  v.pointer_ = pointer_ + "/" + std::to_string(index);
  return v;
}

Result<std::int64_t> JsonValue::as_int(std::int64_t min, std::int64_t max,
                                       std::string_view what) const {
  if (value_->is_number_unsigned()) {
    auto u = value_->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max)) return type_error(what);
    if (static_cast<std::int64_t>(u) < min) return type_error(what);
    return static_cast<std::int64_t>(u);
  }
  if (!value_->is_number_integer()) return type_error(what);
  auto v = value_->get<std::int64_t>();
  if (v < min || v > max) return type_error(what);
  return v;
}

Result<std::int64_t> JsonValue::as_positive_int() const {
  return as_int(1, kMaxCount, "a positive integer");
}

Result<std::int64_t> JsonValue::as_non_negative_int() const {
  return as_int(0, kMaxCount, "a non-negative integer");
}

Result<double> JsonValue::as_number(double min, double max, std::string_view what) const {
  if (!value_->is_number()) return type_error(what);
  double v = value_->get<double>();
  if (!std::isfinite(v) || v < min || v > max) return type_error(what);
  return v;
}

Result<double> JsonValue::as_positive_number() const {
  if (!value_->is_number()) return type_error("a positive number");
  double v = value_->get<double>();
  if (!std::isfinite(v) || v <= 0) return type_error("a positive number");
  return v;
}

Result<std::string> JsonValue::as_string() const {
  if (!value_->is_string()) return type_error("a string");
  return value_->get<std::string>();
}

Result<std::string> JsonValue::as_enum(std::span<const std::string> choices) const {
  if (!value_->is_string()) return type_error("one of " + quoted_list(choices));
  auto s = value_->get<std::string>();
  for (const auto& c : choices) {
    if (c == s) return s;
  }
  std::string message = "expected one of " + quoted_list(choices) + ", got " + value_->dump();
  if (auto guess = closest_match(s, choices)) message += "; did you mean \"" + *guess + "\"?";
  return error(message);
}

Result<bool> JsonValue::as_bool() const {
  if (!value_->is_boolean()) return type_error("true or false");
  return value_->get<bool>();
}

Result<JsonObject> JsonValue::as_object() const {
  if (!value_->is_object()) return type_error("an object");
  return JsonObject(*this);
}

Result<std::vector<JsonValue>> JsonValue::as_array() const {
  if (!value_->is_array()) return type_error("an array");
  std::vector<JsonValue> items;
  items.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) items.push_back(child(i, (*value_)[i]));
  return items;
}

bool JsonObject::has(std::string_view key) {
  known_.emplace(key);
  return value_.raw().contains(key);
}

std::optional<JsonValue> JsonObject::optional(std::string_view key) {
  known_.emplace(key);
  auto it = value_.raw().find(key);
  if (it == value_.raw().end()) return std::nullopt;
  return value_.child(key, *it);
}

Result<JsonValue> JsonObject::required(std::string_view key, std::string_view what) {
  if (auto v = optional(key)) return *v;
  JsonValue missing = value_.child(key, value_.raw());
  return missing.error("missing required key (expected " + std::string(what) + ")");
}

Result<std::int64_t> JsonObject::get_positive_int(std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, "a positive integer"));
  return v.as_positive_int();
}

Result<std::int64_t> JsonObject::get_positive_int_or(std::string_view key, std::int64_t fallback) {
  if (auto v = optional(key)) return v->as_positive_int();
  return fallback;
}

Result<std::int64_t> JsonObject::get_non_negative_int_or(std::string_view key,
                                                         std::int64_t fallback) {
  if (auto v = optional(key)) return v->as_non_negative_int();
  return fallback;
}

Result<std::int64_t> JsonObject::get_int_in(std::string_view key, std::int64_t min,
                                            std::int64_t max, std::string_view what) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, what));
  return v.as_int(min, max, what);
}

Result<double> JsonObject::get_positive_number(std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, "a positive number"));
  return v.as_positive_number();
}

Result<double> JsonObject::get_positive_number_or(std::string_view key, double fallback) {
  if (auto v = optional(key)) return v->as_positive_number();
  return fallback;
}

Result<double> JsonObject::get_number_in_or(std::string_view key, double min, double max,
                                            std::string_view what, double fallback) {
  if (auto v = optional(key)) return v->as_number(min, max, what);
  return fallback;
}

Result<std::string> JsonObject::get_string(std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, "a string"));
  return v.as_string();
}

Result<std::string> JsonObject::get_string_or(std::string_view key, std::string fallback) {
  if (auto v = optional(key)) return v->as_string();
  return fallback;
}

Result<std::string> JsonObject::get_enum(std::string_view key,
                                         std::span<const std::string> choices) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, "one of " + quoted_list(choices)));
  return v.as_enum(choices);
}

Result<std::string> JsonObject::get_enum_or(std::string_view key,
                                            std::span<const std::string> choices,
                                            std::string fallback) {
  if (auto v = optional(key)) return v->as_enum(choices);
  return fallback;
}

Result<bool> JsonObject::get_bool_or(std::string_view key, bool fallback) {
  if (auto v = optional(key)) return v->as_bool();
  return fallback;
}

Result<JsonObject> JsonObject::get_object(std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, required(key, "an object"));
  return v.as_object();
}

Status JsonObject::finish() const {
  for (const auto& [key, child] : value_.raw().items()) {
    if (known_.contains(key)) continue;
    JsonValue unknown = value_.child(key, child);
    std::vector<std::string> known(known_.begin(), known_.end());
    if (auto guess = closest_match(key, known)) {
      return unknown.error("unknown key; did you mean \"" + *guess + "\"?");
    }
    if (known.empty()) return unknown.error("unknown key; this object takes no keys");
    return unknown.error("unknown key; expected one of " + quoted_list(known));
  }
  return Status();
}

std::string dump_json(const Json& value) { return value.dump(2) + "\n"; }

}  // namespace alpasim::core
