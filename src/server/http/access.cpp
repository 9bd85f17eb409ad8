#include "server/http/access.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>

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

namespace {

// Each comma-separated item of `list`, trimmed of spaces; stops when `f` returns true.
template <class F>
bool any_item(const std::string& list, F f) {
    size_t at = 0;
    while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        std::string item = list.substr(at, comma - at);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (!item.empty() && f(item)) return true;
        at = comma + 1;
    }
    return false;
}

// Whether the policy lets a page of origin `o` (not empty) read the answers.
bool cors_allows(const CorsPolicy& p, const std::string& o) {
    if (p.origins == "*") return true;
    if (p.origins == "localhost") return origin_is_localhost(o);
    return any_item(p.origins, [&](const std::string& item) { return item == o; });
}

// The host and the port text ("" when none) of an authority, host as authority_host gives it.
std::pair<std::string, std::string> host_and_port(std::string_view a) {
    const size_t colon = a.rfind(':');
    const size_t bracket = a.rfind(']');
    std::string port;
    if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket))
        port = std::string(a.substr(colon + 1));
    return {authority_host(a), port};
}

bool is_loopback_address(const std::string& host) {
    in_addr a4{};
    if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    in6_addr a6{};
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

// The same address, however written ("::ffff:10.0.0.1" is 10.0.0.1); false if either is no
// address literal.
bool same_address(const std::string& a, const std::string& b) {
    auto bytes = [](const std::string& s, unsigned char out[16]) {
        in_addr a4{};
        in6_addr a6{};
        if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
            std::memset(out, 0, 10);
            out[10] = out[11] = 0xff;
            std::memcpy(out + 12, &a4, 4);
            return true;
        }
        if (inet_pton(AF_INET6, s.c_str(), &a6) != 1) return false;
        std::memcpy(out, &a6, 16);
        return true;
    };
    unsigned char x[16], y[16];
    return bytes(a, x) && bytes(b, y) && std::memcmp(x, y, 16) == 0;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& p,
                                                             const std::string* origin,
                                                             bool preflight) {
    std::vector<std::pair<std::string, std::string>> h;
    const std::string o = origin ? *origin : "";
    if (p.origins == "*")
        h.emplace_back("Access-Control-Allow-Origin", p.credentials && !o.empty() ? o : "*");
    else if (!o.empty() && cors_allows(p, o))
        h.emplace_back("Access-Control-Allow-Origin", o);
    if (!h.empty() && h[0].second != "*") h.emplace_back("Vary", "Origin");
    if (preflight) {
        h.emplace_back("Access-Control-Allow-Credentials", p.credentials ? "true" : "false");
        h.emplace_back("Access-Control-Allow-Methods", p.methods);
        h.emplace_back("Access-Control-Allow-Headers", p.headers);
    }
    return h;
}

std::string authority_host(std::string_view a) {
    std::string host;
    std::string_view port;
    if (!a.empty() && a[0] == '[') {  // [v6]:port
        const size_t close = a.find(']');
        if (close == std::string_view::npos) return "";
        host = std::string(a.substr(1, close - 1));
        std::string_view rest = a.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') return "";
            port = rest.substr(1);
        }
        in6_addr a6{};
        if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) return "";
    } else {
        const size_t colon = a.find(':');
        if (colon != std::string_view::npos) {
            if (a.find(':', colon + 1) != std::string_view::npos) {  // a bare IPv6 literal
                in6_addr a6{};
                host = std::string(a);
                return inet_pton(AF_INET6, host.c_str(), &a6) == 1 ? host : "";
            }
            port = a.substr(colon + 1);
        }
        host = std::string(a.substr(0, colon));
        for (char& c : host) {
            c = (char)std::tolower((unsigned char)c);
            if (!std::isalnum((unsigned char)c) && c != '-' && c != '.' && c != '_') return "";
        }
        if (!host.empty() && host.back() == '.') host.pop_back();
    }
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return "";
    for (char& c : host) c = (char)std::tolower((unsigned char)c);
    return host;
}

HostPolicy host_policy(const std::string& listen_hosts, const std::string& allowed_hosts) {
    HostPolicy p;
    auto add = [&p](const std::string& item) {
        if (item == "*") {
            p.any = true;
        } else if (std::string h = authority_host(item); !h.empty() && h != "0.0.0.0" && h != "::") {
            p.names.push_back(h);
        }
        return false;
    };
    any_item(listen_hosts, add);
    any_item(allowed_hosts, add);
    return p;
}

bool host_allowed(const HostPolicy& p, const std::string* host_header, const std::string& local_addr,
                  std::string* why) {
    if (!host_header || p.any) return true;
    const std::string h = authority_host(*host_header);
    if (h.empty()) {
        *why = "the Host header is not a host name";
        return false;
    }
    if (h == "localhost" || is_loopback_address(h) || same_address(h, local_addr) ||
        std::find(p.names.begin(), p.names.end(), h) != p.names.end())
        return true;
    *why = "this server does not answer to the name " + h +
           " (a web page's name pointed at it: DNS rebinding); --allowed-hosts " + h + " adds it";
    return false;
}

bool origin_allowed(const CorsPolicy& p, const std::string* origin, const std::string* host_header, bool admin) {
    if (!origin) return true;
    for (std::string_view scheme : {"http://", "https://"}) {
        if (origin->compare(0, scheme.size(), scheme) != 0 || !host_header) continue;
        const std::string_view authority = std::string_view(*origin).substr(scheme.size());
        const auto page = host_and_port(authority);
        if (!page.first.empty() && page == host_and_port(*host_header)) return true;
    }
    if (admin && p.origins == "*") return origin_is_localhost(*origin);
    return cors_allows(p, *origin);
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
