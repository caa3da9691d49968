#pragma once

// Credentials fetched at run time and fetched again before they expire: the sources AWS
// gives code that runs inside it, in botocore's order after keys and profiles --
//   * web identity (EKS IRSA): STS AssumeRoleWithWebIdentity with a token file's contents;
//   * container (ECS tasks, EKS Pod Identity): GET the container credentials endpoint;
//   * instance metadata (EC2, IMDSv2): PUT a session token, GET the role, GET its keys.
// ResolveAwsConfig (aws_credentials.h) picks the source from the environment without
// touching the network; this file speaks the protocols. Messages name the source and its
// endpoint, never a key, secret, session token or web-identity token.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/io/aws_credentials.h"
#include "insitubatch/io/curl_transport.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

using SystemTime = std::chrono::system_clock::time_point;

struct ExpiringCredentials {
  AwsCredentials credentials;
  std::optional<SystemTime> expiration;  // none: valid until the process ends
};

// Where a signer gets its credentials. Thread-safe.
class AwsCredentialProvider {
 public:
  virtual ~AwsCredentialProvider() = default;
  virtual Result<AwsCredentials> Get() = 0;
  // "arguments", "environment", "profile 'x'", "instance metadata (http://...)", ...
  virtual const std::string& source() const = 0;
};

std::shared_ptr<AwsCredentialProvider> FixedCredentials(AwsCredentials credentials,
                                                        std::string source);

// Caches what `fetch` returns and calls it again once the credentials are within
// kRefreshMargin of expiring. A failed refresh keeps serving credentials that have not yet
// expired (and tries again on the next call); with none left, the error names the source.
class RefreshingCredentials final : public AwsCredentialProvider {
 public:
  using Fetch = std::function<Result<ExpiringCredentials>()>;
  using Clock = std::function<SystemTime()>;
  static constexpr std::chrono::minutes kRefreshMargin{5};

  RefreshingCredentials(std::string source, Fetch fetch,
                        Clock clock = [] { return std::chrono::system_clock::now(); });
  Result<AwsCredentials> Get() override;
  const std::string& source() const override { return source_; }
  uint64_t fetches() const;  // for tests

 private:
  std::string source_;
  Fetch fetch_;
  Clock clock_;
  mutable std::mutex mutex_;
  std::optional<ExpiringCredentials> cached_;
  uint64_t fetches_ = 0;
};

// The provider for an ambient source ResolveAwsConfig chose; it fetches on first use.
std::shared_ptr<RefreshingCredentials> MakeAmbientCredentials(AmbientCredentialSource source);

// The protocols, one exchange each (tests drive them against loopback servers).
Result<ExpiringCredentials> FetchWebIdentityCredentials(CurlTransport& transport,
                                                        const AmbientCredentialSource& source);
Result<ExpiringCredentials> FetchContainerCredentials(CurlTransport& transport,
                                                      const AmbientCredentialSource& source);
Result<ExpiringCredentials> FetchInstanceMetadataCredentials(CurlTransport& transport,
                                                             const AmbientCredentialSource& source);

// "2026-11-29T16:00:00Z", optionally with fractional seconds or a "+00:00" offset.
Result<SystemTime> ParseAwsTimestamp(std::string_view text);

// The credentials JSON of the container endpoint and instance metadata:
// {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"[, "Code": "Success"]}.
Result<ExpiringCredentials> ParseCredentialsJson(std::string_view body, std::string_view where);

}  // namespace insitubatch
