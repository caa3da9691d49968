#pragma once

// Folder io/aws/: S3 -- SigV4 signing, the AWS credential chain, the S3 store.
//
// S3Store: s3://bucket/prefix over the S3 REST API with SigV4 (or anonymous) requests on
// the curl transport. Reads are GetObject (Range for byte ranges; 404 is a missing key);
// List is ListObjectsV2, paginated. A writable store PUTs objects (multipart above the
// part size, parts in flight together under the transport's connection budget),
// conditional creates send If-None-Match: *, and deletes are DeleteObject. Credentials and region resolve as
// aws_credentials.h describes; Describe() shows s3://bucket/key and nothing secret.

#include <memory>
#include <optional>
#include <string>

#include "insitubatch/io/aws/aws_credentials.h"
#include "insitubatch/io/aws/s3_request.h"
#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/http/http_store.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

struct S3StoreOptions {
  std::string region;    // "" = AWS_REGION, AWS_DEFAULT_REGION, profile, us-east-1
  std::string endpoint;  // "" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS itself
  std::optional<bool> virtual_hosted_style;
  bool skip_signature = false;                                  // anonymous requests (public buckets)
  bool request_payer = false;                                   // x-amz-request-payer: requester
  std::string access_key_id, secret_access_key, session_token;  // secret
  std::string profile;
  TransportOptions transport;
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
  bool writable = false;
  // Objects larger than this are uploaded in parts of this size (at least S3's 5 MiB).
  uint64_t multipart_part_bytes = uint64_t{64} << 20;
  static constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;
};

class S3Store final : public Store {
 public:
  static Result<std::shared_ptr<S3Store>> Open(const std::string& url, S3StoreOptions options,
                                               const EnvLookup& env = ProcessEnv());

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  // ListObjectsV2 with delimiter "/": a page per 1000 entries of the one level.
  Result<DirListing> ListDir(std::string_view dir) override;
  bool remote() const override { return true; }
  // ListObjectsV2's ETags: one request per 1000 objects.
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  bool writable() const override { return writable_; }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Status Delete(std::string key) override;
  Status DeletePrefix(std::string prefix) override;

  const std::string& region() const { return region_; }
  // Where requests go ("https://bucket.s3.us-east-1.amazonaws.com"); no secrets.
  std::string endpoint_url() const { return endpoint_.origin + endpoint_.bucket_path; }
  bool anonymous() const { return signer_->anonymous(); }
  // Where the credentials come from ("environment", "instance metadata (http://...)", ...);
  // "" when anonymous. Never a key or secret.
  const std::string& credentials_source() const { return credentials_source_; }
  TransportStats transport_stats() const { return transport_->stats(); }
  const CaBundle& ca_bundle() const { return transport_->ca_bundle(); }

 private:
  S3Store() = default;
  // The bucket-relative object key of a store key.
  std::string ObjectKey(std::string_view key) const;
  HttpRequest MakeRequest(std::string path, std::vector<std::pair<std::string, std::string>> query, std::string where,
                          ByteRange range) const;
  Status ListError(long status, const HttpResponse& response) const;
  Result<std::vector<ObjectGeneration>> Listing(std::string_view prefix, bool generations);
  // One ListObjectsV2 page of `list_prefix` (a bucket prefix) from `token`; with `delimited`,
  // grouped by "/" (ListPage::dirs: the CommonPrefixes).
  Result<ListPage> ListingPage(const std::string& list_prefix, const std::string& token, bool generations,
                               bool delimited);
  // The request path of an object ("/bucket/prefix/key", percent-encoded).
  std::string ObjectPath(std::string_view key) const;
  // A failed write or delete: the HTTP error, and the permission it needs on 401/403.
  Status WriteError(std::string_view verb, std::string_view key, const HttpResponse& response,
                    std::string_view permission) const;
  // A DeleteObject's outcome: a missing object is deleted too.
  Status DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const;
  Result<bool> WriteMultipart(const std::string& key, std::string_view value, WriteMode mode);

  BucketUrl location_;
  std::string region_;
  S3Endpoint endpoint_;
  std::shared_ptr<const S3Signer> signer_;
  std::string credentials_source_;
  std::shared_ptr<CurlTransport> transport_;
  uint64_t max_body_bytes_ = kDefaultMaxBodyBytes;
  bool writable_ = false;
  uint64_t part_bytes_ = uint64_t{64} << 20;
};

}  // namespace insitubatch
