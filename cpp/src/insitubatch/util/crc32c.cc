// CRC-32C itself (the `crc32c` codec is one of the checksum codecs of zarr/codec/checksum32.cc).

#include "insitubatch/util/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

#include "insitubatch/util/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define INSITU_CRC32C_X86 1
#elif defined(__aarch64__)
#include <arm_acle.h>
#define INSITU_CRC32C_ARM 1
// The CRC32 extension (optional in ARMv8.0, in every ARMv8.1 core: Graviton 2 on, Grace),
// for this function alone; the two compilers spell the target differently.
#if defined(__clang__)
#define INSITU_TARGET_CRC __attribute__((target("crc")))
#else
#define INSITU_TARGET_CRC __attribute__((target("+crc")))
#endif
#endif

namespace insitubatch {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    t[0][i] = crc;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint64_t LoadLittle64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// `crc` is the running (inverted) register.
uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    const uint64_t word = LoadLittle64(p) ^ crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
          kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = kTables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#ifdef INSITU_CRC32C_X86
// "crc32" too: clang 22 (the manylinux wheels' zig) no longer counts the CRC32 instruction
// as part of SSE4.2 for its intrinsics; GCC and clang 14 accept the name as well.
__attribute__((target("sse4.2,crc32"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  crc = static_cast<uint32_t>(c);
#endif
  while (n >= 4) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    crc = _mm_crc32_u32(crc, word);
    p += 4;
    n -= 4;
  }
  while (n-- > 0) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}
#endif

#ifdef INSITU_CRC32C_X86
// Three lanes of `lane` bytes each (a multiple of 8) from `p`, their registers updated at
// once: the crc32 instruction's three-cycle latency overlaps across them.
__attribute__((target("sse4.2,crc32"))) void ExtendThreeSse42(uint32_t regs[3], const uint8_t* p, size_t lane) {
#if defined(__x86_64__)
  uint64_t a = regs[0], b = regs[1], c = regs[2];
  for (size_t i = 0; i < lane; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + lane + i, 8);
    std::memcpy(&wc, p + 2 * lane + i, 8);
    a = _mm_crc32_u64(a, wa);
    b = _mm_crc32_u64(b, wb);
    c = _mm_crc32_u64(c, wc);
  }
  regs[0] = static_cast<uint32_t>(a);
  regs[1] = static_cast<uint32_t>(b);
  regs[2] = static_cast<uint32_t>(c);
#else
  for (int k = 0; k < 3; ++k) regs[k] = ExtendSse42(regs[k], p + k * lane, lane);
#endif
}
#endif

#ifdef INSITU_CRC32C_ARM
INSITU_TARGET_CRC uint32_t ExtendArmCrc(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = __crc32cd(crc, word);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = __crc32cb(crc, *p++);
  return crc;
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

ExtendFn PickExtend() {
#ifdef INSITU_CRC32C_X86
  if (HostCpu().sse42) return ExtendSse42;
#endif
#ifdef INSITU_CRC32C_ARM
  if (HostCpu().arm_crc32) return ExtendArmCrc;
#endif
  return ExtendPortable;
}

bool HasSse42() {
#ifdef INSITU_CRC32C_X86
  static const bool has = HostCpu().sse42;  // asked per checksum: kept here, inlined
  return has;
#else
  return false;
#endif
}

// Combining, as zlib's crc32_combine does it for its polynomial: multiplication modulo the
// polynomial in the reflected representation, and x^(2^k) modulo it, tabled.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = uint32_t{1} << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return p;
}

constexpr std::array<uint32_t, 32> MakeX2nTable() {
  std::array<uint32_t, 32> t{};
  uint32_t p = uint32_t{1} << 30;  // x^1
  t[0] = p;
  for (size_t n = 1; n < 32; ++n) t[n] = p = MultModP(p, p);
  return t;
}

constexpr std::array<uint32_t, 32> kX2n = MakeX2nTable();

// x^(n * 2^k) modulo the polynomial.
uint32_t X2nModP(uint64_t n, unsigned k) {
  uint32_t p = uint32_t{1} << 31;  // x^0
  for (; n != 0; n >>= 1, ++k) {
    if (n & 1) p = MultModP(kX2n[k & 31], p);
  }
  return p;
}

// Below this the three lanes' combining costs more than it saves.
constexpr size_t kThreeLaneMinBytes = 16 << 10;

uint32_t ThreeLanes(const uint8_t* p, size_t n) {
#ifdef INSITU_CRC32C_X86
  if (HasSse42() && n >= kThreeLaneMinBytes) {
    const size_t lane = n / 3 & ~size_t{7};
    uint32_t regs[3] = {~0u, ~0u, ~0u};
    ExtendThreeSse42(regs, p, lane);
    uint32_t crc = Crc32cCombine(Crc32cCombine(~regs[0], ~regs[1], lane), ~regs[2], lane);
    return ~ExtendSse42(~crc, p + 3 * lane, n - 3 * lane);
  }
#endif
  return ~PickExtend()(~0u, p, n);
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return MultModP(X2nModP(length_b, 3), crc_a) ^ crc_b;
}

uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  if (data.size() >= kThreeLaneMinBytes && HasSse42())
    return Crc32cCombine(crc, ThreeLanes(p, data.size()), data.size());
  static const ExtendFn extend = PickExtend();
  return ~extend(~crc, p, data.size());
}

uint32_t Crc32c(std::span<const std::byte> data) { return Crc32cExtend(0, data); }

namespace {
// Set up as the library loads, before any of its threads runs (why: BootId's in util/env.cc).
[[maybe_unused]] const bool kPickedAtLoad = [] {
  const std::byte byte{0};
  Crc32c(std::span(&byte, 1));
  return HasSse42();
}();
}  // namespace

namespace internal_crc {
uint32_t Crc32cPortable(std::span<const std::byte> data) {
  return ~ExtendPortable(~0u, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
uint32_t Crc32cHardware(std::span<const std::byte> data) {
  return ~PickExtend()(~0u, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
uint32_t Crc32cThreeLanes(std::span<const std::byte> data) {
  return ThreeLanes(reinterpret_cast<const uint8_t*>(data.data()), data.size());
}
}  // namespace internal_crc

}  // namespace insitubatch
