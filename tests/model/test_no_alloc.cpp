// The token loop allocates nothing: after the first call, evaluating a token (decode) and
// a batch (prefill) makes no heap allocation. Counts every operator new in this binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "edgellm/model.h"
#include "test_paths.h"

namespace {
std::atomic<long> g_allocations{0};
}

void* operator new(std::size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    return operator new(n);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using namespace edgellm;

TEST(TokenLoop, AllocatesNothing) {
    const auto path = test::golden_dir() / "tiny-qwen2-q4_k_m.gguf";
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << "no golden models at " << test::golden_dir();
    auto m = Model::load(path.string());
    ASSERT_TRUE(m.ok());
    for (TensorType kv : {TensorType::F16, TensorType::Q8_0}) {
        ContextParams p;
        p.n_ctx = 128;
        p.n_batch = 16;
        p.n_threads = 2;
        p.type_k = p.type_v = kv;
        auto c = Context::create(**m, p);
        ASSERT_TRUE(c.ok());
        std::vector<int32_t> batch(16);
        for (int i = 0; i < 16; ++i) batch[(size_t)i] = 100 + i;
        ASSERT_TRUE((*c)->eval(batch, false).ok());  // first use: kernels chosen, pools warm
        const long before = g_allocations.load();
        for (int i = 0; i < 8; ++i) {
            const int32_t t = 200 + i;
            ASSERT_TRUE((*c)->eval(std::span<const int32_t>(&t, 1), false).ok());
        }
        ASSERT_TRUE((*c)->eval(batch, false).ok());
        EXPECT_EQ(g_allocations.load() - before, 0)
            << "allocations in the token loop, kv " << tensor_type_name(kv);
    }
}
