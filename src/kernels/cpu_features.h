// What the CPU has *and the OS enables*. A flag in cpuid is not enough: the OS must save
// the register state (XCR0, read with xgetbv), or the first instruction dies with SIGILL.
#pragma once

#include <string>

namespace edgellm {

struct CpuFeatures {
    // x86
    bool avx2 = false;  // with FMA and F16C
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
    bool avx512bf16 = false, avx_vnni = false;
    // arm
    bool neon = false, dotprod = false, i8mm = false;
};

const CpuFeatures& cpu_features();
std::string cpu_features_string();

}  // namespace edgellm
