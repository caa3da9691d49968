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

void AddReadCondition(HttpRequest& request) {
  if (std::string header = ConditionalReadHeader(request.range.if_none_match); !header.empty()) {
    request.headers.push_back(std::move(header));
  }
}

void ReadObject(CurlTransport& transport, HttpRequest request, ReadCallback done) {
  if (NeedsHead(request.range)) request.method = "HEAD";
  AddReadCondition(request);
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

namespace {

// Every page of a listing from token "" on: the objects (names stripped of `root`, sorted,
// unique, without "directory marker" names ending in '/') and the directories (ListPage::dirs,
// stripped of `root`, as given).
struct CollectedPages {
  std::vector<ObjectGeneration> objects;
  std::vector<std::string> dirs;
};

Result<CollectedPages> CollectPages(const std::string& context, const std::string& root, std::string_view item,
                                    std::string_view token_noun, const ListPageFetch& fetch) {
  constexpr size_t kMaxListPages = 100000;
  CollectedPages out;
  std::set<std::string> seen_tokens;
  std::string token;
  auto stripped = [&](std::string& name) -> Result<std::string> {
    if (!name.starts_with(root)) {
      return IoError(context + ": the reply holds " + std::string(item) + " \"" + name +
                     "\" outside the requested prefix");
    }
    return name.substr(root.size());
  };
  for (size_t page_no = 0;; ++page_no) {
    if (page_no == kMaxListPages) {
      return IoError(context + ": more than " + std::to_string(kMaxListPages) + " pages");
    }
    INSITU_ASSIGN_OR_RETURN(ListPage page, fetch(token));
    if (!page.generations.empty() && page.generations.size() != page.names.size()) {
      return IoError(context + ": the reply's " + std::string(item) + "s and versions do not pair up");
    }
    for (size_t i = 0; i < page.names.size(); ++i) {
      INSITU_ASSIGN_OR_RETURN(std::string key, stripped(page.names[i]));
      out.objects.push_back({std::move(key), page.generations.empty() ? "" : std::move(page.generations[i])});
    }
    for (std::string& dir : page.dirs) {
      INSITU_ASSIGN_OR_RETURN(std::string path, stripped(dir));
      out.dirs.push_back(std::move(path));
    }
    if (page.next.empty()) break;
    if (!seen_tokens.insert(page.next).second) {
      return IoError(context + ": the server repeated a " + std::string(token_noun));
    }
    token = std::move(page.next);
  }
  std::vector<ObjectGeneration>& objects = out.objects;
  std::stable_sort(objects.begin(), objects.end(),
                   [](const ObjectGeneration& a, const ObjectGeneration& b) { return a.key < b.key; });
  objects.erase(std::unique(objects.begin(), objects.end(),
                            [](const ObjectGeneration& a, const ObjectGeneration& b) { return a.key == b.key; }),
                objects.end());
  // "Directory marker" objects ("a/b/") are not keys a store can read.
  std::erase_if(objects, [](const ObjectGeneration& o) { return o.key.empty() || o.key.back() == '/'; });
  return out;
}

}  // namespace

Result<std::vector<ObjectGeneration>> CollectListingGenerations(const std::string& context, const std::string& root,
                                                                std::string_view item, std::string_view token_noun,
                                                                const ListPageFetch& fetch) {
  INSITU_ASSIGN_OR_RETURN(CollectedPages pages, CollectPages(context, root, item, token_noun, fetch));
  return std::move(pages.objects);
}

Result<DirListing> CollectDirListing(const std::string& context, const std::string& root, std::string_view dir,
                                     std::string_view item, std::string_view token_noun, const DirPageFetch& fetch) {
  INSITU_RETURN_IF_ERROR(ValidateDir(dir));
  const std::string prefix = dir.empty() ? "" : std::string(dir) + "/";
  const std::string list_prefix = root + prefix;
  INSITU_ASSIGN_OR_RETURN(CollectedPages pages,
                          CollectPages(context, root, item, token_noun,
                                       [&](const std::string& token) { return fetch(list_prefix, token); }));
  DirListing out;
  for (ObjectGeneration& o : pages.objects) {
    if (!o.key.starts_with(prefix)) continue;
    // A server that ignores the delimiter answers the objects below the subdirectories too:
    // each stands for its subdirectory, as a common prefix would.
    if (const size_t slash = o.key.find('/', prefix.size()); slash != std::string::npos) {
      if (slash > prefix.size()) out.dirs.push_back(o.key.substr(0, slash));
    } else {
      out.keys.push_back(std::move(o.key));
    }
  }
  for (std::string& path : pages.dirs) {
    if (path.ends_with('/')) path.pop_back();
    const std::string_view name = std::string_view(path).substr(std::min(prefix.size(), path.size()));
    if (!path.starts_with(prefix) || name.find('/') != std::string_view::npos) {
      return IoError(context + ": the reply names \"" + path + "/\" as a directory directly in " +
                     (dir.empty() ? std::string("the root") : "\"" + std::string(dir) + "\""));
    }
    // An empty name (keys "a//x", or "/x" at the root) is no directory a key path can name.
    if (!name.empty()) out.dirs.push_back(std::move(path));
  }
  std::sort(out.dirs.begin(), out.dirs.end());
  out.dirs.erase(std::unique(out.dirs.begin(), out.dirs.end()), out.dirs.end());
  return out;
}

std::string ListingRoot(std::string_view store_prefix) {
  return store_prefix.empty() ? std::string() : std::string(store_prefix) + "/";
}

Result<std::vector<std::string>> CollectListing(const std::string& context, const std::string& root,
                                                std::string_view item, std::string_view token_noun,
                                                const ListPageFetch& fetch) {
  INSITU_ASSIGN_OR_RETURN(std::vector<ObjectGeneration> objects,
                          CollectListingGenerations(context, root, item, token_noun, fetch));
  std::vector<std::string> keys;
  keys.reserve(objects.size());
  for (ObjectGeneration& o : objects) keys.push_back(std::move(o.key));
  return keys;
}

}  // namespace insitubatch
