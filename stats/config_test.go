package stats

import (
	"errors"
	"testing"
	"time"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{AgentURL: "ftp://x"},
		{AgentURL: "http://"},
		{AgentURL: "unix://"},
		{InboxSize: -1},
		{ShedYieldEvery: -8},
		{MaxPayloadBytes: 100},
		{BucketInterval: -time.Second},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v) = %v, want ErrBadConfig", c, err)
		}
	}
}
