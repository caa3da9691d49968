#include "insitubatch/io/gcs/gcs_credentials.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "insitubatch/io/credential_exchange.h"
#include "insitubatch/io/http/http_request.h"
#include "insitubatch/util/base64.h"

namespace insitubatch {
namespace {

constexpr const char* kGoogleTokenUri = "https://oauth2.googleapis.com/token";

std::string Base64Url(std::string_view data) { return EncodeBase64(data, /*url_safe=*/true); }

Result<std::string> SignRs256(const std::string& pem, std::string_view data) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
  if (!key || EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) {
    return InvalidArgument("the service account's private_key is not an RSA private key in PEM");
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t length = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(data.data());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length, in, data.size()) != 1) {
    return InvalidArgument("cannot sign with the service account's private_key");
  }
  std::string signature(length, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length, in, data.size()) != 1) {
    return InvalidArgument("cannot sign with the service account's private_key");
  }
  signature.resize(length);
  return signature;
}

}  // namespace

std::string GcsCredentialSource::Describe() const {
  switch (kind) {
    case Kind::kToken:
      return where;
    case Kind::kServiceAccount:
      return "service account " + client_email + " (" + where + ")";
    case Kind::kAuthorizedUser:
      return "authorized user (" + where + ")";
    case Kind::kMetadata:
    default:  // out-of-range values: the fallback below
      break;
  }
  return "the metadata server " + endpoint;
}

Result<GcsCredentialSource> ParseGcsKeyFile(std::string_view json, std::string where) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return InvalidArgument("GCS key " + where + " is not a JSON object");
  auto text = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : "";
  };
  GcsCredentialSource source;
  source.where = std::move(where);
  source.token_uri = text("token_uri").empty() ? kGoogleTokenUri : text("token_uri");
  const std::string type = text("type");
  if (type == "service_account") {
    source.kind = GcsCredentialSource::Kind::kServiceAccount;
    source.client_email = text("client_email");
    source.private_key = text("private_key");
    if (source.client_email.empty() || source.private_key.empty()) {
      return InvalidArgument("GCS key " + source.where + ": a service account needs client_email and private_key");
    }
  } else if (type == "authorized_user") {
    source.kind = GcsCredentialSource::Kind::kAuthorizedUser;
    source.client_id = text("client_id");
    source.client_secret = text("client_secret");
    source.refresh_token = text("refresh_token");
    if (source.client_id.empty() || source.client_secret.empty() || source.refresh_token.empty()) {
      return InvalidArgument("GCS key " + source.where +
                             ": authorized_user needs client_id, client_secret and refresh_token");
    }
  } else {
    return InvalidArgument("GCS key " + source.where + " has type \"" + type +
                           "\" (service_account and authorized_user are supported)");
  }
  return source;
}

Result<GcsCredentialSource> ResolveGcsCredentials(const GcsCredentialRequest& request, const EnvLookup& env) {
  GcsCredentialSource source;
  if (!request.token.empty() || NonEmptyEnv(env, "GOOGLE_OAUTH_ACCESS_TOKEN")) {
    source.kind = GcsCredentialSource::Kind::kToken;
    source.where = request.token.empty() ? "GOOGLE_OAUTH_ACCESS_TOKEN" : "the token argument";
    source.token = request.token.empty() ? *NonEmptyEnv(env, "GOOGLE_OAUTH_ACCESS_TOKEN") : request.token;
    INSITU_RETURN_IF_ERROR(CheckBearerToken(source.token, source.where));
    return source;
  }
  if (!request.service_account_key.empty()) {
    return ParseGcsKeyFile(request.service_account_key, "the service_account_key argument");
  }
  if (auto key = NonEmptyEnv(env, "GOOGLE_SERVICE_ACCOUNT_KEY")) {
    return ParseGcsKeyFile(*key, "GOOGLE_SERVICE_ACCOUNT_KEY");
  }
  std::string path = request.service_account_path;
  for (const char* name : {"GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_APPLICATION_CREDENTIALS"}) {
    if (path.empty()) path = NonEmptyEnv(env, name).value_or("");
  }
  if (path.empty()) {  // gcloud's application-default credentials, when present
    const std::string config =
        NonEmptyEnv(env, "CLOUDSDK_CONFIG").value_or(NonEmptyEnv(env, "HOME").value_or("") + "/.config/gcloud");
    const std::string adc = config + "/application_default_credentials.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(adc, ec)) path = adc;
  }
  if (!path.empty()) {
    INSITU_ASSIGN_OR_RETURN(std::string json, ReadCredentialFile(path, "GCS key file"));
    return ParseGcsKeyFile(json, "file " + path);
  }
  const auto no_check = NonEmptyEnv(env, "NO_GCE_CHECK");
  if (no_check && (*no_check == "true" || *no_check == "True" || *no_check == "1")) {
    return FailedPrecondition(std::string(kNoGcsCredentials) + " (the metadata server is off: NO_GCE_CHECK)");
  }
  source.kind = GcsCredentialSource::Kind::kMetadata;
  source.endpoint = NonEmptyEnv(env, "GCE_METADATA_HOST").value_or("169.254.169.254");
  if (source.endpoint.find("://") == std::string::npos) source.endpoint = "http://" + source.endpoint;
  while (source.endpoint.back() == '/') source.endpoint.pop_back();
  return source;
}

Result<Expiring<std::string>> ParseGcsTokenReply(std::string_view json, std::string_view where, SystemTime now) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto token = doc.is_object() ? doc.find("access_token") : doc.end();
  if (!doc.is_object() || token == doc.end() || !token->is_string()) {
    return InvalidArgument(std::string(where) + ": the reply has no access_token");
  }
  Expiring<std::string> out{token->get<std::string>(), std::nullopt};
  INSITU_RETURN_IF_ERROR(CheckBearerToken(out.value, where));
  if (auto expires = doc.find("expires_in"); expires != doc.end()) {
    // At most ten years: a larger value would overflow the clock (tokens last an hour).
    if (!expires->is_number_integer() || expires->get<int64_t>() < 0 ||
        expires->get<int64_t>() > int64_t{10} * 365 * 24 * 3600) {
      return InvalidArgument(std::string(where) + ": expires_in is not a number of seconds");
    }
    out.expiration = now + std::chrono::seconds(expires->get<int64_t>());
  }
  return out;
}

Result<std::string> SignServiceAccountJwt(const GcsCredentialSource& source, SystemTime now) {
  const int64_t iat = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  const nlohmann::json claims = {{"iss", source.client_email},
                                 {"scope", kGcsReadOnlyScope},
                                 {"aud", source.token_uri},
                                 {"iat", iat},
                                 {"exp", iat + 3600}};
  const std::string signing_input = Base64Url(header.dump()) + "." + Base64Url(claims.dump());
  INSITU_ASSIGN_OR_RETURN(std::string signature, SignRs256(source.private_key, signing_input));
  return signing_input + "." + Base64Url(signature);
}

Result<Expiring<std::string>> FetchGcsToken(CurlTransport& transport, const GcsCredentialSource& source,
                                            SystemTime now) {
  const std::string where = source.kind == GcsCredentialSource::Kind::kMetadata
                                ? "the metadata server " + source.endpoint
                                : "the token endpoint " + source.token_uri;
  Result<HttpResponse> reply = InvalidArgument("no exchange");
  const std::string form_type = "Content-Type: application/x-www-form-urlencoded";
  switch (source.kind) {
    case GcsCredentialSource::Kind::kServiceAccount: {
      INSITU_ASSIGN_OR_RETURN(std::string jwt, SignServiceAccountJwt(source, now));
      reply = CredentialExchange(
          transport, "POST", source.token_uri, {form_type}, where,
          FormBody({{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"}, {"assertion", jwt}}));
      break;
    }
    case GcsCredentialSource::Kind::kAuthorizedUser:
      reply = CredentialExchange(transport, "POST", source.token_uri, {form_type}, where,
                                 FormBody({{"grant_type", "refresh_token"},
                                           {"client_id", source.client_id},
                                           {"client_secret", source.client_secret},
                                           {"refresh_token", source.refresh_token}}));
      break;
    case GcsCredentialSource::Kind::kMetadata:
      reply =
          CredentialExchange(transport, "GET",
                             source.endpoint + "/computeMetadata/v1/instance/service-accounts/default/token?scopes=" +
                                 PercentEncode(kGcsReadOnlyScope, false),
                             {"Metadata-Flavor: Google"}, where);
      break;
    case GcsCredentialSource::Kind::kToken:
      return Expiring<std::string>{source.token, std::nullopt};
    default:  // out-of-range values: the fallback below
      break;
  }
  if (!reply.ok()) return reply.status();
  if (reply->status / 100 != 2) return CredentialReplyError(*reply, where);
  return ParseGcsTokenReply(ResponseText(*reply), where, now);
}

std::shared_ptr<GcsToken> MakeGcsToken(GcsCredentialSource source) {
  using Kind = GcsCredentialSource::Kind;
  std::optional<std::string> fixed;
  if (source.kind == Kind::kToken) fixed = source.token;
  const bool link_local = source.kind == Kind::kMetadata;
  std::string described = source.Describe();
  return MakeFetchedToken(std::move(described), std::move(fixed), link_local,
                          [source = std::move(source)](CurlTransport& transport) {
                            return FetchGcsToken(transport, source, std::chrono::system_clock::now());
                          });
}

}  // namespace insitubatch
