// The runtime tests' model: the golden tiny-qwen2 Q8_0 with its tokenizer and a context.
#pragma once

#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "edgellm/model.h"
#include "edgellm/tokenizer.h"
#include "test_paths.h"

namespace edgellm::test {

struct Fixture {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<Context> ctx;
};

// False when the golden models are not there (the test then skips).
inline bool load(Fixture* f, int64_t n_ctx = 256) {
    const std::filesystem::path p = golden_dir() / "tiny-qwen2-q8_0.gguf";
    if (!std::filesystem::exists(p)) return false;
    auto m = Model::load(p.string());
    EXPECT_TRUE(m.ok()) << m.error();
    f->model = std::move(*m);
    auto t = Tokenizer::load(f->model->file());
    EXPECT_TRUE(t.ok()) << t.error();
    f->tok = std::move(*t);
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    auto c = Context::create(*f->model, cp);
    EXPECT_TRUE(c.ok()) << c.error();
    f->ctx = std::move(*c);
    return true;
}

}  // namespace edgellm::test
