// Resumable streams (X-Conversation-Id): GET /v1/stream, DELETE /v1/stream,
// POST /v1/streams/lookup.
#include "server/server_impl.h"

#include <cstdlib>

namespace edgellm::server {

// GET /v1/stream?conv_id=ID&from=OFFSET: a resumable stream's bytes from OFFSET, then the
// rest as it comes, until the reply ends.
void Server::Impl::stream_get(const http::Request& req, http::Response& res) {
    const auto it = req.query.find("conv_id");
    if (it == req.query.end() || it->second.empty()) return send_error(res, bad_request("give ?conv_id=ID"));
    auto s = stream_sessions.get(it->second);
    if (!s) return send_error(res, {404, "not_found_error", "Stream not found or expired", {}});
    size_t from = 0;
    if (auto f = req.query.find("from"); f != req.query.end()) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(f->second.c_str(), &end, 10);
        if (f->second.empty() || *end != '\0') return send_error(res, bad_request("'from' must be a byte offset"));
        from = (size_t)v;
    }
    if (from < s->dropped())
        return send_error(res, bad_request("Stream offset lost (the oldest bytes were dropped), please restart"));
    if (!res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
    s->read_from(from, [&](std::string_view b) { return res.write(std::string(b)); },
                 [&] { return res.peer_gone() || stopping.load(); });
    res.end_stream();
}

// DELETE /v1/stream?conv_id=ID: stop it and forget it (204, also when it is not known).
void Server::Impl::stream_delete(const http::Request& req, http::Response& res) {
    const auto it = req.query.find("conv_id");
    if (it == req.query.end() || it->second.empty()) return send_error(res, bad_request("give ?conv_id=ID"));
    stream_sessions.evict(it->second, true);
    res.send(204, "application/json", "");
}

// POST /v1/streams/lookup {"conversation_ids": [...]}: the sessions of those ids only.
void Server::Impl::streams_lookup(const http::Request& req, http::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    std::vector<std::string> ids;
    if (body.is_object() && body.contains("conversation_ids") && body["conversation_ids"].is_array())
        for (const json& v : body["conversation_ids"])
            if (v.is_string() && !v.get<std::string>().empty()) ids.push_back(v.get<std::string>());
    json out = json::array();
    for (const auto& s : stream_sessions.lookup(ids))
        out.push_back({{"conversation_id", s->id()}, {"is_done", s->done()}, {"total_bytes", s->total()},
                       {"started_at", s->started_at()}, {"completed_at", s->completed_at()}});
    send_json(res, 200, out);
}

}  // namespace edgellm::server
