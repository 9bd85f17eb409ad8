// Router mode's model list: the --models-preset INI, --models-dir, edgellm's model directory
// and llama.cpp's download cache, as `edgellm serve` without -m lists and starts them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "edgellm/server.h"
#include "test_paths.h"

using namespace edgellm::server;
namespace fs = std::filesystem;

namespace {

using edgellm::test::TempDir;

// Scans with LLAMA_CACHE pointing at `cache` (an empty directory: no llama.cpp downloads).
std::vector<RouterModel> scan(RouterConfig cfg, const fs::path& cache, std::vector<std::string>* warnings = nullptr) {
    ::setenv("LLAMA_CACHE", cache.c_str(), 1);
    std::vector<std::string> w;
    auto out = scan_router_models(cfg, warnings ? warnings : &w);
    ::unsetenv("LLAMA_CACHE");
    return out;
}

const RouterModel* by_id(const std::vector<RouterModel>& ms, const std::string& id) {
    for (const auto& m : ms)
        if (m.id == id) return &m;
    return nullptr;
}

}  // namespace

TEST(PresetIni, SectionsGlobalsCommentsAndQuotes) {
    auto r = parse_preset_ini(
        "; a comment\n"
        "ctx-size = 2048\n"
        "[*]\n"
        "threads = 2\n"
        "# another\n"
        "[coder]\n"
        "model = models/coder.gguf\n"
        "--temp = \"0.2\"\n"
        "\n"
        "[small]\n"
        "model=/abs/small.gguf\n"
        "[coder]\n"
        "jinja = true\n");
    ASSERT_TRUE(r) << r.error();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[0].name, "*");
    ASSERT_EQ((*r)[0].keys.size(), 2u);  // before any section, and [*]
    EXPECT_EQ((*r)[0].keys[0], (std::pair<std::string, std::string>{"ctx-size", "2048"}));
    EXPECT_EQ((*r)[1].name, "coder");
    ASSERT_EQ((*r)[1].keys.size(), 3u);  // a section named twice is one
    EXPECT_EQ((*r)[1].keys[1], (std::pair<std::string, std::string>{"temp", "0.2"}));  // dashes and quotes gone
    EXPECT_EQ((*r)[2].keys[0].second, "/abs/small.gguf");
}

TEST(PresetIni, RefusesWhatIsNotIni) {
    auto no_eq = parse_preset_ini("[a]\nmodel\n");
    ASSERT_FALSE(no_eq);
    EXPECT_NE(no_eq.error().find("line 2"), std::string::npos) << no_eq.error();
    EXPECT_FALSE(parse_preset_ini("[unclosed\nmodel = x\n"));
    EXPECT_FALSE(parse_preset_ini("[a]\n = x\n"));
}

TEST(RouterModels, ModelsDirFilesSubdirectoriesShardsAndProjectors) {
    TempDir d, cache;
    d.file("models/alpha-Q4_K_M.gguf");
    d.file("models/big-00001-of-00002.gguf");
    d.file("models/big-00002-of-00002.gguf");
    d.file("models/mmproj-alpha.gguf");
    d.file("models/notes.txt");
    d.file("models/vision/mmproj-f16.gguf");
    d.file("models/vision/model-q8_0.gguf");
    d.file("models/empty/readme.md");
    RouterConfig cfg;
    cfg.models_dir = (d.path / "models").string();
    auto ms = scan(cfg, cache.path);
    ASSERT_EQ(ms.size(), 3u);
    ASSERT_TRUE(by_id(ms, "alpha-Q4_K_M"));
    EXPECT_EQ(by_id(ms, "alpha-Q4_K_M")->source, "dir");
    ASSERT_TRUE(by_id(ms, "big"));  // a split model is one, its first shard
    EXPECT_EQ(fs::path(by_id(ms, "big")->path).filename(), "big-00001-of-00002.gguf");
    ASSERT_TRUE(by_id(ms, "vision"));  // a subdirectory: its model, not its projector
    EXPECT_EQ(fs::path(by_id(ms, "vision")->path).filename(), "model-q8_0.gguf");
}

TEST(RouterModels, PresetFlagsRelativePathsAndWhatCannotLoad) {
    TempDir d, cache;
    d.file("coder.gguf");
    d.file("models.ini",
           "[*]\nctx-size = 1024\n"
           "[coder]\nmodel = coder.gguf\nt = 2\njinja = true\nno-warmup = false\nload-on-startup = true\n"
           "[remote]\nhf-repo = someone/model-GGUF\n"
           "[nothing]\ntemp = 0.1\n");
    RouterConfig cfg;
    cfg.models_preset = (d.path / "models.ini").string();
    cfg.flag_kind = [](const std::string& f) {  // (what serve's parser says of them)
        if (f == "-t" || f == "--ctx-size" || f == "--temp") return 1;
        if (f == "--jinja" || f == "--no-warmup") return 0;
        return -1;
    };
    auto ms = scan(cfg, cache.path);
    ASSERT_EQ(ms.size(), 3u);
    const RouterModel* coder = by_id(ms, "coder");
    ASSERT_TRUE(coder);
    EXPECT_EQ(coder->path, (d.path / "coder.gguf").string());  // relative to the INI file
    EXPECT_TRUE(coder->load_on_startup);
    EXPECT_EQ(coder->args, (std::vector<std::string>{"--ctx-size", "1024", "-t", "2", "--jinja"}));
    const RouterModel* remote = by_id(ms, "remote");
    ASSERT_TRUE(remote);
    EXPECT_TRUE(remote->path.empty());
    EXPECT_NE(remote->why.find("never downloads"), std::string::npos) << remote->why;
    EXPECT_NE(by_id(ms, "nothing")->why.find("model = FILE"), std::string::npos);

    // a key serve does not know, or a value for a flag that takes none: listed, not started
    d.file("models.ini", "[a]\nmodel = coder.gguf\nflash-speed = 11\n[b]\nmodel = coder.gguf\njinja = maybe\n");
    ms = scan(cfg, cache.path);
    ASSERT_EQ(ms.size(), 2u);
    EXPECT_TRUE(by_id(ms, "a")->path.empty());
    EXPECT_NE(by_id(ms, "a")->why.find("`flash-speed` is not a serve flag"), std::string::npos) << by_id(ms, "a")->why;
    EXPECT_NE(by_id(ms, "b")->why.find("takes no value"), std::string::npos) << by_id(ms, "b")->why;
}

TEST(RouterModels, LlamaCppDownloadCacheAndDedup) {
    TempDir d, cache;
    // Hugging Face's layout, as llama.cpp's -hf leaves it
    const std::string commit(40, 'a');
    cache.file("models--org--tiny-GGUF/refs/main", commit);
    const fs::path q8 = cache.file("models--org--tiny-GGUF/snapshots/" + commit + "/tiny-Q8_0.gguf");
    cache.file("models--org--tiny-GGUF/snapshots/" + commit + "/tiny-Q4_K_M.gguf");
    cache.file("models--org--tiny-GGUF/snapshots/" + commit + "/mmproj-tiny-F16.gguf");
    cache.file("models--org--other/snapshots/" + std::string(40, 'b') + "/other-F32.gguf");  // no refs/main
    cache.file("not-a-repo/x-Q8_0.gguf");
    RouterConfig cfg;
    auto ms = scan(cfg, cache.path);
    ASSERT_EQ(ms.size(), 3u);
    ASSERT_TRUE(by_id(ms, "org/tiny-GGUF:Q8_0"));
    EXPECT_EQ(by_id(ms, "org/tiny-GGUF:Q8_0")->path, q8.string());
    EXPECT_TRUE(by_id(ms, "org/tiny-GGUF:Q4_K_M"));
    EXPECT_TRUE(by_id(ms, "org/other:F32"));

    // a preset naming a cached repository uses its file; dedup-cache-models hides the entry
    d.file("p.ini", "[mine]\nhf-repo = org/tiny-GGUF:Q8_0\ndedup-cache-models = 1\n");
    cfg.models_preset = (d.path / "p.ini").string();
    ms = scan(cfg, cache.path);
    ASSERT_TRUE(by_id(ms, "mine"));
    EXPECT_EQ(by_id(ms, "mine")->path, q8.string());
    EXPECT_TRUE(by_id(ms, "org/tiny-GGUF:Q8_0")->hidden);
    EXPECT_FALSE(by_id(ms, "org/tiny-GGUF:Q4_K_M")->hidden);
    // without a tag: Q4_K_M first
    d.file("p.ini", "[mine]\nhf-repo = org/tiny-GGUF\n");
    ms = scan(cfg, cache.path);
    EXPECT_EQ(fs::path(by_id(ms, "mine")->path).filename(), "tiny-Q4_K_M.gguf");
    EXPECT_FALSE(by_id(ms, "org/tiny-GGUF:Q8_0")->hidden);
}

TEST(RouterModels, FirstNameWinsAndGgufSuffixIsTheSameModel) {
    TempDir d, cache;
    const fs::path dir_file = d.file("dir/coder.gguf");
    const fs::path cached = d.file("cache/coder.gguf");
    RouterConfig cfg;
    cfg.models_dir = (d.path / "dir").string();
    cfg.cache_files = {cached.string()};
    auto ms = scan(cfg, cache.path);
    ASSERT_EQ(ms.size(), 1u);  // "coder" (the directory's) and "coder.gguf" (the cache's) are one name
    EXPECT_EQ(ms[0].path, dir_file.string());
    EXPECT_EQ(ms[0].source, "dir");
}

TEST(RouterModels, UnreadablePresetIsAWarning) {
    TempDir cache;
    RouterConfig cfg;
    cfg.models_preset = "/nonexistent/models.ini";
    std::vector<std::string> warnings;
    auto ms = scan(cfg, cache.path, &warnings);
    EXPECT_TRUE(ms.empty());
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("/nonexistent/models.ini"), std::string::npos);
}
