// The chat page's CORS proxy and the addresses it never reaches: see cors_proxy.h.
#include "agent/cors_proxy.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstring>
#include <optional>

#include "edgellm/client.h"
#include "server/http/errors.h"
#include "server/http/respond.h"

namespace edgellm::agent {

using server::ApiError;
using server::bad_request;
using server::respond_error;

namespace {

// An address as 16 bytes (IPv4 as ::ffff:a.b.c.d), or nullopt when it is not one.
std::optional<in6_addr> parse_address(const std::string& text) {
    in6_addr a{};
    in_addr v4{};
    if (::inet_pton(AF_INET6, text.c_str(), &a) == 1) return a;
    if (::inet_pton(AF_INET, text.c_str(), &v4) != 1) return std::nullopt;
    a.s6_addr[10] = a.s6_addr[11] = 0xff;
    std::memcpy(&a.s6_addr[12], &v4, 4);
    return a;
}

// The IPv4 address an IPv6 one carries (IPv4-mapped, or NAT64's 64:ff9b::/96), as bytes.
std::optional<std::array<uint8_t, 4>> embedded_v4(const in6_addr& a) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (std::memcmp(a.s6_addr, mapped, 12) != 0 && std::memcmp(a.s6_addr, nat64, 12) != 0)
        return std::nullopt;
    return std::array<uint8_t, 4>{a.s6_addr[12], a.s6_addr[13], a.s6_addr[14], a.s6_addr[15]};
}

bool is_loopback(const in6_addr& a) {
    if (auto v4 = embedded_v4(a)) return (*v4)[0] == 127;
    return IN6_IS_ADDR_LOOPBACK(&a);
}

// Whether a is one of this machine's interface addresses.
bool is_own_interface(const in6_addr& a) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return false;
    bool own = false;
    for (const ifaddrs* i = list; i && !own; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        char text[INET6_ADDRSTRLEN] = "";
        if (i->ifa_addr->sa_family == AF_INET)
            ::inet_ntop(AF_INET, &((const sockaddr_in*)i->ifa_addr)->sin_addr, text, sizeof text);
        else if (i->ifa_addr->sa_family == AF_INET6)
            ::inet_ntop(AF_INET6, &((const sockaddr_in6*)i->ifa_addr)->sin6_addr, text,
                        sizeof text);
        const auto b = parse_address(text);
        own = b && std::memcmp(b->s6_addr, a.s6_addr, 16) == 0;
    }
    ::freeifaddrs(list);
    return own;
}

// What kind of address the proxy never reaches a is, or nullptr.
const char* forbidden_kind(const in6_addr& a) {
    if (auto v4 = embedded_v4(a)) {
        const auto [b0, b1, b2, b3] = *v4;
        if (b0 == 169 && b1 == 254 && b2 == 169 && b3 == 254) return "a cloud metadata address";
        if (b0 == 100 && b1 == 100 && b2 == 100 && b3 == 200) return "a cloud metadata address";
        if (b0 == 169 && b1 == 254) return "a link-local address";
        if (b0 == 0) return "the unspecified address (this machine)";
        if (b0 >= 224) return "a multicast or broadcast address";
        return nullptr;
    }
    static const uint8_t ec2[16] = {0xfd, 0, 0, 0xec, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    if (std::memcmp(a.s6_addr, ec2, 16) == 0) return "a cloud metadata address";
    if (IN6_IS_ADDR_LINKLOCAL(&a)) return "a link-local address";
    if (IN6_IS_ADDR_UNSPECIFIED(&a)) return "the unspecified address (this machine)";
    if (IN6_IS_ADDR_MULTICAST(&a)) return "a multicast address";
    return nullptr;
}

// Names of cloud metadata services (their addresses are refused too; the name is refused
// before it is resolved, as its answer may be one the list does not know).
bool metadata_name(std::string host) {
    for (char& c : host) c = (char)std::tolower((unsigned char)c);
    while (!host.empty() && host.back() == '.') host.pop_back();
    for (const char* name : {"metadata.google.internal", "metadata", "instance-data",
                             "instance-data.ec2.internal", "metadata.azure.internal"})
        if (host == name) return true;
    return false;
}

// The host of http://HOST[:PORT]/... ([v6] without its brackets).
std::string url_host(const std::string& url) {
    const std::string rest = url.substr(7);
    const std::string hostport = rest.substr(0, rest.find('/'));
    if (!hostport.empty() && hostport[0] == '[') return hostport.substr(1, hostport.find(']') - 1);
    return hostport.substr(0, hostport.rfind(':'));
}

}  // namespace

bool is_loopback_address(const std::string& address) {
    const auto a = parse_address(address);
    return a && is_loopback(*a);
}

std::string proxy_refusal(const std::string& address, int port, int own_port, bool client_local) {
    const auto a = parse_address(address);
    if (!a) return address + " is not an IP address";
    const std::string where = address + ":" + std::to_string(port);
    if (const char* kind = forbidden_kind(*a)) return where + " is " + kind;
    const bool loopback = is_loopback(*a);
    if (port == own_port && (loopback || is_own_interface(*a)))
        return where + " is this server itself";
    if (loopback && !client_local)
        return where + " is this machine's loopback, and the request came from another machine";
    return "";
}

void forward_cors_proxy(const http::Request& req, http::Response& res, std::string* log_extra,
                        int own_port) {
    const auto it = req.query.find("url");
    if (it == req.query.end() || it->second.empty())
        return respond_error(res, bad_request("give ?url=http://HOST[:PORT]/PATH"));
    const std::string& url = it->second;
    if (url.rfind("https://", 0) == 0)
        return respond_error(res, bad_request("the proxy speaks plain HTTP only (no TLS here): " + url));
    if (url.rfind("http://", 0) != 0) return respond_error(res, bad_request("not an http:// URL: " + url));
    auto refuse = [&](const std::string& why) {
        *log_extra = " | " + req.method + " " + url + " -> refused: " + why;
        respond_error(res, {403, "permission_error", "the proxy does not reach " + url + ": " + why, {}});
    };
    if (metadata_name(url_host(url))) return refuse(url_host(url) + " is a cloud metadata service");
    const size_t slash = url.find('/', 7);
    const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
    std::vector<std::pair<std::string, std::string>> headers;
    const std::string prefix = "x-llama-server-proxy-header-";
    std::string content_type = "application/json";
    for (const auto& [name, value] : req.headers) {
        if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size())
            headers.emplace_back(name.substr(prefix.size()), value);
        if (name == "content-type") content_type = value;
    }
    client::Timeouts t;
    t.connect_ms = 5000;
    t.total_ms = 60000;
    client::StreamControl ctl;
    std::string refused;
    const bool client_local = is_loopback_address(req.remote_addr);
    ctl.vet_address = [&](const std::string& address, int port) {
        const std::string why = proxy_refusal(address, port, own_port, client_local);
        if (!why.empty()) refused = why;
        return why;
    };
    client::HttpResult r = client::http_request(client::Endpoint(base), req.method, path, req.body, t, {},
                                                &ctl, content_type, headers);
    if (r.status == 0 && !refused.empty()) return refuse(refused);
    *log_extra = " | " + req.method + " " + url + " -> " + std::to_string(r.status);
    if (r.status == 0)
        return respond_error(res, {502, "proxy_error", "the proxy could not reach " + url + ": " + r.error, {}});
    std::string type;
    for (const auto& [name, value] : r.headers)
        if (name == "content-type") type = value;
    res.send(r.status, type, r.body);
}

}  // namespace edgellm::agent
