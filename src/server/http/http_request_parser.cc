// One HTTP request from bytes, through Boost.Beast (rankd/server/http/http_request_parser.h).
#include "rankd/server/http/http_request_parser.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rankd::server {
namespace {

namespace http = boost::beast::http;

absl::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

const std::string* HttpRequest::Header(const std::string& name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return &v;
  }
  return nullptr;
}

struct HttpRequestParser::Beast {
  std::optional<http::request_parser<http::string_body>> parser;
};

HttpRequestParser::HttpRequestParser(int64_t max_body_bytes)
    : max_body_bytes_(max_body_bytes), beast_(std::make_unique<Beast>()) {
  Reset();
}

HttpRequestParser::~HttpRequestParser() = default;

void HttpRequestParser::Reset() {
  auto& parser = beast_->parser.emplace();
  parser.header_limit(static_cast<std::uint32_t>(kMaxHttpHeaderBytes));
  // CheckHeaders refuses larger bodies, naming the limit (Boost 1.74's boost::none for "none"
  // compares below every length: it would refuse them all).
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  parser.eager(false);             // stop after the headers: the caller looks at them first
  headers_reported_ = false;
  request_ = HttpRequest();
  body_bytes_ = 0;
  keep_alive_ = false;
  error_status_ = 0;
  error_message_.clear();
}

HttpRequestParser::Step HttpRequestParser::Fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return Step::kError;
}

HttpRequestParser::Step HttpRequestParser::Parse(std::string* in) {
  auto& parser = *beast_->parser;
  while (true) {
    if (parser.is_header_done() && !headers_reported_) {
      headers_reported_ = true;
      parser.eager(true);  // the body, as far as it has come, in one call
      return CheckHeaders();
    }
    if (parser.is_done()) {
      request_.body = std::move(parser.get().body());
      return Step::kDone;
    }
    if (in->empty()) return Step::kNeedMore;
    boost::beast::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(in->data(), in->size()), ec);
    in->erase(0, used);
    if (ec == http::error::need_more) return Step::kNeedMore;
    if (ec == http::error::header_limit) {
      return Fail(431,
                  absl::StrCat("request line and headers exceed ", kMaxHttpHeaderBytes, " bytes"));
    }
    if (ec == http::error::bad_method || ec == http::error::bad_target ||
        ec == http::error::bad_version) {
      return Fail(400, "malformed request line");
    }
    if (ec == http::error::bad_field || ec == http::error::bad_value ||
        ec == http::error::bad_obs_fold) {
      return Fail(400, "malformed header line (a name, then ':' at once, then the value)");
    }
    if (ec == http::error::bad_content_length) {
      return Fail(400, "malformed Content-Length (digits only, one value)");
    }
    if (ec) return Fail(400, absl::StrCat("malformed request: ", ec.message()));
  }
}

HttpRequestParser::Step HttpRequestParser::CheckHeaders() {
  const auto& message = beast_->parser->get();
  const absl::string_view target = View(message.target());
  if (target.empty() || target[0] != '/' || (message.version() != 10 && message.version() != 11)) {
    return Fail(400, "malformed request line");
  }
  request_.method = std::string(View(message.method_string()));
  const size_t question = target.find('?');
  request_.path = std::string(target.substr(0, question));
  if (question != absl::string_view::npos)
    request_.query = std::string(target.substr(question + 1));
  for (const auto& field : message) {
    request_.headers.emplace_back(absl::AsciiStrToLower(View(field.name_string())),
                                  std::string(View(field.value())));
  }
  keep_alive_ = message.version() == 11 && message.keep_alive();
  if (message.count(http::field::transfer_encoding) > 0) {
    return Fail(501, "Transfer-Encoding is not supported: send Content-Length");
  }
  // Beast takes repeats of one value ("5, 5", or two such headers): a proxy in front may have
  // read them otherwise, so they are refused.
  const auto length = message.find(http::field::content_length);
  if (length == message.end()) return Step::kHeaders;
  if (message.count(http::field::content_length) > 1 ||
      View(length->value()).find(',') != absl::string_view::npos) {
    return Fail(400, "Content-Length given more than once");
  }
  const uint64_t bytes = *beast_->parser->content_length();
  if (bytes > static_cast<uint64_t>(max_body_bytes_)) {
    return Fail(413, max_body_bytes_ == 0
                         ? std::string("this port takes no request bodies")
                         : absl::StrCat("body of ", bytes, " bytes exceeds the limit of ",
                                        max_body_bytes_, " bytes"));
  }
  body_bytes_ = static_cast<int64_t>(bytes);
  return Step::kHeaders;
}

}  // namespace rankd::server
