// Status / StatusOr: recoverable errors (I/O, bad model file, bad request, out of KV).
// Broken invariants use UF_CHECK (check.h) instead.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/check.h"

namespace uf {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user or request
  kNotFound,            // missing file, key, tensor, model
  kOutOfRange,          // context length exceeded, index past end
  kResourceExhausted,   // out of KV blocks, queue full, quota
  kFailedPrecondition,  // state does not allow the operation
  kUnimplemented,       // valid but unsupported (e.g. a tensor type we do not run)
  kDataLoss,            // corrupt or truncated file
  kUnavailable,         // try again later
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;
  // Returns a copy with "context: " prepended to the message.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : value_(status) {  // NOLINT: implicit like absl
    UF_CHECK(!status.ok()) << "StatusOr constructed from an OK status without a value";
  }
  StatusOr(Status&& status) : value_(std::move(status)) {  // NOLINT
    UF_CHECK(!std::get<Status>(value_).ok()) << "StatusOr constructed from OK status";
  }
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, T>>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }

  const T& value() const& {
    UF_CHECK(ok()) << status().ToString();
    return std::get<T>(value_);
  }
  T& value() & {
    UF_CHECK(ok()) << status().ToString();
    return std::get<T>(value_);
  }
  T&& value() && {
    UF_CHECK(ok()) << status().ToString();
    return std::get<T>(std::move(value_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> value_;
};

}  // namespace uf

#define UF_STATUS_CONCAT_INNER_(a, b) a##b
#define UF_STATUS_CONCAT_(a, b) UF_STATUS_CONCAT_INNER_(a, b)

#define UF_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::uf::Status uf_status_ = (expr);          \
    if (!uf_status_.ok()) return uf_status_;   \
  } while (0)

#define UF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// UF_ASSIGN_OR_RETURN(auto x, Foo()); or UF_ASSIGN_OR_RETURN(x, Foo());
#define UF_ASSIGN_OR_RETURN(lhs, expr) \
  UF_ASSIGN_OR_RETURN_IMPL_(UF_STATUS_CONCAT_(uf_statusor_, __LINE__), lhs, expr)
