#include "server/reply_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "server/api_format.h"

namespace uf::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr const char* kBlank = " \t\r\n";

// Harmony's tags. A body ends at the first of these; <|start|> and <|channel|> also begin the
// next header (a model that left out <|end|>), <|return|> and <|call|> appear only when they
// are not end-of-generation tokens (ignore_eos).
constexpr std::string_view kMessage = "<|message|>", kEnd = "<|end|>", kStart = "<|start|>",
                           kChannel = "<|channel|>", kReturn = "<|return|>", kCall = "<|call|>";
constexpr std::string_view kBodyEnds[] = {kEnd, kStart, kChannel, kReturn, kCall};
// A header longer than this without <|message|> is not a header: its text is content.
constexpr size_t kMaxHeader = 256;

// Length of the longest proper prefix of `tag` that `text` ends with.
size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k) {
    if (text.ends_with(tag.substr(0, k))) return k;
  }
  return 0;
}

// The word after `key` in a harmony header ("analysis" after <|channel|>, "functions.f" after
// "to="): up to white space or the next tag.
std::string HeaderField(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view rest = header.substr(at + key.size());
  const size_t end = rest.find_first_of(" \t\r\n<");
  return std::string(rest.substr(0, end));
}

}  // namespace

ReasoningFormat DetectReasoningFormat(std::string_view source) {
  if (source.find("<|channel|>") != std::string_view::npos &&
      source.find("<|message|>") != std::string_view::npos) {
    return ReasoningFormat::kHarmony;
  }
  return ReasoningFormat::kThink;
}

bool PromptOpensThinking(std::string_view prompt) {
  // At the very end (white space aside): a <think> in a message's text is not the template's.
  const size_t last = prompt.find_last_not_of(kBlank);
  return last != std::string_view::npos && prompt.substr(0, last + 1).ends_with(kThinkOpen);
}

ReplyParser::ReplyParser(ReplyFormat format)
    : format_(std::move(format)),
      phase_(format_.reasoning == ReasoningFormat::kHarmony ? Phase::kHeader
             : format_.reasoning == ReasoningFormat::kThink ? Phase::kStart
                                                            : Phase::kAnswer) {}

void ReplyParser::EmitReasoning(std::string_view text, ReplyPiece* out) {
  if (strip_reasoning_) {
    const size_t i = text.find_first_not_of(kBlank);
    if (i == std::string_view::npos) return;
    text.remove_prefix(i);
    strip_reasoning_ = false;
  }
  if (text.empty()) return;
  // Trailing white space waits for what follows: dropped before </think> or <|end|>.
  const size_t last = text.find_last_not_of(kBlank);
  if (last == std::string_view::npos) {
    reasoning_blank_.append(text);
    return;
  }
  out->reasoning += reasoning_blank_;
  out->reasoning.append(text.substr(0, last + 1));
  reasoning_blank_.assign(text.substr(last + 1));
}

void ReplyParser::EmitContent(std::string_view text, ReplyPiece* out) {
  if (text.empty()) return;
  answer_started_ = true;
  if (!format_.parse_tools || format_.reasoning == ReasoningFormat::kHarmony) {
    out->content.append(text);
    return;
  }
  held_.append(text);
  if (in_call_) return;
  const std::string_view pending = std::string_view(held_).substr(sent_);
  const size_t n = StreamableContent(pending, format_.tool_format, sent_ == 0, &in_call_);
  out->content.append(pending.substr(0, n));
  sent_ += n;
}

void ReplyParser::PushThink(ReplyPiece* out) {
  for (;;) {
    if (phase_ == Phase::kStart) {
      const size_t i = buf_.find_first_not_of(kBlank);
      if (i == std::string::npos) return;  // blank so far: nothing is known yet
      const std::string_view t = std::string_view(buf_).substr(i);
      if (t.size() < kThinkOpen.size() && kThinkOpen.starts_with(t)) return;
      phase_ = Phase::kThinking;
      if (t.starts_with(kThinkOpen)) {
        buf_.erase(0, i + kThinkOpen.size());
      } else if (!format_.starts_thinking) {
        phase_ = Phase::kAnswer;
        continue;
      }
      had_reasoning_ = true;
      strip_reasoning_ = true;
    } else if (phase_ == Phase::kThinking) {
      const size_t close = buf_.find(kThinkClose);
      if (close != std::string::npos) {
        EmitReasoning(std::string_view(buf_).substr(0, close), out);
        reasoning_blank_.clear();
        buf_.erase(0, close + kThinkClose.size());
        phase_ = Phase::kAnswer;
        strip_answer_ = true;
        continue;
      }
      const size_t keep = PartialTagAtEnd(buf_, kThinkClose);
      EmitReasoning(std::string_view(buf_).substr(0, buf_.size() - keep), out);
      buf_.erase(0, buf_.size() - keep);
      return;
    } else {
      if (strip_answer_) {
        const size_t i = buf_.find_first_not_of(kBlank);
        if (i == std::string::npos) {
          buf_.clear();
          return;
        }
        buf_.erase(0, i);
        strip_answer_ = false;
      }
      EmitContent(buf_, out);
      buf_.clear();
      return;
    }
  }
}

void ReplyParser::OpenBody(std::string_view header) {
  const std::string channel = HeaderField(header, kChannel);
  const std::string recipient = HeaderField(header, "to=");
  constexpr std::string_view kFunctions = "functions.";
  if (recipient.starts_with(kFunctions)) {
    body_ = Body::kCall;
    call_name_ = recipient.substr(kFunctions.size());
    call_args_.clear();
    answer_started_ = true;
  } else if (!recipient.empty() && recipient != "assistant") {
    body_ = Body::kDrop;  // a built-in tool (browser, python) this server does not run
  } else if (channel == "analysis") {
    body_ = Body::kReasoning;
    had_reasoning_ = true;
    strip_reasoning_ = true;
  } else {
    body_ = Body::kContent;  // final, or a commentary preamble to the user
  }
}

void ReplyParser::EmitBody(std::string_view text, ReplyPiece* out) {
  switch (body_) {
    case Body::kReasoning:
      EmitReasoning(text, out);
      break;
    case Body::kContent:
      EmitContent(text, out);
      break;
    case Body::kCall:
      call_args_.append(text);
      break;
    case Body::kDrop:
      break;
  }
}

void ReplyParser::CloseBody() {
  if (body_ == Body::kReasoning) reasoning_blank_.clear();
  if (body_ == Body::kCall && format_.parse_tools && format_.tool_names.count(call_name_)) {
    const nlohmann::json args = nlohmann::json::parse(call_args_, nullptr, false);
    if (args.is_object()) calls_.push_back({RandomId("call_"), call_name_, args.dump()});
  }
  body_ = Body::kContent;
  call_args_.clear();
}

void ReplyParser::PushHarmony(ReplyPiece* out) {
  for (;;) {
    if (buf_.empty()) return;
    if (phase_ == Phase::kHeader) {
      std::vector<std::string_view> openers = {kStart, kChannel};
      if (first_message_) {
        // The generation prompt ends with <|start|>assistant: the reply may name its recipient.
        openers.push_back(" to=");
        openers.push_back("to=");
      }
      bool header = false, maybe = false;
      for (std::string_view o : openers) {
        header = header || buf_.starts_with(o);
        maybe = maybe || (buf_.size() < o.size() && o.starts_with(buf_));
      }
      const size_t at = header ? buf_.find(kMessage) : std::string::npos;
      if (at != std::string::npos && at <= kMaxHeader) {
        OpenBody(std::string_view(buf_).substr(0, at));
        buf_.erase(0, at + kMessage.size());
        phase_ = Phase::kBody;
        first_message_ = false;
        continue;
      }
      if ((header || maybe) && buf_.size() <= kMaxHeader) return;  // wait for the rest
      // Not a header: plain text, its opening tag included.
      body_ = Body::kContent;
      phase_ = Phase::kBody;
      first_message_ = false;
      plain_opener_ = header;
      continue;
    }
    size_t end = std::string::npos;
    std::string_view tag;
    for (std::string_view t : kBodyEnds) {
      const size_t at = buf_.find(t, plain_opener_ ? 1 : 0);
      if (at < end) {
        end = at;
        tag = t;
      }
    }
    plain_opener_ = false;
    if (end != std::string::npos) {
      EmitBody(std::string_view(buf_).substr(0, end), out);
      CloseBody();
      // <|start|> and <|channel|> begin the next header; the others end this message.
      const bool opens = tag == kStart || tag == kChannel;
      buf_.erase(0, end + (opens ? 0 : tag.size()));
      phase_ = Phase::kHeader;
      continue;
    }
    size_t keep = 0;
    for (std::string_view t : kBodyEnds) keep = std::max(keep, PartialTagAtEnd(buf_, t));
    EmitBody(std::string_view(buf_).substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

ReplyPiece ReplyParser::Push(std::string_view text, int64_t tokens) {
  ReplyPiece out;
  const bool was_answering = answer_started_;
  buf_.append(text);
  if (format_.reasoning == ReasoningFormat::kHarmony) {
    PushHarmony(&out);
  } else {
    PushThink(&out);
  }
  if (!had_reasoning_ && !answer_started_) {
    undecided_tokens_ += tokens;  // "<th": reasoning, if "ink>" follows
  } else {
    if (had_reasoning_ && !was_answering) {
      // The tokens of the event that began the answer are the answer's.
      reasoning_tokens_ += undecided_tokens_ + (answer_started_ ? 0 : tokens);
    }
    undecided_tokens_ = 0;
  }
  return out;
}

ReplyEnd ReplyParser::Finish() {
  ReplyPiece rest;
  if (format_.reasoning == ReasoningFormat::kHarmony) {
    if (phase_ == Phase::kBody) {
      EmitBody(buf_, &rest);
      CloseBody();
    }
    // An unfinished header (cut off by max_tokens) says nothing yet: dropped.
  } else if (phase_ == Phase::kStart) {
    if (format_.starts_thinking) {
      had_reasoning_ = true;
      strip_reasoning_ = true;
      EmitReasoning(buf_, &rest);
    } else {
      EmitContent(buf_, &rest);
    }
  } else if (phase_ == Phase::kThinking) {
    EmitReasoning(buf_, &rest);
  } else if (!strip_answer_) {
    EmitContent(buf_, &rest);
  }
  buf_.clear();
  reasoning_blank_.clear();
  if (had_reasoning_ && !answer_started_) reasoning_tokens_ += undecided_tokens_;
  undecided_tokens_ = 0;
  ReplyEnd end;
  end.reasoning = std::move(rest.reasoning);
  end.content = std::move(rest.content);
  end.calls = std::move(calls_);
  calls_.clear();
  if (sent_ < held_.size()) {
    const std::string tail = held_.substr(sent_);
    ParsedReply reply = ParseToolCalls(tail, format_.tool_format, format_.tool_names);
    end.content += reply.content;
    for (ToolCall& c : reply.calls) end.calls.push_back(std::move(c));
    sent_ = held_.size();
  }
  return end;
}

ReplyEnd ReplyParser::Parse(const ReplyFormat& format, std::string_view text) {
  ReplyParser p(format);
  ReplyPiece piece = p.Push(text);
  ReplyEnd end = p.Finish();
  end.reasoning = piece.reasoning + end.reasoning;
  end.content = piece.content + end.content;
  if (!end.calls.empty()) {
    const size_t first = end.content.find_first_not_of(kBlank);
    if (first == std::string::npos) {
      end.content.clear();
    } else {
      end.content = end.content.substr(first, end.content.find_last_not_of(kBlank) - first + 1);
    }
  }
  return end;
}

}  // namespace uf::server
