// The error every route of the HTTP front answers with (the server's APIs, the router, the
// agent tools): HTTP status, OpenAI error type and message, in one JSON shape.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace edgellm::server {

using json = nlohmann::ordered_json;

// An error for the client: HTTP status, OpenAI error type and message.
struct ApiError {
    int status = 400;
    std::string type = "invalid_request_error";
    std::string message;
    json extra = json::object();  // further fields of the error object
};

// {"error": {"code", "message", "type", ...}} as llama.cpp and OpenAI send it.
std::string error_body(const ApiError& e);
ApiError bad_request(std::string message);

}  // namespace edgellm::server
