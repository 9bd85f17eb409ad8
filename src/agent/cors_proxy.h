// The chat page's /cors-proxy?url=http://...: a request forwarded for it (MCP over HTTP to
// servers that send no CORS headers), and the addresses it never reaches.
#pragma once

#include <string>

#include "server/http/transport.h"

namespace edgellm::agent {

// Why the proxy may not connect to `address` (numeric, as the host name resolved) on
// `port`, or "" when it may. own_port: the port this server listens on; client_local: the
// request came from this machine (a loopback address). Refused:
//   - cloud metadata addresses: 169.254.169.254, fd00:ec2::254, 100.100.100.200;
//   - link-local addresses (169.254.0.0/16, fe80::/10), the unspecified ones (0.0.0.0/8, ::),
//     multicast and broadcast;
//   - this server itself: its port on a loopback address or on an address of this machine
//     (its own routes, the admin ones among them, or a loop through the proxy);
//   - any loopback address (127.0.0.0/8, ::1) for a client that is not on this machine:
//     services that listen on loopback only are not for other machines to reach through
//     us. (A client on this machine could reach them itself.)
// An IPv4 address inside IPv6 (::ffff:a.b.c.d, 64:ff9b::a.b.c.d) is judged as that IPv4
// address. Private networks (10/8, 172.16/12, 192.168/16) are allowed: reaching an MCP
// server on the LAN is what the proxy is for, and it is off unless --ui-mcp-proxy.
std::string proxy_refusal(const std::string& address, int port, int own_port, bool client_local);

// Whether a request's remote address is this machine's loopback.
bool is_loopback_address(const std::string& address);

// /cors-proxy?url=http://...: the request forwarded (plain HTTP only), with none of the
// client's headers but those it names as x-llama-server-proxy-header-NAME. The host name is
// resolved once and each address vetted by proxy_refusal() just before the connect to it
// (a DNS answer cannot change in between); refused: 403 naming why. own_port: the port
// this server listens on.
void forward_cors_proxy(const http::Request& req, http::Response& res, std::string* log_extra,
                        int own_port);

}  // namespace edgellm::agent
