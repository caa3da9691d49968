#include "insitubatch/io/http/http_store.h"

#include <algorithm>
#include <set>
#include <utility>

#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

// URL userinfo is percent-encoded ("user%40corp:p%3Ass"); curl wants the raw "user:pass".
std::string DecodeUserinfo(std::string_view text) { return *PercentDecode(text, /*strict=*/false); }

}  // namespace

void ReadObject(CurlTransport& transport, HttpRequest request, ReadCallback done) {
  if (NeedsHead(request.range)) request.method = "HEAD";
  ByteRange range = request.range;
  std::string where = request.where;
  transport.Submit(std::move(request),
                   [range, where = std::move(where), done = std::move(done)](Result<HttpResponse> response) {
                     if (!response.ok()) {
                       done(std::move(response).status());
                       return;
                     }
                     done(ObjectReadFromResponse(range, std::move(response).value(), where));
                   });
}

Result<std::shared_ptr<HttpStore>> HttpStore::Open(const std::string& url, HttpStoreOptions options) {
  INSITU_ASSIGN_OR_RETURN(HttpUrl base, ParseHttpUrl(url));
  if (!base.query.empty()) {
    return InvalidArgument("HTTP store URL " + base.Redacted() +
                           " has a query string; keys are appended to the path, so the base "
                           "URL must not carry one");
  }
  if (!base.userinfo.empty()) {
    options.transport.user_password = DecodeUserinfo(base.userinfo);
  }
  INSITU_ASSIGN_OR_RETURN(auto transport, CurlTransport::Create(std::move(options.transport)));
  return std::shared_ptr<HttpStore>(
      new HttpStore(std::move(base), std::move(transport), std::move(options.headers), options.max_body_bytes));
}

HttpStore::HttpStore(HttpUrl base, std::shared_ptr<CurlTransport> transport, std::vector<std::string> headers,
                     uint64_t max_body_bytes)
    : url_(base.Redacted()),
      redacted_(base.Redacted()),
      transport_(std::move(transport)),
      headers_(std::move(headers)),
      max_body_bytes_(max_body_bytes) {}

void HttpStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
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
  return Unimplemented("cannot list " + redacted_ +
                       ": plain HTTP has no directory listing. Open a store with "
                       "consolidated metadata (zarr.consolidate_metadata), or use s3:// or "
                       "gs:// where the server can list");
}

std::string HttpStore::Describe(std::string_view key) const {
  if (key.empty()) return redacted_;
  return redacted_ + "/" + std::string(key);
}

Result<std::vector<std::string>> CollectListing(const std::string& context, const std::string& root,
                                                std::string_view item, std::string_view token_noun,
                                                const ListPageFetch& fetch) {
  constexpr size_t kMaxListPages = 100000;
  std::vector<std::string> keys;
  std::set<std::string> seen_tokens;
  std::string token;
  for (size_t page_no = 0;; ++page_no) {
    if (page_no == kMaxListPages) {
      return IoError(context + ": more than " + std::to_string(kMaxListPages) + " pages");
    }
    INSITU_ASSIGN_OR_RETURN(ListPage page, fetch(token));
    for (std::string& name : page.names) {
      if (!name.starts_with(root)) {
        return IoError(context + ": the reply holds " + std::string(item) + " \"" + name +
                       "\" outside the requested prefix");
      }
      keys.push_back(name.substr(root.size()));
    }
    if (page.next.empty()) break;
    if (!seen_tokens.insert(page.next).second) {
      return IoError(context + ": the server repeated a " + std::string(token_noun));
    }
    token = std::move(page.next);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // "Directory marker" objects ("a/b/") are not keys a store can read.
  std::erase_if(keys, [](const std::string& k) { return k.empty() || k.back() == '/'; });
  return keys;
}

}  // namespace insitubatch
