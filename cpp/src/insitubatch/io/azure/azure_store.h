#pragma once

// Folder io/azure/: Azure Blob Storage -- its credentials and its store.
//
// AzureStore: a container prefix on Azure Blob Storage. Blobs are read with Get Blob
// (x-ms-range for byte ranges; 404 is a missing key) and listed with List Blobs (XML,
// paginated by NextMarker). Requests are authorized as azure_credentials.h resolves:
// SharedKey signatures, a SAS token's query parameters, or a bearer token from Entra ID
// or a managed identity; nothing with skip_signature (public containers). use_emulator
// points at Azurite (http://127.0.0.1:10000, account devstoreaccount1).
//
// A writable store writes a blob of up to block_bytes with one Put Blob, a larger one as
// Put Block calls in flight together (under the transport's connection budget, each retried
// alone) and one Put Block List that commits them at once; If-None-Match: * on the Put Blob
// or Put Block List makes a conditional create (409 or 412: the blob exists). Blocks of a
// failed upload are never committed, so no blob appears; the service discards uncommitted
// blocks a week later (or when the blob is next committed), so there is nothing to abort.
// Deletes are Delete Blob.
//
// URLs, as obstore takes them: az://container/prefix (with account_name=),
// az:// or abfs[s]://container@account.{blob,dfs}.core.windows.net/prefix, and
// https://account.{blob,dfs}.core.windows.net/container/prefix.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/io/azure/azure_credentials.h"
#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/http/http_request.h"
#include "insitubatch/io/http/http_store.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

inline constexpr std::string_view kAzureApiVersion = "2023-11-03";

struct AzureUrl {
  std::string account;  // "" when the URL does not say (az://container/...)
  std::string container;
  std::string prefix;  // no leading or trailing '/'
};
Result<AzureUrl> ParseAzureUrl(std::string_view url);

struct AzureStoreOptions {
  std::string account_name;   // "" = the URL's, AZURE_STORAGE_ACCOUNT_NAME, or the emulator's
  std::string endpoint;       // "" = AZURE_STORAGE_ENDPOINT, else the account's blob endpoint
  bool use_emulator = false;  // also AZURE_STORAGE_USE_EMULATOR=true
  bool skip_signature = false;
  AzureCredentialRequest credentials;
  TransportOptions transport;
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
  bool writable = false;
  // Blobs larger than this are uploaded as blocks of this size (Put Block takes at most
  // 4000 MiB).
  uint64_t block_bytes = uint64_t{64} << 20;
  static constexpr uint64_t kMaxBlockBytes = uint64_t{4000} << 20;
};

// SharedKey's string to sign for one request: the verb, the standard header slots (only
// Content-Length, Content-Type, If-None-Match and Range occur in our requests), the sorted x-ms-*
// headers, then /account/path and the sorted, decoded query parameters. `headers` are
// "Name: value" lines; `path` is the encoded path as sent.
std::string AzureStringToSign(std::string_view method, const std::vector<std::string>& headers,
                              std::string_view account, std::string_view path, const QueryPairs& query);
// "SharedKey account:base64(HMAC-SHA256(key, string_to_sign))".
std::string AzureSharedKeyAuthorization(std::string_view account, std::string_view key,
                                        std::string_view string_to_sign);
// "Tue, 01 Dec 2026 21:00:00 GMT" (x-ms-date).
std::string Rfc1123Date(SystemTime when);

struct AzureListPage {
  std::vector<std::string> names;
  std::string next_marker;
  std::vector<std::string>
      etags;  // parallel to `names`, quoted as a read's ETag header; empty when they do not pair up
  std::vector<std::string> prefixes;  // a listing with a delimiter: its <BlobPrefix> names ("p/a/")
};
Result<AzureListPage> ParseAzureListPage(std::string_view xml);

class AzureStore final : public Store {
 public:
  static Result<std::shared_ptr<AzureStore>> Open(const std::string& url, AzureStoreOptions options,
                                                  const EnvLookup& env = ProcessEnv());

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  // List Blobs with delimiter "/": a page per 5000 entries of the one level.
  Result<DirListing> ListDir(std::string_view dir) override;
  bool remote() const override { return true; }
  // List Blobs' <Etag>s: one request per 5000 blobs.
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  bool writable() const override { return writable_; }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Status Delete(std::string key) override;
  Status DeletePrefix(std::string prefix) override;

  std::string container_url() const { return container_url_; }
  bool anonymous() const { return !source_; }
  // Which credentials sign the requests; "" when anonymous. Never the secret itself.
  std::string credentials_source() const { return source_ ? source_->Describe() : ""; }
  TransportStats transport_stats() const { return transport_->stats(); }
  const CaBundle& ca_bundle() const { return transport_->ca_bundle(); }

 private:
  AzureStore() = default;
  std::string BlobName(std::string_view key) const;
  Result<std::vector<ObjectGeneration>> Listing(std::string_view prefix, bool generations);
  // One List Blobs page of `list_prefix` from `marker`; with `delimited`, grouped by "/"
  // (ListPage::dirs: the <BlobPrefix> names).
  Result<ListPage> ListingPage(const std::string& list_prefix, const std::string& marker, bool generations,
                               bool delimited);
  // Query pairs -> the URL to send (SAS parameters appended) for a path below the origin.
  std::string Url(const std::string& path, const QueryPairs& query) const;
  void Authorize(HttpRequest& request, std::string path, QueryPairs query) const;
  // A signed request for `key`'s blob with these query parameters.
  HttpRequest BlobRequest(const std::string& key, const QueryPairs& query, std::string where) const;
  // A failed write or delete: the HTTP error, and the permission it needs on 401/403.
  Status WriteError(std::string_view verb, std::string_view key, const HttpResponse& response) const;
  HttpRequest DeleteRequest(const std::string& key) const;
  Status DeleteStatus(const std::string& key, const Result<HttpResponse>& reply) const;
  // Put Block for every block, then Put Block List: the commit's reply.
  Result<HttpResponse> WriteBlocks(const std::string& key, std::string_view value, WriteMode mode);

  AzureUrl location_;
  std::string account_;
  std::string origin_;          // scheme://authority
  std::string container_path_;  // "/container", or "/account/container" for the emulator
  std::string container_url_;
  std::shared_ptr<const AzureCredentialSource> source_;  // null: anonymous
  std::shared_ptr<AzureToken> token_;                    // the sources that fetch tokens
  std::shared_ptr<CurlTransport> transport_;
  uint64_t max_body_bytes_ = kDefaultMaxBodyBytes;
  bool writable_ = false;
  uint64_t block_bytes_ = uint64_t{64} << 20;
};

}  // namespace insitubatch
