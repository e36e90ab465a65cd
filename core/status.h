#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace alpasim::core {

/// Canonical error codes (the Abseil canon, trimmed to what alpa-sim needs).
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     ///< bad input: a file, a JSON value, a command-line flag
  kNotFound,            ///< a missing file or profile entry
  kFailedPrecondition,  ///< valid input that does not apply here (e.g. a plan for another cluster)
  kResourceExhausted,   ///< does not fit (memory), with the shortfall in the message
  kUnavailable,         ///< no GPU, or built without CUDA
  kUnimplemented,       ///< a feature alpa-sim does not have (yet)
  kInternal,            ///< a bug that could be reported instead of aborting
};

/// Returns "INVALID_ARGUMENT" etc.
std::string_view status_code_name(StatusCode code);

/// The one recoverable-error channel of alpa-sim: a code and a message. A user-facing
/// message names where (file, JSON path) and what (expected, found), e.g.
/// `scenarios/x.json: /cluster/nodes: expected a positive integer, got -1`.
class [[nodiscard]] Status {
 public:
  /// OK.
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
    ALPASIM_CHECK(code != StatusCode::kOk) << "an error Status needs a non-OK code";
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// Returns this error with "`context`: " in front of the message (a hop of the chain).
  Status with_context(std::string_view context) const;

  /// "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status failed_precondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status resource_exhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status unimplemented(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

/// A value of type T or an error Status (C++20 has no std::expected).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    ALPASIM_CHECK(!std::get<Status>(data_).ok()) << "a Result holding a Status must hold an error";
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  /// The error; OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(data_); }

  const T& value() const& {
    ALPASIM_CHECK(ok()) << "value() of an error Result: " << std::get<Status>(data_).to_string();
    return std::get<T>(data_);
  }
  T& value() & {
    ALPASIM_CHECK(ok()) << "value() of an error Result: " << std::get<Status>(data_).to_string();
    return std::get<T>(data_);
  }
  T&& value() && {
    ALPASIM_CHECK(ok()) << "value() of an error Result: " << std::get<Status>(data_).to_string();
    return std::get<T>(std::move(data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> data_;
};

namespace internal {
inline Status to_status(const Status& s) { return s; }
template <class T>
Status to_status(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace alpasim::core

#define ALPASIM_STATUS_CONCAT_INNER(a, b) a##b
#define ALPASIM_STATUS_CONCAT(a, b) ALPASIM_STATUS_CONCAT_INNER(a, b)

/// Returns the error of `expr` (a Status or Result) from the enclosing function.
#define ALPASIM_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                 \
    ::alpasim::core::Status alpasim_status_ = ::alpasim::core::internal::to_status(expr); \
    if (!alpasim_status_.ok()) return alpasim_status_;                                 \
  } while (false)

/// Like ALPASIM_RETURN_IF_ERROR, adding "`context`: " in front of the message.
#define ALPASIM_RETURN_IF_ERROR_CTX(expr, context)                                     \
  do {                                                                                 \
    ::alpasim::core::Status alpasim_status_ = ::alpasim::core::internal::to_status(expr); \
    if (!alpasim_status_.ok()) return alpasim_status_.with_context(context);           \
  } while (false)

#define ALPASIM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

/// `ALPASIM_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define ALPASIM_ASSIGN_OR_RETURN(lhs, expr) \
  ALPASIM_ASSIGN_OR_RETURN_IMPL(ALPASIM_STATUS_CONCAT(alpasim_result_, __LINE__), lhs, expr)
