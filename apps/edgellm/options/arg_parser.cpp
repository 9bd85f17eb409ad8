#include "arg_parser.h"

namespace edgellm::cli {

void ArgParser::add(std::vector<std::string> names, std::string metavar) {
    specs_.push_back({std::move(names), std::move(metavar)});
}

const ArgParser::Spec* ArgParser::find(const std::string& name) const {
    for (const Spec& s : specs_)
        for (const auto& n : s.names)
            if (n == name) return &s;
    return nullptr;
}

bool ArgParser::parse(const std::vector<std::string>& args, std::string* err) {
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        if (a == "-h" || a == "--help") {
            help_ = true;
            continue;
        }
        if (a.size() < 2 || a[0] != '-' || a == "--" || (a[1] >= '0' && a[1] <= '9')) {
            positional_.push_back(a);
            continue;
        }
        std::optional<std::string> inline_value;
        const size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value = a.substr(eq + 1);
            a = a.substr(0, eq);
        }
        const Spec* s = find(a);
        if (!s) {
            *err = "unknown option " + a + " (see --help)";
            return false;
        }
        if (s->metavar.empty()) {
            if (inline_value) {
                *err = "option " + a + " takes no value";
                return false;
            }
            values_[s->names[0]] = "1";
            all_[s->names[0]].push_back({"1", i});
            continue;
        }
        const size_t at = i;
        if (inline_value) {
            values_[s->names[0]] = *inline_value;
        } else if (i + 1 < args.size()) {
            values_[s->names[0]] = args[++i];
        } else {
            *err = "option " + a + " needs a value (" + s->metavar + ")";
            return false;
        }
        all_[s->names[0]].push_back({values_[s->names[0]], at});
    }
    return true;
}

bool ArgParser::has(const std::string& name) const {
    const Spec* s = find(name);
    return s && values_.count(s->names[0]);
}

std::optional<std::string> ArgParser::get(const std::string& name) const {
    const Spec* s = find(name);
    if (!s) return std::nullopt;
    auto it = values_.find(s->names[0]);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

std::vector<std::string> ArgParser::get_all(const std::string& name) const {
    std::vector<std::string> out;
    const Spec* s = find(name);
    if (auto it = s ? all_.find(s->names[0]) : all_.end(); it != all_.end())
        for (const Given& g : it->second) out.push_back(g.value);
    return out;
}

std::vector<size_t> ArgParser::positions(const std::string& name) const {
    std::vector<size_t> out;
    const Spec* s = find(name);
    if (auto it = s ? all_.find(s->names[0]) : all_.end(); it != all_.end())
        for (const Given& g : it->second) out.push_back(g.position);
    return out;
}

}  // namespace edgellm::cli
