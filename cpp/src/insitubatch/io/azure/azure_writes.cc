// AzureStore's writes: Put Blob, Put Block + Put Block List above the block size,
// If-None-Match: * for a conditional create, Delete Blob. Every request goes through the
// reads' transport (its connection budget and retries) and is authorized as the reads are.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "insitubatch/io/azure/azure_store.h"
#include "insitubatch/io/http/multipart_upload.h"  // SendAll
#include "insitubatch/io/http/xml_text.h"
#include "insitubatch/io/retry_policy.h"  // JitterRandom
#include "insitubatch/util/base64.h"

namespace insitubatch {
namespace {

constexpr uint64_t kMaxBlocks = 50000;  // Azure's most blocks in one blob
constexpr char kWritePermission[] =
    "the Write permission (a SAS token needs sp=cw; a role, Storage Blob Data Contributor)";

// A tag no other upload shares, so two writers of one blob never commit each other's
// blocks: the block IDs of one blob must all be one length, and these are. Seeded from the
// kernel (JitterRandom), not std::random_device: GCC 12's calls glibc 2.36's arc4random,
// which would raise the wheel's manylinux tag to 2_36.
std::string UploadTag() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = JitterRandom();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(seed + 0x9E3779B97F4A7C15ull * ++counter));
  return text;
}

bool Succeeded(const HttpResponse& reply) { return reply.status >= 200 && reply.status <= 299; }

}  // namespace

HttpRequest AzureStore::BlobRequest(const std::string& key, const QueryPairs& query, std::string where) const {
  std::string path = container_path_ + "/" + PercentEncode(BlobName(key), /*keep_slash=*/true);
  HttpRequest request;
  request.url = Url(path, query);
  request.where = std::move(where);
  request.max_body_bytes = max_body_bytes_;
  Authorize(request, std::move(path), query);
  return request;
}

Status AzureStore::WriteError(std::string_view verb, std::string_view key, const HttpResponse& response) const {
  const std::string context = std::string(verb) + " " + Describe(key);
  const int detail = static_cast<int>(response.status);
  if (response.status == 404 && XmlFirstText(response.error_body, "Code") == "ContainerNotFound") {
    return NotFound(context + ": no container " + location_.container + " in account " + account_).set_detail(detail);
  }
  std::string message = context + ": " + DescribeHttpError(response.status, response.error_body);
  if (response.status == 401 || response.status == 403) {
    message += std::string("; ") + (verb == "deleting" ? "deleting needs the Delete permission (sp=d)"
                                                       : "writing needs " + std::string(kWritePermission));
  }
  return IoError(std::move(message)).set_detail(detail);
}

Result<HttpResponse> AzureStore::WriteBlocks(const std::string& key, std::string_view value, WriteMode mode) {
  const std::string where = Describe(key);
  const uint64_t block = std::max(block_bytes_, (value.size() + kMaxBlocks - 1) / kMaxBlocks);
  const size_t blocks = static_cast<size_t>((value.size() + block - 1) / block);
  const std::string tag = UploadTag();
  std::vector<std::string> ids;
  std::vector<HttpRequest> puts;
  for (size_t i = 0; i < blocks; ++i) {
    char index[24];
    std::snprintf(index, sizeof(index), "%06zu", i);
    ids.push_back(EncodeBase64(tag + index));
    const uint64_t begin = i * block;
    HttpRequest request =
        BlobRequest(key, {{"comp", "block"}, {"blockid", ids.back()}},
                    where + " (block " + std::to_string(i + 1) + " of " + std::to_string(blocks) + ")");
    request.method = "PUT";
    request.body_view = value.substr(begin, std::min<uint64_t>(block, value.size() - begin));  // no copy
    request.headers.push_back("Content-Type: application/octet-stream");
    puts.push_back(std::move(request));
  }
  // A failed block leaves the others uncommitted: invisible, and discarded by the service.
  for (Result<HttpResponse>& reply : SendAll(*transport_, std::move(puts))) {
    if (!reply.ok()) return reply.status();
    if (!Succeeded(*reply)) return WriteError("writing", key, *reply);
  }
  std::string list = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
  for (const std::string& id : ids) list += "<Latest>" + id + "</Latest>";
  list += "</BlockList>";
  HttpRequest commit = BlobRequest(key, {{"comp", "blocklist"}}, where);
  commit.method = "PUT";
  commit.body = std::move(list);
  commit.headers.push_back("Content-Type: application/xml");
  if (mode == WriteMode::kIfAbsent) {
    commit.headers.push_back("If-None-Match: *");
    commit.fresh_connection = true;
  }
  return transport_->Send(std::move(commit));
}

Result<bool> AzureStore::Write(std::string key, std::string_view value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  HttpResponse reply;
  if (value.size() > block_bytes_) {
    INSITU_ASSIGN_OR_RETURN(reply, WriteBlocks(key, value, mode));
  } else {
    HttpRequest request = BlobRequest(key, {}, Describe(key));
    request.method = "PUT";
    request.body_view = value;  // the caller holds it through the blocking Send: no copy
    request.headers.push_back("Content-Type: application/octet-stream");
    request.headers.push_back("x-ms-blob-type: BlockBlob");
    if (mode == WriteMode::kIfAbsent) {
      request.headers.push_back("If-None-Match: *");
      request.fresh_connection = true;
    }
    INSITU_ASSIGN_OR_RETURN(reply, transport_->Send(std::move(request)));
  }
  if (Succeeded(reply)) return true;
  const bool exists =
      reply.status == 412 || (reply.status == 409 && XmlFirstText(reply.error_body, "Code") == "BlobAlreadyExists");
  if (mode == WriteMode::kIfAbsent && exists) {
    // Refused after a retry: the first attempt may have landed with its reply lost.
    if (reply.retry.retries > 0) return HoldsExactly(*this, key, value);
    return false;
  }
  return WriteError("writing", key, reply);
}

Status AzureStore::DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const {
  if (!reply.ok()) return reply.status();
  if (Succeeded(*reply) || (reply->status == 404 && XmlFirstText(reply->error_body, "Code") != "ContainerNotFound")) {
    return Status::Ok();  // gone either way
  }
  return WriteError("deleting", key, *reply);
}

HttpRequest AzureStore::DeleteRequest(const std::string& key) const {
  HttpRequest request = BlobRequest(key, {}, Describe(key));
  request.method = "DELETE";
  // Delete Blob refuses a blob with snapshots unless told to take them too; a deleted key
  // must be gone (the header is harmless on a blob without snapshots).
  request.headers.push_back("x-ms-delete-snapshots: include");
  return request;
}

Status AzureStore::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  return DeleteStatus(key, transport_->Send(DeleteRequest(key)));
}

Status AzureStore::DeletePrefix(std::string prefix) {
  INSITU_ASSIGN_OR_RETURN(const std::string under, CheckWritablePrefix(prefix));
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> keys, List(under));
  std::vector<HttpRequest> deletes;
  for (const std::string& key : keys) deletes.push_back(DeleteRequest(key));
  std::vector<Result<HttpResponse>> replies = SendAll(*transport_, std::move(deletes));
  for (size_t i = 0; i < keys.size(); ++i) INSITU_RETURN_IF_ERROR(DeleteStatus(keys[i], replies[i]));
  return Status::Ok();
}

}  // namespace insitubatch
