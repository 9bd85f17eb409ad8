#include "server/http/refusal_log.h"

#include <memory>

namespace edgellm::server {

namespace {

// Peers remembered at most; past it, refusals of one limit from any further peer share one
// entry, so many addresses (an IPv6 prefix) neither grow the map nor flood the log.
constexpr size_t kMaxPeers = 1024;
const std::string kOtherPeers = "(other peers)";

}  // namespace

const char* limit_flag(http::Limit limit) {
    using L = http::Limit;
    switch (limit) {
        case L::HeaderBytes: return "--max-header-bytes";
        case L::HeaderCount: return "--max-header-count";
        case L::BodyBytes: return "--max-body-bytes";
        case L::HeaderTime: return "--header-timeout";
        case L::BodyTime: return "--body-timeout";
        case L::ReadTime: return "--timeout";
        case L::Connections: return "--max-connections";
        case L::Threads: return "";
    }
    return "";
}

RefusalLog::RefusalLog(std::function<void(const std::string&)> log, std::chrono::seconds quiet,
                       std::function<Clock::time_point()> now)
    : log_(std::move(log)), quiet_(quiet), now_(std::move(now)) {}

void RefusalLog::operator()(const http::Refusal& r) {
    std::string line;
    {
        std::lock_guard<std::mutex> lock(mu_);
        const auto t = now_();
        if (seen_.size() >= kMaxPeers)
            for (auto it = seen_.begin(); it != seen_.end();)
                it = t - it->second.logged >= quiet_ && it->second.left_out == 0 ? seen_.erase(it)
                                                                                 : std::next(it);
        auto key = std::make_pair(r.peer, r.limit);
        if (seen_.size() >= kMaxPeers && !seen_.count(key)) key.first = kOtherPeers;
        auto [it, fresh] = seen_.try_emplace(key);
        Seen& s = it->second;
        if (!fresh && t - s.logged < quiet_) {
            ++s.left_out;
            return;
        }
        const std::string flag = limit_flag(r.limit);
        line = "refused " + r.peer + ": " + r.message + " (" + std::to_string(r.status) +
               (flag.empty() ? "" : ", " + flag);
        if (s.left_out > 0)
            line += "; " + std::to_string(s.left_out) + " more like it since the last line";
        line += ")";
        s = {t, 0};
    }
    log_(line);
}

std::function<void(const http::Refusal&)> refusal_logger(
    std::function<void(const std::string& line)> log) {
    auto shared = std::make_shared<RefusalLog>(std::move(log));
    return [shared](const http::Refusal& r) { (*shared)(r); };
}

}  // namespace edgellm::server
