// Who may call: cross-origin requests from browsers (CORS) and the API key, as
// llama-server answers them. Pure functions of the request's headers (unit-tested).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/http.h"

namespace edgellm::server {

// The CORS headers for a request with this Origin header (nullptr: none sent); a
// preflight (OPTIONS) also gets the allowed credentials, methods and headers.
std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& p,
                                                             const std::string* origin,
                                                             bool preflight);
bool origin_is_localhost(std::string_view origin);

// --api-key: true when `keys` is empty or the request's "Authorization: Bearer KEY" (else
// its x-api-key header) is one of them, compared in full (the time taken does not tell how
// much of a key matched).
bool api_key_matches(const std::vector<std::string>& keys, const std::string* authorization,
                     const std::string* x_api_key);

}  // namespace edgellm::server
