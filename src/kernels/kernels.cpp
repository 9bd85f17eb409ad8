#include "kernels/kernels.h"

#include <array>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "kernels/cpu_features.h"
#include "kernels/kernel_check.h"
#include "kernels/ref/ref_kernels.h"
#if defined(__x86_64__)
#include "kernels/x86/x86_kernels.h"
#endif
#if defined(__aarch64__)
#include "kernels/arm/arm_kernels.h"
#endif

namespace edgellm {

namespace {

using Table = std::array<TypeKernels, kTensorTypeCount>;

// Kernel sets in order of preference; each builds on the ones before it.
const std::vector<KernelSet>& all_sets() {
    static const std::vector<KernelSet> sets = {
#if defined(__x86_64__)
        {"avx2", [] { return cpu_features().avx2; }, fill_avx2, fill_panel_avx2, int8_peak_avx2, 4, 32},
        {"avx512",
         [] {
             const CpuFeatures& f = cpu_features();
             return f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
         },
         fill_avx512, fill_panel_avx512, int8_peak_avx512, 12, 64},
        // AMX replaces the panel GEMM (prefill) and adds exact batch GEMMs for x16 q2_K,
        // q4_K and q6_K weights; every other kernel stays AVX-512's.
        {"amx", [] { return cpu_features().amx_int8; }, fill_amx, fill_panel_amx, int8_peak_amx, 4,
         16 * 16 * 64},
        // Batches that take panels go through bf16 tiles instead (kernels/panel.h): faster,
        // but a batch's sums are no longer the int8 GEMV's bits, so a token's logits depend
        // on whether it came in a batch (a prompt cache hit changes a greedy answer):
        // opt-in, "amx" stays the default.
        {"amx-bf16", [] { return cpu_features().amx_bf16; }, nullptr, fill_panel_amx_bf16,
         int8_peak_amx, 4, 16 * 16 * 64, true},
#endif
#if defined(__aarch64__)
        {"neon", [] { return cpu_features().neon; }, fill_neon},
        {"dotprod", [] { return cpu_features().dotprod; }, fill_neon_dotprod, fill_panel_dotprod,
         int8_peak_dotprod, 8, 16},
        {"i8mm", [] { return cpu_features().i8mm; }, fill_neon_i8mm, fill_panel_i8mm, int8_peak_i8mm, 8, 32},
#endif
    };
    return sets;
}

Table make_reference() {
    Table t{};
    ref::fill_reference(t.data());
    return t;
}

const Table& reference_table() {
    static const Table t = make_reference();
    return t;
}

struct State {
    std::mutex mu;
    bool ready = false;
    Table active{};
    PanelKernel panel{};
    std::string active_name = "ref";
    std::vector<std::string> failures;
};

State& state() {
    static State s;
    return s;
}

// Stamp the ISA name on every function that a set replaced.
void stamp(Table& t, const Table& before, const char* isa) {
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i].to_float != before[i].to_float) t[i].to_float_isa = isa;
        if (t[i].from_float != before[i].from_float) t[i].from_float_isa = isa;
        if (t[i].vec_dot != before[i].vec_dot) t[i].vec_dot_isa = isa;
        if (t[i].vec_dot_4 != before[i].vec_dot_4) t[i].vec_dot_4_isa = isa;
        if (t[i].vec_dot_n != before[i].vec_dot_n) t[i].vec_dot_n_isa = isa;
        if (t[i].vec_mad_n != before[i].vec_mad_n) t[i].vec_mad_n_isa = isa;
        if (t[i].dot_rows != before[i].dot_rows) t[i].dot_rows_isa = isa;
        if (t[i].dot_rows_q8 != before[i].dot_rows_q8) t[i].dot_rows_q8_isa = isa;
        if (t[i].mad_rows_q8 != before[i].mad_rows_q8) t[i].mad_rows_q8_isa = isa;
        if (t[i].gemv_x16 != before[i].gemv_x16) t[i].gemv_x16_isa = isa;
    }
}

// Build the table from the reference plus every supported set up to `last` (all if empty).
// Functions that fail the self-test are dropped, with a message.
void build(State& s, const std::string& last) {
    Table t = reference_table();
    PanelKernel panel{};
    std::string name = "ref";
    s.failures.clear();
    for (const KernelSet& set : all_sets()) {
        if (!set.supported() || (set.opt_in && set.name != last)) break;
        Table cand = t;
        if (set.fill) set.fill(cand.data());
        stamp(cand, t, set.name);
        for (uint32_t id = 0; id < kTensorTypeCount && set.fill; ++id) {
            if (!tensor_type_info(id)) continue;
            // (a set that changes nothing of a type leaves it checked as it was)
            if (std::memcmp(&cand[id], &t[id], sizeof(TypeKernels)) == 0) continue;
            const std::string err =
                check_type_kernels((TensorType)id, cand[id], reference_table()[id], 512, 1234 + id);
            if (!err.empty()) {
                s.failures.push_back(err);
                std::fprintf(stderr,
                             "edgellm: kernel self-test failed, using the previous set: %s\n",
                             err.c_str());
                cand[id] = t[id];
            }
        }
        t = cand;
        name = set.name;
        if (set.fill_panel) {
            PanelKernel p{};
            set.fill_panel(&p);
            const std::string err = check_panel_kernel(p, 99);
            if (err.empty()) {
                panel = p;
            } else {
                s.failures.push_back(err);
                std::fprintf(stderr, "edgellm: kernel self-test failed, not using it: %s\n",
                             err.c_str());
            }
        }
        if (set.name == last) break;
    }
    s.active = t;
    s.panel = panel;
    s.active_name = name;
    s.ready = true;
}

State& ready_state() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.ready) build(s, "");
    return s;
}

}  // namespace

const TypeKernels& type_kernels(TensorType t) {
    return ready_state().active[(uint32_t)t];
}

const TypeKernels& reference_kernels(TensorType t) {
    return reference_table()[(uint32_t)t];
}

std::vector<std::string> available_kernel_sets() {
    std::vector<std::string> out = {"ref"};
    for (const KernelSet& set : all_sets()) {
        if (!set.supported()) break;
        out.push_back(set.name);
    }
    return out;
}

std::string default_kernel_set() {
    std::string best = "ref";
    for (const KernelSet& set : all_sets()) {
        if (!set.supported() || set.opt_in) break;
        best = set.name;
    }
    return best;
}

bool select_kernel_set(const std::string& name) {
    bool known = name == "ref";
    for (const auto& n : available_kernel_sets()) known = known || n == name;
    if (!known) return false;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (name == "ref") {
        s.active = reference_table();
        s.panel = PanelKernel{};
        s.active_name = "ref";
        s.failures.clear();
        s.ready = true;
    } else {
        build(s, name);
    }
    return true;
}

const PanelKernel& panel_kernel() {
    return ready_state().panel;
}

std::string active_kernel_set() {
    return ready_state().active_name;
}

VecDotInfo vec_dot_info(TensorType weights) {
    const TypeKernels& k = type_kernels(weights);
    VecDotInfo out;
    if (!k.vec_dot) return out;
    out.found = true;
    out.activation_type = k.vec_dot_type;
    out.isa = k.vec_dot_isa;
    return out;
}

std::string kernel_report() {
    const State& s = ready_state();
    std::string out;
    for (uint32_t id = 0; id < kTensorTypeCount; ++id) {
        const auto info = tensor_type_info(id);
        if (!info) continue;
        const TypeKernels& k = s.active[id];
        std::string line;
        auto add = [&](const char* fn, const void* f, const char* isa) {
            if (f) line += std::string(" ") + fn + "=" + isa;
        };
        add("vec_dot", (const void*)k.vec_dot, k.vec_dot_isa);
        add("vec_dot_4", (const void*)k.vec_dot_4, k.vec_dot_4_isa);
        add("vec_dot_n", (const void*)k.vec_dot_n, k.vec_dot_n_isa);
        add("vec_mad_n", (const void*)k.vec_mad_n, k.vec_mad_n_isa);
        add("dot_rows", (const void*)k.dot_rows, k.dot_rows_isa);
        add("dot_rows_q8", (const void*)k.dot_rows_q8, k.dot_rows_q8_isa);
        add("mad_rows_q8", (const void*)k.mad_rows_q8, k.mad_rows_q8_isa);
        add("gemv_x16", (const void*)k.gemv_x16, k.gemv_x16_isa);
        add("to_float", (const void*)k.to_float, k.to_float_isa);
        add("from_float", (const void*)k.from_float, k.from_float_isa);
        if (!line.empty()) out += std::string(info->name) + ":" + line + "\n";
    }
    if (s.panel.gemm)
        out += "panel gemm (prefill): " + std::string(s.panel.isa) + ", " +
               std::to_string(s.panel.rows) + " rows per panel\n";
    return out;
}

std::vector<std::string> kernel_selftest_failures() {
    return ready_state().failures;
}

// ---- the int8 compute limit ---------------------------------------------------------------

Int8PeakFn int8_peak_of(const std::string& set) {
    for (const KernelSet& k : all_sets())
        if (set == k.name) return k.int8_peak;
    return nullptr;
}

int64_t int8_peak_reference(const std::string& set, uint64_t iters, const int8_t* buf) {
    const uint8_t* a = (const uint8_t*)buf;
    const int8_t* b = buf + 64;
    const uint8_t* b_unsigned = a + 64;
    for (const KernelSet& k : all_sets()) {
        if (set != k.name || !k.int8_peak) continue;
        int64_t per = 0;  // one instruction's sum over its lanes
        if (set == "amx" || set == "amx-bf16") {  // (amx-bf16's int8 limit is amx's)
            // tdpbsud of whole tiles: A[m][k] = buf[k] signed, B[r][c] = buf[64 + c]
            // unsigned; element (m, n) = sum over k < 64 of A[m][k] * B[k / 4][4n + k % 4]
            for (int n = 0; n < 16; ++n)
                for (int q = 0; q < 64; ++q) per += 16 * (int64_t)buf[q] * b_unsigned[4 * n + q % 4];
        } else if (set == "i8mm") {
            // smmla: lane (i, j) = sum over k < 8 of a[8i + k] * b[8j + k]
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    for (int q = 0; q < 8; ++q) per += (int64_t)(int8_t)a[8 * i + q] * b[8 * j + q];
        } else {
            // dot products of 4 bytes per int32 lane: a unsigned for vpdpbusd / vpmaddubsw,
            // signed for sdot (the values used are small and positive: the same)
            const int lanes = k.int8_peak_macs / 4;
            const bool a_signed = set == "dotprod";
            for (int l = 0; l < lanes * 4; ++l) per += (a_signed ? (int64_t)(int8_t)a[l] : (int64_t)a[l]) * b[l];
        }
        return per * (int64_t)k.int8_peak_accumulators * (int64_t)iters;
    }
    return 0;
}

Int8Limit measure_int8_limit(int n_threads, double seconds) {
    Int8Limit out;
    const std::string active = active_kernel_set();
    Int8PeakFn fn = int8_peak_of(active);
    if (!fn) return out;
    out.set = active;
    alignas(64) int8_t buf[128];
    for (int i = 0; i < 128; ++i) buf[i] = (int8_t)(1 + i % 3);
    n_threads = std::max(1, n_threads);
    std::vector<double> rates((size_t)n_threads, 0.0);
    std::vector<std::thread> th;
    for (int t = 0; t < n_threads; ++t)
        th.emplace_back([&, t] {
            using C = std::chrono::steady_clock;
            int64_t sink = 0;
            (void)fn(20000, buf, &sink);  // (clocks up)
            uint64_t macs = 0;
            const auto t0 = C::now();
            double el = 0;
            do {
                macs += fn(200000, buf, &sink);
                el = std::chrono::duration<double>(C::now() - t0).count();
            } while (el < seconds);
            rates[(size_t)t] = (double)macs / el;
        });
    for (auto& x : th) x.join();
    for (double r : rates) out.macs_per_s += r;
    return out;
}

}  // namespace edgellm
