// Which compute kernels run: the kernel sets this machine can run (chosen at start-up by a
// CPU check the OS confirms and a self-test against the scalar reference; --kernels NAME or
// $EDGELLM_KERNELS picks another), and what the CPU offers.
#pragma once

#include <string>
#include <vector>

#include "edgellm/tensor_type.h"

namespace edgellm {

// Names of the kernel sets this machine can run, best last (opt-in sets after the default
// one); always starts with "ref".
std::vector<std::string> available_kernel_sets();

// Use only the reference and the named set (and the sets it builds on) from now on.
// Returns false when the set is unknown or unsupported here. Not thread-safe with
// concurrent kernel use: call before work starts (tests, CLI start-up).
bool select_kernel_set(const std::string& name);

// The name of the best kernel set in use ("avx2", "ref", ...).
std::string active_kernel_set();

// What the CPU has and the OS enables, e.g. "avx2 avx512f avx512vnni".
std::string cpu_features_string();

// The dot product a weight type's matrix-vector products use: the type the activations
// are quantized to and the kernel set it comes from (found false: none).
struct VecDotInfo {
    bool found = false;
    TensorType activation_type = TensorType::F32;
    std::string isa;  // "avx2", "ref", ...
};
VecDotInfo vec_dot_info(TensorType weights);

// The int8 multiply-add throughput the active kernel set's instruction reaches with
// n_threads threads over `seconds` (each thread its own loop), in multiply-adds per second,
// and that set's name; 0 when the active set has none (ref, neon). `edgellm bench` quotes
// prefill against it.
struct Int8Limit {
    double macs_per_s = 0;
    std::string set;
};
Int8Limit measure_int8_limit(int n_threads, double seconds = 0.3);

}  // namespace edgellm
