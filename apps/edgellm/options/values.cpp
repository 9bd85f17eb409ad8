// The parsers the option table's rows are made of, and the value formats they share.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "edgellm/json_schema.h"
#include "options.h"

namespace edgellm::cli {

bool Arg::integer(int64_t lo, int64_t hi, int64_t* out, std::string* err) const {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
        *err = name + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
               ", got \"" + value + "\"";
        return false;
    }
    *out = x;
    return true;
}

bool Arg::number(double lo, double hi, float* out, std::string* err) const {
    errno = 0;
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || x < lo || x > hi) {
        *err = name + " must be a number in " + std::to_string(lo).substr(0, 4) + ".." +
               std::to_string(hi).substr(0, 4) + ", got \"" + value + "\"";
        return false;
    }
    *out = (float)x;
    return true;
}

bool Arg::finite(float* out, std::string* err) const {
    char* end = nullptr;
    const float x = std::strtof(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(x)) {
        *err = name + " must be a number, got \"" + value + "\"";
        return false;
    }
    *out = x;
    return true;
}

Apply store(void (*set)(Settings&, const std::string&)) {
    return [set](const Arg& a, Settings& s, std::string*) {
        set(s, a.value);
        return true;
    };
}

Apply set_flag(void (*set)(Settings&)) {
    return [set](const Arg&, Settings& s, std::string*) {
        set(s);
        return true;
    };
}

namespace {

// A row's parser: `parse` reads the value into a T (false with the reason), `set` stores it.
template <class T, class Parse>
Apply parsed(Parse parse, void (*set)(Settings&, T)) {
    return [=](const Arg& a, Settings& s, std::string* err) {
        T v{};
        if (!parse(a, &v, err)) return false;
        set(s, v);
        return true;
    };
}

}  // namespace

Apply integer(int64_t lo, int64_t hi, void (*set)(Settings&, int64_t)) {
    return parsed(
        [=](const Arg& a, int64_t* v, std::string* err) { return a.integer(lo, hi, v, err); }, set);
}

Apply number(double lo, double hi, void (*set)(Settings&, float)) {
    return parsed(
        [=](const Arg& a, float* v, std::string* err) { return a.number(lo, hi, v, err); }, set);
}

Apply bytes(int64_t lo, int64_t hi, void (*set)(Settings&, int64_t)) {
    // "32 KiB" when it is a whole number of KiB, MiB or GiB; else the bytes.
    auto text = [](int64_t v) {
        for (auto [unit, size] : {std::pair{"GiB", int64_t(1) << 30}, {"MiB", int64_t(1) << 20},
                                  {"KiB", int64_t(1) << 10}})
            if (v >= size && v % size == 0) return std::to_string(v / size) + " " + unit;
        return std::to_string(v) + " bytes";
    };
    return parsed(
        [=](const Arg& a, int64_t* v, std::string* err) {
            const auto b = parse_bytes(a.value);
            if (!b) {
                *err = a.name + " takes a size in bytes (suffixes K, M, G, KiB, MiB, GiB), got \"" +
                       a.value + "\"";
                return false;
            }
            if (*b < lo || *b > hi) {
                *err = a.name + " must be a size in " + text(lo) + ".." + text(hi) + ", got \"" +
                       a.value + "\"";
                return false;
            }
            *v = *b;
            return true;
        },
        set);
}

Apply finite(void (*set)(Settings&, float)) {
    return parsed([](const Arg& a, float* v, std::string* err) { return a.finite(v, err); }, set);
}

Apply kv_type(void (*set)(Settings&, TensorType)) {
    return parsed(
        [](const Arg& a, TensorType* t, std::string* err) {
            const auto parsed_type = parse_kv_type(a.value);
            if (!parsed_type) {
                *err = a.name + " takes " + kv_type_names() + ", got \"" + a.value + "\"";
                return false;
            }
            *t = *parsed_type;
            return true;
        },
        set);
}

namespace {

// The value one of `words`, else the refusal `why` makes.
Apply one_of(std::vector<std::string> words, void (*set)(Settings&, const std::string&),
             std::function<std::string(const Arg&)> why) {
    return [=](const Arg& a, Settings& s, std::string* err) {
        if (std::find(words.begin(), words.end(), a.value) == words.end()) {
            *err = why(a);
            return false;
        }
        set(s, a.value);
        return true;
    };
}

}  // namespace

Apply takes(std::vector<std::string> words, std::string listed,
            void (*set)(Settings&, const std::string&)) {
    return one_of(std::move(words), set, [listed](const Arg& a) {
        return a.name + " takes " + listed + ", got \"" + a.value + "\"";
    });
}

Apply must_be(std::vector<std::string> words, std::string listed,
              void (*set)(Settings&, const std::string&)) {
    return one_of(std::move(words), set,
                  [listed](const Arg& a) { return a.name + " must be " + listed; });
}

Apply cpu_only(const char* what) {
    return [what](const Arg& a, Settings&, std::string* err) {
        if (a.value == "none" || a.value == "cpu" || a.value == "CPU") return true;
        *err = a.name + " " + a.value + ": edgellm runs " + what + "on the CPU (none or cpu)";
        return false;
    };
}

Apply refuse(const char* reason) {
    return [reason](const Arg& a, Settings&, std::string* err) {
        *err = a.name + ": " + reason;
        return false;
    };
}

std::vector<std::string> split_list(const std::string& text) {
    std::set<std::string> items;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        std::string item = text.substr(at, comma - at);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (!item.empty()) items.insert(item);
        at = comma + 1;
    }
    return std::vector<std::string>(items.begin(), items.end());
}

std::optional<int64_t> parse_bytes(const std::string& text) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (...) {
        return std::nullopt;
    }
    std::string unit = text.substr(used);
    for (char& c : unit) c = (char)std::toupper((unsigned char)c);
    double mul = 1;
    if (unit.empty() || unit == "B")
        mul = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB")
        mul = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB")
        mul = 1048576.0;
    else if (unit == "G" || unit == "GB" || unit == "GIB")
        mul = 1073741824.0;
    else
        return std::nullopt;
    if (!(v > 0) || v * mul > 9e18) return std::nullopt;
    return (int64_t)(v * mul);
}

std::optional<TensorType> parse_kv_type(const std::string& s) {
    for (TensorType t : kv_cache_types())
        if (s == tensor_type_name(t)) return t;
    return std::nullopt;
}

std::string kv_type_names() {
    std::string out;
    for (TensorType t : kv_cache_types())
        out += std::string(out.empty() ? "" : ", ") + tensor_type_name(t);
    return out;
}

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

std::shared_ptr<const Grammar> compile_grammar_text(const std::string& text, bool schema,
                                                    const std::string& where, std::string* err) {
    std::string gbnf = text;
    if (schema) {
        const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
        if (j.is_discarded()) {
            *err = where + ": not valid JSON";
            return nullptr;
        }
        SchemaRefusal why;
        auto g = json_schema_to_gbnf(j, &why);
        if (!g) {
            *err = where + ": " + why.message + (why.path.empty() ? "" : " (at " + why.path + ")");
            return nullptr;
        }
        gbnf = std::move(*g);
    }
    auto g = Grammar::parse(gbnf);
    if (!g) {
        *err = where + ": " + g.error();
        return nullptr;
    }
    return std::move(*g);
}

bool read_text_file(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    out->assign(std::istreambuf_iterator<char>(in), {});
    return true;
}

}  // namespace edgellm::cli
