#include "insitubatch/io/gcs/gcs_store.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "insitubatch/io/aws/aws_sigv4.h"    // CanonicalQueryString
#include "insitubatch/io/http/http_store.h"  // ReadObject

namespace insitubatch {
namespace {

constexpr char kGoogleEndpoint[] = "https://storage.googleapis.com";

}  // namespace

Result<GcsListPage> ParseGcsListPage(std::string_view text) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument("GCS objects.list reply is not a JSON object");
  }
  GcsListPage page;
  bool every_generation = true;
  if (auto prefixes = json.find("prefixes"); prefixes != json.end()) {  // a delimited listing's subdirectories
    if (!prefixes->is_array()) return InvalidArgument("GCS objects.list: \"prefixes\" is not a list");
    for (const auto& prefix : *prefixes) {
      if (!prefix.is_string()) return InvalidArgument("GCS objects.list: a prefix is not a string");
      page.prefixes.push_back(prefix.get<std::string>());
    }
  }
  if (auto items = json.find("items"); items != json.end()) {
    if (!items->is_array()) return InvalidArgument("GCS objects.list: \"items\" is not a list");
    for (const auto& item : *items) {
      auto name = item.is_object() ? item.find("name") : item.end();
      if (!item.is_object() || name == item.end() || !name->is_string()) {
        return InvalidArgument("GCS objects.list: an item has no string \"name\"");
      }
      page.names.push_back(name->get<std::string>());
      // An int64 the JSON API writes as a string (an emulator may write a number).
      auto generation = item.find("generation");
      if (generation != item.end() && generation->is_string()) {
        page.generations.push_back("x-goog-generation:" + generation->get<std::string>());
      } else if (generation != item.end() && generation->is_number_unsigned()) {
        page.generations.push_back("x-goog-generation:" + std::to_string(generation->get<uint64_t>()));
      } else {
        every_generation = false;
      }
    }
  }
  if (!every_generation) page.generations.clear();
  if (auto token = json.find("nextPageToken"); token != json.end() && !token->is_null()) {
    if (!token->is_string()) {
      return InvalidArgument("GCS objects.list: \"nextPageToken\" is not a string");
    }
    page.next_page_token = token->get<std::string>();
  }
  return page;
}

Result<std::shared_ptr<GcsStore>> GcsStore::Open(const std::string& url, GcsStoreOptions options,
                                                 const EnvLookup& env) {
  INSITU_ASSIGN_OR_RETURN(BucketUrl location, ParseBucketUrl(url, "gs"));
  if (options.multipart_part_bytes < GcsStoreOptions::kMinPartBytes) {
    return InvalidArgument("multipart_part_size " + std::to_string(options.multipart_part_bytes) +
                           " is below the smallest part of a GCS multipart upload, 5 MiB (5242880 bytes)");
  }
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    endpoint = env("STORAGE_EMULATOR_HOST").value_or("");
    // The emulator convention allows a bare host:port.
    if (!endpoint.empty() && endpoint.find("://") == std::string::npos) {
      endpoint = "http://" + endpoint;
    }
  }
  if (endpoint.empty()) endpoint = kGoogleEndpoint;
  auto parsed = ParseHttpUrl(endpoint);
  if (!parsed.ok()) return parsed.status().WithContext("GCS endpoint");
  if (!parsed->userinfo.empty() || !parsed->query.empty()) {
    return InvalidArgument("GCS endpoint " + parsed->Redacted() + " must not carry credentials or a query string");
  }

  std::shared_ptr<GcsToken> token;
  if (!options.skip_signature) {
    const std::string context = "opening gs://" + location.bucket;
    GcsCredentialRequest request{options.token, options.service_account_key, options.service_account_path};
    auto source = ResolveGcsCredentials(request, env);
    if (!source.ok()) return source.status().WithContext(context);
    const bool fallback = source->kind == GcsCredentialSource::Kind::kMetadata;
    token = MakeGcsToken(std::move(source).value());
    // Fetched now, so a bad key or a missing service account fails here, not at a read.
    if (auto first = token->Get(); !first.ok()) {
      if (fallback) {  // tried because nothing else was configured: say so first
        return FailedPrecondition(std::string(kNoGcsCredentials) + " (" + first.status().message() + ")")
            .WithContext(context);
      }
      return first.status().WithContext(context);
    }
  }
  INSITU_ASSIGN_OR_RETURN(auto transport, CurlTransport::Create(std::move(options.transport)));
  std::shared_ptr<GcsStore> store(new GcsStore());
  store->location_ = std::move(location);
  store->origin_ = parsed->scheme + "://" + parsed->Authority();
  store->base_path_ = parsed->path;
  store->token_ = std::move(token);
  store->transport_ = std::move(transport);
  store->max_body_bytes_ = options.max_body_bytes;
  store->writable_ = options.writable;
  store->part_bytes_ = options.multipart_part_bytes;
  return store;
}

void GcsStore::Authorize(HttpRequest& request) const {
  if (!token_) return;
  request.sign = [token = token_](const HttpRequest&) -> Result<std::vector<std::string>> {
    INSITU_ASSIGN_OR_RETURN(std::string value, token->Get());
    return std::vector<std::string>{"Authorization: Bearer " + value};
  };
}

std::string GcsStore::ObjectKey(std::string_view key) const {
  if (location_.prefix.empty()) return std::string(key);
  if (key.empty()) return location_.prefix;
  return location_.prefix + "/" + std::string(key);
}

std::string GcsStore::Describe(std::string_view key) const {
  const std::string object = ObjectKey(key);
  return "gs://" + location_.bucket + (object.empty() ? "" : "/" + object);
}

void GcsStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  if (Status valid = ValidateKey(key); !valid.ok()) {
    done(std::move(valid));
    return;
  }
  HttpRequest request;
  request.url =
      origin_ + base_path_ + "/" + location_.bucket + "/" + PercentEncode(ObjectKey(key), /*keep_slash=*/true);
  request.where = Describe(key);
  Authorize(request);
  request.range = range;
  request.max_body_bytes = max_body_bytes_;
  request.cancel = std::move(cancel);
  ReadObject(*transport_, std::move(request), std::move(done));
}

Result<std::vector<std::string>> GcsStore::List(std::string_view prefix) {
  INSITU_ASSIGN_OR_RETURN(std::vector<ObjectGeneration> objects, Listing(prefix, /*generations=*/false));
  std::vector<std::string> keys;
  keys.reserve(objects.size());
  for (ObjectGeneration& o : objects) keys.push_back(std::move(o.key));
  return keys;
}

Result<std::vector<ObjectGeneration>> GcsStore::ListGenerations(std::string_view prefix) {
  return Listing(prefix, /*generations=*/true);
}

Result<std::vector<ObjectGeneration>> GcsStore::Listing(std::string_view prefix, bool generations) {
  const std::string root = ListingRoot(location_.prefix);
  const std::string list_prefix = root + std::string(prefix);
  return CollectListingGenerations("listing " + Describe(""), root, "object", "page token",
                                   [&](const std::string& token) -> Result<ListPage> {
                                     return ListingPage(list_prefix, token, generations, /*delimited=*/false);
                                   });
}

Result<DirListing> GcsStore::ListDir(std::string_view dir) {
  return CollectDirListing("listing " + Describe(dir), ListingRoot(location_.prefix), dir, "object", "page token",
                           [&](const std::string& list_prefix, const std::string& token) {
                             return ListingPage(list_prefix, token, /*generations=*/false, /*delimited=*/true);
                           });
}

Result<ListPage> GcsStore::ListingPage(const std::string& list_prefix, const std::string& token, bool generations,
                                       bool delimited) {
  const std::string context = "listing " + Describe("");
  std::vector<std::pair<std::string, std::string>> query = {
      {"prefix", list_prefix},
      {"fields", std::string(generations ? "items(name,generation)" : "items(name)") +
                     (delimited ? ",prefixes,nextPageToken" : ",nextPageToken")}};
  if (delimited) query.push_back({"delimiter", "/"});
  if (!token.empty()) query.push_back({"pageToken", token});
  HttpRequest request;
  request.url = origin_ + base_path_ + "/storage/v1/b/" + PercentEncode(location_.bucket, /*keep_slash=*/false) +
                "/o?" + CanonicalQueryString(std::move(query));
  request.where = Describe("");
  Authorize(request);
  request.max_body_bytes = kMaxListBody;
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status != 200) {
    const std::string what = DescribeHttpError(response.status, response.error_body);
    const int detail = static_cast<int>(response.status);
    if (response.status == 404) return NotFound(context + ": " + what).set_detail(detail);
    std::string message = context + ": " + what;
    if (response.status == 401 || response.status == 403) {
      message += "; listing needs storage.objects.list permission (consolidated metadata avoids it)";
    }
    return IoError(std::move(message)).set_detail(detail);
  }
  const std::string_view body(reinterpret_cast<const char*>(response.body.data()), response.body.size());
  auto page = ParseGcsListPage(body);
  if (!page.ok()) return page.status().WithContext(context);
  if (generations && page->generations.empty() && !page->names.empty()) {
    return Unimplemented(context + ": the listing carries no object generations");
  }
  return ListPage{std::move(page->names), std::move(page->next_page_token), std::move(page->generations),
                  std::move(page->prefixes)};
}

}  // namespace insitubatch
