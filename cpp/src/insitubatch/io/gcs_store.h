#pragma once

// GcsStore: gs://bucket/prefix on Google Cloud Storage. Objects are read over the XML API
// (GET <endpoint>/<bucket>/<object>, Range for byte ranges; 404 is a missing key) and
// listed over the JSON API (GET <endpoint>/storage/v1/b/<bucket>/o, paginated). Requests
// carry "Authorization: Bearer <token>" from `token` or GOOGLE_OAUTH_ACCESS_TOKEN, or
// nothing with skip_signature (public buckets). `endpoint` (or STORAGE_EMULATOR_HOST)
// points at an emulator. Service-account key files are not supported yet.

#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/aws_credentials.h"  // EnvLookup
#include "insitubatch/io/curl_transport.h"
#include "insitubatch/io/s3_request.h"  // BucketUrl
#include "insitubatch/io/store.h"

namespace insitubatch {

struct GcsStoreOptions {
  std::string
      endpoint;  // "" = STORAGE_EMULATOR_HOST, else https://storage.googleapis.com
  bool skip_signature = false;
  std::string token;  // OAuth2 access token (secret); "" = GOOGLE_OAUTH_ACCESS_TOKEN
  TransportOptions transport;
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
};

struct GcsListPage {
  std::vector<std::string> names;
  std::string next_page_token;
};
// Parses a JSON API objects.list reply ({"items": [{"name": ...}], "nextPageToken":
// ...}).
Result<GcsListPage> ParseGcsListPage(std::string_view json);

class GcsStore final : public Store {
 public:
  static Result<std::shared_ptr<GcsStore>> Open(const std::string& url,
                                                GcsStoreOptions options,
                                                const EnvLookup& env = ProcessEnv());

  void ReadAsync(std::string key, ByteRange range, ReadCallback done) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  std::string endpoint_url() const { return origin_ + base_path_; }
  bool anonymous() const { return headers_.empty(); }
  TransportStats transport_stats() const { return transport_->stats(); }

 private:
  GcsStore() = default;
  std::string ObjectKey(std::string_view key) const;

  BucketUrl location_;
  std::string origin_;                // scheme://authority
  std::string base_path_;             // the endpoint's own path ("" for Google)
  std::vector<std::string> headers_;  // the Authorization line (secret), or none
  std::shared_ptr<CurlTransport> transport_;
  uint64_t max_body_bytes_ = kDefaultMaxBodyBytes;
};

}  // namespace insitubatch
