// Values (value.h): construction with bounded nesting, Python's truth, ==, < and type
// names, str() and repr(), json.dumps (the tojson filter) and values from JSON.
#include "text/jinja/value.h"

#include "text/jinja/py_strings.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm::jinja::detail {
namespace {

int depth_of(const Value& v) {
    if (v.kind == Kind::Array) return v.arr->depth;
    if (v.kind == Kind::Object) return v.obj->depth;
    return v.kind == Kind::Namespace ? 1 : 0;
}

}  // namespace

// Lists, tuples and dicts are made here, so that nesting stays bounded (destroying and
// printing them recurse).
Value make_list(std::vector<Value> items, bool is_tuple) {
    work(items.size());
    int depth = 0;
    for (const Value& x : items) depth = std::max(depth, depth_of(x));
    if (depth + 1 > kMaxValueDepth)
        throw EvalError("lists and dicts nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    Value v;
    v.kind = Kind::Array;
    v.arr = std::make_shared<ArrayData>();
    v.arr->items = std::move(items);
    v.arr->is_tuple = is_tuple;
    v.arr->depth = depth + 1;
    return v;
}

Value make_generator(std::vector<Value> items) {
    Value v = make_list(std::move(items));
    v.arr->is_generator = true;
    return v;
}

Value make_dict(std::shared_ptr<ObjectData> d) {
    work(d->items.size());
    int depth = 0;
    for (const auto& [k, x] : d->items) depth = std::max({depth, depth_of(k), depth_of(x)});
    if (depth + 1 > kMaxValueDepth)
        throw EvalError("lists and dicts nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    d->depth = depth + 1;
    Value v;
    v.kind = Kind::Object;
    v.obj = std::move(d);
    return v;
}

Value make_callable(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
    Value v;
    v.kind = Kind::Callable;
    v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}

// Python's type names, for error messages.
std::string type_name(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::Array:
            return v.arr->is_generator ? "generator" : (v.arr->is_tuple ? "tuple" : "list");
        case Kind::Object:
            return "dict";
        case Kind::Namespace:
            return "Namespace";
        case Kind::Callable:
            return "function";
    }
    return "?";
}

// Jinja2's object_type_repr (in "'dict object' has no attribute 'x'").
std::string object_type_repr(const Value& v) {
    if (v.kind == Kind::None) return "None";
    if (v.kind == Kind::Namespace) return "jinja2.utils.Namespace object";
    return type_name(v) + " object";
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
            return v.b;
        case Kind::Int:
            return v.i != 0;
        case Kind::Float:
            return v.f != 0;
        case Kind::String:
            return !v.s.empty();
        case Kind::Array:
            return v.arr->is_generator || !v.arr->items.empty();
        case Kind::Object:
            return !v.obj->items.empty();
        case Kind::Namespace:
        case Kind::Callable:
            return true;
    }
    return false;
}

// Python's ==.
bool py_equal(const Value& a, const Value& b) {
    work(1);
    if (is_number(a) && is_number(b)) {
        if (is_integral(a) && is_integral(b)) return int_of(a) == int_of(b);
        return double_of(a) == double_of(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::Undefined:
        case Kind::None:
            return true;
        case Kind::String:
            work(std::min(a.s.size(), b.s.size()) / 8);
            return a.s == b.s;
        case Kind::Array: {
            if (a.arr->is_generator || b.arr->is_generator) return a.arr == b.arr;
            const auto& x = a.arr->items;
            const auto& y = b.arr->items;
            if (a.arr->is_tuple != b.arr->is_tuple || x.size() != y.size()) return false;
            for (size_t k = 0; k < x.size(); ++k)
                if (!py_equal(x[k], y[k])) return false;
            return true;
        }
        case Kind::Object: {
            if (a.obj->items.size() != b.obj->items.size()) return false;
            for (const auto& [k, v] : a.obj->items) {
                const Value* other = b.obj->find(k);
                if (!other || !py_equal(v, *other)) return false;
            }
            return true;
        }
        case Kind::Namespace:
            return a.obj == b.obj;
        case Kind::Callable:
            return a.fn == b.fn;
        default:
            return false;
    }
}

const Value* ObjectData::find(const Value& key) const {
    if (key.kind == Kind::String) return find(std::string_view(key.s));
    for (const auto& [k, v] : items)
        if (py_equal(k, key)) return &v;
    return nullptr;
}

void ObjectData::set(Value key, Value value) {
    for (auto& [k, v] : items) {
        if (py_equal(k, key)) {
            v = std::move(value);
            return;
        }
    }
    items.emplace_back(std::move(key), std::move(value));
}

// Python's ordering (<): numbers, strings (code point order = UTF-8 byte order), lists
// and tuples element by element. Returns <0, 0, >0.
int py_compare(const Value& a, const Value& b, const char* op) {
    work(1);
    if (a.kind == Kind::Undefined) throw EvalError(a.s);
    if (b.kind == Kind::Undefined) throw EvalError(b.s);
    if (is_number(a) && is_number(b)) {
        if (is_integral(a) && is_integral(b))
            return int_of(a) < int_of(b) ? -1 : (int_of(a) > int_of(b) ? 1 : 0);
        const double x = double_of(a), y = double_of(b);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.kind == Kind::String && b.kind == Kind::String) {
        work(std::min(a.s.size(), b.s.size()) / 8);
        return a.s.compare(b.s);
    }
    if (a.kind == Kind::Array && b.kind == Kind::Array && a.arr->is_tuple == b.arr->is_tuple &&
        !a.arr->is_generator && !b.arr->is_generator) {
        const auto& x = a.arr->items;
        const auto& y = b.arr->items;
        for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
            if (py_equal(x[k], y[k])) continue;
            return py_compare(x[k], y[k], op);
        }
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    throw EvalError(std::string("'") + op + "' not supported between instances of '" +
                    type_name(a) + "' and '" + type_name(b) + "'");
}

namespace {

// Python's repr() of a str: single quotes unless the text has ' and no ".
void repr_string(std::string& out, std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    out += quote;
    char buf[16];
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        if (c == static_cast<uint32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else if ((c >= 0xD800 && c <= 0xDFFF) || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
                   (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) || c == 0x3000 ||
                   c == 0xFEFF || (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) ||
                   c == 0xFFFE || c == 0xFFFF) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else if (c >= 0xF0000) {
            std::snprintf(buf, sizeof(buf), "\\U%08x", c);
            out += buf;
        } else {
            append_utf8(out, c);
        }
    }
    out += quote;
}

void append_repr(std::string& out, const Value& v, int depth);

// Python's str(): what {{ value }} prints.
void append_str(std::string& out, const Value& v, int depth) {
    if (depth > kMaxValueDepth + 8) throw EvalError("value nested too deeply to print");
    if (out.size() > kMaxStringBytes) throw EvalError("string too long (more than 32 MiB)");
    work(1);
    switch (v.kind) {
        case Kind::Undefined:
            return;
        case Kind::None:
            out += "None";
            return;
        case Kind::Bool:
            out += v.b ? "True" : "False";
            return;
        case Kind::Int:
            out += std::to_string(v.i);
            return;
        case Kind::Float:
            out += float_repr(v.f);
            return;
        case Kind::String:
            out += v.s;
            return;
        case Kind::Array: {
            if (v.arr->is_generator) {
                out += "<generator object>";  // Python adds an address
                return;
            }
            const auto& items = v.arr->items;
            out += v.arr->is_tuple ? '(' : '[';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += ", ";
                append_repr(out, items[k], depth + 1);
            }
            if (v.arr->is_tuple && items.size() == 1) out += ',';
            out += v.arr->is_tuple ? ')' : ']';
            return;
        }
        case Kind::Object:
        case Kind::Namespace: {
            if (v.kind == Kind::Namespace) out += "<Namespace ";
            out += '{';
            bool first = true;
            for (const auto& [k, x] : v.obj->items) {
                if (!first) out += ", ";
                first = false;
                append_repr(out, k, depth + 1);
                out += ": ";
                append_repr(out, x, depth + 1);
            }
            out += '}';
            if (v.kind == Kind::Namespace) out += '>';
            return;
        }
        case Kind::Callable:
            out += "<function " + v.fn->name + ">";
            return;
    }
}

void append_repr(std::string& out, const Value& v, int depth) {
    if (v.kind == Kind::String)
        repr_string(out, v.s);
    else if (v.kind == Kind::Undefined)
        out += "Undefined";
    else
        append_str(out, v, depth);
}

}  // namespace

std::string to_str(const Value& v) {
    if (v.kind == Kind::String) return v.s;
    std::string out;
    append_str(out, v, 0);
    return out;
}

std::string to_repr(const Value& v) {
    std::string out;
    append_repr(out, v, 0);
    return out;
}

// ---- json.dumps -------------------------------------------------------------------------

namespace {

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
    char buf[16];
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const uint32_t c = next_code_point(s, i);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
                    if (c >= 0x10000) {
                        const uint32_t v = c - 0x10000;
                        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                                      0xDC00 + (v & 0x3FF));
                    } else {
                        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    }
                    out += buf;
                } else {
                    append_utf8(out, c);
                }
        }
    }
    out += '"';
}

std::string json_number(const Value& v) {
    if (v.kind == Kind::Float) {
        if (std::isnan(v.f)) return "NaN";
        if (std::isinf(v.f)) return v.f > 0 ? "Infinity" : "-Infinity";
        return float_repr(v.f);
    }
    return std::to_string(int_of(v));
}

}  // namespace

void json_dump(std::string& out, const Value& v, const JsonStyle& st, int level) {
    if (out.size() > kMaxStringBytes) throw EvalError("tojson output too long");
    auto newline = [&](int lvl) {
        out += '\n';
        for (int k = 0; k < lvl; ++k) out += *st.indent;
    };
    switch (v.kind) {
        case Kind::None:
            out += "null";
            return;
        case Kind::Bool:
            out += v.b ? "true" : "false";
            return;
        case Kind::Int:
        case Kind::Float:
            out += json_number(v);
            return;
        case Kind::String:
            json_quote(out, v.s, st.ensure_ascii);
            return;
        case Kind::Array: {
            if (v.arr->is_generator)
                throw EvalError("Object of type generator is not JSON serializable");
            const auto& items = v.arr->items;
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            if (st.indent) newline(level + 1);
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) {
                    out += st.item_sep;
                    if (st.indent) newline(level + 1);
                }
                json_dump(out, items[k], st, level + 1);
            }
            if (st.indent) newline(level);
            out += ']';
            return;
        }
        case Kind::Object: {
            std::vector<std::pair<std::string, const Value*>> items;
            for (const auto& [k, x] : v.obj->items) {
                std::string key;
                if (k.kind == Kind::String)
                    key = k.s;
                else if (k.kind == Kind::Int || k.kind == Kind::Float)
                    key = json_number(k);
                else if (k.kind == Kind::Bool)
                    key = k.b ? "true" : "false";
                else if (k.kind == Kind::None)
                    key = "null";
                else
                    throw EvalError("keys must be str, int, float, bool or None, not " +
                                    type_name(k));
                items.emplace_back(std::move(key), &x);
            }
            if (items.empty()) {
                out += "{}";
                return;
            }
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            out += '{';
            if (st.indent) newline(level + 1);
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) {
                    out += st.item_sep;
                    if (st.indent) newline(level + 1);
                }
                json_quote(out, items[k].first, st.ensure_ascii);
                out += st.key_sep;
                json_dump(out, *items[k].second, st, level + 1);
            }
            if (st.indent) newline(level);
            out += '}';
            return;
        }
        case Kind::Undefined:
        case Kind::Namespace:
        case Kind::Callable:
            throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
    }
}

template <class Json>
Value from_json(const Json& j, int depth) {
    if (depth > kMaxValueDepth)
        throw EvalError("the context is nested too deeply (more than " +
                        std::to_string(kMaxValueDepth) + " levels)");
    if (j.is_null()) return Value::none();
    if (j.is_boolean()) return Value::boolean(j.template get<bool>());
    if (j.is_number_unsigned()) {
        const auto u = j.template get<uint64_t>();
        if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
        return Value::real(static_cast<double>(u));
    }
    if (j.is_number_integer()) return Value::integer(j.template get<int64_t>());
    if (j.is_number_float()) return Value::real(j.template get<double>());
    if (j.is_string()) return Value::string(j.template get<std::string>());
    if (j.is_array()) {
        std::vector<Value> items;
        items.reserve(j.size());
        for (const auto& x : j) items.push_back(from_json(x, depth + 1));
        return make_list(std::move(items));
    }
    if (j.is_object()) {
        auto d = std::make_shared<ObjectData>();
        d->items.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it)
            d->items.emplace_back(Value::string(it.key()), from_json(it.value(), depth + 1));
        return make_dict(std::move(d));
    }
    if (j.is_binary()) throw EvalError("the context holds a binary value");
    return Value::undefined("a discarded JSON value");
}

template Value from_json(const nlohmann::json& j, int depth);
template Value from_json(const nlohmann::ordered_json& j, int depth);

}  // namespace edgellm::jinja::detail
