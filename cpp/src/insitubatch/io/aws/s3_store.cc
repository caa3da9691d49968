#include "insitubatch/io/aws/s3_store.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "insitubatch/io/http/http_store.h"  // ReadObject
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {
namespace {

// A 301/400 from S3 often means "wrong region": say which one the bucket is in.
std::string RegionHint(const HttpResponse& response, const std::string& region) {
  std::string hint;
  if (!response.bucket_region.empty() && response.bucket_region != region) {
    hint = "; the bucket is in region " + response.bucket_region + ", not " + region + ": pass region=\"" +
           response.bucket_region + "\"";
  }
  return hint;
}

}  // namespace

Result<std::shared_ptr<S3Store>> S3Store::Open(const std::string& url, S3StoreOptions options, const EnvLookup& env) {
  INSITU_ASSIGN_OR_RETURN(BucketUrl location, ParseBucketUrl(url, "s3"));
  if (options.multipart_part_bytes < S3StoreOptions::kMinPartBytes) {
    return InvalidArgument("multipart_part_size " + std::to_string(options.multipart_part_bytes) +
                           " is below S3's smallest part, 5 MiB (5242880 bytes)");
  }
  AwsConfigRequest request;
  request.access_key_id = options.access_key_id;
  request.secret_access_key = options.secret_access_key;
  request.session_token = options.session_token;
  request.profile = options.profile;
  request.region = options.region;
  request.need_credentials = !options.skip_signature;
  auto config = ResolveAwsConfig(request, env);
  if (!config.ok()) return config.status().WithContext("opening s3://" + location.bucket);

  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    endpoint = env("AWS_ENDPOINT_URL_S3").value_or(env("AWS_ENDPOINT_URL").value_or(""));
  }
  INSITU_ASSIGN_OR_RETURN(S3Endpoint resolved,
                          ResolveS3Endpoint(location.bucket, config->region, endpoint, options.virtual_hosted_style));
  INSITU_ASSIGN_OR_RETURN(auto transport, CurlTransport::Create(std::move(options.transport)));

  std::shared_ptr<AwsCredentialProvider> credentials;
  if (!options.skip_signature && config->credentials) {
    credentials = FixedCredentials(std::move(*config->credentials), config->credentials_source);
  } else if (!options.skip_signature && config->ambient) {
    // Fetched now, so a missing role fails here rather than at the first read.
    auto ambient = MakeAmbientCredentials(*config->ambient);
    if (auto first = ambient->Get(); !first.ok()) {
      if (config->ambient->kind == AmbientCredentialSource::Kind::kInstanceMetadata) {
        // The last resort, tried because nothing else was configured: say so first.
        return FailedPrecondition(std::string(kNoAwsCredentials) + " (" + first.status().message() + ")")
            .WithContext("opening s3://" + location.bucket);
      }
      return first.status().WithContext("opening s3://" + location.bucket);
    }
    credentials = std::move(ambient);
  }

  std::shared_ptr<S3Store> store(new S3Store());
  store->location_ = std::move(location);
  store->region_ = config->region;
  store->endpoint_ = std::move(resolved);
  if (credentials) store->credentials_source_ = credentials->source();
  store->signer_ = std::make_shared<const S3Signer>(std::move(credentials), config->region, store->endpoint_.host,
                                                    options.request_payer);
  store->transport_ = std::move(transport);
  store->max_body_bytes_ = options.max_body_bytes;
  store->writable_ = options.writable;
  store->part_bytes_ = options.multipart_part_bytes;
  return store;
}

std::string S3Store::ObjectKey(std::string_view key) const {
  if (location_.prefix.empty()) return std::string(key);
  if (key.empty()) return location_.prefix;
  return location_.prefix + "/" + std::string(key);
}

std::string S3Store::Describe(std::string_view key) const {
  const std::string object = ObjectKey(key);
  return "s3://" + location_.bucket + (object.empty() ? "" : "/" + object);
}

HttpRequest S3Store::MakeRequest(std::string path, std::vector<std::pair<std::string, std::string>> query,
                                 std::string where, ByteRange range) const {
  HttpRequest request;
  request.url = endpoint_.origin + path;
  if (!query.empty()) request.url += "?" + CanonicalQueryString(query);
  request.where = std::move(where);
  request.range = range;
  request.max_body_bytes = max_body_bytes_;
  // The signer is shared and immutable; each attempt signs with the current time.
  request.sign = [signer = signer_, path = std::move(path), query = std::move(query)](const HttpRequest& r) {
    return signer->Sign(r.method, path, query, RangeHeaderValue(r.range), AmzDate(std::chrono::system_clock::now()),
                        !r.payload().empty());
  };
  return request;
}

void S3Store::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  if (Status valid = ValidateKey(key); !valid.ok()) {
    done(std::move(valid));
    return;
  }
  const std::string path = endpoint_.bucket_path + "/" + PercentEncode(ObjectKey(key), /*keep_slash=*/true);
  HttpRequest request = MakeRequest(path, {}, Describe(key), range);
  if (NeedsHead(range)) request.method = "HEAD";
  AddReadCondition(request);
  request.cancel = std::move(cancel);
  const std::string where = request.where;
  transport_->Submit(std::move(request), [range, where, region = region_, bucket = location_.bucket,
                                          done = std::move(done)](Result<HttpResponse> response) {
    if (!response.ok()) {
      done(std::move(response).status());
      return;
    }
    const long status = response->status;
    if (status == 404 && XmlFirstText(response->error_body, "Code") == "NoSuchBucket") {
      done(NotFound("reading " + where + ": bucket " + bucket + " does not exist"));
      return;
    }
    if (status == 301 || status == 307 || status == 400) {
      const std::string hint = RegionHint(*response, region);
      if (!hint.empty()) {
        done(IoError("reading " + where + range.Describe() + ": " + DescribeHttpError(status, response->error_body) +
                     hint)
                 .set_detail(static_cast<int>(status)));
        return;
      }
    }
    done(ObjectReadFromResponse(range, std::move(response).value(), where));
  });
}

Status S3Store::ListError(long status, const HttpResponse& response) const {
  const std::string context = "listing " + Describe("");
  const std::string what = DescribeHttpError(status, response.error_body);
  if (status == 404) return NotFound(context + ": " + what).set_detail(static_cast<int>(status));
  std::string message = context + ": " + what + RegionHint(response, region_);
  if (status == 401 || status == 403) {
    message += "; listing needs s3:ListBucket permission (consolidated metadata avoids it)";
  }
  return IoError(std::move(message)).set_detail(static_cast<int>(status));
}

Result<std::vector<std::string>> S3Store::List(std::string_view prefix) {
  INSITU_ASSIGN_OR_RETURN(std::vector<ObjectGeneration> objects, Listing(prefix, /*generations=*/false));
  std::vector<std::string> keys;
  keys.reserve(objects.size());
  for (ObjectGeneration& o : objects) keys.push_back(std::move(o.key));
  return keys;
}

Result<std::vector<ObjectGeneration>> S3Store::ListGenerations(std::string_view prefix) {
  return Listing(prefix, /*generations=*/true);
}

Result<std::vector<ObjectGeneration>> S3Store::Listing(std::string_view prefix, bool generations) {
  const std::string root = ListingRoot(location_.prefix);
  const std::string list_prefix = root + std::string(prefix);
  return CollectListingGenerations("listing " + Describe(""), root, "key", "continuation token",
                                   [&](const std::string& token) -> Result<ListPage> {
                                     return ListingPage(list_prefix, token, generations, /*delimited=*/false);
                                   });
}

Result<DirListing> S3Store::ListDir(std::string_view dir) {
  return CollectDirListing("listing " + Describe(dir), ListingRoot(location_.prefix), dir, "key", "continuation token",
                           [&](const std::string& list_prefix, const std::string& token) {
                             return ListingPage(list_prefix, token, /*generations=*/false, /*delimited=*/true);
                           });
}

Result<ListPage> S3Store::ListingPage(const std::string& list_prefix, const std::string& token, bool generations,
                                      bool delimited) {
  const std::string path = endpoint_.bucket_path.empty() ? "/" : endpoint_.bucket_path;
  const std::string context = "listing " + Describe("");
  std::vector<std::pair<std::string, std::string>> query = {{"list-type", "2"}, {"prefix", list_prefix}};
  if (delimited) query.push_back({"delimiter", "/"});
  if (!token.empty()) query.push_back({"continuation-token", token});
  HttpRequest request = MakeRequest(path, std::move(query), Describe(""), ByteRange::All());
  request.max_body_bytes = kMaxListBody;
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status != 200) return ListError(response.status, response);
  const std::string_view body(reinterpret_cast<const char*>(response.body.data()), response.body.size());
  auto page = ParseListObjectsV2(body);
  if (!page.ok()) return page.status().WithContext(context);
  if (!generations) {
    page->etags.clear();
  } else if (page->etags.empty() && !page->keys.empty()) {
    return Unimplemented(context + ": the listing carries no ETags");
  }
  for (std::string& etag : page->etags) etag = QuotedEtag(etag);
  ListPage out{
      std::move(page->keys), page->truncated ? std::move(page->next_token) : std::string(), std::move(page->etags), {}};
  // Every <Prefix>: the request's own echoed, then each CommonPrefixes entry.
  for (std::string& prefix : page->prefixes) {
    if (delimited && prefix != list_prefix) out.dirs.push_back(std::move(prefix));
  }
  return out;
}

}  // namespace insitubatch
