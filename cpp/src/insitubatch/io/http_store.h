#pragma once

// HttpStore: a zarr store served over plain HTTP(S) at a base URL; key "a/b" is fetched
// from <base>/a/b with GET (Range for byte ranges). 404 is a missing key. HTTP has no
// listing, so List is Unimplemented: a hierarchy over HTTP needs consolidated metadata.
// Credentials in the URL (user:password@) become HTTP basic auth and never appear in
// Describe() or messages; extra headers (e.g. Authorization) are secret likewise.

#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/curl_transport.h"
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
  static Result<std::shared_ptr<HttpStore>> Open(const std::string& url,
                                                 HttpStoreOptions options);

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done,
                 CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  TransportStats transport_stats() const { return transport_->stats(); }

 private:
  HttpStore(HttpUrl base, std::shared_ptr<CurlTransport> transport,
            std::vector<std::string> headers, uint64_t max_body_bytes);

  std::string url_;  // scheme://authority/path, no userinfo: what requests go to
  std::string
      redacted_;  // the same for messages (identical today; kept apart on purpose)
  std::shared_ptr<CurlTransport> transport_;
  std::vector<std::string> headers_;
  uint64_t max_body_bytes_;
};

// Shared by the HTTP, S3 and GCS stores: issues `request` (GET, or HEAD for an empty
// range) and maps the response onto a ReadResult.
void ReadObject(CurlTransport& transport, HttpRequest request, ReadCallback done);

}  // namespace insitubatch
