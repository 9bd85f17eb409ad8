// The chat page served at GET / (built into the binary).
#pragma once

#include <string>

#include "server/http/front.h"

namespace edgellm::server {

const std::string& webui_html();

// GET / and /index.html, the same in the server's and the router's route tables: the page,
// or 404 with --no-webui.
Handler webui_handler(bool enabled);

}  // namespace edgellm::server
