// This file tests that a base-service peer tag without a value is cut like
// any key the agent's list lacks.

package relay

import (
	"slices"
	"testing"
)

// TestKeepPeerKeysBaseServiceNeedsValue: the base-service exception keeps
// a service, so a _dd.base_service tag without one ("_dd.base_service:",
// or the bare key) is cut like any key not in the list, as the SDK's
// table (aggregate.keptPeers) and the agent (baseService != "") do.
func TestKeepPeerKeysBaseServiceNeedsValue(t *testing.T) {
	keys := map[string]struct{}{"peer.service": {}}
	for _, tc := range []struct {
		kind string
		tags []string
		want []string
	}{
		{"internal", []string{"_dd.base_service:web"}, []string{"_dd.base_service:web"}},
		{"internal", []string{"_dd.base_service:"}, []string{}},
		{"", []string{"_dd.base_service"}, []string{}},
		{"client", []string{"_dd.base_service:web", "peer.service:db"}, []string{"peer.service:db"}},
	} {
		got := keepPeerKeys(slices.Clone(tc.tags), keys, tc.kind)
		if !slices.Equal(got, tc.want) {
			t.Errorf("kind %q, tags %q: kept %q, want %q", tc.kind, tc.tags, got, tc.want)
		}
	}
}
