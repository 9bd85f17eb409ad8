#include "kernels/kernels.h"

#include <array>
#include <cstdio>
#include <mutex>

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
        {"avx2", [] { return cpu_features().avx2; }, fill_avx2, fill_panel_avx2},
        {"avx512",
         [] {
             const CpuFeatures& f = cpu_features();
             return f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
         },
         fill_avx512, fill_panel_avx512},
#endif
#if defined(__aarch64__)
        {"neon", [] { return cpu_features().neon; }, fill_neon},
        {"dotprod", [] { return cpu_features().dotprod; }, fill_neon_dotprod, fill_panel_dotprod},
        {"i8mm", [] { return cpu_features().i8mm; }, fill_neon_i8mm},
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
        if (!set.supported()) break;
        Table cand = t;
        set.fill(cand.data());
        stamp(cand, t, set.name);
        for (uint32_t id = 0; id < kTensorTypeCount; ++id) {
            if (!tensor_type_info(id)) continue;
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

}  // namespace edgellm
