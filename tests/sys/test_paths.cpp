// Paths judged by where they lead: links and `..` resolved, then compared with directories
// component by component.
#include <gtest/gtest.h>

#include <filesystem>

#include "sys/paths.h"
#include "test_paths.h"

using namespace edgellm::sys;
namespace fs = std::filesystem;

TEST(Paths, WithinComparesWholeComponents) {
    EXPECT_TRUE(within("/a/b", "/a/b"));
    EXPECT_TRUE(within("/a/b/c.gguf", "/a/b"));
    EXPECT_FALSE(within("/a/bc/d.gguf", "/a/b")) << "a sibling sharing the prefix";
    EXPECT_FALSE(within("/a", "/a/b"));
    EXPECT_TRUE(within("/x", "/"));
    EXPECT_FALSE(within("", "/a")) << "unresolved is nowhere";
    EXPECT_FALSE(within("/a", "")) << "an unresolved directory holds nothing";
}

TEST(Paths, RealPathResolvesLinksAndSteps) {
    edgellm::test::TempDir in("edgellm-in"), out("edgellm-out");
    const std::string dir = real_path(in.path.string());
    const fs::path model = in.file("m.gguf"), elsewhere = out.file("x.gguf");
    fs::create_symlink(elsewhere, in.path / "link.gguf");
    fs::create_symlink(model, in.path / "inner.gguf");
    EXPECT_EQ(real_path_within(model.string(), {dir}), dir + "/m.gguf");
    EXPECT_EQ(real_path_within((in.path / "inner.gguf").string(), {dir}), dir + "/m.gguf");
    EXPECT_EQ(real_path_within((in.path / "link.gguf").string(), {dir}), "") << "a link out";
    EXPECT_EQ(real_path_within((in.path / ".." / out.path.filename() / "x.gguf").string(), {dir}), "");
    EXPECT_EQ(real_path_within("/etc/passwd", {dir}), "");
    EXPECT_EQ(real_path_within((in.path / "not-yet.gguf").string(), {dir}), dir + "/not-yet.gguf")
        << "a file that does not exist yet is judged by its directory";
    EXPECT_EQ(real_path(in.path.string() + "/"), dir);
}
