// Where the built-in tools act (builtin_tools.h): the host, confined to its working
// directory (confine.h), or an isolate reached by running commands (a container, an ssh
// host), and the container --tools-runtime docker:IMAGE starts. The tools see only the
// ToolRuntime interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/builtin_tools.h"
#include "sys/subprocess.h"

namespace edgellm::agent {

enum class ListKind { Files, Dirs, All };

struct FileStat {
    bool exists = false, is_dir = false, is_file = false;
    uint64_t size = 0;
    std::string error;  // why the runtime could not tell (an isolate that is unreachable)
};

struct ReadResult {
    std::string data;
    bool truncated = false;  // the file has more than the bytes asked for
    std::string error;       // set when it could not be read
};

struct ListEntry {
    std::string rel;  // '/'-separated, relative to the listed directory
    bool is_dir = false;
};

struct Listing {
    std::vector<ListEntry> entries;  // sorted by path
    std::string error;
    bool truncated = false;  // the time budget, the entry cap or an unreadable directory
};

struct ExecRequest {
    std::vector<std::string> argv;  // runs in the runtime's working directory
    int timeout_s = 10;
    size_t max_output = 0;
    const std::atomic<bool>* cancel = nullptr;
    std::function<bool(std::string_view)> on_chunk;
};

// Where a call acts. Paths given to stat/read/write/list are resolve()d ones.
class ToolRuntime {
  public:
    virtual ~ToolRuntime() = default;
    virtual bool is_host() const = 0;
    // A path a request gave, as the other calls take it: on the host its real path inside
    // the working directory, in an isolate absolute or (without a cwd) "./"-relative, never
    // with a leading '-'. "" and *why when it may not be used (outside the working
    // directory: see confine.h).
    virtual std::string resolve(const std::string& path, std::string* why) const = 0;
    virtual FileStat stat(const std::string& path) const = 0;
    virtual ReadResult read(const std::string& path, size_t max_bytes) const = 0;
    // Atomically (temporary file, then rename); "" when done, else why not.
    virtual std::string write(const std::string& path, const std::string& content) const = 0;
    virtual Listing list(const std::string& dir, int max_depth, ListKind kind,
                         const std::atomic<bool>* cancel) const = 0;
    virtual sys::RunResult exec(const ExecRequest& r) const = 0;
    // argv of `sh -c command` here ("" and *why when it cannot be run with its bounds).
    virtual std::vector<std::string> shell(const std::string& command, std::string* why) const = 0;
    // The directory commands run in (get_info's "cwd").
    virtual std::string working_dir() const = 0;
    // "" when commands can run in the working directory, else why not.
    virtual std::string check_working_dir() const { return ""; }
};

// A --tools-runtime or x-tool-runtime value.
struct RuntimeSpec {
    enum Kind { Host, Ssh, Attach, Spawn } kind = Host;
    std::string engine;  // docker | podman
    std::string arg;     // ssh target, container id or image
};

// 400 for a runtime that is unknown, or whose target or id could be read as an option.
std::optional<ApiError> parse_runtime(const std::string& s, RuntimeSpec* out);

// The runtime of one call: cwd is the x-tool-cwd header (empty: none). 403 when, on the
// host, it is not inside the server's working directory; 400 for an image (a container is
// started by the server, not by a request).
std::optional<ApiError> make_runtime(const RuntimeSpec& spec, const std::string& spec_text,
                                     const std::string& cwd, std::unique_ptr<ToolRuntime>* out);

// `<engine> run --rm -i --cidfile F IMAGE sh`: the shell waits on a stdin we hold open,
// so the container lives until we close it (the destructor) or it dies (then spec()
// starts another). Its client's output goes to a log file, read when it fails to start.
class SpawnedContainer {
  public:
    static Result<std::unique_ptr<SpawnedContainer>> start(const std::string& engine,
                                                           const std::string& image);
    ~SpawnedContainer();

    // "<engine>-container:<id>" of a running container (started again if it died).
    Result<std::string> spec();

  private:
    SpawnedContainer(std::string engine, std::string image);
    std::string launch();
    void stop();

    std::string engine_, image_, dir_, id_;
    sys::Child child_;
    std::mutex mu_;
};

}  // namespace edgellm::agent
