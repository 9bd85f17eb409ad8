// The request head parser (request line, header lines, framing), percent-decoding, and the
// status texts and error bodies the transport answers with by itself.
#include "server/http/transport.h"

#include <algorithm>
#include <cstdio>

#include "server/http/http_text.h"

namespace edgellm::http {

using namespace text;

// ---- small public helpers -----------------------------------------------------------------

const std::string* Request::header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers)
        if (name == lower_name) return &value;
    return nullptr;
}

const char* reason_phrase(int status) {
    // clang-format off
    static const std::pair<int, const char*> kPhrases[] = {
        {100, "Continue"}, {200, "OK"}, {201, "Created"}, {202, "Accepted"},
        {204, "No Content"}, {206, "Partial Content"}, {301, "Moved Permanently"},
        {302, "Found"}, {304, "Not Modified"}, {307, "Temporary Redirect"},
        {308, "Permanent Redirect"}, {400, "Bad Request"}, {401, "Unauthorized"},
        {403, "Forbidden"}, {404, "Not Found"}, {405, "Method Not Allowed"},
        {408, "Request Timeout"}, {409, "Conflict"}, {413, "Content Too Large"},
        {415, "Unsupported Media Type"}, {422, "Unprocessable Content"},
        {429, "Too Many Requests"}, {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"}, {501, "Not Implemented"}, {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"}};
    // clang-format on
    for (const auto& [code, phrase] : kPhrases)
        if (code == status) return phrase;
    return "Unknown";
}

std::pair<std::string, std::string> default_error_body(int status, const std::string& message) {
    // The types llama-server uses for the same codes.
    const char* type = status == 401   ? "authentication_error"
                       : status == 403 ? "permission_error"
                       : status == 404 ? "not_found_error"
                       : status == 501 ? "not_supported_error"
                       : status == 503 ? "unavailable_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    std::string body = "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":\"" +
                       json_escape(message) + "\",\"type\":\"" + type + "\"}}";
    return {"application/json; charset=utf-8", std::move(body)};
}

std::string percent_decode(std::string_view s, bool plus_is_space) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
            hex_value(s[i + 2]) >= 0) {
            out += (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else if (s[i] == '+' && plus_is_space) {
            out += ' ';
        } else {
            out += s[i];
        }
    }
    return out;
}

// ---- the request parser -------------------------------------------------------------------

int parse_request_head(std::string_view head, const Options& opts, Request* req,
                       RequestFraming* framing, std::string* error) {
    auto fail = [&](int status, std::string msg) {
        *error = std::move(msg);
        return status;
    };
    // Split into lines on LF, dropping one CR before it; the head ends with an empty line.
    std::vector<std::string_view> lines;
    while (!head.empty()) {
        const size_t nl = head.find('\n');
        std::string_view line = head.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (nl == std::string_view::npos) return fail(400, "request head not terminated");
        head.remove_prefix(nl + 1);
        if (line.empty()) break;
        lines.push_back(line);
    }
    if (lines.empty()) return fail(400, "empty request");
    if ((int)lines.size() - 1 > opts.max_header_count)
        return fail(431, "more than " + std::to_string(opts.max_header_count) + " headers");

    // Request line: method SP request-target SP HTTP-version (single spaces).
    const std::string_view rl = lines[0];
    const size_t sp1 = rl.find(' '), sp2 = rl.rfind(' ');
    if (sp1 == std::string_view::npos || sp1 == sp2) return fail(400, "malformed request line");
    const std::string_view method = rl.substr(0, sp1);
    const std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = rl.substr(sp2 + 1);
    if (!is_token(method)) return fail(400, "malformed request method");
    if (target.empty()) return fail(400, "empty request target");
    for (unsigned char c : target)
        if (c <= 0x20 || c == 0x7f) return fail(400, "malformed request target");
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !is_digit(version[5]) ||
        version[6] != '.' || !is_digit(version[7]))
        return fail(400, "malformed HTTP version");
    if (version[5] != '1') return fail(505, "HTTP version not supported: " + std::string(version));
    req->version_minor = version[7] == '0' ? 0 : 1;  // 1.2+ is read as 1.1 (RFC 9110 2.5)
    req->method = std::string(method);
    req->target = std::string(target);

    // Path and query. Absolute-form ("http://host/p?q") keeps only the path; "*" is itself.
    std::string_view path = target.substr(0, target.find_first_of("?#"));
    std::string_view query;
    if (const size_t q = target.find('?'); q != std::string_view::npos)
        query = target.substr(q + 1, target.find('#', q) - q - 1);
    std::string_view absolute_authority;  // absolute-form: its host is the request's (below)
    bool absolute = false;
    if (path.substr(0, 7) == "http://" || path.substr(0, 8) == "https://") {
        const size_t start = path.find("//") + 2;
        const size_t slash = path.find('/', start);
        absolute = true;
        absolute_authority = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        path = slash == std::string_view::npos ? "/" : path.substr(slash);
    } else if ((path.empty() || path.front() != '/') && target != "*") {
        return fail(400, "malformed request target");
    }
    req->path = percent_decode(path, false);
    while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        if (!pair.empty()) {
            const size_t eq = pair.find('=');
            std::string key = percent_decode(pair.substr(0, eq), true);
            std::string value =
                eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1), true);
            req->query.emplace(std::move(key), std::move(value));
        }
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
    }

    // Header fields: token ":" OWS value OWS. No obsolete line folding, no control bytes.
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::string_view line = lines[i];
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) return fail(400, "malformed header line");
        const std::string_view name = line.substr(0, colon);
        if (!is_token(name)) return fail(400, "malformed header name");
        const std::string_view value = trim_ows(line.substr(colon + 1));
        for (unsigned char c : value)
            if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(400, "control byte in header");
        std::string lower(name);
        for (char& c : lower) c = ascii_lower(c);
        req->headers.emplace_back(std::move(lower), std::string(value));
    }

    // Host names the server the client means (the Host check's input): two are a 400 (RFC
    // 9112 3.2: which one counts differs between servers), and an absolute-form target's
    // authority replaces it (3.2.2).
    if (std::count_if(req->headers.begin(), req->headers.end(), [](const auto& h) { return h.first == "host"; }) > 1)
        return fail(400, "more than one Host header");
    if (absolute) {
        std::erase_if(req->headers, [](const auto& h) { return h.first == "host"; });
        req->headers.emplace_back("host", std::string(absolute_authority));
    }

    // Body framing and connection handling.
    *framing = RequestFraming{};
    bool has_length = false, close = false, keep_alive = false;
    for (const auto& [name, value] : req->headers) {
        if (name == "content-length") {
            size_t n = 0;
            if (!parse_content_length(value, &n))
                return fail(400, "invalid Content-Length: " + value.substr(0, 64));
            if (has_length && n != framing->content_length)
                return fail(400, "conflicting Content-Length headers");
            has_length = true;
            framing->content_length = n;
        } else if (name == "transfer-encoding") {
            if (req->version_minor == 0) return fail(400, "Transfer-Encoding in HTTP/1.0");
            if (framing->chunked || !iequals(value, "chunked"))
                return fail(501, "unsupported Transfer-Encoding: " + value.substr(0, 64));
            framing->chunked = true;
        } else if (name == "connection") {
            close = close || has_token(value, "close");
            keep_alive = keep_alive || has_token(value, "keep-alive");
        } else if (name == "expect") {
            framing->expect_continue = req->version_minor == 1 && iequals(value, "100-continue");
        }
    }
    // Both is how request smuggling starts (RFC 9112 6.1): refuse rather than pick one.
    if (has_length && framing->chunked)
        return fail(400, "both Content-Length and Transfer-Encoding");
    framing->keep_alive = req->version_minor == 1 ? !close : (keep_alive && !close);
    return 0;
}

}  // namespace edgellm::http
