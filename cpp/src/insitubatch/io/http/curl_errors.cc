#include "insitubatch/io/http/curl_errors.h"

#include <cerrno>
#include <cstdio>

namespace insitubatch {

bool IsTransientCurlError(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_AGAIN:
      return true;
    default:
      return false;
  }
}

std::string SecondsText(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), s < 10 ? "%.2f s" : "%.1f s", s);
  return text;
}

std::string DescribeTransferFailure(CURLcode code, const char* errbuf, CURL* easy, double attempt_s,
                                    const TransportOptions& o, const CaBundle& ca, bool* connect_failure) {
  const std::string curl_text = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(code);
  const std::string after = " after " + SecondsText(attempt_s);
  curl_off_t connected_us = 0;
  curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connected_us);
  *connect_failure = false;
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      *connect_failure = true;
      return "DNS lookup failed" + after + " (" + curl_text + ")";
    case CURLE_COULDNT_CONNECT: {
      *connect_failure = true;
      long os_errno = 0;
      curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
      if (os_errno == ECONNREFUSED) {
        return "connection refused" + after + ": nothing listens there (" + curl_text + ")";
      }
      if (os_errno == ENETUNREACH || os_errno == EHOSTUNREACH) {
        return "host unreachable" + after + " (" + curl_text + ")";
      }
      return "could not connect" + after + " (" + curl_text + ")";
    }
    case CURLE_OPERATION_TIMEDOUT:
      if (connected_us == 0 && attempt_s * 1000 >= 0.9 * o.connect_timeout.count()) {
        *connect_failure = true;
        return "connect timed out" + after +
               ": nothing accepted the connection within "
               "connect_timeout=" +
               SecondsText(o.connect_timeout.count() / 1000.0);
      }
      if (connected_us == 0) {  // queued for a connection (others to the host were busy)
        return "timed out" + after +
               " waiting for a connection to the server: timeout=" + SecondsText(o.timeout.count() / 1000.0) +
               " covers the whole request";
      }
      return "read timed out" + after +
             ": the reply did not complete within timeout=" + SecondsText(o.timeout.count() / 1000.0);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return "TLS certificate verification failed" + after + " (" + curl_text + ") with the CA certificates in " +
             ca.Describe() +
             "; name the right ones with ca_file or SSL_CERT_FILE, or pass verify_tls=False only for a " +
             "server you trust";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
      return "TLS handshake failed" + after + " (" + curl_text + ")";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      if (curl_text.find("reset") != std::string::npos) {
        return "connection reset by the server" + after + " (" + curl_text + ")";
      }
      return "network error" + after + " (" + curl_text + ")";
    case CURLE_GOT_NOTHING:
      return "the server closed the connection without replying" + after;
    case CURLE_PARTIAL_FILE:
      return "the body ended early" + after + " (" + curl_text + ")";
    default:
      return curl_text + after;
  }
}

}  // namespace insitubatch
