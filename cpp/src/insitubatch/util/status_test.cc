#include "insitubatch/util/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "insitubatch/util/result.h"

namespace insitubatch {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CodeAndMessage) {
  Status s = DataLoss("zstd: frame truncated");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DataLoss: zstd: frame truncated");
}

TEST(StatusTest, ContextIsAddedOnce) {
  Status s = DataLoss("zstd: frame truncated").WithContext("t2m [1, 0]");
  EXPECT_EQ(s.message(), "t2m [1, 0]: zstd: frame truncated");
  // A second annotation with the same context is skipped.
  EXPECT_EQ(s.WithContext("t2m [1, 0]").message(), s.message());
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, DetailSurvivesContext) {
  Status s = IoError("GET failed");
  s.set_detail(503);
  EXPECT_EQ(s.WithContext("https://host/a").detail(), 503);
}

struct TagPayload final : StatusPayload {
  explicit TagPayload(int t) : tag(t) {}
  int tag;
};

TEST(StatusTest, PayloadTravelsWithCopiesAndContext) {
  Status s = InvalidArgument("chunk transform failed");
  s.set_payload(std::make_shared<TagPayload>(7));
  const Status copied = s;
  const Status annotated = copied.WithContext("chunk_transform on 't2m' chunk 2");
  ASSERT_NE(annotated.payload(), nullptr);
  EXPECT_EQ(dynamic_cast<const TagPayload&>(*annotated.payload()).tag, 7);
  EXPECT_EQ(annotated.payload(), s.payload());  // the same object, never a copy of it
  Result<int> r = annotated;
  EXPECT_EQ(r.status().payload(), s.payload());
  EXPECT_EQ(InvalidArgument("x").payload(), nullptr);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  INSITU_ASSIGN_OR_RETURN(int h, Half(x));
  INSITU_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(ResultTest, PropagatesErrors) {
  EXPECT_EQ(Quarter(8).value(), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

Status FailIfNegative(int x) {
  if (x < 0) return InvalidArgument("negative");
  return Status::Ok();
}

Status Both(int a, int b) {
  INSITU_RETURN_IF_ERROR(FailIfNegative(a));
  INSITU_RETURN_IF_ERROR(FailIfNegative(b));
  return Status::Ok();
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_TRUE(Both(1, 2).ok());
  EXPECT_EQ(Both(1, -2).code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, ErrnoErrorCallsAFullDiskResourceExhausted) {
  for (const int full : {ENOSPC, EDQUOT}) {
    const Status s = ErrnoError("cannot write /c/x.npy", full, "the cache disk is full");
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(s.detail(), full);
    EXPECT_EQ(s.message().rfind("cannot write /c/x.npy: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("(the cache disk is full)"), std::string::npos) << s.message();
  }
  const Status denied = ErrnoError("cannot write /c/x.npy", EACCES, "the cache disk is full");
  EXPECT_EQ(denied.code(), StatusCode::kIoError);
  EXPECT_EQ(denied.detail(), EACCES);
  EXPECT_EQ(denied.message(), "cannot write /c/x.npy: Permission denied");
}

}  // namespace
}  // namespace insitubatch
