#pragma once

// Folder io/gcs/: Google Cloud Storage -- its credentials and its store.
//
// GcsStore: gs://bucket/prefix on Google Cloud Storage. Objects are read over the XML API
// (GET <endpoint>/<bucket>/<object>, Range for byte ranges; 404 is a missing key) and
// listed over the JSON API (GET <endpoint>/storage/v1/b/<bucket>/o, paginated). Requests
// carry "Authorization: Bearer <token>" with a token gcs_credentials.h finds (an argument,
// a service-account or gcloud key file, the metadata server), or nothing with
// skip_signature (public buckets). `endpoint` (or STORAGE_EMULATOR_HOST) points at an
// emulator.
//
// A writable store writes over the same XML API: PUT object (x-goog-if-generation-match: 0
// for a conditional create; 412 means the object exists), XML API multipart uploads
// (multipart_upload.h) for objects above the part size, DELETE object. The completion of a
// multipart upload takes no generation precondition, so a conditional create of any size
// is one PUT (the XML API takes objects up to 5 TiB in one).

#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/aws/aws_credentials.h"  // EnvLookup
#include "insitubatch/io/aws/s3_request.h"       // BucketUrl
#include "insitubatch/io/gcs/gcs_credentials.h"
#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/http/http_store.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

struct GcsStoreOptions {
  std::string endpoint;  // "" = STORAGE_EMULATOR_HOST, else https://storage.googleapis.com
  bool skip_signature = false;
  std::string token;                 // OAuth2 access token (secret); "" = GOOGLE_OAUTH_ACCESS_TOKEN
  std::string service_account_key;   // a key file's JSON text (secret)
  std::string service_account_path;  // a key file
  TransportOptions transport;
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
  bool writable = false;
  // Objects larger than this are uploaded in parts of this size (at least 5 MiB, as GCS's
  // XML API multipart uploads require of every part but the last).
  uint64_t multipart_part_bytes = uint64_t{64} << 20;
  static constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;
};

struct GcsListPage {
  std::vector<std::string> names;
  std::string next_page_token;
  std::vector<std::string> generations;  // parallel to `names` when every item has one, else empty
  std::vector<std::string> prefixes;     // a listing with a delimiter: its subdirectories ("p/a/")
};
// Parses a JSON API objects.list reply ({"items": [{"name": ..., "generation": ...}],
// "prefixes": [...], "nextPageToken": ...}); a generation in ReadResult's form
// ("x-goog-generation:<n>").
Result<GcsListPage> ParseGcsListPage(std::string_view json);

class GcsStore final : public Store {
 public:
  static Result<std::shared_ptr<GcsStore>> Open(const std::string& url, GcsStoreOptions options,
                                                const EnvLookup& env = ProcessEnv());

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  // objects.list with delimiter "/": a page per 1000 entries of the one level.
  Result<DirListing> ListDir(std::string_view dir) override;
  bool remote() const override { return true; }
  // objects.list with each object's generation: one request per 1000 objects.
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  bool writable() const override { return writable_; }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Status Delete(std::string key) override;
  Status DeletePrefix(std::string prefix) override;

  std::string endpoint_url() const { return origin_ + base_path_; }
  bool anonymous() const { return token_ == nullptr; }
  // Where the token comes from ("the token argument", "service account x (file ...)", ...);
  // "" when anonymous. Never the token.
  std::string credentials_source() const { return token_ ? token_->source() : ""; }
  TransportStats transport_stats() const { return transport_->stats(); }
  const CaBundle& ca_bundle() const { return transport_->ca_bundle(); }

 private:
  GcsStore() = default;
  std::string ObjectKey(std::string_view key) const;
  // An XML API request for `key`'s object (or the bucket root when `key` is null), signed.
  HttpRequest XmlRequest(const std::string* key, const std::vector<std::pair<std::string, std::string>>& query,
                         std::string where) const;
  // A failed write or delete: the HTTP error, and the permission it needs on 401/403.
  Status WriteError(std::string_view verb, std::string_view key, const HttpResponse& response,
                    std::string_view permission) const;
  Status DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const;
  Result<bool> WriteMultipart(const std::string& key, std::string_view value);
  Result<std::vector<ObjectGeneration>> Listing(std::string_view prefix, bool generations);
  // One objects.list page of `list_prefix` from `token`; with `delimited`, grouped by "/"
  // (ListPage::dirs: the reply's prefixes).
  Result<ListPage> ListingPage(const std::string& list_prefix, const std::string& token, bool generations,
                               bool delimited);

  BucketUrl location_;
  std::string origin_;     // scheme://authority
  std::string base_path_;  // the endpoint's own path ("" for Google)
  // Adds the Authorization line (a fresh token) to each attempt; none when anonymous.
  void Authorize(HttpRequest& request) const;

  std::shared_ptr<GcsToken> token_;  // null: anonymous
  std::shared_ptr<CurlTransport> transport_;
  uint64_t max_body_bytes_ = kDefaultMaxBodyBytes;
  bool writable_ = false;
  uint64_t part_bytes_ = uint64_t{64} << 20;
};

}  // namespace insitubatch
