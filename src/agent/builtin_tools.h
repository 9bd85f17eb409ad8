// llama-server's built-in agent tools (--tools, --tools-runtime): what its web UI lists with
// GET /tools and runs with POST /tools {"tool", "params", "stream"}. No sockets here: the
// HTTP adapter hands a BuiltinToolCall in and sends back the JSON (or the SSE events) it
// gets.
//
//   tool                 streams  writes  result (tool failures: {"error": "..."} instead)
//   read_file            no       no      {"plain_text_response"} or, x-resp-type base64,
//                                         {"base64", "size_bytes"}
//   file_glob_search     no       no      {"plain_text_response", "entries": [{path, type}],
//                                          "base"}
//   grep_search          no       no      {"plain_text_response"}
//   exec_shell_command   yes      yes     {"plain_text_response"}; streamed: {"chunk"}...
//                                         then {"done": true} (+ "error")
//   write_file           no       yes     {"result", "path", "bytes"}
//   edit_file            no       yes     {"result", "path", "edits_applied"}
//   get_info             no       no      {"os", "cwd"}
//
// Where a call acts (its runtime): the host; "ssh:TARGET" (a remote POSIX host, key-based
// auth only, the host key already trusted); "docker-container:ID" / "podman-container:ID"
// (`<engine> exec` in a running container); and, for --tools-runtime only,
// "docker:IMAGE" / "podman:IMAGE" (a container spawned at startup, `run --rm -i IMAGE sh`,
// respawned if it dies, stopped by the destructor). An isolate needs sh, cat, head, wc,
// mkdir, dirname, mv, find and timeout. Every command is an argv (no host shell parses a
// name), and a target or id that could be read as an option is refused.
//
// Relative paths resolve against BuiltinToolCall::cwd (the x-tool-cwd header, itself
// relative to the server's directory), else the server's working directory on the host or
// the isolate's own. A "cwd" (or "runtime") in params is ignored: the model cannot choose it.
// '~' expands to $HOME on the host.
//
// On the host the file tools act only inside that working directory (confine.h): a path
// that leads outside it ("..", an absolute path, '~', a symbolic link) is a tool failure
// that says so, a listing leaves out the links that lead outside, and x-tool-cwd may only
// name a directory inside the server's own (403 otherwise). In an isolate the check is
// lexical only (a relative path may not climb out with ".."; an absolute one must lie below
// an absolute x-tool-cwd): the isolate is itself the boundary, chosen by the operator.
// exec_shell_command is not confined (a shell reaches what its user can): on the host it
// runs without the server's secret environment variables and with a cap on its processes
// (shell_limits.h), and at most tool_limits::exec_concurrent commands run at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
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

// Every bound a call is held to (bytes unless named otherwise).
namespace tool_limits {
inline constexpr size_t read_text = 16 * 1024;              // read_file text answer
inline constexpr size_t read_whole_file = 16 * 1024;        // larger files need a line range
inline constexpr size_t read_scan = 64 * 1024 * 1024;       // bytes read to find a line range
inline constexpr size_t read_base64 = 32 * 1024 * 1024;     // read_file base64 answer (raw)
inline constexpr size_t edit_file_size = 64 * 1024 * 1024;  // edit_file's file
inline constexpr size_t binary_sniff = 8 * 1024;            // a NUL in these bytes: binary
inline constexpr int glob_results = 100;                    // file_glob_search entries (limit cap)
inline constexpr size_t list_entries = 200000;              // a walk stops after this many
inline constexpr int list_seconds = 15;                     // time budget of one listing
inline constexpr size_t git_listing = 8 * 1024 * 1024;      // `git ls-files` output
inline constexpr int grep_matches = 100;                    // grep_search matches
inline constexpr size_t grep_output = 64 * 1024;            // grep_search answer
inline constexpr size_t grep_line = 1000;                   // one printed line (cut beyond)
inline constexpr int grep_context = 20;                     // context_lines cap
inline constexpr size_t grep_file = 16 * 1024 * 1024;       // larger files are skipped
inline constexpr int grep_seconds = 30;                     // grep_search reads files this long
inline constexpr size_t exec_output = 16 * 1024;            // exec_shell_command output (cap)
inline constexpr int exec_timeout_default = 10;             // seconds
inline constexpr int exec_timeout_max = 60;                 // seconds
inline constexpr int isolate_aux_seconds = 15;              // a stat/read/write in an isolate
inline constexpr int exec_concurrent = 2;                   // commands at once (more: 429)
inline constexpr long exec_processes = 256;  // tasks a host command may add to its user's
}  // namespace tool_limits

// One POST /tools request, as the HTTP adapter read it. (Not tool_calls.h's ToolCall,
// which is a call a model wrote.)
struct BuiltinToolCall {
    std::string name;       // "tool"
    json params;            // "params" (null: none, taken as {})
    std::string cwd;        // x-tool-cwd header (empty: none)
    std::string runtime;    // x-tool-runtime header; overrides --tools-runtime
    std::string resp_type;  // x-resp-type header: "base64" makes read_file send the bytes
    const std::atomic<bool>* cancel = nullptr;  // set when the client went away
};

class SpawnedContainer;  // --tools-runtime docker:IMAGE (tool_runtime.h)

class BuiltinTools {
  public:
    // tools: --tools, "all" or a comma-separated list of names (empty: none); an unknown
    // name fails, naming it and the known ones. runtime: --tools-runtime (empty: the
    // host); an invalid one fails, and "docker:IMAGE" / "podman:IMAGE" start the container
    // here (failing if it does not come up).
    static Result<std::unique_ptr<BuiltinTools>> create(const std::string& tools,
                                                        const std::string& runtime);
    ~BuiltinTools();
    BuiltinTools(const BuiltinTools&) = delete;
    BuiltinTools& operator=(const BuiltinTools&) = delete;

    // GET /tools: one entry per enabled tool, in llama-server's order and shape:
    // {"display_name", "tool", "type": "server", "permissions": {"write"}, "uses_cwd",
    //  "definition": {"type": "function", "function": {name, description, parameters}}}.
    json list() const;
    bool has(std::string_view name) const;
    // The enabled tools that change files or run commands (permissions.write), in order.
    std::vector<std::string> writers() const;
    // exec_shell_command is enabled and runs its commands on this machine by default.
    bool runs_commands_here() const;
    bool empty() const { return tools_.empty(); }

    // POST /tools. Thread-safe; blocks until the tool is done (exec_shell_command: at most
    // its timeout, 60 s, plus a second or two to reap it).
    //
    // Returns an ApiError when the request cannot run at all: x-tool-cwd outside the
    // server's working directory (403, naming both); exec_shell_command while
    // tool_limits::exec_concurrent commands run (429); an unknown (or not enabled)
    // tool, and a tool that cannot stream asked to (404, as llama-server: `unknown tool
    // "x"`, `tool "x" does not support stream = true`); params not an object, a required
    // parameter missing or of the wrong type, a runtime that is unknown ("unknown tool
    // runtime"), an ssh target that could be an option ("invalid ssh target"), a container
    // id that could ("invalid container id"), or an image where a running container must
    // be named (400; llama-server answers 500 for the runtime ones, same wording).
    // Otherwise *result is the tool's answer (see the table above), a tool failure
    // (missing file, old_text not unique, ...) as {"error": "..."}.
    //
    // stream non-null ("stream": true): exec_shell_command sends {"chunk": text} events
    // as its output arrives, the "\n[exit code: N]" tail as a last chunk, then
    // {"done": true} ({"done": true, "error": ...} if it could not run); *result is that
    // last event. stream returning false (the client went away) kills the command and
    // sends nothing more. Every string in events and results is valid UTF-8 (invalid
    // bytes become U+FFFD; a character cut between two reads goes out whole in the later
    // chunk).
    std::optional<ApiError> call(const BuiltinToolCall& c, json* result,
                                 const std::function<bool(const json& event)>& stream) const;

    struct Tool;  // one entry of the tool table (builtin_tools.cpp)

  private:
    BuiltinTools();
    std::vector<const Tool*> tools_;
    std::string runtime_;  // --tools-runtime when it names an existing target
    std::unique_ptr<SpawnedContainer> container_;   // --tools-runtime docker:/podman:IMAGE
    mutable std::atomic<int> commands_running_{0};  // exec_shell_command calls in flight
};

// Glob matching of file_glob_search's and grep_search's include/exclude, exposed for
// tests: '*' and '?' stop at '/', "**" crosses it, "**/" is zero or more directories,
// [abc] [a-z] [!x] classes, {a,b} alternatives, '\' escapes the next character.
// A pattern without '/' matches the entry's basename at any depth; with one it matches
// the path relative to the search directory, anchored there by a leading '/', else
// anywhere below it (as if it began with "**/").
bool tool_glob_match(std::string_view pattern, std::string_view rel_path);

}  // namespace edgellm::agent
