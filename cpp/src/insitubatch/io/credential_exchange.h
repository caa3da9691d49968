#pragma once

// The small HTTP exchanges behind fetched credentials (AWS STS, container and instance
// metadata endpoints; Google's token endpoint and metadata server): one blocking request on
// a transport of their own, short bodies, errors that name the endpoint and never a secret.

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/io/http/curl_transport.h"
#include "insitubatch/io/refreshing.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// A transport for credential fetches. `link_local`: a metadata service that answers at once
// or not at all, so short timeouts and one retry (as botocore and google-auth do).
Result<std::shared_ptr<CurlTransport>> MakeCredentialTransport(bool link_local);

// One request; non-2xx replies come back for the caller to explain.
Result<HttpResponse> CredentialExchange(CurlTransport& transport, std::string method, std::string url,
                                        std::vector<std::string> headers, const std::string& where,
                                        std::string body = "");

std::string ResponseText(const HttpResponse& response);

// "<where> answered HTTP 403 Forbidden (...)", with the status as the detail.
Status CredentialReplyError(const HttpResponse& response, const std::string& where);

// "a=1&b=2" with each value percent-encoded: an application/x-www-form-urlencoded body.
std::string FormBody(std::initializer_list<std::pair<std::string_view, std::string_view>> fields);

// An OAuth2 access token fit for an Authorization line: not empty, printable ASCII only.
Status CheckBearerToken(const std::string& token, std::string_view where);

// A bearer token as the stores use one: `fixed` is used as it is, never refreshed; else
// `fetch` runs on first use and again before the token expires, on a credential transport
// of its own made at the first fetch (`link_local`: a metadata service on the machine).
using TokenFetch = std::function<Result<Expiring<std::string>>(CurlTransport&)>;
std::shared_ptr<Refreshing<std::string>> MakeFetchedToken(std::string source, std::optional<std::string> fixed,
                                                          bool link_local, TokenFetch fetch);

// A short file a source names (a token, a key), without trailing whitespace.
Result<std::string> ReadCredentialFile(const std::string& path, std::string_view what);

}  // namespace insitubatch
