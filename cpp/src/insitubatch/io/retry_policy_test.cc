#include "insitubatch/io/retry_policy.h"

#include <gtest/gtest.h>

#include <set>

namespace insitubatch {
namespace {

using std::chrono::milliseconds;

TEST(RetryPolicyTest, CapDoublesUntilMaxDelay) {
  RetryPolicy p{6, milliseconds(100), milliseconds(1000)};
  EXPECT_EQ(p.BackoffCap(1), milliseconds(100));
  EXPECT_EQ(p.BackoffCap(2), milliseconds(200));
  EXPECT_EQ(p.BackoffCap(3), milliseconds(400));
  EXPECT_EQ(p.BackoffCap(4), milliseconds(800));
  EXPECT_EQ(p.BackoffCap(5), milliseconds(1000));
  EXPECT_EQ(p.BackoffCap(80), milliseconds(1000));  // no shift overflow
  EXPECT_EQ(p.BackoffCap(0), milliseconds(0));
}

TEST(RetryPolicyTest, FullJitterSpansZeroToCap) {
  RetryPolicy p{6, milliseconds(100), milliseconds(1000)};
  EXPECT_EQ(p.Backoff(3, 0), milliseconds(0));
  EXPECT_EQ(p.Backoff(3, 400), milliseconds(400));
  EXPECT_EQ(p.Backoff(3, 401), milliseconds(0));  // modulo cap + 1
  EXPECT_EQ(p.Backoff(3, UINT64_MAX), milliseconds(UINT64_MAX % 401));
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) {
    const auto d = p.Backoff(2, JitterRandom());
    ASSERT_GE(d.count(), 0);
    ASSERT_LE(d.count(), 200);
    seen.insert(d.count());
  }
  EXPECT_GT(seen.size(), 20u);  // jittered, not a constant
}

TEST(RetryPolicyTest, ZeroBaseDelayNeverWaits) {
  RetryPolicy p{3, milliseconds(0), milliseconds(0)};
  EXPECT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.Backoff(2, 12345), milliseconds(0));
}

TEST(RetryPolicyTest, ShouldRetryCountsAttempts) {
  RetryPolicy p{3, milliseconds(1), milliseconds(2)};
  EXPECT_TRUE(p.ShouldRetry(1));
  EXPECT_TRUE(p.ShouldRetry(2));
  EXPECT_FALSE(p.ShouldRetry(3));
  RetryPolicy once{1, milliseconds(1), milliseconds(2)};
  EXPECT_FALSE(once.ShouldRetry(1));
}

TEST(RetryPolicyTest, ValidateRejectsNonsense) {
  EXPECT_FALSE((RetryPolicy{0, milliseconds(1), milliseconds(2)}).Validate().ok());
  EXPECT_FALSE((RetryPolicy{101, milliseconds(1), milliseconds(2)}).Validate().ok());
  EXPECT_FALSE((RetryPolicy{3, milliseconds(5), milliseconds(2)}).Validate().ok());
  EXPECT_FALSE((RetryPolicy{3, milliseconds(-1), milliseconds(2)}).Validate().ok());
  EXPECT_FALSE((RetryPolicy{3, milliseconds(1), milliseconds(11 * 60 * 1000)}).Validate().ok());
  EXPECT_TRUE(RetryPolicy{}.Validate().ok());
}

TEST(RetryPolicyTest, RetryableStatuses) {
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L, 599L}) EXPECT_TRUE(IsRetryableHttpStatus(s)) << s;
  for (long s : {200L, 206L, 301L, 400L, 401L, 403L, 404L, 416L, 600L}) {
    EXPECT_FALSE(IsRetryableHttpStatus(s)) << s;
  }
  EXPECT_EQ(HttpReasonPhrase(503), "Service Unavailable");
  EXPECT_EQ(HttpReasonPhrase(999), "");
}

TEST(RetryPolicyTest, RetriesStopAtTheirWindow) {
  using std::chrono::milliseconds;
  RetryPolicy p;
  p.deadline = milliseconds(1000);
  p.connect_deadline = milliseconds(100);
  EXPECT_TRUE(p.ShouldRetry(1, milliseconds(500), milliseconds(400), false));
  EXPECT_FALSE(p.ShouldRetry(1, milliseconds(700), milliseconds(400), false));
  EXPECT_FALSE(p.ShouldRetry(1, milliseconds(50), milliseconds(60), true));
  EXPECT_FALSE(p.ShouldRetry(p.max_attempts, milliseconds(0), milliseconds(0), false));
  p.deadline = milliseconds(0);
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace insitubatch
