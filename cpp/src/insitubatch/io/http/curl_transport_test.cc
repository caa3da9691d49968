#include "insitubatch/io/http/curl_transport.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "insitubatch/io/http/http_store.h"
#include "insitubatch/io/http/http_testutil.h"

namespace insitubatch {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

HttpStoreOptions FastRetries(int attempts) {
  HttpStoreOptions o;
  o.transport.retry = RetryPolicy{attempts, milliseconds(1), milliseconds(5)};
  o.transport.timeout = milliseconds(5000);
  o.transport.io_threads = 1;
  return o;
}

std::string Text(const ReadResult& r) {
  return std::string(reinterpret_cast<const char*>(r.data.data()), r.data.size());
}

// A loopback port that listens and never accepts: the kernel queues up to `backlog`
// connections (and takes their requests), and nothing ever answers. The listening socket
// (for the test to close) and its URL.
std::pair<int, std::string> ListeningPortNobodyAccepts(int backlog) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd, backlog), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return {fd, "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port))};
}

TEST(CurlTransportTest, RetriesA503ThenReadsTheObject) {
  ScriptedServer server({Reply(503, "Service Unavailable", "busy"), Reply(200, "OK", "payload")});
  auto store = HttpStore::Open(server.url() + "/root", FastRetries(3)).value();
  auto r = store->Read("a/b");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Text(*r), "payload");
  EXPECT_EQ(store->transport_stats().retries, 1u);
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[1], HasSubstr("GET /root/a/b HTTP/1.1"));
}

TEST(CurlTransportTest, RetriesATruncatedPartialResponse) {
  ScriptedServer server({// Claims 10 bytes of range, delivers 6 (the header matches the body, the range
                         // not).
                         Reply(206, "Partial Content", "abcdef", "Content-Range: bytes 10-15/100\r\n"),
                         Reply(206, "Partial Content", "abcdefghij", "Content-Range: bytes 10-19/100\r\n")});
  auto store = HttpStore::Open(server.url(), FastRetries(3)).value();
  auto r = store->Read("k", ByteRange::Range(10, 10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Text(*r), "abcdefghij");
  EXPECT_THAT(server.requests()[0], HasSubstr("Range: bytes=10-19"));
}

TEST(CurlTransportTest, BodyShorterThanContentLengthIsRetried) {
  const std::string cut = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort";
  ScriptedServer server({cut, Reply(200, "OK", "full")});
  auto store = HttpStore::Open(server.url(), FastRetries(2)).value();
  auto r = store->Read("k");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Text(*r), "full");
}

TEST(CurlTransportTest, ExhaustedRetriesNameTheUrlAndAttempts) {
  ScriptedServer server({Reply(503, "Service Unavailable", ""), Reply(503, "Service Unavailable", ""),
                         Reply(503, "Service Unavailable", "")});
  auto store = HttpStore::Open(server.url() + "/d", FastRetries(3)).value();
  auto r = store->Read("x/y");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_EQ(r.status().detail(), 503);
  EXPECT_THAT(r.status().message(), HasSubstr(server.url() + "/d/x/y"));
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 503 Service Unavailable"));
  EXPECT_THAT(r.status().message(), HasSubstr("gave up after 3 attempts"));
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(CurlTransportTest, NotFoundAndForbiddenAreNotRetried) {
  ScriptedServer server({Reply(404, "Not Found", ""), Reply(403, "Forbidden", "go away")});
  auto store = HttpStore::Open("http://user:hunter2@" + server.url().substr(7), FastRetries(5)).value();
  auto missing = store->Read("k");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->found);
  auto denied = store->Read("k");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().detail(), 403);
  EXPECT_THAT(denied.status().message(), HasSubstr("HTTP 403 Forbidden"));
  EXPECT_THAT(denied.status().message(), ::testing::Not(HasSubstr("hunter2")));
  EXPECT_THAT(store->Describe(""), ::testing::Not(HasSubstr("hunter2")));
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);  // no retries
  EXPECT_THAT(requests[0], HasSubstr("Authorization: Basic dXNlcjpodW50ZXIy"));
}

TEST(CurlTransportTest, PercentEncodedUserinfoIsDecodedForBasicAuth) {
  ScriptedServer server({Reply(200, "OK", "x")});
  auto store = HttpStore::Open("http://a%40b:p%3Aw@" + server.url().substr(7), FastRetries(1)).value();
  ASSERT_TRUE(store->Read("k").ok());
  // base64("a@b:p:w")
  EXPECT_THAT(server.requests()[0], HasSubstr("Authorization: Basic YUBiOnA6dw=="));
}

TEST(CurlTransportTest, RefusedConnectionsGiveUpInBoundedTime) {
  const std::string url = "http://127.0.0.1:" + std::to_string(UnusedLoopbackPort());
  auto store = HttpStore::Open(url, FastRetries(4)).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = store->Read("k");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_THAT(r.status().message(), HasSubstr(url + "/k"));
  EXPECT_THAT(r.status().message(), HasSubstr("gave up after 4 attempts"));
  EXPECT_EQ(store->transport_stats().attempts, 4u);
}

TEST(CurlTransportTest, ManyConcurrentReadsAllComplete) {
  std::deque<std::string> replies;
  for (int i = 0; i < 48; ++i) replies.push_back(Reply(200, "OK", "body"));
  ScriptedServer server(std::move(replies));
  HttpStoreOptions o = FastRetries(1);
  o.transport.io_threads = 3;
  auto store = HttpStore::Open(server.url(), o).value();
  std::mutex mutex;
  std::condition_variable cv;
  int done = 0, ok = 0;
  for (int i = 0; i < 48; ++i) {
    store->ReadAsync("k" + std::to_string(i), ByteRange::All(), [&](Result<ReadResult> r) {
      std::lock_guard lock(mutex);
      ++done;
      if (r.ok() && r->found && Text(*r) == "body") ++ok;
      cv.notify_all();
    });
  }
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == 48; }));
  EXPECT_EQ(ok, 48);
}

TEST(CurlTransportTest, ClosingTheStoreCancelsWaitingRetriesPromptly) {
  ScriptedServer server({Reply(503, "Service Unavailable", ""), Reply(503, "Service Unavailable", "")});
  HttpStoreOptions o = FastRetries(5);
  o.transport.retry = RetryPolicy{5, std::chrono::seconds(30), std::chrono::seconds(60)};
  auto store = HttpStore::Open(server.url(), o).value();
  std::promise<Status> a, b;
  store->ReadAsync("a", ByteRange::All(), [&](Result<ReadResult> r) { a.set_value(r.status()); });
  store->ReadAsync("b", ByteRange::All(), [&](Result<ReadResult> r) { b.set_value(r.status()); });
  while (store->transport_stats().retries < 2) std::this_thread::sleep_for(milliseconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  store.reset();  // both reads sit in their 0-30 s backoff
  EXPECT_EQ(a.get_future().get().code(), StatusCode::kCancelled);
  EXPECT_EQ(b.get_future().get().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A raised CancelFlag ends a read wherever it waits: backing off before a retry, or on a
// connection whose server never answers. The store stays usable.
TEST(CurlTransportTest, RaisedCancelFlagEndsTheReadWithinAFewPolls) {
  ScriptedServer server({Reply(503, "Service Unavailable", ""), Reply(200, "OK", "fine")});
  HttpStoreOptions o = FastRetries(5);
  o.transport.retry = RetryPolicy{5, std::chrono::seconds(30), std::chrono::seconds(60)};
  auto store = HttpStore::Open(server.url(), o).value();
  auto flag = std::make_shared<CancelFlag>();
  std::promise<Status> backing_off;
  store->ReadAsync(
      "a", ByteRange::All(), [&](Result<ReadResult> r) { backing_off.set_value(r.status()); }, flag);
  while (store->transport_stats().retries < 1) std::this_thread::sleep_for(milliseconds(2));
  auto t0 = std::chrono::steady_clock::now();
  flag->Cancel();
  EXPECT_EQ(backing_off.get_future().get().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(500));

  // A port whose accept queue is full: the connect never completes, nothing is refused.
  const auto [hole, url] = ListeningPortNobodyAccepts(0);
  auto stalled = HttpStore::Open(url, FastRetries(1)).value();
  auto stall_flag = std::make_shared<CancelFlag>();
  std::promise<Status> hanging;
  stalled->ReadAsync(
      "b", ByteRange::All(), [&](Result<ReadResult> r) { hanging.set_value(r.status()); }, stall_flag);
  std::this_thread::sleep_for(milliseconds(200));
  t0 = std::chrono::steady_clock::now();
  stall_flag->Cancel();
  EXPECT_EQ(hanging.get_future().get().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(500));
  ::close(hole);
}

// Nothing but libcurl's timer ends a read its server accepted and never answers: the
// IO loop must run that timer when it falls due, with no socket becoming ready.
TEST(CurlTransportTest, AReadTheServerNeverAnswersEndsAtItsTimeout) {
  // The connection completes into the backlog and the request is taken: no reply comes.
  const auto [silent, url] = ListeningPortNobodyAccepts(4);
  HttpStoreOptions o = FastRetries(1);
  o.transport.timeout = milliseconds(300);
  auto store = HttpStore::Open(url, o).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = store->Read("k", ByteRange::All());
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().message();
  EXPECT_THAT(r.status().message(), HasSubstr("read timed out")) << r.status().message();
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(5));
  ::close(silent);
}

TEST(CurlTransportTest, ARetriedReadReportsWhatItTook) {
  ScriptedServer server({Reply(503, "Service Unavailable", "busy"), Reply(200, "OK", "payload")});
  auto store = HttpStore::Open(server.url(), FastRetries(3)).value();
  auto r = store->Read("k");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->retry.retries, 1u);
  EXPECT_THAT(r->retry.last_error, HasSubstr("HTTP 503"));
  // A read that never reached a server is retried only within connect_deadline.
  HttpStoreOptions o = FastRetries(100);
  o.transport.retry.connect_deadline = milliseconds(300);
  auto dead = HttpStore::Open("http://127.0.0.1:" + std::to_string(UnusedLoopbackPort()), o).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto refused = dead->Read("k");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("connection refused"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(CurlTransportTest, ADelayOvershootingTheRetryWindowEndsAtItForOneLastAttempt) {
  // Delays drawn from [0, 100 s] against a 500 ms window: the draw is cut to the window's
  // end and tried there, not given up on after the first attempt.
  HttpStoreOptions o = FastRetries(5);
  o.transport.retry.base_delay = o.transport.retry.max_delay = milliseconds(100000);
  o.transport.retry.connect_deadline = milliseconds(500);
  auto dead = HttpStore::Open("http://127.0.0.1:" + std::to_string(UnusedLoopbackPort()), o).value();
  const auto t0 = std::chrono::steady_clock::now();
  auto refused = dead->Read("k");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("gave up after 2 attempts"));
  EXPECT_GE(took, milliseconds(450));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(CurlTransportTest, StoreReleasedInsideItsOwnCallback) {
  ScriptedServer server({Reply(200, "OK", "x")});
  auto store = HttpStore::Open(server.url(), FastRetries(1)).value();
  HttpStore* raw = store.get();
  std::promise<bool> released;
  raw->ReadAsync("k", ByteRange::All(), [owner = std::move(store), &released](Result<ReadResult> r) mutable {
    owner.reset();  // the last reference dies on the IO thread: no self-join, no crash
    released.set_value(r.ok());
  });
  auto f = released.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST(CurlTransportTest, ListIsUnimplementedOverHttp) {
  auto store = HttpStore::Open("http://127.0.0.1:9/x", FastRetries(1)).value();
  auto keys = store->List("");
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(keys.status().message(), HasSubstr("consolidated metadata"));
}

TEST(CurlTransportTest, InvalidOptionsAndUrls) {
  HttpStoreOptions bad = FastRetries(1);
  bad.transport.io_threads = 0;
  EXPECT_EQ(HttpStore::Open("http://h/x", bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpStore::Open("http://h/x?sig=1", FastRetries(1)).status().code(), StatusCode::kInvalidArgument);
  auto invalid_key = HttpStore::Open("http://h/x", FastRetries(1)).value()->Read("../etc");
  EXPECT_EQ(invalid_key.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace insitubatch
