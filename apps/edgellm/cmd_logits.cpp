// edgellm logits -m MODEL --tokens "ID ID ..." --out FILE [--kv-type T] [-ctk T] [-ctv T] [-t N]
// Evaluates the tokens as one batch at positions 0..n-1 and writes float32 little-endian
// logits [n_tokens][n_vocab] for every position.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "edgellm/model.h"

namespace edgellm::cli {

bool parse_token_ids(const std::string& s, std::vector<int32_t>* out, std::string* err) {
    std::istringstream in(s);
    std::string word;
    while (in >> word) {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(word.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX) {
            *err = "--tokens: \"" + word + "\" is not a token id";
            return false;
        }
        out->push_back((int32_t)v);
    }
    if (out->empty()) {
        *err = "--tokens: no token ids given";
        return false;
    }
    return true;
}

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

std::optional<TensorType> parse_kv_type(const std::string& s) {
    for (TensorType t : kv_cache_types())
        if (s == tensor_type_name(t)) return t;
    return std::nullopt;
}

std::string kv_type_names() {
    std::string out;
    for (TensorType t : kv_cache_types()) out += std::string(out.empty() ? "" : ", ") + tensor_type_name(t);
    return out;
}

void add_kv_options(ArgParser& p, bool both_flag) {
    if (both_flag) p.option({"--kv-type"}, "T", "KV cache type of keys and values alike: " + kv_type_names());
    p.option({"-ctk", "--cache-type-k"}, "T", "KV cache type of the keys (default f16): " + kv_type_names());
    p.option({"-ctv", "--cache-type-v"}, "T", "KV cache type of the values (default f16)");
}

bool read_kv_options(const ArgParser& p, TensorType* k, TensorType* v, std::string* err) {
    struct Flag {
        const char* name;
        TensorType* a;
        TensorType* b;
    };
    for (const Flag& f : {Flag{"--kv-type", k, v}, Flag{"--cache-type-k", k, nullptr},
                          Flag{"--cache-type-v", v, nullptr}}) {
        if (!p.has(f.name)) continue;
        const std::string s = p.get_or(f.name, "");
        auto t = parse_kv_type(s);
        if (!t) {
            *err = std::string(f.name) + " takes " + kv_type_names() + ", got \"" + s + "\"";
            return false;
        }
        *f.a = *t;
        if (f.b) *f.b = *t;
    }
    return true;
}

int cmd_logits(const std::vector<std::string>& args) {
    ArgParser p("logits", "edgellm logits -m MODEL --tokens \"ID ID ...\" --out FILE [options]");
    p.option({"-m", "--model"}, "FILE", "GGUF model file");
    p.option({"--tokens"}, "\"ID ...\"",
             "token ids, space-separated, evaluated at positions 0..n-1");
    p.option({"--out", "-o"}, "FILE", "output: float32 little-endian [n_tokens][n_vocab]");
    add_kv_options(p);
    p.option({"-t", "--threads"}, "N", "threads (default: all cores)");
    p.option({"--kernels"}, "NAME", "kernel set: ref, avx2, ... (default: the best that is not opt-in)");
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    if (!p.positional().empty())
        return fail("logits", "unexpected argument " + p.positional()[0], 2);
    const auto model_path = p.get("-m");
    const auto tokens_arg = p.get("--tokens");
    const auto out_path = p.get("--out");
    if (!model_path) return fail("logits", "missing -m MODEL", 2);
    if (!tokens_arg) return fail("logits", "missing --tokens \"ID ID ...\"", 2);
    if (!out_path) return fail("logits", "missing --out FILE", 2);
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;
    {
        std::string why;
        if (!read_kv_options(p, &type_k, &type_v, &why)) return fail("logits", why, 2);
    }
    int64_t threads = 0;
    if (!p.get_int("-t", 1, 1024, &threads, &err)) return fail("logits", err, 2);
    std::vector<int32_t> tokens;
    if (!parse_token_ids(*tokens_arg, &tokens, &err)) return fail("logits", err, 2);
    err = choose_kernels(p.get_or("--kernels", ""));
    if (!err.empty()) return fail("logits", err, 2);

    auto model = Model::load(*model_path);
    if (!model) return fail("logits", model.error());
    ContextParams cp;
    cp.n_ctx = std::max<int64_t>((int64_t)tokens.size(), 16);
    cp.n_batch = (int64_t)tokens.size();
    cp.n_outputs = (int64_t)tokens.size();
    cp.type_k = type_k;
    cp.type_v = type_v;
    cp.n_threads = (int)threads;
    auto ctx = Context::create(**model, cp);
    if (!ctx) return fail("logits", ctx.error());
    const auto t0 = std::chrono::steady_clock::now();
    auto logits = (*ctx)->eval(tokens, true);
    if (!logits) return fail("logits", logits.error());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!write_atomically(*out_path, logits->data(), logits->size_bytes(), &err))
        return fail("logits", err);
    std::fprintf(stderr, "edgellm logits: %zu tokens x %lld vocab in %.1f ms -> %s\n",
                 tokens.size(), (long long)(*model)->hparams().n_vocab, ms, out_path->c_str());
    return 0;
}

}  // namespace edgellm::cli
