#pragma once

// How an az:// store authorizes its requests, in object_store's (obstore's) order:
//   1. a bearer token (token= or AZURE_STORAGE_TOKEN): used as is;
//   2. the account key (account_key= or AZURE_STORAGE_ACCOUNT_KEY): SharedKey signing;
//   3. workload identity: client_id + tenant_id + a federated token file (AKS sets
//      AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE), exchanged at Entra ID;
//   4. a service principal: client_id + client_secret + tenant_id, exchanged at Entra ID;
//   5. a SAS token (sas_key= or AZURE_STORAGE_SAS_KEY): query parameters on every request;
//   6. managed identity: the instance metadata service (IMDS), or App Service's
//      IDENTITY_ENDPOINT (msi_endpoint=), optionally for one user-assigned identity.
// Options win over the environment key by key, as obstore's from_env does. Fetched tokens
// are scoped to https://storage.azure.com and refreshed before they expire. Messages name
// sources and endpoints, never a key, token or secret.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/refreshing.h"
#include "insitubatch/util/env.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// The Azurite / storage emulator's well-known account and key (public by design).
inline constexpr std::string_view kAzureEmulatorAccount = "devstoreaccount1";
inline constexpr std::string_view kAzureEmulatorKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

// What the caller passed ("" = not given: the environment may supply it).
struct AzureCredentialRequest {
  std::string token;                                                // bearer token (secret)
  std::string account_key;                                          // base64 (secret)
  std::string sas_key;                                              // "sv=...&sig=..." (secret)
  std::string client_id, client_secret, tenant_id, authority_host;  // client_secret: secret
  std::string federated_token_file;
  std::string msi_endpoint, object_id, msi_resource_id;
};

using QueryPairs = std::vector<std::pair<std::string, std::string>>;

struct AzureCredentialSource {
  enum class Kind { kBearer, kSharedKey, kWorkloadIdentity, kClientSecret, kSas, kManagedIdentity };
  Kind kind = Kind::kManagedIdentity;
  std::string where;  // "the token argument", "AZURE_STORAGE_ACCOUNT_KEY", ...
  std::string token;  // kBearer (secret)
  std::string key;    // kSharedKey: the decoded key bytes (secret)
  QueryPairs sas;     // kSas: decoded pairs (secret)
  std::string client_id, client_secret, tenant_id, authority_host, token_file;
  std::string endpoint;                        // kManagedIdentity
  std::string identity_param, identity_value;  // client_id / object_id / msi_res_id
  std::string identity_header;                 // App Service's IDENTITY_HEADER (secret)
  bool fetches_token() const {
    return kind == Kind::kWorkloadIdentity || kind == Kind::kClientSecret || kind == Kind::kManagedIdentity;
  }
  std::string Describe() const;
};

inline constexpr std::string_view kNoAzureCredentials =
    "no Azure credentials: pass account_key=, sas_key=, token= (a bearer token, e.g. from "
    "`az account get-access-token --resource https://storage.azure.com`), or client_id= "
    "with client_secret= and tenant_id=; set AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY "
    "or AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_FEDERATED_TOKEN_FILE; or run where a managed "
    "identity is assigned; for a public container pass skip_signature=True";

// Reads the environment but never a file or the network. `emulator`: no source is
// configured means the emulator's well-known key, not managed identity.
Result<AzureCredentialSource> ResolveAzureCredentials(const AzureCredentialRequest& request, const EnvLookup& env,
                                                      bool emulator);

// A SAS token as obstore reads one: percent-decoded, a leading '?' dropped, pieces split on
// '&' and then at their first '='. A piece without '=' is InvalidArgument.
Result<QueryPairs> ParseSasToken(std::string_view text);

using AzureToken = Refreshing<std::string>;
// For the sources that fetch a token (fetched on first use).
std::shared_ptr<AzureToken> MakeAzureToken(AzureCredentialSource source);

// One exchange (tests drive them against loopback servers).
Result<Expiring<std::string>> FetchAzureToken(CurlTransport& transport, const AzureCredentialSource& source,
                                              SystemTime now);
// {"access_token", "expires_in": seconds (number or string)} from Entra ID, or
// {"access_token", "expires_on": epoch seconds as a string} from IMDS.
Result<Expiring<std::string>> ParseAzureTokenReply(std::string_view json, std::string_view where, SystemTime now);

}  // namespace insitubatch
