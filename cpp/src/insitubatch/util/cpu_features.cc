#include "insitubatch/util/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define INSITU_CPUID 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define INSITU_HWCAP 1
#endif

namespace insitubatch {
namespace {

#ifdef INSITU_CPUID
// XCR0: which register states the OS saves on a context switch (the instruction itself,
// since _xgetbv needs the xsave target).
uint64_t ReadXcr0() {
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (uint64_t{high} << 32) | low;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#ifdef INSITU_CPUID
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  f.sse42 = (c & bit_SSE4_2) != 0;
  // AVX2 needs the CPU's AVX (leaf 1) and AVX2 (leaf 7) and the OS's saving of the SSE and
  // AVX state (XCR0 bits 1 and 2), which OSXSAVE says may be asked.
  const bool os_saves_avx = (c & bit_OSXSAVE) != 0 && (c & bit_AVX) != 0 && (ReadXcr0() & 0x6) == 0x6;
  if (os_saves_avx && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) f.avx2 = (b & bit_AVX2) != 0;
#elif defined(INSITU_HWCAP)
  constexpr unsigned long kHwcapCrc32 = 1UL << 7;  // HWCAP_CRC32 of the kernel's asm/hwcap.h
  f.arm_crc32 = (getauxval(AT_HWCAP) & kHwcapCrc32) != 0;
#endif
  return f;
}

}  // namespace

const CpuFeatures& HostCpu() {
  static const CpuFeatures features = Detect();
  return features;
}

namespace {
// Read as the library loads, before any of its threads runs (why: BootId's in util/env.cc).
[[maybe_unused]] const bool kReadAtLoad = (HostCpu(), true);
}  // namespace

}  // namespace insitubatch
