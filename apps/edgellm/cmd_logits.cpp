// edgellm logits -m MODEL --tokens "ID ID ..." --out FILE [-c N] [--kv-type T] [-ctk T] [-ctv T]
// [-t N]
// Evaluates the tokens as one batch at positions 0..n-1 and writes float32 little-endian
// logits [n_tokens][n_vocab] for every position.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "edgellm/model.h"

namespace edgellm::cli {

namespace {

// Write through a temporary file and a rename: never a half-written output.
bool write_atomically(const std::string& path, const void* data, size_t bytes, std::string* err) {
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) {
        *err = tmp + ": " + std::strerror(errno);
        return false;
    }
    bool ok = std::fwrite(data, 1, bytes, f) == bytes;
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        *err = path + ": write failed: " + std::strerror(errno);
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace

int cmd_logits(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("logits", args, &s)) return *done;
    if (!s.model) return fail("logits", "missing -m MODEL", 2);
    if (!s.io.ids) return fail("logits", "missing --tokens \"ID ID ...\"", 2);
    if (!s.io.out) return fail("logits", "missing --out FILE", 2);
    const std::string& model_path = *s.model;
    const std::string& out_path = *s.io.out;
    const std::vector<int32_t>& tokens = *s.io.ids;
    std::string err = choose_kernels(s.kernels);
    if (!err.empty()) return fail("logits", err, 2);

    auto model = Model::load(model_path);
    if (!model) return fail("logits", model.error());
    ContextParams cp;
    cp.n_ctx = std::max<int64_t>({(int64_t)tokens.size(), 16, s.ctx.n_ctx});
    cp.n_batch = (int64_t)tokens.size();
    cp.n_outputs = (int64_t)tokens.size();
    cp.type_k = s.ctx.type_k;
    cp.type_v = s.ctx.type_v;
    cp.n_threads = s.ctx.n_threads;
    auto ctx = Context::create(**model, cp);
    if (!ctx) return fail("logits", ctx.error());
    const auto t0 = std::chrono::steady_clock::now();
    auto logits = (*ctx)->eval(tokens, true);
    if (!logits) return fail("logits", logits.error());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!write_atomically(out_path, logits->data(), logits->size_bytes(), &err))
        return fail("logits", err);
    std::fprintf(stderr, "edgellm logits: %zu tokens x %lld vocab in %.1f ms -> %s\n",
                 tokens.size(), (long long)(*model)->hparams().n_vocab, ms, out_path.c_str());
    return 0;
}

}  // namespace edgellm::cli
