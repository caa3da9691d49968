// Cloud store bindings: HTTP(S), S3, GCS and Azure stores on the curl transport. Option parsing
// and validation live in insitubatch/stores.py; this file only moves checked values into
// the C++ option structs. Nothing here prints a credential.

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <map>

#include "bindings.h"
#include "insitubatch/io/aws/s3_store.h"
#include "insitubatch/io/azure/azure_store.h"
#include "insitubatch/io/gcs/gcs_store.h"
#include "insitubatch/io/http/http_store.h"

namespace insitubatch::python {
namespace {

using std::chrono::milliseconds;

nb::dict StatsDict(const TransportStats& s) {
  nb::dict d;
  d["requests"] = s.requests;
  d["attempts"] = s.attempts;
  d["retries"] = s.retries;
  d["failures"] = s.failures;
  return d;
}

}  // namespace

void BindCloudStores(nb::module_& m) {
  nb::class_<TransportOptions>(m, "TransportOptions", "Timeouts, retries and TLS settings of the HTTP transport.")
      .def(nb::init<>())
      .def_rw("io_threads", &TransportOptions::io_threads)
      .def_prop_rw(
          "max_attempts", [](const TransportOptions& o) { return o.retry.max_attempts; },
          [](TransportOptions& o, int v) { o.retry.max_attempts = v; })
      .def_prop_rw(
          "retry_base_delay_ms", [](const TransportOptions& o) { return o.retry.base_delay.count(); },
          [](TransportOptions& o, int64_t v) { o.retry.base_delay = milliseconds(v); })
      .def_prop_rw(
          "retry_max_delay_ms", [](const TransportOptions& o) { return o.retry.max_delay.count(); },
          [](TransportOptions& o, int64_t v) { o.retry.max_delay = milliseconds(v); })
      .def_prop_rw(
          "retry_deadline_ms", [](const TransportOptions& o) { return o.retry.deadline.count(); },
          [](TransportOptions& o, int64_t v) { o.retry.deadline = milliseconds(v); })
      .def_prop_rw(
          "connect_retry_deadline_ms", [](const TransportOptions& o) { return o.retry.connect_deadline.count(); },
          [](TransportOptions& o, int64_t v) { o.retry.connect_deadline = milliseconds(v); })
      .def_prop_rw(
          "timeout_ms", [](const TransportOptions& o) { return o.timeout.count(); },
          [](TransportOptions& o, int64_t v) { o.timeout = milliseconds(v); })
      .def_prop_rw(
          "connect_timeout_ms", [](const TransportOptions& o) { return o.connect_timeout.count(); },
          [](TransportOptions& o, int64_t v) { o.connect_timeout = milliseconds(v); })
      .def_rw("verify_tls", &TransportOptions::verify_tls)
      .def_rw("ca_file", &TransportOptions::ca_file)
      .def_rw("max_connections_per_host", &TransportOptions::max_connections_per_host)
      .def("validate", [](const TransportOptions& o) { ThrowIfError(o.Validate()); });

  m.def(
      "find_ca_bundle",
      [](const std::string& ca_file, bool verify_tls) {
        const CaBundle ca = ValueOrThrow(FindCaBundle(ca_file, verify_tls));
        nb::dict d;
        d["file"] = ca.file;
        d["dir"] = ca.dir;
        d["source"] = ca.source;
        d["description"] = ca.Describe();
        return d;
      },
      nb::arg("ca_file") = "", nb::arg("verify_tls") = true,
      "The CA certificates a store opened now would verify TLS with (what print_debug_info() shows).");
  m.def("set_fallback_ca_bundle", &SetFallbackCaBundle, nb::arg("path"),
        "The bundle to use when the system has none (the package registers certifi's at import).");

  nb::class_<HttpStore, Store>(m, "HttpStore", nb::dynamic_attr(), "A store over plain HTTP(S) (no listing).")
      .def("transport_stats", [](const HttpStore& s) { return StatsDict(s.transport_stats()); })
      .def_prop_ro(
          "ca_bundle", [](const HttpStore& s) { return s.ca_bundle().Describe(); },
          "The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, "
          "certifi, ...).")
      .def("__repr__", [](const HttpStore& s) { return "<insitubatch.HttpStore " + s.Describe("") + ">"; });

  nb::class_<S3Store, Store>(m, "S3Store", nb::dynamic_attr(), "An S3 (or S3-compatible) bucket prefix.")
      .def_prop_ro("region", &S3Store::region)
      .def_prop_ro("endpoint_url", &S3Store::endpoint_url)
      .def_prop_ro("anonymous", &S3Store::anonymous)
      .def_prop_ro("credentials_source", &S3Store::credentials_source,
                   "Where the credentials come from (\"environment\", \"profile 'x'\", \"instance "
                   "metadata (...)\", ...); \"\" when anonymous. Never a key.")
      .def("transport_stats", [](const S3Store& s) { return StatsDict(s.transport_stats()); })
      .def_prop_ro(
          "ca_bundle", [](const S3Store& s) { return s.ca_bundle().Describe(); },
          "The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, "
          "certifi, ...).")
      .def("__repr__", [](const S3Store& s) {
        return "<insitubatch.S3Store " + s.Describe("") + " region=" + s.region() + " endpoint=" + s.endpoint_url() +
               (s.anonymous() ? " anonymous" : "") + ">";
      });

  nb::class_<GcsStore, Store>(m, "GcsStore", nb::dynamic_attr(), "A Google Cloud Storage bucket prefix.")
      .def_prop_ro("endpoint_url", &GcsStore::endpoint_url)
      .def_prop_ro("anonymous", &GcsStore::anonymous)
      .def_prop_ro("credentials_source", &GcsStore::credentials_source,
                   "Where the token comes from (\"the token argument\", \"service account ... "
                   "(file ...)\", \"the metadata server ...\"); \"\" when anonymous. Never the token.")
      .def("transport_stats", [](const GcsStore& s) { return StatsDict(s.transport_stats()); })
      .def_prop_ro(
          "ca_bundle", [](const GcsStore& s) { return s.ca_bundle().Describe(); },
          "The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, "
          "certifi, ...).")
      .def("__repr__", [](const GcsStore& s) {
        return "<insitubatch.GcsStore " + s.Describe("") + " endpoint=" + s.endpoint_url() +
               (s.anonymous() ? " anonymous" : "") + ">";
      });

  nb::class_<AzureStore, Store>(m, "AzureStore", nb::dynamic_attr(), "An Azure Blob Storage container prefix.")
      .def_prop_ro("container_url", &AzureStore::container_url)
      .def_prop_ro("anonymous", &AzureStore::anonymous)
      .def_prop_ro("credentials_source", &AzureStore::credentials_source,
                   "What authorizes the requests (\"the account key (AZURE_STORAGE_ACCOUNT_KEY)\", "
                   "\"service principal ...\", \"managed identity at ...\"); \"\" when anonymous. "
                   "Never the secret.")
      .def("transport_stats", [](const AzureStore& s) { return StatsDict(s.transport_stats()); })
      .def_prop_ro(
          "ca_bundle", [](const AzureStore& s) { return s.ca_bundle().Describe(); },
          "The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, "
          "certifi, ...).")
      .def("__repr__", [](const AzureStore& s) {
        return "<insitubatch.AzureStore " + s.Describe("") + " at " + s.container_url() +
               (s.anonymous() ? " anonymous" : "") + ">";
      });

  m.def(
      "open_azure_store",
      [](const std::string& url, const TransportOptions& transport, const std::string& account_name,
         const std::string& endpoint, bool use_emulator, bool skip_signature,
         const std::map<std::string, std::string>& credentials, bool writable,
         uint64_t multipart_part_size) -> std::shared_ptr<Store> {
        AzureStoreOptions options;
        options.writable = writable;
        options.block_bytes = multipart_part_size;
        options.transport = transport;
        options.account_name = account_name;
        options.endpoint = endpoint;
        options.use_emulator = use_emulator;
        options.skip_signature = skip_signature;
        AzureCredentialRequest& c = options.credentials;
        const std::map<std::string, std::string*> fields = {{"token", &c.token},
                                                            {"account_key", &c.account_key},
                                                            {"sas_key", &c.sas_key},
                                                            {"client_id", &c.client_id},
                                                            {"client_secret", &c.client_secret},
                                                            {"tenant_id", &c.tenant_id},
                                                            {"authority_host", &c.authority_host},
                                                            {"federated_token_file", &c.federated_token_file},
                                                            {"msi_endpoint", &c.msi_endpoint},
                                                            {"object_id", &c.object_id},
                                                            {"msi_resource_id", &c.msi_resource_id}};
        for (const auto& [name, value] : credentials) {
          auto field = fields.find(name);
          if (field == fields.end()) ThrowIfError(InvalidArgument("unknown Azure credential option " + name));
          *field->second = value;
        }
        // Opening may fetch a token (Entra ID, the managed identity endpoint).
        auto opened = [&] {
          nb::gil_scoped_release release;
          return AzureStore::Open(url, std::move(options));
        }();
        return ValueOrThrow(std::move(opened));
      },
      nb::arg("url"), nb::arg("transport"), nb::arg("account_name") = "", nb::arg("endpoint") = "",
      nb::arg("use_emulator") = false, nb::arg("skip_signature") = false,
      nb::arg("credentials") = std::map<std::string, std::string>{}, nb::arg("writable") = false,
      nb::arg("multipart_part_size") = AzureStoreOptions().block_bytes,
      "An Azure store at az://container/prefix (use insitubatch.store() for checked options).");

  m.def(
      "azure_string_to_sign",
      [](const std::string& method, const std::vector<std::string>& headers, const std::string& account,
         const std::string& path, const std::vector<std::pair<std::string, std::string>>& query) {
        return AzureStringToSign(method, headers, account, path, query);
      },
      nb::arg("method"), nb::arg("headers"), nb::arg("account"), nb::arg("path"), nb::arg("query"),
      "SharedKey's string to sign for one request (tests check it against azure-storage-blob).");

  m.def(
      "open_http_store",
      [](const std::string& url, const TransportOptions& transport,
         const std::map<std::string, std::string>& headers) -> std::shared_ptr<Store> {
        HttpStoreOptions options;
        options.transport = transport;
        options.transport.follow_redirects = true;
        for (const auto& [name, value] : headers) options.headers.push_back(name + ": " + value);
        return ValueOrThrow(HttpStore::Open(url, std::move(options)));
      },
      nb::arg("url"), nb::arg("transport"), nb::arg("headers"),
      "An HTTP(S) store at `url` (use insitubatch.store() for checked options).");

  m.def(
      "open_s3_store",
      [](const std::string& url, const TransportOptions& transport, const std::string& region,
         const std::string& endpoint, std::optional<bool> virtual_hosted_style, bool skip_signature, bool request_payer,
         const std::string& access_key_id, const std::string& secret_access_key, const std::string& session_token,
         const std::string& profile, bool writable, uint64_t multipart_part_size) -> std::shared_ptr<Store> {
        S3StoreOptions options;
        options.writable = writable;
        options.multipart_part_bytes = multipart_part_size;
        options.transport = transport;
        options.region = region;
        options.endpoint = endpoint;
        options.virtual_hosted_style = virtual_hosted_style;
        options.skip_signature = skip_signature;
        options.request_payer = request_payer;
        options.access_key_id = access_key_id;
        options.secret_access_key = secret_access_key;
        options.session_token = session_token;
        options.profile = profile;
        // Opening may fetch credentials (web identity, container, instance metadata).
        auto opened = [&] {
          nb::gil_scoped_release release;
          return S3Store::Open(url, std::move(options));
        }();
        return ValueOrThrow(std::move(opened));
      },
      nb::arg("url"), nb::arg("transport"), nb::arg("region") = "", nb::arg("endpoint") = "",
      nb::arg("virtual_hosted_style") = nb::none(), nb::arg("skip_signature") = false, nb::arg("request_payer") = false,
      nb::arg("access_key_id") = "", nb::arg("secret_access_key") = "", nb::arg("session_token") = "",
      nb::arg("profile") = "", nb::arg("writable") = false,
      nb::arg("multipart_part_size") = S3StoreOptions().multipart_part_bytes,
      "An S3 store at s3://bucket/prefix (use insitubatch.store() for checked options).");

  m.def(
      "open_gcs_store",
      [](const std::string& url, const TransportOptions& transport, const std::string& endpoint, bool skip_signature,
         const std::string& token, const std::string& service_account_key, const std::string& service_account_path,
         bool writable, uint64_t multipart_part_size) -> std::shared_ptr<Store> {
        GcsStoreOptions options;
        options.writable = writable;
        options.multipart_part_bytes = multipart_part_size;
        options.transport = transport;
        options.endpoint = endpoint;
        options.skip_signature = skip_signature;
        options.token = token;
        options.service_account_key = service_account_key;
        options.service_account_path = service_account_path;
        // Opening may fetch a token (key files, the metadata server).
        auto opened = [&] {
          nb::gil_scoped_release release;
          return GcsStore::Open(url, std::move(options));
        }();
        return ValueOrThrow(std::move(opened));
      },
      nb::arg("url"), nb::arg("transport"), nb::arg("endpoint") = "", nb::arg("skip_signature") = false,
      nb::arg("token") = "", nb::arg("service_account_key") = "", nb::arg("service_account_path") = "",
      nb::arg("writable") = false, nb::arg("multipart_part_size") = GcsStoreOptions().multipart_part_bytes,
      "A GCS store at gs://bucket/prefix (use insitubatch.store() for checked options).");
}

}  // namespace insitubatch::python
