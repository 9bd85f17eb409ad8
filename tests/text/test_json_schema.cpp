// JSON Schema -> GBNF: for each feature, the grammar admits valid instances and rejects
// invalid ones (checked with the real GBNF parser and matcher over a byte vocabulary); for
// each refusal, the keyword and the path.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "edgellm/grammar.h"
#include "edgellm/json_schema.h"

using namespace edgellm;
using json = nlohmann::ordered_json;

namespace {

// The 256 single bytes plus an end-of-generation token (id 256) with no bytes.
std::shared_ptr<const GrammarVocab> byte_vocab() {
    static const auto vocab = [] {
        std::vector<std::string> pieces;
        for (int i = 0; i < 256; ++i) pieces.emplace_back(1, char(i));
        pieces.emplace_back();
        return GrammarVocab::from_pieces(std::move(pieces), {256});
    }();
    return vocab;
}

// A compiled grammar for a schema (fails the test when refused or when the GBNF does not
// parse).
struct Compiled {
    std::string gbnf;
    std::shared_ptr<const Grammar> grammar;

    bool accepts(std::string_view text) const {
        if (!grammar) return false;
        GrammarMatcher m(grammar, byte_vocab());
        return m.accept_bytes(text) && m.can_end();
    }
};

Compiled compile_gbnf(const std::string& gbnf) {
    Compiled c{gbnf, nullptr};
    auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g.ok()) << g.error() << "\n" << gbnf;
    if (g.ok()) c.grammar = *g;
    return c;
}

Compiled compile(const json& schema) {
    SchemaRefusal why;
    const auto gbnf = json_schema_to_gbnf(schema, &why);
    EXPECT_TRUE(gbnf.has_value()) << schema.dump() << " refused: " << why.keyword << " at "
                                  << why.path << ": " << why.message;
    if (!gbnf) return {};
    return compile_gbnf(*gbnf);
}

Compiled compile(const char* schema) {
    return compile(json::parse(schema));
}

SchemaRefusal refusal(const json& schema) {
    SchemaRefusal why;
    const auto gbnf = json_schema_to_gbnf(schema, &why);
    EXPECT_FALSE(gbnf.has_value()) << schema.dump() << " was not refused:\n" << gbnf.value_or("");
    return why;
}

SchemaRefusal refusal(const char* schema) {
    return refusal(json::parse(schema));
}

#define EXPECT_ACCEPTS(c, text) \
    EXPECT_TRUE((c).accepts(text)) << "rejected: " << (text) << "\n" << (c).gbnf
#define EXPECT_REJECTS(c, text) \
    EXPECT_FALSE((c).accepts(text)) << "accepted: " << (text) << "\n" << (c).gbnf

#define EXPECT_REFUSED(schema, kw, where)         \
    do {                                          \
        const SchemaRefusal r_ = refusal(schema); \
        EXPECT_EQ(r_.keyword, kw) << r_.message;  \
        EXPECT_EQ(r_.path, where) << r_.message;  \
        EXPECT_FALSE(r_.message.empty());         \
    } while (0)

}  // namespace

// --- JSON text ---------------------------------------------------------------------------

TEST(JsonSchema, AnyValue) {
    for (const char* s : {"{}", "true", R"({"description": "anything"})"}) {
        const Compiled c = compile(s);
        EXPECT_ACCEPTS(c, R"({"a": [1, 2.5e-3, "x\n", true, null, {}], "b": {"c": []}})");
        EXPECT_ACCEPTS(c, "-0.5");
        EXPECT_ACCEPTS(c, "\"\\u00e9\\\"\"");
        EXPECT_ACCEPTS(c, "null");
        EXPECT_REJECTS(c, "{\"a\" 1}");
        EXPECT_REJECTS(c, "[1,]");
        EXPECT_REJECTS(c, "01");
        EXPECT_REJECTS(c, "'x'");
        EXPECT_REJECTS(c, "");
    }
}

TEST(JsonSchema, Strings) {
    const Compiled c = compile(R"({"type": "string"})");
    EXPECT_ACCEPTS(c, R"("")");
    EXPECT_ACCEPTS(c, R"("hello world")");
    EXPECT_ACCEPTS(c, R"("esc \" \\ \/ \b \f \n \r \t \u00e9 \uABCD")");
    EXPECT_ACCEPTS(c, "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");  // raw UTF-8, astral too
    EXPECT_REJECTS(c, "\"a\nb\"");                          // a raw control character
    EXPECT_REJECTS(c, R"("\x")");
    EXPECT_REJECTS(c, R"("\u12")");
    EXPECT_REJECTS(c, R"("\ud83d\ude00")");  // surrogates: written as the character itself
    EXPECT_REJECTS(c, R"("unterminated)");
    EXPECT_REJECTS(c, R"("a" )");  // no whitespace after the top value
    EXPECT_REJECTS(c, "1");
}

TEST(JsonSchema, Numbers) {
    const Compiled n = compile(R"({"type": "number"})");
    for (const char* ok : {"0", "-0", "1", "-12", "3.25", "1e5", "1E+5", "-2.5e-10", "0.001",
                           "123456789012345", "0.123456789012345"})
        EXPECT_ACCEPTS(n, ok);
    for (const char* bad : {"01", "+1", "1.", ".5", "1e", "--1", "NaN", "Infinity", "0x10",
                            "1234567890123456",    // 16 integer digits: bounded
                            "0.1234567890123456",  // 16 fraction digits
                            "1e1234", "\"1\""})
        EXPECT_REJECTS(n, bad);

    const Compiled i = compile(R"({"type": "integer"})");
    for (const char* ok : {"0", "-1", "42", "9999999999999999"}) EXPECT_ACCEPTS(i, ok);
    for (const char* bad : {"1.0", "1e3", "-0.5", "01", "-", "10000000000000000"})
        EXPECT_REJECTS(i, bad);
}

TEST(JsonSchema, BooleanNullAndUnions) {
    const Compiled b = compile(R"({"type": "boolean"})");
    EXPECT_ACCEPTS(b, "true");
    EXPECT_ACCEPTS(b, "false");
    EXPECT_REJECTS(b, "True");
    EXPECT_REJECTS(b, "null");
    const Compiled z = compile(R"({"type": "null"})");
    EXPECT_ACCEPTS(z, "null");
    EXPECT_REJECTS(z, "nul");

    const Compiled u = compile(R"({"type": ["string", "null"], "maxLength": 2})");
    EXPECT_ACCEPTS(u, "null");
    EXPECT_ACCEPTS(u, R"("ab")");
    EXPECT_REJECTS(u, R"("abc")");
    EXPECT_REJECTS(u, "1");
    const Compiled num = compile(R"({"type": ["integer", "number", "boolean"]})");
    EXPECT_ACCEPTS(num, "1.5");
    EXPECT_ACCEPTS(num, "7");
    EXPECT_ACCEPTS(num, "false");
}

TEST(JsonSchema, WhitespaceIsBounded) {
    const Compiled c = compile(R"({"type": "array", "items": {"type": "integer"}})");
    EXPECT_ACCEPTS(c, "[1,2]");
    EXPECT_ACCEPTS(c, "[ 1, 2 ]");
    EXPECT_ACCEPTS(c, "[\n  1,\n  2\n]");
    EXPECT_ACCEPTS(c, "[\n\t\t1]");
    EXPECT_ACCEPTS(c, "[\n" + std::string(20, ' ') + "1]");
    EXPECT_REJECTS(c, "[\n" + std::string(21, ' ') + "1]");
    EXPECT_REJECTS(c, "[  1]");
    EXPECT_REJECTS(c, "[\n\n1]");
    EXPECT_REJECTS(c, " [1]");
}

// --- objects -----------------------------------------------------------------------------

TEST(JsonSchema, ObjectRequiredAndOptional) {
    const Compiled c = compile(R"({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"]})");
    EXPECT_ACCEPTS(c, R"({"b": "x"})");
    EXPECT_ACCEPTS(c, R"({"a": 1, "b": "x"})");
    EXPECT_ACCEPTS(c, R"({"b": "x", "c": true})");
    EXPECT_ACCEPTS(c, R"({"a": 1, "b": "x", "c": false})");
    EXPECT_ACCEPTS(c, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}");
    EXPECT_REJECTS(c, R"({})");  // b is required
    EXPECT_REJECTS(c, R"({"a": 1})");
    EXPECT_REJECTS(c, R"({"b": "x", "a": 1})");  // the schema's order
    EXPECT_REJECTS(c, R"({"b": "x", "d": 1})");  // additionalProperties absent: none
    EXPECT_REJECTS(c, R"({"b": 1})");
    EXPECT_REJECTS(c, R"({"b": "x",})");
    EXPECT_REJECTS(c, R"({"b": "x", "b": "y"})");

    // All optional: any ordered subset, the empty object too.
    const Compiled o = compile(R"({"properties": {"x": {}, "y": {}, "z": {}}})");
    for (const char* ok : {"{}", R"({"x": 1})", R"({"y": 2})", R"({"z": 3})", R"({"x": 1, "z": 3})",
                           R"({"y": 2, "z": 3})", R"({"x": 1, "y": 2, "z": 3})"})
        EXPECT_ACCEPTS(o, ok);
    for (const char* bad : {R"({"z": 3, "x": 1})", R"({,"x": 1})", R"({"x": 1,})", "[]", "1"})
        EXPECT_REJECTS(o, bad);

    // Empty `properties`: exactly {} (a tool without parameters).
    const Compiled e = compile(R"({"type": "object", "properties": {}})");
    EXPECT_ACCEPTS(e, "{}");
    EXPECT_ACCEPTS(e, "{ }");
    EXPECT_REJECTS(e, R"({"a": 1})");
}

TEST(JsonSchema, AdditionalProperties) {
    const Compiled f = compile(R"({"type": "object"})");  // no properties: any object
    EXPECT_ACCEPTS(f, R"({"any": [1], "thing": {"x": null}})");
    EXPECT_ACCEPTS(f, "{}");
    EXPECT_REJECTS(f, "[]");

    const Compiled t = compile(R"({"properties": {"id": {"type": "integer"}}, "required": ["id"],
                                   "additionalProperties": true})");
    EXPECT_ACCEPTS(t, R"({"id": 1})");
    EXPECT_ACCEPTS(t, R"({"id": 1, "note": "x", "n": [2]})");
    EXPECT_ACCEPTS(t, R"({"id": 1, "i": 1, "idx": 2, "": 3})");
    EXPECT_REJECTS(t, R"({"id": 1, "id": "again"})");     // a declared name is not an extra
    EXPECT_REJECTS(t, R"({"note": "x", "id": 1})");       // declared first
    EXPECT_REJECTS(t, R"({"id": 1, "no\u0074e": "x"})");  // extra keys without escapes

    const Compiled s = compile(R"({"properties": {"a": {"type": "string"}},
                                   "additionalProperties": {"type": "integer"}})");
    EXPECT_ACCEPTS(s, "{}");
    EXPECT_ACCEPTS(s, R"({"x": 1})");
    EXPECT_ACCEPTS(s, R"({"a": "s", "x": 1, "y": 2})");
    EXPECT_REJECTS(s, R"({"x": "s"})");
    EXPECT_REJECTS(s, R"({"a": 1})");

    const Compiled m =
        compile(R"({"type": "object", "additionalProperties": {"type": "boolean"}})");
    EXPECT_ACCEPTS(m, R"({"x": true, "y": false})");
    EXPECT_REJECTS(m, R"({"x": 1})");

    const Compiled none = compile(R"({"type": "object", "additionalProperties": false})");
    EXPECT_ACCEPTS(none, "{}");
    EXPECT_REJECTS(none, R"({"x": 1})");

    // A required name without a schema: present, any value.
    const Compiled r = compile(R"({"properties": {"a": {"type": "integer"}}, "required": ["b"]})");
    EXPECT_ACCEPTS(r, R"({"b": [1]})");
    EXPECT_ACCEPTS(r, R"({"a": 1, "b": null})");
    EXPECT_REJECTS(r, R"({"a": 1})");

    // A property whose schema is false may not appear.
    const Compiled no =
        compile(R"({"properties": {"a": false, "b": {}}, "additionalProperties": true})");
    EXPECT_ACCEPTS(no, R"({"b": 1, "c": 2})");
    EXPECT_REJECTS(no, R"({"a": 1})");
    EXPECT_REJECTS(no, R"({"b": 1, "a": 1})");
}

TEST(JsonSchema, PropertyNamesNeedingEscapes) {
    const Compiled c =
        compile(R"({"properties": {"say \"hi\"": {"const": 1}, "caf\u00e9": {"const": 2},
                                   "a b": {"const": 3}}, "required": ["say \"hi\"", "caf\u00e9", "a b"]})");
    EXPECT_ACCEPTS(c, "{\"say \\\"hi\\\"\": 1, \"caf\xC3\xA9\": 2, \"a b\": 3}");
    EXPECT_REJECTS(c, "{\"say \\\"hi\\\"\": 1, \"cafe\": 2, \"a b\": 3}");
}

TEST(JsonSchema, NestedObjects) {
    const Compiled c = compile(R"({
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {
                "name": {"type": "string"},
                "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                            "required": ["zip"]}},
                "required": ["name", "address"]}},
        "required": ["user"]})");
    EXPECT_ACCEPTS(c, R"({"user": {"name": "Ann", "address": {"zip": "12345"}}})");
    EXPECT_REJECTS(c, R"({"user": {"name": "Ann", "address": {"zip": "1234"}}})");
    EXPECT_REJECTS(c, R"({"user": {"name": "Ann"}})");
}

// --- enum / const ------------------------------------------------------------------------

TEST(JsonSchema, EnumAndConst) {
    const Compiled e =
        compile(R"({"enum": ["red", 1, 2.5, null, true, {"k": [1, "x"]}, [], "a\"b"]})");
    for (const char* ok : {R"("red")", "1", "2.5", "null", "true", R"({"k": [1, "x"]})",
                           R"({"k":[1,"x"]})", "[]", "[ ]", R"("a\"b")"})
        EXPECT_ACCEPTS(e, ok);
    for (const char* bad : {R"("blue")", "2", "false", R"({"k": [1]})",
                            R"({"k": [1, "x"], "j": 1})", R"("re")", R"("redd")"})
        EXPECT_REJECTS(e, bad);

    const Compiled c = compile(R"({"const": "fixed"})");
    EXPECT_ACCEPTS(c, R"("fixed")");
    EXPECT_REJECTS(c, R"("fixe")");

    // `type` filters the values.
    const Compiled t = compile(R"({"type": "string", "enum": ["a", 1, "b"]})");
    EXPECT_ACCEPTS(t, R"("a")");
    EXPECT_REJECTS(t, "1");
    const Compiled it = compile(R"({"type": "integer", "enum": [1, 2.0, 2.5]})");
    EXPECT_ACCEPTS(it, "1");
    EXPECT_ACCEPTS(it, "2.0");
    EXPECT_REJECTS(it, "2.5");

    const Compiled unicode = compile(R"({"enum": ["\u00fcber", "\ud83d\ude00"]})");
    EXPECT_ACCEPTS(unicode,
                   "\"\xC3\xBC"
                   "ber\"");
    EXPECT_ACCEPTS(unicode, "\"\xF0\x9F\x98\x80\"");
}

// --- arrays ------------------------------------------------------------------------------

TEST(JsonSchema, Arrays) {
    const Compiled a =
        compile(R"({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3})");
    EXPECT_ACCEPTS(a, R"(["a"])");
    EXPECT_ACCEPTS(a, R"(["a", "b", "c"])");
    EXPECT_REJECTS(a, "[]");
    EXPECT_REJECTS(a, R"(["a", "b", "c", "d"])");
    EXPECT_REJECTS(a, "[1]");

    const Compiled any = compile(R"({"type": "array"})");
    EXPECT_ACCEPTS(any, "[]");
    EXPECT_ACCEPTS(any, R"([1, "a", [null]])");

    const Compiled min = compile(R"({"items": {"type": "integer"}, "minItems": 2})");
    EXPECT_REJECTS(min, "[1]");
    EXPECT_ACCEPTS(min, "[1, 2]");
    EXPECT_ACCEPTS(min, "[1, 2, 3, 4, 5, 6, 7]");

    const Compiled zero = compile(R"({"type": "array", "maxItems": 0})");
    EXPECT_ACCEPTS(zero, "[]");
    EXPECT_REJECTS(zero, "[1]");

    const Compiled nested =
        compile(R"({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}})");
    EXPECT_ACCEPTS(nested, "[[1, 2], [], [3]]");
    EXPECT_REJECTS(nested, "[[1, 2], 3]");
}

TEST(JsonSchema, TupleArrays) {
    // prefixItems, items absent: the tuple only.
    const Compiled t = compile(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}]})");
    EXPECT_ACCEPTS(t, R"(["a", 1])");
    EXPECT_ACCEPTS(t, R"(["a"])");
    EXPECT_ACCEPTS(t, "[]");
    EXPECT_REJECTS(t, R"(["a", 1, 2])");
    EXPECT_REJECTS(t, R"([1, "a"])");

    const Compiled f =
        compile(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false,
                                   "minItems": 2})");
    EXPECT_ACCEPTS(f, R"(["a", 1])");
    EXPECT_REJECTS(f, R"(["a"])");
    EXPECT_REJECTS(f, R"(["a", 1, 2])");

    const Compiled r = compile(R"({"prefixItems": [{"const": "op"}], "items": {"type": "number"},
                                   "minItems": 1, "maxItems": 3})");
    EXPECT_ACCEPTS(r, R"(["op"])");
    EXPECT_ACCEPTS(r, R"(["op", 1, 2.5])");
    EXPECT_REJECTS(r, R"(["op", 1, 2, 3])");
    EXPECT_REJECTS(r, R"([1])");

    // Before 2020-12: items as a list, additionalItems.
    const Compiled legacy =
        compile(R"({"items": [{"type": "boolean"}], "additionalItems": {"type": "null"}})");
    EXPECT_ACCEPTS(legacy, "[true, null, null]");
    EXPECT_REJECTS(legacy, "[true, 1]");

    // minItems beyond the tuple with no items schema: any values.
    const Compiled more = compile(R"({"prefixItems": [{"type": "boolean"}], "minItems": 2})");
    EXPECT_ACCEPTS(more, R"([true, "x"])");
    EXPECT_REJECTS(more, "[true]");
    EXPECT_REJECTS(more, "[true, 1, 2]");
}

// --- $ref --------------------------------------------------------------------------------

TEST(JsonSchema, Refs) {
    const Compiled c = compile(R"({
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"]}},
        "definitions": {"Name": {"type": "string", "maxLength": 3}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                       "name": {"$ref": "#/definitions/Name", "description": "ignored"}},
        "required": ["points", "name"]})");
    EXPECT_ACCEPTS(c, R"({"points": [{"x": 1, "y": 2}, {"x": -1.5, "y": 0}], "name": "abc"})");
    EXPECT_REJECTS(c, R"({"points": [{"x": 1}], "name": "abc"})");
    EXPECT_REJECTS(c, R"({"points": [], "name": "abcd"})");
}

TEST(JsonSchema, RecursiveRefs) {
    const json tree = json::parse(R"({
        "$defs": {"Node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            "required": ["value"]}},
        "$ref": "#/$defs/Node"})");
    const Compiled c = compile(tree);
    EXPECT_ACCEPTS(c, R"({"value": 1})");
    EXPECT_ACCEPTS(
        c, R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]})");
    EXPECT_REJECTS(c, R"({"value": 1, "children": [{"children": []}]})");
    EXPECT_LT(c.gbnf.size(), 2000u) << c.gbnf;  // a rule reference, not an expansion

    // "#": the whole schema (a linked list).
    const Compiled list = compile(
        R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                                      "required": ["next"]})");
    EXPECT_ACCEPTS(list, R"({"next": {"next": {"next": null}}})");
    EXPECT_REJECTS(list, R"({"next": {}})");

    // Mutual recursion through two definitions.
    const Compiled mutual = compile(R"({"$defs": {
        "A": {"type": "array", "items": {"$ref": "#/$defs/B"}},
        "B": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/A"}]}},
        "$ref": "#/$defs/A"})");
    EXPECT_ACCEPTS(mutual, "[1, [2, [3, []]]]");
    EXPECT_REJECTS(mutual, R"([1, ["x"]])");
}

// --- anyOf / oneOf / allOf ---------------------------------------------------------------

TEST(JsonSchema, AnyOfOneOf) {
    for (const char* key : {"anyOf", "oneOf"}) {
        json s = json::parse(
            R"({"x": [{"type": "integer"}, {"type": "string", "maxLength": 1}, false]})");
        s[key] = s["x"];
        s.erase("x");
        const Compiled c = compile(s);
        EXPECT_ACCEPTS(c, "12");
        EXPECT_ACCEPTS(c, R"("a")");
        EXPECT_REJECTS(c, R"("ab")");
        EXPECT_REJECTS(c, "true");
    }
    // Siblings apply to every branch.
    const Compiled s = compile(
        R"({"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
        "additionalProperties": true,
        "anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                  {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]})");
    EXPECT_ACCEPTS(s, R"({"kind": "x", "a": 1})");
    EXPECT_ACCEPTS(s, R"({"kind": "x", "b": true})");
    EXPECT_REJECTS(s, R"({"kind": "x"})");
    EXPECT_REJECTS(s, R"({"a": 1})");
}

TEST(JsonSchema, AllOf) {
    const Compiled c = compile(R"({
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
        "allOf": [{"$ref": "#/$defs/Base"},
                  {"properties": {"name": {"type": "string"}, "id": {"minimum": 1}}, "required": ["name"]}]})");
    EXPECT_ACCEPTS(c, R"({"id": 5, "name": "x"})");
    EXPECT_REJECTS(c, R"({"id": 0, "name": "x"})");  // the merged property: integer >= 1
    EXPECT_REJECTS(c, R"({"id": 5})");
    EXPECT_REJECTS(c, R"({"name": "x"})");

    const Compiled one =
        compile(R"({"allOf": [{"type": "string", "maxLength": 2}], "description": "x"})");
    EXPECT_ACCEPTS(one, R"("ab")");
    EXPECT_REJECTS(one, R"("abc")");

    // Bounds tighten, types intersect.
    const Compiled b = compile(
        R"({"allOf": [{"type": ["integer", "string"], "minimum": 0}, {"type": "number", "maximum": 10}]})");
    EXPECT_ACCEPTS(b, "10");
    EXPECT_REJECTS(b, "11");
    EXPECT_REJECTS(b, "-1");
    EXPECT_REJECTS(b, R"("x")");

    // additionalProperties false on one branch forbids the other branch's properties.
    const Compiled f =
        compile(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
                                             {"properties": {"b": {}}}]})");
    EXPECT_ACCEPTS(f, R"({"a": 1})");
    EXPECT_REJECTS(f, R"({"a": 1, "b": 2})");

    // $ref with constraining siblings is an allOf.
    const Compiled r =
        compile(R"({"$defs": {"S": {"type": "string"}}, "$ref": "#/$defs/S", "maxLength": 1})");
    EXPECT_ACCEPTS(r, R"("a")");
    EXPECT_REJECTS(r, R"("ab")");
}

// --- strings: formats, patterns, lengths -------------------------------------------------

TEST(JsonSchema, Formats) {
    const Compiled d = compile(R"({"type": "string", "format": "date"})");
    for (const char* ok :
         {"\"2024-02-29\"", "\"2000-02-29\"", "\"2023-12-31\"", "\"1999-04-30\"", "\"0000-01-01\""})
        EXPECT_ACCEPTS(d, ok);
    for (const char* bad : {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"",
                            "\"2023-00-10\"", "\"2023-1-01\"", "\"23-01-01\"", "\"2023-01-32\""})
        EXPECT_REJECTS(d, bad);

    const Compiled t = compile(R"({"type": "string", "format": "time"})");
    for (const char* ok : {"\"12:30:00Z\"", "\"23:59:59.123+02:00\"", "\"00:00:00-11:30\""})
        EXPECT_ACCEPTS(t, ok);
    for (const char* bad : {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:30:00\"", "\"12:30Z\""})
        EXPECT_REJECTS(t, bad);

    const Compiled dt = compile(R"({"type": "string", "format": "date-time"})");
    EXPECT_ACCEPTS(dt, "\"2024-05-01T08:00:00Z\"");
    EXPECT_ACCEPTS(dt, "\"2024-05-01T08:00:00.5+05:30\"");
    EXPECT_REJECTS(dt, "\"2024-05-01 08:00:00Z\"");
    EXPECT_REJECTS(dt, "\"2024-05-01\"");

    const Compiled u = compile(R"({"type": "string", "format": "uuid"})");
    EXPECT_ACCEPTS(u, "\"123e4567-e89b-12d3-A456-426614174000\"");
    EXPECT_REJECTS(u, "\"123e4567e89b12d3a456426614174000\"");
    EXPECT_REJECTS(u, "\"123e4567-e89b-12d3-a456-42661417400g\"");

    const Compiled e = compile(R"({"type": "string", "format": "email"})");
    for (const char* ok :
         {"\"a@b.co\"", "\"first.last+tag@mail.example-host.org\"", "\"x_y@a-b.c\""})
        EXPECT_ACCEPTS(e, ok);
    for (const char* bad : {"\"a@b\"", "\"@b.co\"", "\"a@@b.co\"", "\"a.@b.co\"", "\"a@-b.co\"",
                            "\"a@b-.co\"", "\"a b@c.de\"", "\"a@b..co\""})
        EXPECT_REJECTS(e, bad);
}

TEST(JsonSchema, Lengths) {
    const Compiled c = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    EXPECT_REJECTS(c, "\"a\"");
    EXPECT_ACCEPTS(c, "\"ab\"");
    EXPECT_ACCEPTS(c, "\"abc\"");
    EXPECT_REJECTS(c, "\"abcd\"");
    EXPECT_ACCEPTS(c, "\"\xC3\xA9\xF0\x9F\x98\x80\"");  // two code points
    EXPECT_ACCEPTS(c, "\"\\n\\u00e9\"");                // two escaped characters
    EXPECT_REJECTS(c, "\"\\n\\u00e9ab\"");
    // Counts above what the GBNF parser takes in one repetition.
    const Compiled big = compile(R"({"type": "string", "minLength": 20001, "maxLength": 35000})");
    for (size_t n : {20000, 20001, 30000, 35000, 35001}) {
        const bool in = n >= 20001 && n <= 35000;
        EXPECT_EQ(big.accepts("\"" + std::string(n, 'x') + "\""), in) << n;
    }
    const Compiled min = compile(R"({"minLength": 1})");
    EXPECT_REJECTS(min, "\"\"");
    EXPECT_ACCEPTS(min, "\"a long string indeed\"");
}

TEST(JsonSchema, Patterns) {
    struct Case {
        const char* pattern;
        std::vector<const char*> ok, bad;  // decoded strings; the test writes them as JSON
    };
    const Case cases[] = {
        {"^[A-Z]{2}-\\d{3}$", {"AB-123"}, {"AB-12", "ab-123", "AB-1234", "xAB-123"}},
        {"abc", {"abc", "xxabcyy", "abcabc"}, {"ab", "acb", ""}},  // unanchored
        {"^abc", {"abc", "abcdef"}, {"xabc"}},
        {"abc$", {"abc", "xxabc"}, {"abcx"}},
        {"^(cat|dog)s?$", {"cat", "dogs"}, {"cats!", "bird", "catdog"}},
        {"^(?:[a-f0-9]{2})+$", {"ab", "abcdef"}, {"abc", "", "AB"}},
        {"^a.c$",
         {"abc", "a\"c", "a\\c",
          "a\xC3\xA9"
          "c",
          "a\x01"
          "c",
          "a\tc",
          "a\x1F"
          "c"},
         {"a\nc", "a\rc", "ac"}},
        {"^[^a-z]*$", {"", "ABC 123", "\"QUOTED\"", "TAB\tHERE"}, {"a", "ABc"}},
        {"^\\w+@\\w+\\.com$", {"me@host.com"}, {"me@host.org", "@host.com"}},
        {"^\\s?x$", {"x", " x", "\tx"}, {"  x"}},
        {"^[-+]?\\d+(\\.\\d+)?$", {"1", "-2.5", "+10"}, {"1.", ".5", "--1"}},
        {"^a{2,}$", {"aa", "aaaa"}, {"a"}},
        {"^a{0,2}b$", {"b", "ab", "aab"}, {"aaab"}},
        {"^\\x41\\u00e9\\/\\.$", {"A\xC3\xA9/."}, {"Ae/."}},
        {"^[\\d\\-]+$", {"12-3"}, {"12a"}},
        {"^$|^x$", {"", "x"}, {"xx"}},
        {"^a|b$", {"ax", "xb", "a", "b"}, {"xa", "bx"}},
        {"", {"", "anything"}, {}},
        {"^[\\]\\\\]$", {"]", "\\"}, {"["}},
        {"^(a|)b$", {"ab", "b"}, {"aab"}},
        {"^x{3}$", {"xxx"}, {"xx", "xxxx"}},
        {"^\\S+$", {"abc"}, {"a b", ""}},
        {"^[a-z]+(-[a-z]+)*$", {"kebab-case-name", "x"}, {"kebab--case", "-x", "x-"}},
    };
    for (const Case& k : cases) {
        json s = {{"type", "string"}, {"pattern", k.pattern}};
        const Compiled c = compile(s);
        for (const char* ok : k.ok) EXPECT_ACCEPTS(c, json(ok).dump()) << "pattern " << k.pattern;
        for (const char* bad : k.bad)
            EXPECT_REJECTS(c, json(bad).dump()) << "pattern " << k.pattern;
    }
}

// --- integer and number bounds -----------------------------------------------------------

namespace {

// Every integer in [from, to] is admitted exactly when in_range says so.
void check_int_range(const json& schema, int64_t from, int64_t to,
                     const std::function<bool(int64_t)>& in_range) {
    const Compiled c = compile(schema);
    int errors = 0;
    for (int64_t v = from; v <= to && errors < 5; ++v) {
        const bool got = c.accepts(std::to_string(v));
        if (got != in_range(v)) {
            ADD_FAILURE() << schema.dump() << ": " << v << (got ? " accepted" : " rejected") << "\n"
                          << c.gbnf;
            ++errors;
        }
    }
}

}  // namespace

TEST(JsonSchema, IntegerRangesExhaustive) {
    struct R {
        int64_t lo, hi;
    };
    const R ranges[] = {{0, 150}, {1, 9},       {-5, 5},     {-150, -20},  {7, 7},
                        {10, 99}, {-1, 0},      {99, 101},   {37, 8412},   {-999, 1000},
                        {0, 0},   {-100, -100}, {123, 4567}, {-4567, -123}};
    for (const R& r : ranges) {
        const json s = {{"type", "integer"}, {"minimum", r.lo}, {"maximum", r.hi}};
        check_int_range(s, r.lo - 300, r.hi + 300,
                        [&](int64_t v) { return v >= r.lo && v <= r.hi; });
    }
    // One-sided and exclusive bounds.
    check_int_range(json::parse(R"({"type": "integer", "minimum": 42})"), -100, 2000,
                    [](int64_t v) { return v >= 42; });
    check_int_range(json::parse(R"({"type": "integer", "maximum": -42})"), -2000, 100,
                    [](int64_t v) { return v <= -42; });
    check_int_range(
        json::parse(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100})"), -50,
        150, [](int64_t v) { return v > 0 && v < 100; });
    check_int_range(json::parse(R"({"type": "integer", "minimum": 1.5, "maximum": 9.9})"), -20, 30,
                    [](int64_t v) { return v >= 2 && v <= 9; });
    // Draft 4: exclusiveMinimum as a flag on minimum.
    check_int_range(json::parse(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})"),
                    0, 20, [](int64_t v) { return v > 5; });

    // Random ranges.
    std::mt19937_64 rng(7);
    for (int i = 0; i < 20; ++i) {
        int64_t a = int64_t(rng() % 20001) - 10000, b = int64_t(rng() % 20001) - 10000;
        if (a > b) std::swap(a, b);
        const json s = {{"type", "integer"}, {"minimum", a}, {"maximum", b}};
        const Compiled c = compile(s);
        for (int k = 0; k < 300; ++k) {
            const int64_t v = int64_t(rng() % 24001) - 12000;
            const int64_t near = k % 3 == 0   ? a + int64_t(rng() % 5) - 2
                                 : k % 3 == 1 ? b + int64_t(rng() % 5) - 2
                                              : v;
            EXPECT_EQ(c.accepts(std::to_string(near)), near >= a && near <= b)
                << s.dump() << " " << near;
        }
    }
}

TEST(JsonSchema, IntegerLargeBounds) {
    const Compiled c =
        compile(R"({"type": "integer", "minimum": 1000000000000, "maximum": 1000000000100})");
    EXPECT_ACCEPTS(c, "1000000000000");
    EXPECT_ACCEPTS(c, "1000000000057");
    EXPECT_ACCEPTS(c, "1000000000100");
    EXPECT_REJECTS(c, "1000000000101");
    EXPECT_REJECTS(c, "999999999999");
    EXPECT_REJECTS(c, "100000000010");

    const Compiled big = compile(
        R"({"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991})");
    EXPECT_ACCEPTS(big, "9007199254740991");
    EXPECT_ACCEPTS(big, "-9007199254740991");
    EXPECT_REJECTS(big, "9007199254740992");
    EXPECT_REJECTS(big, "-9007199254740992");
    EXPECT_ACCEPTS(big, "0");

    const Compiled huge = compile(R"({"type": "integer", "minimum": 0, "maximum": 1e300})");
    EXPECT_ACCEPTS(huge, "9999999999999999");  // clamped to the 16 digits `integer` writes
    EXPECT_REJECTS(huge, "-1");
    EXPECT_REJECTS(huge, "10000000000000000");
}

TEST(JsonSchema, NumberBounds) {
    const Compiled c = compile(R"({"type": "number", "minimum": -1, "exclusiveMaximum": 2})");
    for (const char* ok : {"-1", "0", "1", "-0.5", "0.25", "1.999", "-0.001"})
        EXPECT_ACCEPTS(c, ok);
    for (const char* bad : {"2", "-1.5", "2.0001", "-2", "1e0", "3"}) EXPECT_REJECTS(c, bad);

    const Compiled p = compile(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})");
    for (const char* ok : {"1", "0.5", "0.0001"}) EXPECT_ACCEPTS(p, ok);
    for (const char* bad : {"0", "-0.5", "1.5", "1.01"}) EXPECT_REJECTS(p, bad);

    const Compiled lo = compile(R"({"type": "number", "minimum": 0})");
    EXPECT_ACCEPTS(lo, "12345.678");
    EXPECT_REJECTS(lo, "-0.1");

    // Exhaustive on a grid of tenths: accepted iff within the bounds.
    const Compiled g = compile(R"({"type": "number", "minimum": -3, "maximum": 4})");
    for (int t = -60; t <= 60; ++t) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", t / 10.0);
        std::string text = buf;
        if (t % 10 == 0) text = std::to_string(t / 10);  // whole values are written as integers
        if (text == "-0.0") continue;
        const bool in = t >= -30 && t <= 40;
        EXPECT_EQ(g.accepts(text), in) << text;
    }
}

// --- refusals ----------------------------------------------------------------------------

TEST(JsonSchema, RefusedKeywords) {
    EXPECT_REFUSED(R"({"not": {"type": "string"}})", "not", "$.not");
    EXPECT_REFUSED(R"({"if": {}, "then": {}})", "if", "$.if");
    EXPECT_REFUSED(R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "dependentRequired",
                   "$.dependentRequired");
    EXPECT_REFUSED(R"({"dependentSchemas": {}})", "dependentSchemas", "$.dependentSchemas");
    EXPECT_REFUSED(R"({"patternProperties": {"^x": {}}})", "patternProperties",
                   "$.patternProperties");
    EXPECT_REFUSED(R"({"propertyNames": {"maxLength": 3}})", "propertyNames", "$.propertyNames");
    EXPECT_REFUSED(R"({"type": "array", "uniqueItems": true})", "uniqueItems", "$.uniqueItems");
    EXPECT_REFUSED(R"({"type": "integer", "multipleOf": 5})", "multipleOf", "$.multipleOf");
    EXPECT_REFUSED(R"({"type": "object", "minProperties": 1})", "minProperties", "$.minProperties");
    EXPECT_REFUSED(R"({"type": "object", "maxProperties": 2})", "maxProperties", "$.maxProperties");
    EXPECT_REFUSED(R"({"type": "array", "contains": {"type": "integer"}})", "contains",
                   "$.contains");
    EXPECT_REFUSED(R"({"unevaluatedProperties": false})", "unevaluatedProperties",
                   "$.unevaluatedProperties");
    EXPECT_REFUSED(R"({"type": "string", "format": "hostname"})", "format", "$.format");
    EXPECT_REFUSED(R"({"type": "number", "maximum": 0.5})", "maximum", "$.maximum");
    EXPECT_REFUSED(R"({"type": "number", "exclusiveMinimum": 0.1})", "exclusiveMinimum",
                   "$.exclusiveMinimum");
    EXPECT_REFUSED(R"({"type": "string", "pattern": "^a", "maxLength": 3})", "maxLength",
                   "$.maxLength");
    EXPECT_REFUSED(R"({"enum": ["a", "bb"], "maxLength": 1})", "maxLength", "$.maxLength");
    EXPECT_REFUSED(R"({"type": "integer", "minimum": 5, "maximum": 4})", "minimum", "$.minimum");

    // Deep paths.
    EXPECT_REFUSED(R"({"properties": {"items": {"type": "array", "items": [{"not": {}}]}}})", "not",
                   "$.properties.items.items[0].not");
    EXPECT_REFUSED(R"({"$defs": {"Foo": {"not": {}}}, "$ref": "#/$defs/Foo"})", "not",
                   "$.$defs.Foo.not");
    EXPECT_REFUSED(R"({"anyOf": [{}, {"if": {}}]})", "if", "$.anyOf[1].if");
    EXPECT_REFUSED(R"({"properties": {"a b": {"type": "string", "format": "ipv4"}}})", "format",
                   "$.properties[\"a b\"].format");
    EXPECT_REFUSED(R"({"type": "array", "prefixItems": [{}, {"type": "string", "format": "uri"}]})",
                   "format", "$.prefixItems[1].format");
    EXPECT_REFUSED(R"({"additionalProperties": {"type": "integer", "multipleOf": 2}})",
                   "multipleOf", "$.additionalProperties.multipleOf");
}

TEST(JsonSchema, RefusedPatterns) {
    const char* const bad[] = {
        "(a)\\1",  // backreference
        "(?<n>a)\\k<n>",
        "a(?=b)",  // lookahead
        "a(?!b)",
        "(?<=a)b",  // lookbehind
        "(?<!a)b",
        "a*?",  // lazy
        "a+?b",
        "a{2,3}?",
        "\\bword\\b",  // word boundary
        "a^b",         // anchors inside
        "a$b",
        "(^a)",
        "\\p{L}",
        "(a*)*",  // unbounded repetition of something empty
        "(",
        "a)",
        "[a",
        "*a",
        "[z-a]",
    };
    for (const char* p : bad) {
        const json s = {{"type", "string"}, {"pattern", p}};
        const SchemaRefusal r = refusal(s);
        EXPECT_EQ(r.keyword, "pattern") << p;
        EXPECT_EQ(r.path, "$.pattern") << p;
    }
}

TEST(JsonSchema, RefusedRefsAndGarbage) {
    EXPECT_REFUSED(R"({"$ref": "https://example.com/schema.json"})", "$ref", "$.$ref");
    EXPECT_REFUSED(R"({"$ref": "#/properties/a"})", "$ref", "$.$ref");
    EXPECT_REFUSED(R"({"properties": {"a": {"$ref": "#/$defs/Missing"}}})", "$ref",
                   "$.properties.a.$ref");
    EXPECT_REFUSED(
        R"({"$defs": {"L": {"anyOf": [{"$ref": "#/$defs/L"}, {"type": "null"}]}}, "$ref": "#/$defs/L"})",
        "$ref", "$.$defs.L.anyOf[0].$ref");  // left recursion
    EXPECT_REFUSED("false", "false", "$");
    EXPECT_REFUSED(R"({"properties": {"a": false}, "required": ["a"]})", "required", "$.required");
    EXPECT_REFUSED(R"({"type": "foo"})", "type", "$.type");
    EXPECT_REFUSED(R"({"type": []})", "type", "$.type");
    EXPECT_REFUSED(R"({"type": "object", "properties": {"a": 5}})", "properties", "$.properties.a");
    EXPECT_REFUSED(R"({"type": "array", "items": "string"})", "items", "$.items");
    EXPECT_REFUSED("42", "schema", "$");
    EXPECT_REFUSED(R"({"type": "string", "minLength": -1})", "minLength", "$.minLength");
    EXPECT_REFUSED(R"({"type": "object", "required": "a"})", "required", "$.required");
    EXPECT_REFUSED(R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems", "$.minItems");
    EXPECT_REFUSED(R"({"enum": []})", "enum", "$.enum");
    EXPECT_REFUSED(R"({"type": "string", "enum": [1, 2]})", "enum", "$.enum");
    EXPECT_REFUSED(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "allOf", "$.allOf");
    EXPECT_REFUSED(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})", "allOf", "$.allOf");
    EXPECT_REFUSED(R"({"anyOf": [false, false]})", "anyOf", "$.anyOf");
    EXPECT_REFUSED(R"({"anyOf": [{}], "oneOf": [{}]})", "oneOf", "$.oneOf");
    // Siblings merged into a branch: additionalProperties false forbids the branch's property.
    EXPECT_REFUSED(R"({"properties": {"k": {}}, "additionalProperties": false,
                       "oneOf": [{"properties": {"a": {}}, "required": ["a"]}]})",
                   "oneOf", "$.oneOf[0]");
}

TEST(JsonSchema, HostileSchemasAreRefusedQuickly) {
    json deep = {{"type", "integer"}};
    for (int i = 0; i < 1000; ++i) deep = {{"type", "array"}, {"items", deep}};
    EXPECT_EQ(refusal(deep).keyword, "items");

    // Each definition merges the next one twice: 2^40 merges if nothing stopped it.
    json defs = json::object();
    for (int i = 0; i < 40; ++i) {
        const std::string next = "#/$defs/D" + std::to_string(i + 1);
        defs["D" + std::to_string(i)] = {{"allOf", {{{"$ref", next}}, {{"$ref", next}}}}};
    }
    defs["D40"] = {{"type", "string"}};
    EXPECT_EQ(refusal(json{{"$defs", defs}, {"$ref", "#/$defs/D0"}}).keyword, "allOf");

    const json groups = {{"type", "string"},
                         {"pattern", std::string(5000, '(') + std::string(5000, ')')}};
    EXPECT_EQ(refusal(groups).keyword, "pattern");
}

TEST(JsonSchema, AnnotationsAndUnknownKeywordsAreIgnored) {
    const Compiled c = compile(R"({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x", "$comment": "c",
        "title": "T", "description": "D", "examples": [1], "default": 2, "deprecated": false,
        "readOnly": true, "writeOnly": false, "strict": true, "x-vendor": {"anything": 1},
        "type": "integer"})");
    EXPECT_ACCEPTS(c, "3");
    EXPECT_REJECTS(c, "\"3\"");
}

TEST(JsonSchema, TypeInferredFromKeywords) {
    const Compiled o = compile(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})");
    EXPECT_ACCEPTS(o, R"({"a": 1})");
    EXPECT_REJECTS(o, "1");
    const Compiled s = compile(R"({"maxLength": 2})");
    EXPECT_ACCEPTS(s, "\"ab\"");
    EXPECT_REJECTS(s, "12");
    const Compiled n = compile(R"({"minimum": 3})");
    EXPECT_ACCEPTS(n, "3.5");
    EXPECT_REJECTS(n, "2");
}

// --- the builder -------------------------------------------------------------------------

TEST(JsonSchemaGrammar, SharedGrammarForTools) {
    JsonSchemaGrammar g;
    const auto weather =
        g.add(json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}},
                                                "required": ["city"]})"),
              "get_weather");
    const auto sum =
        g.add(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
                                           "b": {"type": "integer"}}, "required": ["a", "b"]})"),
              "sum");
    ASSERT_TRUE(weather && sum);
    EXPECT_EQ(weather->rfind("get-weather", 0), 0u) << *weather;
    EXPECT_EQ(sum->rfind("sum", 0), 0u) << *sum;
    const Compiled c = compile_gbnf(g.gbnf(*weather + " | " + *sum));
    EXPECT_ACCEPTS(c, R"({"city": "Oslo"})");
    EXPECT_ACCEPTS(c, R"({"a": 1, "b": 2})");
    EXPECT_REJECTS(c, R"({"city": 1})");

    // A refused schema leaves the grammar as it was.
    const std::string before = g.gbnf("");
    EXPECT_FALSE(g.add(
        json::parse(R"({"properties": {"x": {"type": "string"}, "y": {"not": {}}}})"), "bad"));
    EXPECT_EQ(g.refusal().keyword, "not");
    EXPECT_EQ(g.refusal().path, "$.properties.y.not");
    EXPECT_EQ(g.gbnf(""), before);

    // The same hint twice: two names. Hints are sanitised; digit endings kept clear of the
    // parser's own rule names.
    const auto again = g.add(json::parse(R"({"type": "string"})"), "sum");
    ASSERT_TRUE(again);
    EXPECT_NE(*again, *sum);
    EXPECT_EQ(again->rfind("sum", 0), 0u);
    const auto odd = g.add(json::parse(R"({"type": "boolean"})"), "tool 1");
    ASSERT_TRUE(odd);
    EXPECT_EQ(odd->rfind("tool-1", 0), 0u) << *odd;
    for (char ch : *odd) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-');
    compile_gbnf(g.gbnf(*again + " | " + *odd));

    // Any value, any object.
    JsonSchemaGrammar any;
    const std::string obj = any.add_any_object();
    const Compiled o = compile_gbnf(any.gbnf(obj));
    EXPECT_ACCEPTS(o, R"({"a": [1, {"b": null}]})");
    EXPECT_REJECTS(o, "[1]");
    const std::string val = any.add_any_value();
    const Compiled v = compile_gbnf(any.gbnf(val));
    EXPECT_ACCEPTS(v, "[1]");
}

TEST(JsonSchemaGrammar, NamesStayClearOfParserNames) {
    // The GBNF parser names the rules it makes for groups "<rule>-<n>"; a property "a-1" next
    // to a property "a" whose rule has groups must not take such a name.
    const Compiled c = compile(R"({"properties": {
        "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "a-1": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}})");
    EXPECT_ACCEPTS(c, R"({"a": [1, 2], "a-1": ["x"]})");
    EXPECT_REJECTS(c, R"({"a-1": [1]})");
}

TEST(JsonSchemaGrammar, Deterministic) {
    const json s = json::parse(
        R"({"$defs": {"N": {"type": "object", "properties": {"k": {"$ref": "#/$defs/N"}}}},
        "type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"$ref": "#/$defs/N"},
        "c": {"type": "string", "pattern": "^x+$"}, "d": {"type": "integer", "minimum": 3}}})");
    SchemaRefusal why;
    const auto one = json_schema_to_gbnf(s, &why), two = json_schema_to_gbnf(s, &why);
    ASSERT_TRUE(one && two);
    EXPECT_EQ(*one, *two);
    EXPECT_EQ(one->rfind("root ::= ", 0), 0u);
    compile_gbnf(*one);
}

TEST(JsonSchema, EightPropertySchema) {
    const Compiled c = compile(
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"city":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5},"active":{"type":"boolean"},"score":{"type":"number"},"role":{"enum":["admin","user","guest"]}},"required":["name","age","email","city","tags","active","score","role"],"additionalProperties":false})");
    EXPECT_ACCEPTS(
        c,
        R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.com", "city": "London", "tags": ["math", "poetry"], "active": true, "score": 99.5, "role": "admin"})");
    EXPECT_ACCEPTS(
        c,
        "{\n  \"name\": \"B\",\n  \"age\": 0,\n  \"email\": \"b@c.de\",\n  \"city\": \"\",\n"
        "  \"tags\": [],\n  \"active\": false,\n  \"score\": -1e3,\n  \"role\": \"guest\"\n}");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 151, "email": "a@b.co", "city": "X", "tags": [], "active": true, "score": 1, "role": "user"})");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 1, "email": "not-an-email", "city": "X", "tags": [], "active": true, "score": 1, "role": "user"})");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 1, "email": "a@b.co", "city": "X", "tags": ["1","2","3","4","5","6"], "active": true, "score": 1, "role": "user"})");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 1, "email": "a@b.co", "city": "X", "tags": [], "active": true, "score": 1, "role": "root"})");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 1, "email": "a@b.co", "city": "X", "tags": [], "active": true, "score": 1})");
    EXPECT_REJECTS(
        c,
        R"({"name": "A", "age": 1, "email": "a@b.co", "city": "X", "tags": [], "active": true, "score": 1, "role": "user", "extra": 1})");
}
