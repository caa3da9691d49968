#include "insitubatch/io/http/ca_bundle.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace insitubatch {
namespace {

enum class PathKind { kMissing, kFile, kDir };

PathKind Kind(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return PathKind::kMissing;
  if (S_ISDIR(st.st_mode)) return PathKind::kDir;
  return PathKind::kFile;
}

std::mutex& FallbackMutex() {
  static std::mutex m;
  return m;
}
std::string& FallbackPath() {
  static std::string path;
  return path;
}

}  // namespace

std::string CaBundle::Describe() const {
  if (!verify) return "none: TLS certificates are not verified (verify_tls=False)";
  std::string where;
  if (!file.empty()) where = file;
  if (!dir.empty()) where += (where.empty() ? "" : " and ") + dir;
  if (where.empty()) return "libcurl's built-in default (no CA bundle found on this system)";
  return where + " (from " + source + ")";
}

CaSearch CaSearch::System() {
  CaSearch s;
  s.getenv = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  // The single-file bundles the distributions keep (the list Go's crypto/x509 searches).
  s.system_files = {
      "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Gentoo, Arch
      "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL 6
      "/etc/ssl/ca-bundle.pem",                             // openSUSE
      "/etc/pki/tls/cacert.pem",                            // OpenELEC
      "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // CentOS, RHEL 7+
      "/etc/ssl/cert.pem",                                  // Alpine, macOS-style layouts
  };
  s.system_dirs = {"/etc/ssl/certs", "/etc/pki/tls/certs"};
  s.fallback_file = FallbackCaBundle();
  return s;
}

Result<CaBundle> FindCaBundle(const std::string& ca_file, bool verify_tls, const CaSearch& search) {
  CaBundle ca;
  if (!verify_tls) {
    ca.verify = false;
    return ca;
  }
  auto named = [&](const std::string& path, const std::string& what) -> Result<CaBundle> {
    const PathKind kind = Kind(path);
    if (kind == PathKind::kMissing) {
      return InvalidArgument(what + " names " + path +
                             ", which does not exist or cannot be read (it chooses the CA certificates "
                             "that verify TLS servers)");
    }
    CaBundle found;
    (kind == PathKind::kDir ? found.dir : found.file) = path;
    found.source = what;
    return found;
  };
  if (!ca_file.empty()) return named(ca_file, "the ca_file option");

  // OpenSSL's own pair: both apply when both are set.
  const std::string cert_file = search.getenv("SSL_CERT_FILE");
  const std::string cert_dir = search.getenv("SSL_CERT_DIR");
  if (!cert_file.empty() || !cert_dir.empty()) {
    if (!cert_file.empty()) {
      INSITU_ASSIGN_OR_RETURN(CaBundle f, named(cert_file, "SSL_CERT_FILE"));
      ca = std::move(f);
    }
    if (!cert_dir.empty()) {
      // SSL_CERT_DIR may list several directories; the first one present serves (libcurl
      // takes one).
      std::string first;
      size_t start = 0;
      while (start <= cert_dir.size()) {
        const size_t end = std::min(cert_dir.find(':', start), cert_dir.size());
        const std::string part = cert_dir.substr(start, end - start);
        if (Kind(part) == PathKind::kDir) {
          first = part;
          break;
        }
        start = end + 1;
      }
      if (first.empty()) {
        return InvalidArgument("SSL_CERT_DIR names " + cert_dir +
                               ", where no directory exists (it chooses the CA certificates that verify "
                               "TLS servers)");
      }
      ca.dir = first;
      ca.source = ca.file.empty() ? "SSL_CERT_DIR" : "SSL_CERT_FILE and SSL_CERT_DIR";
    }
    return ca;
  }
  for (const char* name : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE"}) {
    const std::string value = search.getenv(name);
    if (!value.empty()) return named(value, name);
  }
  for (const std::string& path : search.system_files) {
    if (Kind(path) == PathKind::kFile) {
      ca.file = path;
      ca.source = "the system";
      return ca;
    }
  }
  for (const std::string& path : search.system_dirs) {
    if (Kind(path) == PathKind::kDir) {
      ca.dir = path;
      ca.source = "the system";
      return ca;
    }
  }
  if (Kind(search.fallback_file) == PathKind::kFile) {
    ca.file = search.fallback_file;
    ca.source = "certifi";
  }
  return ca;  // nothing found: libcurl's built-in default
}

Result<CaBundle> FindCaBundle(const std::string& ca_file, bool verify_tls) {
  return FindCaBundle(ca_file, verify_tls, CaSearch::System());
}

void SetFallbackCaBundle(std::string path) {
  std::lock_guard<std::mutex> lock(FallbackMutex());
  FallbackPath() = std::move(path);
}

std::string FallbackCaBundle() {
  std::lock_guard<std::mutex> lock(FallbackMutex());
  return FallbackPath();
}

}  // namespace insitubatch
