// This file holds TestMain, which fails the package's tests if they leave
// a goroutine running.

package aggregate

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutine, but its tests do (a watchdog in
// TestBudgetHugeLimitIsMaxLimit): one left running is a leak to report.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
