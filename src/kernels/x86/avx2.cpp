#include "kernels/x86/x86_kernels.h"

namespace edgellm {

void fill_avx2(TypeKernels* table) {
    fill_avx2_legacy(table);
    fill_avx2_kquants(table);
    fill_x16_avx2(table);
}

}  // namespace edgellm
