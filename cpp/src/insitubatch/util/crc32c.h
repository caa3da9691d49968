#pragma once

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of the v3 `crc32c`
// codec and the sharding index, and of every file the disk cache writes (its log records
// it; a revived file is verified against it). SSE4.2 when the CPU has it -- three lanes at
// once over a large buffer, so the instruction's latency is hidden (about 3x one lane) --
// ARMv8's CRC32 instructions where the CPU has them, slice-by-8 tables else.

#include <cstddef>
#include <cstdint>
#include <span>

namespace insitubatch {

// CRC-32C of `data` (init and final xor 0xFFFFFFFF): "123456789" -> 0xE3069283.
uint32_t Crc32c(std::span<const std::byte> data);
// Continues a previous Crc32c result over more bytes: Crc32cExtend(Crc32c(a), b) ==
// Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data);
// Crc32c(a + b) from Crc32c(a), Crc32c(b) and b's length, without the bytes.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

namespace internal_crc {
// The implementations behind Crc32c, for tests: the table version, the hardware version
// (SSE4.2 or ARMv8 CRC32) over one lane, and over three lanes (SSE4.2 only); each the table
// result where the CPU lacks the instructions.
uint32_t Crc32cPortable(std::span<const std::byte> data);
uint32_t Crc32cHardware(std::span<const std::byte> data);
uint32_t Crc32cThreeLanes(std::span<const std::byte> data);
}  // namespace internal_crc

}  // namespace insitubatch
