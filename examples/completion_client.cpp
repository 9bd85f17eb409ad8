// Seed 001's client, on the SDK's HTTP layer: POST /completion with the prompt, n_predict,
// temperature 0.7 and stream false (on a Raspberry Pi a whole reply is cheaper than many
// frames), a 60 s timeout (a Pi decodes slowly), then the content, the tokens predicted and
// the speed. Errors are told apart as the seed's LlamaError is: the network, or the parse.
//
//   completion_client [--url http://localhost:8088] [-n 128] PROMPT
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "edgellm/client.h"

int main(int argc, char** argv) {
    using namespace edgellm::client;
    std::string url = "http://localhost:8088", prompt = "解释Rust中的所有权系统";
    int n_predict = 128;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--url") && i + 1 < argc) url = argv[++i];
        else if (!std::strcmp(argv[i], "-n") && i + 1 < argc) n_predict = std::atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            std::fprintf(stderr, "usage: completion_client [--url URL] [-n N] [PROMPT]\n");
            return 2;
        } else prompt = argv[i];
    }
    const nlohmann::json req = {{"prompt", prompt}, {"n_predict", n_predict}, {"temperature", 0.7},
                                {"stream", false}};
    const Timeouts t{2000, 60000, 60000};
    HttpResult r = http_request(Endpoint(url), "POST", "/completion", req.dump(), t);
    if (r.failure != Failure::none) {
        std::fprintf(stderr, "network error: %s\n", r.error.c_str());
        return 1;
    }
    const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || !body.is_object() || !body.contains("content") || !body["content"].is_string()) {
        std::fprintf(stderr, "parse error: HTTP %d: %.200s\n", r.status, r.body.c_str());
        return 1;
    }
    double tps = 0;
    if (body.contains("timings") && body["timings"].is_object())
        tps = body["timings"].value("predicted_per_second", 0.0);
    std::printf("%s\n", body["content"].get<std::string>().c_str());
    std::fprintf(stderr, "tokens_predicted %d, %.1f tokens/s\n", body.value("tokens_predicted", 0), tps);
    return 0;
}
