// The tree a template parses into (parser.cpp): Node for statements, Expr for expressions.
#pragma once

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        Literal,   // literal
        Name,      // name
        List,      // items
        Tuple,     // items
        Dict,      // items: key, value, key, value, ...
        GetAttr,   // items[0].name
        GetItem,   // items[0][items[1]]
        Slice,     // items[0][items[1]:items[2]:items[3]], each bound may be null
        Call,      // items[0](items[1..], kwargs)
        Filter,    // items[0] | name(items[1..], kwargs); items[0] null in filter blocks
        Test,      // items[0] is name(items[1..], kwargs)
        Neg,       // -items[0]
        Pos,       // +items[0]
        Not,       // not items[0]
        Binary,    // items[0] name items[1]: + - * / // % **
        Concat,    // items[0] ~ items[1] ~ ...
        Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
        And,       // items[0] and items[1]
        Or,        // items[0] or items[1]
        CondExpr,  // items[0] if items[1] else items[2] (items[2] may be null)
    };
    Kind kind;
    int line;
    int depth = 1;  // of the tree below, this node included (bounded: evaluation recurses)
    Value literal;
    std::string name;
    std::vector<ExprPtr> items;
    std::vector<std::string> ops;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;

    Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    enum class Kind {
        Text,      // text
        Output,    // {{ exprs[0] }}
        If,        // if exprs[k]: bodies[k]; else bodies[exprs.size()] when present
        For,       // for targets in exprs[0] [if exprs[1]]: bodies[0]; else bodies[1]
        Set,       // set targets (or targets[0].ns_attr) = exprs[0]
        SetBlock,  // set targets[0] | exprs (filters) = output of bodies[0]
        Macro,     // macro name(targets = defaults): bodies[0]
        Break,
        Continue,
        With,         // with targets = exprs: bodies[0] (also {% generation %})
        FilterBlock,  // filter exprs[0]: bodies[0]
    };
    Kind kind;
    int line;
    std::string text;
    std::string name;
    std::string ns_attr;
    bool target_is_tuple = false;
    std::vector<std::string> targets;
    std::vector<ExprPtr> exprs;
    std::vector<ExprPtr> defaults;  // Macro: one per parameter, null when required
    // Macro: its body names `varargs` / `kwargs`, so extra positional / keyword arguments
    // are taken into them (Jinja2's catch_varargs, catch_kwargs).
    bool catch_varargs = false;
    bool catch_kwargs = false;
    std::vector<Body> bodies;

    Node(Kind k, int l) : kind(k), line(l) {}
};

// The statements of a template, from its tokens (tokenize()). Throws TemplateError.
Body parse(std::vector<Token> tokens);

}  // namespace edgellm::jinja::detail
