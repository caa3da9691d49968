#pragma once

// Test helper: a loopback HTTP server that answers each connection with the next scripted
// raw response (then closes it) and records the requests it was sent -- just enough
// HTTP/1.1 to drive the curl transport and the stores built on it in unit tests.

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace insitubatch {

class ScriptedServer {
 public:
  // Once the script runs out, every request gets "500 Internal Server Error".
  explicit ScriptedServer(std::deque<std::string> responses);
  ~ScriptedServer();
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string url() const;  // http://127.0.0.1:<port>
  uint16_t port() const { return port_; }
  std::vector<std::string> requests();  // raw requests (head and any body), in order

 private:
  void Serve();

  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::deque<std::string> responses_;
  std::vector<std::string> requests_;
};

// "HTTP/1.1 <status> <reason>" with Content-Length, Connection: close, `extra` header
// lines ("Name: value\r\n" each) and `body`.
std::string Reply(int status, const std::string& reason, const std::string& body, const std::string& extra = "");

// A port on 127.0.0.1 that nothing listens on (bound, read, closed).
uint16_t UnusedLoopbackPort();

}  // namespace insitubatch
