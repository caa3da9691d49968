#include "insitubatch/io/aws/aws_credentials.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

constexpr size_t kMaxConfigFileBytes = 4 << 20;

// The file's sections, or an empty map when it does not exist.
Result<IniFile> LoadIni(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return IniFile{};
    return IoError("cannot read AWS config file " + path + ": " + ErrnoText(errno));
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
  const std::string home = NonEmptyEnv(env, "HOME").value_or("");
  files.credentials_path =
      NonEmptyEnv(env, "AWS_SHARED_CREDENTIALS_FILE").value_or(home.empty() ? "" : home + "/.aws/credentials");
  files.config_path = NonEmptyEnv(env, "AWS_CONFIG_FILE").value_or(home.empty() ? "" : home + "/.aws/config");
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
std::optional<std::map<std::string, std::string>> FindProfile(const SharedFiles& files, const std::string& name) {
  std::optional<std::map<std::string, std::string>> out;
  const std::string config_section = name == "default" ? "default" : "profile " + name;
  if (auto it = files.config.find(config_section); it != files.config.end()) out = it->second;
  if (auto it = files.credentials.find(name); it != files.credentials.end()) {
    if (!out) out.emplace();
    for (const auto& [k, v] : it->second) (*out)[k] = v;
  }
  return out;
}

Result<std::optional<AwsCredentials>> CredentialsFromProfile(const std::map<std::string, std::string>& profile,
                                                             const std::string& name, const SharedFiles& files) {
  auto get = [&](const char* key) -> std::string {
    auto it = profile.find(key);
    return it == profile.end() ? "" : it->second;
  };
  AwsCredentials c{get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token")};
  if (c.access_key_id.empty() && c.secret_access_key.empty()) {
    return std::optional<AwsCredentials>();
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return InvalidArgument("AWS profile '" + name + "' (" + files.credentials_path + ", " + files.config_path +
                           ") sets only one of aws_access_key_id / aws_secret_access_key");
  }
  return std::optional<AwsCredentials>(std::move(c));
}

// http is allowed only to loopback and the link-local addresses ECS and EKS serve
// container credentials on (the authorization token must not travel elsewhere in clear).
Status CheckContainerUrl(const std::string& url) {
  if (url.rfind("https://", 0) == 0) return Status::Ok();
  static constexpr std::string_view kHosts[] = {"127.0.0.1",     "localhost",      "[::1]",
                                                "169.254.170.2", "169.254.170.23", "[fd00:ec2::23]"};
  if (url.rfind("http://", 0) == 0) {
    std::string_view rest = std::string_view(url).substr(7);
    for (std::string_view host : kHosts) {
      if (rest.rfind(host, 0) == 0 &&
          (rest.size() == host.size() || rest[host.size()] == ':' || rest[host.size()] == '/')) {
        return Status::Ok();
      }
    }
  }
  return InvalidArgument(
      "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to loopback or the "
      "ECS/EKS link-local address (169.254.170.2, 169.254.170.23)");
}

// The container credentials endpoint the environment names, if any.
Result<std::optional<AmbientCredentialSource>> ContainerSource(const EnvLookup& env) {
  AmbientCredentialSource source;
  source.kind = AmbientCredentialSource::Kind::kContainer;
  if (auto relative = NonEmptyEnv(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    source.endpoint = "http://169.254.170.2" + *relative;
  } else if (auto full = NonEmptyEnv(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    INSITU_RETURN_IF_ERROR(CheckContainerUrl(*full));
    source.endpoint = *full;
  } else {
    return std::optional<AmbientCredentialSource>();
  }
  source.authorization = NonEmptyEnv(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
  source.authorization_file = NonEmptyEnv(env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
  return std::optional<AmbientCredentialSource>(std::move(source));
}

AmbientCredentialSource InstanceMetadataSource(const EnvLookup& env) {
  AmbientCredentialSource source;
  source.endpoint = NonEmptyEnv(env, "AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254");
  while (!source.endpoint.empty() && source.endpoint.back() == '/') source.endpoint.pop_back();
  return source;
}

bool IsTrue(const std::optional<std::string>& v) {
  if (!v) return false;
  return AsciiLower(*v) == "true";
}

// The source of a profile's role_arn: source_profile (its keys, its credential_process,
// or its own role, up to a few hops) or credential_source. Region and endpoint are set
// once the region is known.
Result<AmbientCredentialSource> AssumeRoleSource(const std::map<std::string, std::string>& profile,
                                                 const std::string& name, const SharedFiles& files,
                                                 const EnvLookup& env, int depth) {
  auto setting = [&](const char* key) -> std::string {
    auto it = profile.find(key);
    return it == profile.end() ? "" : it->second;
  };
  const std::string where = "AWS profile '" + name + "'";
  if (depth > 4) return InvalidArgument(where + ": source_profile chains more than 4 roles deep");
  if (!setting("mfa_serial").empty()) {
    return InvalidArgument(where + " needs an MFA code (mfa_serial), which a loader cannot ask for");
  }
  AmbientCredentialSource role;
  role.kind = AmbientCredentialSource::Kind::kAssumeRole;
  role.role_arn = setting("role_arn");
  role.session_name = setting("role_session_name").empty() ? "insitubatch" : setting("role_session_name");
  role.external_id = setting("external_id");
  role.duration_seconds = setting("duration_seconds");
  const std::string source_profile = setting("source_profile");
  const std::string credential_source = setting("credential_source");
  if (!source_profile.empty() == !credential_source.empty()) {
    return InvalidArgument(where +
                           " sets role_arn with neither or both of source_profile and "
                           "credential_source (exactly one is needed)");
  }
  if (!source_profile.empty()) {
    auto base = FindProfile(files, source_profile);
    if (!base)
      return NotFound(where + ": source_profile '" + source_profile + "' is not in " + files.credentials_path + " or " +
                      files.config_path);
    auto base_setting = [&](const char* key) -> std::string {
      auto it = base->find(key);
      return it == base->end() ? "" : it->second;
    };
    if (source_profile != name && !base_setting("role_arn").empty()) {
      INSITU_ASSIGN_OR_RETURN(AmbientCredentialSource inner,
                              AssumeRoleSource(*base, source_profile, files, env, depth + 1));
      role.base = std::make_shared<AmbientCredentialSource>(std::move(inner));
    } else {
      INSITU_ASSIGN_OR_RETURN(role.base_keys, CredentialsFromProfile(*base, source_profile, files));
      if (!role.base_keys && !base_setting("credential_process").empty()) {
        AmbientCredentialSource process;
        process.kind = AmbientCredentialSource::Kind::kProcess;
        process.command = base_setting("credential_process");
        process.endpoint = "profile '" + source_profile + "'";
        role.base = std::make_shared<AmbientCredentialSource>(std::move(process));
      } else if (!role.base_keys) {
        return InvalidArgument(where + ": source_profile '" + source_profile + "' has no keys or credential_process");
      }
    }
  } else if (credential_source == "Environment") {
    auto key = NonEmptyEnv(env, "AWS_ACCESS_KEY_ID");
    auto secret = NonEmptyEnv(env, "AWS_SECRET_ACCESS_KEY");
    if (!key || !secret) {
      return InvalidArgument(where +
                             ": credential_source = Environment, but AWS_ACCESS_KEY_ID / "
                             "AWS_SECRET_ACCESS_KEY are not set");
    }
    role.base_keys = AwsCredentials{*key, *secret, NonEmptyEnv(env, "AWS_SESSION_TOKEN").value_or("")};
  } else if (credential_source == "EcsContainer") {
    INSITU_ASSIGN_OR_RETURN(auto container, ContainerSource(env));
    if (!container) {
      return InvalidArgument(where +
                             ": credential_source = EcsContainer, but no "
                             "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI is set");
    }
    role.base = std::make_shared<AmbientCredentialSource>(std::move(*container));
  } else if (credential_source == "Ec2InstanceMetadata") {
    role.base = std::make_shared<AmbientCredentialSource>(InstanceMetadataSource(env));
  } else {
    return InvalidArgument(where + ": credential_source \"" + credential_source +
                           "\" is not Environment, Ec2InstanceMetadata or EcsContainer");
  }
  return role;
}

// Fills in what depends on the region: STS's endpoint and the signing region, down the chain.
void SetStsEndpoint(AmbientCredentialSource& source, const std::string& region, const EnvLookup& env) {
  source.region = region;
  source.endpoint =
      NonEmptyEnv(env, "AWS_ENDPOINT_URL_STS")
          .value_or(NonEmptyEnv(env, "AWS_ENDPOINT_URL").value_or("https://sts." + region + ".amazonaws.com"));
  if (source.base && source.base->kind == AmbientCredentialSource::Kind::kAssumeRole) {
    auto inner = std::make_shared<AmbientCredentialSource>(*source.base);
    SetStsEndpoint(*inner, region, env);
    source.base = std::move(inner);
  }
}

}  // namespace

std::string AmbientCredentialSource::Describe() const {
  switch (kind) {
    case Kind::kWebIdentity:
      return "web identity (role " + role_arn + ", STS " + endpoint + ")";
    case Kind::kAssumeRole:
      return "role " + role_arn + " (STS " + endpoint + ")";
    case Kind::kProcess:
      return "credential_process of " + endpoint;  // the command may carry secrets
    case Kind::kContainer:
      return "container credentials (" + endpoint + ")";
    case Kind::kInstanceMetadata:
    default:  // out-of-range values: the fallback below
      break;
  }
  return "instance metadata (" + endpoint + ")";
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
    std::string_view line = TrimSpace(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) + ": unclosed [section] header");
      }
      section = std::string(TrimSpace(line.substr(1, line.size() - 2)));
      have_section = true;
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) + ": expected 'key = value'");
    }
    if (!have_section) {
      return InvalidArgument(std::string(where) + " line " + std::to_string(line_no) +
                             ": a setting before any [section]");
    }
    std::string key(TrimSpace(line.substr(0, eq)));
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[section][key] = std::string(TrimSpace(line.substr(eq + 1)));
  }
  return out;
}

namespace {

using Settings = std::map<std::string, std::string>;

struct WebIdentity {
  std::string token_file, role_arn, session_name;
};

// What one credential source found: keys, an ambient source, or a web identity (whose STS
// endpoint waits for the region); nothing when the source does not apply.
struct Found {
  std::optional<AwsCredentials> credentials;
  std::optional<AmbientCredentialSource> ambient;
  std::optional<WebIdentity> web_identity;
  std::string source;
  bool any() const { return credentials || ambient || web_identity; }
};

// The shared files and the profile the request or AWS_PROFILE names, read only when a
// source (or the region) asks; a profile someone named must exist.
class Profiles {
 public:
  Profiles(const AwsConfigRequest& request, const EnvLookup& env) : env_(env) {
    const std::string from_env =
        NonEmptyEnv(env, "AWS_PROFILE").value_or(NonEmptyEnv(env, "AWS_DEFAULT_PROFILE").value_or(""));
    name_ = !request.profile.empty() ? request.profile : (from_env.empty() ? "default" : from_env);
    named_ = !request.profile.empty() || !from_env.empty();
  }
  const std::string& name() const { return name_; }
  bool named() const { return named_; }

  Result<const SharedFiles*> Files() {
    if (!files_) {
      INSITU_ASSIGN_OR_RETURN(SharedFiles loaded, LoadSharedFiles(env_));
      files_ = std::move(loaded);
    }
    return &*files_;
  }

  Result<std::optional<Settings>> Profile() {
    INSITU_ASSIGN_OR_RETURN(const SharedFiles* f, Files());
    auto p = FindProfile(*f, name_);
    if (!p && named_) {
      return NotFound("AWS profile '" + name_ + "' is not in " + f->credentials_path + " or " + f->config_path);
    }
    return p;
  }

 private:
  const EnvLookup& env_;
  std::string name_;
  bool named_ = false;
  std::optional<SharedFiles> files_;
};

// 1. access_key_id + secret_access_key [+ session_token] passed in.
Result<Found> FromArguments(const AwsConfigRequest& request) {
  Found found;
  if (request.access_key_id.empty() && request.secret_access_key.empty()) return found;
  if (request.access_key_id.empty() || request.secret_access_key.empty()) {
    return InvalidArgument("S3 credentials: pass both access_key_id and secret_access_key (one is missing)");
  }
  found.credentials = AwsCredentials{request.access_key_id, request.secret_access_key, request.session_token};
  found.source = "arguments";
  return found;
}

// 2. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN], unless a profile was
// passed in.
Result<Found> FromEnvironmentKeys(const AwsConfigRequest& request, const EnvLookup& env) {
  Found found;
  auto key = NonEmptyEnv(env, "AWS_ACCESS_KEY_ID");
  auto secret = NonEmptyEnv(env, "AWS_SECRET_ACCESS_KEY");
  if (!request.profile.empty() || (!key && !secret)) return found;
  if (!key || !secret) {
    return InvalidArgument(
        "S3 credentials: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (one is missing from the "
        "environment)");
  }
  auto token = NonEmptyEnv(env, "AWS_SESSION_TOKEN");
  if (!token) token = NonEmptyEnv(env, "AWS_SECURITY_TOKEN");
  found.credentials = AwsCredentials{*key, *secret, token.value_or("")};
  found.source = "environment";
  return found;
}

// 3. AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, unless a profile was passed in.
Result<Found> FromWebIdentityEnvironment(const AwsConfigRequest& request, const EnvLookup& env) {
  Found found;
  auto token_file = NonEmptyEnv(env, "AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!request.profile.empty() || !token_file) return found;
  auto role = NonEmptyEnv(env, "AWS_ROLE_ARN");
  if (!role) {
    return InvalidArgument("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not (web identity needs both)");
  }
  found.web_identity = WebIdentity{*token_file, *role, NonEmptyEnv(env, "AWS_ROLE_SESSION_NAME").value_or("")};
  return found;
}

// 4. The profile: a role to assume (before its own keys, as botocore), its keys, its web
// identity, or its credential_process.
Result<Found> FromProfile(Profiles& profiles, const EnvLookup& env) {
  Found found;
  INSITU_ASSIGN_OR_RETURN(auto p, profiles.Profile());
  if (!p) return found;
  INSITU_ASSIGN_OR_RETURN(const SharedFiles* files, profiles.Files());
  const std::string& name = profiles.name();
  auto setting = [&](const char* key) -> std::string {
    auto it = p->find(key);
    return it == p->end() ? "" : it->second;
  };
  if (!setting("role_arn").empty() && setting("web_identity_token_file").empty()) {
    INSITU_ASSIGN_OR_RETURN(AmbientCredentialSource role, AssumeRoleSource(*p, name, *files, env, 0));
    found.source = role.Describe();
    found.ambient = std::move(role);
    return found;
  }
  INSITU_ASSIGN_OR_RETURN(found.credentials, CredentialsFromProfile(*p, name, *files));
  if (found.credentials) {
    found.source = "profile '" + name + "'";
  } else if (!setting("web_identity_token_file").empty()) {
    if (setting("role_arn").empty()) {
      return InvalidArgument("AWS profile '" + name + "' sets web_identity_token_file without role_arn");
    }
    found.web_identity =
        WebIdentity{setting("web_identity_token_file"), setting("role_arn"), setting("role_session_name")};
  } else if (!setting("credential_process").empty()) {
    AmbientCredentialSource source;
    source.kind = AmbientCredentialSource::Kind::kProcess;
    source.command = setting("credential_process");
    source.endpoint = "profile '" + name + "'";
    found.source = source.Describe();
    found.ambient = std::move(source);
  } else if (profiles.named()) {
    return InvalidArgument("AWS profile '" + name +
                           "' has no aws_access_key_id / aws_secret_access_key, web identity or "
                           "credential_process (SSO and role-chaining profiles are not supported)");
  }
  return found;
}

// 5. Where code runs inside AWS: the container's credentials, else instance metadata.
Result<Found> FromContainerOrInstance(const EnvLookup& env) {
  Found found;
  INSITU_ASSIGN_OR_RETURN(auto container, ContainerSource(env));
  if (container) {
    found.ambient = std::move(*container);
  } else if (IsTrue(env("AWS_EC2_METADATA_DISABLED"))) {
    return FailedPrecondition(std::string(kNoAwsCredentials) +
                              " (instance metadata is off: AWS_EC2_METADATA_DISABLED)");
  } else {
    found.ambient = InstanceMetadataSource(env);
  }
  found.source = found.ambient->Describe();
  return found;
}

// Argument, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, us-east-1.
Result<std::string> ResolveRegion(const AwsConfigRequest& request, const EnvLookup& env, Profiles& profiles) {
  std::string region = request.region;
  if (region.empty())
    region = NonEmptyEnv(env, "AWS_REGION").value_or(NonEmptyEnv(env, "AWS_DEFAULT_REGION").value_or(""));
  if (region.empty()) {
    INSITU_ASSIGN_OR_RETURN(auto p, profiles.Profile());
    if (p) {
      if (auto it = p->find("region"); it != p->end()) region = it->second;
    }
  }
  if (region.empty()) region = "us-east-1";
  for (char c : region) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return InvalidArgument("AWS region \"" + region + "\" is malformed (letters, digits and '-' only)");
    }
  }
  return region;
}

}  // namespace

Result<AwsConfig> ResolveAwsConfig(const AwsConfigRequest& request, const EnvLookup& env) {
  Profiles profiles(request, env);
  Found found;
  if (request.need_credentials) {
    // botocore's order: the first source that finds anything wins.
    const std::function<Result<Found>()> sources[] = {
        [&] { return FromArguments(request); },
        [&] { return FromEnvironmentKeys(request, env); },
        [&] { return FromWebIdentityEnvironment(request, env); },
        [&] { return FromProfile(profiles, env); },
        [&] { return FromContainerOrInstance(env); },
    };
    for (const auto& source : sources) {
      INSITU_ASSIGN_OR_RETURN(found, source());
      if (found.any()) break;
    }
  } else if (Status arguments = FromArguments(request).status(); !arguments.ok()) {
    return arguments;  // a half-given key pair is refused even when unsigned
  }
  AwsConfig config;
  INSITU_ASSIGN_OR_RETURN(config.region, ResolveRegion(request, env, profiles));
  config.credentials = std::move(found.credentials);
  config.ambient = std::move(found.ambient);
  config.credentials_source = std::move(found.source);
  // The STS endpoints wait for the region.
  if (config.ambient && config.ambient->kind == AmbientCredentialSource::Kind::kAssumeRole) {
    SetStsEndpoint(*config.ambient, config.region, env);
    config.credentials_source = config.ambient->Describe();
  }
  if (found.web_identity) {
    AmbientCredentialSource source;
    source.kind = AmbientCredentialSource::Kind::kWebIdentity;
    source.endpoint =
        NonEmptyEnv(env, "AWS_ENDPOINT_URL_STS")
            .value_or(NonEmptyEnv(env, "AWS_ENDPOINT_URL").value_or("https://sts." + config.region + ".amazonaws.com"));
    source.role_arn = found.web_identity->role_arn;
    source.token_file = found.web_identity->token_file;
    source.session_name = found.web_identity->session_name.empty() ? "insitubatch" : found.web_identity->session_name;
    config.credentials_source = source.Describe();
    config.ambient = std::move(source);
  }
  return config;
}

}  // namespace insitubatch
