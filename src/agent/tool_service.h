// GET/POST /tools (llama-server's built-in agent tools and the tools of MCP servers) and the
// chat page's /cors-proxy: what the single-model server and the router both answer, with no
// model involved.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "edgellm/agent.h"
#include "edgellm/error.h"
#include "agent/builtin_tools.h"
#include "server/http/transport.h"
#include "agent/mcp.h"

namespace edgellm::agent {

class ToolService {
  public:
    // Null when nothing is configured; an error for a bad tool list, runtime or MCP config.
    static Result<std::unique_ptr<ToolService>> create(const ToolConfig& cfg,
                                                       std::function<void(const std::string&)> log);
    ~ToolService();

    // /tools: 403 when `tools` is null (no tools configured), else GET lists, POST runs one.
    static void route(ToolService* tools, const http::Request& req, http::Response& res, std::string* log_extra);
    // Calls in flight end now (an MCP call returns "cancelled", a shell command is killed);
    // later calls get 503.
    void stop();

  private:
    ToolService() = default;
    void get(http::Response& res);
    void post(const http::Request& req, http::Response& res, std::string* log_extra);
    std::unique_ptr<BuiltinTools> builtin_;
    std::unique_ptr<McpClients> mcp_;
    std::mutex mu_;
    std::set<std::atomic<bool>*> in_flight_;
    bool stopping_ = false;
};

}  // namespace edgellm::agent
