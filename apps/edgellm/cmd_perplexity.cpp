// edgellm perplexity -m MODEL -f TEXT [-c 512] [-b N] [-t N] [--chunks N] [--kv-type T]
//                    [--kl-save FILE | --kl-base FILE]
//
// Perplexity the way llama.cpp's perplexity tool measures it (tools/perplexity, function
// perplexity()), so numbers can be compared with it:
//   - tokenize the whole text once (BOS/EOS as the model asks, special tokens as text);
//   - cut it into n_chunks non-overlapping chunks of n_ctx tokens (the tail is dropped);
//   - per chunk: empty the KV cache, put BOS in place of the chunk's first token when the
//     model adds BOS, evaluate the chunk, and score only its second half: the NLL of token
//     i+1 under the logits of position i, for i in [n_ctx/2, n_ctx-1) (the first half only
//     gives every scored token a context of at least n_ctx/2 tokens);
//   - PPL = exp(mean NLL) over every scored position; its uncertainty is the standard error
//     of the mean NLL, sqrt(var / (n-1)), carried through exp: dPPL = PPL x stderr.
// Log-softmax is computed in double.
//
// --kl-save FILE keeps, per scored position, the reference's top-K distribution (K = 32 unless
// --kl-top-k says otherwise; format below), and
// --kl-base FILE measures how far this model's distributions are from it: mean KL(P_ref||Q)
// with its standard error, the 99th percentile, top-1 agreement, and PPL(ours)/PPL(ref).
//
// Tail approximation. Only the reference's K most likely tokens are kept, plus the total
// probability of the other n_vocab - K ("the tail"). KL is computed over K + 1 outcomes:
// the K tokens, and the tail lumped into one:
//     KL ~= sum_{i in topK} p_i log(p_i / q_i) + P_tail log(P_tail / Q_tail)
// where Q_tail = 1 - sum_{i in topK} q_i is this model's mass outside the reference's top K.
// By the chain rule of KL, the true value is this plus P_tail x KL(p|tail || q|tail), the
// divergence of the two distributions renormalised over the tail tokens: so this is a lower
// bound that misses only how the tail mass is spread, and it rises towards the true value as
// K grows. Measured on Qwen2.5-Coder-0.5B Q4_K_M (Tom Sawyer, 2 chunks of 512, q8_0 vs f16
// KV cache): K = 32 leaves 17% of the mass in the tail and gives a mean KLD of 0.0113,
// K = 256 6% and 0.0131, K = 4096 1.1% and 0.0139. --kl-top-k chooses K; llama.cpp instead
// stores the whole distribution, 2 bytes per token (300 KB a position for 150k tokens).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "commands.h"
#include "edgellm/model.h"
#include "edgellm/tokenizer.h"

namespace edgellm::cli {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the KL file is written in the host's byte order, which must be little-endian");

constexpr int64_t kMinCtx = PerplexitySettings::kMinCtx;
constexpr int32_t kMaxTopK = PerplexitySettings::kMaxTopK;

// KL reference file (--kl-save / --kl-base), little-endian:
//
//   offset  size   field
//   0       8      magic "EDGEKLD\0"
//   8       4      version (1)
//   12      4      n_vocab     rows of the reference's logits
//   16      4      n_ctx       tokens per chunk
//   20      4      n_chunks
//   24      4      top_k       K, tokens kept per scored position
//   28      4      bos         token put first in every chunk; -1: none (no BOS added)
//   32      8      vocab_hash  FNV-1a 64 of every token's text, each followed by a 0 byte
//   40      8      n_scored    n_chunks x (n_ctx - 1 - n_ctx/2)
//   48      4 x n_chunks x n_ctx      tokens, int32, as tokenized (before BOS replacement)
//   ...     n_scored records, chunk by chunk, position by position:
//           4      nll         float, -log p_ref(next token)
//           4      log_tail    float, log of the probability outside the top K (-inf: none)
//           4 x K  ids         int32, the K most likely tokens, most likely first
//           4 x K  logp        float, their log-probabilities
//
// The file's size must be exactly what the header implies.
struct KlHeader {
    char magic[8];
    uint32_t version;
    uint32_t n_vocab;
    uint32_t n_ctx;
    uint32_t n_chunks;
    uint32_t top_k;
    int32_t bos;
    uint64_t vocab_hash;
    uint64_t n_scored;
};
static_assert(sizeof(KlHeader) == 48);

constexpr char kKlMagic[8] = {'E', 'D', 'G', 'E', 'K', 'L', 'D', '\0'};
constexpr uint32_t kKlVersion = 1;

int64_t scored_per_chunk(int64_t n_ctx) {
    return n_ctx - 1 - n_ctx / 2;
}
size_t kl_record_bytes(int64_t k) {
    return 8 + 8 * (size_t)k;
}

// Identifies a vocabulary: two models with the same hash tokenize text the same way.
uint64_t vocab_hash(const Tokenizer& tok) {
    uint64_t h = 14695981039346656037ull;  // FNV-1a 64
    for (int32_t i = 0; i < tok.n_vocab(); ++i) {
        for (unsigned char c : tok.token_text(i)) h = (h ^ c) * 1099511628211ull;
        h = (h ^ 0u) * 1099511628211ull;
    }
    return h;
}

// Mean and standard error of a stream of values (llama.cpp's: sqrt(var / (n-1))).
struct MeanStat {
    double sum = 0, sum2 = 0;
    int64_t n = 0;
    void add(double v) {
        sum += v;
        sum2 += v * v;
        ++n;
    }
    double mean() const { return n ? sum / (double)n : 0.0; }
    double stderr_of_mean() const {
        if (n < 2) return 0.0;
        const double m = mean();
        const double var = sum2 / (double)n - m * m;
        return var > 0 ? std::sqrt(var / (double)(n - 1)) : 0.0;
    }
};

// log(sum_j exp(x_j)) over a row of logits, in double.
double log_sum_exp(const float* x, int64_t n) {
    float mx = x[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, x[j]);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp((double)x[j] - (double)mx);
    return (double)mx + std::log(s);
}

int32_t argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
        if (x[j] > x[best]) best = j;
    return (int32_t)best;
}

// The reference's view of one scored position, as stored in a KL file.
struct TopK {
    float nll = 0;
    float log_tail = 0;
    std::vector<int32_t> ids;  // [K], most likely first
    std::vector<float> logp;   // [K]
};

// Fill *t from a row of logits: top K by logit (ties: lower id first), log-probabilities
// and the tail mass. in_top is scratch [n_vocab], all zero on entry and on return. Returns
// the NLL of target in double.
double top_k_of_row(const float* x, int64_t n_vocab, int32_t target, int32_t k,
                    std::vector<uint8_t>& in_top, TopK* t) {
    const double lse = log_sum_exp(x, n_vocab);
    // Min-heap of the best k seen so far: the root is the weakest of them.
    auto weaker = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    std::vector<int32_t>& heap = t->ids;
    heap.clear();
    for (int32_t j = 0; j < (int32_t)n_vocab; ++j) {
        if ((int32_t)heap.size() < k) {
            heap.push_back(j);
            std::push_heap(heap.begin(), heap.end(), weaker);
        } else if (weaker(j, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), weaker);
            heap.back() = j;
            std::push_heap(heap.begin(), heap.end(), weaker);
        }
    }
    std::sort_heap(heap.begin(), heap.end(), weaker);  // most likely first
    t->logp.resize(heap.size());
    for (size_t i = 0; i < heap.size(); ++i) {
        t->logp[i] = (float)((double)x[heap[i]] - lse);
        in_top[(size_t)heap[i]] = 1;
    }
    double tail = 0;  // summed directly: 1 - sum(top) would cancel when the tail is tiny
    for (int64_t j = 0; j < n_vocab; ++j)
        if (!in_top[(size_t)j]) tail += std::exp((double)x[j] - lse);
    for (int32_t id : heap) in_top[(size_t)id] = 0;
    t->log_tail = tail > 0 ? (float)std::log(tail) : -std::numeric_limits<float>::infinity();
    const double nll = lse - (double)x[target];
    t->nll = (float)nll;
    return nll;
}

// KL(P_ref || Q) over the reference's top K plus the lumped tail (see the top of the file).
double kl_top_k(const float* x, int64_t n_vocab, double lse, const int32_t* ids, const float* logp,
                int32_t k, float log_tail, std::vector<uint8_t>& in_top) {
    double kl = 0;
    for (int32_t i = 0; i < k; ++i) {
        const double lp = logp[i];
        kl += std::exp(lp) * (lp - ((double)x[ids[i]] - lse));
        in_top[(size_t)ids[i]] = 1;
    }
    double q_tail = 0;
    for (int64_t j = 0; j < n_vocab; ++j)
        if (!in_top[(size_t)j]) q_tail += std::exp((double)x[j] - lse);
    for (int32_t i = 0; i < k; ++i) in_top[(size_t)ids[i]] = 0;
    if (std::isfinite(log_tail)) {
        const double p_tail = std::exp((double)log_tail);
        q_tail = std::max(q_tail, std::numeric_limits<double>::min());
        kl += p_tail * ((double)log_tail - std::log(q_tail));
    }
    return kl;
}

// Writes a KL file through a temporary file that is renamed into place only when complete.
class KlWriter {
  public:
    ~KlWriter() {
        if (f_) std::fclose(f_);
        if (!tmp_.empty()) std::remove(tmp_.c_str());
    }

    bool open(const std::string& path, const KlHeader& h, std::span<const int32_t> tokens,
              std::string* err) {
        path_ = path;
        tmp_ = path + ".tmp." + std::to_string(getpid());
        f_ = std::fopen(tmp_.c_str(), "wb");
        if (!f_) {
            *err = tmp_ + ": " + std::strerror(errno);
            tmp_.clear();
            return false;
        }
        put(&h, sizeof h);
        put(tokens.data(), tokens.size_bytes());
        return true;
    }

    void add(const TopK& t) {
        put(&t.nll, 4);
        put(&t.log_tail, 4);
        put(t.ids.data(), 4 * t.ids.size());
        put(t.logp.data(), 4 * t.logp.size());
    }

    bool commit(std::string* err) {
        const bool ok = ok_ && std::fclose(f_) == 0;
        f_ = nullptr;
        if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
            *err = path_ + ": write failed: " + std::strerror(errno);
            return false;
        }
        tmp_.clear();
        return true;
    }

  private:
    void put(const void* p, size_t n) { ok_ = ok_ && std::fwrite(p, 1, n, f_) == n; }
    std::string path_, tmp_;
    FILE* f_ = nullptr;
    bool ok_ = true;
};

// A KL file read whole and checked for internal consistency (not yet against a model).
struct KlFile {
    KlHeader h{};
    std::vector<int32_t> tokens;  // [n_chunks * n_ctx]
    std::vector<uint8_t> records;
    const uint8_t* record(int64_t i) const {
        return records.data() + (size_t)i * kl_record_bytes(h.top_k);
    }
};

Result<KlFile> read_kl_file(const std::string& path) {
    using R = Result<KlFile>;
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return R::fail(path + ": cannot read");
    std::vector<uint8_t> bytes((size_t)std::max<std::streamoff>(in.tellg(), 0));
    in.seekg(0);
    if (!in.read((char*)bytes.data(), (std::streamsize)bytes.size()))
        return R::fail(path + ": cannot read");
    KlFile f;
    if (bytes.size() < sizeof(KlHeader) || std::memcmp(bytes.data(), kKlMagic, 8) != 0)
        return R::fail(path + ": not a KL file written by edgellm perplexity --kl-save");
    std::memcpy(&f.h, bytes.data(), sizeof f.h);
    const KlHeader& h = f.h;
    if (h.version != kKlVersion)
        return R::fail(path + ": KL file version " + std::to_string(h.version) +
                       ", this edgellm reads version " + std::to_string(kKlVersion));
    if (h.n_ctx < kMinCtx || h.n_ctx > (1u << 24) || h.n_chunks == 0 || h.n_chunks > (1u << 24) ||
        h.top_k == 0 || h.top_k > (uint32_t)kMaxTopK || h.top_k > h.n_vocab ||
        h.n_scored != (uint64_t)h.n_chunks * (uint64_t)scored_per_chunk(h.n_ctx))
        return R::fail(path + ": corrupt KL file header (n_ctx " + std::to_string(h.n_ctx) +
                       ", n_chunks " + std::to_string(h.n_chunks) + ", top_k " +
                       std::to_string(h.top_k) + ", n_scored " + std::to_string(h.n_scored) + ")");
    const uint64_t n_tokens = (uint64_t)h.n_chunks * h.n_ctx;
    const uint64_t expected =
        sizeof(KlHeader) + 4 * n_tokens + h.n_scored * kl_record_bytes(h.top_k);
    if (bytes.size() != expected)
        return R::fail(path + ": " +
                       (bytes.size() < expected ? "truncated" : "has trailing bytes") +
                       ": the header implies " + std::to_string(expected) +
                       " bytes, the file has " + std::to_string(bytes.size()));
    f.tokens.resize(n_tokens);
    std::memcpy(f.tokens.data(), bytes.data() + sizeof(KlHeader), 4 * n_tokens);
    f.records.assign(bytes.begin() + (std::ptrdiff_t)(sizeof(KlHeader) + 4 * n_tokens),
                     bytes.end());
    for (size_t i = 0; i < f.tokens.size(); ++i)
        if (f.tokens[i] < 0 || (uint32_t)f.tokens[i] >= h.n_vocab)
            return R::fail(path + ": token " + std::to_string(i) + " has id " +
                           std::to_string(f.tokens[i]) + ", outside the vocabulary of " +
                           std::to_string(h.n_vocab));
    for (uint64_t r = 0; r < h.n_scored; ++r) {
        const uint8_t* rec = f.record((int64_t)r);
        for (uint32_t i = 0; i < h.top_k; ++i) {
            int32_t id;
            std::memcpy(&id, rec + 8 + 4 * i, 4);
            if (id < 0 || (uint32_t)id >= h.n_vocab)
                return R::fail(path + ": record " + std::to_string(r) + " names token " +
                               std::to_string(id) + ", outside the vocabulary of " +
                               std::to_string(h.n_vocab));
        }
    }
    return f;
}

// Evaluate one chunk from an empty KV cache and call score(row, i) with the logits of every
// position i in [n_ctx/2, n_ctx-1); the token scored there is chunk[i+1]. The last token is
// never evaluated: nothing predicts from it. toks is scratch.
std::string eval_chunk(Context& ctx, std::span<const int32_t> chunk, int32_t bos, int64_t n_vocab,
                       std::vector<int32_t>& toks,
                       const std::function<void(const float*, int64_t)>& score) {
    const int64_t n_ctx = (int64_t)chunk.size();
    const int64_t first = n_ctx / 2;
    const int64_t n_out = ctx.params().n_outputs;
    toks.assign(chunk.begin(), chunk.end());
    if (bos >= 0) toks[0] = bos;
    ctx.truncate(0);
    // The first half only fills the KV cache: no logits wanted.
    auto r = ctx.eval(std::span<const int32_t>(toks.data(), (size_t)first), false);
    if (!r) return r.error();
    for (int64_t s = first; s < n_ctx - 1; s += n_out) {
        const int64_t n = std::min(n_out, n_ctx - 1 - s);
        auto logits = ctx.eval(std::span<const int32_t>(toks.data() + s, (size_t)n), true);
        if (!logits) return logits.error();
        for (int64_t i = 0; i < n; ++i) score(logits->data() + i * n_vocab, s + i);
    }
    return {};
}

// llama.cpp's percentile: linear interpolation between the two nearest sorted values.
double percentile(const std::vector<double>& sorted, double fraction) {
    if (sorted.empty()) return 0.0;
    const double p = fraction * (double)(sorted.size() - 1);
    const size_t ip = (size_t)p;
    const size_t next = std::min(ip + 1, sorted.size() - 1);
    return (1 - (p - (double)ip)) * sorted[ip] + (p - (double)ip) * sorted[next];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_perplexity(const std::vector<std::string>& args) {
    const char* cmd = "perplexity";
    Settings s;
    if (auto done = parse_options(cmd, args, &s)) return *done;
    const auto& kl_save = s.perplexity.kl_save;
    const auto& kl_base = s.perplexity.kl_base;
    const auto& text_file = s.perplexity.file;
    if (!text_file && !kl_base) return fail(cmd, "missing -f TEXT", 2);
    int64_t n_ctx = s.perplexity.n_ctx;
    const int64_t n_batch = s.perplexity.n_batch, max_chunks = s.perplexity.max_chunks,
                  top_k = s.perplexity.top_k;
    auto model_path = model_path_or_default(s);
    if (!model_path) return fail(cmd, model_path.error(), 2);
    std::string err = choose_kernels(s.kernels);
    if (!err.empty()) return fail(cmd, err, 2);
    std::string text;
    if (text_file && !read_text_file(*text_file, &text))
        return fail(cmd, *text_file + ": cannot read");

    // The reference, when comparing: it fixes n_ctx and the tokens.
    KlFile base;
    if (kl_base) {
        auto f = read_kl_file(*kl_base);
        if (!f) return fail(cmd, f.error());
        base = std::move(*f);
        if (s.has("-c") && n_ctx != (int64_t)base.h.n_ctx)
            return fail(cmd, *kl_base + ": saved with -c " + std::to_string(base.h.n_ctx) +
                                 ", this run asks for -c " + std::to_string(n_ctx) +
                                 " (use the reference's context)");
        n_ctx = base.h.n_ctx;
    }

    const auto t_load = std::chrono::steady_clock::now();
    auto model = Model::load(*model_path);
    if (!model) return fail(cmd, model.error());
    auto tok = Tokenizer::load((*model)->file());
    if (!tok) return fail(cmd, tok.error());
    const int64_t n_vocab = (*model)->hparams().n_vocab;
    const uint64_t vhash = vocab_hash(**tok);
    // llama.cpp puts BOS first in every chunk when the model adds BOS.
    const int32_t bos = (*tok)->add_bos() ? (*tok)->bos() : -1;

    std::vector<int32_t> tokens;
    int64_t n_chunks = 0;
    if (kl_base) {
        if ((int64_t)base.h.n_vocab != n_vocab)
            return fail(cmd, *kl_base + ": the reference has a vocabulary of " +
                                 std::to_string(base.h.n_vocab) + " tokens, " + *model_path +
                                 " has " + std::to_string(n_vocab));
        if (base.h.vocab_hash != vhash)
            return fail(cmd, *kl_base + ": the reference's vocabulary differs from " + *model_path +
                                 "'s (same size, different tokens)");
        if (base.h.bos != bos)
            return fail(cmd, *kl_base + ": the reference starts chunks with token " +
                                 std::to_string(base.h.bos) + ", " + *model_path + " with " +
                                 std::to_string(bos) + " (-1: no BOS)");
        n_chunks = base.h.n_chunks;
        if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
        tokens.assign(base.tokens.begin(), base.tokens.begin() + n_chunks * n_ctx);
        if (text_file) {
            const auto ours = (*tok)->tokenize(text, true, false);
            if ((int64_t)ours.size() < n_chunks * n_ctx ||
                !std::equal(tokens.begin(), tokens.end(), ours.begin()))
                return fail(cmd, *text_file + " does not tokenize to the tokens saved in " +
                                     *kl_base + " (a different text or tokenizer)");
        }
    } else {
        tokens = (*tok)->tokenize(text, true, false);
        n_chunks = (int64_t)tokens.size() / n_ctx;
        if (n_chunks == 0)
            return fail(cmd, *text_file + ": the text has " + std::to_string(tokens.size()) +
                                 " tokens, fewer than one chunk of " + std::to_string(n_ctx) +
                                 " (-c); give a longer text or a smaller -c");
        if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
    }
    const int64_t first = n_ctx / 2;
    const int64_t per_chunk = scored_per_chunk(n_ctx);

    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = std::min(n_batch, n_ctx);
    cp.n_outputs = std::min(cp.n_batch, per_chunk);  // scoring steps return their logits
    cp.type_k = s.ctx.type_k;
    cp.type_v = s.ctx.type_v;
    cp.n_threads = s.ctx.n_threads;
    auto ctx = Context::create(**model, cp);
    if (!ctx) return fail(cmd, ctx.error());
    std::fprintf(stderr,
                 "edgellm perplexity: %s: %zu tokens; %lld chunks of %lld, scoring %lld "
                 "positions each (load %.0f ms)\n",
                 kl_base ? kl_base->c_str() : text_file->c_str(),
                 kl_base ? base.tokens.size() : tokens.size(), (long long)n_chunks,
                 (long long)n_ctx, (long long)per_chunk, seconds_since(t_load) * 1e3);

    KlWriter writer;
    const int32_t save_k = (int32_t)std::min<int64_t>(top_k, n_vocab);
    if (kl_save) {
        KlHeader h{};
        std::memcpy(h.magic, kKlMagic, 8);
        h.version = kKlVersion;
        h.n_vocab = (uint32_t)n_vocab;
        h.n_ctx = (uint32_t)n_ctx;
        h.n_chunks = (uint32_t)n_chunks;
        h.top_k = (uint32_t)save_k;
        h.bos = bos;
        h.vocab_hash = vhash;
        h.n_scored = (uint64_t)(n_chunks * per_chunk);
        std::span<const int32_t> saved(tokens.data(), (size_t)(n_chunks * n_ctx));
        if (!writer.open(*kl_save, h, saved, &err)) return fail(cmd, err);
    }

    MeanStat nll;                    // ours
    MeanStat nll_base, nll_diff;     // --kl-base: the reference's, ours - reference's
    MeanStat kld, top1, tail;        // --kl-base (tail: the reference's mass beyond top K)
    std::vector<double> kld_values;  // --kl-base, for the percentiles
    if (kl_base) kld_values.reserve((size_t)(n_chunks * per_chunk));
    std::vector<uint8_t> in_top((size_t)n_vocab, 0);
    std::vector<int32_t> scratch;
    TopK top;
    const int32_t k = (int32_t)base.h.top_k;
    const auto t_start = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < n_chunks; ++c) {
        const std::span<const int32_t> chunk(tokens.data() + c * n_ctx, (size_t)n_ctx);
        const auto score = [&](const float* row, int64_t i) {
            const int32_t target = chunk[(size_t)i + 1];
            if (kl_save) {
                nll.add(top_k_of_row(row, n_vocab, target, save_k, in_top, &top));
                writer.add(top);
                return;
            }
            const double lse = log_sum_exp(row, n_vocab);
            const double v = lse - (double)row[target];
            nll.add(v);
            if (!kl_base) return;
            const uint8_t* rec = base.record(c * per_chunk + (i - first));
            float ref_nll, log_tail;
            std::memcpy(&ref_nll, rec, 4);
            std::memcpy(&log_tail, rec + 4, 4);
            std::array<int32_t, kMaxTopK> ids;
            std::array<float, kMaxTopK> logp;
            std::memcpy(ids.data(), rec + 8, 4 * (size_t)k);
            std::memcpy(logp.data(), rec + 8 + 4 * (size_t)k, 4 * (size_t)k);
            const double d =
                kl_top_k(row, n_vocab, lse, ids.data(), logp.data(), k, log_tail, in_top);
            kld.add(d);
            tail.add(std::isfinite(log_tail) ? std::exp((double)log_tail) : 0.0);
            kld_values.push_back(d);
            top1.add(argmax(row, n_vocab) == ids[0] ? 1.0 : 0.0);
            nll_base.add(ref_nll);
            nll_diff.add(v - (double)ref_nll);
        };
        err = eval_chunk(**ctx, chunk, bos, n_vocab, scratch, score);
        if (!err.empty()) return fail(cmd, "chunk " + std::to_string(c + 1) + ": " + err);
        const double elapsed = seconds_since(t_start);
        const double per = elapsed / (double)(c + 1);
        std::fprintf(stderr, "[chunk %lld/%lld] ppl so far %.4f", (long long)(c + 1),
                     (long long)n_chunks, std::exp(nll.mean()));
        if (kl_base)
            std::fprintf(stderr, ", KLD %.6f, top-1 %.2f%%", kld.mean(), 100.0 * top1.mean());
        std::fprintf(stderr, " | %.2f s/chunk, ETA %.0f s\n", per,
                     per * (double)(n_chunks - c - 1));
    }
    if (kl_save) {
        if (!writer.commit(&err)) return fail(cmd, err);
        std::fprintf(stderr, "edgellm perplexity: saved %lld positions (top %d) to %s\n",
                     (long long)nll.n, save_k, kl_save->c_str());
    }

    const double total_s = seconds_since(t_start);
    const double ppl = std::exp(nll.mean());
    std::printf("PPL = %.4f +/- %.5f\n", ppl, ppl * nll.stderr_of_mean());
    if (kl_base) {
        std::sort(kld_values.begin(), kld_values.end());
        const double ppl_base = std::exp(nll_base.mean());
        const double ratio = std::exp(nll_diff.mean());
        std::printf("reference PPL = %.4f +/- %.5f\n", ppl_base,
                    ppl_base * nll_base.stderr_of_mean());
        std::printf("PPL ratio = %.5f +/- %.5f\n", ratio, ratio * nll_diff.stderr_of_mean());
        std::printf("mean KLD = %.6f +/- %.6f\n", kld.mean(), kld.stderr_of_mean());
        std::printf("99th percentile KLD = %.6f\n", percentile(kld_values, 0.99));
        std::printf("max KLD = %.6f\n", kld_values.empty() ? 0.0 : kld_values.back());
        std::printf("top-1 agreement = %.3f +/- %.3f %%\n", 100.0 * top1.mean(),
                    100.0 * top1.stderr_of_mean());
        std::printf(
            "KLD over the reference's top %d tokens and the rest lumped together, which "
            "held %.3f%% of its probability on average\n",
            k, 100.0 * tail.mean());
    }
    std::fprintf(stderr,
                 "edgellm perplexity: %lld chunks x %lld tokens, %lld positions scored in %.1f s "
                 "(%.1f tokens/s)\n",
                 (long long)n_chunks, (long long)n_ctx, (long long)nll.n, total_s,
                 (double)(n_chunks * (n_ctx - 1)) / std::max(total_s, 1e-9));
    return 0;
}

}  // namespace edgellm::cli
