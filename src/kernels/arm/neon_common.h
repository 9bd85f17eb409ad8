// Small NEON helpers shared by the aarch64 kernel files. Include only from src/kernels/arm.
//
// Everything here (and in neon_int_dots.h) has internal linkage, on purpose: the kernel
// files are compiled with different -march flags, and an inline function with external
// linkage would be one symbol for the linker, which keeps whichever copy it meets first.
// A copy compiled for dotprod could then run on a CPU without it and die with SIGILL.
#pragma once

#include <arm_neon.h>

#include <cstring>

#include "kernels/fp16.h"

namespace edgellm::neon {
namespace {

// One half -> float by the FP unit's conversion (exact, as fp16_to_f32).
inline float h2f(fp16_t h) {
    __fp16 f;
    std::memcpy(&f, &h, 2);
    return (float)f;
}
// One float -> half, round to nearest even (FPCR default; same bits as f32_to_fp16).
inline fp16_t f2h(float f) {
    const __fp16 h = (__fp16)f;
    fp16_t out;
    std::memcpy(&out, &h, 2);
    return out;
}

// Vector loads from byte pointers: block structs are packed, so no field is aligned.
inline int8x16_t load_s8(const void* p) {
    return vld1q_s8((const int8_t*)p);
}
inline uint8x16_t load_u8(const void* p) {
    return vld1q_u8((const uint8_t*)p);
}
// 8 little-endian int16 from any address.
inline int16x8_t load_s16(const void* p) {
    return vreinterpretq_s16_u8(vld1q_u8((const uint8_t*)p));
}

// [sum(a), sum(b), sum(c), sum(d)]: four sub-block totals in one vector, ready to be
// multiplied by four scales.
inline int32x4_t lane_sums4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d));
}

// Widen bytes 0..3 / 4..7 of 8 scales to int32 lanes.
inline int32x4_t widen_lo_s32(int16x8_t v) {
    return vmovl_s16(vget_low_s16(v));
}
inline int32x4_t widen_hi_s32(int16x8_t v) {
    return vmovl_high_s16(v);
}

}  // namespace
}  // namespace edgellm::neon
