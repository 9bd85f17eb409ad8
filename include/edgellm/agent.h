// The agent tools `edgellm serve` offers at /tools (llama-server's built-in tools, run on
// the host or in a runtime, and the tools of MCP servers), as the command line sets them.
#pragma once

#include <string>
#include <vector>

namespace edgellm::agent {

struct ToolConfig {
    std::string tools;            // --tools all|NAMES
    std::string runtime;          // --tools-runtime
    std::string mcp_config_path;  // --mcp-servers-config
    std::string mcp_json;         // --mcp-servers-json
    std::string cors_origins;     // (logged: who may call them from a browser)
    // Not empty: the --host the server listens on, reachable from other machines, with no
    // API key and no --tools-allow-remote. Tools that write (the built-in ones that do, an
    // MCP tool its server does not declare read-only) are then refused at start-up with
    // remote_tools_refusal()'s reason.
    std::string exposed_on;
};

// The built-in tools of a --tools value that change files or run commands (write_file,
// edit_file, exec_shell_command), in GET /tools order; none when the value names an unknown
// tool (it is refused for that).
std::vector<std::string> writing_builtin_tools(const std::string& tools);

// Why these tools may not be offered on `host` without a key: "--tools exec_shell_command,
// write_file on 0.0.0.0 without --api-key would let anyone who reaches the port run commands
// and write files as this user; add --api-key, listen on 127.0.0.1, or say
// --tools-allow-remote". builtin: writing_builtin_tools(); mcp: MCP tools not declared
// read-only; runtime: --tools-runtime ("": this machine).
std::string remote_tools_refusal(const std::vector<std::string>& builtin,
                                 const std::vector<std::string>& mcp, const std::string& runtime,
                                 const std::string& host);

// What anyone who reaches the server can do with the built-in tools of a --tools value, for
// the warning when it listens off this machine without a key: e.g. "read the files below
// /srv/work (read_file, grep_search, file_glob_search, get_info)"; "" for none. dir: the
// server's working directory.
std::string builtin_tools_exposure(const std::string& tools, const std::string& runtime,
                                   const std::string& dir);

}  // namespace edgellm::agent
