// exec_shell_command's environment and process limit on the host: see shell_limits.h.
#include "agent/shell_limits.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

extern char** environ;

namespace edgellm::agent {

namespace {

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = (char)std::toupper((unsigned char)c);
    return out;
}

bool secret_word(std::string_view w, bool whole_name) {
    for (const char* exact :
         {"KEY", "KEYS", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASS", "PASSWD", "PASSPHRASE",
          "AUTH", "COOKIE", "DSN", "CREDENTIAL", "CREDENTIALS"})
        if (w == exact) return true;
    if (w == "PWD") return !whole_name;  // MYSQL_PWD, not the shell's PWD
    for (const char* part : {"PASSWORD", "SECRET", "APIKEY", "CREDENTIAL"})
        if (w.find(part) != std::string_view::npos) return true;
    return w.ends_with("TOKEN") || w.ends_with("TOKENS");  // AUTHTOKEN, not TOKENIZERS
}

}  // namespace

bool is_secret_name(std::string_view name) {
    const std::string n = upper(name);
    if (n.starts_with("AWS_") || n.starts_with("AZURE_")) return true;
    for (const char* whole : {"GOOGLE_APPLICATION_CREDENTIALS", "DATABASE_URL", "PGPASSFILE",
                              "KRB5CCNAME", "GPG_AGENT_INFO", "NETRC"})
        if (n == whole) return true;
    const bool one_word = n.find('_') == std::string::npos;
    size_t at = 0;
    while (at <= n.size()) {
        const size_t end = std::min(n.find('_', at), n.size());
        if (end > at && secret_word(std::string_view(n).substr(at, end - at), one_word))
            return true;
        at = end + 1;
    }
    return false;
}

std::vector<std::string> environment_without_secrets() {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view kv(*e);
        if (!is_secret_name(kv.substr(0, kv.find('=')))) env.emplace_back(kv);
    }
    return env;
}

long user_task_count() {
    DIR* proc = ::opendir("/proc");
    if (!proc) return -1;
    const std::string uid = std::to_string(::getuid());
    long tasks = 0;
    bool any = false;
    while (const dirent* d = ::readdir(proc)) {
        if (!std::isdigit((unsigned char)d->d_name[0])) continue;
        std::ifstream status(std::string("/proc/") + d->d_name + "/status");
        std::string line, real_uid;
        long threads = 0;
        while (std::getline(status, line)) {
            if (line.starts_with("Uid:")) {
                const size_t from = line.find_first_not_of(" \t", 4);
                real_uid = line.substr(from, line.find_first_of(" \t", from) - from);
            } else if (line.starts_with("Threads:")) {
                threads = std::strtol(line.c_str() + 8, nullptr, 10);
            }
        }
        if (real_uid == uid) {
            tasks += threads > 0 ? threads : 1;
            any = true;
        }
    }
    ::closedir(proc);
    return any ? tasks : -1;  // (we are one of them: none seen means /proc did not tell)
}

std::vector<std::string> shell_with_process_limit(const std::string& command, long limit) {
    static const char* script =
        "ulimit -u \"$1\" 2>/dev/null || ulimit -p \"$1\" 2>/dev/null || "
        "{ echo 'edgellm: this shell cannot limit the number of processes (ulimit -u)' >&2; "
        "exit 126; }; shift; exec /bin/sh -c \"$1\"";
    return {"/bin/sh", "-c", script, "sh", std::to_string(limit), command};
}

bool hide_process_from_same_user() {
    return ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
}

}  // namespace edgellm::agent
