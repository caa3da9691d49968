#include "insitubatch/io/credential_exchange.h"

#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "insitubatch/io/http/http_request.h"
#include "insitubatch/util/text.h"

namespace insitubatch {

namespace {
constexpr size_t kMaxReplyBytes = 64 << 10;  // credential documents are small
constexpr size_t kMaxCredentialFileBytes = 1 << 20;
}  // namespace

Result<std::shared_ptr<CurlTransport>> MakeCredentialTransport(bool link_local) {
  TransportOptions options;
  options.io_threads = 1;
  if (link_local) {
    options.timeout = std::chrono::milliseconds(2000);
    options.connect_timeout = std::chrono::milliseconds(1000);
    options.retry.max_attempts = 2;
  } else {
    options.timeout = std::chrono::milliseconds(10000);
    options.connect_timeout = std::chrono::milliseconds(3000);
  }
  return CurlTransport::Create(options);
}

Result<HttpResponse> CredentialExchange(CurlTransport& transport, std::string method, std::string url,
                                        std::vector<std::string> headers, const std::string& where, std::string body) {
  HttpRequest request;
  request.method = std::move(method);
  request.body = std::move(body);
  request.url = std::move(url);
  request.headers = std::move(headers);
  request.where = where;
  request.max_body_bytes = kMaxReplyBytes;
  return transport.Send(std::move(request));
}

std::string ResponseText(const HttpResponse& response) {
  return std::string(reinterpret_cast<const char*>(response.body.data()), response.body.size());
}

Status CredentialReplyError(const HttpResponse& response, const std::string& where) {
  return IoError(where + " answered " + DescribeHttpError(response.status, response.error_body))
      .set_detail(static_cast<int>(response.status));
}

std::string FormBody(std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    out += std::string(name) + "=" + PercentEncode(value, false);
  }
  return out;
}

Status CheckBearerToken(const std::string& token, std::string_view where) {
  if (token.empty()) return InvalidArgument(std::string(where) + ": the access token is empty");
  for (char c : token) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7E) {
      return InvalidArgument(std::string(where) + ": the access token holds whitespace or control characters");
    }
  }
  return Status::Ok();
}

std::shared_ptr<Refreshing<std::string>> MakeFetchedToken(std::string source, std::optional<std::string> fixed,
                                                          bool link_local, TokenFetch fetch) {
  auto transport = std::make_shared<std::shared_ptr<CurlTransport>>();
  auto get = [fixed = std::move(fixed), link_local, fetch = std::move(fetch),
              transport]() -> Result<Expiring<std::string>> {
    if (fixed) return Expiring<std::string>{*fixed, std::nullopt};
    if (!*transport) {
      INSITU_ASSIGN_OR_RETURN(*transport, MakeCredentialTransport(link_local));
    }
    return fetch(**transport);
  };
  return std::make_shared<Refreshing<std::string>>(std::move(source), std::move(get));
}

Result<std::string> ReadCredentialFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return IoError("cannot read the " + std::string(what) + " " + path + ": " + ErrnoText(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string out = text.str();
  if (out.size() > kMaxCredentialFileBytes) {
    return InvalidArgument("the " + std::string(what) + " " + path + " is larger than 1 MiB");
  }
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  if (out.empty()) return InvalidArgument("the " + std::string(what) + " " + path + " is empty");
  return out;
}

}  // namespace insitubatch
