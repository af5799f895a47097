// HttpServer: the front end's small HTTP/1.1 server (/metrics, /healthz, /readyz; JSON POST
// bodies too), one thread around epoll, so that idle or slow connections cost a file descriptor
// each and never a thread: a request must arrive whole within the read timeout of the
// connection's opening (or of its previous answer), a keep-alive connection serves a bounded
// number of requests, and beyond the connection cap a new connection closes the one idle longest.
// An answer that ends its connection shuts the write side first and drops what the client still
// sends until it closes too (within the read timeout), so that the client reads the answer.
#ifndef RANKD_SERVER_HTTP_SERVER_H_
#define RANKD_SERVER_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

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

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

// The server's own error answers (400 malformed, 404, 405, 413, 431, 501): from the status and a
// message naming what was wrong.
using HttpErrorFn = std::function<HttpResponse(int status, std::string message)>;

// Threads: Handle before Start; Start and Stop on one thread; handlers run on the server's thread
// and must not block; a Reply may be called (once) from any thread, also after Stop (then it is
// dropped).
class HttpServer {
 public:
  struct Options {
    int max_connections = 256;  // open at once; one more closes the one idle longest
    // A request must arrive whole within it (counted from the connection's opening or its
    // previous answer, not refreshed by each byte); an answer must be taken within it too.
    std::chrono::milliseconds read_timeout{10000};
    int64_t max_body_bytes = 1 << 20;  // larger bodies get 413
    int max_requests_per_connection = 100;
    std::string name = "http";  // for messages: the config key of the address
    // Makes the server's own error answers (runs on the server's thread); null: plain text.
    HttpErrorFn error_response = nullptr;
  };
  // A handler answers by calling its Reply once, at once or later (the connection waits, with no
  // read timeout, meanwhile: a handler bounds its own work).
  using Reply = std::function<void(HttpResponse)>;
  using Handler = std::function<void(const HttpRequest&, Reply)>;

  explicit HttpServer(Options options);
  ~HttpServer();  // Stop()

  void Handle(const std::string& method, const std::string& path, Handler handler);
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
  };
  struct Connection;
  struct Replies;  // answers handed over to the server's thread

  void Loop();
  void Accept();
  void OnReadable(Connection& c);
  void OnWritable(Connection& c);
  void OnDraining(Connection& c);
  // Parses and dispatches the next request buffered in `c` if it is whole.
  void MaybeDispatch(Connection& c);
  void Respond(Connection& c, const HttpResponse& response);
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
  std::thread thread_;
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_HTTP_SERVER_H_
