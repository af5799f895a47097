// HttpServer: the front end's small HTTP/1.1 server (/metrics, /healthz, /readyz; JSON POST
// bodies too), one thread around epoll, so that idle or slow connections cost a file descriptor
// each and never a thread: a request must arrive whole within the read timeout of the
// connection's opening (or of its previous answer), a keep-alive connection serves a bounded
// number of requests, and beyond the connection cap a new connection closes the one idle longest.
// An answer that ends its connection shuts the write side first and drops what the client still
// sends until it closes too (within the read timeout), so that the client reads the answer.
//
// Requests are parsed by HttpRequestParser (Boost.Beast's parser). A body is read only once its
// request is known to be wanted: after its headers, the route, the route's HeaderCheck (the API
// key) and the room for it under Options::max_buffered_bytes are checked, and a refusal is
// answered at once, the body unread (the connection then closes); `Expect: 100-continue` is
// answered `100 Continue` only then. The thread only moves bytes: a handler that has real work
// to do (parsing a body) hands it to threads of its own.
#ifndef RANKD_SERVER_HTTP_SERVER_H_
#define RANKD_SERVER_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rankd/server/http/http_request_parser.h"

namespace rankd::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  // More header lines (name, value), written as given: values must hold no CR or LF.
  std::vector<std::pair<std::string, std::string>> headers = {};

  // The value of the header named `name` (ASCII case ignored), or null.
  const std::string* Header(absl::string_view name) const;
};

// Adds headers to an answer (CORS, Retry-After, ...) from its request's line and headers (never
// its body): run on the server's thread for every answer, the server's own errors too. A request
// that could not be parsed may come with only part of its headers.
using HttpAnswerFn = std::function<void(const HttpRequest& request, HttpResponse* response)>;

// The server's own error answers (400 malformed, 404, 405, 413, 431, 501, 503): from the status
// and a message naming what was wrong.
using HttpErrorFn = std::function<HttpResponse(int status, std::string message)>;

// Threads: Handle before Start; Start and Stop on one thread; handlers and header checks run on
// the server's thread and must not block; a Reply may be called (once) from any thread, also
// after Stop (then it is dropped).
class HttpServer {
 public:
  struct Options {
    int max_connections = 256;  // open at once; one more closes the one idle longest
    // A request must arrive whole within it (counted from the connection's opening or its
    // previous answer, not refreshed by each byte); an answer must be taken within it too.
    std::chrono::milliseconds read_timeout{10000};
    int64_t max_body_bytes = 1 << 20;  // larger bodies get 413; 0: no body is taken
    // The body bytes of the requests not yet answered, all connections together: a body that
    // would take more gets 503 at its headers (server.http_max_buffered_bytes).
    int64_t max_buffered_bytes = std::numeric_limits<int64_t>::max();
    int max_requests_per_connection = 100;
    std::string name = "http";  // for messages: the config key of the address
    // Makes the server's own error answers (runs on the server's thread); null: plain text.
    HttpErrorFn error_response = nullptr;
    HttpAnswerFn finish_answer = nullptr;  // null: answers go as made
  };
  // A handler answers by calling its Reply once, at once or later (the connection waits, with no
  // read timeout, meanwhile: a handler bounds its own work).
  using Reply = std::function<void(HttpResponse)>;
  using Handler = std::function<void(HttpRequest, Reply)>;
  // Looks at a request's line and headers (its body not read yet): an answer refuses it at once,
  // nullopt lets its body be read.
  using HeaderCheck = std::function<std::optional<HttpResponse>(const HttpRequest&)>;

  explicit HttpServer(Options options);
  ~HttpServer();  // Stop()

  void Handle(const std::string& method, const std::string& path, Handler handler,
              HeaderCheck check = nullptr);
  // Listens on `address` ("host:port", "[v6]:port", ":port" for all interfaces; port 0 picks a
  // free one) and starts serving.
  absl::Status Start(const std::string& address);
  // Closes every connection; answers still to come are dropped.
  void Stop();
  int port() const { return port_; }

 private:
  struct Route {
    std::string method, path;
    Handler handler;
    HeaderCheck check;
  };
  struct Connection;
  struct Replies;  // answers handed over to the server's thread

  void Loop();
  void Accept();
  void OnReadable(Connection& c);
  void OnWritable(Connection& c);
  void OnDraining(Connection& c);
  // Parses what `c` holds: refuses, or dispatches a whole request.
  void Parse(Connection& c);
  // After a request's headers: false when it was refused (answered).
  bool AcceptHeaders(Connection& c);
  void Respond(Connection& c, HttpResponse response);
  HttpResponse Error(int status, std::string message) const;
  void Close(uint64_t id);
  void SetInterest(const Connection& c, uint32_t events);
  void TakeReplies();
  bool EvictIdlest();

  const Options options_;
  std::vector<Route> routes_;
  std::shared_ptr<Replies> replies_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int port_ = 0;
  uint64_t next_id_ = 2;  // 0: the listening socket, 1: the wake-up eventfd
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> connections_;
  int64_t buffered_bytes_ = 0;  // the connections' `reserved`, summed
  std::thread thread_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_HTTP_SERVER_H_
