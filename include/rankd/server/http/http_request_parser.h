// HttpRequestParser: one HTTP/1.x request from a connection's bytes, parsed by Boost.Beast's
// request parser (RFC 7230: a header's name is a token, so a space before its colon is an error;
// Content-Length is digits only), in two steps: the request line and headers, then the body only
// if the caller goes on. HttpServer checks the route, the API key and the room for the body
// between the two, so that no byte of a body is read before the request is known to be wanted.
// Stricter than Beast where requests could be read two ways: Content-Length given twice (even
// with one value) and any Transfer-Encoding (501: rankd's clients send Content-Length) are
// refused, the target must be a path, the version HTTP/1.0 or 1.1.
//
// Bytes in, no I/O: fuzz/fuzz_http_request.cc runs it on any bytes.
#ifndef RANKD_SERVER_HTTP_REQUEST_PARSER_H_
#define RANKD_SERVER_HTTP_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rankd::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::string query;   // after '?', undecoded; empty when none
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;                                          // Content-Length bytes

  // The first header named `name` (lower-case), or null.
  const std::string* Header(const std::string& name) const;
};

// Request line and headers, at most (beyond: 431).
inline constexpr size_t kMaxHttpHeaderBytes = 16 << 10;

class HttpRequestParser {
 public:
  enum class Step {
    kNeedMore,  // every byte given is consumed; more are needed
    // The request line and headers are in (request() without its body): the caller refuses the
    // request, or calls Parse again to read the body. Reported once per request.
    kHeaders,
    kDone,   // request() is whole; the bytes after it (the next request's) are left unconsumed
    kError,  // error_status() and error_message() are the answer (400, 413, 431, 501)
  };

  // `max_body_bytes`: a larger Content-Length is refused (413) at the headers; 0: no body is.
  explicit HttpRequestParser(int64_t max_body_bytes);
  ~HttpRequestParser();
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Parses from the front of `in`, erasing what it consumed, up to the next step.
  Step Parse(std::string* in);
  // Starts over for the connection's next request.
  void Reset();

  // From kHeaders on (the body from kDone on).
  HttpRequest& request() { return request_; }
  int64_t body_bytes() const { return body_bytes_; }  // Content-Length; 0 when none
  bool keep_alive() const { return keep_alive_; }     // HTTP/1.1 without "Connection: close"

  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  struct Beast;  // Boost.Beast's parser, kept out of this header
  Step CheckHeaders();
  Step Fail(int status, std::string message);

  const int64_t max_body_bytes_;
  std::unique_ptr<Beast> beast_;
  bool headers_reported_ = false;
  HttpRequest request_;
  int64_t body_bytes_ = 0;
  bool keep_alive_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_HTTP_REQUEST_PARSER_H_
