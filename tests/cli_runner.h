// Runs the real edgellm binary for the CLI tests: exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace edgellm::test {

struct Outcome {
    int code;
    std::string out;  // stdout
    std::string err;  // stderr
};

// `args` is appended to the binary's path and run by the shell.
inline Outcome run(const std::string& args) {
    // (EDGELLM_TEST_WRAPPER: qemu for a cross-compiled binary, else empty)
    const std::string wrapper = EDGELLM_TEST_WRAPPER;
    const std::string bin = (wrapper.empty() ? "" : wrapper + " ") + std::string(EDGELLM_BIN_DIR) + "/edgellm";
    const std::filesystem::path err_file =
        std::filesystem::temp_directory_path() / ("edgellm_cli_err_" + std::to_string(getpid()));
    const std::string cmd = bin + " " + args + " 2>" + err_file.string();
    Outcome r{};
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream e(err_file);
    r.err.assign(std::istreambuf_iterator<char>(e), {});
    std::filesystem::remove(err_file);
    return r;
}

inline int lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

}  // namespace edgellm::test
