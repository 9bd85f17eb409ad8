// libFuzzer target for the GGUF parser. Build with clang:
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DEDGELLM_FUZZ=ON && cmake --build
//   build-fuzz --target fuzz_gguf build-fuzz/bin/fuzz_gguf -max_total_time=60
//   ../shared/reference/golden/
// Every input must be accepted or refused with a message; accepted files must have every
// tensor inside the buffer.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "edgellm/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = edgellm::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz");
    if (!r.ok()) {
        if (r.error().empty()) std::abort();
        return 0;
    }
    for (const auto& t : (*r)->tensors())
        if (t.data < data || t.data + t.n_bytes > data + size) std::abort();
    for (const auto& [k, v] : (*r)->metadata()) (void)v.to_string();
    return 0;
}
