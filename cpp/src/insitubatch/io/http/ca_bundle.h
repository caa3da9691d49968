#pragma once

// Which CA certificates verify a TLS server. libcurl and OpenSSL look in the paths compiled
// into them, which are the build machine's: a wheel's bundled copies carry Debian's and find
// nothing on Fedora, RHEL, SUSE or Alpine. So the transport always names what it found, in
// this order: the store's ca_file option; the variables users set for other tools
// (SSL_CERT_FILE with SSL_CERT_DIR, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, AWS_CA_BUNDLE); the
// places the major distributions keep their bundle; certifi's bundle when the Python package
// registered one; else libcurl's built-in default.

#include <functional>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

struct CaBundle {
  std::string file;    // a PEM bundle (CURLOPT_CAINFO); "" when none
  std::string dir;     // a hashed certificate directory (CURLOPT_CAPATH); "" when none
  std::string source;  // where it came from: "the ca_file option", "SSL_CERT_FILE", "the system", ...
  bool verify = true;  // false: TLS peers are not verified, no bundle is looked for

  // "/etc/ssl/certs/ca-certificates.crt (from the system)", for describe() and messages.
  std::string Describe() const;
};

// Where to look; the defaults are the real system's. Tests substitute their own.
struct CaSearch {
  std::function<std::string(const char* name)> getenv;  // "" when unset
  std::vector<std::string> system_files;
  std::vector<std::string> system_dirs;
  std::string fallback_file;  // certifi's bundle, or ""

  static CaSearch System();
};

// The bundle that verifies TLS for a transport with these options. A variable or option that
// names a path which is not there is an error naming both (InvalidArgument), not a silent
// fallback to certificates the user did not choose.
Result<CaBundle> FindCaBundle(const std::string& ca_file, bool verify_tls, const CaSearch& search);
Result<CaBundle> FindCaBundle(const std::string& ca_file, bool verify_tls);

// The bundle to use when the system has none (the Python package registers certifi's when
// it is installed). Process-wide; read when a transport is created.
void SetFallbackCaBundle(std::string path);
std::string FallbackCaBundle();

}  // namespace insitubatch
