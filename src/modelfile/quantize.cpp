// The per-tensor type plan of llama.cpp's quantizer (llama_tensor_get_type) for the file
// types we support, and the file conversion.
#include "edgellm/quantize.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <thread>

#include "edgellm/arch.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"

namespace edgellm {

namespace {

struct FileTypeInfo {
    FileType type;
    const char* name;
    TensorType base;
};

constexpr FileTypeInfo kFileTypes[] = {
    {FileType::F32, "F32", TensorType::F32},        {FileType::F16, "F16", TensorType::F16},
    {FileType::BF16, "BF16", TensorType::BF16},     {FileType::Q8_0, "Q8_0", TensorType::Q8_0},
    {FileType::Q4_0, "Q4_0", TensorType::Q4_0},     {FileType::Q4_1, "Q4_1", TensorType::Q4_1},
    {FileType::Q5_0, "Q5_0", TensorType::Q5_0},     {FileType::Q5_1, "Q5_1", TensorType::Q5_1},
    {FileType::Q2_K, "Q2_K", TensorType::Q2_K},     {FileType::Q2_K_S, "Q2_K_S", TensorType::Q2_K},
    {FileType::Q3_K_S, "Q3_K_S", TensorType::Q3_K}, {FileType::Q3_K_M, "Q3_K_M", TensorType::Q3_K},
    {FileType::Q3_K_L, "Q3_K_L", TensorType::Q3_K}, {FileType::Q4_K_S, "Q4_K_S", TensorType::Q4_K},
    {FileType::Q4_K_M, "Q4_K_M", TensorType::Q4_K}, {FileType::Q5_K_S, "Q5_K_S", TensorType::Q5_K},
    {FileType::Q5_K_M, "Q5_K_M", TensorType::Q5_K}, {FileType::Q6_K, "Q6_K", TensorType::Q6_K},
};

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

// llama.cpp's choice of layers that get more bits: the first and last eighth, and every
// third layer in between.
bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// A tensor's role for the quantizer: its family's table entry says, else llama.cpp's name
// patterns (a file of a family edgellm does not run can still be quantized).
QuantRole role_of(const TensorSpec& t, const ArchInfo* arch) {
    if (arch)
        if (const ArchTensor* e = find_tensor(*arch, t.name)) return e->quant;
    const std::string& n = t.name;
    if (n == "token_embd.weight") return QuantRole::TokEmbd;
    if (n == "output.weight") return QuantRole::Output;
    if (contains(n, "attn_v.weight")) return QuantRole::AttnV;
    if (contains(n, "attn_qkv.weight")) return QuantRole::AttnQkv;
    if (contains(n, "attn_output.weight")) return QuantRole::AttnOut;
    if (contains(n, "ffn_down")) return QuantRole::FfnDown;
    return QuantRole::AttnQ;  // (any other matrix: the base type)
}

bool is_quantizable(const TensorSpec& t) {
    if (t.n_dims < 2) return false;
    if (!t.name.ends_with("weight")) return false;
    if (contains(t.name, "_norm.weight")) return false;
    if (contains(t.name, "ffn_gate_inp.weight")) return false;
    if (t.name == "position_embd.weight" || t.name == "token_types.weight") return false;
    return true;
}

// A type whose block does not divide the row is replaced as llama.cpp does; its IQ4_NL
// fallback for Q2_K / Q3_K we do not have, and use Q4_0 (same bits per weight, 4.5).
TensorType fallback(TensorType t, int64_t row, std::vector<std::string>* notes,
                    const std::string& name) {
    if (row % tensor_type_info(t).block_size == 0) return t;
    TensorType f;
    switch (t) {
        case TensorType::Q2_K:
        case TensorType::Q3_K:
            f = TensorType::Q4_0;
            if (notes)
                notes->push_back(name +
                                 ": llama.cpp would use IQ4_NL here; using Q4_0 (same size)");
            break;
        case TensorType::Q4_K:
            f = TensorType::Q5_0;
            break;
        case TensorType::Q5_K:
            f = TensorType::Q5_1;
            break;
        case TensorType::Q6_K:
            f = TensorType::Q8_0;
            break;
        default:
            f = TensorType::F16;
            break;
    }
    if (row % tensor_type_info(f).block_size != 0) f = TensorType::F16;
    return f;
}

}  // namespace

std::optional<FileType> file_type_from_name(std::string_view name) {
    for (const auto& i : kFileTypes) {
        const std::string_view n(i.name);
        if (n.size() != name.size()) continue;
        bool eq = true;
        for (size_t k = 0; k < n.size() && eq; ++k)
            eq = std::toupper((unsigned char)name[k]) == n[k];
        if (eq) return i.type;
    }
    return std::nullopt;
}

const char* file_type_name(FileType t) {
    for (const auto& i : kFileTypes)
        if (i.type == t) return i.name;
    return "?";
}

std::vector<FileType> all_file_types() {
    std::vector<FileType> out;
    for (const auto& i : kFileTypes) out.push_back(i.type);
    return out;
}

TensorType file_type_base(FileType t) {
    for (const auto& i : kFileTypes)
        if (i.type == t) return i.base;
    return TensorType::F16;
}

std::vector<TensorType> plan_tensor_types(const std::vector<TensorSpec>& tensors, int64_t n_gqa,
                                          const QuantizeOptions& opts,
                                          std::vector<std::string>* notes) {
    using T = TensorType;
    using F = FileType;
    const F ft = opts.ftype;
    const T base = file_type_base(ft);
    const bool k_mix = !opts.pure && tensor_type_info(base).quantized;
    const ArchInfo* arch = find_arch(opts.arch);
    std::vector<QuantRole> roles;
    bool has_output = false;
    int64_t n_attn_v = 0, n_ffn_down = 0;
    for (const auto& t : tensors) {
        roles.push_back(role_of(t, arch));
        has_output = has_output || roles.back() == QuantRole::Output;
        n_attn_v += roles.back() == QuantRole::AttnV || roles.back() == QuantRole::AttnQkv;
        n_ffn_down += roles.back() == QuantRole::FfnDown;
    }
    int64_t i_attn_v = 0, i_ffn_down = 0;
    std::vector<T> out;
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
        const TensorSpec& t = tensors[ti];
        if (!is_quantizable(t) || roles[ti] == QuantRole::Keep) {
            out.push_back(t.type);
            continue;
        }
        T nt = base;
        const std::string& name = t.name;
        const QuantRole role = roles[ti];
        if (k_mix) {
            if (role == QuantRole::Output || (!has_output && role == QuantRole::TokEmbd)) {
                // The output projection (or the embedding that doubles as it) keeps more bits.
                if (t.ne[0] % tensor_type_info(nt).block_size != 0)
                    nt = T::Q8_0;
                else if (nt != T::Q8_0)
                    nt = T::Q6_K;
            } else if (role == QuantRole::TokEmbd) {
                // stays at the base type
            } else if (role == QuantRole::AttnV || role == QuantRole::AttnQkv) {
                // (q, k and v in one matrix are as sensitive as v: llama.cpp's rules for v)
                if (ft == F::Q2_K)
                    nt = n_gqa >= 4 ? T::Q4_K : T::Q3_K;
                else if (ft == F::Q2_K_S && n_gqa >= 4)
                    nt = T::Q4_K;
                else if (ft == F::Q3_K_M)
                    nt = i_attn_v < 2 ? T::Q5_K : T::Q4_K;
                else if (ft == F::Q3_K_L)
                    nt = T::Q5_K;
                else if ((ft == F::Q4_K_M || ft == F::Q5_K_M) && use_more_bits(i_attn_v, n_attn_v))
                    nt = T::Q6_K;
                else if (ft == F::Q4_K_S && i_attn_v < 4)
                    nt = T::Q5_K;
                ++i_attn_v;
            } else if (role == QuantRole::FfnDown) {
                const int64_t i = i_ffn_down, n = n_ffn_down;
                if (ft == F::Q2_K)
                    nt = T::Q3_K;
                else if (ft == F::Q2_K_S) {
                    if (i < n / 8) nt = T::Q4_K;
                } else if (ft == F::Q3_K_M)
                    nt = i < n / 16 ? T::Q5_K : T::Q4_K;
                else if (ft == F::Q3_K_L)
                    nt = T::Q5_K;
                else if (ft == F::Q4_K_M) {
                    if (use_more_bits(i, n)) nt = T::Q6_K;
                } else if (ft == F::Q5_K_M && use_more_bits(i, n))
                    nt = T::Q6_K;
                else if (ft == F::Q4_K_S && i < n / 8)
                    nt = T::Q5_K;
                ++i_ffn_down;
            } else if (role == QuantRole::AttnOut) {
                if (ft == F::Q2_K)
                    nt = T::Q3_K;
                else if (ft == F::Q3_K_M)
                    nt = T::Q4_K;
                else if (ft == F::Q3_K_L)
                    nt = T::Q5_K;
            }
            nt = fallback(nt, t.ne[0], notes, name);
        }
        if (opts.token_embedding_type && role == QuantRole::TokEmbd) nt = *opts.token_embedding_type;
        if (opts.output_type && role == QuantRole::Output) nt = *opts.output_type;
        if (!k_mix) nt = fallback(nt, t.ne[0], notes, name);
        out.push_back(nt);
    }
    return out;
}

std::vector<TensorSpec> tensor_specs(const GgufFile& f) {
    std::vector<TensorSpec> out;
    for (const auto& t : f.tensors()) {
        // Filled in place: with a local copy, aarch64 GCC 12 at -O3 reports the local as
        // maybe-uninitialized (a false positive that -Werror turns into a failed build).
        TensorSpec& s = out.emplace_back();
        s.name = t.name;
        s.n_dims = t.n_dims;
        std::copy(t.ne, t.ne + 4, s.ne);
        s.type = t.type;
    }
    return out;
}

Result<QuantizeStats> quantize_file(const std::string& in, const std::string& out_path,
                                    const QuantizeRunOptions& ro) {
    using R = Result<QuantizeStats>;
    const auto t0 = std::chrono::steady_clock::now();
    struct stat si, so;
    if (stat(in.c_str(), &si) == 0 && stat(out_path.c_str(), &so) == 0 && si.st_dev == so.st_dev &&
        si.st_ino == so.st_ino)
        return R::fail(out_path + ": refusing to overwrite the input file");
    auto file = GgufFile::open(in);
    if (!file) return R::fail(file.error());
    const GgufFile& f = **file;

    const std::vector<TensorSpec> specs = tensor_specs(f);
    const std::string arch = f.get_string("general.architecture").value_or("");
    const int64_t n_head = f.get_int(arch + ".attention.head_count").value_or(1);
    // (given per layer, Gemma 4: llama.cpp's n_gqa() takes the first layer's)
    const GgufArray* kv_arr = f.get_array(arch + ".attention.head_count_kv");
    const int64_t n_head_kv = kv_arr && kv_arr->count > 0
                                  ? kv_arr->int_at(0).value_or(n_head)
                                  : f.get_int(arch + ".attention.head_count_kv").value_or(n_head);
    const int64_t n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
    std::vector<std::string> notes;
    QuantizeOptions qo = ro.opts;
    qo.arch = arch;
    const std::vector<TensorType> plan = plan_tensor_types(specs, n_gqa, qo, &notes);

    // Check everything before writing anything.
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto& t = f.tensors()[i];
        if (plan[i] == t.type) continue;
        if (!can_quantize(plan[i]))
            return R::fail(std::string("cannot write tensors of type ") +
                           tensor_type_name(plan[i]));
        if (!type_kernels(t.type).to_float)
            return R::fail("tensor \"" + t.name + "\" has type " + tensor_type_name(t.type) +
                           ", which cannot be converted");
        const bool src_quantized =
            t.type != TensorType::F32 && t.type != TensorType::F16 && t.type != TensorType::BF16;
        if (src_quantized && !ro.allow_requantize)
            return R::fail("tensor \"" + t.name + "\" is already " + tensor_type_name(t.type) +
                           "; requantizing loses quality, pass --allow-requantize to do it anyway");
    }

    GgufWriter w;
    w.copy_metadata(f);
    w.set("general.file_type", gguf_value((uint32_t)ro.opts.ftype));
    w.set("general.quantization_version", gguf_value((uint32_t)2));
    const int n_threads =
        ro.n_threads > 0 ? ro.n_threads : (int)std::max(1u, std::thread::hardware_concurrency());
    QuantizeStats stats;
    for (size_t i = 0; i < specs.size(); ++i) {
        const GgufTensorInfo& t = f.tensors()[i];
        const TensorType to = plan[i];
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        const size_t bytes_out = row_size(to, t.ne[0]) * (size_t)(t.n_elements() / t.ne[0]);
        stats.bytes_in += t.n_bytes;
        stats.bytes_out += bytes_out;
        if (to == t.type) {
            ++stats.n_copied;
            w.add_tensor(t.name, to, ne, [&, i, bytes_out](uint8_t* dst, std::string*) {
                std::memcpy(dst, t.data, t.n_bytes);
                if (ro.progress)
                    ro.progress({i, specs.size(), t.name, t.type, to, t.n_bytes, bytes_out});
                return true;
            });
            continue;
        }
        ++stats.n_quantized;
        w.add_tensor(t.name, to, ne, [&, i, to, bytes_out](uint8_t* dst, std::string* err) {
            const int64_t n_per_row = t.ne[0];
            const int64_t rows = t.n_elements() / n_per_row;
            const size_t in_row = row_size(t.type, n_per_row), out_row = row_size(to, n_per_row);
            const ToFloatFn to_float = type_kernels(t.type).to_float;
            std::atomic<int64_t> next{0};
            std::atomic<bool> ok{true};
            auto work = [&] {
                std::vector<float> buf((size_t)n_per_row);
                for (;;) {
                    const int64_t r0 = next.fetch_add(16);
                    if (r0 >= rows) break;
                    for (int64_t r = r0; r < std::min(rows, r0 + 16); ++r) {
                        to_float(t.data + (size_t)r * in_row, buf.data(), n_per_row);
                        if (!quantize_row(to, buf.data(), dst + (size_t)r * out_row, n_per_row))
                            ok = false;
                    }
                }
            };
            std::vector<std::thread> pool;
            for (int k = 1; k < n_threads; ++k) pool.emplace_back(work);
            work();
            for (auto& th : pool) th.join();
            if (!ok) {
                *err = std::string("quantizing to ") + tensor_type_name(to) + " failed";
                return false;
            }
            if (ro.progress)
                ro.progress({i, specs.size(), t.name, t.type, to, t.n_bytes, bytes_out});
            return true;
        });
    }
    auto written = w.write(out_path);
    if (!written) return R::fail(written.error());
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

}  // namespace edgellm
