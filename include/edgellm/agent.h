// The agent tools `edgellm serve` offers at /tools (llama-server's built-in tools, run on
// the host or in a runtime, and the tools of MCP servers), as the command line sets them.
#pragma once

#include <string>

namespace edgellm::agent {

struct ToolConfig {
    std::string tools;            // --tools all|NAMES
    std::string runtime;          // --tools-runtime
    std::string mcp_config_path;  // --mcp-servers-config
    std::string mcp_json;         // --mcp-servers-json
    std::string cors_origins;     // (logged: who may call them from a browser)
};

}  // namespace edgellm::agent
