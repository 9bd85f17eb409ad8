// The built-in tools' test fixture: a scratch directory that is the process's working
// directory (the host's file tools act only inside it), the tools ("all"), and helpers for
// their answers. Shared by test_builtin_tools and test_tool_confinement.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "agent/builtin_tools.h"

using namespace edgellm::agent;
namespace fs = std::filesystem;

namespace {

void spit(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream f(p, std::ios::binary);
    f << s;
}

bool contains(const std::string& hay, const std::string& needle) {
    return hay.find(needle) != std::string::npos;
}

class ToolsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/edgellm-tools-test-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        // The host's file tools act only inside the server's working directory: the test's
        // files are there.
        old_cwd_ = fs::current_path();
        fs::current_path(dir_);
        auto t = BuiltinTools::create("all", "");
        ASSERT_TRUE(t) << t.error();
        tools_ = std::move(*t);
    }
    void TearDown() override {
        if (!old_path_.empty()) ::setenv("PATH", old_path_.c_str(), 1);
        std::error_code ec;
        fs::current_path(old_cwd_, ec);
        fs::remove_all(dir_, ec);
    }

    // A call that must run (no ApiError); the tool's answer.
    json run(const std::string& name, json params, const std::string& cwd = "",
             const std::string& runtime = "", const std::string& resp_type = "") {
        BuiltinToolCall c{name, std::move(params), cwd, runtime, resp_type, nullptr};
        json r;
        auto e = tools_->call(c, &r, nullptr);
        EXPECT_FALSE(e) << name << ": " << (e ? e->message : "");
        // every answer must serialize (valid UTF-8 throughout)
        EXPECT_NO_THROW((void)r.dump());
        return r;
    }
    std::string text(const std::string& name, json params, const std::string& cwd = "") {
        json r = run(name, std::move(params), cwd);
        EXPECT_FALSE(r.contains("error")) << r.dump();
        return r.value("plain_text_response", std::string());
    }
    // A tool-level failure: 200 with {"error"}.
    std::string failure(const std::string& name, json params, const std::string& cwd = "") {
        json r = run(name, std::move(params), cwd);
        EXPECT_TRUE(r.contains("error")) << r.dump();
        return r.value("error", std::string());
    }
    // A request that cannot run.
    ApiError refused(const std::string& name, json params, const std::string& runtime = "") {
        BuiltinToolCall c{name, std::move(params), "", runtime, "", nullptr};
        json r;
        auto e = tools_->call(c, &r, nullptr);
        EXPECT_TRUE(e.has_value()) << r.dump();
        return e.value_or(ApiError{});
    }
    std::string p(const std::string& rel) const { return (fs::path(dir_) / rel).string(); }

    // Scripts first on PATH, to stand in for ssh and docker.
    void fake_bin(const std::string& name, const std::string& script) {
        const fs::path bin = fs::path(dir_) / "fakebin";
        fs::create_directories(bin);
        spit(bin / name, script);
        fs::permissions(bin / name, fs::perms::owner_all);
        if (old_path_.empty()) {
            old_path_ = std::getenv("PATH");
            ::setenv("PATH", (bin.string() + ":" + old_path_).c_str(), 1);
        }
    }

    std::string dir_;
    fs::path old_cwd_;
    std::unique_ptr<BuiltinTools> tools_;
    std::string old_path_;
};

}  // namespace
