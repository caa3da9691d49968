#include "insitubatch/io/http/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "insitubatch/io/http/curl_errors.h"
#include "insitubatch/io/http/curl_events.h"
#include "insitubatch/io/http/host_protocols.h"
#include "insitubatch/util/thread_pool.h"

namespace insitubatch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// First allocation for a body of unknown or declared size; it grows (doubling) as bytes
// actually arrive, so a lying Content-Length cannot make us reserve gigabytes up front.
constexpr uint64_t kInitialBodyCap = uint64_t{64} << 20;
constexpr uint64_t kUnknownLengthStart = uint64_t{256} << 10;
constexpr size_t kMaxErrorBody = 8192;
constexpr size_t kMaxIoThreads = 64;
// Connections each IO thread keeps open for reuse. libcurl's default keeps four per
// transfer in progress, so when the transfers in flight fell (between blocks, between
// epochs) it closed the connections a burst had opened, and the next burst paid a new
// connection's handshake (a round trip or more) for each read.
constexpr long kConnectionsKept = 512;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimLine(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// How long an idle IO loop sleeps at most, and how often it looks for cancelled
// transfers while it holds any: a raised CancelFlag is honoured within this.
constexpr int kIdlePollMs = 1000;
constexpr int kCancelPollMs = 50;

double SecondsBetween(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Transfer {
  HttpRequest request;
  ResponseCallback done;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  int attempt = 0;
  Clock::time_point first_start;
  Clock::time_point attempt_start;
  RetryRecord retry;  // the attempts retried so far
  uint64_t max_body = kDefaultMaxBodyBytes;

  // State of the current attempt.
  long status = 0;
  std::optional<uint64_t> content_length;
  std::string content_range, retry_after, bucket_region, etag, last_modified, goog_generation;
  bool body_started = false;
  bool to_error_body = false;
  Buffer body;
  uint64_t received = 0;
  std::string error_body;
  Status sink_error;
  bool sink_retry = false;
  char errbuf[CURL_ERROR_SIZE];

  std::string Context() const {
    const std::string_view verb = request.method == "PUT" || request.method == "POST" ? "writing "
                                  : request.method == "DELETE"                        ? "deleting "
                                                                                      : "reading ";
    return std::string(verb) + request.where + request.range.Describe();
  }

  void ResetAttempt() {
    status = 0;
    content_length.reset();
    content_range.clear();
    retry_after.clear();
    bucket_region.clear();
    etag.clear();
    last_modified.clear();
    goog_generation.clear();
    body_started = false;
    to_error_body = false;
    body = Buffer();
    received = 0;
    error_body.clear();
    sink_error = Status::Ok();
    sink_retry = false;
    errbuf[0] = '\0';
  }
};

size_t HeaderCallback(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line = TrimLine(std::string_view(data, size * count));
  if (line.starts_with("HTTP/")) {  // a new response (after a redirect or 100 Continue)
    t->content_length.reset();
    t->content_range.clear();
    t->retry_after.clear();
    t->bucket_region.clear();
    t->etag.clear();
    t->last_modified.clear();
    t->goog_generation.clear();
    return size * count;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * count;
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = TrimLine(line.substr(colon + 1));
  if (IEquals(name, "content-length")) {
    uint64_t v = 0;
    bool ok = !value.empty() && value.size() <= 19;
    for (char c : value) {
      if (c < '0' || c > '9')
        ok = false;
      else
        v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (ok) t->content_length = v;
  } else if (IEquals(name, "content-range")) {
    t->content_range = std::string(value.substr(0, 128));
  } else if (IEquals(name, "retry-after")) {
    t->retry_after = std::string(value.substr(0, 32));
  } else if (IEquals(name, "x-amz-bucket-region")) {
    t->bucket_region = std::string(value.substr(0, 64));
  } else if (IEquals(name, "etag")) {
    t->etag = std::string(value.substr(0, 256));
  } else if (IEquals(name, "last-modified")) {
    t->last_modified = std::string(value.substr(0, 64));
  } else if (IEquals(name, "x-goog-generation")) {
    t->goog_generation = std::string(value.substr(0, 32));
  }
  return size * count;
}

// A whole-object read of an object larger than the reader accepts (ByteRange::max_size):
// DataLoss, as ResolveRange says it for the stores that know sizes first, and not retried.
Status TooLargeForReader(const Transfer& t, uint64_t size) {
  const bool declared = t.content_length.has_value();
  return DataLoss(t.Context() + ": object is " + (declared ? "" : "at least ") + std::to_string(size) +
                  " bytes, more than the " + std::to_string(t.request.range.max_size) +
                  " its reader accepts (refused " + (declared ? "unread)" : "while reading)"));
}

// Decides where the body goes once the status is known, and sizes the first buffer.
bool StartBody(Transfer* t) {
  t->body_started = true;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
  t->to_error_body = t->status < 200 || t->status > 299;
  if (t->to_error_body) return true;
  const ByteRange& range = t->request.range;
  uint64_t cap;
  if (t->status == 206 && range.kind != ByteRange::Kind::kAll) {
    if (range.length > t->max_body) {
      t->sink_error = ResourceExhausted(t->Context() + ": the range exceeds the " + std::to_string(t->max_body) +
                                        "-byte limit of one read");
      return false;
    }
    cap = range.length;  // what we asked for; more is refused below
  } else if (t->content_length) {
    if (range.kind == ByteRange::Kind::kAll && *t->content_length > range.max_size) {
      t->sink_error = TooLargeForReader(*t, *t->content_length);
      return false;
    }
    if (*t->content_length > t->max_body) {
      t->sink_error = ResourceExhausted(t->Context() + ": the response declares " + std::to_string(*t->content_length) +
                                        " bytes, over the " + std::to_string(t->max_body) + "-byte limit of one read");
      return false;
    }
    cap = std::min(*t->content_length, kInitialBodyCap);
  } else {
    cap = std::min(kUnknownLengthStart, t->max_body);
  }
  auto buffer = Buffer::Allocate(cap);
  if (!buffer.ok()) {
    t->sink_error = buffer.status().WithContext(t->Context());
    return false;
  }
  t->body = std::move(buffer).value();
  return true;
}

size_t WriteCallback(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (!t->body_started && !StartBody(t)) return 0;  // 0 aborts the transfer
  if (t->to_error_body) {
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t->error_body.size());
    t->error_body.append(data, std::min(room, n));
    return n;
  }
  const uint64_t need = t->received + n;
  if (need > t->body.size()) {
    if (t->status == 206 && t->request.range.kind != ByteRange::Kind::kAll) {
      t->sink_error = IoError(t->Context() + ": partial response carries more bytes than the " +
                              std::to_string(t->request.range.length) + " requested");
      t->sink_retry = true;
      return 0;
    }
    if (t->request.range.kind == ByteRange::Kind::kAll && need > t->request.range.max_size) {
      t->sink_error = TooLargeForReader(*t, need);  // no Content-Length: refused as it grows past
      return 0;
    }
    if (need > t->max_body) {
      t->sink_error = ResourceExhausted(t->Context() + ": the response exceeds the " + std::to_string(t->max_body) +
                                        "-byte limit of one read");
      return 0;
    }
    const uint64_t grown = std::min<uint64_t>(t->max_body, std::max<uint64_t>(need, uint64_t{2} * t->body.size()));
    auto bigger = Buffer::Allocate(grown);
    if (!bigger.ok()) {
      t->sink_error = bigger.status().WithContext(t->Context());
      return 0;
    }
    if (t->received != 0) std::memcpy(bigger->data(), t->body.data(), t->received);
    t->body = std::move(bigger).value();
  }
  std::memcpy(t->body.data() + t->received, data, n);
  t->received = need;
  return n;
}

// Seconds from a Retry-After header ("120"; HTTP dates are ignored), bounded by the
// caller.
std::optional<milliseconds> ParseRetryAfter(std::string_view value) {
  if (value.empty() || value.size() > 6) return std::nullopt;
  int64_t seconds = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    seconds = seconds * 10 + (c - '0');
  }
  return milliseconds(seconds * 1000);
}

}  // namespace

Status TransportOptions::Validate() const {
  INSITU_RETURN_IF_ERROR(retry.Validate());
  if (io_threads == 0 || io_threads > kMaxIoThreads) {
    return InvalidArgument("io_threads must be in [1, " + std::to_string(kMaxIoThreads) + "], got " +
                           std::to_string(io_threads));
  }
  if (timeout.count() <= 0 || connect_timeout.count() <= 0) {
    return InvalidArgument("timeout and connect_timeout must be positive");
  }
  if (max_connections_per_host < 0) {
    return InvalidArgument("max_connections_per_host must not be negative");
  }
  return Status::Ok();
}

// One IO thread and its CURLM. State is shared with the thread so a transport destroyed
// from inside one of its own callbacks can detach instead of joining itself.
class CurlTransport::Worker {
 public:
  Worker(std::shared_ptr<const TransportOptions> options, CaBundle ca, std::shared_ptr<Counters> counters,
         std::shared_ptr<HostProtocols> protocols)
      : options_(std::move(options)),
        ca_(std::move(ca)),
        counters_(std::move(counters)),
        protocols_(std::move(protocols)) {}

  Status Init() {
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return ResourceExhausted("curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, kConnectionsKept);
    if (options_->max_connections_per_host > 0) {
      curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, options_->max_connections_per_host);
    }
    INSITU_ASSIGN_OR_RETURN(events_, CurlEvents::Create(multi_));
    return Status::Ok();
  }

  static void Run(std::shared_ptr<Worker> self) { self->Loop(); }

  void Enqueue(std::unique_ptr<Transfer> t) {
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      if (!stopping_) {
        incoming_.push_back(std::move(t));
        t = nullptr;
        // One wake-up per batch the loop takes: a burst of 64 reads was 64 writes, and as
        // many turns of the loop.
        wake = !wake_sent_;
        wake_sent_ = true;
      }
    }
    if (t != nullptr) {  // raced with shutdown
      Cancel(std::move(t));
      return;
    }
    if (wake) events_->Wake();
  }

  void Stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    events_->Wake();
  }

  ~Worker() {
    for (CURL* easy : free_easy_) curl_easy_cleanup(easy);
    events_.reset();  // before the handle it drives, which would call it back while closing
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
  }

  std::thread thread;

 private:
  void Loop() {
    for (;;) {
      std::deque<std::unique_ptr<Transfer>> incoming;
      bool stopping;
      {
        std::lock_guard lock(mutex_);
        incoming.swap(incoming_);
        wake_sent_ = false;
        stopping = stopping_;
      }
      if (stopping) {
        for (auto& t : incoming) Cancel(std::move(t));
        break;
      }
      for (auto& t : incoming) StartAttempt(std::move(t));
      const auto now = Clock::now();
      // Every kCancelPollMs, not every turn: a scan of every transfer in hand each time a
      // socket woke the loop was a twentieth of its CPU at 32 small reads in flight.
      if (now - last_cancel_check_ >= milliseconds(kCancelPollMs)) {
        last_cancel_check_ = now;
        DropCancelled();
      }
      while (!delayed_.empty() && delayed_.begin()->first <= now) {
        auto t = std::move(delayed_.begin()->second);
        delayed_.erase(delayed_.begin());
        StartAttempt(std::move(t));
      }
      // Idle, the loop sleeps up to kIdlePollMs; holding transfers, until the next cancel
      // check or the next retry is due.
      milliseconds wait(kIdlePollMs);
      if (!active_.empty() || !delayed_.empty()) {
        wait = std::chrono::ceil<milliseconds>(last_cancel_check_ + milliseconds(kCancelPollMs) - now);
      }
      if (!delayed_.empty()) {
        wait =
            std::min(wait, std::chrono::duration_cast<milliseconds>(delayed_.begin()->first - now) + milliseconds(1));
      }
      events_->WaitAndAct(std::max(wait, milliseconds(0)));
      CompleteFinished();
    }
    // Shutdown: everything still owned here ends as Cancelled.
    for (auto& [easy, t] : active_) {
      curl_multi_remove_handle(multi_, easy);
      Cancel(std::move(t));
    }
    active_.clear();
    for (auto& [due, t] : delayed_) Cancel(std::move(t));
    delayed_.clear();
  }

  void CompleteFinished() {
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      const CURLcode code = msg->data.result;
      curl_multi_remove_handle(multi_, easy);
      auto it = active_.find(easy);
      if (it == active_.end()) continue;
      auto t = std::move(it->second);
      active_.erase(it);
      Complete(std::move(t), code);
    }
  }

  // Transfers whose CancelFlag was raised end now, as Cancelled: mid-transfer (the
  // connection is dropped) or waiting out a backoff.
  void DropCancelled() {
    for (auto it = active_.begin(); it != active_.end();) {
      if (!IsCancelled(it->second->request.cancel)) {
        ++it;
        continue;
      }
      curl_multi_remove_handle(multi_, it->first);
      auto t = std::move(it->second);
      it = active_.erase(it);
      Cancel(std::move(t), "cancelled");
    }
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (!IsCancelled(it->second->request.cancel)) {
        ++it;
        continue;
      }
      auto t = std::move(it->second);
      it = delayed_.erase(it);
      Cancel(std::move(t), "cancelled");
    }
  }

  CURL* AcquireEasy() {
    if (!free_easy_.empty()) {
      CURL* easy = free_easy_.back();
      free_easy_.pop_back();
      curl_easy_reset(easy);
      return easy;
    }
    return curl_easy_init();
  }

  void ReleaseEasy(Transfer& t) {
    if (t.header_list != nullptr) {
      curl_slist_free_all(t.header_list);
      t.header_list = nullptr;
    }
    if (t.easy != nullptr) {
      if (free_easy_.size() < 256) {
        free_easy_.push_back(t.easy);
      } else {
        curl_easy_cleanup(t.easy);
      }
      t.easy = nullptr;
    }
  }

  void StartAttempt(std::unique_ptr<Transfer> t) {
    if (IsCancelled(t->request.cancel)) {
      Cancel(std::move(t), "cancelled");
      return;
    }
    t->attempt_start = Clock::now();
    if (t->attempt == 0) t->first_start = t->attempt_start;
    ++t->attempt;
    counters_->attempts.fetch_add(1, std::memory_order_relaxed);
    t->ResetAttempt();
    std::vector<std::string> extra;
    if (t->request.sign) {
      auto signed_headers = t->request.sign(t->request);
      if (!signed_headers.ok()) {
        Status error = signed_headers.status().WithContext(t->Context());
        Fail(std::move(t), std::move(error));
        return;
      }
      extra = std::move(signed_headers).value();
    }
    t->easy = AcquireEasy();
    if (t->easy == nullptr) {
      Status error = ResourceExhausted(t->Context() + ": curl_easy_init failed");
      Fail(std::move(t), std::move(error));
      return;
    }
    CURL* e = t->easy;
    const TransportOptions& o = *options_;
    auto append = [&](const std::string& line) { t->header_list = curl_slist_append(t->header_list, line.c_str()); };
    for (const std::string& h : t->request.headers) append(h);
    for (const std::string& h : extra) append(h);
    if (const std::string range = RangeHeaderValue(t->request.range); !range.empty()) {
      append(t->request.range_header + ": " + range);
    }
    // No "Expect: 100-continue" round trip before a body: the stores send whole objects.
    if (!t->request.payload().empty()) append("Expect:");
    curl_easy_setopt(e, CURLOPT_URL, t->request.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);
    if (t->request.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (t->request.method == "PUT" || t->request.method == "POST") {
      // The body stays in the request (or where its view points), alive for the whole
      // transfer and every retry: no copy.
      const std::string_view payload = t->request.payload();
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, payload.data());
      if (t->request.method == "PUT") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (t->request.method == "DELETE") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &WriteCallback);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &HeaderCallback);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout.count()));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, o.follow_redirects ? 1L : 0L);
    if (o.follow_redirects) {
      curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
      curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, o.verify_tls ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, o.verify_tls ? 2L : 0L);
    // Named even when the system's: a bundled libcurl's own default is the build machine's path.
    // Exactly what ca_ names (nullptr turns a default off).
    if (!ca_.file.empty() || !ca_.dir.empty()) {
      curl_easy_setopt(e, CURLOPT_CAINFO, ca_.file.empty() ? nullptr : ca_.file.c_str());
      curl_easy_setopt(e, CURLOPT_CAPATH, ca_.dir.empty() ? nullptr : ca_.dir.c_str());
    }
    if (!o.user_password.empty()) {
      curl_easy_setopt(e, CURLOPT_USERPWD, o.user_password.c_str());
      curl_easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    }
    // An HTTP/2 stream rather than a new socket, where the origin may offer one.
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, protocols_->ShouldWaitToMultiplex(t->request.url) ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, t->request.fresh_connection ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "insitubatch");
    t->max_body = t->request.max_body_bytes;
    if (curl_multi_add_handle(multi_, e) != CURLM_OK) {
      Status error = ResourceExhausted(t->Context() + ": curl_multi_add_handle failed");
      Fail(std::move(t), std::move(error));
      return;
    }
    active_.emplace(e, std::move(t));
  }

  void Complete(std::unique_ptr<Transfer> t, CURLcode code) {
    Status error;
    bool retry = false;
    bool connect_failure = false;
    std::optional<milliseconds> server_delay;
    const auto now = Clock::now();
    if (!t->sink_error.ok()) {
      error = t->sink_error;
      retry = t->sink_retry;
    } else if (code != CURLE_OK) {
      const std::string what = DescribeTransferFailure(code, t->errbuf, t->easy, SecondsBetween(t->attempt_start, now),
                                                       *options_, ca_, &connect_failure);
      error = IoError(t->Context() + ": " + what);
      retry = IsTransientCurlError(code);
    } else {
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
      long version = 0;
      curl_easy_getinfo(t->easy, CURLINFO_HTTP_VERSION, &version);
      protocols_->Learn(t->request.url, version);
      const long status = t->status;
      if (status >= 200 && status <= 299) {
        if (status == 206 && t->request.method != "HEAD") {
          error = CheckPartialContent(t->request.range, t->content_range, t->received, t->request.where, &retry);
        }
      } else if (IsRetryableHttpStatus(status)) {
        error = IoError(t->Context() + ": " + DescribeHttpError(status, t->error_body))
                    .set_detail(static_cast<int>(status));
        retry = true;
        server_delay = ParseRetryAfter(t->retry_after);
      }
    }
    ReleaseEasy(*t);
    if (error.ok()) {
      HttpResponse response;
      response.status = t->status;
      response.content_length = t->content_length;
      response.content_range = std::move(t->content_range);
      response.bucket_region = std::move(t->bucket_region);
      response.etag = std::move(t->etag);
      response.last_modified = std::move(t->last_modified);
      response.goog_generation = std::move(t->goog_generation);
      response.error_body = std::move(t->error_body);
      response.retry = std::move(t->retry);
      if (t->body_started && !t->to_error_body) {
        t->body.Truncate(t->received);
        response.body = std::move(t->body);
      } else {
        auto empty = Buffer::Allocate(0);
        if (empty.ok()) response.body = std::move(empty).value();
      }
      auto done = std::move(t->done);
      t.reset();
      done(std::move(response));
      return;
    }
    if (retry) {
      milliseconds delay = options_->retry.Backoff(t->attempt, JitterRandom());
      if (server_delay) delay = std::min(std::max(delay, *server_delay), options_->retry.max_delay);
      const auto elapsed = std::chrono::duration_cast<milliseconds>(now - t->first_start);
      // A draw that would overshoot the retry window is cut to end at it: one last attempt
      // there, rather than giving up early (a 10 s outage otherwise failed 1 time in 10).
      const milliseconds window = connect_failure ? options_->retry.connect_deadline : options_->retry.deadline;
      if (elapsed < window && elapsed + delay > window) delay = window - elapsed;
      if (options_->retry.ShouldRetry(t->attempt, elapsed, delay, connect_failure)) {
        counters_->retries.fetch_add(1, std::memory_order_relaxed);
        ++t->retry.retries;
        t->retry.backoff_s += std::chrono::duration<double>(delay).count();
        t->retry.last_error = error.message();
        delayed_.emplace(now + delay, std::move(t));
        return;
      }
    }
    if (t->attempt > 1) {
      const std::string when = " (gave up after " + std::to_string(t->attempt) + " attempts in " +
                               SecondsText(SecondsBetween(t->first_start, now)) + ")";
      error = Status(error.code(), error.message() + when).set_detail(error.detail());
    }
    Fail(std::move(t), std::move(error));
  }

  void Cancel(std::unique_ptr<Transfer> t, const char* why = "the store is closing") {
    Status error = Cancelled(t->Context() + ": " + why);
    Fail(std::move(t), std::move(error));
  }

  void Fail(std::unique_ptr<Transfer> t, Status status) {
    ReleaseEasy(*t);
    counters_->failures.fetch_add(1, std::memory_order_relaxed);
    auto done = std::move(t->done);
    t.reset();
    done(std::move(status));
  }

  std::shared_ptr<const TransportOptions> options_;
  const CaBundle ca_;
  std::shared_ptr<Counters> counters_;
  const std::shared_ptr<HostProtocols> protocols_;
  CURLM* multi_ = nullptr;
  std::unique_ptr<CurlEvents> events_;
  std::mutex mutex_;
  std::deque<std::unique_ptr<Transfer>> incoming_;
  bool wake_sent_ = false;  // a Wake() the loop has not yet answered by taking incoming_
  bool stopping_ = false;
  // IO-thread only:
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active_;
  std::multimap<Clock::time_point, std::unique_ptr<Transfer>> delayed_;
  std::vector<CURL*> free_easy_;
  Clock::time_point last_cancel_check_;
};

CurlTransport::CurlTransport(std::shared_ptr<const TransportOptions> options, CaBundle ca)
    : options_(std::move(options)), ca_(std::move(ca)), counters_(std::make_shared<Counters>()) {}

Result<std::shared_ptr<CurlTransport>> CurlTransport::Create(TransportOptions options) {
  INSITU_RETURN_IF_ERROR(options.Validate());
  INSITU_ASSIGN_OR_RETURN(CaBundle ca, FindCaBundle(options.ca_file, options.verify_tls));
  GlobalInitOnce();
  auto shared = std::make_shared<const TransportOptions>(std::move(options));
  std::shared_ptr<CurlTransport> transport(new CurlTransport(shared, std::move(ca)));
  auto protocols = std::make_shared<HostProtocols>();
  for (size_t i = 0; i < shared->io_threads; ++i) {
    auto worker = std::make_shared<Worker>(shared, transport->ca_, transport->counters_, protocols);
    INSITU_RETURN_IF_ERROR(worker->Init());
    transport->workers_.push_back(std::move(worker));
    transport->loads_.push_back(std::make_shared<std::atomic<size_t>>(0));
  }
  // On a refused thread the transport's destructor stops and joins the ones started.
  size_t next = 0;
  INSITU_RETURN_IF_ERROR(StartThreads(shared->io_threads, "insitu-http", [&] {
    Worker& worker = *transport->workers_[next];
    worker.thread = std::thread(&Worker::Run, transport->workers_[next]);
    ++next;
    return worker.thread.native_handle();
  }));
  return transport;
}

CurlTransport::~CurlTransport() {
  if (fork_.forked()) {  // the IO threads only ever ran in the parent
    AbandonAfterFork(std::move(workers_));
    return;
  }
  for (auto& worker : workers_) worker->Stop();
  for (auto& worker : workers_) {
    if (!worker->thread.joinable()) continue;
    if (worker->thread.get_id() == std::this_thread::get_id()) {
      worker->thread.detach();  // the loop exits after this callback; it owns its state
    } else {
      worker->thread.join();
    }
  }
}

void CurlTransport::Submit(HttpRequest request, ResponseCallback done) {
  if (fork_.forked()) {
    done(FailedPrecondition("reading " + request.where + ": the store " + kOpenedBeforeFork));
    return;
  }
  counters_->requests.fetch_add(1, std::memory_order_relaxed);
  auto t = std::make_unique<Transfer>();
  t->request = std::move(request);
  // The IO thread with the fewest requests in hand (the first among equals): a request
  // made alone (metadata, then the next) reuses the same thread's open connection instead
  // of opening one on the next thread in turn, and a burst still spreads over them all.
  size_t i = 0;
  for (size_t w = 1; w < workers_.size(); ++w) {
    if (loads_[w]->load(std::memory_order_relaxed) < loads_[i]->load(std::memory_order_relaxed)) i = w;
  }
  std::shared_ptr<std::atomic<size_t>> load = loads_[i];
  load->fetch_add(1, std::memory_order_relaxed);
  t->done = [load, done = std::move(done)](Result<HttpResponse> response) {
    load->fetch_sub(1, std::memory_order_relaxed);
    done(std::move(response));
  };
  workers_[i]->Enqueue(std::move(t));
}

Result<HttpResponse> CurlTransport::Send(HttpRequest request) {
  std::promise<Result<HttpResponse>> promise;
  auto future = promise.get_future();
  Submit(std::move(request), [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); });
  return future.get();
}

TransportStats CurlTransport::stats() const {
  TransportStats s;
  s.requests = counters_->requests.load();
  s.attempts = counters_->attempts.load();
  s.retries = counters_->retries.load();
  s.failures = counters_->failures.load();
  return s;
}

}  // namespace insitubatch
