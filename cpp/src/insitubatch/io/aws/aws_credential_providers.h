#pragma once

// Credentials fetched at run time and fetched again before they expire: the sources AWS
// gives code that runs inside it, in botocore's order after keys and profiles --
//   * web identity (EKS IRSA): STS AssumeRoleWithWebIdentity with a token file's contents;
//   * container (ECS tasks, EKS Pod Identity): GET the container credentials endpoint;
//   * instance metadata (EC2, IMDSv2): PUT a session token, GET the role, GET its keys;
//   * a profile's credential_process: a command that prints the keys;
//   * a profile's role_arn: STS AssumeRole, signed with its source's credentials.
// ResolveAwsConfig (aws_credentials.h) picks the source from the environment without
// touching the network; this file speaks the protocols. Messages name the source and its
// endpoint, never a key, secret, session token or web-identity token.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/io/aws/aws_credentials.h"
#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/refreshing.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

using ExpiringCredentials = Expiring<AwsCredentials>;

// Where a signer gets its credentials. Thread-safe.
class AwsCredentialProvider {
 public:
  virtual ~AwsCredentialProvider() = default;
  virtual Result<AwsCredentials> Get() = 0;
  // "arguments", "environment", "profile 'x'", "instance metadata (http://...)", ...
  virtual const std::string& source() const = 0;
};

std::shared_ptr<AwsCredentialProvider> FixedCredentials(AwsCredentials credentials, std::string source);

// AWS credentials from a fetch function, refreshed as refreshing.h describes.
class RefreshingCredentials final : public AwsCredentialProvider {
 public:
  using Fetch = Refreshing<AwsCredentials>::Fetch;
  using Clock = Refreshing<AwsCredentials>::Clock;
  RefreshingCredentials(
      std::string source, Fetch fetch, Clock clock = [] { return std::chrono::system_clock::now(); })
      : refreshing_("AWS " + source, std::move(fetch), std::move(clock)), source_(std::move(source)) {}
  Result<AwsCredentials> Get() override { return refreshing_.Get(); }
  const std::string& source() const override { return source_; }
  uint64_t fetches() const { return refreshing_.fetches(); }

 private:
  Refreshing<AwsCredentials> refreshing_;
  std::string source_;
};

// The provider for an ambient source ResolveAwsConfig chose; it fetches on first use.
std::shared_ptr<RefreshingCredentials> MakeAmbientCredentials(AmbientCredentialSource source);

// The protocols, one exchange each (tests drive them against loopback servers).
Result<ExpiringCredentials> FetchWebIdentityCredentials(CurlTransport& transport,
                                                        const AmbientCredentialSource& source);
Result<ExpiringCredentials> FetchContainerCredentials(CurlTransport& transport, const AmbientCredentialSource& source);
Result<ExpiringCredentials> FetchInstanceMetadataCredentials(CurlTransport& transport,
                                                             const AmbientCredentialSource& source);
// STS AssumeRole for `source.role_arn`, SigV4-signed with `base` for `source.region`.
Result<ExpiringCredentials> FetchAssumeRoleCredentials(CurlTransport& transport, const AmbientCredentialSource& source,
                                                       const AwsCredentials& base, SystemTime now);
// Runs the profile's credential_process (split like a shell would, no shell run) and reads
// {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"} from its
// standard output; a non-zero exit is an error quoting the start of its standard error.
Result<ExpiringCredentials> FetchProcessCredentials(const AmbientCredentialSource& source);
// The command line's words: whitespace-separated, with '...' and "..." quoting and
// backslash escapes (outside single quotes), as shlex.split does.
Result<std::vector<std::string>> SplitCommandLine(std::string_view command);

// "2026-11-29T16:00:00Z", optionally with fractional seconds or a "+00:00" offset.
Result<SystemTime> ParseAwsTimestamp(std::string_view text);

// The credentials JSON of the container endpoint and instance metadata:
// {"AccessKeyId", "SecretAccessKey", "Token" (or "SessionToken"), "Expiration"[, "Code":
// "Success"]}.
Result<ExpiringCredentials> ParseCredentialsJson(std::string_view body, std::string_view where);

}  // namespace insitubatch
