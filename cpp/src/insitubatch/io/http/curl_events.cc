#include "insitubatch/io/http/curl_events.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <string>

#include "insitubatch/util/text.h"

namespace insitubatch {
namespace {

constexpr int kMaxEventsPerWait = 128;

uint32_t EpollEvents(int what) {
  uint32_t events = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= EPOLLIN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= EPOLLOUT;
  return events;
}

}  // namespace

Result<std::unique_ptr<CurlEvents>> CurlEvents::Create(CURLM* multi) {
  // Owned from here: the destructor closes whichever of the two was made.
  std::unique_ptr<CurlEvents> events(
      new CurlEvents(multi, epoll_create1(EPOLL_CLOEXEC), eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = events->wake_fd_;
  if (events->epoll_fd_ < 0 || events->wake_fd_ < 0 ||
      epoll_ctl(events->epoll_fd_, EPOLL_CTL_ADD, events->wake_fd_, &wake) != 0) {
    return ResourceExhausted("the HTTP IO thread's epoll set and wake eventfd: " + ErrnoText(errno));
  }
  curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &CurlEvents::OnSocket);
  curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, events.get());
  curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &CurlEvents::OnTimer);
  curl_multi_setopt(multi, CURLMOPT_TIMERDATA, events.get());
  return events;
}

CurlEvents::CurlEvents(CURLM* multi, int epoll_fd, int wake_fd)
    : multi_(multi), epoll_fd_(epoll_fd), wake_fd_(wake_fd) {}

CurlEvents::~CurlEvents() {
  // libcurl calls back while its handle is cleaned up (closing connections): point it
  // nowhere first.
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, nullptr);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, nullptr);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void CurlEvents::Wake() {
  const uint64_t one = 1;
  // Only a counter at its maximum refuses the add, and that one already wakes the loop.
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
}

int CurlEvents::OnSocket(CURL*, curl_socket_t socket, int what, void* self, void*) {
  auto* events = static_cast<CurlEvents*>(self);
  if (what == CURL_POLL_REMOVE) {
    // The socket may be closed already (then the set dropped it itself): errors ignored.
    if (events->sockets_.erase(socket) != 0) epoll_ctl(events->epoll_fd_, EPOLL_CTL_DEL, socket, nullptr);
    return 0;
  }
  const uint32_t wanted = EpollEvents(what);
  auto [it, added] = events->sockets_.try_emplace(socket, wanted);
  if (!added && it->second == wanted) return 0;
  it->second = wanted;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.fd = socket;
  if (epoll_ctl(events->epoll_fd_, added ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, socket, &ev) != 0) {
    // The set and the map disagree after a close the set saw first (the number reused):
    // the other operation registers it.
    const int err = errno;
    if (err == EEXIST || err == ENOENT) {
      epoll_ctl(events->epoll_fd_, err == EEXIST ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, socket, &ev);
    }
  }
  return 0;
}

int CurlEvents::OnTimer(CURLM*, long timeout_ms, void* self) {
  auto* events = static_cast<CurlEvents*>(self);
  if (timeout_ms < 0) {
    events->timer_.reset();
  } else {
    events->timer_ = Clock::now() + std::chrono::milliseconds(timeout_ms);
  }
  return 0;
}

void CurlEvents::WaitAndAct(std::chrono::milliseconds max_wait) {
  auto wait = max_wait;
  if (timer_) {
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(*timer_ - Clock::now());
    wait = std::clamp(until, std::chrono::milliseconds(0), max_wait);
  }
  std::array<epoll_event, kMaxEventsPerWait> ready;
  const int n = epoll_wait(epoll_fd_, ready.data(), kMaxEventsPerWait, static_cast<int>(wait.count()));
  int running = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = ready[i].data.fd;
    const uint32_t got = ready[i].events;
    if (fd == wake_fd_) {
      uint64_t count;
      [[maybe_unused]] const ssize_t r = read(wake_fd_, &count, sizeof(count));
      continue;
    }
    // A socket an earlier action in this turn closed is no longer libcurl's to be told of.
    if (!sockets_.contains(fd)) continue;
    int mask = 0;
    if ((got & (EPOLLIN | EPOLLHUP)) != 0) mask |= CURL_CSELECT_IN;
    if ((got & EPOLLOUT) != 0) mask |= CURL_CSELECT_OUT;
    if ((got & EPOLLERR) != 0) mask |= CURL_CSELECT_ERR;
    curl_multi_socket_action(multi_, fd, mask, &running);
  }
  if (timer_ && *timer_ <= Clock::now()) {
    timer_.reset();  // libcurl sets the next one from inside the call
    curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
  }
}

}  // namespace insitubatch
