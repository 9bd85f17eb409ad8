// llama-server's built-in agent tools in a temporary directory: every tool's answer and
// its failures, streaming and killing of shell commands, cwd resolution, the runtimes a
// request may not name, and (through fake `ssh` and `docker` scripts put first on PATH)
// the argv each isolate runtime runs.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "agent/builtin_tools.h"
#include "child_processes.h"
#include "tools_fixture.h"

using Clock = std::chrono::steady_clock;
using edgellm::test::process_dead;
using edgellm::test::seconds_since;
using edgellm::test::slurp;

namespace {

// ---- construction and GET /tools -------------------------------------------------------

TEST(BuiltinToolsCreate, ToolListAndUnknownNames) {
    auto all = BuiltinTools::create("all", "");
    ASSERT_TRUE(all) << all.error();
    const json list = (*all)->list();
    ASSERT_EQ(list.size(), 7u);
    const char* order[] = {"read_file",  "file_glob_search", "grep_search", "exec_shell_command",
                           "write_file", "edit_file",        "get_info"};
    for (size_t i = 0; i < 7; ++i) {
        const json& t = list[i];
        EXPECT_EQ(t["tool"], order[i]);
        EXPECT_EQ(t["type"], "server");
        EXPECT_TRUE(t["display_name"].is_string());
        EXPECT_TRUE(t["permissions"]["write"].is_boolean());
        EXPECT_EQ(t["uses_cwd"], true);
        EXPECT_EQ(t["definition"]["type"], "function");
        EXPECT_EQ(t["definition"]["function"]["name"], order[i]);
        EXPECT_FALSE(t["definition"]["function"]["description"].get<std::string>().empty());
        EXPECT_EQ(t["definition"]["function"]["parameters"]["type"], "object");
        EXPECT_TRUE((*all)->has(order[i]));
    }
    EXPECT_EQ(list[3]["permissions"]["write"], true);  // exec_shell_command
    EXPECT_EQ(list[0]["permissions"]["write"], false);
    EXPECT_EQ(list[5]["definition"]["function"]["parameters"]["required"],
              json::array({"path", "edits"}));

    auto some = BuiltinTools::create(" read_file , get_info", "");
    ASSERT_TRUE(some) << some.error();
    EXPECT_EQ((*some)->list().size(), 2u);
    EXPECT_TRUE((*some)->has("get_info"));
    EXPECT_FALSE((*some)->has("exec_shell_command"));

    auto none = BuiltinTools::create("", "");
    ASSERT_TRUE(none);
    EXPECT_TRUE((*none)->empty());

    auto bad = BuiltinTools::create("read_file,web_search,rm_rf", "");
    ASSERT_FALSE(bad);
    EXPECT_TRUE(contains(bad.error(), "\"web_search\"")) << bad.error();
    EXPECT_TRUE(contains(bad.error(), "\"rm_rf\"")) << bad.error();
    EXPECT_TRUE(contains(bad.error(), "read_file")) << bad.error();  // the known ones
}

TEST(BuiltinToolsCreate, RuntimeFlagIsChecked) {
    auto unknown = BuiltinTools::create("all", "fake:does-not-exist");
    ASSERT_FALSE(unknown);
    EXPECT_TRUE(contains(unknown.error(), "unknown tool runtime")) << unknown.error();
    auto ssh = BuiltinTools::create("all", "ssh:-oProxyCommand=touch /tmp/pwned");
    ASSERT_FALSE(ssh);
    EXPECT_TRUE(contains(ssh.error(), "invalid ssh target")) << ssh.error();
    auto cid = BuiltinTools::create("all", "podman-container:--privileged");
    ASSERT_FALSE(cid);
    EXPECT_TRUE(contains(cid.error(), "invalid container id")) << cid.error();
    auto image = BuiltinTools::create("all", "docker:--privileged");
    ASSERT_FALSE(image);
    EXPECT_TRUE(contains(image.error(), "invalid container image")) << image.error();
    EXPECT_TRUE(BuiltinTools::create("all", "ssh:user@host.example"));
    EXPECT_TRUE(BuiltinTools::create("all", "docker-container:abc123"));
}

// ---- request errors --------------------------------------------------------------------

TEST_F(ToolsTest, RequestsThatCannotRun) {
    ApiError e = refused("no_such_tool", json::object());
    EXPECT_EQ(e.status, 404);
    EXPECT_TRUE(contains(e.message, "unknown tool \"no_such_tool\"")) << e.message;

    e = refused("read_file", json::array({"x"}));
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, "params")) << e.message;

    e = refused("read_file", json::object());
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, "\"path\"")) << e.message;

    e = refused("exec_shell_command", {{"command", "true"}, {"timeout", "soon"}});
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(contains(e.message, "\"timeout\"")) << e.message;

    // a tool that does not stream, asked to
    BuiltinToolCall c{"read_file", {{"path", p("x")}}, "", "", "", nullptr};
    json r;
    int events = 0;
    auto err = tools_->call(c, &r, [&](const json&) { return ++events, true; });
    ASSERT_TRUE(err);
    EXPECT_EQ(err->status, 404);
    EXPECT_TRUE(contains(err->message, "does not support stream")) << err->message;
    EXPECT_EQ(events, 0);

    // a tool not enabled is unknown
    auto some = BuiltinTools::create("read_file", "");
    ASSERT_TRUE(some);
    BuiltinToolCall x{"exec_shell_command", {{"command", "true"}}, "", "", "", nullptr};
    err = (*some)->call(x, &r, nullptr);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->status, 404);
}

TEST_F(ToolsTest, NumbersAndBooleansAsStringsAreTaken) {
    spit(p("n.txt"), "a\nb\nc\n");
    EXPECT_EQ(
        text(
            "read_file",
            {{"path", p("n.txt")}, {"start_line", "2"}, {"end_line", 2.0}, {"append_loc", "true"}}),
        "2\u2192b\n");
}

// ---- runtimes a request may not name ---------------------------------------------------

TEST_F(ToolsTest, RuntimeHeaderRefusals) {
    const std::string marker = p("pwned");
    const json cmd = {{"command", "touch " + marker}};
    struct Case {
        const char* runtime;
        const char* wording;
    } cases[] = {
        {"fake:does-not-exist", "unknown tool runtime"},
        {"ssh:-oProxyCommand=touch /tmp/pwned", "invalid ssh target"},
        {"ssh:", "invalid ssh target"},
        {"ssh:host;rm", "invalid ssh target"},
        {"docker-container:--privileged", "invalid container id"},
        {"podman-container:--privileged", "invalid container id"},
        {"docker-container:", "invalid container id"},
        {"docker:busybox", "must name a running container"},
        {"podman:busybox", "must name a running container"},
    };
    for (const Case& k : cases) {
        ApiError e = refused("exec_shell_command", cmd, k.runtime);
        EXPECT_EQ(e.status, 400) << k.runtime;
        EXPECT_TRUE(contains(e.message, k.wording)) << k.runtime << ": " << e.message;
    }
    EXPECT_FALSE(fs::exists(marker));  // nothing ran, on the host or anywhere
}

// ---- read_file -------------------------------------------------------------------------

TEST_F(ToolsTest, ReadFile) {
    spit(p("f.txt"), "line1\nline2\nline3\n");
    EXPECT_EQ(text("read_file", {{"path", p("f.txt")}}), "line1\nline2\nline3\n");
    EXPECT_EQ(text("read_file", {{"path", p("f.txt")}, {"start_line", 2}, {"end_line", 3}}),
              "line2\nline3\n");
    EXPECT_EQ(text("read_file", {{"path", p("f.txt")}, {"start_line", 3}, {"append_loc", true}}),
              "3\u2192line3\n");
    EXPECT_EQ(text("read_file", {{"path", p("f.txt")}, {"start_line", 9}, {"end_line", 10}}), "");
    spit(p("crlf.txt"), "a\r\nb");  // CRs kept, a last newline added
    EXPECT_EQ(text("read_file", {{"path", p("crlf.txt")}}), "a\r\nb\n");

    EXPECT_TRUE(contains(failure("read_file", {{"path", p("missing.txt")}}), "cannot stat"));
    EXPECT_TRUE(contains(failure("read_file", {{"path", dir_}}), "directory"));

    // large: a range is needed, and the answer is cut at 16 KiB
    std::string big;
    for (int i = 0; i < 5000; ++i) big += "row " + std::to_string(i) + "\n";
    spit(p("big.txt"), big);
    EXPECT_TRUE(contains(failure("read_file", {{"path", p("big.txt")}}), "too large"));
    EXPECT_EQ(text("read_file", {{"path", p("big.txt")}, {"start_line", 11}, {"end_line", 12}}),
              "row 10\nrow 11\n");
    const std::string cut =
        text("read_file", {{"path", p("big.txt")}, {"start_line", 1}, {"end_line", 5000}});
    EXPECT_LE(cut.size(), tool_limits::read_text + 32);
    EXPECT_TRUE(contains(cut, "[output truncated]"));

    // binary: refused as text, sent whole as base64
    const std::string bin(
        "\x7f"
        "ELF\0\0\x01\x02\xff",
        9);
    spit(p("a.out"), bin);
    EXPECT_TRUE(contains(failure("read_file", {{"path", p("a.out")}}), "binary"));
    json b64 = run("read_file", {{"path", p("a.out")}}, "", "", "base64");
    EXPECT_EQ(b64["size_bytes"], 9);
    EXPECT_EQ(b64["base64"], "f0VMRgAAAQL/");

    // invalid UTF-8 comes back as U+FFFD, never as bytes that break the JSON
    spit(p("latin1.txt"), "caf\xe9\n");
    EXPECT_EQ(text("read_file", {{"path", p("latin1.txt")}}), "caf\xEF\xBF\xBD\n");
}

// ---- write_file ------------------------------------------------------------------------

TEST_F(ToolsTest, WriteFileIsAtomic) {
    json r = run("write_file", {{"path", p("deep/er/new.txt")}, {"content", "hello"}});
    EXPECT_EQ(r["result"], "file written successfully");
    EXPECT_EQ(r["bytes"], 5);
    EXPECT_EQ(r["path"], p("deep/er/new.txt"));
    EXPECT_EQ(slurp(p("deep/er/new.txt")), "hello");

    // replaced by a rename: a hard link to the old file keeps the old bytes, the mode stays,
    // and no temporary file is left behind
    spit(p("f.txt"), "old");
    ::chmod(p("f.txt").c_str(), 0640);
    fs::create_hard_link(p("f.txt"), p("f.link"));
    run("write_file", {{"path", p("f.txt")}, {"content", "new"}});
    EXPECT_EQ(slurp(p("f.txt")), "new");
    EXPECT_EQ(slurp(p("f.link")), "old");
    struct stat sb;
    ASSERT_EQ(::stat(p("f.txt").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0640u);
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename() != "deep";
    EXPECT_EQ(n, 2u);  // f.txt, f.link

    // a symlink is written through
    spit(p("target.txt"), "t");
    fs::create_symlink(p("target.txt"), p("sym.txt"));
    run("write_file", {{"path", p("sym.txt")}, {"content", "through"}});
    EXPECT_TRUE(fs::is_symlink(p("sym.txt")));
    EXPECT_EQ(slurp(p("target.txt")), "through");

    EXPECT_TRUE(contains(failure("write_file", {{"path", dir_}, {"content", "x"}}), "failed"));
    EXPECT_TRUE(contains(
        failure("write_file", {{"path", p("f.txt/under-a-file")}, {"content", "x"}}), "failed"));
    EXPECT_EQ(refused("write_file", {{"path", p("x")}}).status, 400);  // no content
}

// ---- edit_file -------------------------------------------------------------------------

TEST_F(ToolsTest, EditFile) {
    const std::string f = p("test.log");
    run("write_file", {{"path", f}, {"content", "line1\nline2\nline3\n"}});
    json r =
        run("edit_file",
            {{"path", f},
             {"edits", json::array({{{"old_text", "line2"}, {"new_text", "line2-edited"}},
                                    {{"old_text", "line3\n"}, {"new_text", "line3\nline4\n"}}})}});
    EXPECT_EQ(r["result"], "file edited successfully");
    EXPECT_EQ(r["edits_applied"], 2);
    EXPECT_EQ(text("read_file", {{"path", f}}), "line1\nline2-edited\nline3\nline4\n");
}

TEST_F(ToolsTest, EditFileFailuresChangeNothing) {
    const std::string f = p("test.log");
    spit(f, "dup\ndup\n");
    auto edit = [&](json edits) { return failure("edit_file", {{"path", f}, {"edits", edits}}); };
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", "dup"}, {"new_text", "x"}}})), "unique"));
    // overlapping occurrences count too: "aa" is twice in "aaa"
    spit(f, "aaa\n");
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", "aa"}, {"new_text", "b"}}})), "unique"));

    spit(f, "line1\nline2\n");
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", "line1\nline2"}, {"new_text", "a"}},
                                           {{"old_text", "line2"}, {"new_text", "b"}}})),
                         "overlap"));
    // all or nothing: the first edit is fine, the second is not there
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", "line1"}, {"new_text", "ONE"}},
                                           {{"old_text", "line9"}, {"new_text", "NINE"}}})),
                         "could not find"));
    EXPECT_EQ(slurp(f), "line1\nline2\n");
    EXPECT_TRUE(contains(edit(json::array()), "non-empty"));
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", ""}, {"new_text", "x"}}})), "empty"));
    EXPECT_TRUE(contains(edit(json::array({{{"old_text", "line1"}, {"new_text", "line1"}}})),
                         "no changes"));
    EXPECT_TRUE(contains(
        failure("edit_file", {{"path", p("nope")},
                              {"edits", json::array({{{"old_text", "a"}, {"new_text", "b"}}})}}),
        "cannot stat"));
    EXPECT_EQ(refused("edit_file", {{"path", f}}).status, 400);
    EXPECT_EQ(
        refused("edit_file", {{"path", f}, {"edits", json::array({{{"old_text", 1}}})}}).status,
        400);
    EXPECT_EQ(slurp(f), "line1\nline2\n");
}

TEST_F(ToolsTest, EditFileToleratesTrailingBlanksAndTypography) {
    const std::string f = p("code.py");
    spit(f, "keep   \r\nprint(\xe2\x80\x9chi\xe2\x80\x9d)   \nend\t\n");
    json r = run("edit_file", {{"path", f},
                               {"edits", json::array({{{"old_text", "print(\"hi\")\nend"},
                                                       {"new_text", "print(\"bye\")\nend"}}})}});
    EXPECT_EQ(r["result"], "file edited successfully") << r.dump();
    // untouched lines byte for byte, touched ones in their plain form
    EXPECT_EQ(slurp(f), "keep   \r\nprint(\"bye\")\nend\n");
}

// ---- grep_search -----------------------------------------------------------------------

TEST_F(ToolsTest, GrepSearch) {
    const std::string marker = "edgellm_marker_grep";
    spit(p("a/b/target.py"), "x = 1\n# " + marker + "\n");
    spit(p("other.py"), marker + "\n");
    spit(p("build/target.py"), marker + "\n");            // junk directory: never searched
    spit(p("a/bin.dat"), std::string(1, '\0') + marker);  // binary
    std::string t =
        text("grep_search", {{"path", dir_}, {"pattern", marker}, {"include", "target.py"}});
    EXPECT_TRUE(contains(t, "a/b/target.py:# " + marker)) << t;
    EXPECT_TRUE(contains(t, "Total matches: 1")) << t;

    t = text("grep_search", {{"path", dir_}, {"pattern", marker}});
    EXPECT_TRUE(contains(t, "Total matches: 2")) << t;
    EXPECT_FALSE(contains(t, "build/")) << t;
    EXPECT_TRUE(contains(t, "binary")) << t;  // the skipped file is counted

    t = text("grep_search", {{"path", dir_},
                             {"pattern", marker},
                             {"exclude", "other.*"},
                             {"return_line_numbers", true}});
    EXPECT_TRUE(contains(t, "a/b/target.py:2:# " + marker)) << t;
    EXPECT_TRUE(contains(t, "Total matches: 1")) << t;

    // a single file shows the path as given; context lines with '-'
    t = text("grep_search", {{"path", p("a/b/target.py")},
                             {"pattern", "MARKER"},
                             {"ignore_case", true},
                             {"context_lines", 1}});
    EXPECT_TRUE(contains(t, p("a/b/target.py") + "-1-x = 1\n")) << t;
    EXPECT_TRUE(contains(t, p("a/b/target.py") + ":2:# " + marker)) << t;
    EXPECT_TRUE(contains(t, "--\n")) << t;

    // \d and (?:...) as models write them; literal text with regex characters
    spit(p("v.txt"), "version 12\nname (x)+\n");
    t = text("grep_search", {{"path", p("v.txt")}, {"pattern", "(?:version) \\d+$"}});
    EXPECT_TRUE(contains(t, "version 12")) << t;
    t = text("grep_search", {{"path", p("v.txt")}, {"pattern", "(x)+"}, {"literal", true}});
    EXPECT_TRUE(contains(t, "Total matches: 1")) << t;
    EXPECT_TRUE(contains(t, "name (x)+")) << t;

    EXPECT_TRUE(contains(failure("grep_search", {{"path", dir_}, {"pattern", "(unclosed"}}),
                         "invalid regex"));
    EXPECT_TRUE(contains(failure("grep_search", {{"path", p("nope")}, {"pattern", "x"}}),
                         "does not exist"));
    EXPECT_EQ(refused("grep_search", {{"path", dir_}}).status, 400);
}

TEST_F(ToolsTest, GrepSearchMatchesCrlfLinesAtTheirEnd) {
    spit(p("dos.txt"), "alpha\r\nbeta\r\n");
    const std::string t = text("grep_search", {{"path", p("dos.txt")}, {"pattern", "ha$"}});
    EXPECT_TRUE(contains(t, p("dos.txt") + ":alpha\n")) << t;
    EXPECT_TRUE(contains(t, "Total matches: 1")) << t;
}

// In a git work tree the file listing is git's: ignored files are left out, untracked
// ones are in.
TEST_F(ToolsTest, GitWorkTreeHonoursGitignore) {
    if (std::system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no git";
    const std::string repo = p("repo");
    fs::create_directories(repo);
    ASSERT_EQ(std::system(("git -C " + repo + " init -q").c_str()), 0);
    spit(p("repo/.gitignore"), "ignored.txt\nout/\n");
    spit(p("repo/kept.txt"), "needle\n");
    spit(p("repo/ignored.txt"), "needle\n");
    spit(p("repo/out/gen.txt"), "needle\n");
    spit(p("repo/sub/deep.txt"), "needle\n");
    json r = run("file_glob_search", {{"path", repo}, {"include", "*.txt"}});
    std::vector<std::string> paths;
    for (const json& e : r["entries"]) paths.push_back(e["path"]);
    EXPECT_EQ(paths, (std::vector<std::string>{"kept.txt", "sub/deep.txt"})) << r.dump();
    const std::string t = text("grep_search", {{"path", repo}, {"pattern", "needle"}});
    EXPECT_TRUE(contains(t, "Total matches: 2")) << t;
    // a directory git ignores as a whole is still searched when asked for by name
    r = run("file_glob_search", {{"path", p("repo/out")}});
    ASSERT_EQ(r["entries"].size(), 1u) << r.dump();
    EXPECT_EQ(r["entries"][0]["path"], "gen.txt");
}

TEST_F(ToolsTest, GrepSearchStopsAtTheMatchLimit) {
    std::string many;
    for (int i = 0; i < 150; ++i) many += "hit " + std::to_string(i) + "\n";
    spit(p("many.txt"), many);
    const std::string t = text("grep_search", {{"path", dir_}, {"pattern", "^hit"}});
    EXPECT_TRUE(contains(t, "Total matches: 100")) << t;
    EXPECT_TRUE(contains(t, "stopped at 100 matches")) << t;
    EXPECT_FALSE(contains(t, "hit 100\n")) << t;
}

// ---- file_glob_search ------------------------------------------------------------------

TEST_F(ToolsTest, GlobSearchDirectories) {
    spit(p("project-alpha/README.md"), "alpha");
    spit(p("project-alpha/src/main.cpp"), "int main() {}");
    spit(p("project-beta/notes.txt"), "beta");
    json r = run("file_glob_search", {{"path", dir_}, {"type", "dir"}});
    const std::string t = r["plain_text_response"];
    EXPECT_TRUE(contains(t, "project-alpha/\n")) << t;
    EXPECT_TRUE(contains(t, "project-beta/\n")) << t;
    EXPECT_TRUE(contains(t, "project-alpha/src/\n")) << t;
    EXPECT_FALSE(contains(t, "README.md")) << t;
    EXPECT_EQ(r["base"], dir_);
    std::map<std::string, std::string> types;
    for (const json& e : r["entries"]) types[e["path"]] = e["type"];
    EXPECT_EQ(types["project-alpha"], "dir");
    EXPECT_EQ(types["project-alpha/src"], "dir");

    r = run("file_glob_search", {{"path", dir_}, {"type", "all"}, {"include", "*proj*"}});
    std::vector<std::string> paths;
    for (const json& e : r["entries"]) paths.push_back(e["path"]);
    EXPECT_EQ(paths, (std::vector<std::string>{"project-alpha", "project-beta"}));

    r = run("file_glob_search", {{"path", dir_}, {"include", "src/*.cpp"}});
    ASSERT_EQ(r["entries"].size(), 1u) << r.dump();
    EXPECT_EQ(r["entries"][0]["path"], "project-alpha/src/main.cpp");
    EXPECT_EQ(r["entries"][0]["type"], "file");
    r = run("file_glob_search", {{"path", dir_}, {"include", "*.{md,txt}"}, {"exclude", "notes*"}});
    ASSERT_EQ(r["entries"].size(), 1u) << r.dump();
    EXPECT_EQ(r["entries"][0]["path"], "project-alpha/README.md");
}

TEST_F(ToolsTest, GlobSearchDepthAndLimit) {
    fs::create_directories(p("a/b/c"));
    spit(p("top.txt"), "top");
    spit(p("a/mid.txt"), "mid");
    spit(p("a/b/deep.txt"), "deep");
    std::string t = text("file_glob_search", {{"path", dir_}, {"max_depth", 1}});
    EXPECT_TRUE(contains(t, "top.txt"));
    EXPECT_FALSE(contains(t, "mid.txt"));
    t = text("file_glob_search", {{"path", dir_}, {"max_depth", 2}});
    EXPECT_TRUE(contains(t, "mid.txt"));
    EXPECT_FALSE(contains(t, "deep.txt"));

    json r = run("file_glob_search", {{"path", dir_}, {"limit", 1}});
    EXPECT_EQ(r["entries"].size(), 1u);
    EXPECT_TRUE(contains(r["plain_text_response"], "Total matches: 3")) << r.dump();

    EXPECT_TRUE(contains(failure("file_glob_search", {{"path", dir_}, {"limit", 0}}), "limit"));
    EXPECT_TRUE(contains(failure("file_glob_search", {{"path", p("nope")}}), "not a directory"));
}

TEST_F(ToolsTest, GlobSearchListsJunkDirectoriesButNeverWalksThem) {
    spit(p("build/nested/x.o"), "o");
    spit(p("build/artifact.txt"), "built");
    spit(p("node_modules/pkg/index.js"), "js");
    spit(p("src/main.cpp"), "int main() {}");
    json r = run("file_glob_search", {{"path", dir_}, {"type", "dir"}, {"max_depth", 1}});
    std::vector<std::string> paths;
    for (const json& e : r["entries"]) paths.push_back(e["path"]);
    EXPECT_EQ(paths, (std::vector<std::string>{"build", "node_modules", "src"}));

    r = run("file_glob_search", {{"path", dir_}, {"type", "all"}});
    paths.clear();
    for (const json& e : r["entries"]) paths.push_back(e["path"]);
    EXPECT_EQ(paths, (std::vector<std::string>{"build", "node_modules", "src", "src/main.cpp"}));

    // a junk directory named as the search path itself is searched
    r = run("file_glob_search", {{"path", p("build")}});
    EXPECT_EQ(r["entries"].size(), 2u) << r.dump();
}

TEST_F(ToolsTest, GlobSearchRejectsAnInvalidType) {
    EXPECT_TRUE(
        contains(failure("file_glob_search", {{"path", dir_}, {"type", "bogus"}}), "invalid type"));
}

TEST(ToolGlob, Patterns) {
    EXPECT_TRUE(tool_glob_match("*.cpp", "a/b/c.cpp"));  // basename at any depth
    EXPECT_FALSE(tool_glob_match("*.cpp", "a/b/c.cpp.o"));
    EXPECT_TRUE(tool_glob_match("src/*.cpp", "src/a.cpp"));  // anywhere below, the top too
    EXPECT_TRUE(tool_glob_match("src/*.cpp", "x/src/a.cpp"));
    EXPECT_FALSE(tool_glob_match("src/*.cpp", "src/d/a.cpp"));
    EXPECT_TRUE(tool_glob_match("src/**/*.cpp", "src/a.cpp"));
    EXPECT_TRUE(tool_glob_match("src/**/*.cpp", "src/d/e/a.cpp"));
    EXPECT_TRUE(tool_glob_match("/src/*.cpp", "src/a.cpp"));  // anchored
    EXPECT_FALSE(tool_glob_match("/src/*.cpp", "x/src/a.cpp"));
    EXPECT_TRUE(tool_glob_match("**", "anything/at/all"));
    EXPECT_TRUE(tool_glob_match("file?.[ch]", "d/file1.h"));
    EXPECT_FALSE(tool_glob_match("file?.[!ch]", "d/file1.h"));
    EXPECT_TRUE(tool_glob_match("[a-c]*", "beta"));
    EXPECT_FALSE(tool_glob_match("[a-c]*", "delta"));
    EXPECT_TRUE(tool_glob_match("[]x]", "]"));  // a leading ']' is a member
    EXPECT_TRUE(tool_glob_match("[!]x]", "y"));
    EXPECT_TRUE(tool_glob_match("*.{cpp,h}", "x.h"));
    EXPECT_TRUE(tool_glob_match("{src,include}/**/*.{cpp,h}", "include/edgellm/a.h"));
    EXPECT_TRUE(tool_glob_match("\\*.txt", "*.txt"));
    EXPECT_FALSE(tool_glob_match("\\*.txt", "a.txt"));
    EXPECT_TRUE(tool_glob_match("[x", "[x"));  // an unclosed class is literal
    // no backtracking blow-up
    const std::string s(3000, 'a');
    EXPECT_FALSE(tool_glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*b", s));
}

// ---- exec_shell_command ----------------------------------------------------------------

TEST_F(ToolsTest, ExecShellCommand) {
    std::string t = text("exec_shell_command", {{"command", "echo hello; echo oops >&2; exit 3"}});
    EXPECT_TRUE(contains(t, "hello\n"));
    EXPECT_TRUE(contains(t, "oops\n"));  // stderr with stdout
    EXPECT_TRUE(contains(t, "\n[exit code: 3]")) << t;
    t = text("exec_shell_command", {{"command", "true"}});
    EXPECT_EQ(t, "\n[exit code: 0]");

    // the server ignores SIGPIPE; its commands must not
    t = text("exec_shell_command", {{"command", "yes | head -n 2"}});
    EXPECT_TRUE(contains(t, "y\ny\n\n[exit code: 0]")) << t;

    t = text("exec_shell_command",
             {{"command", "head -c 100000 /dev/zero | tr '\\0' x"}, {"max_output_size", 10}});
    EXPECT_EQ(t, "xxxxxxxxxx\n[output truncated]\n[exit code: 0]");

    // invalid UTF-8 in the output
    t = text("exec_shell_command", {{"command", "printf 'caf\\351'"}});
    EXPECT_TRUE(contains(t, "caf\xEF\xBF\xBD")) << t;
}

TEST_F(ToolsTest, ExecTimeoutKillsTheWholeGroupAndLeavesNoZombie) {
    const auto t0 = Clock::now();
    const std::string t =
        text("exec_shell_command", {{"command", "sleep 30 & echo $!; sleep 30"}, {"timeout", 1}});
    EXPECT_LT(seconds_since(t0), 4.0);
    EXPECT_TRUE(contains(t, "[exit code: 137] [exit due to timed out]")) << t;
    const pid_t bg = (pid_t)std::atoi(t.c_str());
    ASSERT_GT(bg, 1) << t;
    EXPECT_TRUE(process_dead(bg)) << "the background sleep survived";
    int st;
    EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);  // nothing of ours left to reap
    EXPECT_EQ(errno, ECHILD);
}

TEST_F(ToolsTest, ExecDetachedJobDoesNotHoldTheCall) {
    const auto t0 = Clock::now();
    const std::string t =
        text("exec_shell_command", {{"command", "sleep 20 >/dev/null 2>&1 & echo $!"}});
    EXPECT_LT(seconds_since(t0), 3.0);
    const pid_t bg = (pid_t)std::atoi(t.c_str());
    ASSERT_GT(bg, 1) << t;
    EXPECT_EQ(::kill(bg, 0), 0);  // it outlives the call, as it asked to
    ::kill(bg, SIGKILL);
}

TEST_F(ToolsTest, ExecCancel) {
    std::atomic<bool> cancel{false};
    std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        cancel = true;
    });
    BuiltinToolCall c{"exec_shell_command", {{"command", "sleep 30"}}, "", "", "", &cancel};
    json r;
    const auto t0 = Clock::now();
    EXPECT_FALSE(tools_->call(c, &r, nullptr));
    canceller.join();
    EXPECT_LT(seconds_since(t0), 3.0);
    EXPECT_TRUE(r.contains("error")) << r.dump();
    int st;
    EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
}

TEST_F(ToolsTest, ExecStreams) {
    BuiltinToolCall c{"exec_shell_command",
                      {{"command", "echo hello; sleep 0.2; echo world"}},
                      "",
                      "",
                      "",
                      nullptr};
    std::vector<json> events;
    json r;
    auto e = tools_->call(c, &r, [&](const json& ev) {
        events.push_back(ev);
        return true;
    });
    ASSERT_FALSE(e) << e->message;
    ASSERT_GE(events.size(), 3u);  // hello, world (a read apart), the tail, done
    EXPECT_EQ(events.back(), (json{{"done", true}}));
    EXPECT_EQ(r, events.back());
    std::string chunks;
    for (size_t i = 0; i + 1 < events.size(); ++i) chunks += events[i]["chunk"].get<std::string>();
    EXPECT_EQ(chunks, "hello\nworld\n\n[exit code: 0]");
    EXPECT_EQ(events[0]["chunk"], "hello\n");

    // a character cut between two reads goes out whole
    BuiltinToolCall u{"exec_shell_command",
                      {{"command", "printf '\\303'; sleep 0.2; printf '\\251!'"}},
                      "",
                      "",
                      "",
                      nullptr};
    events.clear();
    ASSERT_FALSE(tools_->call(u, &r, [&](const json& ev) {
        events.push_back(ev);
        return true;
    }));
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events[0]["chunk"], "\xC3\xA9!");
}

TEST_F(ToolsTest, ExecStreamClosedByTheClientKillsTheCommand) {
    BuiltinToolCall c{"exec_shell_command",
                      {{"command", "echo first; sleep 30; echo never"}},
                      "",
                      "",
                      "",
                      nullptr};
    int events = 0;
    json r;
    const auto t0 = Clock::now();
    ASSERT_FALSE(tools_->call(c, &r, [&](const json&) { return ++events, false; }));
    EXPECT_LT(seconds_since(t0), 3.0);
    EXPECT_EQ(events, 1);  // nothing after the refused event
    EXPECT_TRUE(r.contains("error"));
    int st;
    EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
}

// ---- cwd -------------------------------------------------------------------------------

TEST_F(ToolsTest, CwdHeader) {
    const std::string work = p("workdir");
    spit(p("workdir/rel.txt"), "relative-content");
    spit(p("workdir/marker.txt"), "marker");
    spit(p("other/abs.txt"), "absolute-content");

    EXPECT_EQ(text("read_file", {{"path", "rel.txt"}}, work), "relative-content\n");
    // a "cwd" in params (the model's) is ignored: the header decides
    EXPECT_EQ(text("read_file", {{"path", "marker.txt"}, {"cwd", "/definitely/not/real"}}, work),
              "marker\n");
    run("write_file", {{"path", "sub/out.txt"}, {"content", "written"}}, work);
    EXPECT_EQ(slurp(p("workdir/sub/out.txt")), "written");
    EXPECT_TRUE(
        contains(text("file_glob_search", {{"path", "."}, {"include", "*.txt"}}, work), "rel.txt"));
    // the header's directory confines the file tools as the server's does: a sibling is out
    EXPECT_TRUE(contains(failure("read_file", {{"path", p("other/abs.txt")}}, work), "outside"));
    EXPECT_TRUE(contains(failure("read_file", {{"path", "../other/abs.txt"}}, work), "outside"));

    // commands run there
    text("exec_shell_command", {{"command", "echo hello > cwd_marker.txt"}}, work);
    EXPECT_TRUE(fs::exists(p("workdir/cwd_marker.txt")));
    EXPECT_EQ(text("exec_shell_command", {{"command", "pwd"}}, work), work + "\n\n[exit code: 0]");

    json info = run("get_info", json::object(), work);
    EXPECT_EQ(info["cwd"], work);
    EXPECT_TRUE(contains(info["os"], "Linux")) << info.dump();

    EXPECT_TRUE(contains(failure("exec_shell_command", {{"command", "true"}}, p("no/such/dir")),
                         "working directory"));
    // no header: the server's own directory
    const std::string here = fs::current_path().string();
    EXPECT_EQ(run("get_info", json::object())["cwd"], here);
}

// ---- isolates, through stand-ins -------------------------------------------------------

// ssh as a stand-in that checks its options, then runs the one remote command word with sh,
// as the remote login shell would.
TEST_F(ToolsTest, SshRuntimeQuotesEverythingIntoOneWord) {
    fake_bin("ssh",
             "#!/bin/sh\n"
             "printf '%s\\n' \"$@\" > " +
                 p("ssh.argv") +
                 "\n"
                 "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n"
                 "shift\n"
                 "[ \"$1\" = user@box ] || { echo \"unexpected target $1\" >&2; exit 255; }\n"
                 "shift\n"
                 "[ $# -eq 1 ] || { echo \"$# command words\" >&2; exit 254; }\n"
                 "exec /bin/sh -c \"$1\"\n");
    const std::string rt = "ssh:user@box";
    BuiltinToolCall c{"exec_shell_command",
                      {{"command", "echo \"it's $((1+2))\""}},
                      p("remote"),
                      rt,
                      "",
                      nullptr};
    fs::create_directories(p("remote"));
    json r;
    ASSERT_FALSE(tools_->call(c, &r, nullptr));
    EXPECT_EQ(r["plain_text_response"], "it's 3\n\n[exit code: 0]") << r.dump();
    const std::string argv = slurp(p("ssh.argv"));
    EXPECT_TRUE(contains(argv, "BatchMode=yes\n")) << argv;
    EXPECT_TRUE(contains(argv, "StrictHostKeyChecking=yes\n")) << argv;
    EXPECT_TRUE(contains(argv, "--\nuser@box\n")) << argv;

    // the file tools, relative to the header cwd over there
    BuiltinToolCall w{"write_file", {{"path", "sub/f.txt"}, {"content", "a 'quoted' $line\n"}},
                      p("remote"),  rt,
                      "",           nullptr};
    ASSERT_FALSE(tools_->call(w, &r, nullptr));
    EXPECT_EQ(r["result"], "file written successfully") << r.dump();
    EXPECT_EQ(slurp(p("remote/sub/f.txt")), "a 'quoted' $line\n");
    BuiltinToolCall rd{"read_file", {{"path", "sub/f.txt"}}, p("remote"), rt, "", nullptr};
    ASSERT_FALSE(tools_->call(rd, &r, nullptr));
    EXPECT_EQ(r["plain_text_response"], "a 'quoted' $line\n") << r.dump();
    BuiltinToolCall ed{"edit_file",
                       {{"path", "sub/f.txt"},
                        {"edits", json::array({{{"old_text", "$line"}, {"new_text", "ok"}}})}},
                       p("remote"),
                       rt,
                       "",
                       nullptr};
    ASSERT_FALSE(tools_->call(ed, &r, nullptr));
    EXPECT_EQ(r["edits_applied"], 1) << r.dump();
    EXPECT_EQ(slurp(p("remote/sub/f.txt")), "a 'quoted' ok\n");
    spit(p("remote/build/junk.txt"), "j");
    BuiltinToolCall g{
        "file_glob_search", {{"path", "."}, {"type", "all"}}, p("remote"), rt, "", nullptr};
    ASSERT_FALSE(tools_->call(g, &r, nullptr));
    EXPECT_EQ(r["entries"],
              json::parse(R"([{"path":"build","type":"dir"},{"path":"sub","type":"dir"},
                                            {"path":"sub/f.txt","type":"file"}])"))
        << r.dump();
    BuiltinToolCall gr{"grep_search", {{"path", "."}, {"pattern", "quoted"}}, p("remote"), rt, "",
                       nullptr};
    ASSERT_FALSE(tools_->call(gr, &r, nullptr));
    EXPECT_TRUE(contains(r["plain_text_response"], "sub/f.txt:a 'quoted' ok")) << r.dump();
    BuiltinToolCall missing{"read_file", {{"path", "nope.txt"}}, p("remote"), rt, "", nullptr};
    ASSERT_FALSE(tools_->call(missing, &r, nullptr));
    EXPECT_TRUE(contains(r.value("error", ""), "cannot stat")) << r.dump();

    // an unreachable host is a tool failure that says why
    BuiltinToolCall other{"read_file", {{"path", "/etc/hostname"}}, "", "ssh:someone@else", "",
                          nullptr};
    ASSERT_FALSE(tools_->call(other, &r, nullptr));
    EXPECT_TRUE(contains(r.value("error", ""), "unexpected target")) << r.dump();
}

// docker as a stand-in: `run` writes a container id and lives until its stdin closes,
// `exec` runs the command here.
class ContainerTest : public ToolsTest {
  protected:
    void install() {
        log_ = p("docker.log");
        fake_bin("docker",
                 "#!/bin/sh\n"
                 "echo \"$*\" >> " +
                     log_ +
                     "\n"
                     "case \"$1\" in\n"
                     "exec) shift; [ \"$1\" = -i ] && shift\n"
                     "  [ \"$1\" = fakecid42 ] || [ \"$1\" = mybox ] || "
                     "{ echo \"Error: No such container: $1\" >&2; exit 1; }\n"
                     "  shift; exec \"$@\" ;;\n"
                     "run) shift\n"
                     "  while [ $# -gt 0 ]; do case \"$1\" in\n"
                     "    --cidfile) cid=$2; shift 2 ;; --rm|-i) shift ;; *) break ;; esac; done\n"
                     "  echo fakecid42 > \"$cid\"\n"
                     "  cat > /dev/null\n"
                     "  echo \"stopped $1\" >> " +
                     log_ +
                     "\n"
                     "  exit 0 ;;\n"
                     "esac\n"
                     "exit 2\n");
    }
    std::string log_;
};

TEST_F(ContainerTest, AttachRunsInsideTheNamedContainer) {
    install();
    BuiltinToolCall c{"exec_shell_command",
                      {{"command", "echo in-container"}},
                      "",
                      "docker-container:mybox",
                      "",
                      nullptr};
    json r;
    ASSERT_FALSE(tools_->call(c, &r, nullptr));
    EXPECT_EQ(r["plain_text_response"], "in-container\n\n[exit code: 0]") << r.dump();
    const std::string log = slurp(log_);
    EXPECT_TRUE(contains(log, "exec mybox timeout 10 sh -c echo in-container")) << log;

    BuiltinToolCall w{"write_file", {{"path", p("c.txt")}, {"content", "hello container\n"}},
                      "",           "docker-container:mybox",
                      "",           nullptr};
    ASSERT_FALSE(tools_->call(w, &r, nullptr));
    EXPECT_EQ(r["result"], "file written successfully") << r.dump();
    EXPECT_TRUE(contains(slurp(log_), "exec -i mybox sh -c")) << slurp(log_);
    BuiltinToolCall rd{"read_file", {{"path", p("c.txt")}}, "", "docker-container:mybox", "",
                       nullptr};
    ASSERT_FALSE(tools_->call(rd, &r, nullptr));
    EXPECT_EQ(r["plain_text_response"], "hello container\n") << r.dump();

    BuiltinToolCall gone{"read_file", {{"path", p("c.txt")}}, "", "docker-container:deadbeef", "",
                         nullptr};
    ASSERT_FALSE(tools_->call(gone, &r, nullptr));
    EXPECT_TRUE(contains(r.value("error", ""), "No such container")) << r.dump();
}

TEST_F(ContainerTest, SpawnedForTheServerAndStoppedWithIt) {
    install();
    {
        auto t = BuiltinTools::create("exec_shell_command,get_info", "docker:busybox");
        ASSERT_TRUE(t) << t.error();
        BuiltinToolCall c{"exec_shell_command", {{"command", "echo spawned"}}, "", "", "", nullptr};
        json r;
        ASSERT_FALSE((*t)->call(c, &r, nullptr));
        EXPECT_EQ(r["plain_text_response"], "spawned\n\n[exit code: 0]") << r.dump();
        const std::string log = slurp(log_);
        EXPECT_TRUE(contains(log, "run --rm -i --cidfile ")) << log;
        EXPECT_TRUE(contains(log, " busybox sh\n")) << log;
        EXPECT_TRUE(contains(log, "exec fakecid42 timeout 10 sh -c echo spawned")) << log;
        EXPECT_FALSE(contains(log, "stopped")) << log;
        // a request still cannot ask for one
        BuiltinToolCall s{
            "exec_shell_command", {{"command", "true"}}, "", "docker:alpine", "", nullptr};
        auto e = (*t)->call(s, &r, nullptr);
        ASSERT_TRUE(e);
        EXPECT_EQ(e->status, 400);
    }
    EXPECT_TRUE(contains(slurp(log_), "stopped busybox")) << slurp(log_);
    int st;
    EXPECT_EQ(::waitpid(-1, &st, WNOHANG), -1);
}

TEST_F(ContainerTest, SpawnFailureIsReported) {
    fake_bin("docker", "#!/bin/sh\necho 'Unable to find image nope:latest' >&2\nexit 125\n");
    auto t = BuiltinTools::create("all", "docker:nope");
    ASSERT_FALSE(t);
    EXPECT_TRUE(contains(t.error(), "Unable to find image")) << t.error();
}

}  // namespace
