#include "compute/ops.h"

#include <cmath>

#include "kernels/fp16.h"

namespace edgellm {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += (double)x[i] * x[i];
    const float scale = 1.0f / std::sqrt((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

namespace {

float gelu_tanh(float x) {
    const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

}  // namespace

void geglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        float g;
        if (x <= -10.0f)
            g = 0.0f;
        else if (x >= 10.0f)
            g = x;
        else
            g = fp16_to_f32(f32_to_fp16(gelu_tanh(fp16_to_f32(f32_to_fp16(x)))));
        gate[i] = g * up[i];
    }
}

void softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void hadamard(float* x, int64_t len, int n) {
    const float norm = 1.0f / std::sqrt((float)n);
    for (int64_t at = 0; at + n <= len; at += n) {
        float* v = x + at;
        for (int h = 1; h < n; h *= 2)
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; ++j) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
        for (int i = 0; i < n; ++i) v[i] *= norm;
    }
}

void scale(float* x, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add(float* x, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += b[i];
}

void rope(float* x, int64_t pos, const RopeParams& p) {
    const int half = p.n_rot / 2;
    const float theta_scale = std::pow(p.freq_base, -2.0f / (float)p.n_rot);
    float theta = (float)pos * p.freq_scale;  // theta_i = theta_0 * theta_scale^i
    for (int i = 0; i < half; ++i) {
        const float t = p.freq_factors ? theta / p.freq_factors[i] : theta;
        const float c = std::cos(t), s = std::sin(t);
        const int a = p.neox ? i : 2 * i;
        const int b = p.neox ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

}  // namespace edgellm
