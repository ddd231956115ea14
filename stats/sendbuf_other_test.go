//go:build !unix

// This file stands in for shrinkSendBuffer where there is no Unix socket:
// the tests that need it skip.

package stats

import (
	"testing"

	"github.com/spanstats/spanstats/internal/dgram"
)

func shrinkSendBuffer(t *testing.T, _ *dgram.Sender, _ int) {
	t.Skip("no Unix datagram socket to shrink")
}
