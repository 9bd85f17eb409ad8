// edgellm as a client of MCP servers (Model Context Protocol, stdio transport), as
// llama-server is with --mcp-servers-config FILE / --mcp-servers-json JSON: each configured
// server is a child process that reads JSON-RPC 2.0 requests on its stdin and writes
// responses and notifications on its stdout, one JSON message per line. Its tools are
// offered as NAME_TOOL next to the built-in ones (GET /tools lists them, POST /tools calls
// them). No HTTP here: the server's /tools handlers call list(), has() and call().
//
//   HTTP threads ──call()──┐                       ┌──▶ stdin  ──▶ ┐
//                          ├─ Session (per server) ┤               │ child (own process group)
//   reader thread ◀────────┘  pending calls by id  └──◀ stdout ◀── ┤ stderr ──▶ our log
//
// Several calls to one server are in flight at once; the reader thread hands each response
// to the call with its id, drops notifications, answers the server's pings and ignores
// (logs) lines that are not JSON-RPC. A server that exits is started again by the next call.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"
#include "server/http/errors.h"

namespace edgellm::agent {

// (the HTTP front's error shape: a tool's refusal is answered as any other)
using server::ApiError;
using server::bad_request;
using server::json;

// One entry of {"mcpServers": {NAME: {...}}} (the format Cursor and Claude Desktop use).
struct McpServerConfig {
    std::string name;     // the key; its tools are exposed as NAME_TOOL
    std::string command;  // a path, or a name looked up in PATH (the env's PATH if it sets one)
    std::vector<std::string> args;
    std::map<std::string, std::string> env;  // set over this process's environment
    std::string cwd;                         // the child's working directory; empty: ours
    int timeout_ms = 30000;  // "timeout_ms": one tools/call, from sending it (llama-server's)
};

// Parse a config's JSON text. Like llama-server: no "mcpServers" object gives no servers, an
// entry without "command" (such as a remote server's "url") is skipped; both with a warning.
// Errors (not JSON, a field of the wrong type, timeout_ms <= 0) name the field.
Result<std::vector<McpServerConfig>> parse_mcp_config(const std::string& json_text,
                                                      std::vector<std::string>* warnings = nullptr);
// The servers of --mcp-servers-config (a file; "" none) then --mcp-servers-json ("" none); a
// name already taken is skipped with a warning. An unreadable file is an error that names it
// (llama-server then refuses to start, as for JSON that does not parse).
Result<std::vector<McpServerConfig>> load_mcp_config(const std::string& config_path,
                                                     const std::string& inline_json,
                                                     std::vector<std::string>* warnings = nullptr);

struct McpOptions {
    // One line per event (no newline). Called from several threads, also while a call runs.
    // Null: stderr, as "HH:MM:SS edgellm mcp: ...".
    std::function<void(const std::string&)> log;
    // The children's stderr: true, line by line into `log` (as "mcp NAME: stderr: ..."; the
    // last lines also go into the error when a server dies), and so do its MCP log messages
    // (notifications/message); false, /dev/null and those messages dropped.
    bool log_child_stderr = true;
    // Starting a server (spawn + initialize; at warm-up also tools/list), llama-server's
    // warm-up bound. A call that has to start its server first gets this on top of timeout_ms.
    int start_timeout_ms = 10000;
    // After a start failed, calls to that server fail at once for this long (llama-server's
    // cooldown) instead of each trying again.
    int retry_after_ms = 5000;
    // Stopping a server: its stdin is closed; 200 ms later SIGTERM to its process group; this
    // much later SIGKILL.
    int term_grace_ms = 1000;
    // A line on a server's stdout longer than this is dropped (the call it answers, when its
    // id is readable, fails with "reply larger than ..."); memory per server stays bounded.
    size_t max_line_bytes = size_t(8) << 20;
};

// State of one configured server, for logs and tests.
struct McpServerStatus {
    std::string name;
    bool running = false;  // a live process that completed initialize
    int pid = -1;          // its pid (process group id too), -1 when none
    size_t n_tools = 0;    // tools listed at warm-up (0 for a server left out)
    std::string error;     // why it was left out or last failed to start; "" when fine
};

class McpClients {
  public:
    // Warm-up: starts every server (in parallel), initializes it and lists its tools, within
    // options.start_timeout_ms each. A server that fails is logged and left out; the others
    // work. Servers that came up stay running for the calls.
    explicit McpClients(std::vector<McpServerConfig> servers, McpOptions options = {});
    // shutdown(), waits for the calls in flight to return (they do within ~50 ms), then stops
    // every child (see McpOptions::term_grace_ms) and joins the reader threads. Bounded even
    // when a grandchild holds the pipes open.
    ~McpClients();
    McpClients(const McpClients&) = delete;
    McpClients& operator=(const McpClients&) = delete;

    // The tools as llama-server's GET /tools lists MCP tools, in config order then the
    // server's order (a NAME_TOOL already taken is skipped, with a log line):
    //   [{"display_name": "echo_echo", "tool": "echo_echo", "type": "mcp",
    //     "permissions": {"write": W}, "uses_cwd": false,
    //     "definition": {"type": "function", "function": {"name": "echo_echo",
    //                    "description": "...", "parameters": <the tool's inputSchema>}}}]
    // (parameters is {"type": "object", "properties": {}} when the tool gives no schema.)
    // W is false only for a tool the server declares read-only (its annotations'
    // readOnlyHint is true): what the server says, taken as it says it.
    json list() const;
    // The tools listed with "write": true, in list() order.
    std::vector<std::string> writers() const;
    bool has(std::string_view tool) const;
    bool empty() const;  // no tool at all

    // POST /tools for an MCP tool: tools/call with `params` (an object, or null for {}) as its
    // arguments. *result gets what llama-server answers with status 200:
    //   {"plain_text_response": TEXT}  the result's text content parts, joined by "\n"
    //                                  (embedded resources' text too; structuredContent as
    //                                  JSON when there is no text);
    //   {"error": MESSAGE}             an isError result (its text, else "MCP tool returned an
    //                                  error"), a JSON-RPC error (its message), "request timed
    //                                  out after N ms", "cancelled" (*cancel raised, or
    //                                  shutdown), the server dying meanwhile or unable to start.
    // Returns an ApiError (and leaves *result alone) only for an unknown tool (404) or params
    // that are not an object (400). Blocks up to timeout_ms (+ start_timeout_ms when the
    // server has to be started again); *cancel is looked at every 50 ms. Thread-safe.
    std::optional<ApiError> call(const std::string& tool, const json& params, json* result,
                                 const std::atomic<bool>* cancel = nullptr);

    // Calls in flight return "cancelled" within ~50 ms and new ones are refused; the children
    // keep running until the destructor. Idempotent; call it before the HTTP server drains.
    void shutdown();

    std::vector<McpServerStatus> servers() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace edgellm::agent
