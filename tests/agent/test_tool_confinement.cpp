// The built-in tools fail closed: the host's file tools stay inside their working directory
// ("..", absolute paths, '~', symbolic links that lead out, for each tool), x-tool-cwd
// cannot widen it, an isolate refuses a path that climbs out; exec_shell_command runs
// without the server's secrets, under a process cap, at most two at once; the tool service
// refuses tools that write when told the server is open to other machines.
#include <gtest/gtest.h>

#include <grp.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "agent/shell_limits.h"
#include "agent/tool_service.h"
#include "child_processes.h"
#include "tools_fixture.h"

using edgellm::test::slurp;

namespace {

// A second scratch directory beside the tools' working directory, with a secret in it.
class Confinement : public ToolsTest {
  protected:
    void SetUp() override {
        ToolsTest::SetUp();
        char tmpl[] = "/tmp/edgellm-outside-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        out_ = tmpl;
        spit(out_ + "/secret.txt", "SECRET\n");
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(out_, ec);
        ToolsTest::TearDown();
    }
    // The ways a request can name the secret: absolute, climbing out, through '~'.
    std::vector<std::string> ways_out() const {
        const std::string name = fs::path(out_).filename().string();
        std::vector<std::string> ways = {out_ + "/secret.txt", "../" + name + "/secret.txt",
                                         "sub/../../" + name + "/secret.txt"};
        if (const char* home = std::getenv("HOME"); home && *home && std::string(home) != "/")
            ways.push_back("~/x.txt");  // ('~' is $HOME, not below the scratch directory)
        return ways;
    }
    std::string out_;
};

const json kEdit = json::array({{{"old_text", "SECRET"}, {"new_text", "changed"}}});

TEST_F(Confinement, EveryFileToolRefusesAPathOutside) {
    for (const std::string& path : ways_out()) {
        SCOPED_TRACE(path);
        EXPECT_TRUE(
            contains(failure("read_file", {{"path", path}}), "outside the working directory"));
        EXPECT_TRUE(contains(failure("write_file", {{"path", path}, {"content", "x"}}), "outside"));
        EXPECT_TRUE(contains(failure("edit_file", {{"path", path}, {"edits", kEdit}}), "outside"));
        EXPECT_TRUE(
            contains(failure("grep_search", {{"path", path}, {"pattern", "S"}}), "outside"));
    }
    EXPECT_TRUE(contains(failure("file_glob_search", {{"path", out_}}), "outside"));
    EXPECT_TRUE(contains(failure("file_glob_search", {{"path", ".."}}), "outside"));
    EXPECT_TRUE(
        contains(failure("grep_search", {{"path", "/"}, {"pattern", "SECRET"}}), "outside"));
    EXPECT_EQ(slurp(out_ + "/secret.txt"), "SECRET\n");  // neither written nor edited

    // inside, absolute or with ".." that stays in, is fine
    spit(p("in/a.txt"), "inside\n");
    EXPECT_EQ(text("read_file", {{"path", p("in/a.txt")}}), "inside\n");
    EXPECT_EQ(text("read_file", {{"path", "in/../in/a.txt"}}), "inside\n");
}

TEST_F(Confinement, SymbolicLinksThatLeadOutAreNeitherReadNorWrittenNorListed) {
    fs::create_directory_symlink(out_, p("dir_link"));
    fs::create_symlink(out_ + "/secret.txt", p("file_link"));
    fs::create_symlink(out_ + "/new.txt", p("dangling_link"));
    spit(p("real/ok.txt"), "OK SECRET-LOOKALIKE\n");
    fs::create_symlink(p("real/ok.txt"), p("inner_link"));  // leads inside: followed

    for (const std::string path : {"file_link", "dir_link/secret.txt"}) {
        SCOPED_TRACE(path);
        EXPECT_TRUE(contains(failure("read_file", {{"path", path}}), "through a symbolic link"));
        EXPECT_TRUE(
            contains(failure("write_file", {{"path", path}, {"content", "x"}}), "symbolic"));
        EXPECT_TRUE(contains(failure("edit_file", {{"path", path}, {"edits", kEdit}}), "symbolic"));
        EXPECT_TRUE(
            contains(failure("grep_search", {{"path", path}, {"pattern", "S"}}), "symbolic"));
    }
    EXPECT_TRUE(contains(failure("write_file", {{"path", "dir_link/new.txt"}, {"content", "x"}}),
                         "symbolic"));
    EXPECT_TRUE(contains(failure("file_glob_search", {{"path", "dir_link"}}), "symbolic"));
    // a dangling link to a file outside is replaced, never written through
    run("write_file", {{"path", "dangling_link"}, {"content", "mine"}});
    EXPECT_FALSE(fs::exists(out_ + "/new.txt"));
    EXPECT_EQ(slurp(out_ + "/secret.txt"), "SECRET\n");

    // a walk neither reads nor lists what a link leads out to
    const std::string grep = text("grep_search", {{"path", "."}, {"pattern", "^SECRET$"}});
    EXPECT_TRUE(contains(grep, "Total matches: 0")) << grep;
    json glob = run("file_glob_search", {{"path", "."}, {"type", "all"}});
    std::vector<std::string> listed;
    for (const json& e : glob["entries"]) listed.push_back(e["path"]);
    EXPECT_EQ(listed,
              (std::vector<std::string>{"dangling_link", "inner_link", "real", "real/ok.txt"}))
        << glob.dump();

    // a link that stays inside works as before
    EXPECT_EQ(text("read_file", {{"path", "inner_link"}}), "OK SECRET-LOOKALIKE\n");
    run("write_file", {{"path", "inner_link"}, {"content", "through\n"}});
    EXPECT_EQ(slurp(p("real/ok.txt")), "through\n");
}

// In a git work tree the files are git's list: a tracked link that leads out is left out too.
TEST_F(Confinement, AGitTrackedLinkThatLeadsOutIsNotSearched) {
    if (std::system("git --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no git";
    spit(p("repo/a.txt"), "inside\n");
    fs::create_symlink(out_ + "/secret.txt", p("repo/leak.txt"));
    ASSERT_EQ(std::system(("cd " + p("repo") + " && git init -q && git add -A").c_str()), 0);
    const std::string grep = text("grep_search", {{"path", "repo"}, {"pattern", "SECRET"}});
    EXPECT_TRUE(contains(grep, "Total matches: 0")) << grep;
    const json glob = run("file_glob_search", {{"path", "repo"}});
    EXPECT_EQ(glob["entries"], json::parse(R"([{"path": "a.txt", "type": "file"}])"))
        << glob.dump();
}

TEST_F(Confinement, ToolCwdMayOnlyNarrow) {
    fs::create_directories(p("sub"));
    spit(p("top.txt"), "top\n");
    for (const std::string& cwd : {out_, std::string(".."), std::string("/")}) {
        SCOPED_TRACE(cwd);
        BuiltinToolCall c{"read_file", {{"path", "secret.txt"}}, cwd, "", "", nullptr};
        json r;
        auto e = tools_->call(c, &r, nullptr);
        ASSERT_TRUE(e.has_value()) << r.dump();
        EXPECT_EQ(e->status, 403);
        EXPECT_TRUE(contains(e->message, "x-tool-cwd " + cwd)) << e->message;
        EXPECT_TRUE(contains(e->message, dir_)) << e->message;
    }
    fs::create_directory_symlink(out_, p("escape"));
    BuiltinToolCall via_link{"get_info", json::object(), "escape", "", "", nullptr};
    json r;
    auto e = tools_->call(via_link, &r, nullptr);
    ASSERT_TRUE(e.has_value()) << r.dump();
    EXPECT_EQ(e->status, 403);
    // a directory inside narrows: the top is then out of reach
    EXPECT_TRUE(contains(failure("read_file", {{"path", "../top.txt"}}, "sub"), "outside"));
}

// An isolate's files are its own; a relative path there still may not climb out.
TEST_F(Confinement, IsolatePathsMayNotClimbOut) {
    fake_bin("ssh", "#!/bin/sh\ntouch " + p("ssh-was-run") + "\nexit 255\n");
    for (const char* tool : {"read_file", "grep_search", "file_glob_search"}) {
        BuiltinToolCall c{tool, {{"path", "../../etc/passwd"}, {"pattern", "x"}},
                          "",   "ssh:user@box",
                          "",   nullptr};
        json r;
        ASSERT_FALSE(tools_->call(c, &r, nullptr));
        EXPECT_TRUE(contains(r.value("error", ""), "climbs out")) << tool << ": " << r.dump();
    }
    BuiltinToolCall abs{"read_file", {{"path", "/etc/passwd"}}, "/home/agent", "ssh:user@box", "",
                        nullptr};
    json r;
    ASSERT_FALSE(tools_->call(abs, &r, nullptr));
    EXPECT_TRUE(contains(r.value("error", ""), "outside")) << r.dump();
    EXPECT_FALSE(fs::exists(p("ssh-was-run")));
}

// ---- exec_shell_command ------------------------------------------------------------------

TEST(ShellLimits, SecretNames) {
    for (const char* name : {"FOO_TOKEN",
                             "GITHUB_TOKEN",
                             "OPENAI_API_KEY",
                             "EDGELLM_API_KEY",
                             "API_KEY",
                             "LLAMA_API_KEY",
                             "AWS_ACCESS_KEY_ID",
                             "AWS_REGION",
                             "AZURE_CLIENT_ID",
                             "DB_PASSWORD",
                             "PGPASSWORD",
                             "MY_SECRET",
                             "client_secret",
                             "SSH_AUTH_SOCK",
                             "MYSQL_PWD",
                             "SENTRY_DSN",
                             "GOOGLE_APPLICATION_CREDENTIALS",
                             "DATABASE_URL",
                             "HF_TOKEN",
                             "SMTP_PASS",
                             "TOKEN"})
        EXPECT_TRUE(is_secret_name(name)) << name;
    for (const char* name : {"PATH", "HOME", "PWD", "OLDPWD", "LANG", "TERM", "KEYBOARD_LAYOUT",
                             "PASSAGE", "USER", "SHELL", "EDGELLM_MODEL", "TOKENIZERS_PARALLELISM"})
        EXPECT_FALSE(is_secret_name(name)) << name;
}

TEST_F(ToolsTest, CommandsDoNotSeeTheServersSecrets) {
    ::setenv("FOO_TOKEN", "tok-123", 1);
    ::setenv("EDGELLM_API_KEY", "key-456", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "aws-789", 1);
    ::setenv("EDGELLM_PLAIN_SETTING", "visible", 1);
    const std::string env = text("exec_shell_command", {{"command", "env"}});
    ::unsetenv("FOO_TOKEN");
    ::unsetenv("EDGELLM_API_KEY");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    ::unsetenv("EDGELLM_PLAIN_SETTING");
    EXPECT_FALSE(contains(env, "tok-123")) << env;
    EXPECT_FALSE(contains(env, "key-456")) << env;
    EXPECT_FALSE(contains(env, "aws-789")) << env;
    EXPECT_TRUE(contains(env, "EDGELLM_PLAIN_SETTING=visible")) << env;
    EXPECT_TRUE(contains(env, "PATH=")) << env;
}

// The command's shell has RLIMIT_NPROC set: what its user runs, plus 256.
TEST_F(ToolsTest, CommandsRunUnderAProcessCap) {
    const std::string out =
        text("exec_shell_command", {{"command", "ulimit -u 2>/dev/null || ulimit -p"}});
    const long cap = std::strtol(out.c_str(), nullptr, 10);
    const long running = user_task_count();
    ASSERT_GT(running, 0);
    EXPECT_GE(cap, running) << out;
    EXPECT_LE(cap, running + tool_limits::exec_processes + 64) << out;  // (others come and go)
}

// The kernel enforces the cap for any user but root, so this runs as nobody: a command that
// starts 400 sleepers cannot start them all.
TEST_F(ToolsTest, AForkBombStopsAtTheCap) {
    if (::geteuid() == 0) ::chmod(dir_.c_str(), 0777);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::geteuid() == 0 &&
            (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
            ::_exit(3);
        BuiltinToolCall c{
            "exec_shell_command",
            {{"command", "i=0; while [ $i -lt 400 ]; do sleep 2 & i=$((i+1)); done; wait"},
             {"timeout", 20}},
            "",
            "",
            "",
            nullptr};
        json r;
        if (tools_->call(c, &r, nullptr)) ::_exit(4);
        const std::string out = r.value("plain_text_response", "");
        ::_exit(contains(out, "fork") ? 0 : 5);  // dash: "Cannot fork"; bash: "fork: ..."
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: cannot become nobody, 4: refused, 5: no fork failed";
}

TEST_F(ToolsTest, AThirdCommandAtOnceIsRefusedNotQueued) {
    std::vector<std::thread> running;
    for (int i = 0; i < tool_limits::exec_concurrent; ++i)
        running.emplace_back([&] { text("exec_shell_command", {{"command", "sleep 2"}}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto t0 = std::chrono::steady_clock::now();
    const ApiError e = refused("exec_shell_command", {{"command", "echo third"}});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
    EXPECT_EQ(e.status, 429);
    EXPECT_TRUE(contains(e.message, "at once")) << e.message;
    for (auto& t : running) t.join();
    EXPECT_EQ(text("exec_shell_command", {{"command", "echo again"}}),
              "again\n\n[exit code: 0]");  // the slots are free again
}

// ---- the tool service ---------------------------------------------------------------------

void no_log(const std::string&) {}

TEST(ToolServiceExposure, ToolsThatWriteAreRefusedOnAnOpenHost) {
    ToolConfig cfg;
    cfg.tools = "read_file,exec_shell_command,edit_file";
    cfg.exposed_on = "0.0.0.0";
    auto s = ToolService::create(cfg, no_log);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error(),
              "--tools exec_shell_command, edit_file on 0.0.0.0 without --api-key would let anyone "
              "who reaches the port run commands and write files as this user; add --api-key, "
              "listen on 127.0.0.1, or say --tools-allow-remote");
    cfg.tools = "read_file,grep_search,file_glob_search,get_info";  // read only: fine
    EXPECT_TRUE(ToolService::create(cfg, no_log));
}

TEST(ToolServiceExposure, ExecOnTheHostHidesTheProcess) {
    ASSERT_EQ(::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
    ToolConfig cfg;
    cfg.tools = "exec_shell_command";
    auto s = ToolService::create(cfg, no_log);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

}  // namespace
