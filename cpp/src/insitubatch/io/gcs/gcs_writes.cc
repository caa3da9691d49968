// GcsStore's writes, over the XML API the reads use: PUT object (x-goog-if-generation-match:
// 0 for a conditional create), XML API multipart uploads above the part size, DELETE
// object. Every request goes through the reads' transport (its connection budget and
// retries) with a fresh bearer token per attempt.

#include <utility>

#include "insitubatch/io/aws/aws_sigv4.h"  // CanonicalQueryString
#include "insitubatch/io/gcs/gcs_store.h"
#include "insitubatch/io/http/multipart_upload.h"
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {
namespace {

constexpr char kCreatePermission[] = "storage.objects.create permission (and storage.objects.delete to replace one)";

}  // namespace

HttpRequest GcsStore::XmlRequest(const std::string* key, const std::vector<std::pair<std::string, std::string>>& query,
                                 std::string where) const {
  HttpRequest request;
  request.url = origin_ + base_path_ + "/" + location_.bucket;
  if (key != nullptr) request.url += "/" + PercentEncode(ObjectKey(*key), /*keep_slash=*/true);
  if (!query.empty()) request.url += "?" + CanonicalQueryString(query);
  request.where = std::move(where);
  request.max_body_bytes = max_body_bytes_;
  Authorize(request);
  return request;
}

Status GcsStore::WriteError(std::string_view verb, std::string_view key, const HttpResponse& response,
                            std::string_view permission) const {
  const std::string context = std::string(verb) + " " + Describe(key);
  const int detail = static_cast<int>(response.status);
  if (response.status == 404 && XmlFirstText(response.error_body, "Code") == "NoSuchBucket") {
    return NotFound(context + ": bucket " + location_.bucket + " does not exist").set_detail(detail);
  }
  std::string message = context + ": " + DescribeHttpError(response.status, response.error_body);
  if (response.status == 401 || response.status == 403) message += "; writing needs " + std::string(permission);
  return IoError(std::move(message)).set_detail(detail);
}

Result<bool> GcsStore::Write(std::string key, std::string_view value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  if (value.size() > part_bytes_ && mode == WriteMode::kOverwrite) return WriteMultipart(key, value);
  HttpRequest request = XmlRequest(&key, {}, Describe(key));
  request.method = "PUT";
  request.body_view = value;  // the caller holds it through the blocking Send: no copy
  request.headers.push_back("Content-Type: application/octet-stream");
  if (mode == WriteMode::kIfAbsent) {
    request.headers.push_back("x-goog-if-generation-match: 0");
    request.fresh_connection = true;
  }
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status >= 200 && response.status <= 299) return true;
  if (mode == WriteMode::kIfAbsent && response.status == 412) {
    // Refused after a retry: the first attempt may have landed with its reply lost.
    if (response.retry.retries > 0) return HoldsExactly(*this, key, value);
    return false;
  }
  return WriteError("writing", key, response, kCreatePermission);
}

Result<bool> GcsStore::WriteMultipart(const std::string& key, std::string_view value) {
  MultipartUploadTarget target;
  target.transport = transport_.get();
  target.object_name = ObjectKey(key);
  target.where = Describe(key);
  target.object_request = [this, &key](UrlQuery query, std::string where) {
    return XmlRequest(&key, query, std::move(where));
  };
  target.bucket_request = [this](UrlQuery query) { return XmlRequest(nullptr, query, Describe("")); };
  target.error = [this, &key](const HttpResponse& reply) {
    return WriteError("writing", key, reply, kCreatePermission);
  };
  target.holds_value = [this, &key, value] { return HoldsExactly(*this, key, value); };
  INSITU_ASSIGN_OR_RETURN(HttpResponse completed, UploadInParts(target, value, part_bytes_, {}));
  if (completed.status != 200) return WriteError("writing", key, completed, kCreatePermission);
  return true;
}

Status GcsStore::DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const {
  if (!reply.ok()) return reply.status();
  if ((reply->status >= 200 && reply->status <= 299) || reply->status == 404) return Status::Ok();  // gone either way
  return WriteError("deleting", key, *reply, "storage.objects.delete permission");
}

Status GcsStore::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  HttpRequest request = XmlRequest(&key, {}, Describe(key));
  request.method = "DELETE";
  return DeleteStatus(key, transport_->Send(std::move(request)));
}

Status GcsStore::DeletePrefix(std::string prefix) {
  INSITU_ASSIGN_OR_RETURN(const std::string under, CheckWritablePrefix(prefix));
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> keys, List(under));
  std::vector<HttpRequest> deletes;
  for (const std::string& key : keys) {
    deletes.push_back(XmlRequest(&key, {}, Describe(key)));
    deletes.back().method = "DELETE";
  }
  std::vector<Result<HttpResponse>> replies = SendAll(*transport_, std::move(deletes));
  for (size_t i = 0; i < keys.size(); ++i) INSITU_RETURN_IF_ERROR(DeleteStatus(keys[i], replies[i]));
  return Status::Ok();
}

}  // namespace insitubatch
