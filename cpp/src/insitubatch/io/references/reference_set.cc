#include "insitubatch/io/references/reference_set.h"

#include <cctype>
#include <charconv>
#include <exception>
#include <nlohmann/json.hpp>
#include <variant>

#include "insitubatch/util/base64.h"
#include "insitubatch/util/json_nesting.h"

namespace insitubatch {
namespace {

using Json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxExpressionDepth = 64;

Status Bad(std::string_view where, std::string_view message) {
  return InvalidArgument(std::string(where) + ": " + std::string(message));
}

std::string Quoted(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  out += text.size() > kShown ? std::string(text.substr(0, kShown)) + "..." : std::string(text);
  return out + "\"";
}

std::string Abbrev(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

// -- templates: kerchunk's `{{ name }}` and `gen`'s `{{ (i + 1) * 1000 }}` ---------------------

// What a template variable holds: a `gen` dimension's integer, or a string (a template, or
// a dimension listed as strings).
using Value = std::variant<int64_t, std::string>;
using Variables = std::map<std::string, Value, std::less<>>;

// A recursive-descent evaluator for the integer arithmetic kerchunk's generators use
// (+ - * // % and parentheses over integers and variables). jinja2 would accept more; what
// is refused here is named, never guessed at.
class Expression {
 public:
  Expression(std::string_view text, const Variables& vars) : text_(text), vars_(vars) {}

  Result<Value> Evaluate() {
    auto value = Sum(0);
    if (!value.ok()) return value;
    Skip();
    if (pos_ != text_.size()) return Fail("unexpected " + Quoted(text_.substr(pos_)));
    return value;
  }

 private:
  Status Fail(std::string_view why) const {
    return InvalidArgument("template expression " + Quoted(text_) + ": " + std::string(why));
  }
  void Skip() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool Take(std::string_view token) {
    Skip();
    if (text_.substr(pos_).starts_with(token)) {
      pos_ += token.size();
      return true;
    }
    return false;
  }
  Result<int64_t> Integer(Result<Value> value) {
    if (!value.ok()) return value.status();
    if (const auto* i = std::get_if<int64_t>(&*value)) return *i;
    return Fail("arithmetic on the string " + Quoted(std::get<std::string>(*value)));
  }

  Result<Value> Sum(size_t depth) {
    auto left = Product(depth);
    while (left.ok()) {
      const bool plus = Take("+");
      if (!plus && !Take("-")) break;
      auto a = Integer(std::move(left));
      auto b = Integer(Product(depth));
      if (!a.ok()) return a.status();
      if (!b.ok()) return b.status();
      int64_t out = 0;
      if (plus ? __builtin_add_overflow(*a, *b, &out) : __builtin_sub_overflow(*a, *b, &out)) {
        return Fail("integer overflow");
      }
      left = Value(out);
    }
    return left;
  }

  Result<Value> Product(size_t depth) {
    auto left = Unary(depth);
    while (left.ok()) {
      char op = 0;
      if (Take("//")) {
        op = '/';
      } else if (Take("/")) {
        return Fail("'/' makes a float in jinja2; use '//' for offsets and lengths");
      } else if (Take("*")) {
        if (Take("*")) return Fail("'**' is not supported");
        op = '*';
      } else if (Take("%")) {
        op = '%';
      } else {
        break;
      }
      auto a = Integer(std::move(left));
      auto b = Integer(Unary(depth));
      if (!a.ok()) return a.status();
      if (!b.ok()) return b.status();
      int64_t out = 0;
      if (op == '*') {
        if (__builtin_mul_overflow(*a, *b, &out)) return Fail("integer overflow");
      } else {
        if (*b == 0) return Fail("division by zero");
        if (*a == INT64_MIN && *b == -1) return Fail("integer overflow");
        // Python's floor division and modulo (the sign of the divisor).
        int64_t q = *a / *b;
        int64_t r = *a % *b;
        if (r != 0 && ((r < 0) != (*b < 0))) {
          --q;
          r += *b;
        }
        out = op == '/' ? q : r;
      }
      left = Value(out);
    }
    return left;
  }

  Result<Value> Unary(size_t depth) {
    if (depth > kMaxExpressionDepth) return Fail("nested too deeply");
    if (Take("-")) {
      auto value = Integer(Unary(depth + 1));
      if (!value.ok()) return value.status();
      if (*value == INT64_MIN) return Fail("integer overflow");
      return Value(-*value);
    }
    if (Take("+")) return Unary(depth + 1);
    if (Take("(")) {
      auto value = Sum(depth + 1);
      if (!value.ok()) return value;
      if (!Take(")")) return Fail("missing ')'");
      return value;
    }
    Skip();
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      int64_t out = 0;
      auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), out);
      if (ec != std::errc()) return Fail("integer out of range");
      pos_ = static_cast<size_t>(end - text_.data());
      return Value(out);
    }
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    if (pos_ == start) {
      return Fail(pos_ < text_.size() ? "unexpected " + Quoted(text_.substr(pos_)) : "unexpected end");
    }
    const std::string_view name = text_.substr(start, pos_ - start);
    auto it = vars_.find(name);
    if (it == vars_.end()) return Fail("unknown name " + Quoted(name));
    return it->second;
  }

  std::string_view text_;
  const Variables& vars_;
  size_t pos_ = 0;
};

// `text` with every `{{ expr }}` replaced by its value.
Result<std::string> Render(std::string_view text, const Variables& vars) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find("{{", pos);
    if (open == text.npos) break;
    const size_t close = text.find("}}", open + 2);
    if (close == text.npos) return InvalidArgument("template " + Quoted(text) + ": '{{' without '}}'");
    out += text.substr(pos, open - pos);
    auto value = Expression(text.substr(open + 2, close - open - 2), vars).Evaluate();
    if (!value.ok()) return value.status();
    if (const auto* i = std::get_if<int64_t>(&*value)) {
      out += std::to_string(*i);
    } else {
      out += std::get<std::string>(*value);
    }
    pos = close + 2;
  }
  out += text.substr(pos);
  return out;
}

// A rendered offset or length: a decimal integer, as Python's int() reads it.
Result<int64_t> RenderInteger(const Json& field, const Variables& vars, std::string_view what) {
  if (field.is_number_integer()) return field.get<int64_t>();
  if (!field.is_string())
    return InvalidArgument(std::string(what) + " must be a string or integer, got " + Abbrev(field));
  auto text = Render(field.get<std::string>(), vars);
  if (!text.ok()) return text.status();
  std::string_view digits = *text;
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.front()))) digits.remove_prefix(1);
  while (!digits.empty() && std::isspace(static_cast<unsigned char>(digits.back()))) digits.remove_suffix(1);
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  int64_t out = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return InvalidArgument(std::string(what) + " renders to " + Quoted(*text) + ", not an integer");
  }
  return out;
}

// One `gen` dimension: the values it iterates over.
Result<std::vector<Value>> DimensionValues(const Json& spec, std::string_view name, uint64_t limit) {
  std::vector<Value> values;
  if (spec.is_array()) {
    if (spec.size() > limit) return InvalidArgument("dimension " + Quoted(name) + " lists too many values");
    for (const Json& v : spec) {
      if (v.is_number_integer()) {
        values.emplace_back(v.get<int64_t>());
      } else if (v.is_string()) {
        values.emplace_back(v.get<std::string>());
      } else {
        return InvalidArgument("dimension " + Quoted(name) + ": values must be integers or strings, got " + Abbrev(v));
      }
    }
    return values;
  }
  if (!spec.is_object()) {
    return InvalidArgument("dimension " + Quoted(name) + " must be a list or {\"start\", \"stop\", \"step\"}, got " +
                           Abbrev(spec));
  }
  auto field = [&](const char* key, int64_t fallback) -> Result<int64_t> {
    auto it = spec.find(key);
    if (it == spec.end()) {
      if (fallback == INT64_MIN) return InvalidArgument("dimension " + Quoted(name) + " has no \"stop\"");
      return fallback;
    }
    if (!it->is_number_integer()) {
      return InvalidArgument("dimension " + Quoted(name) + ": \"" + key + "\" must be an integer, got " + Abbrev(*it));
    }
    return it->get<int64_t>();
  };
  auto start = field("start", 0);
  auto stop = field("stop", INT64_MIN);
  auto step = field("step", 1);
  if (!start.ok()) return start.status();
  if (!stop.ok()) return stop.status();
  if (!step.ok()) return step.status();
  if (*step == 0) return InvalidArgument("dimension " + Quoted(name) + ": \"step\" must not be 0");
  // Python's len(range(start, stop, step)), in unsigned arithmetic so hostile bounds
  // cannot overflow; every value lies between start and stop, so stepping cannot either.
  const bool up = *step > 0;
  const uint64_t stride = up ? uint64_t(*step) : uint64_t(0) - uint64_t(*step);
  uint64_t count = 0;
  if (up ? *stop > *start : *start > *stop) {
    const uint64_t span = up ? uint64_t(*stop) - uint64_t(*start) : uint64_t(*start) - uint64_t(*stop);
    count = (span - 1) / stride + 1;
  }
  if (count > limit) {
    return InvalidArgument("dimension " + Quoted(name) + " has too many values (the limit is " + std::to_string(limit) +
                           " references)");
  }
  int64_t v = *start;
  for (uint64_t i = 0; i < count; ++i) {
    values.emplace_back(v);
    if (i + 1 < count) v += *step;
  }
  return values;
}

}  // namespace

Result<int64_t> ReferenceSet::InternTarget(std::string_view url, const std::string& key) {
  if (url.empty()) return InvalidArgument("reference " + Quoted(key) + " has an empty target URL");
  if (url.find('\0') != url.npos) return InvalidArgument("reference " + Quoted(key) + ": target URL contains NUL");
  auto it = target_index_.find(url);
  if (it != target_index_.end()) return it->second;
  const auto index = static_cast<int64_t>(targets_.size());
  targets_.emplace_back(url);
  first_keys_.push_back(key);
  target_index_.emplace(std::string(url), index);
  return index;
}

Status ReferenceSet::AddRange(std::string key, std::string_view url, int64_t offset, int64_t length) {
  if (offset < 0 || length < 0) {
    return InvalidArgument("reference " + Quoted(key) + ": negative " + (offset < 0 ? "offset " : "length ") +
                           std::to_string(offset < 0 ? offset : length));
  }
  int64_t end = 0;
  if (__builtin_add_overflow(offset, length, &end)) {
    return InvalidArgument("reference " + Quoted(key) + ": offset " + std::to_string(offset) + " + length " +
                           std::to_string(length) + " overflows");
  }
  if (refs_.size() >= kMaxReferences && !refs_.contains(key)) {
    return ResourceExhausted("more than " + std::to_string(kMaxReferences) + " references");
  }
  auto target = InternTarget(url, key);
  if (!target.ok()) return target.status();
  refs_[std::move(key)] = Reference{*target, false, static_cast<uint64_t>(offset), static_cast<uint64_t>(length), {}};
  return Status::Ok();
}

Status ReferenceSet::AddWhole(std::string key, std::string_view url) {
  if (refs_.size() >= kMaxReferences && !refs_.contains(key)) {
    return ResourceExhausted("more than " + std::to_string(kMaxReferences) + " references");
  }
  auto target = InternTarget(url, key);
  if (!target.ok()) return target.status();
  refs_[std::move(key)] = Reference{*target, true, 0, 0, {}};
  return Status::Ok();
}

Status ReferenceSet::AddInline(std::string key, std::string bytes) {
  if (refs_.size() >= kMaxReferences && !refs_.contains(key)) {
    return ResourceExhausted("more than " + std::to_string(kMaxReferences) + " references");
  }
  Reference ref;
  ref.data = std::move(bytes);
  refs_[std::move(key)] = std::move(ref);
  return Status::Ok();
}

const Reference* ReferenceSet::Find(std::string_view key) const {
  auto it = refs_.find(key);
  return it == refs_.end() ? nullptr : &it->second;
}

std::vector<std::string> ReferenceSet::Keys(std::string_view prefix) const {
  std::vector<std::string> keys;
  for (auto it = refs_.lower_bound(prefix); it != refs_.end() && it->first.starts_with(prefix); ++it) {
    keys.push_back(it->first);
  }
  return keys;
}

namespace {

// One entry of "refs" (or of a version-0 document): inline text, base64 bytes, a JSON
// object (metadata written unquoted), [url] or [url, offset, length].
Status AddEntry(ReferenceSet& set, const std::string& key, const Json& value, const Variables& templates) {
  auto context = [&](const Status& s) { return s.WithContext("reference " + Quoted(key)); };
  if (key.empty()) return InvalidArgument("a reference has an empty key");
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (std::string_view(text).starts_with("base64:")) {
      auto bytes = DecodeBase64(std::string_view(text).substr(7));
      if (!bytes.ok()) return context(bytes.status());
      return set.AddInline(key, std::move(*bytes));
    }
    return set.AddInline(key, text);
  }
  if (value.is_object()) return set.AddInline(key, value.dump());
  if (!value.is_array() || (value.size() != 1 && value.size() != 3)) {
    return InvalidArgument("reference " + Quoted(key) + " must be a string, [url] or [url, offset, length], got " +
                           Abbrev(value));
  }
  if (value[0].is_null()) {
    return InvalidArgument("reference " + Quoted(key) +
                           " has a null URL (the set's default target), which is not supported");
  }
  if (!value[0].is_string()) {
    return InvalidArgument("reference " + Quoted(key) + ": the URL must be a string, got " + Abbrev(value[0]));
  }
  std::string url = value[0].get<std::string>();
  if (url.find("{{") != url.npos) {
    auto rendered = Render(url, templates);
    if (!rendered.ok()) return context(rendered.status());
    url = std::move(*rendered);
  }
  if (value.size() == 1) return set.AddWhole(key, url);
  for (int i : {1, 2}) {
    if (!value[i].is_number_integer()) {
      return InvalidArgument("reference " + Quoted(key) + ": the " + (i == 1 ? "offset" : "length") +
                             " must be an integer, got " + Abbrev(value[i]));
    }
  }
  if (value[1].is_number_unsigned() && value[1].get<uint64_t>() > uint64_t(INT64_MAX)) {
    return InvalidArgument("reference " + Quoted(key) + ": offset " + Abbrev(value[1]) + " is out of range");
  }
  if (value[2].is_number_unsigned() && value[2].get<uint64_t>() > uint64_t(INT64_MAX)) {
    return InvalidArgument("reference " + Quoted(key) + ": length " + Abbrev(value[2]) + " is out of range");
  }
  return set.AddRange(key, url, value[1].get<int64_t>(), value[2].get<int64_t>());
}

Status ExpandGenerator(ReferenceSet& set, const Json& gen, const Variables& templates) {
  if (!gen.is_object()) return InvalidArgument("a \"gen\" entry must be an object, got " + Abbrev(gen));
  auto text = [&](const char* field) -> Result<std::string> {
    auto it = gen.find(field);
    if (it == gen.end() || !it->is_string()) return InvalidArgument(std::string("\"") + field + "\" must be a string");
    return it->get<std::string>();
  };
  auto key = text("key");
  auto url = text("url");
  if (!key.ok()) return key.status();
  if (!url.ok()) return url.status();
  const bool has_offset = gen.contains("offset");
  if (has_offset != gen.contains("length")) {
    return InvalidArgument("both \"offset\" and \"length\" are needed when either is given");
  }
  auto dims = gen.find("dimensions");
  if (dims == gen.end() || !dims->is_object()) return InvalidArgument("\"dimensions\" must be an object");

  std::vector<std::string> names;
  std::vector<std::vector<Value>> values;
  uint64_t total = 1;
  const uint64_t room = ReferenceSet::kMaxReferences - set.size();
  for (const auto& [name, spec] : dims->items()) {
    auto v = DimensionValues(spec, name, room);
    if (!v.ok()) return v.status();
    if (v->empty()) return Status::Ok();  // an empty product generates nothing
    if (__builtin_mul_overflow(total, v->size(), &total) || total > room) {
      return ResourceExhausted("generates more than " + std::to_string(ReferenceSet::kMaxReferences) + " references");
    }
    names.push_back(name);
    values.push_back(std::move(*v));
  }
  Variables vars = templates;
  std::vector<size_t> at(names.size(), 0);
  for (uint64_t n = 0; n < total; ++n) {
    for (size_t d = 0; d < names.size(); ++d) vars[names[d]] = values[d][at[d]];
    auto k = Render(*key, vars);
    auto u = Render(*url, vars);
    if (!k.ok()) return k.status().WithContext("\"key\"");
    if (!u.ok()) return u.status().WithContext("\"url\"");
    Status added;
    if (has_offset) {
      auto offset = RenderInteger(gen.at("offset"), vars, "\"offset\"");
      auto length = RenderInteger(gen.at("length"), vars, "\"length\"");
      if (!offset.ok()) return offset.status().WithContext("reference " + Quoted(*k));
      if (!length.ok()) return length.status().WithContext("reference " + Quoted(*k));
      added = set.AddRange(std::move(*k), *u, *offset, *length);
    } else {
      added = set.AddWhole(std::move(*k), *u);
    }
    if (!added.ok()) return added;
    // Odometer over the dimensions, last fastest (itertools.product's order).
    for (size_t d = names.size(); d-- > 0;) {
      if (++at[d] < values[d].size()) break;
      at[d] = 0;
    }
  }
  return Status::Ok();
}

Result<Variables> ParseTemplates(const Json& doc) {
  Variables templates;
  auto it = doc.find("templates");
  if (it == doc.end()) return templates;
  if (!it->is_object()) return InvalidArgument("\"templates\" must be an object, got " + Abbrev(*it));
  for (const auto& [name, value] : it->items()) {
    if (!value.is_string()) {
      return InvalidArgument("template " + Quoted(name) + " must be a string, got " + Abbrev(value));
    }
    if (value.get<std::string>().find("{{") != std::string::npos) {
      return InvalidArgument("template " + Quoted(name) +
                             " takes arguments ({{ inside a template), which is not supported");
    }
    templates[name] = value.get<std::string>();
  }
  return templates;
}

}  // namespace

Result<ReferenceSet> ReferenceSet::ParseJson(std::string_view text, std::string_view where) {
  if (JsonNestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return Bad(where, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    std::string_view message = e.what();
    if (auto end = message.find("] "); message.starts_with("[json.") && end != message.npos) {
      message.remove_prefix(end + 2);
    }
    return DataLoss(std::string(where) + ": not valid JSON: " + std::string(message));
  } catch (const std::exception& e) {
    return ResourceExhausted(std::string(where) + ": parsing JSON failed: " + e.what());
  }
  if (!doc.is_object()) return Bad(where, "a reference set must be a JSON object, got " + Abbrev(doc));
  ReferenceSet set;
  try {
    auto version = doc.find("version");
    if (version == doc.end()) {  // version 0: the document is the key -> reference map
      for (const auto& [key, value] : doc.items()) {
        Status s = AddEntry(set, key, value, {});
        if (!s.ok()) return s.WithContext(where);
      }
      return set;
    }
    if (*version != Json(1)) {
      return Bad(where, "reference format version " + Abbrev(*version) + " is not supported (0 and 1 are)");
    }
    auto templates = ParseTemplates(doc);
    if (!templates.ok()) return templates.status().WithContext(where);
    if (auto refs = doc.find("refs"); refs != doc.end()) {
      if (!refs->is_object()) return Bad(where, "\"refs\" must be an object, got " + Abbrev(*refs));
      for (const auto& [key, value] : refs->items()) {
        Status s = AddEntry(set, key, value, *templates);
        if (!s.ok()) return s.WithContext(where);
      }
    }
    if (auto gen = doc.find("gen"); gen != doc.end()) {
      if (!gen->is_array()) return Bad(where, "\"gen\" must be a list, got " + Abbrev(*gen));
      for (size_t i = 0; i < gen->size(); ++i) {
        Status s = ExpandGenerator(set, (*gen)[i], *templates);
        if (!s.ok()) return s.WithContext(std::string(where) + ": \"gen\" entry " + std::to_string(i));
      }
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(where) + ": out of memory building the reference set");
  }
  return set;
}

}  // namespace insitubatch
