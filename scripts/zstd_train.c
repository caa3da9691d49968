/* The training run of the wheel's profile-guided libzstd (scripts/build_wheel_deps.sh):
 * float32 fields like the ones the benchmarks and users store (a smooth field plus noise, as
 * is and quantized to 1/64), compressed at levels 1, 3 and 5 and decoded 30 times each, so
 * GCC lays out zstd's decoder for the paths such chunks take. Linked with the instrumented
 * objects; exits non-zero if a round trip differs, so a broken build trains nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zstd.h"

static uint64_t state = 0x9e3779b97f4a7c15ULL;

static double uniform(void) { /* xorshift64*, in (0, 1) */
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return ((state * 0x2545f4914f6cdd1dULL) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
}

static double normal(void) { return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()); }

int main(void) {
  static const size_t shapes[][3] = {{4, 181, 360}, {16, 45, 90}, {1, 181, 360}};
  static const int levels[] = {1, 3, 5};
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const size_t n = shapes[s][0] * shapes[s][1] * shapes[s][2], bytes = n * sizeof(float);
    float* field = malloc(bytes);
    float* back = malloc(bytes);
    const size_t cap = ZSTD_compressBound(bytes);
    void* frame = malloc(cap);
    if (field == NULL || back == NULL || frame == NULL || dctx == NULL) return 2;
    for (int quantized = 0; quantized < 2; ++quantized) {
      for (size_t i = 0; i < n; ++i) {
        double v = 280.0 + 15.0 * sin((double)i * 0.01) + 0.3 * normal();
        field[i] = (float)(quantized ? round(v * 64.0) / 64.0 : v);
      }
      for (size_t l = 0; l < sizeof levels / sizeof levels[0]; ++l) {
        const size_t size = ZSTD_compress(frame, cap, field, bytes, levels[l]);
        if (ZSTD_isError(size)) return 3;
        for (int k = 0; k < 30; ++k) {
          const size_t got = ZSTD_decompressDCtx(dctx, back, bytes, frame, size);
          if (got != bytes || memcmp(back, field, bytes) != 0) {
            fprintf(stderr, "zstd_train: round trip differs (level %d)\n", levels[l]);
            return 4;
          }
        }
      }
    }
    free(field);
    free(back);
    free(frame);
  }
  ZSTD_freeDCtx(dctx);
  return 0;
}
