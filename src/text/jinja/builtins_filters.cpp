// The filters (`value | name(args)`) and tests (`value is name(args)`) templates can use,
// as Jinja2 defines them; anything else is an error naming it.
#include "text/jinja/interpreter.h"

#include "text/jinja/py_strings.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value Interpreter::attr_path(const Value& item, const Value& attribute) {
    if (attribute.kind != Kind::String) return get_item(item, attribute);
    Value v = item;
    size_t start = 0;
    for (;;) {
        const size_t dot = attribute.s.find('.', start);
        const std::string part =
            attribute.s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        });
        v = get_item(v, numeric ? Value::integer(std::strtoll(part.c_str(), nullptr, 10))
                                : Value::string(part));
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

Value Interpreter::lowered(const Value& v) {
    return v.kind == Kind::String ? Value::string(str_lower(v.s)) : v;
}

int64_t Interpreter::length_of(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
            return 0;
        case Kind::String:
            return static_cast<int64_t>(count_code_points(v.s));
        case Kind::Array:
            if (v.arr->is_generator) break;
            return static_cast<int64_t>(v.arr->items.size());
        case Kind::Object:
            return static_cast<int64_t>(v.obj->items.size());
        default:
            break;
    }
    throw EvalError("object of type '" + type_name(v) + "' has no len()");
}

Value Interpreter::to_int(const Value& v, const Value& fallback, int base) {
    if (is_integral(v)) return Value::integer(int_of(v));
    if (v.kind == Kind::String) {
        if (auto n = parse_py_int(v.s, base)) return Value::integer(*n);
        if (auto d = parse_py_float(v.s)) return float_to_int(*d, fallback);
        return fallback;
    }
    if (v.kind == Kind::Float) return float_to_int(v.f, fallback);
    return fallback;
}

Value Interpreter::float_to_int(double d, const Value& fallback) {
    if (std::isnan(d)) return fallback;
    if (std::isinf(d)) throw EvalError("cannot convert float infinity to integer");
    const double t = std::trunc(d);
    if (t >= 9.2233720368547758e18 || t < -9.2233720368547758e18)
        throw EvalError("integer overflow (Python's integers are unbounded, these are 64-bit)");
    return Value::integer(static_cast<int64_t>(t));
}

// sort / unique / min / max / dictsort compare this key of an item.
Value Interpreter::sort_key(const Value& item, const std::optional<Value>& attribute,
                            bool case_sensitive) {
    Value k = given(attribute) ? attr_path(item, *attribute) : item;
    return case_sensitive ? k : lowered(k);
}

Value Interpreter::call_test_by_name(const Value& name, const Value& item,
                                     const std::vector<Value>& args,
                                     const std::vector<std::pair<std::string, Value>>& kw) {
    if (name.kind != Kind::String) throw EvalError("a test name must be a string");
    Args a;
    a.pos = args;
    a.kw = kw;
    return Value::boolean(apply_test(name.s, item, a));
}

Value Interpreter::apply_filter(const std::string& name, Value v, Args& a) {
    // ---- strings ----
    if (name == "trim") {
        auto p = bind(name, a, {"chars"});
        const std::string chars = given(p[0]) ? str_arg(p[0], "trim chars") : std::string();
        return Value::string(py_strip(to_str(v), given(p[0]) ? &chars : nullptr, true, true));
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
        bind(name, a, {});
        const std::string s = to_str(v);
        if (name == "upper") return Value::string(str_upper(s));
        if (name == "lower") return Value::string(str_lower(s));
        if (name == "capitalize") return Value::string(str_capitalize(s));
        return Value::string(jinja_title(s));
    }
    if (name == "replace") {
        auto p = bind(name, a, {"old", "new", "count"});
        if (!p[0] || !p[1]) throw EvalError("replace() needs the old and the new text");
        return Value::string(py_replace(to_str(v), to_str(*p[0]), to_str(*p[1]),
                                        int_arg(p[2], "replace count", -1)));
    }
    if (name == "string" || name == "safe") {
        bind(name, a, {});
        return Value::string(to_str(v));
    }
    if (name == "escape" || name == "e" || name == "forceescape") {
        bind(name, a, {});
        return Value::string(html_escape(to_str(v)));
    }
    if (name == "center") {
        auto p = bind(name, a, {"width"});
        Args inner;
        inner.pos.push_back(Value::integer(int_arg(p[0], "center width", 80)));
        return call_method(Value::string(to_str(v)), "center", inner);
    }
    if (name == "indent") {
        auto p = bind(name, a, {"width", "first", "blank"});
        std::string indention;
        if (p[0] && p[0]->kind == Kind::String) {
            indention = p[0]->s;
        } else {
            const int64_t w = int_arg(p[0], "indent width", 4);
            if (w > 0) {
                check_size(static_cast<size_t>(w));
                indention.assign(static_cast<size_t>(w), ' ');
            }
        }
        const bool first = bool_arg(p[1], false), blank = bool_arg(p[2], false);
        if (v.kind == Kind::Undefined) throw EvalError(v.s);
        if (v.kind != Kind::String)  // Jinja2 does s += "\n"
            throw EvalError("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
        const std::vector<std::string> lines = py_splitlines(v.s + "\n", false);
        std::string out;
        for (size_t k = 0; k < lines.size(); ++k) {
            if (k > 0) {
                out += '\n';
                if (blank || !lines[k].empty()) out += indention;
            }
            out += lines[k];
            check_size(out.size());
        }
        if (first) out = indention + out;
        return Value::string(std::move(out));
    }
    if (name == "format") {
        if (!a.pos.empty() && !a.kw.empty())
            throw EvalError("can't handle positional and keyword arguments at the same time");
        if (!a.kw.empty()) {
            auto d = std::make_shared<ObjectData>();
            for (auto& [k, x] : a.kw) d->set(Value::string(k), std::move(x));
            return Value::string(percent_format(to_str(v), make_dict(std::move(d))));
        }
        return Value::string(percent_format(to_str(v), make_list(std::move(a.pos), true)));
    }
    if (name == "tojson") {
        auto p = bind(name, a, {"ensure_ascii", "indent", "separators", "sort_keys"});
        JsonStyle st;
        st.ensure_ascii = bool_arg(p[0], false);
        if (given(p[1])) {
            if (p[1]->kind == Kind::String) {
                st.indent = p[1]->s;
            } else {
                const int64_t w = int_arg(p[1], "tojson indent", 0);
                check_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
                st.indent = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
            }
            st.item_sep = ",";
        }
        if (given(p[2])) {
            const Value& s = *p[2];
            if (s.kind != Kind::Array || s.arr->items.size() != 2 ||
                s.arr->items[0].kind != Kind::String || s.arr->items[1].kind != Kind::String)
                throw EvalError("tojson separators must be a pair of strings");
            st.item_sep = s.arr->items[0].s;
            st.key_sep = s.arr->items[1].s;
        }
        st.sort_keys = bool_arg(p[3], false);
        std::string out;
        json_dump(out, v, st, 0);
        return Value::string(std::move(out));
    }
    // ---- any value ----
    if (name == "default" || name == "d") {
        auto p = bind(name, a, {"default_value", "boolean"});
        if (v.kind == Kind::Undefined || (bool_arg(p[1], false) && !truthy(v)))
            return p[0] ? *p[0] : Value::string("");
        return v;
    }
    if (name == "length" || name == "count") {
        bind(name, a, {});
        return Value::integer(length_of(v));
    }
    if (name == "int") {
        auto p = bind(name, a, {"default", "base"});
        if (v.kind == Kind::Undefined) throw EvalError(v.s);  // Undefined.__int__ raises
        return to_int(v, p[0] ? *p[0] : Value::integer(0),
                      static_cast<int>(int_arg(p[1], "int base", 10)));
    }
    if (name == "float") {
        auto p = bind(name, a, {"default"});
        const Value fallback = p[0] ? *p[0] : Value::real(0.0);
        if (v.kind == Kind::Undefined) throw EvalError(v.s);  // Undefined.__float__ raises
        if (is_number(v)) return Value::real(double_of(v));
        if (v.kind == Kind::String) {
            if (auto d = parse_py_float(v.s)) return Value::real(*d);
        }
        return fallback;
    }
    if (name == "abs") {
        bind(name, a, {});
        if (v.kind == Kind::Float) return Value::real(std::fabs(v.f));
        if (is_integral(v)) {
            if (int_of(v) == INT64_MIN) throw EvalError("integer overflow");
            return Value::integer(std::llabs(int_of(v)));
        }
        throw EvalError("bad operand type for abs(): '" + type_name(v) + "'");
    }
    if (name == "round") {
        auto p = bind(name, a, {"precision", "method"});
        const int64_t precision = int_arg(p[0], "round precision", 0);
        const std::string method = p[1] ? str_arg(p[1], "round method") : "common";
        if (method != "common" && method != "ceil" && method != "floor")
            throw EvalError("method must be 'common', 'ceil' or 'floor'");
        if (!is_number(v)) throw EvalError("round() needs a number, not " + type_name(v));
        if (method == "common") {
            if (is_integral(v)) return Value::integer(int_of(v));
            if (!std::isfinite(v.f)) return v;
            if (precision >= 0) {
                // printf rounds the exact binary value, ties to even, as Python's round.
                const std::string digits =
                    format_c("%." + std::to_string(std::min<int64_t>(precision, 330)) + "f", v.f);
                return Value::real(std::strtod(digits.c_str(), nullptr));
            }
            const double scale = std::pow(10.0, static_cast<double>(-precision));
            return Value::real(std::nearbyint(v.f / scale) * scale);
        }
        const double scale = std::pow(10.0, static_cast<double>(precision));
        const double x = double_of(v) * scale;
        return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    }
    if (name == "attr") {  // Python's getattr only: no fallback to dict items
        auto p = bind(name, a, {"name"});
        const std::string attr = str_arg(p[0], "attr name");
        if (v.kind == Kind::Object &&
            !one_of(attr, {"get", "items", "keys", "values", "copy", "clear", "pop", "popitem",
                           "setdefault", "update", "fromkeys"}))
            return missing_attr(v, attr);
        return get_attr(v, attr);
    }
    // ---- sequences ----
    if (name == "first" || name == "last") {
        bind(name, a, {});
        const std::vector<Value> items = iterate(v);
        if (items.empty())
            return Value::undefined(name == "first" ? "No first item, sequence was empty."
                                                    : "No last item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
        bind(name, a, {});
        return make_list(iterate(v));
    }
    if (name == "reverse") {
        bind(name, a, {});
        if (v.kind == Kind::String) {
            std::vector<uint32_t> cps = code_points(v.s);
            std::reverse(cps.begin(), cps.end());
            return Value::string(encode(cps, 0, cps.size()));
        }
        // reversed(value) is an iterator; what reversed() cannot take (a generator) becomes
        // a reversed list.
        const bool was_generator = v.kind == Kind::Array && v.arr->is_generator;
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return was_generator ? make_list(std::move(items)) : make_generator(std::move(items));
    }
    if (name == "join") {
        auto p = bind(name, a, {"d", "attribute"});
        const std::string sep = p[0] ? to_str(*p[0]) : std::string();
        std::string out;
        bool first = true;
        for (const Value& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            const Value x = given(p[1]) ? attr_path(item, *p[1]) : item;
            out += to_str(x);
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "items") {
        bind(name, a, {});
        if (v.kind == Kind::Undefined) return make_generator({});
        if (v.kind != Kind::Object) throw EvalError("Can only get item pairs from a mapping.");
        std::vector<Value> out;
        for (const auto& [k, x] : v.obj->items) out.push_back(make_list({k, x}, true));
        return make_generator(std::move(out));
    }
    if (name == "dictsort") {
        auto p = bind(name, a, {"case_sensitive", "by", "reverse"});
        if (v.kind != Kind::Object) throw EvalError("dictsort needs a dict, not " + type_name(v));
        const bool cs = bool_arg(p[0], false), rev = bool_arg(p[2], false);
        const std::string by = p[1] ? str_arg(p[1], "dictsort by") : "key";
        if (by != "key" && by != "value")
            throw EvalError("You can only sort by either 'key' or 'value'");
        const size_t pos = by == "key" ? 0 : 1;
        std::vector<std::pair<Value, Value>> keyed;  // (key, (k, v))
        for (const auto& [k, x] : v.obj->items) {
            const Value& part = pos == 0 ? k : x;
            keyed.emplace_back(cs ? part : lowered(part), make_list({k, x}, true));
        }
        std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& l, const auto& r) {
            return rev ? py_compare(r.first, l.first, "<") < 0
                       : py_compare(l.first, r.first, "<") < 0;
        });
        std::vector<Value> out;
        for (auto& kv : keyed) out.push_back(std::move(kv.second));
        return make_list(std::move(out));
    }
    if (name == "sort") {
        auto p = bind(name, a, {"reverse", "case_sensitive", "attribute"});
        const bool rev = bool_arg(p[0], false), cs = bool_arg(p[1], false);
        std::vector<std::pair<Value, Value>> keyed;
        for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(item, p[2], cs), item);
        std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& l, const auto& r) {
            return rev ? py_compare(r.first, l.first, "<") < 0
                       : py_compare(l.first, r.first, "<") < 0;
        });
        std::vector<Value> out;
        for (auto& kv : keyed) out.push_back(std::move(kv.second));
        return make_list(std::move(out));
    }
    if (name == "unique") {
        auto p = bind(name, a, {"case_sensitive", "attribute"});
        const bool cs = bool_arg(p[0], false);
        std::vector<Value> seen, out;
        for (const Value& item : iterate(v)) {
            Value key = sort_key(item, p[1], cs);
            if (std::any_of(seen.begin(), seen.end(),
                            [&](const Value& s) { return py_equal(s, key); }))
                continue;
            seen.push_back(std::move(key));
            out.push_back(item);
        }
        return make_generator(std::move(out));
    }
    if (name == "min" || name == "max") {
        auto p = bind(name, a, {"case_sensitive", "attribute"});
        const bool cs = bool_arg(p[0], false);
        const std::vector<Value> items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        Value best_key = sort_key(items[0], p[1], cs);
        for (size_t k = 1; k < items.size(); ++k) {
            Value key = sort_key(items[k], p[1], cs);
            const int c = py_compare(key, best_key, "<");
            if ((name == "min" && c < 0) || (name == "max" && c > 0)) {
                best = k;
                best_key = std::move(key);
            }
        }
        return items[best];
    }
    if (name == "sum") {
        auto p = bind(name, a, {"attribute", "start"});
        Value total = p[1] ? *p[1] : Value::integer(0);
        for (const Value& item : iterate(v))
            total = binary_op("+", total, given(p[0]) ? attr_path(item, *p[0]) : item);
        return total;
    }
    if (name == "map") {
        std::vector<Value> out;
        if (!truthy(v)) return make_generator({});  // Jinja2: `if value:` before iterating
        if (a.pos.empty()) {
            std::optional<Value> attribute, fallback;
            for (auto& [k, x] : a.kw) {
                if (k == "attribute")
                    attribute = x;
                else if (k == "default")
                    fallback = x;
                else
                    throw EvalError("Unexpected keyword argument '" + k + "' to map");
            }
            if (!attribute) throw EvalError("map requires a filter name or attribute=");
            for (const Value& item : iterate(v)) {
                Value x = attr_path(item, *attribute);
                out.push_back(x.kind == Kind::Undefined && fallback ? *fallback : x);
            }
            return make_generator(std::move(out));
        }
        if (a.pos[0].kind != Kind::String) throw EvalError("map: the filter name must be a string");
        const std::string filter = a.pos[0].s;
        for (const Value& item : iterate(v)) {
            Args inner;
            inner.pos.assign(a.pos.begin() + 1, a.pos.end());
            inner.kw = a.kw;
            out.push_back(apply_filter(filter, item, inner));
        }
        return make_generator(std::move(out));
    }
    if (name == "select" || name == "reject")
        return select_or_reject(name, v, a, name == "select", false);
    if (name == "selectattr" || name == "rejectattr")
        return select_or_reject(name, v, a, name == "selectattr", true);
    throw EvalError("unsupported filter '" + name + "'");
}

Value Interpreter::select_or_reject(const std::string& name, const Value& v, Args& a, bool select,
                                    bool by_attr) {
    size_t off = 0;
    std::optional<Value> attribute;
    if (by_attr) {
        if (a.pos.empty()) throw EvalError(name + ": missing parameter for attribute name");
        attribute = a.pos[0];
        off = 1;
    }
    if (!truthy(v)) return make_generator({});  // Jinja2: `if value:` before iterating
    const bool has_test = a.pos.size() > off;
    std::vector<Value> test_args;
    if (has_test)
        test_args.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, a.pos.end());
    std::vector<Value> out;
    for (const Value& item : iterate(v)) {
        const Value x = attribute ? attr_path(item, *attribute) : item;
        const bool ok =
            has_test ? truthy(call_test_by_name(a.pos[off], x, test_args, a.kw)) : truthy(x);
        if (ok == select) out.push_back(item);
    }
    return make_generator(std::move(out));
}

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& a) {
    auto no_args = [&]() { bind(name, a, {}); };
    auto other = [&]() -> Value {
        auto p = bind(name, a, {"other"});
        if (!p[0]) throw EvalError("test '" + name + "' needs an argument");
        return *p[0];
    };
    if (name == "defined") return no_args(), v.kind != Kind::Undefined;
    if (name == "undefined") return no_args(), v.kind == Kind::Undefined;
    if (name == "none") return no_args(), v.kind == Kind::None;
    if (name == "boolean") return no_args(), v.kind == Kind::Bool;
    if (name == "true") return no_args(), v.kind == Kind::Bool && v.b;
    if (name == "false") return no_args(), v.kind == Kind::Bool && !v.b;
    if (name == "integer") return no_args(), v.kind == Kind::Int;
    if (name == "float") return no_args(), v.kind == Kind::Float;
    if (name == "number") return no_args(), is_number(v);
    if (name == "string") return no_args(), v.kind == Kind::String;
    if (name == "mapping") return no_args(), v.kind == Kind::Object;
    if (name == "iterable" || name == "sequence")
        return no_args(),
               v.kind == Kind::Undefined || v.kind == Kind::String || v.kind == Kind::Object ||
                   (v.kind == Kind::Array && (name == "iterable" || !v.arr->is_generator));
    // Jinja2's Undefined has __call__ (which raises), so Python calls it callable.
    if (name == "callable") return no_args(), v.kind == Kind::Callable || v.kind == Kind::Undefined;
    if (name == "lower" || name == "upper") {
        no_args();
        const std::string s = to_str(v);
        bool cased = false;
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            if (name == "lower" ? is_upper_cp(c) : (is_lower_cp(c) && c != 0xDF)) return false;
            if (name == "upper" && c == 0xDF) return false;
            cased = cased || is_cased(c);
        }
        return cased;
    }
    if (name == "even" || name == "odd") {  // value % 2 == 0 / == 1, as Jinja2
        no_args();
        const Value r = binary_op("%", v, Value::integer(2));
        return py_equal(r, Value::integer(name == "even" ? 0 : 1));
    }
    if (name == "divisibleby") {
        auto p = bind(name, a, {"num"});
        const Value n = p[0] ? *p[0] : Value::undefined("divisibleby needs a number");
        const Value r = binary_op("%", v, n);
        return !truthy(r);
    }
    if (name == "sameas") {
        const Value o = other();
        if (v.kind != o.kind) return false;
        switch (v.kind) {
            case Kind::Array:
                return v.arr == o.arr;
            case Kind::Object:
            case Kind::Namespace:
                return v.obj == o.obj;
            case Kind::Callable:
                return v.fn == o.fn;
            default:
                return py_equal(v, o);
        }
    }
    if (name == "in") return contains(other(), v);
    if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other());
    if (name == "ne" || name == "!=") return !py_equal(v, other());
    if (name == "lt" || name == "lessthan" || name == "<") return py_compare(v, other(), "<") < 0;
    if (name == "le" || name == "<=") return py_compare(v, other(), "<=") <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">")
        return py_compare(v, other(), ">") > 0;
    if (name == "ge" || name == ">=") return py_compare(v, other(), ">=") >= 0;
    throw EvalError("unsupported test '" + name + "'");
}

}  // namespace edgellm::jinja::detail
