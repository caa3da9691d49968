#pragma once

// Writes shared by the bucket stores: sending a batch of requests at once, and the
// multipart upload protocol that S3 defined and Google Cloud Storage's XML API speaks too:
// create (POST ?uploads) -> an UploadId; the parts (PUT ?partNumber=&uploadId=), in flight
// together under the transport's connection budget, each retried alone; complete (POST
// ?uploadId= with the parts' ETags); abort (DELETE ?uploadId=). A writer killed mid-upload
// leaves an incomplete upload, listed by GET <bucket>?uploads, that the next write of the
// key aborts.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/io/http/curl_transport.h"

namespace insitubatch {

// Sends every request at once (the transport's connection budget paces them) and waits
// for all the replies, in the requests' order. Never call it from an IO thread.
std::vector<Result<HttpResponse>> SendAll(CurlTransport& transport, std::vector<HttpRequest> requests);

using UrlQuery = std::vector<std::pair<std::string, std::string>>;

// One object's upload, as its store signs and describes requests.
struct MultipartUploadTarget {
  CurlTransport* transport = nullptr;
  std::string object_name;  // bucket-relative, as <Key> in the upload listing names it
  std::string where;        // the object, for messages ("gs://bucket/key")
  // A signed request to the object's URL with these query parameters, described as `where`.
  std::function<HttpRequest(UrlQuery query, std::string where)> object_request;
  // A signed GET of the bucket's root with these query parameters (listing uploads).
  std::function<HttpRequest(UrlQuery query)> bucket_request;
  // A refused request as the store's error (names the object and the permission needed).
  std::function<Status(const HttpResponse& reply)> error;
  // Whether the object now holds exactly the value uploaded (a retried complete whose first
  // attempt landed, its reply lost, is refused: the upload is gone). Optional.
  std::function<Result<bool>()> holds_value;
};

inline constexpr uint64_t kMaxUploadParts = 10000;  // S3's and GCS's most parts per upload

// Aborts the key's incomplete uploads, best effort (a listing the credentials may not
// read, or a reply that cannot be paired up, is left alone: a lifecycle rule may clean it).
void AbortStaleUploads(const MultipartUploadTarget& target);

// Uploads `value` in parts of `part_bytes` (more when kMaxUploadParts would not hold it),
// then completes the upload with `complete_headers` (a precondition) added. Returns the
// complete request's reply: 200, or the 409 / 412 of a refused precondition (the upload
// then aborted) for the caller to interpret. Any other failure aborts the upload, so no
// object appears and no part is left stored, and is an error.
Result<HttpResponse> UploadInParts(const MultipartUploadTarget& target, std::string_view value, uint64_t part_bytes,
                                   std::vector<std::string> complete_headers);

}  // namespace insitubatch
