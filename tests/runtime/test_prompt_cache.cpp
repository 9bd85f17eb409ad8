// The prompt cache: states kept in RAM and on disk, found by their longest common prefix
// with a new prompt, restored exactly, bounded, and safe against damaged files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "edgellm/prompt_cache.h"
#include "edgellm/session.h"
#include "int8_batches.h"
#include "test_paths.h"
#include "tiny_model.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

using test::Fixture;
using test::load;

std::vector<int32_t> tokens(int n, int32_t base) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(base + (i * 37) % 90);
    return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The logits after evaluating `more` on what seq holds.
std::vector<float> next_logits(KvSequence& seq, const std::vector<int32_t>& more) {
    auto r = seq.eval(more, false);
    EXPECT_TRUE(r.ok()) << r.error();
    return r ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
}

using test::TempDir;

}  // namespace

// Two system prompts alternate on one sequence: each state is kept in RAM when the other
// replaces it, and restoring gives the same logits as evaluating from scratch.
TEST(PromptCache, KeepsSeveralPrefixesInRamAndRestoresThemExactly) {
    test::Int8Batches int8;  // (bit for bit across batchings: the int8 sets' property)
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    PromptCacheOptions o;
    o.key = kv_cache_key(*f.ctx);
    o.ram_bytes = 64 << 20;
    o.min_tokens = 16;
    PromptCache cache(o);
    KvSequence seq(*f.ctx, 0);
    const auto a = tokens(60, 100), b = tokens(50, 2000), q = tokens(5, 3900);
    ASSERT_TRUE(seq.eval(a, false).ok());
    EXPECT_FALSE(cache.find(concat(a, q), 0)) << "nothing stored yet";
    EXPECT_TRUE(cache.store(seq, true, false));
    EXPECT_FALSE(cache.store(seq, true, false)) << "the same state again is not stored twice";
    seq.clear();
    ASSERT_TRUE(seq.eval(b, false).ok());
    EXPECT_TRUE(cache.store(seq, true, false));
    EXPECT_EQ(cache.stats().ram_entries, 2u);

    auto hit = cache.find(concat(a, q), 10);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->common, 60);
    EXPECT_TRUE(hit->in_ram);
    EXPECT_FALSE(cache.find(concat(a, q), 60)) << "no entry shares more than 60";
    auto kept = cache.restore(hit->id, seq, concat(a, q));
    ASSERT_TRUE(kept.ok()) << kept.error();
    EXPECT_EQ(*kept, 60);
    EXPECT_EQ(seq.tokens(), a);
    const auto restored = next_logits(seq, q);

    Fixture g;
    ASSERT_TRUE(load(&g));
    KvSequence fresh(*g.ctx, 0);
    const auto direct = next_logits(fresh, concat(a, q));
    ASSERT_EQ(restored.size(), direct.size());
    EXPECT_EQ(restored, direct) << "a restored prefix continues bit for bit";

    // A state that extends an entry replaces it.
    EXPECT_TRUE(cache.store(seq, true, false));
    EXPECT_EQ(cache.stats().ram_entries, 2u);
    EXPECT_EQ(cache.find(concat(a, q), 0)->common, 65);
}

TEST(PromptCache, RamBudgetDropsTheLeastRecentlyUsed) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    KvSequence seq(*f.ctx, 0);
    ASSERT_TRUE(seq.eval(tokens(40, 100), false).ok());
    const size_t one = save_state(seq).bytes();
    PromptCacheOptions o;
    o.key = kv_cache_key(*f.ctx);
    o.ram_bytes = one * 2 + one / 2;  // two states of 40 tokens fit, not three
    o.min_tokens = 16;
    PromptCache cache(o);
    for (int32_t base : {100, 2000, 3000}) {
        seq.clear();
        ASSERT_TRUE(seq.eval(tokens(40, base), false).ok());
        EXPECT_TRUE(cache.store(seq, true, false));
        if (base == 2000) {  // the first is used again: the second is now the oldest
            auto h = cache.find(tokens(40, 100), 0);
            ASSERT_TRUE(h);
            KvSequence other(*f.ctx, 0);
            ASSERT_TRUE(cache.restore(h->id, seq, {}).ok());
        }
    }
    const auto st = cache.stats();
    EXPECT_EQ(st.ram_entries, 2u);
    EXPECT_LE(st.ram_bytes, o.ram_bytes);
    EXPECT_TRUE(cache.find(tokens(40, 100), 30));
    EXPECT_FALSE(cache.find(tokens(40, 2000), 30)) << "the least recently used went";
    EXPECT_TRUE(cache.find(tokens(40, 3000), 30));
    // Too short to be worth it.
    seq.clear();
    ASSERT_TRUE(seq.eval(tokens(8, 500), false).ok());
    EXPECT_FALSE(cache.store(seq, true, false));
}

// What one process wrote, the next finds at start-up; damaged, truncated and foreign
// files are skipped with a warning naming them, never restored.
TEST(PromptCache, SurvivesARestartAndSkipsBadFiles) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    TempDir dir;
    PromptCacheOptions o;
    o.key = kv_cache_key(*f.ctx, "template A");
    o.dir = dir.path.string();
    o.disk_bytes = 64 << 20;
    o.min_tokens = 16;
    const auto a = tokens(70, 100), b = tokens(30, 2000), q = tokens(4, 3900);
    std::vector<float> before;
    {
        PromptCache cache(o);
        EXPECT_TRUE(cache.open().empty());
        KvSequence seq(*f.ctx, 0);
        ASSERT_TRUE(seq.eval(b, false).ok());
        EXPECT_TRUE(cache.store(seq, false, true));
        seq.clear();
        ASSERT_TRUE(seq.eval(a, false).ok());
        EXPECT_TRUE(cache.store(seq, false, true));
        before = next_logits(seq, q);
        seq.clear();
    }  // destruction finishes the writes
    size_t n_files = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) n_files += e.path().extension() == ".kvc";
    EXPECT_EQ(n_files, 2u);
    // A stray temporary file, a foreign file and a file that is not ours at all.
    {
        PromptCacheOptions other = o;
        other.key = kv_cache_key(*f.ctx, "template B");
        PromptCache foreign(other);
        foreign.open();
        KvSequence seq(*f.ctx, 0);
        ASSERT_TRUE(seq.eval(tokens(20, 3500), false).ok());
        EXPECT_TRUE(foreign.store(seq, false, true));
        seq.clear();
    }
    { std::ofstream(dir.path / "0123456789abcdef.kvc.tmp") << "half"; }
    { std::ofstream(dir.path / "junk.kvc") << "not a cache"; }
    {
        PromptCache cache(o);
        const auto warnings = cache.open();
        std::string all;
        for (const auto& w : warnings) all += w + "\n";
        EXPECT_NE(all.find("junk.kvc"), std::string::npos) << all;
        EXPECT_NE(all.find("another configuration"), std::string::npos) << all;
        EXPECT_NE(all.find(".tmp"), std::string::npos) << all;
        EXPECT_FALSE(fs::exists(dir.path / "0123456789abcdef.kvc.tmp"));
        EXPECT_EQ(cache.stats().disk_entries, 3u) << "ours two and the foreign one (budgeted)";
        const auto newest = cache.newest(1);
        ASSERT_EQ(newest.size(), 1u);
        EXPECT_EQ(newest[0].n_tokens, 70) << "the newest first";
        Fixture g;
        ASSERT_TRUE(load(&g));
        KvSequence seq(*g.ctx, 0);
        auto r = cache.restore(newest[0].id, seq, {});
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(*r, 70);
        EXPECT_EQ(next_logits(seq, q), before) << "restored after a restart, bit for bit";
        EXPECT_FALSE(cache.find(tokens(20, 3500), 0)) << "a foreign entry is never restored";
    }
    // A flipped byte in the newest file: found, refused on restore, dropped, deleted.
    std::string victim;
    {
        PromptCache cache(o);
        cache.open();
        victim = (dir.path / cache.newest(1)[0].file).string();
    }
    {
        std::fstream io(victim, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(-64, std::ios::end);
        io.put('\x5a');
    }
    {
        PromptCache cache(o);
        cache.open();
        KvSequence seq(*f.ctx, 0);
        auto h = cache.find(concat(a, q), 0);
        ASSERT_TRUE(h);
        auto r = cache.restore(h->id, seq, concat(a, q));
        EXPECT_FALSE(r.ok());
        EXPECT_NE(r.error().find("digest"), std::string::npos) << r.error();
        EXPECT_EQ(seq.size(), 0) << "nothing half-restored";
        const auto w = cache.take_warnings();
        ASSERT_EQ(w.size(), 1u);
        EXPECT_NE(w[0].find(fs::path(victim).filename().string()), std::string::npos) << w[0];
        EXPECT_FALSE(cache.find(concat(a, q), 40)) << "dropped from the index";
        cache.flush();
        EXPECT_FALSE(fs::exists(victim));
    }
}

TEST(PromptCache, DiskBudgetDeletesTheOldestFiles) {
    Fixture f;
    if (!load(&f)) GTEST_SKIP() << "no golden models at " << test::golden_dir();
    TempDir dir;
    KvSequence seq(*f.ctx, 0);
    ASSERT_TRUE(seq.eval(tokens(40, 100), false).ok());
    PromptCacheOptions o;
    o.key = kv_cache_key(*f.ctx);
    o.dir = dir.path.string();
    o.disk_bytes = save_state(seq).bytes() * 2 + 4096;
    o.min_tokens = 16;
    {
        PromptCache cache(o);
        cache.open();
        for (int32_t base : {100, 2000, 3000}) {
            seq.clear();
            ASSERT_TRUE(seq.eval(tokens(40, base), false).ok());
            EXPECT_TRUE(cache.store(seq, false, true));
        }
        cache.flush();
        EXPECT_EQ(cache.stats().disk_entries, 2u);
        EXPECT_LE(cache.stats().disk_bytes, o.disk_bytes);
    }
    size_t bytes = 0, n = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) {
        bytes += fs::file_size(e.path());
        ++n;
    }
    EXPECT_EQ(n, 2u);
    EXPECT_LE(bytes, o.disk_bytes);
    PromptCache cache(o);
    cache.open();
    EXPECT_FALSE(cache.find(tokens(40, 100), 30)) << "the oldest file went";
    EXPECT_TRUE(cache.find(tokens(40, 3000), 30));
}

// A KV file is the file itself: a symbolic link is never read through (wherever it
// points), a write never goes through a link planted at its temporary or final name, and
// the cache's index skips links. (No model needed: the states are made by hand.)
TEST(KvFiles, NeverFollowASymbolicLink) {
    TempDir dir, outside("edgellm-outside");
    KvState s;
    s.tokens = tokens(40, 100);
    s.kv.assign(4096, 7);
    const fs::path real = outside.path / "0123456789abcdef.kvc";
    ASSERT_TRUE(write_kv_file(real.string(), "key", s).ok());
    ASSERT_TRUE(read_kv_file(real.string(), "key").ok());
    const fs::path link = dir.path / "0123456789abcdef.kvc";
    fs::create_symlink(real, link);
    const auto whole = read_kv_file(link.string(), "key");
    const auto head = read_kv_head(link.string());
    ASSERT_FALSE(whole.ok());
    ASSERT_FALSE(head.ok());
    EXPECT_NE(whole.error().find("symbolic link"), std::string::npos) << whole.error();
    EXPECT_NE(head.error().find("symbolic link"), std::string::npos) << head.error();

    // A link at the old temporary name, and one at the name itself: replaced, not written through.
    const fs::path precious = outside.path / "precious";
    { std::ofstream(precious) << "precious"; }
    fs::create_symlink(precious, dir.path / "a.kvc.tmp");
    fs::create_symlink(precious, dir.path / "b.kvc");
    for (const char* name : {"a.kvc", "b.kvc"}) {
        const fs::path p = dir.path / name;
        ASSERT_TRUE(write_kv_file(p.string(), "key", s).ok()) << name;
        EXPECT_FALSE(fs::is_symlink(p)) << name;
        EXPECT_TRUE(read_kv_file(p.string(), "key").ok()) << name;
    }
    std::string text;
    std::getline(std::ifstream(precious), text);
    EXPECT_EQ(text, "precious") << "a write went through a link";
    fs::remove(dir.path / "a.kvc.tmp");

    // The cache's index: the link is skipped with a warning, never restored, never deleted through.
    PromptCacheOptions o;
    o.key = "key";
    o.dir = dir.path.string();
    o.disk_bytes = 1 << 20;
    PromptCache cache(o);
    std::string all;
    for (const auto& w : cache.open()) all += w + "\n";
    EXPECT_NE(all.find("0123456789abcdef.kvc: it is a symbolic link"), std::string::npos) << all;
    EXPECT_EQ(cache.stats().disk_entries, 2u) << "a.kvc and b.kvc, not the link";
    EXPECT_TRUE(fs::exists(real));
}
