#include "insitubatch/io/aws/aws_credential_providers.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "insitubatch/io/aws/subprocess.h"
#include "insitubatch/io/credential_exchange.h"
#include "insitubatch/io/http/http_request.h"
#include "insitubatch/io/http/xml_text.h"

namespace insitubatch {
namespace {

constexpr size_t kMaxReplyBytes = 64 << 10;  // a credentials document is a few hundred bytes

class Fixed final : public AwsCredentialProvider {
 public:
  Fixed(AwsCredentials credentials, std::string source)
      : credentials_(std::move(credentials)), source_(std::move(source)) {}
  Result<AwsCredentials> Get() override { return credentials_; }
  const std::string& source() const override { return source_; }

 private:
  AwsCredentials credentials_;
  std::string source_;
};

// The credentials of an STS reply (AssumeRole, AssumeRoleWithWebIdentity), or an error
// quoting STS's code and message (which never hold the caller's secrets).
Result<ExpiringCredentials> StsCredentials(const HttpResponse& reply, const std::string& where,
                                           const std::string& action, const std::string& role_arn) {
  if (reply.status / 100 != 2) {
    const std::string code = XmlFirstText(reply.error_body, "Code");
    const std::string message = XmlFirstText(reply.error_body, "Message");
    return IoError(where + " refused " + action + " for " + role_arn + " (HTTP " + std::to_string(reply.status) +
                   (code.empty() ? "" : " " + code) + (message.empty() ? "" : ": " + message) + ")")
        .set_detail(static_cast<int>(reply.status));
  }
  const std::string xml = ResponseText(reply);
  ExpiringCredentials out;
  out.value = {XmlFirstText(xml, "AccessKeyId"), XmlFirstText(xml, "SecretAccessKey"),
               XmlFirstText(xml, "SessionToken")};
  if (out.value.access_key_id.empty() || out.value.secret_access_key.empty() || out.value.session_token.empty()) {
    return InvalidArgument(where + ": the " + action + " reply has no credentials");
  }
  if (const std::string expiration = XmlFirstText(xml, "Expiration"); !expiration.empty()) {
    INSITU_ASSIGN_OR_RETURN(out.expiration, ParseAwsTimestamp(expiration));
  }
  return out;
}

}  // namespace

std::shared_ptr<AwsCredentialProvider> FixedCredentials(AwsCredentials credentials, std::string source) {
  return std::make_shared<Fixed>(std::move(credentials), std::move(source));
}

Result<SystemTime> ParseAwsTimestamp(std::string_view text) {
  std::tm tm{};
  int consumed = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &consumed) != 6 ||
      consumed != 19) {
    return InvalidArgument("malformed timestamp \"" + s + "\" (want 2026-01-31T12:00:00Z)");
  }
  std::string_view rest = text.substr(19);
  if (!rest.empty() && rest.front() == '.') {  // fractional seconds: ignored
    rest.remove_prefix(1);
    while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
  }
  if (rest != "Z" && rest != "+00:00") {
    return InvalidArgument("timestamp \"" + s + "\" is not in UTC (Z or +00:00)");
  }
  // Years past 2200 would overflow the clock's nanoseconds; no credential lives that long.
  if (tm.tm_year < 1970 || tm.tm_year > 2200 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
      tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return InvalidArgument("timestamp \"" + s + "\" is out of range");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

Result<ExpiringCredentials> ParseCredentialsJson(std::string_view body, std::string_view where) {
  const std::string context = "credentials from " + std::string(where);
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return InvalidArgument(context + ": the reply is not a JSON object");
  auto text = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : "";
  };
  if (const std::string code = text("Code"); !code.empty() && code != "Success") {
    return IoError(context + ": Code \"" + code + "\"");
  }
  ExpiringCredentials out;
  out.value = {text("AccessKeyId"), text("SecretAccessKey"),
               text("Token").empty() ? text("SessionToken") : text("Token")};
  if (out.value.access_key_id.empty() || out.value.secret_access_key.empty()) {
    return InvalidArgument(context + ": the reply has no AccessKeyId / SecretAccessKey");
  }
  if (const std::string expiration = text("Expiration"); !expiration.empty()) {
    auto when = ParseAwsTimestamp(expiration);
    if (!when.ok()) return when.status().WithContext(context + ": Expiration");
    out.expiration = *when;
  }
  return out;
}

Result<ExpiringCredentials> FetchWebIdentityCredentials(CurlTransport& transport,
                                                        const AmbientCredentialSource& source) {
  INSITU_ASSIGN_OR_RETURN(std::string token, ReadCredentialFile(source.token_file, "web identity token file"));
  const std::string where = "STS " + source.endpoint;
  std::string url = source.endpoint;
  while (!url.empty() && url.back() == '/') url.pop_back();
  // An unsigned Query API call, form-encoded as botocore sends it: the token is the
  // credential (it never reaches a message or a URL).
  std::string form =
      "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + PercentEncode(source.role_arn, false) +
      "&RoleSessionName=" + PercentEncode(source.session_name, false) +
      "&WebIdentityToken=" + PercentEncode(token, false);
  INSITU_ASSIGN_OR_RETURN(
      HttpResponse reply,
      CredentialExchange(transport, "POST", url + "/",
                         {"Content-Type: application/x-www-form-urlencoded; charset=utf-8"}, where, std::move(form)));
  return StsCredentials(reply, where, "AssumeRoleWithWebIdentity", source.role_arn);
}

Result<ExpiringCredentials> FetchAssumeRoleCredentials(CurlTransport& transport, const AmbientCredentialSource& source,
                                                       const AwsCredentials& base, SystemTime now) {
  const std::string where = "STS " + source.endpoint;
  auto parsed = ParseHttpUrl(source.endpoint);
  if (!parsed.ok()) return parsed.status().WithContext("STS endpoint");
  std::string form = "Action=AssumeRole&Version=2011-06-15&RoleArn=" + PercentEncode(source.role_arn, false) +
                     "&RoleSessionName=" + PercentEncode(source.session_name, false);
  if (!source.external_id.empty()) form += "&ExternalId=" + PercentEncode(source.external_id, false);
  if (!source.duration_seconds.empty()) {
    form += "&DurationSeconds=" + PercentEncode(source.duration_seconds, false);
  }
  // A SigV4-signed form POST to "/" (service "sts"), signed with the base credentials.
  const std::string amz_date = AmzDate(now);
  const std::string content_type = "application/x-www-form-urlencoded; charset=utf-8";
  SigV4Request request;
  request.method = "POST";
  request.canonical_uri = parsed->path.empty() ? "/" : parsed->path + "/";
  request.payload_hash = Sha256Hex(form);
  request.headers = {{"host", parsed->Authority()}, {"content-type", content_type}, {"x-amz-date", amz_date}};
  if (!base.session_token.empty()) request.headers.push_back({"x-amz-security-token", base.session_token});
  INSITU_ASSIGN_OR_RETURN(SigV4Signature sig, SignV4(request, base, source.region, "sts", amz_date));
  std::vector<std::string> headers = {"Content-Type: " + content_type, "x-amz-date: " + amz_date,
                                      "Authorization: " + sig.authorization};
  if (!base.session_token.empty()) headers.push_back("x-amz-security-token: " + base.session_token);
  std::string url = source.endpoint;
  while (!url.empty() && url.back() == '/') url.pop_back();
  INSITU_ASSIGN_OR_RETURN(HttpResponse reply,
                          CredentialExchange(transport, "POST", url + "/", std::move(headers), where, std::move(form)));
  return StsCredentials(reply, where, "AssumeRole", source.role_arn);
}

Result<ExpiringCredentials> FetchContainerCredentials(CurlTransport& transport, const AmbientCredentialSource& source) {
  std::vector<std::string> headers;
  std::string authorization = source.authorization;
  if (!source.authorization_file.empty()) {  // rotated by the platform: read at each fetch
    INSITU_ASSIGN_OR_RETURN(authorization,
                            ReadCredentialFile(source.authorization_file, "container authorization token file"));
  }
  if (authorization.find_first_of("\r\n") != std::string::npos) {
    return InvalidArgument("the container authorization token holds a line break");
  }
  if (!authorization.empty()) headers.push_back("Authorization: " + authorization);
  const std::string where = "the container credentials endpoint " + source.endpoint;
  INSITU_ASSIGN_OR_RETURN(HttpResponse reply,
                          CredentialExchange(transport, "GET", source.endpoint, std::move(headers), where));
  if (reply.status / 100 != 2) return CredentialReplyError(reply, where);
  return ParseCredentialsJson(ResponseText(reply), where);
}

Result<ExpiringCredentials> FetchInstanceMetadataCredentials(CurlTransport& transport,
                                                             const AmbientCredentialSource& source) {
  const std::string& base = source.endpoint;
  const std::string where = "instance metadata " + base;
  // IMDSv2: a session token first (a PUT, which a forwarding proxy does not pass).
  INSITU_ASSIGN_OR_RETURN(HttpResponse token_reply,
                          CredentialExchange(transport, "PUT", base + "/latest/api/token",
                                             {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}, where));
  if (token_reply.status / 100 != 2) return CredentialReplyError(token_reply, where + " (session token)");
  const std::string token = ResponseText(token_reply);
  if (token.empty() || token.find_first_of("\r\n") != std::string::npos) {
    return InvalidArgument(where + ": malformed session token");
  }
  const std::string header = "X-aws-ec2-metadata-token: " + token;
  const std::string roles_url = base + "/latest/meta-data/iam/security-credentials/";
  INSITU_ASSIGN_OR_RETURN(HttpResponse roles, CredentialExchange(transport, "GET", roles_url, {header}, where));
  if (roles.status == 404) {
    return NotFound(where + ": this instance has no IAM role (no instance profile attached)");
  }
  if (roles.status / 100 != 2) return CredentialReplyError(roles, where + " (role name)");
  std::string role = ResponseText(roles);
  role = role.substr(0, role.find('\n'));
  while (!role.empty() && std::isspace(static_cast<unsigned char>(role.back()))) role.pop_back();
  if (role.empty() || role.find('/') != std::string::npos) {
    return InvalidArgument(where + ": malformed role name");
  }
  INSITU_ASSIGN_OR_RETURN(
      HttpResponse keys, CredentialExchange(transport, "GET", roles_url + PercentEncode(role, false), {header}, where));
  if (keys.status / 100 != 2) return CredentialReplyError(keys, where + " (role " + role + ")");
  return ParseCredentialsJson(ResponseText(keys), where + " (role " + role + ")");
}

Result<std::vector<std::string>> SplitCommandLine(std::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        word += c;
    } else if (c == '\\') {
      if (++i == command.size()) return InvalidArgument("credential_process ends in a backslash");
      // Inside double quotes a backslash escapes only what shells let it escape.
      if (quote == '"' && std::string_view("\"\\$`").find(command[i]) == std::string_view::npos) word += c;
      word += command[i];
      in_word = true;
    } else if (quote == '"') {
      if (c == '"')
        quote = 0;
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) return InvalidArgument("credential_process has an unclosed quote");
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) return InvalidArgument("credential_process is empty");
  return words;
}

Result<ExpiringCredentials> FetchProcessCredentials(const AmbientCredentialSource& source) {
  const std::string where = "the credential_process of " + source.endpoint;
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> words, SplitCommandLine(source.command));
  INSITU_ASSIGN_OR_RETURN(ProcessOutput run, RunProcess(words, kMaxReplyBytes));
  if (run.exit_code != 0) {
    std::string err = run.standard_error.substr(0, 300);
    return IoError(where + " exited with status " + std::to_string(run.exit_code) + (err.empty() ? "" : ": " + err));
  }
  nlohmann::json doc = nlohmann::json::parse(run.standard_output, nullptr, false);
  if (!doc.is_object() || doc.value("Version", 0) != 1) {
    return InvalidArgument(where + " printed no {\"Version\": 1, ...} JSON object");
  }
  return ParseCredentialsJson(run.standard_output, where);
}

std::shared_ptr<RefreshingCredentials> MakeAmbientCredentials(AmbientCredentialSource source) {
  // A transport of its own: fetches block, and they may run on an IO thread of the store's
  // transport (signing happens per attempt). Created on first use, under the provider's lock.
  auto transport = std::make_shared<std::shared_ptr<CurlTransport>>();
  std::shared_ptr<AwsCredentialProvider> base;  // what an assumed role is assumed with
  if (source.kind == AmbientCredentialSource::Kind::kAssumeRole) {
    base = source.base_keys ? FixedCredentials(*source.base_keys, "source profile")
           : source.base    ? std::shared_ptr<AwsCredentialProvider>(MakeAmbientCredentials(*source.base))
                            : nullptr;
  }
  auto fetch = [source, transport, base]() -> Result<ExpiringCredentials> {
    if (source.kind == AmbientCredentialSource::Kind::kProcess) return FetchProcessCredentials(source);
    if (!*transport) {
      INSITU_ASSIGN_OR_RETURN(*transport,
                              MakeCredentialTransport(source.kind == AmbientCredentialSource::Kind::kInstanceMetadata));
    }
    switch (source.kind) {
      case AmbientCredentialSource::Kind::kWebIdentity:
        return FetchWebIdentityCredentials(**transport, source);
      case AmbientCredentialSource::Kind::kContainer:
        return FetchContainerCredentials(**transport, source);
      case AmbientCredentialSource::Kind::kAssumeRole: {
        if (!base) return InvalidArgument("AssumeRole without source credentials");
        INSITU_ASSIGN_OR_RETURN(AwsCredentials keys, base->Get());
        return FetchAssumeRoleCredentials(**transport, source, keys, std::chrono::system_clock::now());
      }
      case AmbientCredentialSource::Kind::kProcess:
      case AmbientCredentialSource::Kind::kInstanceMetadata:
      default:  // out-of-range values: the fallback below
        break;
    }
    return FetchInstanceMetadataCredentials(**transport, source);
  };
  return std::make_shared<RefreshingCredentials>(source.Describe(), std::move(fetch));
}

}  // namespace insitubatch
