#include "insitubatch/io/http/multipart_upload.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "insitubatch/io/http/http_store.h"  // kMaxListBody
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {
namespace {

std::string_view Body(const HttpResponse& response) {
  return {reinterpret_cast<const char*>(response.body.data()), response.body.size()};
}

}  // namespace

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

void AbortStaleUploads(const MultipartUploadTarget& target) {
  HttpRequest list = target.bucket_request({{"uploads", ""}, {"prefix", target.object_name}});
  list.max_body_bytes = kMaxListBody;
  auto listed = target.transport->Send(std::move(list));
  if (!listed.ok() || listed->status != 200) return;  // no permission to list uploads: nothing to clean
  auto keys = XmlElementTexts(Body(*listed), "Key");
  auto ids = XmlElementTexts(Body(*listed), "UploadId");
  if (!keys.ok() || !ids.ok() || keys->size() != ids->size()) return;  // not a reply we can pair up
  for (size_t i = 0; i < keys->size(); ++i) {
    if ((*keys)[i] != target.object_name) continue;
    HttpRequest abort = target.object_request({{"uploadId", (*ids)[i]}}, target.where);
    abort.method = "DELETE";
    (void)target.transport->Send(std::move(abort));
  }
}

Result<HttpResponse> UploadInParts(const MultipartUploadTarget& target, std::string_view value, uint64_t part_bytes,
                                   std::vector<std::string> complete_headers) {
  CurlTransport& transport = *target.transport;
  const uint64_t part = std::max(part_bytes, (value.size() + kMaxUploadParts - 1) / kMaxUploadParts);
  const size_t parts = static_cast<size_t>((value.size() + part - 1) / part);
  AbortStaleUploads(target);

  HttpRequest create = target.object_request({{"uploads", ""}}, target.where);
  create.method = "POST";
  create.headers.push_back("Content-Type: application/octet-stream");
  INSITU_ASSIGN_OR_RETURN(HttpResponse created, transport.Send(std::move(create)));
  if (created.status != 200) return target.error(created);
  const std::string upload_id = XmlFirstText(Body(created), "UploadId");
  if (upload_id.empty()) return IoError("writing " + target.where + ": initiating the upload returned no UploadId");

  auto abort = [&](Status error) -> Status {
    HttpRequest request = target.object_request({{"uploadId", upload_id}}, target.where);
    request.method = "DELETE";
    (void)transport.Send(std::move(request));
    return error;
  };

  std::vector<HttpRequest> uploads;
  for (size_t i = 0; i < parts; ++i) {
    const uint64_t begin = i * part;
    const uint64_t length = std::min<uint64_t>(part, value.size() - begin);
    HttpRequest request =
        target.object_request({{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}},
                              target.where + " (part " + std::to_string(i + 1) + " of " + std::to_string(parts) + ")");
    request.method = "PUT";
    request.body_view = value.substr(begin, length);  // a view of the caller's object: no copy per part
    // Not curl's default form type for a body: a server may parse the part as a form.
    request.headers.push_back("Content-Type: application/octet-stream");
    uploads.push_back(std::move(request));
  }
  std::vector<std::string> etags;
  for (Result<HttpResponse>& reply : SendAll(transport, std::move(uploads))) {
    if (!reply.ok()) return abort(reply.status());
    if (reply->status != 200 || reply->etag.empty()) return abort(target.error(*reply));
    etags.push_back(std::move(reply->etag));
  }

  std::string complete_xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < parts; ++i) {
    complete_xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
  }
  complete_xml += "</CompleteMultipartUpload>";
  HttpRequest complete = target.object_request({{"uploadId", upload_id}}, target.where);
  complete.method = "POST";
  complete.body = std::move(complete_xml);
  complete.headers.push_back("Content-Type: application/xml");
  for (std::string& header : complete_headers) complete.headers.push_back(std::move(header));
  complete.fresh_connection = true;  // only counted retries resend it (see below)
  auto completed = transport.Send(std::move(complete));
  if (!completed.ok()) return abort(completed.status());
  if (completed->status == 412 || completed->status == 409) {
    (void)abort(Status::Ok());
    return completed;
  }
  // A retried complete whose first attempt landed finds the upload gone.
  if (completed->status == 404 && completed->retry.retries > 0 && target.holds_value) {
    INSITU_ASSIGN_OR_RETURN(const bool landed, target.holds_value());
    if (landed) {
      completed->status = 200;
      return completed;
    }
  }
  // Completing can fail after its 200 status line: the error is then in the body.
  if (completed->status != 200 || Body(*completed).find("<Error>") != std::string_view::npos) {
    HttpResponse failed = std::move(completed).value();
    if (failed.error_body.empty()) failed.error_body = std::string(Body(failed));
    if (failed.status == 200) failed.status = 500;
    return abort(target.error(failed));
  }
  return completed;
}

}  // namespace insitubatch
