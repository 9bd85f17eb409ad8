// A sequence of a hybrid model (tiny-lfm2: short convolutions with a recurrent state, and
// attention) as the runtime holds it: a roll-back keeps all or nothing, a checkpoint goes
// back to its own tokens only, a new prompt reuses what is held only when it goes on from
// all of it (and then computes what a fresh session does), speculation drafts nothing and
// a context shift never happens, the prompt cache's files carry the recurrent state, and a
// file of the previous format is refused by its version.
#include <gtest/gtest.h>

#include <fstream>

#include "edgellm/prompt_cache.h"
#include "edgellm/session.h"
#include "edgellm/speculative.h"
#include "edgellm/synth.h"
#include "synth_file.h"
#include "test_paths.h"
#include "greedy.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

struct Hybrid {
    test::TempDir dir{"edgellm-hybrid"};
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;

    Hybrid() {
        auto m = Model::load(test::synth_file(dir, "tiny-lfm2", FileType::Q8_0).string());
        EXPECT_TRUE(m.ok()) << m.error();
        model = std::move(*m);
        auto t = Tokenizer::load(model->file());
        EXPECT_TRUE(t.ok()) << t.error();
        tok = std::move(*t);
    }
    std::unique_ptr<Context> context(int64_t n_ctx = 256) const {
        ContextParams cp;
        cp.n_ctx = n_ctx;
        cp.n_threads = 2;
        cp.n_outputs = 32;
        auto c = Context::create(*model, cp);
        EXPECT_TRUE(c.ok()) << c.error();
        return std::move(*c);
    }
};

using test::some_tokens;

using test::greedy;

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST(HybridSequence, ARollBackKeepsAllOrNothing) {
    Hybrid h;
    auto ctx = h.context();
    KvSequence seq(*ctx, 0);
    EXPECT_FALSE(seq.can_rollback());
    const std::vector<int32_t> a = some_tokens(10);
    ASSERT_TRUE(seq.eval(a, false).ok());
    EXPECT_EQ(seq.rollback(10), 10);
    EXPECT_EQ(seq.rollback(12), 10);
    // a prompt going on from all of it keeps it; one that shares less keeps nothing
    const std::vector<int32_t> longer = join(a, some_tokens(3, 1));
    std::vector<int32_t> other = a;
    other[6] += 1;
    EXPECT_EQ(seq.reusable_prefix(longer, 100), 10);
    EXPECT_EQ(seq.reusable_prefix(other, 100), 0);
    EXPECT_EQ(seq.reusable_prefix(longer, 9), 0);  // (at most 9: 10 cannot be kept)
    EXPECT_EQ(seq.keep_prefix(longer, 100), 10);
    EXPECT_EQ(seq.size(), 10);
    EXPECT_EQ(seq.keep_prefix(other, 100), 0);
    EXPECT_EQ(seq.size(), 0);
    EXPECT_EQ(ctx->n_past(), 0);
    ASSERT_TRUE(seq.eval(a, false).ok());
    EXPECT_EQ(seq.rollback(4), 0);
    EXPECT_TRUE(seq.tokens().empty());
    EXPECT_EQ(ctx->n_past(), 0);
    // no shift either
    ASSERT_TRUE(seq.eval(a, false).ok());
    EXPECT_EQ(seq.shift(2, 4), 0);
    EXPECT_EQ(seq.tokens(), a);
}

TEST(HybridSequence, ACheckpointTakesItBackToItsOwnTokens) {
    Hybrid h;
    auto ctx = h.context();
    KvSequence seq(*ctx, 0);
    const std::vector<int32_t> a = some_tokens(8), b = some_tokens(5, 2);
    ASSERT_TRUE(seq.eval(a, false).ok());
    KvSequence::Checkpoint cp;
    seq.save_checkpoint(&cp);
    EXPECT_EQ(cp.n, 8);
    auto first = seq.eval(b, true);
    ASSERT_TRUE(first.ok());
    const std::vector<float> want(first->begin(), first->end());
    auto back = seq.rollback_to(cp);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(*back, 8);
    EXPECT_EQ(seq.tokens(), a);
    auto again = seq.eval(b, true);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(std::vector<float>(again->begin(), again->end()), want);
    // once the sequence holds other tokens, the checkpoint is not theirs: refused, nothing
    // changed
    seq.clear();
    const std::vector<int32_t> c = some_tokens(10, 5);
    ASSERT_TRUE(seq.eval(c, false).ok());
    auto wrong = seq.rollback_to(cp);
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error().find("no longer starts with"), std::string::npos) << wrong.error();
    EXPECT_EQ(seq.tokens(), c);
    EXPECT_EQ(ctx->n_past(), 10);
    KvSequence::Checkpoint never;
    EXPECT_FALSE(seq.rollback_to(never).ok());
}

// A second turn that goes on from the first reuses all of it; a prompt that departs from it
// starts again, and answers as a fresh session does.
TEST(HybridSession, ReusesOnlyAPrefixItGoesOnFrom) {
    Hybrid h;
    auto ctx = h.context();
    Session s(*h.model, *h.tok, *ctx);
    const std::vector<int32_t> p1 = some_tokens(12);
    auto r1 = s.generate(p1, greedy(4), nullptr);
    ASSERT_TRUE(r1.ok()) << r1.error();
    const std::vector<int32_t> p2 = join(join(p1, r1->tokens), some_tokens(5, 3));
    auto r2 = s.generate(p2, greedy(4), nullptr);
    ASSERT_TRUE(r2.ok()) << r2.error();
    EXPECT_EQ(r2->n_cached, (int64_t)(p1.size() + r1->tokens.size() - 1));
    std::vector<int32_t> p3 = p2;
    p3[3] += 1;
    auto r3 = s.generate(p3, greedy(6), nullptr);
    ASSERT_TRUE(r3.ok()) << r3.error();
    EXPECT_EQ(r3->n_cached, 0);
    auto fresh_ctx = h.context();
    Session fresh(*h.model, *h.tok, *fresh_ctx);
    auto want = fresh.generate(p3, greedy(6), nullptr);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(r3->tokens, want->tokens);
    // the second turn's tokens too, as a fresh session computes them
    auto fresh2_ctx = h.context();
    Session fresh2(*h.model, *h.tok, *fresh2_ctx);
    auto want2 = fresh2.generate(p2, greedy(4), nullptr);
    ASSERT_TRUE(want2.ok());
    EXPECT_EQ(r2->tokens, want2->tokens);
}

// The drafts a lookup would propose cannot be dropped from a recurrent state: none are
// made, and the reply is the plain one.
TEST(HybridSession, SpeculationDraftsNothing) {
    Hybrid h;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 6; ++i) {
        const std::vector<int32_t> motif = {11, 22, 33, 44, 55};
        prompt.insert(prompt.end(), motif.begin(), motif.end());
    }
    auto plain_ctx = h.context();
    Session plain(*h.model, *h.tok, *plain_ctx);
    auto want = plain.generate(prompt, greedy(12), nullptr);
    ASSERT_TRUE(want.ok());
    auto ctx = h.context();
    Session s(*h.model, *h.tok, *ctx);
    NgramDrafter lookup(1, 3);
    GenerateParams p = greedy(12);
    p.spec.drafter = &lookup;
    auto got = s.generate(prompt, p, nullptr);
    ASSERT_TRUE(got.ok()) << got.error();
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->n_drafted, 0);
}

TEST(HybridSession, AFullContextEndsTheReplyInsteadOfShifting) {
    Hybrid h;
    auto ctx = h.context(48);
    Session s(*h.model, *h.tok, *ctx);
    GenerateParams p = greedy(100);
    p.context_shift = true;
    auto r = s.generate(some_tokens(20), p, nullptr);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->stop, StopReason::ContextFull);
    EXPECT_EQ(r->n_shifts, 0);
    EXPECT_EQ(r->n_generated, 48 - 20 + 1);
}

// A prompt cache file holds the recurrent state: restored into a fresh context, the session
// goes on as the original did. A file of the format before it (version 1) is refused by its
// version.
TEST(HybridSession, ACacheFileCarriesTheRecurrentState) {
    Hybrid h;
    const std::string path = (h.dir.path / "slot.kvc").string();
    auto ctx = h.context();
    Session s(*h.model, *h.tok, *ctx);
    const std::vector<int32_t> prompt = some_tokens(14);
    auto first = s.generate(prompt, greedy(5), nullptr);
    ASSERT_TRUE(first.ok());
    const std::string key = kv_cache_key(*ctx, "");
    ASSERT_TRUE(write_kv_file(path, key, save_state(s.cache())).ok());
    const std::vector<int32_t> longer = join(join(prompt, first->tokens), some_tokens(4, 7));
    auto cont = s.generate(longer, greedy(6), nullptr);
    ASSERT_TRUE(cont.ok());

    auto ctx2 = h.context();
    Session r(*h.model, *h.tok, *ctx2);
    auto state = read_kv_file(path, key);
    ASSERT_TRUE(state.ok()) << state.error();
    auto n = restore_state(r.cache(), *state);
    ASSERT_TRUE(n.ok()) << n.error();
    EXPECT_EQ(*n, (int64_t)(prompt.size() + first->tokens.size() - 1));
    auto again = r.generate(longer, greedy(6), nullptr);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->n_cached, *n);
    EXPECT_EQ(again->tokens, cont->tokens);

    {  // the version field (after the 8-byte magic) of the previous format
        std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(8);
        const uint32_t v1 = 1;
        io.write((const char*)&v1, 4);
    }
    auto old = read_kv_file(path, key);
    ASSERT_FALSE(old.ok());
    EXPECT_NE(old.error().find("format version 1"), std::string::npos) << old.error();
}

// The prompt cache offers a hybrid's entry only to a prompt that goes on from all of it: a
// prompt sharing part of it (or no more than it) could not keep it.
TEST(HybridSession, ThePromptCacheOffersOnlyEntriesAPromptGoesOnFrom) {
    Hybrid h;
    auto ctx = h.context();
    KvSequence seq(*ctx, 0);
    const std::vector<int32_t> a = some_tokens(40);
    ASSERT_TRUE(seq.eval(a, false).ok());
    PromptCacheOptions o;
    o.key = kv_cache_key(*ctx, "");
    o.ram_bytes = (size_t)64 << 20;
    o.whole_entries = true;
    PromptCache cache(o);
    ASSERT_TRUE(cache.store(seq, true, false));
    const std::vector<int32_t> longer = join(a, some_tokens(6, 1));
    std::vector<int32_t> part(a.begin(), a.begin() + 30);
    part = join(part, some_tokens(10, 2));
    EXPECT_FALSE(cache.find(part, 8).has_value());
    EXPECT_FALSE(cache.find(a, 8).has_value());
    auto hit = cache.find(longer, 8);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->common, 40);
    seq.clear();
    auto n = cache.restore(hit->id, seq, std::span(longer).first(longer.size() - 1));
    ASSERT_TRUE(n.ok()) << n.error();
    EXPECT_EQ(*n, 40);
    EXPECT_EQ(seq.tokens(), a);
    // (a dense model's cache would offer the shared part: without whole_entries it does)
    o.whole_entries = false;
    PromptCache dense_rules(o);
    ASSERT_TRUE(dense_rules.store(seq, true, false));
    EXPECT_TRUE(dense_rules.find(part, 8).has_value());
}
