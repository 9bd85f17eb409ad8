// arm_kernel_check [--expect SET]
//
// Every kernel set this CPU supports against the scalar reference, on random blocks of
// several sizes and seeds, within the error budgets of kernel_check.cpp; prints one line
// per set and type, then "N passed, M failed", and exits non-zero on any failure.
//
// It is the aarch64 counterpart of tests/kernels/test_kernels.cpp without GoogleTest
// (Debian has no aarch64 libgtest among its cross packages), so the static cross-built
// binary runs as it is under qemu-aarch64-static. scripts/test-arm.sh runs it under
// several qemu CPU models with --expect, which also checks that start-up selection chose
// SET: the best set the CPU has, and none that it lacks. Portable: on x86 it checks avx2.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernel_check.h"
#include "kernels/kernels.h"

using namespace edgellm;

namespace {

std::vector<TensorType> all_types() {
    std::vector<TensorType> out;
    for (uint32_t id = 0; id < kTensorTypeCount; ++id)
        if (tensor_type_info(id) && reference_kernels((TensorType)id).to_float)
            out.push_back((TensorType)id);
    return out;
}

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
}

// "vec_dot=dotprod from_float=neon": the functions of k that are not the reference's.
std::string replaced(const TypeKernels& k, const TypeKernels& r, const std::string& set, int* own) {
    std::string out;
    auto add = [&](const char* fn, bool differs, const char* isa) {
        if (!differs) return;
        out += (out.empty() ? "" : " ") + std::string(fn) + "=" + isa;
        if (set == isa) ++*own;
    };
    add("vec_dot", k.vec_dot != r.vec_dot, k.vec_dot_isa);
    add("vec_dot_4", k.vec_dot_4 != r.vec_dot_4, k.vec_dot_4_isa);
    add("vec_mad_n", k.vec_mad_n != r.vec_mad_n, k.vec_mad_n_isa);
    add("dot_rows", k.dot_rows != r.dot_rows, k.dot_rows_isa);
    add("dot_rows_q8", k.dot_rows_q8 != r.dot_rows_q8, k.dot_rows_q8_isa);
    add("to_float", k.to_float != r.to_float, k.to_float_isa);
    add("from_float", k.from_float != r.from_float, k.from_float_isa);
    add("gemv_x16", k.gemv_x16 != r.gemv_x16, k.gemv_x16_isa);
    return out;
}

// The quantizers must write the reference's bytes, not only values within a step of
// them (check_type_kernels' budget): the activation bytes decide every dot product. On
// random rows with an all-zero block, and on rows of exact rounding ties: amax 127, so
// the scale is 1 (-1 for q8_K's -127 / max) and x * scale is the half-integer itself.
std::string check_from_float_bytes(TensorType t, const TypeKernels& k, const TypeKernels& r,
                                   int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t bs = tensor_type_info(t).block_size;
    const size_t bytes = row_size(t, n);
    std::vector<float> src((size_t)n);
    for (const bool ties : {false, true}) {
        for (int64_t i = 0; i < n; ++i) {
            const float tie = (float)((int64_t)(rng() % 253) - 126) + 0.5f;  // -125.5 .. 126.5
            src[(size_t)i] = !ties ? normal(rng) : i % bs == 0 ? 127.0f : tie;
        }
        if (!ties && n >= 2 * bs)
            for (int64_t i = bs; i < 2 * bs; ++i) src[(size_t)i] = 0.0f;
        std::vector<uint8_t> a(bytes, 0xAA), b(bytes, 0xAA);
        k.from_float(src.data(), a.data(), n);
        r.from_float(src.data(), b.data(), n);
        for (size_t i = 0; i < bytes; ++i)
            if (a[i] != b[i])
                return std::string(tensor_type_name(t)) + " from_float byte " + std::to_string(i) +
                       " is " + std::to_string(a[i]) + ", reference " + std::to_string(b[i]) +
                       (ties ? " (rounding ties)" : "");
    }
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    std::string expect;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--expect") == 0 && i + 1 < argc) {
            expect = argv[++i];
        } else {
            std::fprintf(stderr, "usage: arm_kernel_check [--expect SET]\n");
            return 2;
        }
    }

    int passed = 0, failed = 0;
    auto result = [&](bool ok) { ok ? ++passed : ++failed; };

    // Start-up selection first, before select_kernel_set() changes anything.
    const std::string selected = active_kernel_set();
    const std::vector<std::string> sets = available_kernel_sets();
    std::printf("cpu features: %s\n", cpu_features_string().c_str());
    std::printf("kernel sets available: %s; selected: %s\n", join(sets).c_str(), selected.c_str());
    for (const std::string& err : kernel_selftest_failures()) {
        std::printf("FAIL start-up self-test: %s\n", err.c_str());
        result(false);
    }
    if (!expect.empty()) {
        const bool ok = selected == expect;
        std::printf("%s selected set is %s, expected %s\n", ok ? "ok  " : "FAIL", selected.c_str(),
                    expect.c_str());
        result(ok);
    }

    for (const std::string& set : sets) {
        if (!select_kernel_set(set)) {
            std::printf("FAIL %-8s cannot be selected\n", set.c_str());
            result(false);
            continue;
        }
        for (const std::string& err : kernel_selftest_failures()) {
            std::printf("FAIL %-8s self-test: %s\n", set.c_str(), err.c_str());
            result(false);
        }
        int own = 0;
        for (TensorType t : all_types()) {
            const TypeKernels& k = type_kernels(t);
            const TypeKernels& r = reference_kernels(t);
            const std::string fns = replaced(k, r, set, &own);
            if (fns.empty()) continue;
            const int64_t bs = tensor_type_info(t).block_size;
            const int64_t sizes[] = {bs == 1 ? 1 : bs, bs * 8 + (bs == 1 ? 7 : 0), 4096, 14336};
            int checks = 0;
            std::string err;
            for (int64_t n : sizes)
                for (uint64_t seed = 0; seed < 8 && err.empty(); ++seed) {
                    if (n % bs) continue;
                    err = check_type_kernels(t, k, r, n, 1000 * seed + (uint64_t)n);
                    if (err.empty() && k.from_float != r.from_float)
                        err = check_from_float_bytes(t, k, r, n, 1000 * seed + (uint64_t)n);
                    if (!err.empty()) err = "n=" + std::to_string(n) + ": " + err;
                    ++checks;
                }
            std::printf("%s %-8s %-5s %-48s %2d checks%s%s\n", err.empty() ? "ok  " : "FAIL",
                        set.c_str(), tensor_type_name(t), fns.c_str(), checks,
                        err.empty() ? "" : ": ", err.c_str());
            result(err.empty());
        }
        if (panel_kernel().gemm && std::string(panel_kernel().isa) == set) {
            // The panel GEMM against the scalar panel_gemm_ref, bit for bit, many seeds.
            std::string err;
            for (uint64_t seed = 1; seed <= 16 && err.empty(); ++seed)
                err = check_panel_kernel(panel_kernel(), seed);
            std::printf("%s %-8s panel gemm, %d rows per panel, 16 seeds%s%s\n",
                        err.empty() ? "ok  " : "FAIL", set.c_str(), panel_kernel().rows,
                        err.empty() ? "" : ": ", err.c_str());
            result(err.empty());
            ++own;
        }
        if (set == "ref") {
            std::printf("ok   %-8s (the reference itself)\n", set.c_str());
        } else if (own == 0) {
            std::printf("FAIL %-8s replaces nothing\n", set.c_str());
            result(false);
        } else {
            std::printf("ok   %-8s %d functions of its own\n", set.c_str(), own);
        }
    }
    select_kernel_set(selected);

    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
