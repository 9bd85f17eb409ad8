// The values templates compute with (value.cpp): Python's None, bool, int, float, str,
// list, tuple, dict, plus Jinja2's Undefined, namespace() and callables; their Python
// behaviour (truth, ==, <, str(), repr()), json.dumps and the values of a JSON context.
#pragma once

#include "text/jinja/internal.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace edgellm::jinja::detail {

enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    Array,      // a list, or a tuple (ArrayData::is_tuple)
    Object,     // a dict, keys in insertion order
    Namespace,  // namespace(): the one mutable object
    Callable,   // macros, bound methods, globals
};

struct ArrayData;
struct ObjectData;
struct Callable;

struct Value {
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;  // String: the text (UTF-8); Undefined: why, for the error when misused
    std::shared_ptr<ArrayData> arr;
    std::shared_ptr<ObjectData> obj;  // Object and Namespace
    std::shared_ptr<Callable> fn;

    static Value undefined(std::string why) {
        Value v;
        v.s = std::move(why);
        return v;
    }
    static Value none() {
        Value v;
        v.kind = Kind::None;
        return v;
    }
    static Value boolean(bool x) {
        Value v;
        v.kind = Kind::Bool;
        v.b = x;
        return v;
    }
    static Value integer(int64_t x) {
        Value v;
        v.kind = Kind::Int;
        v.i = x;
        return v;
    }
    static Value real(double x) {
        Value v;
        v.kind = Kind::Float;
        v.f = x;
        return v;
    }
    static Value string(std::string x) {
        Value v;
        v.kind = Kind::String;
        v.s = std::move(x);
        return v;
    }
    bool is(Kind k) const { return kind == k; }
};

struct ArrayData {
    std::vector<Value> items;
    bool is_tuple = false;
    // What Jinja2's map, select, reject, selectattr, rejectattr, unique, items and reverse
    // return: a Python generator. It iterates like a list but is always true, has no
    // len(), cannot be indexed and prints as an object.
    bool is_generator = false;
    int depth = 1;  // nesting of lists/dicts, this one included
};

struct ObjectData {
    std::vector<std::pair<Value, Value>> items;  // insertion order, as Python's dict
    int depth = 1;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const {
        work(items.size());
        for (const auto& [k, v] : items)
            if (k.kind == Kind::String && k.s == key) return &v;
        return nullptr;
    }
    void set(Value key, Value value);
};

class Interpreter;

struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
    std::string name;
    std::function<Value(Interpreter&, Args&)> call;
};

Value make_list(std::vector<Value> items, bool is_tuple = false);
Value make_generator(std::vector<Value> items);
Value make_dict(std::shared_ptr<ObjectData> d);
Value make_callable(std::string name, std::function<Value(Interpreter&, Args&)> fn);

inline bool is_number(const Value& v) {
    return v.kind == Kind::Int || v.kind == Kind::Float || v.kind == Kind::Bool;
}
inline bool is_integral(const Value& v) {
    return v.kind == Kind::Int || v.kind == Kind::Bool;
}
inline int64_t int_of(const Value& v) {
    return v.kind == Kind::Bool ? (v.b ? 1 : 0) : v.i;
}
inline double double_of(const Value& v) {
    return v.kind == Kind::Float ? v.f : static_cast<double>(int_of(v));
}

std::string type_name(const Value& v);
std::string object_type_repr(const Value& v);
bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b, const char* op);
std::string to_str(const Value& v);
std::string to_repr(const Value& v);

// ---- json.dumps -------------------------------------------------------------------------

struct JsonStyle {
    std::optional<std::string> indent;  // none: one line
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};

void json_dump(std::string& out, const Value& v, const JsonStyle& st, int level);

// The value of a JSON context (nlohmann::json or nlohmann::ordered_json).
template <class Json>
Value from_json(const Json& j, int depth);

}  // namespace edgellm::jinja::detail
