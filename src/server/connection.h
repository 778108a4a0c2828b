// Client-disconnect detection for a request in flight. cpp-httplib (0.11) gives handlers no
// access to the connection's socket, so it is found by its address pair among this process's
// sockets; polling it then tells whether the peer has gone (EOF or reset) without reading.
#pragma once

#include <string>

namespace uf::server {

// The socket whose local and peer addresses are the given ones (numeric host strings as httplib
// reports them), or -1. Costs one getsockname/getpeername per open socket of the process.
int FindConnectionSocket(const std::string& local_addr, int local_port,
                         const std::string& remote_addr, int remote_port);

// True when the peer closed or reset the connection. Never blocks; leaves unread data in place.
bool PeerClosed(int fd);

}  // namespace uf::server
