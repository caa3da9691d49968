#pragma once

// What the CPU this process runs on offers, for the few loops compiled for more than the
// build's baseline (CRC-32C, the batch copy's streaming stores). Asked of the CPU itself
// (x86: cpuid, and xgetbv for whether the OS saves the AVX registers; ARM: the kernel's
// hardware capabilities), never of the compiler's runtime: __builtin_cpu_supports reads a
// table the runtime fills in at load, and the compiler-rt of zig 0.17 (the manylinux wheels'
// toolchain) never fills it, so every feature read "absent" there and the wheels took the
// portable loops on every machine.

namespace insitubatch {

struct CpuFeatures {
  bool sse42 = false;      // SSE4.2 with the crc32 instruction
  bool avx2 = false;       // AVX2, with the OS saving the 256-bit registers
  bool arm_crc32 = false;  // AArch64's CRC32 extension (crc32cx and kin)
};

// Read once, on first use (thread-safe); false where the architecture has no such feature.
const CpuFeatures& HostCpu();

}  // namespace insitubatch
