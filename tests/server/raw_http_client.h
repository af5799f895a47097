// RawHttpClient: one TCP connection to 127.0.0.1 that sends bytes as they are given and reads
// answers as they come, for the HTTP tests that must send what a well-behaved client would not
// (a body cut short, odd headers, pipelined requests) and see exactly what comes back. Every wait,
// sending included, is bounded by `wait`: a liveness bound, never a speed assertion.
#ifndef RANKD_TESTS_SERVER_RAW_HTTP_CLIENT_H_
#define RANKD_TESTS_SERVER_RAW_HTTP_CLIENT_H_

#include <chrono>
#include <string>

namespace rankd::testing {

class RawHttpClient {
 public:
  explicit RawHttpClient(int port, std::chrono::milliseconds wait = std::chrono::seconds(30));
  ~RawHttpClient();
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  bool connected() const { return connected_; }
  // False when not all of `bytes` could be sent within the wait (or the connection failed).
  bool Send(const std::string& bytes);
  // One answer, headers and Content-Length body (a 100 Continue is one too); empty when the
  // server closed the connection first or none came within the wait.
  std::string ReadResponse();
  // True once the server closed the connection (within the wait).
  bool WaitClosed();

 private:
  bool ReadMore(std::string* in);

  const std::chrono::milliseconds wait_;
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffered_;  // read past the last answer
};

}  // namespace rankd::testing

#endif  // RANKD_TESTS_SERVER_RAW_HTTP_CLIENT_H_
