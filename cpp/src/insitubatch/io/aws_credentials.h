#pragma once

// Where S3 credentials and the region come from, in botocore's order:
//   1. explicit arguments (access_key_id + secret_access_key [+ session_token]);
//   2. an explicit profile argument -> that profile of the shared files;
//   3. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN];
//   4. the AWS_PROFILE (else "default") profile of ~/.aws/credentials and ~/.aws/config
//      (AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE move them).
// Region: argument, AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, us-east-1.
// SSO, credential_process, web identity and instance metadata are not supported.
// Messages name files, profiles and variables, never a key or secret.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/io/aws_sigv4.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// Reads an environment variable; tests pass a fake.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
EnvLookup ProcessEnv();

struct AwsConfigRequest {
  std::string access_key_id, secret_access_key, session_token;  // explicit (secret)
  std::string profile;
  std::string region;
  bool need_credentials = true;  // false with skip_signature: only the region is resolved
};

struct AwsConfig {
  std::optional<AwsCredentials> credentials;
  std::string region;
  std::string credentials_source;  // "arguments", "environment", "profile 'x' (path)"
};

Result<AwsConfig> ResolveAwsConfig(const AwsConfigRequest& request, const EnvLookup& env);

// [section] -> key -> value. Comments (# ;), blank lines and indented continuation lines
// (nested settings such as `s3 =` blocks) are skipped. Errors name the file and line, not
// the line's text (it may hold a secret).
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
Result<IniFile> ParseIni(std::string_view text, std::string_view where);

}  // namespace insitubatch
