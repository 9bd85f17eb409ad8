// What the tests of synthetic models share: a model file written by `synth` (once per
// directory), tokens to feed it, and the distance of two rows of logits.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "edgellm/gguf.h"
#include "edgellm/synth.h"
#include "test_paths.h"

namespace edgellm::test {

// dir/SHAPE-TYPE.gguf, written by synth (seed 1) unless it is there already.
inline std::filesystem::path synth_file(const TempDir& dir, const char* shape, FileType type) {
    const std::filesystem::path f = dir.path / (std::string(shape) + "-" + file_type_name(type) + ".gguf");
    if (std::filesystem::exists(f)) return f;
    SynthOptions o;
    o.shape = shape;
    o.type = type;
    o.n_threads = 2;
    auto r = synth_model(f.string(), o);
    EXPECT_TRUE(r.ok()) << r.error();
    return f;
}

// A copy of src at `path` but for a key set (key null: none) and an f32 vector added, named
// `tensor`, with the first row of `like` (null: none): a variant a loader must refuse.
inline void write_variant(const std::filesystem::path& path, const GgufFile& src, const char* key,
                          const GgufValue& value, const char* tensor, const GgufTensorInfo* like) {
    GgufWriter w;
    w.copy_metadata(src);
    if (key) w.set(key, value);
    for (const auto& t : src.tensors())
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data);
    if (tensor) w.add_tensor(tensor, TensorType::F32, {like->ne[0]}, like->data);
    auto r = w.write(path.string());
    ASSERT_TRUE(r.ok()) << r.error();
}

// n token ids of a 4096-token vocabulary, a different run for each salt.
inline std::vector<int32_t> some_tokens(int n, int salt = 0) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 131 + 7 + salt * 17) % 4000);
    return t;
}

// Normalized RMS distance of a from b.
inline double nrmse(std::span<const float> a, std::span<const float> b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return std::sqrt(num / den);
}

}  // namespace edgellm::test
