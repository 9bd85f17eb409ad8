// AVX2 kernels (kquants). Compiled with -mavx2 -mfma -mf16c; see x86_kernels.h.
#include <immintrin.h>

#include "kernels/block_formats.h"
#include "kernels/x86/x86_kernels.h"

namespace edgellm {

void fill_avx2_kquants(TypeKernels* table) { (void)table; }

}  // namespace edgellm
