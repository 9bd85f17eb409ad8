// The architecture table: one entry per family, the one place that says what a family's
// GGUF holds — its metadata keys (required, optional, defaults), its tensors (GGUF name,
// Hugging Face name, shape in terms of the hyper-parameters, which layers, required or
// optional, how the quantizer treats them) and its feature flags. The loader binds from it,
// `synth` writes from it, `quantize` plans from it, `inspect` bills from it and `convert`
// maps Hugging Face checkpoints with it. What a family's forward pass does differently is
// in its feature flags (HParams) and forward.cpp; docs/architectures.md says how to add one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/model.h"

namespace edgellm {

// A length a tensor's shape is written in.
enum class Dim : uint8_t {
    One,
    Embd,       // n_embd
    Vocab,      // n_vocab
    Ff,         // n_ff
    FfPair,     // 2 n_ff: gate and up in one matrix (Phi-3)
    Q,          // n_head * head_dim
    Kv,         // n_head_kv * head_dim
    Qkv,        // Q + 2 Kv: q, k and v in one matrix (Phi-3)
    HeadDim,    // head_dim
    HeadHalf,   // head_dim / 2 (Gemma 4's RoPE frequency factors)
    RotHalf,    // n_rot / 2 (RoPE frequency factors)
    PerLayer,     // n_embd_per_layer (Gemma 4's per-layer embeddings)
    PerLayerAll,  // n_embd_per_layer x n_layer
    ConvKernel,   // conv_kernel: the taps of a recurrent layer's convolution (LFM2)
    Embd3,        // 3 n_embd: B, C and x of LFM2's short convolution in one matrix
};

// Where the engine keeps a bound tensor.
enum class Slot : uint8_t {
    // the model's
    TokEmbd, Output, OutputNorm, RopeFreqs, RopeLong, RopeShort,
    PerLayerTokEmbd, PerLayerModelProj, PerLayerProjNorm,
    // each layer's
    AttnNorm, Wq, Wk, Wv, Wqkv, Bq, Bk, Bv, Wo, QNorm, KNorm, PostAttnNorm,
    FfnNorm, Gate, Up, Down, PostFfnNorm,
    PerLayerGate, PerLayerProj, PerLayerPostNorm, OutScale,
    // LFM2's short convolution (recurrent layers)
    ConvInProj, ConvKernel, ConvOutProj,
};

// How llama.cpp's quantizer treats a tensor (llama_tensor_get_type's cases).
enum class QuantRole : uint8_t {
    Keep,      // stays as it is (norms, biases, frequency factors: 1-D)
    TokEmbd,   // the token embedding (the output projection too when tied)
    Output,    // output.weight
    AttnQ, AttnK, AttnV, AttnQkv, AttnOut,
    FfnGate, FfnUp, FfnDown,
};

// How a Hugging Face tensor becomes the GGUF one (convert).
enum class HfMap : uint8_t {
    Copy,
    RopePermuteQ,  // Llama's q_proj: HF interleaves RoPE halves; llama.cpp's layout pairs them
    RopePermuteK,  // the same for k_proj (with the KV heads)
    PlusOne,       // Gemma's norms store w - 1
};

// When a tensor is part of a model at all (its `required` holds only then).
enum class When : uint8_t {
    Always,
    KvLayer,       // on layers with K/V of their own (Gemma 4's shared layers have none)
    PerLayerEmbd,  // in models with per-layer embeddings (n_embd_per_layer > 0)
    AttnLayer,     // on a hybrid's attention layers (every layer of a model without
                   // recurrent ones)
    RecurrentLayer,  // on a hybrid's recurrent layers (HParams::is_recurrent)
};

struct ArchTensor {
    const char* gguf;  // "attn_q.weight" (a layer's: "blk.N." in front)
    const char* hf;    // "model.layers.%d.self_attn.q_proj.weight" (null: not in checkpoints)
    Slot slot;
    Dim ne0, ne1;      // ne1 One: a vector
    bool per_layer;    // one per layer (blk.N.) or one for the model
    bool required;
    // When this tensor is absent, `instead` (another of the entry's GGUF names) must be
    // there, and the other way round: fused q/k/v or the three apart.
    const char* instead;
    QuantRole quant;
    HfMap hf_map;
    When when = When::Always;
    // Read lazily from the mapping (a token table read row by row): never repacked, locked
    // or warmed, and billed apart (MemoryBill::weights_lazy).
    bool lazy = false;
};

// Which HParams field a metadata key fills.
enum class Field : uint8_t {
    CtxTrain, Embd, Layers, Ff, Heads, HeadsKv, KeyLength, ValueLength, RmsEps, Rot,
    RopeBase, RopeBaseSwa, Swa, SwaPattern, FinalSoftcap, RopeCtxOrig, RopeAttnFactor,
    // Gemma 4
    KeyLengthSwa, ValueLengthSwa, RotSwa, SharedKvLayers, EmbdPerLayer,
    // hybrids
    ConvKernel,
};

// Whether a key's value is one number, one per layer (an array of block_count values), or
// either (llama.cpp's get_key_or_arr).
enum class KeyForm : uint8_t { Scalar, PerLayer, Either };

inline constexpr double kNoDefault = -1e300;

struct ArchKey {
    const char* key;  // after "ARCH.": "embedding_length"
    const char* hf;   // config.json's name for it (null: none, or computed by convert)
    Field field;
    bool is_float;
    bool required;
    double def = kNoDefault;  // an optional key absent: this, else HParams' default
    KeyForm form = KeyForm::Scalar;
};

// Tensors a family's files may carry that edgellm refuses by name, saying why (Gemma 4's
// image and audio encoders, its mixture of experts): a name starting with `prefix`, or
// (prefix null) containing `part`.
struct ArchRefusal {
    const char* prefix;
    const char* part;
    const char* why;
};

// What `edgellm convert` (src/modelfile/convert) offers a family's hooks: config.json's
// fields, the checkpoint's files and the GGUF being written. A field path is "a.b" into
// config.json (text_config merged in); "rope.X" is the rope parameters as llama.cpp's
// converter gathers them (rope_parameters or rope_scaling, with rope_theta,
// partial_rotary_factor, original_max_position_embeddings; the full-attention ones when
// there are two kinds) and "rope_swa.X" the sliding-window layers' ones. Getters give nothing
// for an absent or null field and throw edgellm::Error naming a field of the wrong type; a
// hook refuses a checkpoint the same way (fail).
class HfConvert {
  public:
    virtual ~HfConvert() = default;
    virtual std::optional<double> number(std::string_view field) const = 0;
    virtual std::optional<int64_t> integer(std::string_view field) const = 0;
    virtual std::optional<std::string> string(std::string_view field) const = 0;
    virtual std::optional<std::vector<double>> numbers(std::string_view field) const = 0;
    virtual std::optional<std::vector<std::string>> strings(std::string_view field) const = 0;
    virtual std::optional<bool> flag(std::string_view field) const = 0;
    virtual bool has(std::string_view field) const = 0;  // present (null included)
    // The field, or the refusal "config.json: FIELD missing".
    int64_t need_integer(std::string_view field) const;
    double need_number(std::string_view field) const;
    [[noreturn]] void fail(const std::string& why) const;

    virtual bool has_file(std::string_view name) const = 0;  // in the checkpoint's directory
    // In one of its JSON files: the entries of the object or array at `path` (0: none), the
    // boolean or string at `path` (nothing when absent or of another type).
    virtual int64_t json_entries(std::string_view file, std::string_view path) const = 0;
    virtual std::optional<bool> file_flag(std::string_view file, std::string_view path) const = 0;
    virtual std::optional<std::string> file_string(std::string_view file,
                                                   std::string_view path) const = 0;

    // The GGUF's metadata; keys after "ARCH." (the family's) unless they start "general." or
    // "tokenizer.".
    virtual void set_u32(const std::string& key, uint32_t v) = 0;
    virtual void set_f32(const std::string& key, float v) = 0;
    virtual void set_bool(const std::string& key, bool v) = 0;
    virtual void set_string(const std::string& key, const std::string& v) = 0;
    // (llama.cpp writes a list of Python ints as INT32, of bools as BOOL)
    virtual void set_i32_array(const std::string& key, const std::vector<int32_t>& v) = 0;
    virtual void set_bool_array(const std::string& key, const std::vector<bool>& v) = 0;
    virtual void remove(const std::string& key) = 0;
    // The key (written already) moved after the others, where a hook that writes its own
    // order wants it (general.file_type).
    virtual void move_to_end(const std::string& key) = 0;
    // A key of a generated tensor: llama.cpp writes those while it makes the tensors, before
    // the general.* keys.
    virtual void set_f32_early(const std::string& key, float v) = 0;
    // A tensor computed from config.json (F32, one dimension), written before the
    // checkpoint's, as llama.cpp's generate_extra_tensors.
    virtual void add_tensor(const std::string& gguf_name, std::vector<float> values) = 0;
    // Keep only the first `rows` rows (outer dimension) of a checkpoint tensor.
    virtual void keep_rows(const std::string& gguf_name, int64_t rows) = 0;

    // The tokenizer, as llama.cpp's set_vocab variants read it. SentencePiece's
    // tokenizer.model with its added tokens read as llama.cpp's base converter does, or as
    // its Phi-3 converter does (false: no tokenizer.model); byte-level BPE from
    // tokenizer.json (its pre-tokenizer identified as llama.cpp names it).
    enum class SpmAdded { Base, Phi3 };
    virtual bool vocab_sentencepiece(SpmAdded how) = 0;
    virtual void vocab_bpe() = 0;
    // tokenizer.json's SentencePiece-style BPE (byte fallback) as transformers' fast tokenizer
    // gives it to llama.cpp's LlamaHfVocab: the model's tokens, then the added tokens past
    // them, every score -1000; a token BYTE when it is <0xXX>, CONTROL when it is one of the
    // tokenizer's special tokens (tokenizer_config.json's), an added one past the model's
    // USER_DEFINED otherwise; the texts of `user_defined` USER_DEFINED whatever they are.
    // tokenizer.ggml.model is `model`; the merges and the special tokens as SpecialVocab's.
    virtual void vocab_llama_hf(const std::string& model, const std::vector<std::string>& user_defined) = 0;
    // Tokens written to tokenizer.ggml.tokens (after the vocabulary hook).
    virtual int64_t n_tokens() const = 0;
};

// A config.json field transformers' config class fills in when it is absent or null (llama.cpp's
// converter reads the config through transformers): a value, or another field's (divided by
// a third's).
struct HfDefault {
    const char* field;
    double value = 0.0;
    const char* from = nullptr;
    const char* over = nullptr;
};

struct ArchInfo {
    const char* name;                   // general.architecture
    std::vector<const char*> hf_archs;  // config.json "architectures" convert takes
    std::vector<ArchKey> keys;
    std::vector<ArchTensor> tensors;
    // Feature flags copied to HParams (see there): how the forward pass differs.
    bool rope_neox = false;
    bool qk_norm = false;
    bool gemma = false;          // Gemma's post-norms, GELU FFN, scaled embeddings, windows
    int64_t nope_every = 0;      // SmolLM3: no RoPE on layers with (il + 1) % nope_every == 0
    bool longrope = false;       // Phi-3: short/long RoPE factors chosen by the context
    // LFM2: a layer whose attention.head_count_kv is 0 is a recurrent one (llama.cpp's
    // is_recr: head_count_kv is an array with 0 on the short convolution layers).
    bool recurrent_without_kv_heads = false;
    std::vector<ArchRefusal> refused;
    const char* tokenizer_pre = "default";  // what synth writes
    // What the table cannot say: defaults and checks of the family (null: none). Returns
    // an error ("" : fine).
    std::string (*finish)(HParams& hp, const GgufFile& f) = nullptr;
    // What convert writes beyond the keys whose `hf` names a config.json field (those it
    // writes when present, refusing a required one that is absent) and the checkpoint's
    // tensors: computed keys and tensors, llama.cpp's defaults and quirks (null: nothing).
    void (*convert)(HfConvert& c) = nullptr;
    // How convert reads the tokenizer (null: tokenizer.model when there is one, else
    // tokenizer.json's BPE: llama.cpp's Qwen2 converter).
    void (*convert_vocab)(HfConvert& c) = nullptr;
    // What transformers' config class of the family fills in (the fields real checkpoints
    // leave out: the KV heads, the head dimension, RoPE's base, the norms' epsilon...).
    std::vector<HfDefault> hf_defaults;
};

// Every family, and the one named (null: none).
const std::vector<const ArchInfo*>& architectures();
// Why edgellm refuses an architecture it knows of but does not run (null: it does not know it).
const char* refused_architecture(std::string_view name);
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, ..." for messages.
std::string arch_names();

// The length `d` stands for in a model of these hyper-parameters (layer il).
int64_t dim_length(Dim d, const HParams& hp, int64_t il = 0);
// A tensor's GGUF name in layer il ("blk.3.attn_q.weight"), or the model's.
std::string tensor_name(const ArchTensor& t, int64_t il);
// The entry and layer a GGUF tensor name belongs to (null: not one of the family's).
const ArchTensor* find_tensor(const ArchInfo& a, std::string_view gguf_name,
                              int64_t* layer = nullptr);
// Why the family refuses a tensor of this name (null: it does not).
const char* refusal(const ArchInfo& a, std::string_view gguf_name);
// Whether tensor t is part of layer il (il < 0: the model's) of a model of these
// hyper-parameters (its When).
bool tensor_present(const ArchTensor& t, const HParams& hp, int64_t il);

}  // namespace edgellm
