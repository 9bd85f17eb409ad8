// The chat page served at GET / (built into the binary).
#pragma once

#include <string>

namespace edgellm::server {

const std::string& webui_html();

}  // namespace edgellm::server
