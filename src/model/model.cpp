// Loading: map the GGUF file, read hyper-parameters, and bind every tensor the forward
// pass uses, checking that its shape and type are what the architecture expects.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "kernels/kernels.h"
#include "model/model_impl.h"

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

    // A vector of n elements, as f32 (converted once if the file stores another type).
    const float* vector(const std::string& name, int64_t n, bool required = true) {
        const GgufTensorInfo* t = find(name, required);
        if (!t) return nullptr;
        check_shape(*t, {n});
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

}  // namespace

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
    using R = Result<std::unique_ptr<Model>>;
    auto file = GgufFile::open(path);
    if (!file) return R::fail(file.error());
    auto hp = read_hparams(**file);
    if (!hp) return R::fail(hp.error());

    std::unique_ptr<Model> m(new Model());
    m->file_ = std::move(*file);
    m->hp_ = *hp;
    m->impl_ = std::make_unique<Impl>();
    const HParams& h = m->hp_;
    Impl& w = *m->impl_;
    try {
        Binder b(*m->file_, w);
        w.tok_embd = b.matrix("token_embd.weight", h.n_embd, h.n_vocab);
        w.output_norm = b.vector("output_norm.weight", h.n_embd);
        w.output = h.tied_output ? w.tok_embd : b.matrix("output.weight", h.n_embd, h.n_vocab);
        w.rope_freqs = b.vector("rope_freqs.weight", h.n_rot / 2, false);
        w.layers.resize((size_t)h.n_layer);
        for (int64_t i = 0; i < h.n_layer; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            LayerWeights& l = w.layers[(size_t)i];
            l.attn_norm = b.vector(p + "attn_norm.weight", h.n_embd);
            l.wq = b.matrix(p + "attn_q.weight", h.n_embd, h.n_embd_q());
            l.wk = b.matrix(p + "attn_k.weight", h.n_embd, h.n_embd_kv());
            l.wv = b.matrix(p + "attn_v.weight", h.n_embd, h.n_embd_kv());
            l.bq = b.vector(p + "attn_q.bias", h.n_embd_q(), h.qkv_bias);
            l.bk = b.vector(p + "attn_k.bias", h.n_embd_kv(), h.qkv_bias);
            l.bv = b.vector(p + "attn_v.bias", h.n_embd_kv(), h.qkv_bias);
            l.wo = b.matrix(p + "attn_output.weight", h.n_embd_q(), h.n_embd);
            l.ffn_norm = b.vector(p + "ffn_norm.weight", h.n_embd);
            l.w_gate = b.matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
            l.w_up = b.matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
            l.w_down = b.matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
        }
    } catch (const Error& e) {
        return R::fail(e.what());
    }
    return m;
}

void Model::warm_up() const {
    const uint8_t* p = file_->data();
    const size_t n = file_->file_size();
    volatile uint8_t sink = 0;
    for (size_t off = 0; off < n; off += 4096) sink = sink + p[off];
    (void)sink;
}

Result<std::monostate> Model::lock_memory() const {
    if (mlock(file_->data(), file_->file_size()) != 0)
        return Result<std::monostate>::fail(
            std::string("mlock of ") + std::to_string(file_->file_size() >> 20) +
            " MiB failed: " + std::strerror(errno) + " (raise the locked-memory limit: ulimit -l)");
    return std::monostate{};
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
