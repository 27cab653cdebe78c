// Expected failures are values: a Status (ok or a message) and Result<T> (a value or a
// Status). Exceptions are kept for broken invariants and fatal setup.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kevolve {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  // REQUIRES: !ok()
  const std::string& message() const { return *message_; }
  // A one-line form for logs: "ok" or the message.
  std::string ToString() const { return ok() ? std::string("ok") : *message_; }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}      // NOLINT: REQUIRES !status.ok()

  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T* operator->() const { return &std::get<T>(v_); }
  T* operator->() { return &std::get<T>(v_); }
  const T& operator*() const { return std::get<T>(v_); }
  T& operator*() { return std::get<T>(v_); }

  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  // REQUIRES: !ok()
  const std::string& error() const { return std::get<Status>(v_).message(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kevolve
