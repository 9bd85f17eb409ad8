// exec_shell_command's bounds on the host besides its time and output (tool_limits): an
// environment without the server's secrets and a cap on the processes a command may start.
// (How many commands run at once is BuiltinTools'.)
//
// What they are not: a boundary against a command that means harm. It runs as the server's
// user and can read whatever that user can (the key file, the shell history), so the
// process is made non-dumpable while the tool is on (no /proc/PID/environ, /proc/PID/mem or
// ptrace of the server for its commands), and a command that must not see this machine
// runs in a container (--tools-runtime docker:IMAGE).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace edgellm::agent {

// Whether an environment variable's name says it holds a secret. Case-insensitive, the
// name cut into words at '_': a word KEY(S), TOKEN(S), SECRET(S), PASS, PASSWD, PWD (not the
// whole name), PASSPHRASE, AUTH, COOKIE, DSN, CREDENTIAL(S), one that contains PASSWORD,
// SECRET, APIKEY or CREDENTIAL, or ends in TOKEN(S) (GITHUB_TOKEN, OPENAI_API_KEY,
// PGPASSWORD, EDGELLM_API_KEY, SSH_AUTH_SOCK, SENTRY_DSN, MYSQL_PWD, NGROK_AUTHTOKEN; not
// TOKENIZERS_PARALLELISM); names beginning AWS_ or AZURE_;
// and GOOGLE_APPLICATION_CREDENTIALS, DATABASE_URL, PGPASSFILE, KRB5CCNAME, GPG_AGENT_INFO,
// NETRC.
bool is_secret_name(std::string_view name);

// This process's environment without the variables is_secret_name() names ("KEY=value").
std::vector<std::string> environment_without_secrets();

// The tasks (processes and their threads) that count against this process's real user for
// RLIMIT_NPROC, from /proc; -1 when /proc cannot tell.
long user_task_count();

// argv running `command` with sh -c after setting RLIMIT_NPROC, soft and hard, to `limit`
// (the shell's own `ulimit -u`, or dash's `ulimit -p`; a shell that can do neither refuses
// to run it, exit 126). The kernel refuses a fork once the user runs that many tasks, so a
// fork bomb stops there; root (or CAP_SYS_RESOURCE) is exempt.
std::vector<std::string> shell_with_process_limit(const std::string& command, long limit);

// Makes the process non-dumpable (prctl PR_SET_DUMPABLE 0): /proc/PID/environ, mem and
// ptrace of it are then root's only, so a command the tools run as the same user cannot
// read the server's environment or memory (its API key) through them. Core dumps are off
// too. False when the kernel refused.
bool hide_process_from_same_user();

}  // namespace edgellm::agent
