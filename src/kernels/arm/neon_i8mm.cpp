// The "i8mm" kernel set: ARMv8.6 I8MM (FEAT_I8MM: smmla, ummla, usmmla, usdot, sudot).
// Compiled with -march=armv8.6-a+dotprod+i8mm. It adds no kernel to the "dotprod" set,
// on purpose:
//
// - smmla multiplies a 2x8 int8 matrix by an 8x2 one: 32 products, four int32 results
//   (two rows of weights x two columns of activations). Every dot product in the dispatch
//   table takes one weight row (vec_dot: one column, vec_dot_4: four), so only two of
//   the four results could be used: 16 useful products per instruction, the same as one
//   sdot, plus the shuffles to build the 2x8 operands. It pays off only in a kernel that
//   produces 2 (or more) weight rows x 2 columns at once, which the table has no slot for
//   yet.
// - usdot (unsigned x signed bytes) would help a weight format with unsigned values above
//   127; every block format here is unpacked to values that fit a signed byte, so sdot
//   already takes them.
//
// The set is still registered: it is where a 2x2 kernel goes once the table has a slot
// for one, and it makes the detection of I8MM (HWCAP2_I8MM) testable under qemu: with
// -cpu max it is selected, with -cpu cortex-a76 it must not be. Its functions are
// reported as "dotprod", the set they come from.
#include <arm_neon.h>

#include "kernels/arm/arm_kernels.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__ARM_FEATURE_DOTPROD)
#error "neon_i8mm.cpp needs -march=armv8.6-a+dotprod+i8mm"
#endif

namespace edgellm {

void fill_neon_i8mm(TypeKernels*) {}

}  // namespace edgellm

namespace edgellm {

// I8MM's int8 matrix multiply: smmla (a 2x8 by 8x2 block, 32 multiply-adds), eight
// independent accumulators.
uint64_t int8_peak_i8mm(uint64_t iters, const int8_t* buf, int64_t* lanes_sum) {
    const int8x16_t a = vld1q_s8(buf), b = vld1q_s8(buf + 64);
    int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (uint64_t i = 0; i < iters; ++i) {
        c0 = vmmlaq_s32(c0, a, b);
        c1 = vmmlaq_s32(c1, a, b);
        c2 = vmmlaq_s32(c2, a, b);
        c3 = vmmlaq_s32(c3, a, b);
        c4 = vmmlaq_s32(c4, a, b);
        c5 = vmmlaq_s32(c5, a, b);
        c6 = vmmlaq_s32(c6, a, b);
        c7 = vmmlaq_s32(c7, a, b);
        __asm__ volatile("" : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6), "+w"(c7));
    }
    const int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(c0, c1), vaddq_s32(c2, c3)),
                                  vaddq_s32(vaddq_s32(c4, c5), vaddq_s32(c6, c7)));
    *lanes_sum = (int64_t)vgetq_lane_s32(s, 0) + vgetq_lane_s32(s, 1) + vgetq_lane_s32(s, 2) + vgetq_lane_s32(s, 3);
    return iters * 8 * 32;
}

}  // namespace edgellm
