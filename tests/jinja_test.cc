// The Jinja subset behind chat templates (ChatTemplate): operators, literals, filters, tests,
// whitespace control, loops, scoping, macros and methods, each against results worked out by
// hand from Jinja2 / Python semantics; then syntax errors, template errors and hostile templates,
// which must all end in a Status.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "tokenizer/chat_template.h"

namespace uf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ChatTemplate MustParse(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return *ChatTemplate::Parse("");
  return std::move(t).value();
}

// Renders a template with no messages.
std::string Eval(const std::string& source, const json& extra = json::object()) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + t.status().ToString();
  auto r = t->Render(json::array(), false, "<s>", "</s>", extra);
  if (!r.ok()) return "ERROR: " + r.status().ToString();
  return *r;
}

std::string Today(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof(buf), format, &tm));
}

// ---------------------------------------------------------------------------------------------
// Expression language

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(Eval("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(Eval("{{ (1 + 2) * 3 }}"), "9");
  EXPECT_EQ(Eval("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}"),
            "3 -4 1 2 -2");
  EXPECT_EQ(Eval("{{ 7 / 2 }} {{ 10 / 5 }} {{ 1 / 4 }}"), "3.5 2.0 0.25");
  EXPECT_EQ(Eval("{{ 2 ** 10 }} {{ 2 ** -1 }}"), "1024 0.5");
  EXPECT_EQ(Eval("{{ 0.1 + 0.2 }} {{ 1e3 }} {{ 1e-5 }} {{ 1e16 }} {{ 1_000 }}"),
            "0.30000000000000004 1000.0 1e-05 1e+16 1000");
  EXPECT_EQ(Eval("{{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 7 | round }}"),
            "3 2.0 3.14 7");
  EXPECT_EQ(Eval("{{ true + 1 }} {{ 3 * 1.5 }}"), "2 4.5");
}

TEST(JinjaTest, StringsAndConcatenation) {
  EXPECT_EQ(Eval("{{ 'ab' * 3 }}|{{ 'a' ~ 1 ~ none ~ true }}|{{ 'x' + 'y' }}"),
            "ababab|a1NoneTrue|xy");
  EXPECT_EQ(Eval(R"({{ 'a\tb\n' | length }} {{ '\u00e9' }} {{ "it's" }} {{ 'a' 'b' }})"),
            "4 é it's ab");
  EXPECT_EQ(Eval("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[-1] }} {{ 'héllo'[1] }}"),
            "el olleh o é");
  EXPECT_EQ(Eval("{{ 'héllo' | length }} {{ 'héllo' | upper }}"), "5 HÉLLO");
}

TEST(JinjaTest, Literals) {
  EXPECT_EQ(Eval("{{ {'a': [1, 'x', none, true, 2.0]} }}"), "{'a': [1, 'x', None, True, 2.0]}");
  EXPECT_EQ(Eval("{{ ('a',) }} {{ (1, 2) }} {{ [] }} {{ {} }}"), "('a',) (1, 2) [] {}");
  EXPECT_EQ(Eval(R"({{ ["it's", 'say "x"'] }})"), R"(["it's", 'say "x"'])");
  EXPECT_EQ(Eval("{{ True }} {{ False }} {{ None }} {{ none }}"), "True False None None");
  EXPECT_EQ(Eval("{{ {1: 'a', 'b': 2}[1] }} {{ {1: 'a'} }}"), "a {1: 'a'}");
}

TEST(JinjaTest, Comparisons) {
  EXPECT_EQ(Eval("{{ 3 > 2 > 1 }} {{ 1 < 2 > 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}"),
            "True False True True");
  EXPECT_EQ(Eval("{{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} {{ 2 not in [1, 2] }}"),
            "True True False");
  EXPECT_EQ(Eval("{{ not true or false }} {{ not (true and false) }} {{ 0 or 'x' }} {{ 1 and 2 }}"),
            "False True x 2");
  EXPECT_EQ(Eval("{{ 'x' if false }}|{{ 'x' if 0 else 'y' }}|{{ [1] == [1] }}"), "|y|True");
}

TEST(JinjaTest, Filters) {
  EXPECT_EQ(Eval("{{ '  a b  ' | trim }}|{{ 'xxhixx' | trim('x') }}"), "a b|hi");
  EXPECT_EQ(Eval("{{ 'hello world-foo' | title }} {{ 'hELLO' | capitalize }}"),
            "Hello World-Foo Hello");
  EXPECT_EQ(Eval("{{ 'aXbX' | replace('X', '-') }} {{ [1, 2, 3] | join(', ') }}"), "a-b- 1, 2, 3");
  EXPECT_EQ(Eval("{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ 'abc' | list }}"),
            "3 2 ['a', 'b', 'c']");
  EXPECT_EQ(Eval("{{ missing | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', "
                 "true) }}|{{ none | d('x') }}"),
            "d||d|None");
  EXPECT_EQ(Eval("{{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A'] | sort(case_sensitive=true) }} "
                 "{{ [3, 1, 2] | sort(reverse=true) }}"),
            "['A', 'b', 'c'] ['A', 'b'] [3, 2, 1]");
  EXPECT_EQ(Eval("{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} "
                 "{{ [1, 2, 3] | reverse | list }}"),
            "[1, 2, 3] ['a', 'b'] [3, 2, 1]");
  EXPECT_EQ(Eval("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | items | list }}"),
            "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)]");
  EXPECT_EQ(Eval("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} "
                 "{{ '2.5' | float }} {{ 3 | float }} {{ 3.9 | int }}"),
            "42 4 0 7 2.5 3.0 3");
  EXPECT_EQ(Eval("{{ [1, 2, 3] | length }} {{ {'a': 1} | count }} {{ missing | length }} "
                 "{{ [1, 2, 3] | sum }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }}"),
            "3 1 0 6 1 3");
  EXPECT_EQ(Eval("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(Eval("{{ 'one two  three' | wordcount }} {{ 5 | string ~ 'x' }} {{ 'a' | upper }}"),
            "3 5x A");
  EXPECT_EQ(Eval("{{ '<a href=\"x\">&</a>' | e }}"), "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt;");
  EXPECT_EQ(Eval("{{ '%s=%d' | format('x', 3) }} {{ '%05.1f' | format(3.14159) }}"), "x=3 003.1");
}

TEST(JinjaTest, ListFilters) {
  const json ctx = json::parse(R"({"users": [
    {"name": "ann", "role": "admin", "age": 30},
    {"name": "bob", "role": "user", "age": 25},
    {"name": "cid", "age": 35}]})");
  EXPECT_EQ(Eval("{{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | "
                 "list }}",
                 ctx),
            "['bob']");
  EXPECT_EQ(Eval("{{ users | selectattr('role') | map(attribute='name') | join(',') }}", ctx),
            "ann,bob");
  EXPECT_EQ(
      Eval("{{ users | rejectattr('role', 'defined') | map(attribute='name') | first }}", ctx),
      "cid");
  EXPECT_EQ(Eval("{{ users | map(attribute='role', default='none') | join(',') }}", ctx),
            "admin,user,none");
  EXPECT_EQ(Eval("{{ users | sort(attribute='age') | map(attribute='name') | join(',') }}", ctx),
            "bob,ann,cid");
  EXPECT_EQ(Eval("{{ ['a', 'b'] | map('upper') | list }} {{ [1, 2, 3, 4] | select('odd') | list "
                 "}} {{ [1, 2, 3, 4] | reject('even') | list }}"),
            "['A', 'B'] [1, 3] [1, 3]");
  EXPECT_EQ(Eval("{{ ['a', 'b', 'c'] | reject('equalto', 'b') | join }}"), "ac");
}

TEST(JinjaTest, ToJson) {
  const ojson ctx = ojson::parse(R"({"v": {"z": 1, "a": [true, null, 1.5, "é\"\n"]}})");
  auto render = [&](const std::string& src) {
    auto t = ChatTemplate::Parse(src);
    EXPECT_TRUE(t.ok());
    auto r = t->Render(ojson::array(), false, "", "", ctx);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : "";
  };
  // Key order is the client's; non-ASCII stays as is (ensure_ascii=False).
  EXPECT_EQ(render("{{ v | tojson }}"), R"({"z": 1, "a": [true, null, 1.5, "é\"\n"]})");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}"),
            "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    1.5,\n    \"é\\\"\\n\"\n  ]\n}");
  EXPECT_EQ(render("{{ v | tojson(sort_keys=true) }}"),
            R"({"a": [true, null, 1.5, "é\"\n"], "z": 1})");
  EXPECT_EQ(render("{{ v | tojson(separators=(',', ':')) }}"),
            R"({"z":1,"a":[true,null,1.5,"é\"\n"]})");
  EXPECT_EQ(render("{{ v | tojson(ensure_ascii=true) }}"),
            R"({"z": 1, "a": [true, null, 1.5, "\u00e9\"\n"]})");
  EXPECT_EQ(render("{{ '{\"k\": [1, 2]}' | from_json | tojson }}"), R"({"k": [1, 2]})");
}

TEST(JinjaTest, Tests) {
  EXPECT_EQ(Eval("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is none }}"),
            "False True True False");
  EXPECT_EQ(Eval("{{ 's' is string }} {{ {} is mapping }} {{ [] is mapping }} {{ 's' is iterable "
                 "}} {{ 1 is iterable }} {{ [] is sequence }}"),
            "True True False True False True");
  EXPECT_EQ(Eval("{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} "
                 "{{ true is true }} {{ 0 is false }} {{ false is false }}"),
            "True True True True True False True");
  EXPECT_EQ(Eval("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is equalto 2 }} "
                 "{{ 2 is eq(3) }} {{ 2 is in [1, 2] }} {{ 'a' is not string }}"),
            "True True True True False True False");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(Eval("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Eval("a  {%- if true %} b {% endif -%}  c"), "a b c");
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(Eval("{% for x in [1, 2] %}\n    {% if x %}\n<{{ x }}>\n    {% endif %}\n{% endfor %}"),
            "<1>\n<2>\n");
  // Variable tags are left alone by both.
  EXPECT_EQ(Eval("  {{ 'v' }}\n  x"), "  v\n  x");
  // "+" turns lstrip_blocks off for that tag; comments follow the block rules.
  EXPECT_EQ(Eval("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Eval("a\n  {# note #}\nb"), "a\nb");
  // One trailing newline of the template is dropped (keep_trailing_newline=False).
  EXPECT_EQ(Eval("x\n"), "x");
  EXPECT_EQ(Eval("x\n\n"), "x\n");
  EXPECT_EQ(Eval("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(JinjaTest, Loops) {
  EXPECT_EQ(Eval("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                 "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(Eval("{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} "
                 "{% endfor %}"),
            "<1>2 1<2>3 2<3> ");
  EXPECT_EQ(Eval("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(Eval("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "ab");
  EXPECT_EQ(Eval("{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "1/5 3/5 5/5 7/5 9/5 ");
  EXPECT_EQ(Eval("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Eval("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}"
                 "{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(Eval("{% for x in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "abab");
  EXPECT_EQ(Eval("{{ range(3) | list }} {{ range(1, 10, 4) | list }} {{ range(3, 0, -1) | list "
                 "}}"),
            "[0, 1, 2] [1, 5, 9] [3, 2, 1]");
}

TEST(JinjaTest, ScopingAndNamespace) {
  // `set` inside a loop does not leak; a namespace carries state out.
  EXPECT_EQ(Eval("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Eval("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
                 "{% endfor %}{{ ns.x }}"),
            "4");
  // `if` does not open a scope.
  EXPECT_EQ(Eval("{% if true %}{% set y = 'in' %}{% endif %}{{ y }}"), "in");
  // Each iteration starts fresh.
  EXPECT_EQ(Eval("{% for i in [0, 1] %}{% if i == 0 %}{% set z = 'a' %}{% endif %}[{{ z }}]"
                 "{% endfor %}"),
            "[a][]");
  EXPECT_EQ(Eval("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(Eval("{% set ns = namespace(items=[]) %}{% set _ = ns.items.append(3) %}"
                 "{% set _ = ns.items.append(4) %}{{ ns.items }} {{ ns.items.pop(0) }} "
                 "{{ ns.items }}"),
            "[3, 4] 3 [4]");
}

TEST(JinjaTest, BlockSetFilterAndMacros) {
  EXPECT_EQ(Eval("{% set s %}  hi  {% endset %}[{{ s }}]"), "[  hi  ]");
  EXPECT_EQ(Eval("{% set s | trim | upper %}  hi  {% endset %}[{{ s }}]"), "[HI]");
  EXPECT_EQ(Eval("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(Eval("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!"
                 "{% endmacro %}{{ greet('Bob') }} {{ greet('Ann', greeting='Hi') }}"),
            "Hello, Bob! Hi, Ann!");
  EXPECT_EQ(Eval("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}"
                 "{% endif %}{% endmacro %}{{ fact(5) }}"),
            "120");
  EXPECT_EQ(Eval("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                 "{% call wrap('b') %}inner{% endcall %}"),
            "<b>inner</b>");
  EXPECT_EQ(Eval("{% macro m() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}"
                 "{{ m(1, 2, k='v') }}"),
            "2v");
  EXPECT_EQ(Eval("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(JinjaTest, Methods) {
  EXPECT_EQ(Eval("{{ 'a,b,,c'.split(',') }} {{ '  a b  '.split() }} {{ 'a b c'.split(' ', 1) }} "
                 "{{ 'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c']");
  EXPECT_EQ(Eval("{{ 'xxhixx'.strip('x') }} {{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() "
                 "}}|"),
            "hi hi\n|ab|");
  EXPECT_EQ(Eval("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} "
                 "{{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'aaa'.count('a') }}"),
            "True True 2 -1 3");
  EXPECT_EQ(Eval("{{ '{}-{}'.format(1, 'a') }} {{ '{x}!'.format(x=2) }} {{ 'Ab'.upper() }} "
                 "{{ 'Ab'.lower() }} {{ 'a-b'.replace('-', '+') }}"),
            "1-a 2! AB ab a+b");
  EXPECT_EQ(Eval("{% set d = {'a': 1} %}{{ d.get('a') }} {{ d.get('z', 5) }} "
                 "{{ d.get('z') is none }} {{ d.keys() | list }} {{ d.values() | list }}"),
            "1 5 True ['a'] [1]");
  // `d.items` is the method even when the dict has an "items" key; d['items'] is the key.
  EXPECT_EQ(Eval("{% set d = {'items': 'key'} %}{{ d['items'] }} {{ d.items() | list }}"),
            "key [('items', 'key')]");
}

// Substring search runs on memmem and reversed strings (linear time); results must still be
// Python's: rightmost / non-overlapping matches, empty needles, byte vs code point indexes.
TEST(JinjaTest, SubstringSearch) {
  EXPECT_EQ(Eval("{{ 'abcabc'.rfind('bc') }} {{ 'abcabc'.find('c', 3) }} {{ 'héllo'.rfind('l') }} "
                 "{{ 'ab'.rfind('') }} {{ ''.rfind('') }} {{ 'ab'.rfind('abc') }}"),
            "4 5 3 2 0 -1");
  EXPECT_EQ(Eval("{{ 'aaa'.split('aa') }} {{ 'aaa'.rsplit('aa') }} {{ 'a,b,,c'.rsplit(',') }} "
                 "{{ 'a,b,c'.rsplit(',', 0) }} {{ ',a,'.rsplit(',', 1) }}"),
            "['', 'a'] ['a', ''] ['a', 'b', '', 'c'] ['a,b,c'] [',a', '']");
  EXPECT_EQ(Eval("{{ 'aaaa'.count('aa') }} {{ 'aaaa'.replace('aa', 'b') }} {{ 'ab' in 'xaby' }} "
                 "{{ 'ab' is in 'xay' }} {{ '' in 'x' }}"),
            "2 bb True False True");
}

TEST(JinjaTest, Undefined) {
  // Missing names, keys and indexes are undefined: empty when printed, falsy, empty to iterate.
  EXPECT_EQ(Eval("[{{ missing }}][{{ {'a': 1}.b }}][{{ [1][5] }}][{{ none.x }}]"), "[][][][]");
  // Reading through an undefined value fails, as with Jinja's default Undefined.
  EXPECT_EQ(Eval("{{ missing.attr }}"),
            "ERROR: INVALID_ARGUMENT: chat template: line 1: 'missing' is undefined");
  EXPECT_EQ(Eval("{{ {'a': 1}.b.c }}"),
            "ERROR: INVALID_ARGUMENT: chat template: line 1: "
            "attribute 'b' is undefined and has no attributes");
  EXPECT_EQ(Eval("{{ {'a': 1}.b[0] }}"),
            "ERROR: INVALID_ARGUMENT: chat template: line 1: "
            "attribute 'b' is undefined and has no attributes");
  EXPECT_EQ(Eval("{{ {'a': 1}.b is defined }} {{ missing | length }} {% for x in missing %}x"
                 "{% endfor %}"),
            "False 0 ");
  EXPECT_EQ(Eval("{{ user }}", {{"user", "from context"}}), "from context");
  EXPECT_EQ(Eval("{{ strftime_now('%Y') }}"), Today("%Y"));
}

// ---------------------------------------------------------------------------------------------
// Errors

void ExpectParseError(const std::string& source, const std::string& where) {
  const std::string shown = source.size() > 80 ? source.substr(0, 80) + "..." : source;
  auto t = ChatTemplate::Parse(source);
  ASSERT_FALSE(t.ok()) << shown;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(where), std::string::npos)
      << shown << " -> " << t.status().message();
}

TEST(JinjaTest, SyntaxErrors) {
  ExpectParseError("{% if x %}never closed", "missing {% endif %}");
  ExpectParseError("line one\n{{ 1 + }}", "line 2, column 8");
  ExpectParseError("{% endfor %}", "unknown tag 'endfor'");
  ExpectParseError("{{ 'unterminated }}", "unterminated string");
  ExpectParseError("{{ x", "line 1, column 1");
  ExpectParseError("{# open comment", "missing end of comment");
  ExpectParseError("{% break %}", "outside of a loop");
  ExpectParseError("{{ (1 ]) }}", "unexpected ']'");
  ExpectParseError("{% for x in y recursive %}{% endfor %}", "not supported");
  ExpectParseError("{{ 99999999999999999999 }}", "too large");
  ExpectParseError("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
                   "nested too deeply");
  ExpectParseError("{{ " + std::string(5000, '-') + "1 }}", "nested too deeply");
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  ExpectParseError(nots + "1 }}", "nested too deeply");
  std::string deep_blocks;
  for (int i = 0; i < 500; ++i) deep_blocks += "{% if true %}";
  ExpectParseError(deep_blocks, "nested too deeply");
}

void ExpectRenderError(const std::string& source, StatusCode code, const std::string& what,
                       const jinja::RenderLimits& limits = {}) {
  auto t = ChatTemplate::Parse(source);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  t->set_limits(limits);
  auto r = t->Render(json::array(), true, "", "");
  ASSERT_FALSE(r.ok()) << source;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(what), std::string::npos)
      << source << " -> " << r.status().message();
}

TEST(JinjaTest, RenderErrors) {
  ExpectRenderError("a\n{{ raise_exception('boom') }}", StatusCode::kInvalidArgument,
                    "line 2: template raised an exception: boom");
  ExpectRenderError("{{ no_such_function() }}", StatusCode::kInvalidArgument,
                    "'no_such_function' is undefined");
  ExpectRenderError("{{ 1 | no_such_filter }}", StatusCode::kInvalidArgument,
                    "no filter named 'no_such_filter'");
  ExpectRenderError("{{ 1 is no_such_test }}", StatusCode::kInvalidArgument,
                    "no test named 'no_such_test'");
  ExpectRenderError("{{ 'a' + 1 }}", StatusCode::kInvalidArgument, "unsupported operand");
  ExpectRenderError("{{ 1 // 0 }}", StatusCode::kInvalidArgument, "by zero");
  ExpectRenderError("{{ 9223372036854775807 + 1 }}", StatusCode::kInvalidArgument, "overflow");
  ExpectRenderError("{% set x = 1 %}{% set x.a = 2 %}", StatusCode::kInvalidArgument,
                    "only on a namespace");
  ExpectRenderError("{% for x in 5 %}{% endfor %}", StatusCode::kInvalidArgument, "not iterable");
  ExpectRenderError("{{ range(1000000) | length }}", StatusCode::kInvalidArgument, "range too big");
  ExpectRenderError("{% set l = [] %}{% set _ = l.append(l) %}", StatusCode::kInvalidArgument,
                    "inside itself");
}

TEST(JinjaTest, HostileTemplatesHitLimits) {
  // Default limits where they are reached quickly; smaller ones where the defaults would spend
  // seconds of CPU getting there (the mechanism is the same).
  jinja::RenderLimits small;
  small.max_steps = 1'000'000;
  small.max_output_bytes = size_t{1} << 20;
  small.max_list_items = 1 << 16;
  ExpectRenderError(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
      "{% endfor %}",
      StatusCode::kResourceExhausted, "evaluation steps", small);
  ExpectRenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                    StatusCode::kResourceExhausted, "too deep");
  ExpectRenderError("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
                    StatusCode::kResourceExhausted, "rendered template exceeds", small);
  ExpectRenderError("{{ 'x' * 10000000000 }}", StatusCode::kResourceExhausted, "limit");
  ExpectRenderError(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      StatusCode::kResourceExhausted, "string of", small);
  ExpectRenderError(
      "{% set ns = namespace(l=[0]) %}{% for i in range(100) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
      StatusCode::kResourceExhausted, "list of", small);
  ExpectRenderError(
      "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
      "{% set ns.v = [ns.v] %}{% endfor %}",
      StatusCode::kInvalidArgument, "nested too deeply");
  // Left-deep chains parse without recursion into trees as deep as the template is long; the
  // evaluator stops at its depth limit and the tree is freed without recursion.
  std::string chain = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) chain += "|trim";
  ExpectRenderError(chain + " }}", StatusCode::kResourceExhausted, "too deep");
  std::string block = "{% filter trim";
  for (int i = 0; i < 100000; ++i) block += "|trim";
  ExpectRenderError(block + " %}x{% endfilter %}", StatusCode::kResourceExhausted, "too deep");
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  ExpectRenderError(sum + " }}", StatusCode::kResourceExhausted, "too deep");
  // Work that reads big operands but builds little: comparisons, searches, lookups, tests and
  // methods on a 4 MB string, 100,000 times, would read 400 GB; each is paid for by its size.
  jinja::RenderLimits reads;
  reads.max_steps = 1'000'000;
  for (const char* op : {"s == t",
                         "s < t",
                         "s in [t]",
                         "t in s",
                         "s.find(t)",
                         "s.rfind(t)",
                         "s.count(t)",
                         "s.startswith(t)",
                         "s|wordcount",
                         "s|int",
                         "s is lower",
                         "s.isdigit()",
                         "s[-1]",
                         "d[s]",
                         "s in d",
                         "[s, t]|sort|length",
                         "[s, t]|max|length",
                         "[s, t]|unique|list|length",
                         "s is eq t",
                         "[s]|select('equalto', t)|list"}) {
    ExpectRenderError(std::string("{% set d = {} %}{% set s = 'a' * 4000000 %}{% set t = 'a' * "
                                  "3999999 ~ 'b' %}{% for i in range(100000) %}{% set _ = ") +
                          op + " %}{% endfor %}",
                      StatusCode::kResourceExhausted, "evaluation steps", reads);
  }
  // One == between lists holding the same two big strings many times over: shared strings
  // compare by identity, distinct ones are paid for inside the comparison.
  ExpectRenderError(
      "{% set a = ['x' * 1000000] * 1000 %}{% set b = ['x' * 1000000] * 1000 %}"
      "{{ a == b }}",
      StatusCode::kResourceExhausted, "evaluation steps", reads);
  jinja::RenderLimits tiny_alloc;
  tiny_alloc.max_allocated_bytes = 1 << 20;
  ExpectRenderError(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set _ = ns.l.append('y' * 1000 ~ i) %}{% endfor %}",
      StatusCode::kResourceExhausted, "allocated more than", tiny_alloc);
}

TEST(JinjaTest, DeepInputJsonIsRejected) {
  json deep = "x";
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  ChatTemplate t = MustParse("{{ messages }}");
  auto r = t.Render(json::array({deep}), false, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(t.Render(json::object(), false, "", "").ok());  // messages must be an array
}

}  // namespace
}  // namespace uf
