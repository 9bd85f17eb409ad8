// What the tests of child processes share (tests/sys, tests/agent): a clock, a file's
// bytes, and whether a process (not necessarily ours) is dead.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace edgellm::test {

inline double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Dead: gone, or a zombie waiting for init to reap it. Asks `tries` times, 50 ms apart.
inline bool process_dead(pid_t pid, int tries = 40) {
    for (int i = 0; i < tries; ++i) {
        if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
        const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
        const size_t close = stat.rfind(')');
        if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z')
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

}  // namespace edgellm::test
