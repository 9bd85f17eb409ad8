// The llama.cpp reference's logits for a token sequence, for golden files. Built by
// scripts/reference.sh against the reference's own libllama and ggml (never part of
// edgellm's build). The tokens go in as ONE batch at positions 0..n-1 and the logits of
// every position (or the last N) are written as raw little-endian float32
// [rows][n_vocab]; a JSON line on stdout says what was written.
//
//   dump_logits --model F.gguf (--tokens 1,2,3 | --tokens-file FILE) --out F.f32
//               [--threads 2] [--ctx N] [--kv f16|q8_0|...] [--fa on|off] [--last N] [--repack]
//   dump_logits --model F.gguf --tokenize TEXT [--no-bos] [--no-parse-special]
//
// --tokenize prints llama.cpp's token ids for TEXT, comma-separated (what --tokens takes).
// Weights are not repacked unless --repack (llama.cpp's default, use_extra_bufts: its
// repacked Q4_1 crashes on AMX machines, and which types it repacks, into which kernels,
// depends on the CPU, so logits made with it depend on the machine). A quantized
// V cache needs flash attention in llama.cpp, so --kv other than f16/f32/bf16 turns it on
// unless --fa says otherwise.
#include "ggml-backend.h"
#include "llama.h"

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// ggml keeps floats in the host's order and the files are little-endian
static_assert(std::endian::native == std::endian::little, "golden files are little-endian");

namespace {

struct Options {
    std::string model, tokens, tokens_file, out, tokenize, kv = "f16", fa;
    int threads = 2, ctx = 0, last = 0;
    bool bos = true, parse_special = true, repack = false, verbose = false;
};

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "dump_logits: %s\n", why.c_str());
    std::exit(1);
}

void usage(FILE* f) {
    std::fprintf(
        f,
        "usage: dump_logits --model F.gguf (--tokens 1,2,3 | --tokens-file FILE) --out F.f32\n"
        "                   [--threads N] [--ctx N] [--kv TYPE] [--fa on|off] [--last N] "
        "[--repack]\n"
        "       dump_logits --model F.gguf --tokenize TEXT [--no-bos] [--no-parse-special]\n"
        "  [--verbose] shows llama.cpp's log\n");
}

int parse_int(const std::string& flag, const std::string& s, int min) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || v < min || v > INT32_MAX)
        fail(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + s + "'");
    return (int)v;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--model" || a == "-m")
            o.model = value();
        else if (a == "--tokens")
            o.tokens = value();
        else if (a == "--tokens-file")
            o.tokens_file = value();
        else if (a == "--out" || a == "-o")
            o.out = value();
        else if (a == "--tokenize")
            o.tokenize = value();
        else if (a == "--kv")
            o.kv = value();
        else if (a == "--fa")
            o.fa = value();
        else if (a == "--threads" || a == "-t")
            o.threads = parse_int(a, value(), 1);
        else if (a == "--ctx" || a == "-c")
            o.ctx = parse_int(a, value(), 0);
        else if (a == "--last")
            o.last = parse_int(a, value(), 1);
        else if (a == "--repack")
            o.repack = true;
        else if (a == "--no-bos")
            o.bos = false;
        else if (a == "--no-parse-special")
            o.parse_special = false;
        else if (a == "--verbose")
            o.verbose = true;
        else if (a == "--help" || a == "-h") {
            usage(stdout);
            std::exit(0);
        } else {
            usage(stderr);
            fail("unknown argument '" + a + "'");
        }
    }
    if (o.model.empty()) fail("--model is required");
    if (o.fa != "" && o.fa != "on" && o.fa != "off") fail("--fa: on or off, got '" + o.fa + "'");
    if (o.tokenize.empty()) {
        if (o.tokens.empty() == o.tokens_file.empty())
            fail("give --tokens or --tokens-file (one of them)");
        if (o.out.empty()) fail("--out is required");
    }
    return o;
}

// Token ids separated by commas, whitespace or JSON brackets ("1,2,3", "[1, 2, 3]", one a line).
std::vector<llama_token> parse_tokens(const std::string& text, const std::string& where) {
    std::vector<llama_token> ids;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        ids.push_back(parse_int(where, cur, 0));
        cur.clear();
    };
    for (char ch : text) {
        if (ch == ',' || ch == '[' || ch == ']' || ch == ' ' || ch == '\n' || ch == '\t' ||
            ch == '\r')
            flush();
        else
            cur += ch;
    }
    flush();
    if (ids.empty()) fail(where + ": no token ids");
    return ids;
}

ggml_type kv_type(const std::string& name) {
    // the cache types llama.cpp's tools accept (common/arg.cpp's kv_cache_types)
    for (ggml_type t :
         {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
          GGML_TYPE_Q4_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1})
        if (name == ggml_type_name(t)) return t;
    fail("--kv: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1, got '" + name + "'");
}

int tokenize(const llama_vocab* vocab, const Options& o) {
    const int32_t len = (int32_t)o.tokenize.size();
    std::vector<llama_token> ids(o.tokenize.size() + 2);
    int32_t n = llama_tokenize(vocab, o.tokenize.data(), len, ids.data(), (int32_t)ids.size(),
                               o.bos, o.parse_special);
    if (n < 0) {  // more tokens than bytes + 2 (a BOS and an EOS): the size it needs
        ids.resize(-n);
        n = llama_tokenize(vocab, o.tokenize.data(), len, ids.data(), (int32_t)ids.size(), o.bos,
                           o.parse_special);
    }
    if (n < 0) fail("llama_tokenize failed");
    for (int32_t i = 0; i < n; ++i) std::printf(i ? ",%d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    static bool verbose;
    verbose = o.verbose;
    llama_log_set(
        [](ggml_log_level level, const char* text, void*) {
            if (verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
        },
        nullptr);
    ggml_backend_load_all();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = o.repack;
    mp.vocab_only = !o.tokenize.empty();
    llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) fail("cannot load " + o.model + " (--verbose shows llama.cpp's reason)");
    const llama_vocab* vocab = llama_model_get_vocab(model);
    if (!o.tokenize.empty()) {
        const int rc = tokenize(vocab, o);
        llama_model_free(model);
        return rc;
    }

    std::string text = o.tokens;
    if (!o.tokens_file.empty()) {
        std::ifstream in(o.tokens_file);
        if (!in) fail("cannot read " + o.tokens_file);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    const std::vector<llama_token> ids =
        parse_tokens(text, o.tokens_file.empty() ? "--tokens" : o.tokens_file);
    const int n = (int)ids.size();
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (llama_token t : ids)
        if (t >= n_vocab)
            fail("token id " + std::to_string(t) + " is not below the vocabulary's " +
                 std::to_string(n_vocab));
    if (o.last > n)
        fail("--last " + std::to_string(o.last) + " is more than the " + std::to_string(n) +
             " tokens");
    if (o.ctx && o.ctx < n)
        fail("--ctx " + std::to_string(o.ctx) + " is less than the " + std::to_string(n) +
             " tokens");

    const ggml_type kv = kv_type(o.kv);
    const bool quantized_kv = kv != GGML_TYPE_F32 && kv != GGML_TYPE_F16 && kv != GGML_TYPE_BF16;
    const bool fa = o.fa.empty() ? quantized_kv : o.fa == "on";
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = o.ctx ? o.ctx : n;
    cp.n_batch = cp.n_ubatch = n;  // one batch, one micro-batch: the whole sequence at once
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o.threads;
    cp.type_k = cp.type_v = kv;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("cannot make a context (--verbose shows llama.cpp's reason)");

    const int rows = o.last ? o.last : n;
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i >= n - rows;
    }
    batch.n_tokens = n;
    if (const int rc = llama_decode(ctx, batch); rc != 0)
        fail("llama_decode returned " + std::to_string(rc));

    FILE* f = std::fopen(o.out.c_str(), "wb");
    if (!f) fail("cannot write " + o.out + ": " + std::strerror(errno));
    for (int r = 0; r < rows; ++r) {
        const float* logits = llama_get_logits_ith(ctx, n - rows + r);
        if (!logits) fail("no logits for position " + std::to_string(n - rows + r));
        if (std::fwrite(logits, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab)
            fail("short write to " + o.out);
    }
    if (std::fclose(f) != 0) fail("cannot write " + o.out);
    std::printf(
        "{\"n_tokens\": %d, \"n_vocab\": %d, \"rows\": %d, \"kv_type\": \"%s\", \"flash_attn\": "
        "%s, "
        "\"threads\": %d, \"repack\": %s}\n",
        n, n_vocab, rows, ggml_type_name(kv), fa ? "true" : "false", o.threads,
        o.repack ? "true" : "false");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
