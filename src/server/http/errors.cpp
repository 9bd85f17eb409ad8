#include "server/http/errors.h"

namespace edgellm::server {

ApiError bad_request(std::string message) {
    ApiError e;
    e.message = std::move(message);
    return e;
}

std::string error_body(const ApiError& e) {
    json err = {{"code", e.status}, {"message", e.message}, {"type", e.type}};
    for (const auto& [k, v] : e.extra.items()) err[k] = v;
    return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace edgellm::server
