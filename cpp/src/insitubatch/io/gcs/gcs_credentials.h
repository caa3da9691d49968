#pragma once

// Where a gs:// store gets its OAuth2 access token, in google-auth's order:
//   1. token= or GOOGLE_OAUTH_ACCESS_TOKEN: used as is;
//   2. a key file -- service_account_key= (the JSON text), service_account_path=, or
//      GOOGLE_SERVICE_ACCOUNT_KEY / GOOGLE_SERVICE_ACCOUNT_PATH / GOOGLE_SERVICE_ACCOUNT /
//      GOOGLE_APPLICATION_CREDENTIALS -- holding a service account (a JWT signed with its
//      RS256 key, exchanged at its token_uri) or gcloud's authorized_user (the refresh-token
//      grant);
//   3. gcloud's application-default credentials
//      ($CLOUDSDK_CONFIG or ~/.config/gcloud/application_default_credentials.json);
//   4. the metadata server of GCE, GKE, Cloud Run and Vertex, unless NO_GCE_CHECK=true
//      (GCE_METADATA_HOST moves it).
// Fetched tokens are scoped read-only (devstorage.read_only) and refreshed before they
// expire. Messages name files and endpoints, never a token, key or secret.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/refreshing.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

inline constexpr std::string_view kGcsReadOnlyScope = "https://www.googleapis.com/auth/devstorage.read_only";

struct GcsCredentialRequest {
  std::string token;                 // secret
  std::string service_account_key;   // JSON text (secret)
  std::string service_account_path;  // a key file
};

struct GcsCredentialSource {
  enum class Kind { kToken, kServiceAccount, kAuthorizedUser, kMetadata };
  Kind kind = Kind::kMetadata;
  std::string where;  // "the token argument", "key file /path", "the metadata server http://..."
  std::string token;  // kToken (secret)
  std::string client_email, private_key, token_uri;     // kServiceAccount (key secret)
  std::string client_id, client_secret, refresh_token;  // kAuthorizedUser (secret)
  std::string endpoint;                                 // kMetadata
  std::string Describe() const;
};

// What ResolveGcsCredentials says when no source yields a token.
inline constexpr std::string_view kNoGcsCredentials =
    "no GCS credentials: pass token= (an OAuth2 access token, e.g. from `gcloud auth "
    "print-access-token`) or service_account_path=, set GOOGLE_OAUTH_ACCESS_TOKEN or "
    "GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or run "
    "where a metadata server serves a service account; for a public bucket pass "
    "skip_signature=True";

// Reads key files but never the network.
Result<GcsCredentialSource> ResolveGcsCredentials(const GcsCredentialRequest& request, const EnvLookup& env);

// A key file's JSON ("service_account" or "authorized_user"); `where` names it.
Result<GcsCredentialSource> ParseGcsKeyFile(std::string_view json, std::string where);

using GcsToken = Refreshing<std::string>;
// Fetches on first use (the fixed token is never refreshed).
std::shared_ptr<GcsToken> MakeGcsToken(GcsCredentialSource source);

// The exchanges, one each (tests drive them against loopback servers).
Result<std::string> SignServiceAccountJwt(const GcsCredentialSource& source, SystemTime now);
Result<Expiring<std::string>> FetchGcsToken(CurlTransport& transport, const GcsCredentialSource& source,
                                            SystemTime now);
// {"access_token": ..., "expires_in": seconds, ...} -> the token and when it expires.
Result<Expiring<std::string>> ParseGcsTokenReply(std::string_view json, std::string_view where, SystemTime now);

}  // namespace insitubatch
