#include "server/http/access.h"

#include <algorithm>

namespace edgellm::server {

bool origin_is_localhost(std::string_view o) {
    for (std::string_view scheme : {"http://", "https://"}) {
        if (o.substr(0, scheme.size()) != scheme) continue;
        std::string_view rest = o.substr(scheme.size());
        for (std::string_view host : {"localhost", "127.0.0.1", "[::1]"}) {
            if (rest.substr(0, host.size()) != host) continue;
            std::string_view port = rest.substr(host.size());
            if (port.empty()) return true;
            if (port[0] != ':' || port.size() < 2 || port.size() > 6) return false;
            return std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; });
        }
    }
    return false;
}

std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& p,
                                                             const std::string* origin,
                                                             bool preflight) {
    std::vector<std::pair<std::string, std::string>> h;
    const std::string o = origin ? *origin : "";
    if (p.origins == "*") {
        h.emplace_back("Access-Control-Allow-Origin", p.credentials && !o.empty() ? o : "*");
    } else if (p.origins == "localhost") {
        if (!o.empty() && origin_is_localhost(o)) h.emplace_back("Access-Control-Allow-Origin", o);
    } else if (!o.empty()) {
        size_t at = 0;
        while (at <= p.origins.size()) {
            const size_t comma = std::min(p.origins.find(',', at), p.origins.size());
            std::string item = p.origins.substr(at, comma - at);
            while (!item.empty() && item.front() == ' ') item.erase(item.begin());
            while (!item.empty() && item.back() == ' ') item.pop_back();
            if (item == o) {
                h.emplace_back("Access-Control-Allow-Origin", o);
                break;
            }
            at = comma + 1;
        }
    }
    if (!h.empty() && h[0].second != "*") h.emplace_back("Vary", "Origin");
    if (preflight) {
        h.emplace_back("Access-Control-Allow-Credentials", p.credentials ? "true" : "false");
        h.emplace_back("Access-Control-Allow-Methods", p.methods);
        h.emplace_back("Access-Control-Allow-Headers", p.headers);
    }
    return h;
}

bool api_key_matches(const std::vector<std::string>& keys, const std::string* authorization,
                     const std::string* x_api_key) {
    if (keys.empty()) return true;
    std::string key;
    if (authorization) {
        static const std::string kBearer = "Bearer ";
        if (authorization->compare(0, kBearer.size(), kBearer) == 0) key = authorization->substr(kBearer.size());
    }
    if (key.empty() && x_api_key) key = *x_api_key;
    if (key.empty()) return false;
    bool ok = false;
    for (const std::string& k : keys) {
        unsigned diff = k.size() != key.size();
        for (size_t i = 0; i < k.size(); ++i) diff |= (unsigned char)(k[i] ^ key[i % key.size()]);
        ok |= diff == 0;
    }
    return ok;
}

}  // namespace edgellm::server
