// Fuzz target: the bytes of one HTTP connection through the front end's request parser
// (HttpRequestParser: Boost.Beast's, and rankd's checks on top), given in pieces of the size the
// first byte picks, request after request as a keep-alive connection reads them. Each request is
// parsed whole within the limits or refused with one of the server's error statuses; never a
// crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rankd/server/http/http_request_parser.h"

namespace {

constexpr int64_t kMaxBody = 4096;

void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using Step = rankd::server::HttpRequestParser::Step;
  if (size == 0) return 0;
  const size_t piece = data[0] % 64 + 1;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  rankd::server::HttpRequestParser parser(kMaxBody);
  std::string in;
  size_t at = 0;
  while (true) {
    if (at < bytes.size()) {
      in.append(bytes, at, piece);
      at += piece;
    }
    switch (parser.Parse(&in)) {
      case Step::kNeedMore:
        if (at >= bytes.size()) return 0;
        break;
      case Step::kHeaders:
        Require(parser.body_bytes() >= 0 && parser.body_bytes() <= kMaxBody);
        Require(!parser.request().path.empty() && parser.request().path[0] == '/');
        break;
      case Step::kDone:
        Require(static_cast<int64_t>(parser.request().body.size()) == parser.body_bytes());
        parser.Reset();
        break;
      case Step::kError: {
        const int s = parser.error_status();
        Require(s == 400 || s == 413 || s == 431 || s == 501);
        return 0;
      }
    }
  }
}
