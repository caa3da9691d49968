#include "insitubatch/io/azure/azure_store.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <optional>
#include <utility>

#include "insitubatch/io/aws/aws_sigv4.h"    // CanonicalQueryString, HmacSha256
#include "insitubatch/io/http/http_store.h"  // ReadObject
#include "insitubatch/io/http/xml_text.h"
#include "insitubatch/util/base64.h"
#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

constexpr char kEmulatorEndpoint[] = "http://127.0.0.1:10000";
constexpr std::string_view kHostSuffixes[] = {".blob.core.windows.net", ".dfs.core.windows.net"};

Status CheckAccount(const std::string& account, std::string_view url) {
  const bool ok = account.size() >= 3 && account.size() <= 24 &&
                  std::all_of(account.begin(), account.end(),
                              [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
  if (!ok) {
    return InvalidArgument("Azure storage account \"" + account + "\" (in " + std::string(url) +
                           ") must be 3-24 lower-case letters and digits");
  }
  return Status::Ok();
}

Status CheckContainer(const std::string& container, std::string_view url) {
  const bool ok =
      !container.empty() && container.size() <= 63 && std::all_of(container.begin(), container.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '$';
      });
  if (!ok) {
    return InvalidArgument("Azure container \"" + container + "\" (in " + std::string(url) +
                           ") must be lower-case letters, digits and '-'");
  }
  return Status::Ok();
}

// "account" of "account.blob.core.windows.net"; "" when the host is no Azure blob host.
std::string AccountOfHost(std::string_view host) {
  const std::string lower = AsciiLower(host);
  for (std::string_view suffix : kHostSuffixes) {
    const size_t dot = lower.find('.');  // the account is the first label, as obstore splits it
    if (dot != std::string::npos && lower.substr(dot) == suffix) return lower.substr(0, dot);
  }
  return "";
}

bool Truthy(std::string_view value) {
  const std::string v = AsciiLower(value);
  return v == "1" || v == "true" || v == "on" || v == "yes" || v == "y";
}

// "name: value" -> (lower-case name, value without leading blanks).
std::pair<std::string, std::string> SplitHeader(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return {AsciiLower(line), ""};
  return {AsciiLower(line.substr(0, colon)), std::string(TrimSpace(line.substr(colon + 1)))};
}

}  // namespace

Result<AzureUrl> ParseAzureUrl(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return InvalidArgument("Azure URL " + std::string(url) + " has no scheme");
  const std::string scheme = AsciiLower(url.substr(0, sep));
  std::string_view rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  const std::string authority(rest.substr(0, slash));
  std::string path(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  if (authority.empty()) return InvalidArgument("Azure URL " + std::string(url) + " names no container");
  if (path.find_first_of("?#") != std::string::npos) {
    return InvalidArgument("Azure URL " + std::string(url) +
                           " must not carry a query string (pass a SAS token as sas_key=)");
  }
  AzureUrl out;
  if (StoreSchemeOf(scheme) == "az") {  // az:// and its aliases
    const size_t at = authority.find('@');
    if (at == std::string::npos) {
      out.container = authority;
    } else {
      out.container = authority.substr(0, at);
      out.account = AccountOfHost(authority.substr(at + 1));
      if (out.account.empty()) {
        return InvalidArgument("Azure URL " + std::string(url) +
                               ": the host after '@' must be <account>.blob.core.windows.net or"
                               " <account>.dfs.core.windows.net");
      }
    }
  } else if (scheme == "https") {
    out.account = AccountOfHost(authority);
    if (out.account.empty()) {
      if (AsciiLower(authority).find(".fabric.microsoft.com") != std::string::npos) {
        return Unimplemented("Microsoft Fabric (OneLake) URLs are not supported: " + std::string(url));
      }
      return InvalidArgument("an https:// Azure URL must name <account>.blob.core.windows.net, not " +
                             std::string(url));
    }
    const size_t first = path.find('/');
    out.container = path.substr(0, first);
    path = first == std::string::npos ? "" : path.substr(first + 1);
    if (out.container.empty()) return InvalidArgument("Azure URL " + std::string(url) + " names no container");
  } else {
    std::string schemes;
    for (const auto& [written, served] : StoreSchemes()) {
      if (served == "az") schemes += std::string(written) + ", ";
    }
    return InvalidArgument("\"" + scheme + "://\" is not an Azure URL scheme (" + schemes + "https)");
  }
  INSITU_RETURN_IF_ERROR(CheckContainer(out.container, url));
  if (!out.account.empty()) INSITU_RETURN_IF_ERROR(CheckAccount(out.account, url));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.empty()) {
    if (Status valid = ValidateKey(path); !valid.ok()) {
      return InvalidArgument("Azure URL " + std::string(url) + ": the path is not a valid prefix (" + valid.message() +
                             ")");
    }
  }
  out.prefix = std::move(path);
  return out;
}

std::string AzureStringToSign(std::string_view method, const std::vector<std::string>& headers,
                              std::string_view account, std::string_view path, const QueryPairs& query) {
  std::map<std::string, std::string> standard;
  std::vector<std::pair<std::string, std::string>> x_ms;
  for (const std::string& line : headers) {
    auto [name, value] = SplitHeader(line);
    if (name.starts_with("x-ms-")) {
      x_ms.emplace_back(std::move(name), std::move(value));
    } else {
      standard[name] = std::move(value);
    }
  }
  if (standard["content-length"] == "0") standard["content-length"] = "";
  std::string out(method);
  out += '\n';
  for (const char* slot : {"content-encoding", "content-language", "content-length", "content-md5", "content-type",
                           "date", "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"}) {
    out += standard[slot];
    out += '\n';
  }
  std::sort(x_ms.begin(), x_ms.end());
  for (const auto& [name, value] : x_ms) out += name + ":" + value + "\n";
  out += "/" + std::string(account) + std::string(path);
  std::map<std::string, std::vector<std::string>> params;
  for (const auto& [name, value] : query) params[AsciiLower(name)].push_back(value);
  for (auto& [name, values] : params) {
    std::sort(values.begin(), values.end());
    out += "\n" + name + ":";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + values[i];
  }
  return out;
}

std::string AzureSharedKeyAuthorization(std::string_view account, std::string_view key,
                                        std::string_view string_to_sign) {
  return "SharedKey " + std::string(account) + ":" + EncodeBase64(HmacSha256(key, string_to_sign));
}

std::string Rfc1123Date(SystemTime when) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[40];
  std::snprintf(text, sizeof(text), "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
                kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return text;
}

namespace {

// A listed name holding characters XML cannot carry comes percent-encoded, marked
// Encoded="true": decoded in place.
Status DecodeListedName(XmlElement& name) {
  if (!XmlHasAttribute(name.attributes, "Encoded", "true")) return Status::Ok();
  std::optional<std::string> decoded = PercentDecode(name.text, /*strict=*/true);
  if (!decoded) {
    return InvalidArgument("Azure List Blobs reply: <Name Encoded=\"true\"> \"" + name.text.substr(0, 200) +
                           "\" is not percent-encoded");
  }
  name.text = std::move(*decoded);
  return Status::Ok();
}

}  // namespace

Result<AzureListPage> ParseAzureListPage(std::string_view xml) {
  if (xml.find("<EnumerationResults") == std::string_view::npos) {
    return InvalidArgument("Azure List Blobs reply is not an <EnumerationResults> document");
  }
  AzureListPage page;
  // A listing with a delimiter holds <BlobPrefix><Name>p/a/</Name></BlobPrefix> beside the
  // blobs: each is read as a subdirectory and cut out before the blobs' names are read.
  std::string blobs;
  size_t pos = 0;
  for (size_t open; (open = xml.find("<BlobPrefix>", pos)) != std::string_view::npos;) {
    const size_t close = xml.find("</BlobPrefix>", open);
    if (close == std::string_view::npos) return InvalidArgument("Azure List Blobs reply: <BlobPrefix> is never closed");
    INSITU_ASSIGN_OR_RETURN(std::vector<XmlElement> prefix, XmlElements(xml.substr(open, close - open), "Name"));
    if (prefix.size() != 1) return InvalidArgument("Azure List Blobs reply: a <BlobPrefix> without one <Name>");
    INSITU_RETURN_IF_ERROR(DecodeListedName(prefix.front()));
    page.prefixes.push_back(std::move(prefix.front().text));
    blobs.append(xml.substr(pos, open - pos));
    pos = close + std::string_view("</BlobPrefix>").size();
  }
  blobs.append(xml.substr(pos));
  INSITU_ASSIGN_OR_RETURN(std::vector<XmlElement> names, XmlElements(blobs, "Name"));
  for (XmlElement& name : names) {
    INSITU_RETURN_IF_ERROR(DecodeListedName(name));
    page.names.push_back(std::move(name.text));
  }
  // One <Properties><Etag> per <Blob>, bare ("0x8D..."), where a read's ETag header quotes it.
  INSITU_ASSIGN_OR_RETURN(page.etags, XmlElementTexts(blobs, "Etag"));
  if (page.etags.size() != page.names.size()) page.etags.clear();
  for (std::string& etag : page.etags) etag = QuotedEtag(etag);
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> markers, XmlElementTexts(blobs, "NextMarker"));
  if (markers.size() > 1) return InvalidArgument("Azure List Blobs reply holds more than one <NextMarker>");
  if (!markers.empty()) page.next_marker = std::move(markers.front());
  return page;
}

Result<std::shared_ptr<AzureStore>> AzureStore::Open(const std::string& url, AzureStoreOptions options,
                                                     const EnvLookup& env) {
  INSITU_ASSIGN_OR_RETURN(AzureUrl location, ParseAzureUrl(url));
  if (options.block_bytes == 0 || options.block_bytes > AzureStoreOptions::kMaxBlockBytes) {
    return InvalidArgument("multipart_part_size " + std::to_string(options.block_bytes) +
                           " must be between 1 byte and Azure's largest block, 4000 MiB (4194304000 bytes)");
  }
  const bool emulator = options.use_emulator || Truthy(NonEmptyEnv(env, "AZURE_STORAGE_USE_EMULATOR").value_or(""));
  std::string account = location.account;
  if (!options.account_name.empty()) {
    if (!account.empty() && account != options.account_name) {
      return InvalidArgument("account_name=\"" + options.account_name + "\" disagrees with the URL's account \"" +
                             account + "\"");
    }
    account = options.account_name;
  }
  if (account.empty()) account = NonEmptyEnv(env, "AZURE_STORAGE_ACCOUNT_NAME").value_or("");
  if (account.empty() && emulator) account = kAzureEmulatorAccount;
  if (account.empty()) {
    return InvalidArgument("opening " + url +
                           ": no storage account: pass account_name=, set "
                           "AZURE_STORAGE_ACCOUNT_NAME, or write the URL as "
                           "az://container@<account>.blob.core.windows.net/...");
  }
  INSITU_RETURN_IF_ERROR(CheckAccount(account, url));

  std::string endpoint = options.endpoint;
  if (endpoint.empty() && emulator) endpoint = NonEmptyEnv(env, "AZURITE_BLOB_STORAGE_URL").value_or(kEmulatorEndpoint);
  if (endpoint.empty()) {
    endpoint = NonEmptyEnv(env, "AZURE_STORAGE_ENDPOINT").value_or(NonEmptyEnv(env, "AZURE_ENDPOINT").value_or(""));
  }
  if (endpoint.empty()) endpoint = "https://" + account + ".blob.core.windows.net";
  auto parsed = ParseHttpUrl(endpoint);
  if (!parsed.ok()) return parsed.status().WithContext("Azure endpoint");
  if (!parsed->userinfo.empty() || !parsed->query.empty()) {
    return InvalidArgument("Azure endpoint " + parsed->Redacted() + " must not carry credentials or a query string");
  }

  std::shared_ptr<AzureStore> store(new AzureStore());
  store->location_ = std::move(location);
  store->account_ = account;
  store->origin_ = parsed->scheme + "://" + parsed->Authority();
  // The emulator serves every account from one host: the account is the first segment.
  store->container_path_ = parsed->path + (emulator ? "/" + account : "") + "/" + store->location_.container;
  store->container_url_ = store->origin_ + store->container_path_;
  store->max_body_bytes_ = options.max_body_bytes;
  store->writable_ = options.writable;
  store->block_bytes_ = options.block_bytes;
  if (!options.skip_signature) {
    const std::string context = "opening " + store->Describe("");
    auto source = ResolveAzureCredentials(options.credentials, env, emulator);
    if (!source.ok()) return source.status().WithContext(context);
    if (source->fetches_token()) {
      const bool fallback = source->kind == AzureCredentialSource::Kind::kManagedIdentity;
      store->token_ = MakeAzureToken(*source);
      // Fetched now, so a wrong secret or a missing identity fails here, not at a read.
      if (auto first = store->token_->Get(); !first.ok()) {
        if (fallback) {  // tried because nothing else was configured: say so first
          return FailedPrecondition(std::string(kNoAzureCredentials) + " (" + first.status().message() + ")")
              .WithContext(context);
        }
        return first.status().WithContext(context);
      }
    }
    store->source_ = std::make_shared<const AzureCredentialSource>(std::move(source).value());
  }
  INSITU_ASSIGN_OR_RETURN(store->transport_, CurlTransport::Create(std::move(options.transport)));
  return store;
}

std::string AzureStore::BlobName(std::string_view key) const {
  if (location_.prefix.empty()) return std::string(key);
  if (key.empty()) return location_.prefix;
  return location_.prefix + "/" + std::string(key);
}

std::string AzureStore::Describe(std::string_view key) const {
  const std::string blob = BlobName(key);
  return "az://" + location_.container + (blob.empty() ? "" : "/" + blob);
}

std::string AzureStore::Url(const std::string& path, const QueryPairs& query) const {
  QueryPairs all = query;
  if (source_ && source_->kind == AzureCredentialSource::Kind::kSas) {
    all.insert(all.end(), source_->sas.begin(), source_->sas.end());
  }
  return origin_ + path + (all.empty() ? "" : "?" + CanonicalQueryString(std::move(all)));
}

void AzureStore::Authorize(HttpRequest& request, std::string path, QueryPairs query) const {
  request.sign = [source = source_, token = token_, account = account_, path = std::move(path),
                  query = std::move(query)](const HttpRequest& r) -> Result<std::vector<std::string>> {
    std::vector<std::string> lines = {"x-ms-date: " + Rfc1123Date(std::chrono::system_clock::now()),
                                      "x-ms-version: " + std::string(kAzureApiVersion)};
    using Kind = AzureCredentialSource::Kind;
    if (!source || source->kind == Kind::kSas) return lines;  // SAS: in the query
    if (source->kind == Kind::kSharedKey) {
      std::vector<std::string> signed_lines = r.headers;
      signed_lines.insert(signed_lines.end(), lines.begin(), lines.end());
      if (r.method == "PUT" || r.method == "POST") {  // the transport sends it with the body
        signed_lines.push_back("Content-Length: " + std::to_string(r.payload().size()));
      }
      if (const std::string range = RangeHeaderValue(r.range); !range.empty()) {
        signed_lines.push_back(r.range_header + ": " + range);  // the transport adds it
      }
      lines.push_back("Authorization: " +
                      AzureSharedKeyAuthorization(account, source->key,
                                                  AzureStringToSign(r.method, signed_lines, account, path, query)));
      return lines;
    }
    std::string bearer = source->token;
    if (token) {
      INSITU_ASSIGN_OR_RETURN(bearer, token->Get());
    }
    lines.push_back("Authorization: Bearer " + bearer);
    return lines;
  };
}

void AzureStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  if (Status valid = ValidateKey(key); !valid.ok()) {
    done(std::move(valid));
    return;
  }
  std::string path = container_path_ + "/" + PercentEncode(BlobName(key), /*keep_slash=*/true);
  HttpRequest request;
  request.url = Url(path, {});
  request.where = Describe(key);
  request.range = range;
  request.range_header = "x-ms-range";
  request.max_body_bytes = max_body_bytes_;
  request.cancel = std::move(cancel);
  Authorize(request, std::move(path), {});
  ReadObject(*transport_, std::move(request), std::move(done));
}

Result<std::vector<std::string>> AzureStore::List(std::string_view prefix) {
  INSITU_ASSIGN_OR_RETURN(std::vector<ObjectGeneration> objects, Listing(prefix, /*generations=*/false));
  std::vector<std::string> keys;
  keys.reserve(objects.size());
  for (ObjectGeneration& o : objects) keys.push_back(std::move(o.key));
  return keys;
}

Result<std::vector<ObjectGeneration>> AzureStore::ListGenerations(std::string_view prefix) {
  return Listing(prefix, /*generations=*/true);
}

Result<std::vector<ObjectGeneration>> AzureStore::Listing(std::string_view prefix, bool generations) {
  const std::string root = ListingRoot(location_.prefix);
  const std::string list_prefix = root + std::string(prefix);
  return CollectListingGenerations("listing " + Describe(""), root, "blob", "NextMarker",
                                   [&](const std::string& marker) -> Result<ListPage> {
                                     return ListingPage(list_prefix, marker, generations, /*delimited=*/false);
                                   });
}

Result<DirListing> AzureStore::ListDir(std::string_view dir) {
  return CollectDirListing("listing " + Describe(dir), ListingRoot(location_.prefix), dir, "blob", "NextMarker",
                           [&](const std::string& list_prefix, const std::string& marker) {
                             return ListingPage(list_prefix, marker, /*generations=*/false, /*delimited=*/true);
                           });
}

Result<ListPage> AzureStore::ListingPage(const std::string& list_prefix, const std::string& marker, bool generations,
                                         bool delimited) {
  const std::string context = "listing " + Describe("");
  QueryPairs query = {{"restype", "container"}, {"comp", "list"}, {"prefix", list_prefix}};
  if (delimited) query.emplace_back("delimiter", "/");
  if (!marker.empty()) query.emplace_back("marker", marker);
  HttpRequest request;
  request.url = Url(container_path_, query);
  request.where = Describe("");
  request.max_body_bytes = kMaxListBody;
  Authorize(request, container_path_, std::move(query));
  INSITU_ASSIGN_OR_RETURN(HttpResponse response, transport_->Send(std::move(request)));
  if (response.status != 200) {
    const std::string what = DescribeHttpError(response.status, response.error_body);
    const int detail = static_cast<int>(response.status);
    if (response.status == 404) {
      return NotFound(context + ": " + what + " (no container " + location_.container + " in account " + account_ +
                      "?)")
          .set_detail(detail);
    }
    std::string message = context + ": " + what;
    if (response.status == 401 || response.status == 403) {
      message += "; listing needs the List permission (a SAS token needs sp=l; consolidated metadata avoids it)";
    }
    return IoError(std::move(message)).set_detail(detail);
  }
  const std::string_view body(reinterpret_cast<const char*>(response.body.data()), response.body.size());
  auto page = ParseAzureListPage(body);
  if (!page.ok()) return page.status().WithContext(context);
  if (!generations) {
    page->etags.clear();
  } else if (page->etags.empty() && !page->names.empty()) {
    return Unimplemented(context + ": the listing carries no ETags");
  }
  return ListPage{std::move(page->names), std::move(page->next_marker), std::move(page->etags),
                  std::move(page->prefixes)};
}

}  // namespace insitubatch
