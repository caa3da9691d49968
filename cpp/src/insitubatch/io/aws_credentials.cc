#include "insitubatch/io/aws_credentials.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace insitubatch {
namespace {

constexpr size_t kMaxConfigFileBytes = 4 << 20;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<std::string> NonEmpty(const EnvLookup& env, std::string_view name) {
  auto v = env(name);
  if (v && !v->empty()) return v;
  return std::nullopt;
}

// The file's sections, or an empty map when it does not exist.
Result<IniFile> LoadIni(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return IniFile{};
    return IoError("cannot read AWS config file " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxConfigFileBytes) {
    return InvalidArgument("AWS config file " + path + " is larger than 4 MiB");
  }
  return ParseIni(text.str(), path);
}

struct SharedFiles {
  std::string credentials_path, config_path;
  IniFile credentials, config;
};

Result<SharedFiles> LoadSharedFiles(const EnvLookup& env) {
  SharedFiles files;
  const std::string home = NonEmpty(env, "HOME").value_or("");
  files.credentials_path = NonEmpty(env, "AWS_SHARED_CREDENTIALS_FILE")
                               .value_or(home.empty() ? "" : home + "/.aws/credentials");
  files.config_path = NonEmpty(env, "AWS_CONFIG_FILE")
                          .value_or(home.empty() ? "" : home + "/.aws/config");
  if (!files.credentials_path.empty()) {
    INSITU_ASSIGN_OR_RETURN(files.credentials, LoadIni(files.credentials_path));
  }
  if (!files.config_path.empty()) {
    INSITU_ASSIGN_OR_RETURN(files.config, LoadIni(files.config_path));
  }
  return files;
}

// The profile's settings: the config file's "[profile x]" (or "[default]"), overlaid by
// the credentials file's "[x]". nullopt when neither file has it.
std::optional<std::map<std::string, std::string>> FindProfile(const SharedFiles& files,
                                                              const std::string& name) {
  std::optional<std::map<std::string, std::string>> out;
  const std::string config_section = name == "default" ? "default" : "profile " + name;
  if (auto it = files.config.find(config_section); it != files.config.end())
    out = it->second;
  if (auto it = files.credentials.find(name); it != files.credentials.end()) {
    if (!out) out.emplace();
    for (const auto& [k, v] : it->second) (*out)[k] = v;
  }
  return out;
}

Result<std::optional<AwsCredentials>> CredentialsFromProfile(
    const std::map<std::string, std::string>& profile, const std::string& name,
    const SharedFiles& files) {
  auto get = [&](const char* key) -> std::string {
    auto it = profile.find(key);
    return it == profile.end() ? "" : it->second;
  };
  AwsCredentials c{get("aws_access_key_id"), get("aws_secret_access_key"),
                   get("aws_session_token")};
  if (c.access_key_id.empty() && c.secret_access_key.empty()) {
    return std::optional<AwsCredentials>();
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return InvalidArgument(
        "AWS profile '" + name + "' (" + files.credentials_path + ", " +
        files.config_path +
        ") sets only one of aws_access_key_id / aws_secret_access_key");
  }
  return std::optional<AwsCredentials>(std::move(c));
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Result<IniFile> ParseIni(std::string_view text, std::string_view where) {
  IniFile out;
  std::string section;
  bool have_section = false;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!raw.empty() && (raw.front() == ' ' || raw.front() == '\t')) continue;  // nested
    std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) +
                               ": unclosed [section] header");
      }
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      have_section = true;
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) +
                             ": expected 'key = value'");
    }
    if (!have_section) {
      return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) +
                             ": a setting before any [section]");
    }
    std::string key(Trim(line.substr(0, eq)));
    for (char& c : key)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[section][key] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

Result<AwsConfig> ResolveAwsConfig(const AwsConfigRequest& request,
                                   const EnvLookup& env) {
  AwsConfig config;
  const bool explicit_keys =
      !request.access_key_id.empty() || !request.secret_access_key.empty();
  if (explicit_keys &&
      (request.access_key_id.empty() || request.secret_access_key.empty())) {
    return InvalidArgument(
        "S3 credentials: pass both access_key_id and secret_access_key (one is missing)");
  }
  // Files are read only when a profile could matter (credentials or region).
  std::optional<SharedFiles> files;
  auto shared = [&]() -> Result<const SharedFiles*> {
    if (!files) {
      INSITU_ASSIGN_OR_RETURN(SharedFiles loaded, LoadSharedFiles(env));
      files = std::move(loaded);
    }
    return &*files;
  };
  const std::string env_profile =
      NonEmpty(env, "AWS_PROFILE")
          .value_or(NonEmpty(env, "AWS_DEFAULT_PROFILE").value_or(""));
  const std::string profile_name = !request.profile.empty()
                                       ? request.profile
                                       : (env_profile.empty() ? "default" : env_profile);
  // A profile someone named (argument or AWS_PROFILE) must exist.
  const bool profile_named = !request.profile.empty() || !env_profile.empty();
  auto profile = [&]() -> Result<std::optional<std::map<std::string, std::string>>> {
    INSITU_ASSIGN_OR_RETURN(const SharedFiles* f, shared());
    auto p = FindProfile(*f, profile_name);
    if (!p && profile_named) {
      return NotFound("AWS profile '" + profile_name + "' is not in " +
                      f->credentials_path + " or " + f->config_path);
    }
    return p;
  };

  if (request.need_credentials) {
    if (explicit_keys) {
      config.credentials = AwsCredentials{
          request.access_key_id, request.secret_access_key, request.session_token};
      config.credentials_source = "arguments";
    } else if (auto key = NonEmpty(env, "AWS_ACCESS_KEY_ID");
               request.profile.empty() &&
               (key || NonEmpty(env, "AWS_SECRET_ACCESS_KEY"))) {
      auto secret = NonEmpty(env, "AWS_SECRET_ACCESS_KEY");
      if (!key || !secret) {
        return InvalidArgument(
            "S3 credentials: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (one "
            "is "
            "missing from the environment)");
      }
      auto token = NonEmpty(env, "AWS_SESSION_TOKEN");
      if (!token) token = NonEmpty(env, "AWS_SECURITY_TOKEN");
      config.credentials = AwsCredentials{*key, *secret, token.value_or("")};
      config.credentials_source = "environment";
    } else {
      INSITU_ASSIGN_OR_RETURN(auto p, profile());
      if (p) {
        INSITU_ASSIGN_OR_RETURN(config.credentials,
                                CredentialsFromProfile(*p, profile_name, *files));
        if (!config.credentials && profile_named) {
          return InvalidArgument(
              "AWS profile '" + profile_name +
              "' has no aws_access_key_id / aws_secret_access_key (SSO, "
              "credential_process and role profiles are not supported)");
        }
        if (config.credentials)
          config.credentials_source = "profile '" + profile_name + "'";
      }
    }
    if (!config.credentials) {
      return FailedPrecondition(
          "no AWS credentials found: pass access_key_id= and secret_access_key=, set "
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure a profile in "
          "~/.aws/credentials (AWS_PROFILE); for a public bucket pass "
          "skip_signature=True");
    }
  }

  if (!request.region.empty()) {
    config.region = request.region;
  } else if (auto r = NonEmpty(env, "AWS_REGION")) {
    config.region = *r;
  } else if (auto r2 = NonEmpty(env, "AWS_DEFAULT_REGION")) {
    config.region = *r2;
  } else {
    INSITU_ASSIGN_OR_RETURN(auto p, profile());
    if (p) {
      if (auto it = p->find("region"); it != p->end()) config.region = it->second;
    }
  }
  if (config.region.empty()) config.region = "us-east-1";
  for (char c : config.region) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return InvalidArgument("AWS region \"" + config.region +
                             "\" is malformed (letters, digits and '-' only)");
    }
  }
  return config;
}

}  // namespace insitubatch
