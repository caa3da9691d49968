#include "insitubatch/io/azure/azure_credentials.h"

#include <charconv>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "insitubatch/io/credential_exchange.h"
#include "insitubatch/io/http/http_request.h"
#include "insitubatch/util/base64.h"
#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

constexpr std::string_view kStorageScope = "https://storage.azure.com/.default";
constexpr std::string_view kStorageResource = "https://storage.azure.com";
constexpr std::string_view kAuthorityHost = "https://login.microsoftonline.com";
constexpr std::string_view kImdsEndpoint = "http://169.254.169.254/metadata/identity/oauth2/token";

// An option, else the first environment variable that holds it; `where` says which.
struct Setting {
  std::string value, where;
  explicit operator bool() const { return !value.empty(); }
};

Setting Pick(const std::string& option, std::string_view option_name, const EnvLookup& env,
             std::initializer_list<std::string_view> env_names) {
  if (!option.empty()) return {option, "the " + std::string(option_name) + " argument"};
  for (std::string_view name : env_names) {
    if (auto value = NonEmptyEnv(env, name)) return {*value, std::string(name)};
  }
  return {};
}

}  // namespace

std::string AzureCredentialSource::Describe() const {
  switch (kind) {
    case Kind::kBearer:
      return "a bearer token (" + where + ")";
    case Kind::kSharedKey:
      return "the account key (" + where + ")";
    case Kind::kSas:
      return "a SAS token (" + where + ")";
    case Kind::kWorkloadIdentity:
      return "workload identity " + client_id + " (token file " + token_file + ")";
    case Kind::kClientSecret:
      return "service principal " + client_id + " (" + where + ")";
    case Kind::kManagedIdentity:
    default:  // out-of-range values: the fallback below
      break;
  }
  return "managed identity" + (identity_value.empty() ? "" : " " + identity_value) + " at " + endpoint;
}

Result<QueryPairs> ParseSasToken(std::string_view text) {
  const std::optional<std::string> decoded = PercentDecode(text, /*strict=*/true);
  if (!decoded) return InvalidArgument("the SAS token holds a malformed %-escape");
  std::string_view rest = *decoded;
  while (!rest.empty() && rest.front() == '?') rest.remove_prefix(1);
  QueryPairs out;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string piece(TrimSpace(rest.substr(0, amp)));
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (piece.empty()) continue;
    const size_t eq = piece.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("the SAS token has a parameter without '=' (expected name=value pairs)");
    }
    out.emplace_back(piece.substr(0, eq), piece.substr(eq + 1));
  }
  if (out.empty()) return InvalidArgument("the SAS token is empty");
  for (const auto& [name, value] : out) {
    for (char c : name + value) {
      if (static_cast<unsigned char>(c) < 0x20) return InvalidArgument("the SAS token holds control characters");
    }
  }
  return out;
}

Result<AzureCredentialSource> ResolveAzureCredentials(const AzureCredentialRequest& request, const EnvLookup& env,
                                                      bool emulator) {
  AzureCredentialSource source;
  const Setting token = Pick(request.token, "token", env, {"AZURE_STORAGE_TOKEN"});
  const Setting key = Pick(request.account_key, "account_key", env,
                           {"AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_MASTER_KEY"});
  const Setting client_id = Pick(request.client_id, "client_id", env, {"AZURE_STORAGE_CLIENT_ID", "AZURE_CLIENT_ID"});
  const Setting secret =
      Pick(request.client_secret, "client_secret", env, {"AZURE_STORAGE_CLIENT_SECRET", "AZURE_CLIENT_SECRET"});
  const Setting tenant =
      Pick(request.tenant_id, "tenant_id", env,
           {"AZURE_STORAGE_TENANT_ID", "AZURE_STORAGE_AUTHORITY_ID", "AZURE_TENANT_ID", "AZURE_AUTHORITY_ID"});
  const Setting authority =
      Pick(request.authority_host, "authority_host", env, {"AZURE_STORAGE_AUTHORITY_HOST", "AZURE_AUTHORITY_HOST"});
  const Setting token_file =
      Pick(request.federated_token_file, "federated_token_file", env, {"AZURE_FEDERATED_TOKEN_FILE"});
  const Setting sas = Pick(request.sas_key, "sas_key", env, {"AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN"});

  auto entra = [&](AzureCredentialSource::Kind kind) -> Result<AzureCredentialSource> {
    source.kind = kind;
    source.client_id = client_id.value;
    source.tenant_id = tenant.value;
    source.where = client_id.where;
    source.authority_host = authority ? authority.value : std::string(kAuthorityHost);
    while (!source.authority_host.empty() && source.authority_host.back() == '/') source.authority_host.pop_back();
    if (source.authority_host.find("://") == std::string::npos) {
      return InvalidArgument("authority_host " + source.authority_host + " must be a URL (https://...)");
    }
    for (char c : source.tenant_id) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
        return InvalidArgument("tenant_id (" + tenant.where + ") must be a tenant id or domain");
      }
    }
    return source;
  };

  if (token) {
    source.kind = AzureCredentialSource::Kind::kBearer;
    source.where = token.where;
    source.token = token.value;
    INSITU_RETURN_IF_ERROR(CheckBearerToken(source.token, source.where));
    return source;
  }
  if (key || (emulator && !sas)) {
    source.kind = AzureCredentialSource::Kind::kSharedKey;
    source.where = key ? key.where : "the emulator's well-known key";
    auto decoded = DecodeBase64(key ? key.value : std::string(kAzureEmulatorKey));
    if (!decoded.ok() || decoded->empty()) {
      return InvalidArgument("the account key (" + source.where + ") is not base64");
    }
    source.key = std::move(decoded).value();
    return source;
  }
  if (client_id && tenant && token_file) {
    INSITU_RETURN_IF_ERROR(entra(AzureCredentialSource::Kind::kWorkloadIdentity).status());
    source.token_file = token_file.value;
    return source;
  }
  if (client_id && secret && tenant) {
    INSITU_RETURN_IF_ERROR(entra(AzureCredentialSource::Kind::kClientSecret).status());
    source.client_secret = secret.value;
    return source;
  }
  if (sas) {
    source.kind = AzureCredentialSource::Kind::kSas;
    source.where = sas.where;
    auto pairs = ParseSasToken(sas.value);
    if (!pairs.ok()) return pairs.status().WithContext(sas.where);
    source.sas = std::move(pairs).value();
    return source;
  }
  source.kind = AzureCredentialSource::Kind::kManagedIdentity;
  const Setting endpoint = Pick(request.msi_endpoint, "msi_endpoint", env,
                                {"AZURE_MSI_ENDPOINT", "AZURE_IDENTITY_ENDPOINT", "IDENTITY_ENDPOINT"});
  source.endpoint = endpoint ? endpoint.value : std::string(kImdsEndpoint);
  source.where = endpoint ? endpoint.where : "the instance metadata service";
  // One user-assigned identity at most; obstore lets the last of these win.
  const std::pair<std::string_view, Setting> ids[] = {
      {"client_id", client_id},
      {"object_id", Pick(request.object_id, "object_id", env, {"AZURE_OBJECT_ID"})},
      {"msi_res_id", Pick(request.msi_resource_id, "msi_resource_id", env, {"AZURE_MSI_RESOURCE_ID"})}};
  for (const auto& [param, setting] : ids) {
    if (setting) {
      source.identity_param = std::string(param);
      source.identity_value = setting.value;
    }
  }
  source.identity_header = NonEmptyEnv(env, "IDENTITY_HEADER").value_or("");
  return source;
}

Result<Expiring<std::string>> ParseAzureTokenReply(std::string_view json, std::string_view where, SystemTime now) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto token = doc.is_object() ? doc.find("access_token") : doc.end();
  if (!doc.is_object() || token == doc.end() || !token->is_string()) {
    return InvalidArgument(std::string(where) + ": the reply has no access_token");
  }
  Expiring<std::string> out{token->get<std::string>(), std::nullopt};
  INSITU_RETURN_IF_ERROR(CheckBearerToken(out.value, where));
  // A count of seconds, as a JSON number or a string (IMDS writes strings).
  auto seconds = [&](const char* name) -> Result<std::optional<int64_t>> {
    auto it = doc.find(name);
    if (it == doc.end() || it->is_null()) return std::optional<int64_t>();
    int64_t value = -1;
    if (it->is_number_integer()) {
      value = it->get<int64_t>();
    } else if (it->is_string()) {
      const std::string& s = it->get_ref<const std::string&>();
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || end != s.data() + s.size()) value = -1;
    }
    if (value < 0 || value > int64_t{1} << 40) {
      return InvalidArgument(std::string(where) + ": " + name + " is not a number of seconds");
    }
    return std::optional<int64_t>(value);
  };
  INSITU_ASSIGN_OR_RETURN(auto expires_on, seconds("expires_on"));
  INSITU_ASSIGN_OR_RETURN(auto expires_in, seconds("expires_in"));
  constexpr int64_t kTenYears = int64_t{10} * 365 * 24 * 3600;
  if (expires_on) {  // epoch seconds: what is left of them from now
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    out.expiration = now + std::chrono::seconds(std::clamp<int64_t>(*expires_on - now_s, 0, kTenYears));
  } else if (expires_in) {
    out.expiration = now + std::chrono::seconds(std::min(*expires_in, kTenYears));
  }
  return out;
}

Result<Expiring<std::string>> FetchAzureToken(CurlTransport& transport, const AzureCredentialSource& source,
                                              SystemTime now) {
  using Kind = AzureCredentialSource::Kind;
  const std::string form_type = "Content-Type: application/x-www-form-urlencoded";
  Result<HttpResponse> reply = InvalidArgument("no exchange");
  std::string where;
  switch (source.kind) {
    case Kind::kWorkloadIdentity: {
      where = "Entra ID " + source.authority_host;
      // Re-read on every fetch: the kubelet rotates the file.
      INSITU_ASSIGN_OR_RETURN(std::string assertion, ReadCredentialFile(source.token_file, "federated token file"));
      reply = CredentialExchange(
          transport, "POST", source.authority_host + "/" + source.tenant_id + "/oauth2/v2.0/token",
          {form_type, "Accept: application/json"}, where,
          FormBody({{"client_id", source.client_id},
                    {"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
                    {"client_assertion", assertion},
                    {"scope", kStorageScope},
                    {"grant_type", "client_credentials"}}));
      break;
    }
    case Kind::kClientSecret:
      where = "Entra ID " + source.authority_host;
      reply =
          CredentialExchange(transport, "POST", source.authority_host + "/" + source.tenant_id + "/oauth2/v2.0/token",
                             {form_type, "Accept: application/json"}, where,
                             FormBody({{"client_id", source.client_id},
                                       {"client_secret", source.client_secret},
                                       {"scope", kStorageScope},
                                       {"grant_type", "client_credentials"}}));
      break;
    case Kind::kManagedIdentity: {
      where = "the managed identity endpoint " + source.endpoint;
      std::string url = source.endpoint + (source.endpoint.find('?') == std::string::npos ? "?" : "&") +
                        "api-version=2019-08-01&resource=" + PercentEncode(kStorageResource, false);
      if (!source.identity_param.empty()) {
        url += "&" + source.identity_param + "=" + PercentEncode(source.identity_value, false);
      }
      std::vector<std::string> headers = {"Metadata: true"};
      if (!source.identity_header.empty()) headers.push_back("X-IDENTITY-HEADER: " + source.identity_header);
      reply = CredentialExchange(transport, "GET", std::move(url), std::move(headers), where);
      break;
    }
    case Kind::kBearer:
      return Expiring<std::string>{source.token, std::nullopt};
    case Kind::kSharedKey:
    case Kind::kSas:
      return InvalidArgument("an account key or SAS token is not exchanged for a token");
    default:  // out-of-range values: the fallback below
      break;
  }
  if (!reply.ok()) return reply.status();
  if (reply->status / 100 != 2) return CredentialReplyError(*reply, where);
  return ParseAzureTokenReply(ResponseText(*reply), where, now);
}

std::shared_ptr<AzureToken> MakeAzureToken(AzureCredentialSource source) {
  using Kind = AzureCredentialSource::Kind;
  std::optional<std::string> fixed;
  if (source.kind == Kind::kBearer) fixed = source.token;
  // IMDS (and App Service's identity endpoint) is on the machine: answers at once or not at all.
  const bool link_local = source.kind == Kind::kManagedIdentity;
  std::string described = source.Describe();
  return MakeFetchedToken(std::move(described), std::move(fixed), link_local,
                          [source = std::move(source)](CurlTransport& transport) {
                            return FetchAzureToken(transport, source, std::chrono::system_clock::now());
                          });
}

}  // namespace insitubatch
