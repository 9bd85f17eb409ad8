// The repack cache directory stays bounded: temporary files of killed writers go, and the
// least recently used cache files go once the directory is past its bound.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/repack_cache.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace edgellm;

namespace {

using test::TempDir;

void make_file(const fs::path& p, size_t bytes, std::chrono::minutes age) {
    std::ofstream(p, std::ios::binary) << std::string(bytes, 'x');
    fs::last_write_time(p, fs::file_time_type::clock::now() - age);
}

std::vector<std::string> names(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST(RepackCacheDir, StaleTemporaryFilesAndLeastRecentlyUsedGo) {
    TempDir d;
    using std::chrono::minutes;
    make_file(d.path / "a-1.x16", 3000, minutes(180));  // oldest, but the one in use
    make_file(d.path / "b-2.x16", 3000, minutes(120));
    make_file(d.path / "c-3.x16", 3000, minutes(60));
    make_file(d.path / "d-4.x16.tmp.AbCdEf", 3000, minutes(120));  // a killed writer's
    make_file(d.path / "e-5.x16.tmp.XyZ123", 3000, minutes(1));    // a live writer's
    make_file(d.path / "notes.txt", 10, minutes(600));              // not ours
    const auto removed = prune_repack_cache_dir(d.path.string(), (d.path / "a-1.x16").string(), 5000);
    EXPECT_EQ(removed.size(), 2u);
    EXPECT_EQ(names(d.path), (std::vector<std::string>{"a-1.x16", "c-3.x16", "e-5.x16.tmp.XyZ123",
                                                       "notes.txt"}));
    // Under the bound nothing more goes.
    EXPECT_TRUE(prune_repack_cache_dir(d.path.string(), "", 1 << 20).empty());
}

TEST(RepackCacheDir, AWriteKeepsItsOwnFileAndPrunes) {
    TempDir d;
    using std::chrono::minutes;
    make_file(d.path / "old-model-0123456789abcdef.x16.tmp.QwErTy", 4096, minutes(45));
    std::vector<uint8_t> data(8192, 7);
    RepackKey key;
    key.fingerprint = "0123456789abcdef";
    key.model_size = 123456;
    std::vector<RepackEntry> entries = {{TensorType::F32, 1024, 2, 0, 8192}};
    const std::string path = (d.path / "m-fedcba9876543210.x16").string();
    ASSERT_EQ(write_repack_cache(path, key, entries, data.data()), "");
    EXPECT_EQ(names(d.path), (std::vector<std::string>{"m-fedcba9876543210.x16"}));
    // Mapped by a load, an old file becomes the most recently used: past the bound, a
    // newer file that no load mapped goes first.
    fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(3));
    make_file(d.path / "n-0000000000000000.x16", 8192, minutes(60));
    auto m = open_repack_cache(path, key, entries);
    ASSERT_TRUE(m) << m.error();
    ::munmap(m->map, m->mapped);
    const auto removed =
        prune_repack_cache_dir(d.path.string(), "", fs::file_size(path) + 4096);
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(fs::path(removed[0]).filename(), "n-0000000000000000.x16");
    EXPECT_TRUE(fs::exists(path));
}
