#pragma once

// The network-free parts of the S3 store: s3:// URLs, endpoint and addressing style,
// request signing, and ListObjectsV2 replies.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/io/aws/aws_credential_providers.h"
#include "insitubatch/io/aws/aws_sigv4.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// s3://bucket[/prefix]; the prefix has no leading or trailing '/'.
struct BucketUrl {
  std::string bucket;
  std::string prefix;
};
// Shared by s3:// and gs://: `scheme` is "s3" or "gs". Bucket names: letters, digits,
// '.', '-', '_'; the prefix must be a valid store key (no "..", no empty segments).
Result<BucketUrl> ParseBucketUrl(std::string_view url, std::string_view scheme);

// Where requests for one bucket go.
struct S3Endpoint {
  std::string origin;       // "https://bucket.s3.eu-west-1.amazonaws.com"
  std::string host;         // the Host header (and the signed host): "bucket.s3...."
  std::string bucket_path;  // "" when virtual-hosted, "/bucket" (after any endpoint path)
};
// AWS (empty `endpoint`): virtual-hosted unless `virtual_hosted` is false or the bucket
// name has a '.' (it would not match the TLS wildcard). A custom endpoint (MinIO, moto,
// R2, ...) is path-style unless `virtual_hosted` is true.
Result<S3Endpoint> ResolveS3Endpoint(const std::string& bucket, const std::string& region, const std::string& endpoint,
                                     std::optional<bool> virtual_hosted);

// Signs every S3 request of one store. Holds the credentials; copies are cheap to share.
class S3Signer {
 public:
  // `credentials` nullopt = anonymous (skip_signature): only the payer header is added.
  S3Signer(std::optional<AwsCredentials> credentials, std::string region, std::string host, bool request_payer);
  // Credentials that may expire and refresh; null = anonymous.
  S3Signer(std::shared_ptr<AwsCredentialProvider> credentials, std::string region, std::string host,
           bool request_payer);

  // Header lines for one attempt: x-amz-date, x-amz-content-sha256, [range,]
  // x-amz-request-payer, x-amz-security-token and Authorization. `canonical_uri` is the
  // encoded path as sent; `query` the raw parameters; `range` a Range header value or "".
  // `has_body`: the request carries a body (a PUT of an object, a POST), sent as
  // UNSIGNED-PAYLOAD as the AWS SDKs do for uploads: hashing every object before sending
  // would read it twice.
  Result<std::vector<std::string>> Sign(std::string_view method, std::string_view canonical_uri,
                                        const std::vector<std::pair<std::string, std::string>>& query,
                                        std::string_view range, std::string_view amz_date, bool has_body = false) const;

  bool anonymous() const { return credentials_ == nullptr; }

 private:
  std::shared_ptr<AwsCredentialProvider> credentials_;
  std::string region_, host_;
  bool request_payer_;
};

// One ListObjectsV2 page: the keys, and the token for the next page when truncated.
struct ListObjectsPage {
  std::vector<std::string> keys;
  std::vector<std::string> etags;  // parallel to `keys` (one per <Contents>), or empty when they do not pair up
  bool truncated = false;
  std::string next_token;
  // Every <Prefix> text in document order: the request's prefix echoed and, in a listing
  // with a delimiter, each <CommonPrefixes> entry.
  std::vector<std::string> prefixes;
};
// InvalidArgument when the document is not a ListBucketResult, an element is malformed,
// or a truncated page carries no continuation token.
Result<ListObjectsPage> ParseListObjectsV2(std::string_view xml);

}  // namespace insitubatch
