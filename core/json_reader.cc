#include "core/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

// A SAX handler that accepts everything and records where the parser gave up (the byte
// just past the offending token, 1-based, as Json::parse_error::byte counts it).
struct ErrorPosition {
  std::optional<std::size_t> byte;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t position, const std::string& token, const Json::exception&) {
    // Point at the token's first character.
    byte = position >= token.size() ? position - token.size() + 1 : position;
    return false;
  }
};

std::string pointer_for_display(const std::string& pointer) {
  return pointer.empty() ? "/" : escape_control_chars(pointer);
}

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
  } catch (const Json::exception& e) {
    // nlohmann throws out_of_range.406 ("number overflow parsing '1e400'") without a
    // position; a second, SAX-only pass over the text recovers it.
    ErrorPosition where;
    Json::sax_parse(text.begin(), text.end(), &where);
    const std::string at = where.byte ? ":" + text_position(text, *where.byte) : "";
    return invalid_argument(doc.file + at + ": invalid JSON: " + parse_error_detail(e.what()));
  }
  if (const auto& dup = finder.duplicate()) {
    return invalid_argument(doc.file + ": " + pointer_for_display(dup->first) +
                            ": duplicate key \"" + escape_control_chars(dup->second) + "\"");
  }
  return doc;
}

Result<JsonDocument> read_json_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is rejected below.
  const int fd = ::open(name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return (err == ENOENT ? not_found : invalid_argument)(name + ": cannot open file: " +
                                                          std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return invalid_argument(name + ": cannot open file: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return invalid_argument(name + ": cannot open file: is a directory");
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)                        ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                    : "not a regular file";
    return invalid_argument(name + ": cannot read file: expected a regular file, got " + kind);
  }
  const auto too_large = [&] {
    return invalid_argument(name + ": cannot read file: larger than the limit of " +
                            std::to_string(kMaxJsonFileBytes) + " bytes");
  };
  if (st.st_size > kMaxJsonFileBytes) return too_large();
  // Read at most one byte past the cap: a file can grow after fstat, or report size 0.
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return invalid_argument(name + ": cannot read file: " + std::strerror(errno));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<std::size_t>(n));
    if (static_cast<std::int64_t>(contents.size()) > kMaxJsonFileBytes) return too_large();
  }
  return parse_json_text(contents, name);
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

Result<std::int64_t> JsonValue::as_count(std::int64_t max) const {
  return as_int(1, max, "a positive integer at most " + std::to_string(max));
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

Result<std::int64_t> JsonObject::get_count(std::string_view key, std::int64_t max) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v,
                           required(key, "a positive integer at most " + std::to_string(max)));
  return v.as_count(max);
}

Result<std::int64_t> JsonObject::get_count_or(std::string_view key, std::int64_t max,
                                              std::int64_t fallback) {
  if (auto v = optional(key)) return v->as_count(max);
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
