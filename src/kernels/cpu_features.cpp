#include "kernels/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace edgellm {

namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

// Linux hands the 8 KiB of tile data state to a process only on request (since 5.16);
// before that, or when refused, a tile instruction faults.
bool amx_permitted() {
#if defined(__x86_64__) && defined(__linux__)
    constexpr long kReqXcompPerm = 0x1023, kGetXcompPerm = 0x1022, kXtileData = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) != 0) return false;
    unsigned long perm = 0;
    return syscall(SYS_arch_prctl, kGetXcompPerm, &perm) == 0 && (perm & (1ul << kXtileData));
#else
    return false;
#endif
}
#endif

CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = c & (1u << 27);
    const bool avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = read_xcr0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;              // SSE + AVX state
    const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
    if (!os_ymm) return f;
    unsigned a7, b7, c7, d7;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    f.avx2 = (b7 & (1u << 5)) && fma && f16c;
    if (os_zmm) {
        f.avx512f = b7 & (1u << 16);
        f.avx512bw = b7 & (1u << 30);
        f.avx512vl = b7 & (1u << 31);
        f.avx512vnni = c7 & (1u << 11);
    }
    unsigned a71, b71, c71, d71;
    __cpuid_count(7, 1, a71, b71, c71, d71);
    f.avx_vnni = (a71 & (1u << 4)) && f.avx2;
    f.avx512bf16 = (a71 & (1u << 5)) && f.avx512f;
    f.amx_int8 = (d7 & (1u << 24)) && (d7 & (1u << 25)) && (xcr0 & 0x60000) == 0x60000 &&
                 amx_permitted();
    // (the bf16 GEMM's conversions are AVX512-BF16's)
    f.amx_bf16 = f.amx_int8 && (d7 & (1u << 22)) && f.avx512bf16;
#elif defined(__aarch64__)
    f.neon = true;
#if defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long hw2 = getauxval(AT_HWCAP2);
    f.dotprod = hw & HWCAP_ASIMDDP;
#ifdef HWCAP2_I8MM
    f.i8mm = hw2 & HWCAP2_I8MM;
#else
    (void)hw2;
#endif
#endif
#endif
    return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

std::string cpu_features_string() {
    const CpuFeatures& f = cpu_features();
    std::string s;
    auto add = [&](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ' ';
        s += name;
    };
    add(f.avx2, "avx2");
    add(f.avx512f, "avx512f");
    add(f.avx512bw, "avx512bw");
    add(f.avx512vl, "avx512vl");
    add(f.avx512vnni, "avx512vnni");
    add(f.avx512bf16, "avx512bf16");
    add(f.avx_vnni, "avx-vnni");
    add(f.amx_int8, "amx-int8");
    add(f.amx_bf16, "amx-bf16");
    add(f.neon, "neon");
    add(f.dotprod, "dotprod");
    add(f.i8mm, "i8mm");
    return s.empty() ? "none" : s;
}

}  // namespace edgellm
