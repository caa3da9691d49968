#include "insitubatch/util/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace insitubatch {
namespace {

// The kernel's view of the first CPU's flags (x86's "flags": "sse4_2", "avx2", ...; ARM's
// "Features": "crc32", ...); empty if unreadable.
std::set<std::string> ProcCpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeaturesTest, AgreesWithTheKernel) {
  const std::set<std::string> flags = ProcCpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
#if defined(__x86_64__) || defined(__i386__)
  // The kernel lists avx2 only where it saves the AVX state, as HostCpu asks of XCR0.
  EXPECT_EQ(HostCpu().sse42, flags.count("sse4_2") == 1);
  EXPECT_EQ(HostCpu().avx2, flags.count("avx2") == 1);
  EXPECT_FALSE(HostCpu().arm_crc32);
#elif defined(__aarch64__)
  EXPECT_EQ(HostCpu().arm_crc32, flags.count("crc32") == 1);
  EXPECT_FALSE(HostCpu().sse42 || HostCpu().avx2);
#endif
}

}  // namespace
}  // namespace insitubatch
