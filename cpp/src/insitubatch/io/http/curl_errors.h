#pragma once

// What a failed libcurl transfer means: whether another attempt may succeed, and the
// failure in words a user can act on. Pure functions over curl's codes and the easy handle's
// timings, kept apart from the transport's IO loop.

#include <curl/curl.h>

#include <string>

#include "insitubatch/io/http/ca_bundle.h"
#include "insitubatch/io/http/curl_transport.h"

namespace insitubatch {

// curl errors worth another attempt: the network or the server hiccuped.
bool IsTransientCurlError(CURLcode code);

// A failed transfer in words a user can act on: which phase failed (DNS, connect, TLS,
// waiting for the reply, mid-body) and after how long. `connect_failure`: the attempt
// never reached a server.
std::string DescribeTransferFailure(CURLcode code, const char* errbuf, CURL* easy, double attempt_s,
                                    const TransportOptions& o, const CaBundle& ca, bool* connect_failure);

// "0.25 s" / "12.5 s".
std::string SecondsText(double s);

}  // namespace insitubatch
