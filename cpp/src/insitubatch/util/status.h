#pragma once

// Folder util/: what every layer stands on -- Status and Result, aligned buffers, the thread
// pool, cancellation, the fork guard, clocks, and environment, text, base64 and JSON-depth
// helpers. Depends on nothing.
//
// Status and Result<T>: the core's only error channel (no exceptions cross the core).
// The code set is closed; the Python binding maps each code to one exception class.

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace insitubatch {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kIoError,
  kDataLoss,  // corrupt or truncated stored data
  kResourceExhausted,
  kCancelled,
  kUnimplemented,
  kFailedPrecondition,
  kLocked,  // another process holds a lock (a cache directory's writer lock)
};

std::string_view StatusCodeName(StatusCode code);

// Typed detail a layer above the core attaches to an error and the core carries along
// unread (the Python binding's handle on the exception a chunk transform raised, so the
// caller gets that exception back as itself rather than its text).
class StatusPayload {
 public:
  virtual ~StatusPayload() = default;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Extra detail for StoreError: an HTTP status or errno (0 = none).
  int detail() const { return detail_; }
  Status& set_detail(int detail) {
    detail_ = detail;
    return *this;
  }

  // The payload attached where the error arose (null = none); copies and WithContext keep it.
  const std::shared_ptr<const StatusPayload>& payload() const { return payload_; }
  Status& set_payload(std::shared_ptr<const StatusPayload> payload) {
    payload_ = std::move(payload);
    return *this;
  }

  // Prefixes `context` ("what failed") unless the message already names it, so an
  // annotation added at each layer boundary is never repeated.
  Status WithContext(std::string_view context) const;

  // "DataLoss: <message>"
  std::string ToString() const;

  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int detail_ = 0;
  std::shared_ptr<const StatusPayload> payload_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status IoError(std::string message);
Status DataLoss(std::string message);
Status ResourceExhausted(std::string message);
Status Cancelled(std::string message);
Status Unimplemented(std::string message);
Status FailedPrecondition(std::string message);
Status Locked(std::string message);

// A failed system call: "`message`: <the C library's text for err>", ResourceExhausted
// when the disk or quota is full (ENOSPC, EDQUOT: something the user can free, with
// `when_full` appended to say whose disk), else IoError; `err` is kept as the detail.
Status ErrnoError(const std::string& message, int err, std::string_view when_full = {});

}  // namespace insitubatch

#define INSITU_CONCAT_INNER_(a, b) a##b
#define INSITU_CONCAT_(a, b) INSITU_CONCAT_INNER_(a, b)

#define INSITU_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::insitubatch::Status insitu_status_ = (expr);   \
    if (!insitu_status_.ok()) return insitu_status_; \
  } while (false)

#define INSITU_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#define INSITU_ASSIGN_OR_RETURN(lhs, expr) \
  INSITU_ASSIGN_OR_RETURN_IMPL_(INSITU_CONCAT_(insitu_result_, __LINE__), lhs, expr)
