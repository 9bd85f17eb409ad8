// The JSON answers every handler of the server layer sends (the server, the router, the
// tools): one place for their content type and the error shape.
#pragma once

#include "server/http/errors.h"
#include "server/http/transport.h"

namespace edgellm::server {

inline void respond_json(http::Response& res, int status, const json& j) {
    res.send(status, "application/json; charset=utf-8", j.dump(-1, ' ', false, json::error_handler_t::replace));
}

inline void respond_error(http::Response& res, const ApiError& e) {
    res.send(e.status, "application/json; charset=utf-8", error_body(e));
}

}  // namespace edgellm::server
