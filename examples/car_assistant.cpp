// A car assistant's chat loop on the client SDK (include/edgellm/client.h), by seed 000's
// rules: car control and navigation never reach the LLM (the intent router answers them),
// everything else streams from the local server one call at a time, with the history kept
// under ~700 tokens, the seed's timeouts, and a canned reply (or a second endpoint) when
// the local server cannot answer. Ctrl-C during a reply stops it (barge-in); Ctrl-D quits.
//
//   car_assistant [--url http://127.0.0.1:8899] [--fallback URL] [--max-tokens 128]
//
// One utterance per line on stdin; the reply on stdout; one status line per turn on stderr.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "edgellm/client.h"

namespace {

edgellm::client::Client* g_client = nullptr;

void on_sigint(int) {
    if (g_client) g_client->cancel();  // (an atomic store: safe in a signal handler)
}

bool contains(std::string_view s, std::string_view w) { return s.find(w) != std::string_view::npos; }

// The intent split: what the head unit does itself. A real one asks the NPU's classifier.
std::optional<std::string> car_intent(std::string_view u) {
    struct Device { const char* zh; const char* en; };
    const Device devices[] = {{"空调", "air conditioning"}, {"车窗", "window"}, {"座椅加热", "seat heating"},
                              {"音乐", "music"}};
    for (const Device& d : devices) {
        if ((contains(u, "打开") || contains(u, "开启")) && contains(u, d.zh))
            return std::string("好的，已为您打开") + d.zh + "。";
        if (contains(u, "关闭") && contains(u, d.zh)) return std::string("好的，已为您关闭") + d.zh + "。";
        if (contains(u, "turn on") && contains(u, d.en)) return std::string("OK, ") + d.en + " on.";
        if (contains(u, "turn off") && contains(u, d.en)) return std::string("OK, ") + d.en + " off.";
    }
    if (size_t p = u.find("导航到"); p != std::string_view::npos)
        return "好的，正在为您导航到" + std::string(u.substr(p + strlen("导航到"))) + "。";
    if (size_t p = u.find("navigate to "); p != std::string_view::npos)
        return "OK, navigating to " + std::string(u.substr(p + 12)) + ".";
    return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace edgellm::client;
    ClientOptions o;
    o.system_prompt = "你是车载助手，回答简短口语化。";
    o.canned_reply = "抱歉，我现在有点忙，请稍后再试。";
    o.router = car_intent;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "car_assistant: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--url") o.primary.url = value();
        else if (a == "--fallback") o.fallback = Endpoint(value());
        else if (a == "--max-tokens") o.max_tokens = std::atoi(value().c_str());
        else if (a == "--first-token-timeout") o.timeouts.first_token_ms = std::atoi(value().c_str());
        else {
            std::fprintf(stderr, "usage: car_assistant [--url URL] [--fallback URL] [--max-tokens N] "
                                 "[--first-token-timeout MS]\n");
            return 2;
        }
    }
    Client client(o);
    g_client = &client;
    struct sigaction sa{};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, nullptr);

    const bool tty = isatty(0);
    std::string line;
    for (;;) {
        if (tty) std::fputs("> ", stdout), std::fflush(stdout);
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
        Reply r = client.chat(line, [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        });
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (r.source == Source::llm) {
            std::fprintf(stderr, "[llm: first token %.0f ms, %d tokens, %.1f tok/s, history %d tokens%s]\n",
                         r.first_token_ms, r.completion_tokens, r.decode_tokens_per_second, r.history_tokens,
                         r.turns_summarized ? ", older turns summarized" : "");
        } else if (r.source == Source::router) {
            std::fprintf(stderr, "[router: handled without the LLM]\n");
        } else {
            std::fprintf(stderr, "[%s after %s: %s%s]\n", source_name(r.source), failure_name(r.failure),
                         r.error.c_str(), r.slot_reset ? "; slot reset" : "");
        }
    }
    return 0;
}
