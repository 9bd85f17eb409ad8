// The methods templates can call on values (`text.strip()`, `d.items()`): str's as Python
// has them, and the read-only ones of list, tuple and dict (the sandbox is immutable).
#include "text/jinja/interpreter.h"

#include "text/jinja/py_strings.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {

Value Interpreter::call_method(const Value& self, const std::string& name, Args& a) {
    const std::string what = type_name(self) + "." + name;
    if (self.kind == Kind::Object) {
        const ObjectData& d = *self.obj;
        if (name == "get") {
            auto p = bind(what, a, {"key", "default"});
            if (!p[0]) throw EvalError("get expected at least 1 argument, got 0");
            const Value* v = d.find(*p[0]);
            return v ? *v : (p[1] ? *p[1] : Value::none());
        }
        bind(what, a, {});
        std::vector<Value> out;
        if (name == "copy") {
            auto copy = std::make_shared<ObjectData>();
            copy->items = d.items;
            return make_dict(std::move(copy));
        }
        for (const auto& [k, v] : d.items) {
            if (name == "items")
                out.push_back(make_list({k, v}, true));
            else
                out.push_back(name == "keys" ? k : v);
        }
        return make_list(std::move(out));
    }
    if (self.kind == Kind::Array) {
        const auto& items = self.arr->items;
        if (name == "copy") {
            bind(what, a, {});
            return make_list(items, self.arr->is_tuple);
        }
        auto p = bind(what, a, {"value"});
        if (!p[0]) throw EvalError(what + "() takes exactly one argument (0 given)");
        int64_t count = 0;
        for (size_t k = 0; k < items.size(); ++k) {
            if (!py_equal(items[k], *p[0])) continue;
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++count;
        }
        if (name == "index") throw EvalError(to_repr(*p[0]) + " is not in " + type_name(self));
        return Value::integer(count);
    }
    // str
    const std::string& s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        auto p = bind(what, a, {"chars"});
        std::string chars;
        if (given(p[0])) chars = str_arg(p[0], (what + " arg").c_str());
        return Value::string(
            py_strip(s, given(p[0]) ? &chars : nullptr, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        auto p = bind(what, a, {"sep", "maxsplit"});
        std::string sep;
        if (given(p[0])) {
            sep = str_arg(p[0], "separator");
            if (sep.empty()) throw EvalError("empty separator");
        }
        const int64_t maxsplit = int_arg(p[1], "maxsplit", -1);
        std::vector<std::string> parts = name == "split"
                                             ? py_split(s, given(p[0]) ? &sep : nullptr, maxsplit)
                                             : py_rsplit(s, given(p[0]) ? &sep : nullptr, maxsplit);
        std::vector<Value> out;
        for (auto& part : parts) out.push_back(Value::string(std::move(part)));
        return make_list(std::move(out));
    }
    if (name == "splitlines") {
        auto p = bind(what, a, {"keepends"});
        std::vector<Value> out;
        for (auto& line : py_splitlines(s, bool_arg(p[0], false)))
            out.push_back(Value::string(std::move(line)));
        return make_list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
        auto p = bind(what, a, {"prefix", "start", "end"});
        if (!p[0]) throw EvalError(what + "() takes at least 1 argument (0 given)");
        std::string_view text = s;
        std::string sub;
        if (given(p[1]) || given(p[2])) {
            std::optional<Value> bounds[3] = {p[1], p[2], std::nullopt};
            sub = slice(self, bounds).s;
            text = sub;
        }
        std::vector<Value> candidates;
        if (p[0]->kind == Kind::Array && p[0]->arr->is_tuple)
            candidates = p[0]->arr->items;
        else
            candidates.push_back(*p[0]);
        for (const Value& c : candidates) {
            if (c.kind != Kind::String)
                throw EvalError(what + " first arg must be str or a tuple of str, not " +
                                type_name(c));
            work(c.s.size() / 8 + 1);
            const bool hit = name == "startswith" ? text.substr(0, c.s.size()) == c.s
                                                  : (text.size() >= c.s.size() &&
                                                     text.substr(text.size() - c.s.size()) == c.s);
            if (hit) return Value::boolean(true);
        }
        return Value::boolean(false);
    }
    if (name == "upper" || name == "lower" || name == "casefold" || name == "title" ||
        name == "capitalize" || name == "swapcase") {
        bind(what, a, {});
        if (name == "upper") return Value::string(str_upper(s));
        if (name == "lower" || name == "casefold") return Value::string(str_lower(s));
        if (name == "title") return Value::string(str_title(s));
        if (name == "capitalize") return Value::string(str_capitalize(s));
        std::string out;
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            if (is_upper_cp(c))
                append_utf8(out, cp_lower(c));
            else
                append_upper(out, c);
        }
        return Value::string(std::move(out));
    }
    if (name == "replace") {
        auto p = bind(what, a, {"old", "new", "count"});
        return Value::string(py_replace(s, str_arg(p[0], "replace() old"),
                                        str_arg(p[1], "replace() new"),
                                        int_arg(p[2], "replace() count", -1)));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
        auto p = bind(what, a, {"sub", "start", "end"});
        const std::vector<uint32_t> hay = code_points(s),
                                    needle = code_points(str_arg(p[0], (what + "() arg").c_str()));
        const auto n = static_cast<int64_t>(hay.size());
        auto clamp = [n](int64_t x) {
            return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n);
        };
        const int64_t start = clamp(int_arg(p[1], "start", 0)),
                      end = clamp(int_arg(p[2], "end", n));
        const auto m = static_cast<int64_t>(needle.size());
        auto match_at = [&](int64_t k) {
            const auto same =
                std::mismatch(needle.begin(), needle.end(), hay.begin() + k).first - needle.begin();
            work(static_cast<size_t>(same) + 1);
            return same == m;
        };
        if (name == "count") {
            int64_t count = 0;
            if (m == 0) return Value::integer(end >= start ? end - start + 1 : 0);
            for (int64_t k = start; k + m <= end;) {
                if (match_at(k)) {
                    ++count;
                    k += m;
                } else {
                    ++k;
                }
            }
            return Value::integer(count);
        }
        int64_t found = -1;
        if (name == "find" || name == "index") {
            for (int64_t k = start; k + m <= end; ++k)
                if (match_at(k)) {
                    found = k;
                    break;
                }
        } else {
            for (int64_t k = end - m; k >= start; --k)
                if (match_at(k)) {
                    found = k;
                    break;
                }
        }
        if (found < 0 && (name == "index" || name == "rindex"))
            throw EvalError("substring not found");
        return Value::integer(found);
    }
    if (name == "join") {
        auto p = bind(what, a, {"iterable"});
        if (!p[0]) throw EvalError("join() takes exactly one argument (0 given)");
        std::string out;
        size_t k = 0;
        for (const Value& item : iterate(*p[0])) {
            if (item.kind != Kind::String)
                throw EvalError("sequence item " + std::to_string(k) + ": expected str instance, " +
                                type_name(item) + " found");
            if (k++) out += s;
            out += item.s;
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "format") {
        std::string out;
        size_t auto_index = 0;
        for (size_t i = 0; i < s.size(); ++i) {
            const char c = s[i];
            if (c == '}') {
                if (i + 1 < s.size() && s[i + 1] == '}') {
                    out += '}';
                    ++i;
                    continue;
                }
                throw EvalError("Single '}' encountered in format string");
            }
            if (c != '{') {
                out += c;
                continue;
            }
            if (i + 1 < s.size() && s[i + 1] == '{') {
                out += '{';
                ++i;
                continue;
            }
            const size_t close = s.find('}', i);
            if (close == std::string::npos)
                throw EvalError("Single '{' encountered in format string");
            std::string field = s.substr(i + 1, close - i - 1);
            i = close;
            char conv = 's';
            const size_t colon = field.find(':');
            if (colon != std::string::npos) {
                if (colon + 1 < field.size())
                    throw EvalError("unsupported format spec in str.format: '" + field + "'");
                field.resize(colon);
            }
            const size_t bang = field.find('!');
            if (bang != std::string::npos) {
                conv = bang + 1 < field.size() ? field[bang + 1] : 's';
                field.resize(bang);
            }
            Value v;
            if (field.empty()) {
                if (auto_index >= a.pos.size())
                    throw EvalError("Replacement index " + std::to_string(auto_index) +
                                    " out of range");
                v = a.pos[auto_index++];
            } else if (std::all_of(field.begin(), field.end(), [](char ch) {
                           return std::isdigit(static_cast<unsigned char>(ch));
                       })) {
                const auto idx = static_cast<size_t>(std::strtoull(field.c_str(), nullptr, 10));
                if (idx >= a.pos.size())
                    throw EvalError("Replacement index " + field + " out of range");
                v = a.pos[idx];
            } else {
                const auto it = std::find_if(a.kw.begin(), a.kw.end(),
                                             [&](const auto& kv) { return kv.first == field; });
                if (it == a.kw.end()) throw EvalError("KeyError: '" + field + "'");
                v = it->second;
            }
            out += conv == 'r' ? to_repr(v) : to_str(v);
            check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "isalpha" || name == "isdigit" || name == "isdecimal" || name == "isnumeric" ||
        name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper" ||
        name == "isascii") {
        bind(what, a, {});
        if (name == "islower" || name == "isupper") {
            Args none;
            return Value::boolean(apply_test(name == "islower" ? "lower" : "upper", self, none));
        }
        if (name == "isascii")
            return Value::boolean(std::all_of(
                s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
        if (s.empty()) return Value::boolean(false);
        for (size_t i = 0; i < s.size();) {
            const uint32_t c = next_code_point(s, i);
            const bool digit = c >= '0' && c <= '9';
            const bool alpha = (c < 0x80 && std::isalpha(static_cast<int>(c))) || is_cased(c) ||
                               (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
                               (c >= 0xAC00 && c <= 0xD7A3);
            bool ok;
            if (name == "isalpha")
                ok = alpha;
            else if (name == "isalnum")
                ok = alpha || digit;
            else if (name == "isspace")
                ok = is_py_space(c);
            else
                ok = digit;
            if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
    }
    if (name == "removeprefix" || name == "removesuffix") {
        auto p = bind(what, a, {"affix"});
        const std::string affix = str_arg(p[0], (what + "() arg").c_str());
        if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
            return Value::string(s.substr(affix.size()));
        if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
            s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
            return Value::string(s.substr(0, s.size() - affix.size()));
        return self;
    }
    if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
        auto p = name == "zfill" ? bind(what, a, {"width"}) : bind(what, a, {"width", "fillchar"});
        const int64_t width = int_arg(p[0], "width", 0);
        std::string fill = name == "zfill" ? "0" : " ";
        if (p.size() > 1 && given(p[1])) {
            fill = str_arg(p[1], "fillchar");
            if (count_code_points(fill) != 1)
                throw EvalError("The fill character must be exactly one character long");
        }
        const auto len = static_cast<int64_t>(count_code_points(s));
        if (width <= len) return self;
        check_size(static_cast<size_t>(width));  // before multiplying: it could wrap
        check_size(static_cast<size_t>(width) * fill.size());
        const int64_t marg = width - len;
        int64_t left = 0;
        if (name == "center")
            left = marg / 2 + (marg & width & 1);
        else if (name == "rjust" || name == "zfill")
            left = marg;
        std::string out;
        std::string body = s;
        if (name == "zfill" && !s.empty() && (s[0] == '+' || s[0] == '-')) {
            out += s[0];
            body = s.substr(1);
        }
        for (int64_t k = 0; k < left; ++k) out += fill;
        out += body;
        for (int64_t k = 0; k < marg - left; ++k) out += fill;
        return Value::string(std::move(out));
    }
    if (name == "partition" || name == "rpartition") {
        auto p = bind(what, a, {"sep"});
        const std::string sep = str_arg(p[0], "separator");
        if (sep.empty()) throw EvalError("empty separator");
        const size_t at =
            name == "partition" ? find_text(s, sep, 0) : rfind_text(s, sep, std::string::npos);
        if (at == std::string::npos)
            return name == "partition"
                       ? make_list({self, Value::string(""), Value::string("")}, true)
                       : make_list({Value::string(""), Value::string(""), self}, true);
        return make_list({Value::string(s.substr(0, at)), Value::string(sep),
                          Value::string(s.substr(at + sep.size()))},
                         true);
    }
    throw EvalError("unsupported method 'str." + name + "'");
}

}  // namespace edgellm::jinja::detail
