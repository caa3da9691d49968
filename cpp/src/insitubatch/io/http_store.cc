#include "insitubatch/io/http_store.h"

#include <utility>

namespace insitubatch {
namespace {

// URL userinfo is percent-encoded ("user%40corp:p%3Ass"); curl wants the raw "user:pass".
std::string DecodeUserinfo(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 &&
        hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

void ReadObject(CurlTransport& transport, HttpRequest request, ReadCallback done) {
  if (NeedsHead(request.range)) request.method = "HEAD";
  ByteRange range = request.range;
  std::string where = request.where;
  transport.Submit(
      std::move(request), [range, where = std::move(where),
                           done = std::move(done)](Result<HttpResponse> response) {
        if (!response.ok()) {
          done(std::move(response).status());
          return;
        }
        done(ObjectReadFromResponse(range, std::move(response).value(), where));
      });
}

Result<std::shared_ptr<HttpStore>> HttpStore::Open(const std::string& url,
                                                   HttpStoreOptions options) {
  INSITU_ASSIGN_OR_RETURN(HttpUrl base, ParseHttpUrl(url));
  if (!base.query.empty()) {
    return InvalidArgument(
        "HTTP store URL " + base.Redacted() +
        " has a query string; keys are appended to the path, so the base "
        "URL must not carry one");
  }
  if (!base.userinfo.empty()) {
    options.transport.user_password = DecodeUserinfo(base.userinfo);
  }
  INSITU_ASSIGN_OR_RETURN(auto transport,
                          CurlTransport::Create(std::move(options.transport)));
  return std::shared_ptr<HttpStore>(new HttpStore(std::move(base), std::move(transport),
                                                  std::move(options.headers),
                                                  options.max_body_bytes));
}

HttpStore::HttpStore(HttpUrl base, std::shared_ptr<CurlTransport> transport,
                     std::vector<std::string> headers, uint64_t max_body_bytes)
    : url_(base.Redacted()),
      redacted_(base.Redacted()),
      transport_(std::move(transport)),
      headers_(std::move(headers)),
      max_body_bytes_(max_body_bytes) {}

void HttpStore::ReadAsync(std::string key, ByteRange range, ReadCallback done,
                 CancelRef cancel) {
  if (Status valid = ValidateKey(key); !valid.ok()) {
    done(std::move(valid));
    return;
  }
  HttpRequest request;
  request.url = JoinUrl(url_, key);
  request.where = Describe(key);
  request.headers = headers_;
  request.range = range;
  request.max_body_bytes = max_body_bytes_;
  request.cancel = std::move(cancel);
  ReadObject(*transport_, std::move(request), std::move(done));
}

Result<std::vector<std::string>> HttpStore::List(std::string_view prefix) {
  return Unimplemented(
      "cannot list " + redacted_ +
      ": plain HTTP has no directory listing. Open a store with "
      "consolidated metadata (zarr.consolidate_metadata), or use s3:// or "
      "gs:// where the server can list");
}

std::string HttpStore::Describe(std::string_view key) const {
  if (key.empty()) return redacted_;
  return redacted_ + "/" + std::string(key);
}

}  // namespace insitubatch
