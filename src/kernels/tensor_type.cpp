#include "edgellm/tensor_type.h"

#include <array>
#include <cctype>

#include "edgellm/error.h"

namespace edgellm {

namespace {

constexpr std::array<TensorTypeInfo, kTensorTypeCount> make_table() {
    std::array<TensorTypeInfo, kTensorTypeCount> t{};
    for (auto& e : t) e = {nullptr, 0, 0, false};
    t[0] = {"f32", 1, 4, false};
    t[1] = {"f16", 1, 2, false};
    t[2] = {"q4_0", 32, 18, true};
    t[3] = {"q4_1", 32, 20, true};
    t[6] = {"q5_0", 32, 22, true};
    t[7] = {"q5_1", 32, 24, true};
    t[8] = {"q8_0", 32, 34, true};
    t[9] = {"q8_1", 32, 36, true};
    t[10] = {"q2_K", 256, 84, true};
    t[11] = {"q3_K", 256, 110, true};
    t[12] = {"q4_K", 256, 144, true};
    t[13] = {"q5_K", 256, 176, true};
    t[14] = {"q6_K", 256, 210, true};
    t[15] = {"q8_K", 256, 292, true};
    t[20] = {"iq4_nl", 32, 18, true};
    t[24] = {"i8", 1, 1, false};
    t[25] = {"i16", 1, 2, false};
    t[26] = {"i32", 1, 4, false};
    t[27] = {"i64", 1, 8, false};
    t[28] = {"f64", 1, 8, false};
    t[30] = {"bf16", 1, 2, false};
    return t;
}

constexpr auto kTable = make_table();

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
    if (id >= kTensorTypeCount || kTable[id].name == nullptr) return std::nullopt;
    return kTable[id];
}

const TensorTypeInfo& tensor_type_info(TensorType t) {
    const uint32_t id = (uint32_t)t;
    EDGELLM_ASSERT(id < kTensorTypeCount && kTable[id].name, "unknown tensor type");
    return kTable[id];
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
    for (uint32_t id = 0; id < kTensorTypeCount; ++id) {
        const char* n = kTable[id].name;
        if (!n) continue;
        std::string_view sv(n);
        if (sv.size() != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < sv.size() && eq; ++i)
            eq = std::tolower((unsigned char)sv[i]) == std::tolower((unsigned char)name[i]);
        if (eq) return (TensorType)id;
    }
    return std::nullopt;
}

size_t row_size(TensorType t, int64_t n) {
    const auto& info = tensor_type_info(t);
    EDGELLM_ASSERT(n % info.block_size == 0, "row length not a multiple of the block size");
    return (size_t)(n / info.block_size) * info.type_size;
}

}  // namespace edgellm
