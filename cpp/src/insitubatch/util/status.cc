#include "insitubatch/util/status.h"

#include <cerrno>

#include "insitubatch/util/text.h"

namespace insitubatch {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kLocked:
      return "Locked";
    default:  // out-of-range values: the fallback below
      break;
  }
  return "Unknown";
}

Status Status::WithContext(std::string_view context) const {
  if (ok() || context.empty()) return *this;
  if (message_.find(context) != std::string::npos) return *this;
  Status out(code_, std::string(context) + ": " + message_);
  out.detail_ = detail_;
  out.payload_ = payload_;
  return out;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
Status Locked(std::string m) { return {StatusCode::kLocked, std::move(m)}; }

Status ErrnoError(const std::string& message, int err, std::string_view when_full) {
  std::string text = message + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT) {
    if (!when_full.empty()) text += " (" + std::string(when_full) + ")";
    return ResourceExhausted(std::move(text)).set_detail(err);
  }
  return IoError(std::move(text)).set_detail(err);
}

}  // namespace insitubatch
