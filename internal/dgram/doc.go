// Package dgram owns the datagram sockets between the SDK and statsrelay: the
// relay's receiving sockets (a Unix datagram socket and a UDP socket) read in
// batches, and the SDK's non-blocking sending socket. It knows nothing of the
// payload format (package writer's datagram envelope and payload); a
// datagram is a byte slice and what the kernel said about it.
//
// Concurrency: Conn and Sender are safe for concurrent use. A Batch belongs to
// one goroutine at a time: ReadBatch fills it, and its datagrams stay valid
// until the next ReadBatch into the same Batch.
//
// Design: on Linux, ReadBatch is one recvmmsg(2) into a Batch of buffers one
// byte longer than the datagram limit, so an oversized datagram is flagged
// (Datagram.Truncated) instead of cut silently. The call runs inside the
// socket's syscall.RawConn, so a reader with nothing to read is parked by the
// Go netpoller and Close wakes it with net.ErrClosed. Each slot carries its
// control message: the sender's credentials on a Unix socket (SO_PASSCRED,
// giving Datagram.PID) and the kernel's cumulative drop counter on UDP
// (SO_RXQ_OVFL), which Conn folds into an exact running total, KernelDrops,
// along with the same counter read from the socket (SO_MEMINFO) when asked
// and at Close, for the drops no later datagram carries.
// Sender writes with MSG_DONTWAIT and answers ErrWouldBlock instead of
// waiting; a Unix Sender addresses every datagram to the socket path, so it
// reaches a relay that restarted after the Sender was dialled. A relay whose
// socket file is removed while it runs (rebind.go) sees it with
// Conn.CheckFile and binds again with RebindUnixgram, which never replaces a
// file another process put at the path. ListenUDPShared lets a relay
// taking over from another bind its UDP port while the other still runs
// (SO_REUSEPORT). Elsewhere (dgram_other.go) ReadBatch reads one datagram
// per call, and there are no credentials, no kernel drop counts and no
// shared UDP port.
package dgram
