// Loading: map the GGUF file, read hyper-parameters, and bind every tensor the forward
// pass uses, checking that its shape and type are what the architecture expects.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <system_error>
#include <thread>

#include "compute/matmul.h"
#include "edgellm/arch.h"
#include "kernels/kernels.h"
#include "kernels/x16.h"
#include "model/digest.h"
#include "model/model_impl.h"
#include "model/repack_cache.h"

namespace edgellm {

namespace {

class Binder {
  public:
    Binder(const GgufFile& f, Model::Impl& impl) : f_(f), impl_(impl) {}

    // A matrix of shape [ne0, ne1]; its type needs a dot-product kernel.
    TensorView matrix(const std::string& name, int64_t ne0, int64_t ne1, bool required = true) {
        const GgufTensorInfo* t = find(name, required);
        if (!t) return {};
        check_shape(*t, {ne0, ne1});
        if (!type_kernels(t->type).vec_dot)
            throw Error(f_.path() + ": tensor \"" + name + "\" has type " +
                        tensor_type_name(t->type) + ", which cannot be used as a weight matrix");
        TensorView v;
        v.type = t->type;
        v.ne[0] = ne0;
        v.ne[1] = ne1;
        v.data = t->data;
        return v;
    }

    // A vector of n elements (or a small f32 matrix of n x rows: a convolution's taps), as
    // f32 (converted once if the file stores another type).
    const float* vector(const std::string& name, int64_t n, int64_t rows = 1, bool required = true) {
        const GgufTensorInfo* t = find(name, required);
        if (!t) return nullptr;
        check_shape(*t, {n, rows});
        n *= rows;
        if (t->type == TensorType::F32) return (const float*)t->data;
        const TypeKernels& k = type_kernels(t->type);
        if (!k.to_float)
            throw Error(f_.path() + ": tensor \"" + name + "\" has type " +
                        tensor_type_name(t->type) + ", which cannot be converted to f32");
        impl_.owned.emplace_back(new float[(size_t)n]);
        k.to_float(t->data, impl_.owned.back().get(), n);
        return impl_.owned.back().get();
    }

  private:
    const GgufTensorInfo* find(const std::string& name, bool required) {
        const GgufTensorInfo* t = f_.tensor(name);
        if (!t && required) throw Error(f_.path() + ": missing tensor \"" + name + "\"");
        return t;
    }

    void check_shape(const GgufTensorInfo& t, std::vector<int64_t> want) {
        bool ok = true;
        for (int d = 0; d < kMaxDims; ++d) {
            const int64_t w = d < (int)want.size() ? want[d] : 1;
            ok = ok && t.ne[d] == w;
        }
        if (!ok) {
            std::string s = "[";
            for (size_t i = 0; i < want.size(); ++i) s += (i ? ", " : "") + std::to_string(want[i]);
            throw Error(f_.path() + ": tensor \"" + t.name + "\" has shape " + t.shape_string() +
                        ", expected " + s + "]");
        }
    }

    const GgufFile& f_;
    Model::Impl& impl_;
};

// The weight matrices of a set, in one fixed order (the output projection only when it is
// not the embedding).
std::vector<TensorView*> matrices(WeightSet& s, bool tied) {
    std::vector<TensorView*> views = {&s.tok_embd};
    if (!tied) views.push_back(&s.output);
    if (s.pl_model_proj) views.push_back(&s.pl_model_proj);
    for (LayerWeights& l : s.layers)
        for (TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up, &l.w_down,
                              &l.pl_gate, &l.pl_proj, &l.conv_in_proj, &l.conv_out_proj})
            if (*t) views.push_back(t);
    return views;
}

// Fresh anonymous memory for n bytes of repacked weights, or null.
std::unique_ptr<Model::Impl::Buffer> anonymous_buffer(size_t n) {
    // In 2 MiB pages where the kernel gives them (see give_huge_pages): fewer TLB misses.
    const size_t huge = (size_t)2 << 20;
    const size_t mapped = (n + huge - 1) / huge * huge;
    void* mem = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    return std::make_unique<Model::Impl::Buffer>((uint8_t*)mem, mapped, (uint8_t*)mem, n, false);
}

// 2 MiB pages asked for once the copies are written: asked before, every fault of the fill
// may wait for the kernel to compact memory into a free huge page (with THP's defrag
// "madvise", the default: 1.5-2.5 s of a 2.3 s start-up on the 1.5B here); after,
// khugepaged merges the pages in the background. Decode measured the same.
void give_huge_pages(const Model::Impl::Buffer& b) {
    madvise(b.map, b.mapped, MADV_HUGEPAGE);
}

// Point views[i] at its copy in w.repacked (the set's output too when tied) and give the
// file's pages the copies replace back to the page cache (unlocked first when lock_memory
// locked them), so the weights stay one copy. A step still reading a released page of the
// file reads it again from the page cache: the mapping is the file's, unchanged.
void install(Model::Impl& w, WeightSet& set, bool tied, const std::vector<TensorView*>& views,
             const std::vector<TensorView>& src, const std::vector<RepackEntry>& entries) {
    for (size_t i = 0; i < views.size(); ++i) {
        TensorView v = src[i];
        v.data = w.repacked->data + entries[i].offset;
        v.x16 = true;
        *views[i] = v;
    }
    if (tied) set.output = set.tok_embd;
}

// The whole pages inside [from, from + bytes) as [*a, *b) (a page shared with a neighbour
// stays out); false when there are none.
bool whole_pages(const void* from, size_t bytes, uintptr_t* a, uintptr_t* b) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    *a = ((uintptr_t)from + page - 1) / page * page;
    *b = ((uintptr_t)from + bytes) / page * page;
    return *b > *a;
}

void release_file_pages(Model::Impl& w, const std::vector<TensorView>& src,
                        const std::vector<RepackEntry>& entries) {
    for (size_t i = 0; i < src.size(); ++i) {
        const uint8_t* from = (const uint8_t*)src[i].data;
        const size_t bytes = entries[i].bytes;
        {
            std::lock_guard<std::mutex> lock(w.released_mu);
            w.released.emplace_back(from, bytes);
        }
        uintptr_t a, b;
        if (!whole_pages(from, bytes, &a, &b)) continue;
        if (w.locked) munlock((void*)a, b - a);
        madvise((void*)a, b - a, MADV_DONTNEED);
    }
}

// Repack every matrix whose type has a SIMD GEMV over row-interleaved weights
// (kernels/x16.h) into that layout, in memory of its own, and release the file's pages
// the repacked copies replace, so the weights stay one copy. With a cache directory the
// memory is a file there (model/repack_cache.h): mapped as it is when an earlier start
// wrote it, else written now for the next one. With opts.repack_later and no cache file
// to map, only planned: Model::finish_repack does it.
void repack_for_decode(Model::Impl& w, bool tied, const LoadOptions& opts, const GgufFile& f,
                       const std::string& fingerprint) {
    const std::vector<TensorView*> views = matrices(w.bound, tied);
    // One mapping for all of them, 64-byte aligned each.
    std::vector<size_t> picked;   // indices into views
    std::vector<TensorView*> chosen;
    std::vector<TensorView> src;  // as in the file
    std::vector<RepackEntry> entries;
    size_t total = 0;
    for (size_t i = 0; i < views.size(); ++i) {
        TensorView* v = views[i];
        if (*v && x16_pays(*v)) {
            picked.push_back(i);
            chosen.push_back(v);
            src.push_back(*v);
            const size_t bytes = (size_t)v->n_rows() * v->row_bytes();
            entries.push_back({v->type, v->ne[0], v->ne[1], total, bytes});
            total += (bytes + 63) / 64 * 64;
        }
    }
    if (chosen.empty()) return;
    if (!opts.repack_cache_dir.empty() && total >= opts.repack_cache_min_bytes) {
        RepackKey key;
        key.fingerprint = fingerprint;
        key.model_size = f.file_size();
        struct stat st {};
        if (::stat(f.path().c_str(), &st) == 0)
            key.model_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        // One file per model path: a model replaced in place replaces its file (the
        // fingerprint inside tells them apart), so old ones do not pile up.
        std::error_code ec;
        const std::string where = std::filesystem::absolute(f.path(), ec).string();
        Digest d;
        d.add(where.data(), where.size());
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)d.value());
        const std::string stem = std::filesystem::path(f.path()).stem().string();
        const std::string path =
            (std::filesystem::path(opts.repack_cache_dir) / (stem + "-" + hex + ".x16")).string();
        auto have = open_repack_cache(path, key, entries);
        if (have) {
            w.repacked = std::make_unique<Model::Impl::Buffer>(have->map, have->mapped, have->data,
                                                               have->bytes, true);
            w.repack_note = "repacked weights mapped from " + path;
            w.repack_cache = Model::RepackCache::Mapped;
            install(w, w.bound, tied, chosen, src, entries);
            release_file_pages(w, src, entries);
            return;
        }
        w.pending_cache = std::make_unique<Model::Impl::PendingCache>();
        w.pending_cache->path = path;
        w.pending_cache->why_new = have.error() == "no such file" ? "" : have.error();
        w.pending_cache->key = key;
        w.pending_cache->entries = entries;
        w.repack_cache = w.pending_cache->why_new.empty() ? Model::RepackCache::Absent
                                                          : Model::RepackCache::Refused;
        w.repack_note = w.pending_cache->why_new.empty()
                            ? "no repack cache yet at " + path
                            : "repack cache " + path + " unusable (" + w.pending_cache->why_new + ")";
    }
    if (opts.repack_later) {
        // The views as they will be, in a set of their own (a context sizes its scratch for
        // both); their data comes with the repacking.
        w.later = std::make_unique<WeightSet>(w.bound);
        auto p = std::make_unique<Model::Impl::PendingRepack>();
        const std::vector<TensorView*> to = matrices(*w.later, tied);
        for (size_t i = 0; i < picked.size(); ++i) {
            TensorView* v = to[picked[i]];
            v->data = nullptr;
            v->x16 = true;
            p->views.push_back(v);
        }
        if (tied) w.later->output = w.later->tok_embd;
        p->src = std::move(src);
        p->entries = std::move(entries);
        p->total = total;
        p->tied = tied;
        w.pending_repack = std::move(p);
        w.repack_left = true;
        w.repack_note += std::string(w.repack_note.empty() ? "" : "; ") +
                         "repacking for decode left for after start-up";
        return;
    }
    auto buffer = anonymous_buffer(total);
    if (!buffer) return;  // no memory for a copy: keep the file's layout
    ThreadPool pool((int)std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
    for (size_t i = 0; i < src.size(); ++i)
        repack_x16(&pool, src[i], buffer->data + entries[i].offset);
    give_huge_pages(*buffer);
    w.repacked = std::move(buffer);
    install(w, w.bound, tied, chosen, src, entries);
    release_file_pages(w, src, entries);
}

// Whether p is in a tensor read lazily (Gemma 4's per-layer token table).
bool is_lazy(const Model::Impl& w, const uint8_t* p) {
    const TensorView& t = w.pl_tok_embd;
    const uint8_t* start = (const uint8_t*)t.data;
    return t && p >= start && p < start + (size_t)t.n_rows() * t.row_bytes();
}

bool is_released(const Model::Impl& w, const uint8_t* p) {
    std::lock_guard<std::mutex> lock(w.released_mu);
    for (const auto& [start, bytes] : w.released)
        if (p >= start && p < start + bytes) return true;
    return false;
}

}  // namespace

Model::Impl::Buffer::~Buffer() {
    if (map) munmap(map, mapped);
}

Model::~Model() = default;

namespace {

// The header (metadata and tensor index) whole, the size, and 4 KiB from 16 places in the
// weights: two quantizations or fine-tunes of one model differ in at least one of those.
std::string file_fingerprint(const GgufFile& f) {
    Digest d;
    const uint64_t size = f.file_size();
    d.add(&size, sizeof size);
    d.add(f.data(), std::min(f.data_offset(), f.file_size()));
    if (f.file_size() > f.data_offset()) {
        const size_t span = f.file_size() - f.data_offset(), piece = std::min<size_t>(4096, span);
        for (int i = 0; i < 16; ++i)
            d.add(f.data() + f.data_offset() + (span - piece) / 15 * (size_t)i, piece);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)d.value());
    return hex;
}

}  // namespace

const std::string& Model::fingerprint() const {
    return fingerprint_;
}

namespace {
// Where slot s of the model (layer null) or of layer l keeps a matrix or a vector.
TensorView* matrix_slot(Model::Impl& w, LayerWeights* l, Slot s) {
    switch (s) {
        case Slot::TokEmbd: return &w.bound.tok_embd;
        case Slot::Output: return &w.bound.output;
        case Slot::PerLayerTokEmbd: return &w.pl_tok_embd;
        case Slot::PerLayerModelProj: return &w.bound.pl_model_proj;
        case Slot::PerLayerGate: return &l->pl_gate;
        case Slot::PerLayerProj: return &l->pl_proj;
        case Slot::Wq: return &l->wq;
        case Slot::Wk: return &l->wk;
        case Slot::Wv: return &l->wv;
        case Slot::Wqkv: return &l->wqkv;
        case Slot::Wo: return &l->wo;
        case Slot::Gate: return &l->w_gate;
        case Slot::Up: return &l->w_up;
        case Slot::Down: return &l->w_down;
        case Slot::ConvInProj: return &l->conv_in_proj;
        case Slot::ConvOutProj: return &l->conv_out_proj;
        default: return nullptr;
    }
}

const float** vector_slot(Model::Impl& w, LayerWeights* l, Slot s) {
    switch (s) {
        case Slot::OutputNorm: return &w.output_norm;
        case Slot::RopeFreqs: return &w.rope_freqs;
        case Slot::RopeLong: return &w.rope_long;
        case Slot::RopeShort: return &w.rope_short;
        case Slot::AttnNorm: return &l->attn_norm;
        case Slot::Bq: return &l->bq;
        case Slot::Bk: return &l->bk;
        case Slot::Bv: return &l->bv;
        case Slot::QNorm: return &l->q_norm;
        case Slot::KNorm: return &l->k_norm;
        case Slot::PostAttnNorm: return &l->post_attn_norm;
        case Slot::FfnNorm: return &l->ffn_norm;
        case Slot::PostFfnNorm: return &l->post_ffn_norm;
        case Slot::PerLayerProjNorm: return &w.pl_proj_norm;
        case Slot::PerLayerPostNorm: return &l->pl_post_norm;
        case Slot::OutScale: return &l->out_scale;
        case Slot::ConvKernel: return &l->conv_kernel;
        default: return nullptr;
    }
}

// Every tensor of the family's table entry, checked and bound to its slot; a tensor of the
// file the entry does not know is named (a file of a newer variant would otherwise run
// without it).
void bind_weights(const GgufFile& f, const HParams& h, Model::Impl& w) {
    const ArchInfo& arch = *find_arch(h.arch);
    Binder b(f, w);
    w.bound.layers.resize((size_t)h.n_layer);
    auto bind = [&](const ArchTensor& t, int64_t il) {
        LayerWeights* l = t.per_layer ? &w.bound.layers[(size_t)il] : nullptr;
        const std::string name = tensor_name(t, il);
        bool required = t.required;
        if (t.instead) {  // one of the two forms must be there
            ArchTensor other = t;
            other.gguf = t.instead;
            const std::string other_name = tensor_name(other, il);
            required = f.tensor(other_name) == nullptr;
            if (required && !f.tensor(name))
                throw Error(f.path() + ": missing tensor \"" + name + "\" (or \"" + other_name + "\")");
        }
        if (t.slot == Slot::Output && h.tied_output) return;
        if (!tensor_present(t, h, il)) return;  // (one the file may carry is not read)
        const int64_t ne0 = dim_length(t.ne0, h, il), ne1 = dim_length(t.ne1, h, il);
        if (TensorView* m = matrix_slot(w, l, t.slot))
            *m = b.matrix(name, ne0, ne1, required);
        else
            *vector_slot(w, l, t.slot) = b.vector(name, ne0, ne1, required);
    };
    for (const ArchTensor& t : arch.tensors)
        if (!t.per_layer) bind(t, -1);
    for (int64_t il = 0; il < h.n_layer; ++il)
        for (const ArchTensor& t : arch.tensors)
            if (t.per_layer) bind(t, il);
    if (h.tied_output) w.bound.output = w.bound.tok_embd;
    for (const auto& t : f.tensors()) {
        int64_t il = -1;
        const ArchTensor* known = find_tensor(arch, t.name, &il);
        if (const char* why = refusal(arch, t.name))
            throw Error(f.path() + ": tensor \"" + t.name + "\" is " + why);
        if (!known || il >= h.n_layer)
            throw Error(f.path() + ": tensor \"" + t.name + "\" is not part of a " + h.arch +
                        " model (a variant edgellm does not run yet?)");
    }
    // (the table's `required` and `instead` saw to the rest: each of q, k and v where the
    // fused matrix is absent, and k on every layer with a cache of its own)
    for (int64_t il = 0; il < h.n_layer; ++il) {
        const LayerWeights& l = w.bound.layers[(size_t)il];
        if (l.wqkv && (l.wq || l.wk || l.wv))
            throw Error(f.path() + ": a layer has both attn_qkv and attn_q/k/v");
        if (!l.wqkv && !l.wq && !h.is_recurrent(il))
            throw Error(f.path() + ": a layer has neither attn_qkv nor attn_q");
    }
}

// The kernels' start-up self-test (tens of ms) on a thread of its own, beside the file's
// parsing and binding; whatever needs the kernels first waits for it (type_kernels is
// thread-safe, and a second call waits for the first).
std::future<void> kernels_in_background() {
    return std::async(std::launch::async, [] { (void)type_kernels(TensorType::F32); });
}
}  // namespace

Result<HParams> Model::check(const GgufFile& file) {
    auto hp = read_hparams(file);
    if (!hp) return hp;
    Impl scratch;
    try {
        bind_weights(file, *hp, scratch);
    } catch (const Error& e) {
        return Result<HParams>::fail(e.what());
    }
    return hp;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& opts) {
    // (the kernels' self-test starts in the other load, beside the hyper-parameters and
    // the binding; opening the file is only its header)
    auto file = GgufFile::open(path);
    if (!file) return Result<std::unique_ptr<Model>>::fail(file.error());
    return load(std::shared_ptr<const GgufFile>(std::move(*file)), opts);
}

Result<std::unique_ptr<Model>> Model::load(std::shared_ptr<const GgufFile> file,
                                           const LoadOptions& opts) {
    using R = Result<std::unique_ptr<Model>>;
    EDGELLM_ASSERT(file != nullptr, "Model::load without a file");
    auto kernels_ready = kernels_in_background();
    auto hp = read_hparams(*file);
    if (!hp) return R::fail(hp.error());

    std::unique_ptr<Model> m(new Model());
    m->file_ = std::move(file);
    // A table read lazily gives a token's row, a few pages of gigabytes: no read-around of
    // the pages beside a fault (the kernel's default reads up to 128 KiB each way), from the
    // fingerprint's samples on.
    if (const ArchInfo* arch = find_arch(hp->arch))
        for (const ArchTensor& e : arch->tensors)
            if (const GgufTensorInfo* t = e.lazy ? m->file_->tensor(e.gguf) : nullptr) {
                const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
                const uintptr_t a = (uintptr_t)t->data / page * page;
                madvise((void*)a, (uintptr_t)t->data + t->n_bytes - a, MADV_RANDOM);
            }
    m->fingerprint_ = file_fingerprint(*m->file_);
    m->hp_ = *hp;
    m->impl_ = std::make_unique<Impl>();
    const HParams& h = m->hp_;
    Impl& w = *m->impl_;
    try {
        bind_weights(*m->file_, h, w);
    } catch (const Error& e) {
        return R::fail(e.what());
    }
    const char* env = std::getenv("EDGELLM_REPACK");
    if (opts.repack && !(env && std::string(env) == "0")) {
        const auto t0 = std::chrono::steady_clock::now();
        repack_for_decode(w, h.tied_output, opts, *m->file_, m->fingerprint_);
        if (w.repacked)
            w.repack_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    }
    return m;
}

namespace {
// Read every page of [p, p + n) in and map it: madvise(MADV_POPULATE_READ) where the kernel
// has it (5.14; one call instead of a fault per page or per 16: 3-4 ms against about 0.5 s
// for the 1.5B's repack cache file in the page cache here), else a read of each page.
void populate(const uint8_t* p, size_t n) {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p / page * page;
    if (n > 0 && madvise((void*)a, (uintptr_t)p + n - a, MADV_POPULATE_READ) == 0) return;
    volatile uint8_t sink = 0;
    for (size_t off = 0; off < n; off += 4096) sink = sink + p[off];
    (void)sink;
}
}  // namespace

void Model::warm_up() const {
    // Every page of the file's tensors still in use, and of a repack cache file mapped as it
    // was (repacked ones written at this start are in memory already).
    if (impl_->repacked && impl_->repacked->from_file)
        populate(impl_->repacked->data, impl_->repacked->bytes);
    for (const auto& t : file_->tensors()) {
        const uint8_t* p = (const uint8_t*)t.data;
        if (is_released(*impl_, p) || is_lazy(*impl_, p)) continue;
        populate(p, t.n_bytes);
    }
}

Result<std::monostate> Model::lock_memory() const {
    // The file's tensors still in use and the repacked copies: one copy of the weights.
    auto lock = [](const void* p, size_t n) -> Result<std::monostate> {
        populate((const uint8_t*)p, n);
        if (n > 0 && mlock(p, n) != 0)
            return Result<std::monostate>::fail(std::string("mlock of ") + std::to_string(n >> 20) +
                                                " MiB failed: " + std::strerror(errno) +
                                                " (raise the locked-memory limit: ulimit -l)");
        return std::monostate{};
    };
    for (const auto& t : file_->tensors()) {
        if (is_released(*impl_, (const uint8_t*)t.data) || is_lazy(*impl_, (const uint8_t*)t.data))
            continue;  // (locking the lazily read table would read all of it in)
        auto r = lock(t.data, t.n_bytes);
        if (!r) return r;
    }
    if (impl_->repacked) {
        auto r = lock(impl_->repacked->data, impl_->repacked->bytes);
        if (!r) return r;
    }
    impl_->locked = true;
    return std::monostate{};
}

double Model::repack_ms() const {
    return impl_->repack_ms;
}

const std::string& Model::repack_note() const {
    return impl_->repack_note;
}

Model::RepackCache Model::repack_cache() const {
    return impl_->repack_cache;
}

namespace {
// The pending repack cache of w written ("" : none pending): what happened, for the log.
// On Impl, not the Model: the background writer may still run while ~Impl stops it.
std::string save_cache(Model::Impl& w) {
    std::lock_guard<std::mutex> lock(w.saver.mu);
    if (!w.pending_cache || !w.repacked || w.saver.stop) return "";
    const Model::Impl::PendingCache& c = *w.pending_cache;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string why =
        write_repack_cache(c.path, c.key, c.entries, w.repacked->data, &w.saver.stop);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s", s);
    std::string note = why.empty() ? "repacked weights (" + std::to_string(w.repacked->bytes >> 20) +
                                         " MiB) kept in " + c.path + " for the next start (" +
                                         took + ")"
                                   : "cannot keep the repacked weights in " + c.path + ": " + why;
    w.pending_cache.reset();
    return note;
}
}  // namespace

std::string Model::save_repack_cache() const {
    return save_cache(*impl_);
}

namespace {
int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Whether a forward step runs on the model or ended less than 30 ms ago (the next one of a
// request is then near: a decode loop's steps come back to back).
bool model_busy(const Model::Impl& w) {
    return w.steps_running.load(std::memory_order_acquire) > 0 ||
           steady_ns() - w.last_step_end_ns.load(std::memory_order_acquire) < 30'000'000;
}

// The repacking load left for later, done: slices of about 1 MiB on a pool of its own,
// waiting while the model serves (or pause() says so) and giving up when stop is set;
// then the copies locked (when the file's were), the views switched for the steps that
// start afterwards, and the file's pages given back. What happened, for the log ("" :
// nothing to do, or stopped).
std::string repack_now(Model::Impl& w, const std::function<bool()>& pause,
                       const std::atomic<bool>& stop) {
    if (!w.pending_repack) return "";
    const Model::Impl::PendingRepack& p = *w.pending_repack;
    const auto t0 = std::chrono::steady_clock::now();
    auto buffer = anonymous_buffer(p.total);
    if (!buffer) {
        w.pending_repack.reset();
        w.repack_left = false;
        return "no memory to repack the weights for decode: they stay in the file's layout";
    }
    ThreadPool pool((int)std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
    double waited_ms = 0;
    std::string lock_note;
    for (size_t i = 0; i < p.src.size(); ++i) {
        const TensorView& t = p.src[i];
        const size_t row_bytes = t.row_bytes();
        const int64_t rows = t.n_rows();
        const int64_t step = std::max<int64_t>(kX16Rows, ((1 << 20) / (int64_t)row_bytes) /
                                                             kX16Rows * kX16Rows);
        for (int64_t r0 = 0; r0 < rows; r0 += step) {
            if (model_busy(w) || (pause && pause())) {
                const auto w0 = std::chrono::steady_clock::now();
                while (!stop && (model_busy(w) || (pause && pause())))
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                waited_ms += std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - w0)
                                 .count();
            }
            if (stop) return "";
            TensorView slice = t;
            slice.ne[1] = std::min(step, rows - r0);
            slice.ne[2] = slice.ne[3] = 1;
            slice.data = (const uint8_t*)t.data + (size_t)r0 * row_bytes;
            repack_x16(&pool, slice, buffer->data + p.entries[i].offset + (size_t)r0 * row_bytes);
        }
        // Under --mlock, one copy locked at every moment: the matrix's copy locked and its
        // file pages unlocked (still read until the switch, but reclaimable: a memory
        // cgroup sized for one copy, seed 000's MemoryMax, never holds two locked).
        if (w.locked) {
            if (mlock(buffer->data + p.entries[i].offset, p.entries[i].bytes) != 0 && lock_note.empty())
                lock_note = std::string("; mlock of the repacked copies failed: ") +
                            std::strerror(errno);
            uintptr_t a, b;
            if (lock_note.empty() && whole_pages(t.data, p.entries[i].bytes, &a, &b))
                munlock((void*)a, b - a);
        }
    }
    give_huge_pages(*buffer);
    w.repacked = std::move(buffer);
    install(w, *w.later, p.tied, p.views, p.src, p.entries);
    w.live.store(w.later.get(), std::memory_order_release);
    release_file_pages(w, p.src, p.entries);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    char b[160];
    std::snprintf(b, sizeof b,
                  "repacked %.0f MiB of weights for decode after start-up in %.0f ms (%.0f ms "
                  "of it waiting for requests); steps use them from now on",
                  (double)w.repacked_bytes() / 1048576.0, ms, waited_ms);
    w.pending_repack.reset();
    w.repack_left = false;
    return b + lock_note;
}
}  // namespace

bool Model::repack_pending() const {
    return impl_->repack_left.load();
}

std::string Model::finish_repack(const std::function<bool()>& pause) const {
    std::lock_guard<std::mutex> lock(impl_->saver.mu);
    return repack_now(*impl_, pause, impl_->saver.stop);
}

void Model::finish_in_background(std::function<void(const std::string&)> note,
                                 std::function<bool()> pause) const {
    Impl* w = impl_.get();
    if (w->saver.thread.joinable()) return;  // (started before: it holds the mutex meanwhile)
    {
        std::lock_guard<std::mutex> lock(w->saver.mu);
        if (!w->pending_cache && !w->pending_repack) return;
    }
    try {
        w->saver.thread = std::thread([w, note = std::move(note), pause = std::move(pause)] {
            std::string n;
            {
                std::lock_guard<std::mutex> lock(w->saver.mu);
                n = repack_now(*w, pause, w->saver.stop);
            }
            if (!w->saver.stop && note && !n.empty()) note(n);
            // The lowest CPU priority for the cache file: serving goes first.
            (void)::setpriority(PRIO_PROCESS, (id_t)::gettid(), 19);
            n = save_cache(*w);
            if (!w->saver.stop && note && !n.empty()) note(n);
        });
    } catch (const std::system_error&) {
        // no thread to be had: the weights stay in the file's layout, and the next start
        // repacks again
    }
}

size_t Model::lazy_bytes() const {
    const TensorView& t = impl_->pl_tok_embd;
    return t ? (size_t)t.n_rows() * t.row_bytes() : 0;
}

size_t Model::repacked_bytes() const {
    return impl_->repacked_bytes();
}

std::string Model::main_weight_type() const {
    std::map<std::string, size_t> bytes;
    for (const auto& t : file_->tensors())
        if (t.n_dims >= 2) bytes[tensor_type_name(t.type)] += t.n_bytes;
    std::string best;
    size_t most = 0;
    for (const auto& [name, n] : bytes)
        if (n > most) {
            most = n;
            best = name;
        }
    return best;
}

}  // namespace edgellm
