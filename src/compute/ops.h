// Element-wise and row-wise operations of the forward pass, in f32.
#pragma once

#include <cstdint>

namespace edgellm {

// y = x / sqrt(mean(x^2) + eps) * w   (RMSNorm; the sum of squares in double as ggml does;
// w null: no weight)
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// y = silu(gate) * up, in place over gate.  silu(x) = x / (1 + exp(-x))
void swiglu(float* gate, const float* up, int64_t n);

// y = gelu(gate) * up, in place over gate, with the tanh approximation
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as ggml evaluates it: for
// |x| < 10 on x rounded to f16 and the result rounded to f16 (its lookup table), 0 below
// -10 and x above 10.
void geglu(float* gate, const float* up, int64_t n);

// x = cap * tanh(x / cap)  (logit soft-capping)
void softcap(float* x, int64_t n, float cap);

// x *= s
void scale(float* x, int64_t n, float s);

// x += b
void add(float* x, const float* b, int64_t n);

// Rotary position embedding of one head vector (head_dim elements, the first n_rot
// rotated) at position pos. `neox` pairs element i with i + n_rot/2 (GPT-NeoX / Qwen2);
// otherwise pairs are adjacent (2i, 2i+1), the original LLaMA layout.
// theta_i = pos * freq_scale * base^(-2i/n_rot) / freq_factors[i]  (freq_factors may be null)
struct RopeParams {
    int n_rot = 0;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    bool neox = false;
    const float* freq_factors = nullptr;  // n_rot/2 values (Llama 3.1 long-context scaling)
    float mscale = 1.0f;  // the rotated pairs scaled by this (Phi-3's LongRoPE attn_factor)
};
void rope(float* x, int64_t pos, const RopeParams& p);

// Causal depthwise 1-D convolution of a sequence's rows, carrying its window from call to
// call (LFM2's short convolution, Qwen3.5's conv1d; ggml_ssm_conv):
//   y[t][c] = sum_{k<K} w[c][k] u[t + k][c]        (then silu(y) when `silu`)
// where u is the window (K - 1 rows: the inputs at the K - 1 positions before these, the
// oldest first; zeros before the first position) followed by the n rows of x. Afterwards
// the window holds the last K - 1 rows of u. Channels [0, ch) of rows of ld_x, ld_y and
// ld_win floats (a caller splits the channels among threads by offsetting x, y, window and
// w); w is [ch][K] (GGUF's shortconv.conv / ssm_conv1d: ne0 the taps); y must not overlap
// x or the window. Each sum is fma'd tap by tap from 0, so every clone and the scalar twin
// give the same bits.
void conv1d_causal(const float* x, int64_t ld_x, int64_t n, int64_t ch, const float* w,
                   int64_t K, float* window, int64_t ld_win, float* y, int64_t ld_y, bool silu);
// The scalar twin: channel by channel, the definition.
void conv1d_causal_ref(const float* x, int64_t ld_x, int64_t n, int64_t ch, const float* w,
                       int64_t K, float* window, int64_t ld_win, float* y, int64_t ld_y,
                       bool silu);

// x = H x for each run of n elements (n a power of two), H the orthonormal Walsh-Hadamard
// matrix of order n (Sylvester's, scaled by 1/sqrt(n); H H = I). Turning queries and keys
// (values, and attention's output back) by it leaves attention unchanged and spreads an
// outlier over a block, so a quantized KV cache loses less (llama.cpp does the same).
void hadamard(float* x, int64_t len, int n);

}  // namespace edgellm
