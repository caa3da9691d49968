// S3Store's writes: PutObject (If-None-Match: * for a conditional create), multipart
// uploads above the part size (multipart_upload.h), DeleteObject. Every request goes through the same
// transport (its connection budget and retries) and signer as the reads.

#include <utility>

#include "insitubatch/io/aws/s3_store.h"
#include "insitubatch/io/http/multipart_upload.h"
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {

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

Result<bool> S3Store::Write(std::string key, std::string_view value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  if (value.size() > part_bytes_) return WriteMultipart(key, value, mode);
  HttpRequest request = MakeRequest(ObjectPath(key), {}, Describe(key), ByteRange::All());
  request.method = "PUT";
  request.body_view = value;  // the caller holds it through the blocking Send: no copy
  request.headers.push_back("Content-Type: application/octet-stream");
  if (mode == WriteMode::kIfAbsent) {
    request.headers.push_back("If-None-Match: *");
    request.fresh_connection = true;
  }
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status >= 200 && response.status <= 299) return true;
  if (mode == WriteMode::kIfAbsent && (response.status == 412 || response.status == 409)) {
    // A retried conditional PUT is refused when its own first attempt landed: then the
    // object there is ours, byte for byte.
    if (response.retry.retries > 0) return HoldsExactly(*this, key, value);
    return false;
  }
  return WriteError("writing", key, response, "s3:PutObject permission");
}

Result<bool> S3Store::WriteMultipart(const std::string& key, std::string_view value, WriteMode mode) {
  MultipartUploadTarget target;
  target.transport = transport_.get();
  target.object_name = ObjectKey(key);
  target.where = Describe(key);
  target.object_request = [this, path = ObjectPath(key)](UrlQuery query, std::string where) {
    return MakeRequest(path, std::move(query), std::move(where), ByteRange::All());
  };
  target.bucket_request = [this](UrlQuery query) {
    return MakeRequest(endpoint_.bucket_path.empty() ? "/" : endpoint_.bucket_path, std::move(query), Describe(""),
                       ByteRange::All());
  };
  target.error = [this, &key](const HttpResponse& reply) {
    return WriteError("writing", key, reply, "s3:PutObject permission");
  };
  target.holds_value = [this, &key, value] { return HoldsExactly(*this, key, value); };
  std::vector<std::string> condition;
  if (mode == WriteMode::kIfAbsent) condition.push_back("If-None-Match: *");
  INSITU_ASSIGN_OR_RETURN(HttpResponse completed, UploadInParts(target, value, part_bytes_, std::move(condition)));
  if (completed.status == 412 || completed.status == 409) {  // the object exists: ours after a retry?
    if (completed.retry.retries > 0) return HoldsExactly(*this, key, value);
    return false;
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
