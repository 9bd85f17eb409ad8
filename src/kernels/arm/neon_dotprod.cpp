// The "dotprod" kernel set: ARMv8.2 DotProd (FEAT_DotProd; Cortex-A55, A76 and later,
// Raspberry Pi 5, Apple M1, Graviton 2). Compiled with -march=armv8.2-a+dotprod. It
// replaces the integer dot products of the "neon" set, which it builds on, with the
// same kernels (neon_int_dots.h) over sdot: each int32 lane takes four int8 products per
// instruction instead of the two smull + sadalp steps.
#include <arm_neon.h>

#include "kernels/arm/arm_kernels.h"
#include "kernels/arm/neon_int_dots.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "neon_dotprod.cpp needs -march=armv8.2-a+dotprod"
#endif

namespace edgellm {

namespace neon {
namespace {

// Lane k gets a[4k..4k+3] . b[4k..4k+3], exact for every int8 pair.
struct DotSdot {
    static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

}  // namespace
}  // namespace neon

void fill_neon_dotprod(TypeKernels* table) {
    neon::fill_int_dots(table, neon::DotSdot{});
}

}  // namespace edgellm
