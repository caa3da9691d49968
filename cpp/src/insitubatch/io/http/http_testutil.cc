#include "insitubatch/io/http/http_testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace insitubatch {
namespace {

int BindLoopback(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("ScriptedServer: bind");
    std::abort();
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

ScriptedServer::ScriptedServer(std::deque<std::string> responses) : responses_(std::move(responses)) {
  fd_ = BindLoopback(&port_);
  if (::listen(fd_, 64) != 0) {
    std::perror("ScriptedServer: listen");
    std::abort();
  }
  thread_ = std::thread([this] { Serve(); });
}

ScriptedServer::~ScriptedServer() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
  ::close(fd_);
  thread_.join();
}

std::string ScriptedServer::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::vector<std::string> ScriptedServer::requests() {
  std::lock_guard lock(mutex_);
  return requests_;
}

void ScriptedServer::Serve() {
  for (;;) {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    // A small body (PUT / POST) follows the head: keep it with the request.
    if (const size_t at = request.find("Content-Length: "); at != std::string::npos) {
      const size_t head = request.find("\r\n\r\n") + 4;
      const size_t length = std::strtoul(request.c_str() + at + 16, nullptr, 10);
      while (request.size() < head + length) {
        const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
    }
    std::string response = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
      if (!responses_.empty()) {
        response = responses_.front();
        responses_.pop_front();
      }
    }
    ::send(client, response.data(), response.size(), MSG_NOSIGNAL);
    ::shutdown(client, SHUT_RDWR);
    ::close(client);
  }
}

std::string Reply(int status, const std::string& reason, const std::string& body, const std::string& extra) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra + "\r\n" + body;
}

uint16_t UnusedLoopbackPort() {
  uint16_t port = 0;
  ::close(BindLoopback(&port));
  return port;
}

}  // namespace insitubatch
