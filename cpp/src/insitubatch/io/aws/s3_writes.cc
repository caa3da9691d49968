// S3Store's writes: PutObject (If-None-Match: * for a conditional create), multipart
// uploads above the part size, DeleteObject. Every request goes through the same
// transport (its connection budget and retries) and signer as the reads.

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "insitubatch/io/aws/s3_store.h"
#include "insitubatch/io/http/http_store.h"  // kMaxListBody
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {
namespace {

constexpr uint64_t kMaxParts = 10000;  // S3's most parts per upload

std::string_view Body(const HttpResponse& response) {
  return {reinterpret_cast<const char*>(response.body.data()), response.body.size()};
}

// Sends every request at once (the transport's connection budget paces them) and waits
// for all the replies, in the requests' order.
std::vector<Result<HttpResponse>> SendAll(CurlTransport& transport, std::vector<HttpRequest> requests) {
  std::mutex mutex;
  std::condition_variable cv;
  size_t pending = requests.size();
  std::vector<Result<HttpResponse>> replies;
  replies.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) replies.emplace_back(Cancelled("not sent"));
  for (size_t i = 0; i < requests.size(); ++i) {
    transport.Submit(std::move(requests[i]), [&, i](Result<HttpResponse> reply) {
      std::lock_guard lock(mutex);
      replies[i] = std::move(reply);
      if (--pending == 0) cv.notify_all();
    });
  }
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return pending == 0; });
  return replies;
}

}  // namespace

std::string S3Store::ObjectPath(std::string_view key) const {
  return endpoint_.bucket_path + "/" + PercentEncode(ObjectKey(key), /*keep_slash=*/true);
}

Status S3Store::WriteError(std::string_view verb, std::string_view key, const HttpResponse& response,
                           std::string_view permission) const {
  std::string message =
      std::string(verb) + " " + Describe(key) + ": " + DescribeHttpError(response.status, response.error_body);
  if (response.status == 401 || response.status == 403) message += "; writing needs " + std::string(permission);
  if (response.status == 404 && XmlFirstText(response.error_body, "Code") == "NoSuchBucket") {
    return NotFound(std::string(verb) + " " + Describe(key) + ": bucket " + location_.bucket + " does not exist")
        .set_detail(404);
  }
  return IoError(std::move(message)).set_detail(static_cast<int>(response.status));
}

Result<bool> S3Store::IsOurs(const std::string& key, std::string_view value) {
  INSITU_ASSIGN_OR_RETURN(ReadResult there, Read(key, ByteRange::AllAtMost(value.size())));
  if (!there.found || there.data.size() != value.size()) return false;
  return std::equal(value.begin(), value.end(), reinterpret_cast<const char*>(there.data.data()));
}

Result<bool> S3Store::Write(std::string key, std::string_view value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  if (value.size() > part_bytes_) return WriteMultipart(key, value, mode);
  HttpRequest request = MakeRequest(ObjectPath(key), {}, Describe(key), ByteRange::All());
  request.method = "PUT";
  request.body = std::string(value);
  request.headers.push_back("Content-Type: application/octet-stream");
  if (mode == WriteMode::kIfAbsent) request.headers.push_back("If-None-Match: *");
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status >= 200 && response.status <= 299) return true;
  if (mode == WriteMode::kIfAbsent && (response.status == 412 || response.status == 409)) {
    // A retried conditional PUT is refused when its own first attempt landed: then the
    // object there is ours, byte for byte.
    if (response.retry.retries > 0) return IsOurs(key, value);
    return false;
  }
  return WriteError("writing", key, response, "s3:PutObject permission");
}

Status S3Store::AbortStaleUploads(const std::string& key) {
  const std::string object = ObjectKey(key);
  const std::string path = endpoint_.bucket_path.empty() ? "/" : endpoint_.bucket_path;
  HttpRequest list = MakeRequest(path, {{"uploads", ""}, {"prefix", object}}, Describe(key), ByteRange::All());
  list.max_body_bytes = kMaxListBody;
  INSITU_ASSIGN_OR_RETURN(HttpResponse listed, transport_->Send(std::move(list)));
  if (listed.status != 200) return Status::Ok();  // no ListMultipartUploads permission: nothing to clean
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> keys, XmlElementTexts(Body(listed), "Key"));
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> ids, XmlElementTexts(Body(listed), "UploadId"));
  if (keys.size() != ids.size()) return Status::Ok();  // not a reply we can pair up: leave it
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] != object) continue;
    HttpRequest abort = MakeRequest(ObjectPath(key), {{"uploadId", ids[i]}}, Describe(key), ByteRange::All());
    abort.method = "DELETE";
    (void)transport_->Send(std::move(abort));  // best effort: a lifecycle rule may also clean it
  }
  return Status::Ok();
}

Result<bool> S3Store::WriteMultipart(const std::string& key, std::string_view value, WriteMode mode) {
  const std::string where = Describe(key);
  // Parts of part_bytes_, more when 10000 would not hold the object.
  const uint64_t part = std::max(part_bytes_, (value.size() + kMaxParts - 1) / kMaxParts);
  const size_t parts = static_cast<size_t>((value.size() + part - 1) / part);
  INSITU_RETURN_IF_ERROR(AbortStaleUploads(key));

  HttpRequest create = MakeRequest(ObjectPath(key), {{"uploads", ""}}, where, ByteRange::All());
  create.method = "POST";
  create.headers.push_back("Content-Type: application/octet-stream");
  INSITU_ASSIGN_OR_RETURN(HttpResponse created, transport_->Send(std::move(create)));
  if (created.status != 200) return WriteError("writing", key, created, "s3:PutObject permission");
  const std::string upload_id = XmlFirstText(Body(created), "UploadId");
  if (upload_id.empty()) return IoError("writing " + where + ": CreateMultipartUpload returned no UploadId");

  auto abort = [&](Status error) -> Status {
    HttpRequest request = MakeRequest(ObjectPath(key), {{"uploadId", upload_id}}, where, ByteRange::All());
    request.method = "DELETE";
    (void)transport_->Send(std::move(request));
    return error;
  };

  std::vector<HttpRequest> uploads;
  for (size_t i = 0; i < parts; ++i) {
    const uint64_t begin = i * part;
    const uint64_t length = std::min<uint64_t>(part, value.size() - begin);
    HttpRequest request =
        MakeRequest(ObjectPath(key), {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}},
                    where + " (part " + std::to_string(i + 1) + " of " + std::to_string(parts) + ")", ByteRange::All());
    request.method = "PUT";
    request.body = std::string(value.substr(begin, length));
    // Not curl's default form type for a body: a server may parse the part as a form.
    request.headers.push_back("Content-Type: application/octet-stream");
    uploads.push_back(std::move(request));
  }
  std::vector<std::string> etags;
  for (Result<HttpResponse>& reply : SendAll(*transport_, std::move(uploads))) {
    if (!reply.ok()) return abort(reply.status());
    if (reply->status != 200 || reply->etag.empty()) {
      return abort(WriteError("writing", key, *reply, "s3:PutObject permission"));
    }
    etags.push_back(std::move(reply->etag));
  }

  std::string complete_xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < parts; ++i) {
    complete_xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
  }
  complete_xml += "</CompleteMultipartUpload>";
  HttpRequest complete = MakeRequest(ObjectPath(key), {{"uploadId", upload_id}}, where, ByteRange::All());
  complete.method = "POST";
  complete.body = std::move(complete_xml);
  complete.headers.push_back("Content-Type: application/xml");
  if (mode == WriteMode::kIfAbsent) complete.headers.push_back("If-None-Match: *");
  auto completed = transport_->Send(std::move(complete));
  if (!completed.ok()) return abort(completed.status());
  if (mode == WriteMode::kIfAbsent && (completed->status == 412 || completed->status == 409)) {
    (void)abort(Status::Ok());
    if (completed->retry.retries > 0) return IsOurs(key, value);
    return false;
  }
  // CompleteMultipartUpload can fail after its 200 status line: the error is in the body.
  if (completed->status != 200 || Body(*completed).find("<Error>") != std::string_view::npos) {
    HttpResponse failed = std::move(completed).value();
    if (failed.error_body.empty()) failed.error_body = std::string(Body(failed));
    if (failed.status == 200) failed.status = 500;
    return abort(WriteError("writing", key, failed, "s3:PutObject permission"));
  }
  return true;
}

Status S3Store::DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const {
  if (!reply.ok()) return reply.status();
  if ((reply->status >= 200 && reply->status <= 299) || reply->status == 404) return Status::Ok();  // gone either way
  return WriteError("deleting", key, *reply, "s3:DeleteObject permission");
}

Status S3Store::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  HttpRequest request = MakeRequest(ObjectPath(key), {}, Describe(key), ByteRange::All());
  request.method = "DELETE";
  return DeleteStatus(key, transport_->Send(std::move(request)));
}

Status S3Store::DeletePrefix(std::string prefix) {
  INSITU_ASSIGN_OR_RETURN(const std::string under, CheckWritablePrefix(prefix));
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> keys, List(under));
  std::vector<HttpRequest> deletes;
  for (const std::string& key : keys) {
    deletes.push_back(MakeRequest(ObjectPath(key), {}, Describe(key), ByteRange::All()));
    deletes.back().method = "DELETE";
  }
  std::vector<Result<HttpResponse>> replies = SendAll(*transport_, std::move(deletes));
  for (size_t i = 0; i < keys.size(); ++i) INSITU_RETURN_IF_ERROR(DeleteStatus(keys[i], replies[i]));
  return Status::Ok();
}

}  // namespace insitubatch
