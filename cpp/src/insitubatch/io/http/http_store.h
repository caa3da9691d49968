#pragma once

// Folder io/http/: HTTP(S) -- requests, the libcurl multi transport, the HTTP store, listing XML.
//
// HttpStore: a zarr store served over plain HTTP(S) at a base URL; key "a/b" is fetched
// from <base>/a/b with GET (Range for byte ranges). 404 is a missing key. HTTP has no
// listing, so List is Unimplemented: a hierarchy over HTTP needs consolidated metadata.
// Credentials in the URL (user:password@) become HTTP basic auth and never appear in
// Describe() or messages; extra headers (e.g. Authorization) are secret likewise.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

struct HttpStoreOptions {
  HttpStoreOptions() { transport.follow_redirects = true; }  // plain HTTP hosts redirect
  TransportOptions transport;
  std::vector<std::string> headers;  // "Name: value", sent with every request
  uint64_t max_body_bytes = kDefaultMaxBodyBytes;
};

class HttpStore final : public Store {
 public:
  // `url` is http(s)://host[:port]/path; a query string or fragment is InvalidArgument.
  static Result<std::shared_ptr<HttpStore>> Open(const std::string& url, HttpStoreOptions options);

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  bool remote() const override { return true; }
  std::string Describe(std::string_view key) const override;

  TransportStats transport_stats() const { return transport_->stats(); }
  const CaBundle& ca_bundle() const { return transport_->ca_bundle(); }

 protected:
  std::string WriteRefusal() const override {
    return "HTTP has no write verb (write through s3://, gs://, az:// or a local path instead)";
  }

 private:
  HttpStore(HttpUrl base, std::shared_ptr<CurlTransport> transport, std::vector<std::string> headers,
            uint64_t max_body_bytes);

  std::string url_;       // scheme://authority/path, no userinfo: what requests go to
  std::string redacted_;  // the same for messages (identical today; kept apart on purpose)
  std::shared_ptr<CurlTransport> transport_;
  std::vector<std::string> headers_;
  uint64_t max_body_bytes_;
};

// Shared by the HTTP, S3, GCS and Azure stores: issues `request` (GET, or HEAD for an empty
// range; conditional when its range asks, AddReadCondition) and maps the response onto a
// ReadResult.
void ReadObject(CurlTransport& transport, HttpRequest request, ReadCallback done);
// Adds the header a conditional read (ByteRange::if_none_match) sends, if any.
void AddReadCondition(HttpRequest& request);

// The bound on one listing reply's body, shared by the bucket stores.
inline constexpr uint64_t kMaxListBody = uint64_t{64} << 20;

// One page of a paginated listing: the full names it holds, and the token of the next page
// ("" after the last).
struct ListPage {
  std::vector<std::string> names;
  std::string next;
  std::vector<std::string> generations;  // parallel to `names` (a listing with generations), or empty
  std::vector<std::string> dirs;         // a directory listing's subdirectories, full names (a trailing '/' allowed)
};
using ListPageFetch = std::function<Result<ListPage>(const std::string& token)>;
// One page of a delimited listing of the bucket prefix `list_prefix`, from `token`.
using DirPageFetch = std::function<Result<ListPage>(const std::string& list_prefix, const std::string& token)>;

// What a bucket store's names start with: "" for a store at the bucket's root, else its
// prefix and "/" (a listing's `root` below).
std::string ListingRoot(std::string_view store_prefix);

// Follows a bucket store's listing from token "" page by page (at most 100000 pages; a
// repeated token is an error), strips `root` from every name (a name outside it is an
// error) and returns the keys sorted, unique, without "directory marker" names ending in
// '/'. Messages start with `context` and call a name an `item` and a token a `token_noun`.
Result<std::vector<std::string>> CollectListing(const std::string& context, const std::string& root,
                                                std::string_view item, std::string_view token_noun,
                                                const ListPageFetch& fetch);
// The same, keeping each name's generation (ListPage::generations; "" where a page has none).
Result<std::vector<ObjectGeneration>> CollectListingGenerations(const std::string& context, const std::string& root,
                                                                std::string_view item, std::string_view token_noun,
                                                                const ListPageFetch& fetch);
// Store::ListDir of a bucket store: `dir` checked (ValidateDir), then the delimiter listing
// of `root` + `dir` + "/" fetched page by page: the objects directly in it and its
// subdirectories (ListPage::dirs, and the first level of any deeper name a server answered
// anyway), each as a full key of the store.
Result<DirListing> CollectDirListing(const std::string& context, const std::string& root, std::string_view dir,
                                     std::string_view item, std::string_view token_noun, const DirPageFetch& fetch);

}  // namespace insitubatch
