// Jinja's built-in filters, tests and global functions, transformers' additions (tojson with
// ensure_ascii=False, raise_exception, strftime_now) and the Python methods of str, list and
// dict that chat templates call (message.content.split(...), tools.items(), ns.ids.append(...)).
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_value.h"

namespace uf::jinja {

using FilterFn = StatusOr<Value> (*)(Interpreter& in, const Value& subject, const CallArgs& args);
using TestFn = StatusOr<bool> (*)(Interpreter& in, const Value& subject, const CallArgs& args);
using GlobalFn = StatusOr<Value> (*)(Interpreter& in, const CallArgs& args);
using MethodFn = StatusOr<Value> (*)(Interpreter& in, const Value& self, const CallArgs& args);

// nullptr when there is no such filter / test / global / method.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);
GlobalFn FindGlobal(std::string_view name);
MethodFn FindMethod(const Value& self, std::string_view name);  // jinja_methods.cc

// Python str.format() with positional ({}, {0}) and keyword ({name}) fields.
StatusOr<std::string> PythonFormat(Interpreter& in, std::string_view format, const CallArgs& args);
// Python printf-style formatting ("%s" % x, the format filter): %s %r %d %i %f %x %%.
StatusOr<std::string> PercentFormat(Interpreter& in, std::string_view format,
                                    const std::vector<Value>& args);

// Python's iter(): list items, dict keys, string characters; undefined iterates as empty.
StatusOr<std::vector<Value>> Iterate(Interpreter& in, const Value& v);

}  // namespace uf::jinja
