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
