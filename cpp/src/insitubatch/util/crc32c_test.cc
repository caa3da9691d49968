#include "insitubatch/util/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

namespace insitubatch {
namespace {

using internal_crc::Crc32cHardware;
using internal_crc::Crc32cPortable;
using internal_crc::Crc32cThreeLanes;
using Bytes = std::span<const std::byte>;

std::vector<std::byte> Sequence(size_t n, int mul, int add, int mod) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte((i * mul + add) % mod);
  return out;
}

Bytes Of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }
Bytes Of(const std::vector<std::byte>& v) { return {v.data(), v.size()}; }

// Expected values from the `crc32c` Python package and RFC 3720 B.4.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(Of("")), 0u);
  EXPECT_EQ(Crc32c(Of("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(Of("insitubatch")), 0xC5526414u);
  EXPECT_EQ(Crc32c(Of(std::vector<std::byte>(32))), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(Of(std::vector<std::byte>(32, std::byte{0xFF}))), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(Of(Sequence(32, 1, 0, 256))), 0x46DD794Eu);
  std::vector<std::byte> descending(32);
  for (int i = 0; i < 32; ++i) descending[i] = std::byte(31 - i);
  EXPECT_EQ(Crc32c(Of(descending)), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c(Of(Sequence(1024, 1, 0, 256))), 0x2CDF6E8Fu);
  EXPECT_EQ(Crc32c(Of(Sequence(1000003, 7, 3, 251))), 0x92425BFBu);  // three lanes and a tail
}

TEST(Crc32cTest, EveryImplementationAgreesAtEveryLengthAndAlignment) {
  const auto data = Sequence(600, 31, 7, 253);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n = 0; n + offset <= 300; ++n) {
      Bytes span(data.data() + offset, n);
      ASSERT_EQ(Crc32cPortable(span), Crc32cHardware(span)) << "offset " << offset << " length " << n;
      ASSERT_EQ(Crc32cPortable(span), Crc32cThreeLanes(span)) << "offset " << offset << " length " << n;
    }
  }
  // Past the three-lane threshold: lanes of every remainder modulo 24, at odd offsets.
  const auto big = Sequence((64 << 10) + 64, 131, 5, 241);
  for (size_t offset : {0, 1, 7}) {
    for (size_t n = (16 << 10) - 3; n < (16 << 10) + 30; ++n) {
      Bytes span(big.data() + offset, n);
      ASSERT_EQ(Crc32cPortable(span), Crc32cThreeLanes(span)) << "offset " << offset << " length " << n;
    }
    Bytes whole(big.data() + offset, big.size() - offset);
    ASSERT_EQ(Crc32cPortable(whole), Crc32c(whole));
  }
}

TEST(Crc32cTest, ExtendAndCombineEqualWhole) {
  const auto data = Sequence(100000, 17, 3, 255);
  const Bytes all = Of(data);
  for (size_t split : {0, 1, 7, 8, 500, 999, 1000, 40000, 99999, 100000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(all.first(split)), all.subspan(split)), Crc32c(all)) << split;
    EXPECT_EQ(Crc32cCombine(Crc32c(all.first(split)), Crc32c(all.subspan(split)), all.size() - split), Crc32c(all))
        << split;
  }
}

}  // namespace
}  // namespace insitubatch
