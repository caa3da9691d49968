#pragma once

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the v3 `crc32c`
// codec and of the sharding index. SSE4.2 when the CPU has it, slice-by-8 tables else.

#include <cstddef>
#include <cstdint>
#include <span>

namespace insitubatch::zarr {

// CRC-32C of `data` (init and final xor 0xFFFFFFFF): "123456789" -> 0xE3069283.
uint32_t Crc32c(std::span<const std::byte> data);
// Continues a previous Crc32c result over more bytes: Crc32cExtend(Crc32c(a), b) ==
// Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data);

namespace internal_codec {
// The two implementations behind Crc32c, for tests: the table version, and the SSE4.2
// version (the table result where the CPU lacks SSE4.2).
uint32_t Crc32cPortable(std::span<const std::byte> data);
uint32_t Crc32cHardware(std::span<const std::byte> data);
}  // namespace internal_codec

}  // namespace insitubatch::zarr
