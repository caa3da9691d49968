#pragma once

// Where S3 credentials and the region come from, in botocore's order:
//   1. explicit arguments (access_key_id + secret_access_key [+ session_token]);
//   2. an explicit profile argument -> that profile of the shared files;
//   3. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN];
//   4. the AWS_PROFILE (else "default") profile of ~/.aws/credentials and ~/.aws/config
//      (AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE move them).
// Then the ambient sources of code running inside AWS, fetched at run time and refreshed
// (aws_credential_providers.h):
//   5. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (or the profile's
//      web_identity_token_file + role_arn) -> STS AssumeRoleWithWebIdentity;
//      a profile's credential_process (a command printing the keys as JSON), or its
//      role_arn with source_profile (keys or credential_process) or credential_source
//      (Environment, Ec2InstanceMetadata, EcsContainer) -> STS AssumeRole;
//   6. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI (with
//      AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]);
//   7. instance metadata (IMDSv2), unless AWS_EC2_METADATA_DISABLED=true
//      (AWS_EC2_METADATA_SERVICE_ENDPOINT moves it).
// Region: argument, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, us-east-1.
// SSO and MFA profiles are not supported.
// Messages name files, profiles and variables, never a key or secret.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/io/aws/aws_sigv4.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

struct AwsConfigRequest {
  std::string access_key_id, secret_access_key, session_token;  // explicit (secret)
  std::string profile;
  std::string region;
  bool need_credentials = true;  // false with skip_signature: only the region is resolved
};

// An ambient credential source, resolved without touching the network.
struct AmbientCredentialSource {
  enum class Kind { kWebIdentity, kAssumeRole, kProcess, kContainer, kInstanceMetadata };
  Kind kind = Kind::kInstanceMetadata;
  std::string endpoint;  // STS, the container credentials URL, or the IMDS endpoint
  std::string command;   // kProcess: the profile's credential_process
  // kAssumeRole: STS AssumeRole signed with `base_keys` or what `base` yields, in `region`.
  std::string external_id, duration_seconds, region;
  std::optional<AwsCredentials> base_keys;  // secret
  std::shared_ptr<const AmbientCredentialSource> base;
  std::string role_arn, session_name, token_file;  // web identity
  std::string authorization;                       // container (secret)
  std::string authorization_file;                  // container: read at each fetch
  // "web identity (role arn:..., STS https://sts.us-east-1.amazonaws.com)", ... no secrets.
  std::string Describe() const;
};

struct AwsConfig {
  std::optional<AwsCredentials> credentials;
  std::optional<AmbientCredentialSource> ambient;  // when `credentials` is not set
  std::string region;
  std::string credentials_source;  // "arguments", "environment", "profile 'x' (path)"
};

// What ResolveAwsConfig says when no source yields credentials.
inline constexpr std::string_view kNoAwsCredentials =
    "no AWS credentials found: pass access_key_id= and secret_access_key=, set "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, configure a profile in ~/.aws/credentials "
    "(AWS_PROFILE), or run where a role is served (web identity, container or instance "
    "metadata); for a public bucket pass skip_signature=True";

Result<AwsConfig> ResolveAwsConfig(const AwsConfigRequest& request, const EnvLookup& env);

// [section] -> key -> value. Comments (# ;), blank lines and indented continuation lines
// (nested settings such as `s3 =` blocks) are skipped. Errors name the file and line, not
// the line's text (it may hold a secret).
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
Result<IniFile> ParseIni(std::string_view text, std::string_view where);

}  // namespace insitubatch
