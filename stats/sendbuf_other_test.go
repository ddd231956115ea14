//go:build !unix

// This file stands in for shrinkSendBuffer and sendBuffer where there is
// no Unix socket: the tests that need them skip.

package stats

import (
	"testing"

	"github.com/spanstats/spanstats/internal/dgram"
)

func shrinkSendBuffer(t *testing.T, _ *dgram.Sender, _ int) {
	t.Skip("no Unix datagram socket to shrink")
}

func sendBuffer(t *testing.T, _ *dgram.Sender) int {
	t.Skip("no Unix datagram socket to read")
	return 0
}
