// The generation loop on a tiny golden model: length limits, stop strings held back and
// cut, cancellation, reproducible sampling, and KV prefix reuse across requests.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <latch>
#include <mutex>
#include <thread>

#include "edgellm/prompt_cache.h"
#include "edgellm/session.h"
#include "test_paths.h"
#include "tiny_model.h"
#include "greedy.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

using test::Fixture;
using test::load;

const std::vector<int32_t> kPrompt = {1936, 2094, 3090, 3890, 142, 590, 3368, 3882};

using test::greedy;

}  // namespace

TEST(Session, StopsAtNPredictAndStreamsWhatItReturns) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    std::string streamed;
    auto r = s.generate(kPrompt, greedy(12), [&](std::string_view t) {
        streamed += t;
        return true;
    });
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->n_generated, 12);
    EXPECT_EQ(r->tokens.size(), 12u);
    EXPECT_EQ(r->stop, StopReason::Length);
    EXPECT_EQ(streamed, r->text);
    EXPECT_EQ(r->text, f.tok->detokenize(r->tokens, false));
    EXPECT_EQ(r->n_prompt, 8);
    EXPECT_EQ(r->n_cached, 0);
}

TEST(Session, StopStringIsCutAndNeverStreamed) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    auto full = s.generate(kPrompt, greedy(16), nullptr);
    ASSERT_TRUE(full.ok());
    // Use the text of generated tokens 5..6 as a stop string.
    const std::string before = f.tok->detokenize(std::span(full->tokens).subspan(0, 5), false);
    const std::string stop = f.tok->detokenize(std::span(full->tokens).subspan(5, 2), false);
    ASSERT_FALSE(stop.empty());
    ASSERT_EQ(before.find(stop), std::string::npos) << "pick a stop string that appears later";
    GenerateParams p = greedy(16);
    p.stop = {stop, "a string that never appears"};
    std::string streamed;
    auto r = s.generate(kPrompt, p, [&](std::string_view t) {
        streamed += t;
        return true;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::StopString);
    EXPECT_EQ(r->stop_string, stop);
    EXPECT_EQ(r->text, before);
    EXPECT_EQ(streamed, before);
    EXPECT_EQ(streamed.find(stop), std::string::npos);
}

TEST(Session, CallbackCancels) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    int calls = 0;
    auto r = s.generate(kPrompt, greedy(50), [&](std::string_view) { return ++calls < 3; });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stop, StopReason::Cancelled);
    EXPECT_EQ(calls, 3);
    EXPECT_LT(r->n_generated, 50);
}

TEST(Session, ReusesTheCachedPrefix) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    auto first = s.generate(kPrompt, greedy(4), nullptr);
    ASSERT_TRUE(first.ok());
    // The next turn: the old prompt, the reply, and new tokens.
    std::vector<int32_t> next = kPrompt;
    next.insert(next.end(), first->tokens.begin(), first->tokens.end());
    next.push_back(77);
    next.push_back(78);
    auto second = s.generate(next, greedy(4), nullptr);
    ASSERT_TRUE(second.ok());
    // The prompt and the first three replies were evaluated (the last sampled one was not).
    EXPECT_EQ(second->n_cached, 8 + 3);

    // The same request from a fresh session gives the same tokens.
    Fixture g;
    ASSERT_TRUE(load(&g));
    Session fresh(*g.model, *g.tok, *g.ctx);
    auto cold = fresh.generate(next, greedy(4), nullptr);
    ASSERT_TRUE(cold.ok());
    EXPECT_EQ(cold->n_cached, 0);
    EXPECT_EQ(cold->tokens, second->tokens);
}

TEST(Session, SameSeedSameText) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    GenerateParams p = greedy(20);
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 42;
    auto a = s.generate(kPrompt, p, nullptr);
    auto b = s.generate(kPrompt, p, nullptr);
    p.sampling.seed = 43;
    auto c = s.generate(kPrompt, p, nullptr);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_NE(a->tokens, c->tokens);
}

TEST(Session, RefusesAPromptLargerThanTheContext) {
    Fixture f;
    if (!load(&f, 16)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    Session s(*f.model, *f.tok, *f.ctx);
    std::vector<int32_t> big(40, 5);
    auto r = s.generate(big, greedy(4), nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("does not fit the context"), std::string::npos) << r.error();
    // Generation that runs into the end of the context stops cleanly.
    auto full = s.generate(kPrompt, greedy(100), nullptr);
    ASSERT_TRUE(full.ok()) << full.error();
    EXPECT_EQ(full->stop, StopReason::ContextFull);
    EXPECT_EQ(full->n_generated, 16 - 8 + 1);
}

// Two sessions on two sequences of one context keep separate caches: each gives the text
// it gives alone, also when they run at the same time and their steps are evaluated
// together in one forward pass.
TEST(Session, SequencesOfOneContextAreIndependent) {
    Fixture alone;
    if (!load(&alone)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    const std::vector<int32_t> other = {590, 3368, 3882, 1936, 2094, 142};
    Session s_alone(*alone.model, *alone.tok, *alone.ctx);
    auto a_ref = s_alone.generate(kPrompt, greedy(20), nullptr);
    auto b_ref = s_alone.generate(other, greedy(20), nullptr);
    ASSERT_TRUE(a_ref.ok() && b_ref.ok());

    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_threads = 1;  // no spinning worker: both sessions' threads get the cores
    cp.n_seq = 2;
    auto ctx = Context::create(*alone.model, cp);
    ASSERT_TRUE(ctx.ok()) << ctx.error();
    Session a(*alone.model, *alone.tok, **ctx, 0), b(*alone.model, *alone.tok, **ctx, 1);
    StepBatcher batcher(**ctx, std::chrono::milliseconds(50));
    GenerateParams p = greedy(20);
    p.batcher = &batcher;
    Result<GenerateResult> ra = Result<GenerateResult>::fail("not run");
    Result<GenerateResult> rb = Result<GenerateResult>::fail("not run");
    // Each session waits at its first piece of text until the other has one too, so
    // neither finishes before the other starts (the scheduler may start a thread late).
    std::latch both_started(2);
    auto meet = [&](bool* met) {
        return [&both_started, met](std::string_view) {
            if (!*met) both_started.arrive_and_wait();
            *met = true;
            return true;
        };
    };
    bool a_met = false, b_met = false;
    std::thread ta([&] { ra = a.generate(kPrompt, p, meet(&a_met)); });
    std::thread tb([&] { rb = b.generate(other, p, meet(&b_met)); });
    ta.join();
    tb.join();
    ASSERT_TRUE(ra.ok()) << ra.error();
    ASSERT_TRUE(rb.ok()) << rb.error();
    // 2 x (1 prompt step + 19 decode steps); once both generate, each pass carries both.
    EXPECT_EQ(batcher.steps(), 40u);
    EXPECT_LE(batcher.passes(), 26u) << "the steps were not evaluated together";
    EXPECT_EQ(batcher.active(), 0);
    EXPECT_EQ(ra->tokens, a_ref->tokens);
    EXPECT_EQ(rb->tokens, b_ref->tokens);
    EXPECT_EQ((*ctx)->n_past(0), (int64_t)kPrompt.size() + 19);
    EXPECT_EQ((*ctx)->n_past(1), (int64_t)other.size() + 19);
    // The next turn on sequence 0 reuses its own prefix, untouched by sequence 1.
    auto again = a.generate(kPrompt, greedy(20), nullptr);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->n_cached, (int64_t)kPrompt.size() - 1);
    EXPECT_EQ(again->tokens, a_ref->tokens);
    EXPECT_FALSE((*ctx)->eval(kPrompt, false, 2).ok()) << "there is no third sequence";
}

// A cancel raised while the prompt is evaluated stops it between layers: the result says
// Cancelled, nothing is generated, and the cache keeps only whole batches, so the next
// request reuses exactly those.
TEST(Session, CancelDuringPromptKeepsWholeBatches) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ContextParams cp;
    cp.n_ctx = 256;
    cp.n_threads = 1;
    cp.n_batch = 16;
    auto ctx = Context::create(*f.model, cp);
    ASSERT_TRUE(ctx.ok());
    Session s(*f.model, *f.tok, **ctx);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 100; ++i) prompt.push_back(kPrompt[(size_t)i % kPrompt.size()] + i);
    std::atomic<bool> cancel{true};
    GenerateParams p = greedy(5);
    p.cancel = &cancel;
    auto r = s.generate(prompt, p, nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->stop, StopReason::Cancelled);
    EXPECT_EQ(r->n_generated, 0);
    EXPECT_EQ(s.cached_tokens().size(), 0u);

    // Raise the flag from the trace hook in the middle of the third batch.
    cancel = false;
    int steps = 0;
    (*ctx)->set_trace([&](const char* name, int layer, const float*, int64_t, int64_t) {
        if (std::string_view(name) == "l_out" && layer == 0 && ++steps == 3) cancel = true;
    });
    r = s.generate(prompt, p, nullptr);
    (*ctx)->set_trace(nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->stop, StopReason::Cancelled);
    EXPECT_EQ(s.cached_tokens().size(), 32u);
    EXPECT_EQ((*ctx)->n_past(), 32);
    cancel = false;
    r = s.generate(prompt, p, nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->n_cached, 32);
    EXPECT_EQ(r->n_generated, 5);

    // The same text as a fresh session.
    Fixture g;
    ASSERT_TRUE(load(&g));
    Session fresh(*g.model, *g.tok, *g.ctx);
    auto ref = fresh.generate(prompt, greedy(5), nullptr);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(r->tokens, ref->tokens);
}

// A saved session restores into a fresh context and continues exactly as the original;
// a damaged, truncated or foreign file is refused with a reason and leaves the session empty.
TEST(Session, SaveAndRestoreTheCache) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    const std::string path = (fs::temp_directory_path() / "edgellm-test-slot.kvc").string();
    Session s(*f.model, *f.tok, *f.ctx);
    auto first = s.generate(kPrompt, greedy(10), nullptr);
    ASSERT_TRUE(first.ok());
    const std::string key = kv_cache_key(*f.ctx, "template");
    EXPECT_NE(key.find(f.model->fingerprint()), std::string::npos) << key;
    auto saved = write_kv_file(path, key, save_state(s.cache()));
    ASSERT_TRUE(saved.ok()) << saved.error();
    EXPECT_EQ(*saved, (size_t)fs::file_size(path));
    std::vector<int32_t> longer = kPrompt;
    longer.insert(longer.end(), first->tokens.begin(), first->tokens.end());
    auto cont = s.generate(longer, greedy(8), nullptr);
    ASSERT_TRUE(cont.ok());

    Fixture g;
    ASSERT_TRUE(load(&g));
    Session r(*g.model, *g.tok, *g.ctx);
    auto head = read_kv_head(path);
    ASSERT_TRUE(head.ok()) << head.error();
    EXPECT_EQ(head->key, key);
    EXPECT_EQ(head->tokens.size(), kPrompt.size() + 9);
    auto state = read_kv_file(path, key);
    ASSERT_TRUE(state.ok()) << state.error();
    auto n = restore_state(r.cache(), *state);
    ASSERT_TRUE(n.ok()) << n.error();
    EXPECT_EQ(*n, (int64_t)kPrompt.size() + 9);
    auto again = r.generate(longer, greedy(8), nullptr);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->n_cached, *n) << "the restored cache is reused";
    EXPECT_EQ(again->tokens, cont->tokens);

    // Another configuration's file is refused by its key.
    auto foreign = read_kv_file(path, key + "x");
    EXPECT_FALSE(foreign.ok());
    EXPECT_NE(foreign.error().find("another configuration"), std::string::npos) << foreign.error();
    // One flipped byte in the K/V: the digest catches it.
    {
        std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp((std::streamoff)fs::file_size(path) - 100);
        char c = 0;
        io.read(&c, 1);
        io.seekp((std::streamoff)fs::file_size(path) - 100);
        c ^= 0x40;
        io.write(&c, 1);
    }
    auto flipped = read_kv_file(path, key);
    EXPECT_FALSE(flipped.ok());
    EXPECT_NE(flipped.error().find("digest"), std::string::npos) << flipped.error();
    // Cut short.
    fs::resize_file(path, fs::file_size(path) / 2);
    auto bad = read_kv_file(path, key);
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("truncated"), std::string::npos) << bad.error();
    EXPECT_FALSE(read_kv_head(path).ok());
    // Not a saved cache at all.
    { std::ofstream(path) << "hello"; }
    EXPECT_FALSE(read_kv_file(path, key).ok());
    EXPECT_FALSE(read_kv_file(path + ".missing", key).ok());
    fs::remove(path);

    // K/V bytes of another layout, or that disagree with the tokens, leave it empty.
    KvState wrong = *state;
    wrong.tokens.pop_back();
    EXPECT_FALSE(restore_state(r.cache(), wrong).ok());
    EXPECT_TRUE(r.cached_tokens().empty());
    EXPECT_EQ(g.ctx->n_past(), 0);
    wrong = *state;
    wrong.kv.resize(wrong.kv.size() - 1);
    EXPECT_FALSE(restore_state(r.cache(), wrong).ok());
    EXPECT_EQ(g.ctx->n_past(), 0);
}

// More threads than the process may run on only wait for each other: a context uses at
// most as many as there are usable CPUs, and its affinity line says what was asked for.
TEST(Context, ThreadsAreCappedAtTheUsableCpus) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ContextParams cp;
    cp.n_ctx = 64;
    cp.n_threads = 1000;
    auto ctx = Context::create(*f.model, cp);
    ASSERT_TRUE(ctx.ok()) << ctx.error();
    const int cpus = (int)std::max(1u, std::thread::hardware_concurrency());
    EXPECT_LE((*ctx)->params().n_threads, cpus);
    EXPECT_GE((*ctx)->params().n_threads, 1);
    EXPECT_NE((*ctx)->affinity_report().find("1000 asked for"), std::string::npos)
        << (*ctx)->affinity_report();
    // and it still evaluates
    EXPECT_TRUE((*ctx)->eval(kPrompt, false).ok());
}

TEST(Session, LazyKvPagesGiveTheSameTokens) {
    // --kv-unified's KV cache: pages taken as positions are written, not touched at creation.
    Fixture eager, lazy;
    if (!load(&eager)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    ASSERT_TRUE(load(&lazy));
    ContextParams cp = lazy.ctx->params();
    cp.kv_lazy = true;
    auto c = Context::create(*lazy.model, cp);
    ASSERT_TRUE(c.ok()) << c.error();
    lazy.ctx = std::move(*c);
    Session a(*eager.model, *eager.tok, *eager.ctx), b(*lazy.model, *lazy.tok, *lazy.ctx);
    auto ra = a.generate(kPrompt, greedy(24), nullptr);
    auto rb = b.generate(kPrompt, greedy(24), nullptr);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->tokens, rb->tokens);
}
