#include "insitubatch/io/aws/s3_request.h"

#include <algorithm>
#include <cctype>

#include "insitubatch/io/http/http_request.h"
#include "insitubatch/io/http/xml_text.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

Result<BucketUrl> ParseBucketUrl(std::string_view url, std::string_view scheme) {
  const std::string head = std::string(scheme) + "://";
  if (!url.starts_with(head)) {
    return InvalidArgument("expected a " + head + "bucket/prefix URL, got \"" + std::string(url.substr(0, 200)) + "\"");
  }
  std::string_view rest = url.substr(head.size());
  if (const size_t q = rest.find_first_of("?#"); q != std::string_view::npos) {
    // The query is not echoed: a presigned URL's carries a signature.
    return InvalidArgument(head + std::string(rest.substr(0, std::min<size_t>(q, 200))) +
                           ": query strings and fragments are not supported");
  }
  const size_t slash = rest.find('/');
  BucketUrl out;
  out.bucket = std::string(rest.substr(0, slash));
  if (out.bucket.empty() || out.bucket.size() > 255) {
    return InvalidArgument(head + " URL \"" + std::string(url.substr(0, 200)) + "\" names no bucket");
  }
  for (char c : out.bucket) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return InvalidArgument("bucket name \"" + out.bucket.substr(0, 64) +
                             "\" has characters other than letters, digits, '.', '-', '_'");
    }
  }
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (!prefix.empty()) {
    Status valid = ValidateKey(prefix);
    if (!valid.ok()) return valid.WithContext(head + out.bucket + " prefix");
  }
  out.prefix = std::string(prefix);
  return out;
}

Result<S3Endpoint> ResolveS3Endpoint(const std::string& bucket, const std::string& region, const std::string& endpoint,
                                     std::optional<bool> virtual_hosted) {
  S3Endpoint out;
  if (endpoint.empty()) {
    const bool vhost = virtual_hosted.value_or(bucket.find('.') == std::string::npos);
    const std::string service_host = "s3." + region + ".amazonaws.com";
    out.host = vhost ? bucket + "." + service_host : service_host;
    out.origin = "https://" + out.host;
    out.bucket_path = vhost ? "" : "/" + bucket;
    return out;
  }
  auto parsed = ParseHttpUrl(endpoint);
  if (!parsed.ok()) return parsed.status().WithContext("S3 endpoint");
  if (!parsed->userinfo.empty() || !parsed->query.empty()) {
    return InvalidArgument("S3 endpoint " + parsed->Redacted() + " must not carry credentials or a query string");
  }
  const bool vhost = virtual_hosted.value_or(false);
  out.host = vhost ? bucket + "." + parsed->Authority() : parsed->Authority();
  out.origin = parsed->scheme + "://" + out.host;
  out.bucket_path = parsed->path + (vhost ? "" : "/" + bucket);
  return out;
}

S3Signer::S3Signer(std::optional<AwsCredentials> credentials, std::string region, std::string host, bool request_payer)
    : S3Signer(credentials ? FixedCredentials(std::move(*credentials), "arguments") : nullptr, std::move(region),
               std::move(host), request_payer) {}

S3Signer::S3Signer(std::shared_ptr<AwsCredentialProvider> credentials, std::string region, std::string host,
                   bool request_payer)
    : credentials_(std::move(credentials)),
      region_(std::move(region)),
      host_(std::move(host)),
      request_payer_(request_payer) {}

Result<std::vector<std::string>> S3Signer::Sign(std::string_view method, std::string_view canonical_uri,
                                                const std::vector<std::pair<std::string, std::string>>& query,
                                                std::string_view range, std::string_view amz_date,
                                                bool has_body) const {
  std::vector<std::string> lines;
  if (request_payer_) lines.push_back("x-amz-request-payer: requester");
  if (!credentials_) return lines;
  INSITU_ASSIGN_OR_RETURN(AwsCredentials credentials, credentials_->Get());
  SigV4Request request;
  request.method = std::string(method);
  request.canonical_uri = canonical_uri.empty() ? "/" : std::string(canonical_uri);
  request.query = query;
  request.payload_hash = has_body ? "UNSIGNED-PAYLOAD" : std::string(kEmptyPayloadSha256);
  request.headers = {
      {"host", host_}, {"x-amz-content-sha256", request.payload_hash}, {"x-amz-date", std::string(amz_date)}};
  if (!range.empty()) request.headers.push_back({"range", std::string(range)});
  if (request_payer_) request.headers.push_back({"x-amz-request-payer", "requester"});
  if (!credentials.session_token.empty()) {
    request.headers.push_back({"x-amz-security-token", credentials.session_token});
  }
  INSITU_ASSIGN_OR_RETURN(SigV4Signature sig, SignV4(request, credentials, region_, "s3", amz_date));
  lines.push_back("x-amz-content-sha256: " + request.payload_hash);
  lines.push_back("x-amz-date: " + std::string(amz_date));
  if (!credentials.session_token.empty()) {
    lines.push_back("x-amz-security-token: " + credentials.session_token);
  }
  lines.push_back("Authorization: " + sig.authorization);
  return lines;
}

Result<ListObjectsPage> ParseListObjectsV2(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return InvalidArgument("ListObjectsV2 reply is not a <ListBucketResult> document");
  }
  ListObjectsPage page;
  INSITU_ASSIGN_OR_RETURN(page.keys, XmlElementTexts(xml, "Key"));
  INSITU_ASSIGN_OR_RETURN(page.etags, XmlElementTexts(xml, "ETag"));
  // Paired by position, each <Contents> holding one of each: a reply that does not pair up
  // lists no versions (keys alone stay usable).
  if (page.etags.size() != page.keys.size()) page.etags.clear();
  INSITU_ASSIGN_OR_RETURN(auto truncated, XmlElementTexts(xml, "IsTruncated"));
  if (truncated.size() > 1) return InvalidArgument("ListObjectsV2 reply repeats <IsTruncated>");
  if (!truncated.empty()) {
    if (truncated[0] == "true") {
      page.truncated = true;
    } else if (truncated[0] != "false") {
      return InvalidArgument("ListObjectsV2 reply: <IsTruncated> is neither true nor false");
    }
  }
  INSITU_ASSIGN_OR_RETURN(auto tokens, XmlElementTexts(xml, "NextContinuationToken"));
  if (tokens.size() > 1) {
    return InvalidArgument("ListObjectsV2 reply repeats <NextContinuationToken>");
  }
  if (!tokens.empty()) page.next_token = std::move(tokens[0]);
  INSITU_ASSIGN_OR_RETURN(page.prefixes, XmlElementTexts(xml, "Prefix"));
  if (page.truncated && page.next_token.empty()) {
    return InvalidArgument("ListObjectsV2 reply is truncated but has no continuation token");
  }
  return page;
}

}  // namespace insitubatch
